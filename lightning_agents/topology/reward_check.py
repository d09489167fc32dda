"""How far the rewards a rollout file records agree with the verifier its RL records will name.

TopoCurate labels trials successful by the file's own ``reward``, and its RL records send the task
to a verifier (for tau-bench, :class:`~lightning_agents.tasks.tau_actions.TauActionVerifier`; for
BFCL, :class:`~lightning_agents.tasks.tau_actions.BFCLActionVerifier`). When
the two disagree often, either the file's rewards are wrong (a fork whose ground truth changed
nothing in its environment credited agents that wrote nothing) or the verifier cannot credit what
the file's environment replay did: SFT picks and RL rewards then teach different things, and
curation gives no sign of it. This check scores every trial that names the action-match verifier
(or, for BFCL read with ``bfcl_verifier="execution"``,
:class:`~lightning_agents.tasks.bfcl_execution.BFCLExecutionVerifier`) and counts the
disagreements, so the ``curate`` command can say so.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

__all__ = ["DISAGREEMENT_WARNING", "merge_reward_checks", "reward_check", "reward_check_line"]

#: Share of checked trials on which file and verifier disagree above which ``curate`` warns.
DISAGREEMENT_WARNING = 0.1
_EXAMPLES = 5
#: tau2 termination reasons of a finished simulation; any other (``max_steps``,
#: ``too_many_errors``, ...) is scored 0 by tau2's evaluator before it looks at the actions.
FINISHED = ("agent_stop", "user_stop")


def _empty_check() -> dict[str, Any]:
    return {"checked": 0, "agree": 0, "file_only": 0, "verifier_only": 0, "examples": []}


def reward_check(rollouts: Iterable[Any], success_threshold: float, max_trials: int = 2000) -> dict[str, Any]:
    """Score each trial that names an action-match verifier and compare with its file reward.

    BFCL trials count only when their reward came from the file (``valid``/``reward``): a trial
    scored from the possible answer (``info["reward_source"] == "possible_answer"``) was scored by
    the same verifier and cannot disagree.

    Args:
        rollouts: loaded rollouts (:class:`~lightning_agents.topology.records.Rollout`).
        success_threshold: reward at or above which a trial counts as a success, on both sides.
        max_trials: most trials scored (about 0.2 ms each); past it an evenly spaced sample in file
            order, enough to tell a file whose rewards disagree, without doubling a large run.

    Returns:
        ``{"checked", "agree", "file_only", "verifier_only", "examples"}``: ``file_only`` trials the
        file calls a success and the verifier does not, ``verifier_only`` the reverse, and up to five
        ``"source: task T trial K: file reward R, verifier S"`` lines of disagreements.
    """
    from lightning_agents.datamodules.bfcl_rollouts import BFCL_EXECUTION_VERIFIER, BFCL_VERIFIER
    from lightning_agents.datamodules.trajectories import TAU_VERIFIER  # what the loaders name for tau files
    from lightning_agents.tasks.tau_actions import BFCLActionVerifier, TauActionVerifier

    check = _empty_check()
    verifiers = {TAU_VERIFIER: TauActionVerifier(), BFCL_VERIFIER: BFCLActionVerifier()}
    rollouts = list(rollouts)
    stride = max(1, -(-len(rollouts) // max(max_trials, 1)))
    for rollout in rollouts[::stride]:
        reference = rollout.info.get("reference")
        named = rollout.info.get("verifier")
        if isinstance(named, dict) and not named.get("init_args"):
            named = named.get("class_path")  # {class_path} alone is that class path, as resolve_verifier reads it
        if not isinstance(named, str):
            # a verifier with arguments (a code task's, per problem) is not an action-match
            # verifier: nothing here to compare the file's reward with
            continue
        if named == BFCL_EXECUTION_VERIFIER and named not in verifiers:
            # Only a reader that found bfcl-eval names it; built on first need (it imports BFCL's classes).
            from lightning_agents.tasks.bfcl_execution import shared_verifier

            verifiers[named] = shared_verifier()
        if rollout.reward is None or named not in verifiers or not reference:
            continue
        if named in (BFCL_VERIFIER, BFCL_EXECUTION_VERIFIER) and rollout.info.get("reward_source") == "possible_answer":
            continue  # the reader scored it with this very verifier
        if rollout.info.get("termination_reason", FINISHED[0]) not in FINISHED:
            # tau2 scores a simulation cut off by max_steps or too many errors 0 whatever it did.
            score = 0.0
        else:
            try:
                score = float(_score(rollout, reference, verifiers[named]))
            except Exception:  # noqa: BLE001 - a reference the verifier cannot read is not a disagreement to count
                continue
        file_ok, verifier_ok = rollout.reward >= success_threshold, score >= success_threshold
        check["checked"] += 1
        if file_ok == verifier_ok:
            check["agree"] += 1
            continue
        check["file_only" if file_ok else "verifier_only"] += 1
        if len(check["examples"]) < _EXAMPLES:
            check["examples"].append(
                f"{rollout.source}: task {rollout.task_id} trial {rollout.trial}: file reward {rollout.reward:g}, "
                f"verifier {score:g}"
            )
    return check


def _score(rollout: Any, reference: str, verifier: Any) -> float:
    """The verifier's score of one trial; a BFCL trial by its calls per turn when the reader kept them
    (they carry which calls BFCL's execution rejected), else by its messages."""
    turn_calls = rollout.info.get("turn_calls")
    if turn_calls is not None and hasattr(verifier, "score_turns"):
        return verifier.score_turns(turn_calls, json.loads(reference))
    return verifier(json.dumps(rollout.messages), reference)


def merge_reward_checks(checks: Sequence[dict[str, Any] | None]) -> dict[str, Any]:
    """One check from the checks of several shards (missing ones, from older shard files, skipped)."""
    merged = _empty_check()
    for check in checks:
        if not check:
            continue
        for key in ("checked", "agree", "file_only", "verifier_only"):
            merged[key] += int(check.get(key, 0))
        merged["examples"] += list(check.get("examples", []))[: _EXAMPLES - len(merged["examples"])]
    return merged


def reward_check_line(check: dict[str, Any]) -> tuple[str | None, bool]:
    """``(the line curate prints, whether it is a warning)``; ``(None, False)`` when nothing was checked."""
    checked = check.get("checked", 0)
    if not checked:
        return None, False
    disagree = checked - check["agree"]
    line = (
        f"reward check: the verifier RL records name agrees with the files' rewards on {check['agree']} of {checked} "
        f"trials ({check['file_only']} successes by the file only, {check['verifier_only']} by the verifier only)"
    )
    if disagree / checked <= DISAGREEMENT_WARNING:
        return line, False
    examples = "; ".join(check["examples"])
    return (
        f"{line}. SFT picks follow the files' rewards and RL rewards follow the verifier, so they disagree "
        f"here: check the files' rewards (a ground truth that changed nothing credits agents that wrote "
        f"nothing) or the verifier's limits (docs/topocurate.md). First: {examples}",
        True,
    )
