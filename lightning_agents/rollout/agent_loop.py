"""A multi-turn tool-use agent loop and the calculator world of the embedded task.

The loop runs any model behind :class:`~lightning_agents.rollout.hf_engine.HFGenerationEngine`:
the model answers, every ``<tool_call>`` it emits is executed by the world and returned as a tool
message, and the model continues until it answers without a call or runs out of turns. All open
conversations advance together, one batched ``generate`` per turn. The rollouts come out in the
OpenAI/tau-bench format (``{task_id, trial, reward, info, traj}``) that TopoCurate reads.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

from lightning_agents.rewards.arithmetic import CALCULATOR_TOOL, ArithmeticVerifier, calculator
from lightning_agents.rollout.hf_engine import HFGenerationEngine, SamplingConfig
from lightning_agents.rollout.tool_calls import parse_tool_calls

__all__ = ["CalculatorWorld", "ToolWorld", "run_agent_loop"]

ARITHMETIC_VERIFIER = "lightning_agents.rewards.arithmetic.ArithmeticVerifier"


class ToolWorld:
    """An environment the agent acts in through tools.

    Subclasses list their OpenAI tool schemas in ``tools`` and implement :meth:`execute`.
    """

    tools: list[dict[str, Any]] = []

    def execute(self, name: str, arguments: str | dict) -> tuple[str, bool]:
        """Run tool ``name``; return ``(observation text, is_error)``. Must not raise on bad calls."""
        raise NotImplementedError


@dataclass
class CalculatorWorld(ToolWorld):
    """The embedded task's world: one ``calculator`` tool with an ``expression`` argument.

    Bad calls (unknown tool, arguments that are not a JSON object, no expression, an expression
    the calculator rejects) return an ``error: ...`` observation, so a model can see its mistake
    and retry, which is what TopoCurate's recovery metric looks for.

    Args:
        tools: the tool schemas offered to the model.
    """

    tools: list[dict[str, Any]] = field(default_factory=lambda: [CALCULATOR_TOOL])

    def execute(self, name: str, arguments: str | dict) -> tuple[str, bool]:
        """Evaluate a ``calculator`` call."""
        if name != "calculator":
            return f"error: unknown tool {name!r}; the only tool is 'calculator'", True
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments) if arguments.strip() else {}
            except json.JSONDecodeError as exc:
                return f"error: arguments are not valid JSON ({exc.msg})", True
        if not isinstance(arguments, dict) or not isinstance(arguments.get("expression"), (str, int, float)):
            return "error: calculator needs an 'expression' string argument", True
        result = calculator(str(arguments["expression"]))
        return result, result.startswith("error:")


def _chunks(items: Sequence[int], size: int) -> Iterable[Sequence[int]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def run_agent_loop(
    engine: HFGenerationEngine,
    tasks: Sequence[dict[str, Any]],
    trials: int = 4,
    world: ToolWorld | None = None,
    sampling: SamplingConfig | None = None,
    max_turns: int = 3,
    batch_size: int = 64,
    verifier: Callable[[str, str], float] | None = None,
    verifier_path: str = ARITHMETIC_VERIFIER,
    progress: Callable[[int], None] | None = None,
) -> list[dict[str, Any]]:
    """Run ``trials`` independent multi-turn episodes per task and score each.

    Args:
        engine: the model to run.
        tasks: problems with ``id``, ``question`` and ``answer`` (e.g. from
            :func:`~lightning_agents.rewards.arithmetic.make_arithmetic_split`).
        trials: episodes per task (K).
        world: the tool environment (default: :class:`CalculatorWorld`).
        sampling: sampling settings of every model turn (sample, so trials differ).
        max_turns: model turns per episode; an episode still calling tools after the last turn
            ends unanswered and scores 0.
        batch_size: conversations per ``generate`` call.
        verifier: ``verifier(final answer text, answer) -> reward`` (default: the embedded
            task's exact-match :class:`~lightning_agents.rewards.arithmetic.ArithmeticVerifier`).
        verifier_path: the verifier's import path, recorded in each rollout's ``info``.
        progress: called with the number of model turns generated after each batch.

    Returns:
        Rollouts ``{task_id, trial, reward, info, tools, traj}``; ``traj`` is the OpenAI-format
        conversation, ``info`` holds ``question``, ``reference``, ``verifier``, ``turns`` and
        ``finished``.
    """
    if trials < 1 or max_turns < 1:
        raise ValueError(f"trials and max_turns must be at least 1, got {trials} and {max_turns}")
    world = world or CalculatorWorld()
    sampling = sampling or SamplingConfig()
    verifier = verifier or ArithmeticVerifier()
    episodes = [
        {"task": task, "trial": k, "messages": [{"role": "user", "content": task["question"]}], "finished": False, "turns": 0}
        for task in tasks
        for k in range(trials)
    ]
    for turn in range(max_turns):
        active = [i for i, e in enumerate(episodes) if not e["finished"]]
        if not active:
            break
        for chunk in _chunks(active, batch_size):
            out = engine.generate([episodes[i]["messages"] for i in chunk], num_samples=1, sampling=sampling, tools=world.tools)
            for i, text in zip(chunk, out.texts):
                episode = episodes[i]
                episode["turns"] += 1
                content, calls = parse_tool_calls(text, id_prefix=f"call_{turn}")
                if not calls:
                    episode["messages"].append({"role": "assistant", "content": content})
                    episode["finished"] = True
                    continue
                episode["messages"].append({"role": "assistant", "content": content, "tool_calls": calls})
                for call in calls:
                    observation, _ = world.execute(call["function"]["name"], call["function"]["arguments"])
                    episode["messages"].append(
                        {"role": "tool", "tool_call_id": call["id"], "name": call["function"]["name"], "content": observation}
                    )
            if progress is not None:
                progress(len(chunk))
    rollouts = []
    for episode in episodes:
        task = episode["task"]
        last = episode["messages"][-1]
        answer_text = last["content"] if episode["finished"] else ""
        rollouts.append(
            {
                "task_id": task["id"],
                "trial": episode["trial"],
                "reward": float(verifier(answer_text, task["answer"])) if episode["finished"] else 0.0,
                "info": {
                    "question": task["question"],
                    "reference": task["answer"],
                    "verifier": verifier_path,
                    "turns": episode["turns"],
                    "finished": episode["finished"],
                },
                "tools": world.tools,
                "traj": episode["messages"],
            }
        )
    return rollouts
