"""``lightning-agents rollout``: K multi-turn tool-use episodes per problem of a task, from any HF model.

The output is a JSON list in the OpenAI/tau-bench rollout format, the input of
``lightning-agents curate`` and of ``TopoCurateDataModule`` (``configs/topocurate_sft.yaml``).
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any, Literal

__all__ = ["RolloutCommand"]


class RolloutCommand:
    """Mixin that adds the ``rollout`` subcommand to the trainer."""

    def rollout(
        self,
        model: Any = None,
        datamodule: Any = None,
        policy: str = "embedded:student",
        task: str = "embedded:calculator",
        task_path: str | None = None,
        output: str = "rollouts.json",
        split: Literal["train", "val", "test"] = "train",
        num_tasks: int = 64,
        trials: int = 4,
        temperature: float = 1.0,
        top_p: float = 1.0,
        max_new_tokens: int = 48,
        max_turns: int = 3,
        batch_size: int = 64,
        seed: int = 0,
        dtype: Literal["float32", "bfloat16", "float16"] = "float32",
        device: str | None = None,
        progress: bool = True,
    ) -> str:
        """Run a model for several trials per problem of a tool-using task and write the rollouts.

        Args:
            model: unused (the policy is named by ``policy``).
            datamodule: unused.
            policy: the model to run: a local path, a hub id, or ``embedded:student`` /
                ``embedded:teacher``.
            task: the task: a class path of a :class:`~lightning_agents.tasks.Task` subclass (a
                user's own, e.g. ``my_pkg.tasks.MyWorldTask``) or a short name:
                ``embedded:calculator`` (arithmetic with a calculator tool) or
                ``embedded:agent_world`` (the stateful shop world).
            task_path: data path handed to file-backed tasks (``init_args.path``).
            output: the rollout file to write (a JSON list, written atomically; an existing file is replaced).
            split: which split of the task to draw problems from.
            num_tasks: number of problems (a seeded sample of the split; the embedded tasks' first ones).
            trials: episodes per problem (K); they differ by sampling.
            temperature: sampling temperature (above 0: trials must be able to differ).
            top_p: nucleus sampling mass.
            max_new_tokens: tokens per model turn.
            max_turns: model turns per episode.
            batch_size: conversations per generate call.
            seed: torch seed, so the same command writes the same rollouts.
            dtype: model weight dtype.
            device: device to run on (default: CUDA when available, else CPU).
            progress: show a progress bar.

        Returns:
            The path written.
        """
        import torch

        from lightning_agents.atomic import atomic_write_text
        from lightning_agents.commands.outputs import check_output_file
        from lightning_agents.models import load_model_and_tokenizer
        from lightning_agents.rollout.agent_loop import run_agent_loop
        from lightning_agents.rollout.hf_engine import HFGenerationEngine, SamplingConfig
        from lightning_agents.tasks import load_task

        if temperature <= 0:
            raise ValueError(f"temperature must be above 0 so that trials differ, got {temperature}")
        counts = (
            ("num_tasks", num_tasks),
            ("trials", trials),
            ("max_new_tokens", max_new_tokens),
            ("max_turns", max_turns),
            ("batch_size", batch_size),
        )
        for name, value in counts:
            if value < 1:
                raise ValueError(f"{name} must be >= 1, got {value}")
        if not 0 < top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {top_p}")
        check_output_file("output", output)  # before the model loads and the episodes run
        the_task = load_task(task, path=task_path)
        device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        torch.manual_seed(seed)
        net, tokenizer = load_model_and_tokenizer(policy, dtype=dtype, device=device, padding_side="left")
        engine = HFGenerationEngine(net, tokenizer)
        tasks = the_task.get_problems(split, n=num_tasks)
        bar = None
        if progress:
            from tqdm.auto import tqdm

            # Total is an upper bound: episodes that answer early need fewer turns.
            bar = tqdm(total=len(tasks) * trials * max_turns, desc="rollout: model turns", unit="turn", file=sys.stderr)
        try:
            rollouts = run_agent_loop(
                engine,
                tasks,
                trials=trials,
                task=the_task,
                sampling=SamplingConfig(
                    max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p, do_sample=True
                ),
                max_turns=max_turns,
                batch_size=batch_size,
                progress=bar.update if bar is not None else None,
            )
        finally:
            if bar is not None:
                bar.close()
        path = atomic_write_text(Path(output), json.dumps(rollouts, ensure_ascii=False) + "\n")
        per_task = Counter()
        for r in rollouts:
            per_task[r["task_id"]] += r["reward"] >= 1.0
        histogram = Counter(per_task.values())
        print(
            f"wrote {path}: {len(tasks)} tasks x {trials} trials, mean reward "
            f"{sum(r['reward'] for r in rollouts) / len(rollouts):.3f}; tasks by successes: "
            + ", ".join(f"{k}/{trials}: {histogram[k]}" for k in range(trials + 1))
        )
        return str(path)
