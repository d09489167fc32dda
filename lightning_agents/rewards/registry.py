"""Pluggable reward functions: resolve verifiers by class path and score completions in parallel."""

from __future__ import annotations

import importlib
import logging
import math
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from lightning_agents.errors import VerifierError

__all__ = ["RewardScorer", "ScoreResult", "resolve_verifier"]

log = logging.getLogger(__name__)

Verifier = Callable[[str, str], float]


def verifier_target(path: str) -> Any:
    """What a verifier class path names (a class, or a callable object), imported but not built; a
    bare name is looked up in :mod:`lightning_agents.rewards`.

    Raises:
        ValueError: nothing importable has that name.
    """
    if "." not in path:
        from lightning_agents import rewards

        if not hasattr(rewards, path):
            raise ValueError(
                f"unknown verifier {path!r}: give a full class path such as lightning_agents.rewards.GSM8KVerifier"
            )
        return getattr(rewards, path)
    module_name, _, attr = path.rpartition(".")
    try:
        return getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as err:
        raise ValueError(f"cannot import verifier {path!r}: {err}") from err


def resolve_verifier(spec: str | dict[str, Any] | Verifier) -> Verifier:
    """Build a verifier from a class path (``"pkg.mod.Class"``), a ``{"class_path", "init_args"}``
    mapping as in LightningCLI configs, or return an already callable verifier unchanged."""
    if callable(spec) and not isinstance(spec, (str, dict)):
        return spec
    if isinstance(spec, dict):
        if "class_path" not in spec:
            raise ValueError(f"verifier mapping needs a 'class_path' key, got keys {sorted(spec)}")
        path, kwargs = spec["class_path"], dict(spec.get("init_args") or {})
    elif isinstance(spec, str):
        path, kwargs = spec, {}
    else:
        raise TypeError(f"cannot build a verifier from {type(spec).__name__}")
    obj = verifier_target(path)
    verifier = obj(**kwargs) if isinstance(obj, type) else obj
    if not callable(verifier):
        raise TypeError(f"verifier {path!r} is not callable")
    return verifier


@dataclass
class ScoreResult:
    """Rewards for a batch of completions.

    Attributes:
        rewards: one float in [0, 1] per completion, or ``nan`` where the verifier itself failed
            (no reward: exclude it from group statistics rather than treat it as 0).
        num_errors: how many completions could not be verified (the ``nan`` entries).
        reasons: how many completions got each reason (``pass``, ``wrong_answer``,
            ``compile_error``, ``timeout``, ``output_flood``, ``empty``, ``no_code``,
            ``verifier_error``, ...; see :data:`lightning_agents.rewards.verdict.REASONS`), for one
            logged scalar per reason.
    """

    rewards: list[float]
    num_errors: int
    reasons: dict[str, int] = field(default_factory=dict)


class RewardScorer:
    """Scores completions with per-record verifiers in a thread pool.

    Threads suffice: the expensive verifiers (sandboxed code) wait on subprocesses and release the
    GIL. A verifier that raises (:class:`~lightning_agents.errors.VerifierError` or anything else)
    or returns something outside [0, 1] could not verify the completion: its reward is ``nan`` with
    reason ``verifier_error``, so one bad sample never ends a training run and an infrastructure
    fault is never taught to the policy as a wrong answer. Verifiers with a ``verdict(completion,
    reference)`` method (the code verifiers) also report why they scored 0.

    Args:
        default: verifier used when a record names none (class path, mapping or callable).
        max_workers: size of the thread pool (1 scores sequentially).
    """

    def __init__(
        self,
        default: str | dict[str, Any] | Verifier = "lightning_agents.rewards.ArithmeticVerifier",
        max_workers: int = 8,
    ) -> None:
        if max_workers < 1:
            raise ValueError(f"max_workers must be >= 1, got {max_workers}")
        self.default = resolve_verifier(default)
        self.max_workers = max_workers
        self._cache: dict[str, Verifier] = {}
        self.total_errors = 0
        self.total_reasons: Counter[str] = Counter()

    def verifier_for(self, spec: str | dict | None) -> Verifier:
        """The verifier a record asks for (cached by class path), or the default."""
        if spec is None:
            return self.default
        key = spec if isinstance(spec, str) else repr(sorted(spec.items()))
        if key not in self._cache:
            self._cache[key] = resolve_verifier(spec)
        return self._cache[key]

    def _score_one(self, verifier: Verifier, completion: str, reference: str) -> tuple[float, str]:
        try:
            verdict_fn = getattr(verifier, "verdict", None)
            if verdict_fn is not None:
                v = verdict_fn(completion, reference)
                return float(v.passed), v.reason
            value = float(verifier(completion, reference))
        except Exception as err:  # noqa: BLE001 -- any verifier failure is "no reward", by design
            kind = "verifier error" if isinstance(err, VerifierError) else "verifier crashed"
            log.warning("%s in %s: %s: %s", kind, type(verifier).__name__, type(err).__name__, err)
            return math.nan, "verifier_error"
        if not 0.0 <= value <= 1.0:
            log.warning("verifier %s returned %r outside [0, 1]; no reward", type(verifier).__name__, value)
            return math.nan, "verifier_error"
        return value, "pass" if value == 1.0 else ("wrong_answer" if value == 0.0 else "partial")

    def score(
        self,
        completions: Sequence[str],
        references: Sequence[str],
        verifiers: Sequence[str | dict | None] | None = None,
    ) -> ScoreResult:
        """Score ``completions[i]`` against ``references[i]`` with ``verifiers[i]`` (or the default)."""
        if len(completions) != len(references):
            raise ValueError(f"{len(completions)} completions but {len(references)} references")
        specs = list(verifiers) if verifiers is not None else [None] * len(completions)
        if len(specs) != len(completions):
            raise ValueError(f"{len(completions)} completions but {len(specs)} verifier specs")
        fns = [self.verifier_for(s) for s in specs]
        if self.max_workers == 1 or len(completions) <= 1:
            results = [self._score_one(f, c, r) for f, c, r in zip(fns, completions, references)]
        else:
            with ThreadPoolExecutor(max_workers=min(self.max_workers, len(completions))) as pool:
                results = list(pool.map(self._score_one, fns, completions, references))
        reasons = Counter(reason for _, reason in results)
        errors = reasons.get("verifier_error", 0)
        self.total_errors += errors
        self.total_reasons.update(reasons)
        return ScoreResult([v for v, _ in results], errors, dict(reasons))
