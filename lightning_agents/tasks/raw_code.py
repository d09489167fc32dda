"""Which saved prompt records score a code answer as a whole program (records written before
commit 32ca778). Here, beside the tasks that write the records, so that both the data modules
(training records) and the held-out callback can ask without one importing the other."""

from __future__ import annotations

from typing import Any

__all__ = ["scores_code_raw"]


def scores_code_raw(record: dict[str, Any]) -> bool:
    """Whether ``record`` is a HumanEval-style code record (it has an ``entry_point`` field, or its
    ``task`` is ``HumanEvalTask``) whose verifier is ``CodeVerifier`` without ``entry_point``: a
    record saved before commit 32ca778 (or curated from rollouts written before session 42), which
    scores the raw completion, so a right body-only answer scores 0. Since 32ca778 every such
    record's verifier names the problem's entry point
    (:meth:`~lightning_agents.tasks.HumanEvalTask.verifier_spec_for`)."""
    spec = record.get("verifier")
    if isinstance(spec, str):
        path, args = spec, {}
    elif isinstance(spec, dict):
        path, args = spec.get("class_path"), spec.get("init_args")
        args = args if isinstance(args, dict) else {}
    else:
        return False
    if not isinstance(path, str) or path.rpartition(".")[2] != "CodeVerifier" or "entry_point" in args:
        return False
    return "entry_point" in record or str(record.get("task", "")).rpartition(".")[2] == "HumanEvalTask"
