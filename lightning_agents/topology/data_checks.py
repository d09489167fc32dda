"""Checks of curated data that the selection cannot see: what a trainer would be given wrongly.

Each returns the warning ``curate`` and ``TopoCurateDataModule`` log, or ``None``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

__all__ = ["curation_warnings", "few_trials_line", "schemaless_tool_use", "unanswered_tool_calls"]


def schemaless_tool_use(records: Iterable[dict[str, Any]]) -> int:
    """How many SFT conversations make tool calls, or RL records are tool tasks, with no ``tools``.

    tau-bench's and tau2's run files do not record the tool schemas the agent was offered (tau2
    has a field for them that its runner leaves empty). Such records train a model to call tools
    its chat template never lists, and send RL a prompt without tools; ``tools=`` supplies them.
    """
    count = 0
    for record in records:
        if record.get("tools"):
            continue
        messages = record.get("messages") or []
        if any(m.get("tool_calls") for m in messages) or record.get("environment") or record.get("ground_truth"):
            count += 1
    return count


def unanswered_tool_calls(records: Iterable[dict[str, Any]]) -> int:
    """How many SFT conversations have a tool call that no tool message answers before the next
    assistant message: BFCL result files without ``inference_log`` record the calls but not their
    outputs, so such a conversation teaches each next call without the result it depends on."""
    count = 0
    for record in records:
        pending: set = set()
        for message in record.get("messages") or []:
            role = message.get("role")
            if role == "assistant":
                if pending:
                    count += 1
                    break
                pending = {str(c.get("id")) for c in message.get("tool_calls") or []}
            elif role == "tool":
                pending.discard(str(message.get("tool_call_id")))
    return count


def few_trials_line(analyses: Sequence[Any]) -> str | None:
    """A warning when most mixed-outcome tasks have two trials: one success and one failure
    separate at every branch point (EBR 1) and give one strategy (heterogeneity 0), so TopoCurate's
    picks there are the baselines' (pooling two runs of a benchmark gives exactly that)."""
    mixed = [a.task for a in analyses if 0 < a.task.successes < a.task.trials]
    few = sum(1 for task in mixed if task.trials <= 2)
    if not mixed or few * 2 < len(mixed):
        return None
    return (
        f"{few} of {len(mixed)} tasks with both outcomes have two trials: there every branch point separates the "
        "success from the failure (EBR 1) and there is one strategy (heterogeneity 0), so TopoCurate's SFT and RL "
        "picks equal the baselines'; pool more trials per task (4 or more) for the topology to tell tasks apart"
    )


def unanswered_tool_calls_line(count: int, total: int) -> str | None:
    """The warning for :func:`unanswered_tool_calls`, or ``None`` when there are none."""
    if not count:
        return None
    return (
        f"{count} of {total} SFT conversation(s) make tool calls whose results the file does not record before the "
        "next assistant message (BFCL result files without inference_log): they teach each call without the output "
        "it depends on; curate files with inference_log for SFT"
    )


def schemaless_tool_use_line(sft: int, rl: int) -> str | None:
    """The warning for :func:`schemaless_tool_use`'s counts, or ``None`` when both are 0."""
    if not sft and not rl:
        return None
    return (
        f"{sft} SFT conversation(s) call tools and {rl} RL record(s) are tool tasks with no tool schemas (their "
        "files record none): chat templates then list no tools, so the model learns calls to tools it is never "
        "shown; pass the schemas the agent was offered as a JSON file (curate --tools, TopoCurateDataModule tools=)"
    )


def curation_warnings(
    sft: Sequence[dict[str, Any]], rl: Sequence[dict[str, Any]], analyses: Sequence[Any] = ()
) -> list[str]:
    """Every warning about the curated SFT conversations, RL records and task analyses."""
    lines = [
        schemaless_tool_use_line(schemaless_tool_use(sft), schemaless_tool_use(rl)),
        unanswered_tool_calls_line(unanswered_tool_calls(sft), len(sft)),
        few_trials_line(analyses),
    ]
    return [line for line in lines if line]
