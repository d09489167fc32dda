"""``lightning-agents generate``: completions (and rewards) for a JSONL prompt file, from a checkpoint or a model.

It replaces LightningCLI's ``predict``: the modules here generate and score rather than run one
forward pass per batch, so a Trainer prediction loop would add nothing but a datamodule to write.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Literal

from lightning_agents.datamodules.chat import DataFormatError
from lightning_agents.datamodules.prompts import iter_jsonl_records

__all__ = ["GenerateCommand", "read_generation_prompts"]


def read_generation_prompts(path: str | Path) -> list[dict[str, Any]]:
    """Read ``{"prompt": str | messages}`` or ``{"messages": [...]}`` records (a trailing assistant
    turn is dropped, so SFT files work too); ``id``, ``reference`` and ``verifier`` are kept."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"prompt file {path} does not exist")
    records = []
    for where, raw in iter_jsonl_records(path):
        prompt = raw.get("prompt", raw.get("messages"))
        if isinstance(prompt, str):
            prompt = [{"role": "user", "content": prompt}]
        if not isinstance(prompt, list) or not prompt or not all(isinstance(m, dict) and "role" in m for m in prompt):
            raise DataFormatError(f"{where}: needs 'prompt' (a string or messages with 'role') or 'messages'")
        while prompt and prompt[-1]["role"] == "assistant":
            prompt = prompt[:-1]
        if not prompt:
            raise DataFormatError(f"{where}: the conversation has no turn before the assistant's")
        records.append(
            {
                "id": str(raw.get("id", where)),
                "prompt": prompt,
                "reference": raw.get("reference"),
                "verifier": raw.get("verifier"),
            }
        )
    if not records:
        raise DataFormatError(f"{path}: no prompt records")
    return records


class GenerateCommand:
    """Mixin that adds the ``generate`` subcommand to the trainer."""

    def generate(
        self,
        model: Any = None,
        datamodule: Any = None,
        prompts: str = "prompts.jsonl",
        output: str = "generations.jsonl",
        policy: str | None = None,
        ckpt_path: str | None = None,
        num_samples: int = 1,
        temperature: float = 0.0,
        top_p: float = 1.0,
        max_new_tokens: int = 256,
        batch_size: int = 32,
        verifier: str | None = None,
        seed: int = 0,
        dtype: Literal["float32", "bfloat16", "float16"] = "float32",
        device: str | None = None,
        progress: bool = True,
    ) -> str:
        """Generate completions for every prompt of a JSONL file and write them as JSONL.

        Each output line is ``{"id", "sample", "prompt", "completion", "truncated"}``, plus
        ``"reward"`` for records with a ``reference`` when a verifier is configured (``verifier``
        here, or the record's own ``verifier`` class path).

        Args:
            model: unused (the model is named by ``policy`` or ``ckpt_path``).
            datamodule: unused.
            prompts: JSONL of ``{"prompt": str | messages}`` or ``{"messages": [...]}`` records,
                optionally with ``id``, ``reference`` and ``verifier``.
            output: the JSONL file to write (atomically; an existing file is replaced).
            policy: a model folder (e.g. from ``lightning-agents export``), hub id or ``embedded:student``.
            ckpt_path: a ``fit`` checkpoint instead of ``policy`` (adapters applied as trained).
            num_samples: completions per prompt.
            temperature: sampling temperature; 0 is greedy decoding.
            top_p: nucleus sampling mass.
            max_new_tokens: completion length limit.
            batch_size: prompts per generate call.
            verifier: default verifier class path for records with a ``reference`` (e.g.
                ``lightning_agents.rewards.GSM8KVerifier``); ``None`` scores only records naming their own.
            seed: torch seed, so sampling is repeatable.
            dtype: weight dtype when loading ``policy``.
            device: device to run on (default: CUDA when available, else CPU).
            progress: show a progress bar over the prompts when there is more than one batch.

        Returns:
            The path written.
        """
        import torch

        from lightning_agents.atomic import atomic_write_text
        from lightning_agents.commands.outputs import check_output_file
        from lightning_agents.rollout.hf_engine import HFGenerationEngine, SamplingConfig

        if (policy is None) == (ckpt_path is None):
            raise ValueError(
                "generate needs exactly one of --policy (a model path or id) and --ckpt_path (a fit checkpoint)"
            )
        if temperature < 0:
            raise ValueError(f"temperature must be >= 0 (0 is greedy), got {temperature}")
        for name, value in (
            ("num_samples", num_samples),
            ("max_new_tokens", max_new_tokens),
            ("batch_size", batch_size),
        ):
            if value < 1:
                raise ValueError(f"{name} must be >= 1, got {value}")
        if not 0 < top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {top_p}")
        records = read_generation_prompts(prompts)
        check_output_file("output", output)  # before the model loads and the prompts run
        device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        torch.manual_seed(seed)
        if ckpt_path is not None:
            from lightning_agents.export import load_trained_module

            module = load_trained_module(ckpt_path)
            net, tokenizer = module.model.to(device), module.tokenizer
        else:
            from lightning_agents.models import load_model_and_tokenizer

            net, tokenizer = load_model_and_tokenizer(policy, dtype=dtype, device=device)
        net.eval()
        engine = HFGenerationEngine(net, tokenizer)
        sampling = SamplingConfig(
            max_new_tokens=max_new_tokens, temperature=temperature or 1.0, top_p=top_p, do_sample=temperature > 0
        )
        rows = []
        bar = None
        if progress and len(records) > batch_size:
            from tqdm.auto import tqdm

            # a long prompt file ran for hours with no sign of how far it had got
            bar = tqdm(total=len(records), desc="generate: prompts", unit="prompt", file=sys.stderr)
        try:
            for start in range(0, len(records), batch_size):
                chunk = records[start : start + batch_size]
                out = engine.generate([r["prompt"] for r in chunk], num_samples=num_samples, sampling=sampling)
                if bar is not None:
                    bar.update(len(chunk))
                for i, record in enumerate(chunk):
                    for j in range(num_samples):
                        k = i * num_samples + j
                        rows.append(
                            {
                                "id": record["id"],
                                "sample": j,
                                "prompt": record["prompt"],
                                "completion": out.texts[k],
                                "truncated": bool(out.truncated[k]),
                            }
                        )
        finally:
            if bar is not None:
                bar.close()
        # The record each row came from, in row order (ids need not be unique).
        sources = [rec for rec in records for _ in range(num_samples)]
        scored = [
            (row, rec)
            for row, rec in zip(rows, sources)
            if rec["reference"] is not None and (verifier or rec["verifier"])
        ]
        if scored:
            from lightning_agents.rewards.registry import RewardScorer

            scorer = RewardScorer(verifier or "lightning_agents.rewards.ArithmeticVerifier")
            result = scorer.score(
                [row["completion"] for row, _ in scored],
                [str(rec["reference"]) for _, rec in scored],
                [rec["verifier"] for _, rec in scored],
            )
            for (row, _), reward in zip(scored, result.rewards):
                row["reward"] = reward
        text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
        path = atomic_write_text(Path(output), text)
        summary = f"wrote {path}: {len(records)} prompts x {num_samples} samples"
        if scored:
            summary += (
                f", mean reward {sum(row['reward'] for row, _ in scored) / len(scored):.3f} over {len(scored)} scored"
            )
        print(summary)
        return str(path)
