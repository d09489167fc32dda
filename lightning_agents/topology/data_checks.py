"""Checks of curated data that the selection cannot see: what a trainer would be given wrongly.

The counts are public; :func:`curation_warnings` turns them into the lines ``curate`` and
``TopoCurateDataModule`` log.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

__all__ = ["curation_warnings", "schemaless_tool_use", "two_trial_tasks", "unanswered_tool_calls"]


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


def two_trial_tasks(analyses: Sequence[Any]) -> tuple[int, int]:
    """``(tasks with both outcomes that have two trials, tasks with both outcomes)``: with one success
    and one failure every branch point separates them (EBR 1) and there is one strategy
    (heterogeneity 0), so TopoCurate's picks there are the baselines' (pooling two runs of a
    benchmark gives exactly that)."""
    mixed = [a.task for a in analyses if 0 < a.task.successes < a.task.trials]
    return sum(1 for task in mixed if task.trials <= 2), len(mixed)


def curation_warnings(
    sft: Sequence[dict[str, Any]], rl: Sequence[dict[str, Any]], analyses: Sequence[Any] = ()
) -> list[str]:
    """Every warning about the curated SFT conversations, RL records and task analyses."""
    warnings = []
    schemaless_sft, schemaless_rl = schemaless_tool_use(sft), schemaless_tool_use(rl)
    if schemaless_sft or schemaless_rl:
        warnings.append(
            f"{schemaless_sft} SFT conversation(s) call tools and {schemaless_rl} RL record(s) are tool tasks with "
            "no tool schemas (their files record none): chat templates then list no tools, so the model learns "
            "calls to tools it is never shown; pass the schemas the agent was offered as a JSON file (curate "
            "--tools, TopoCurateDataModule tools=)"
        )
    unanswered = unanswered_tool_calls(sft)
    if unanswered:
        warnings.append(
            f"{unanswered} of {len(sft)} SFT conversation(s) make tool calls whose results the file does not record "
            "before the next assistant message (BFCL result files without inference_log): they teach each call "
            "without the output it depends on; curate files with inference_log for SFT"
        )
    few, mixed = two_trial_tasks(analyses)
    if mixed and few * 2 >= mixed:
        warnings.append(
            f"{few} of {mixed} tasks with both outcomes have two trials: there every branch point separates the "
            "success from the failure (EBR 1) and there is one strategy (heterogeneity 0), so TopoCurate's SFT and "
            "RL picks equal the baselines'; pool more trials per task (4 or more) for the topology to tell tasks apart"
        )
    return warnings
