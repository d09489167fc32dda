"""The shared shape of tasks whose problems are question records in a JSONL file (GSM8K, boxed math)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from lightning_agents.tasks._files import iter_jsonl, split_file
from lightning_agents.tasks.base import Problem, Task

__all__ = ["QuestionFileTask"]


class QuestionFileTask(Task):
    """A task read from a JSONL of question records, prompted as one user turn and checked by a verifier.

    Subclasses keep their own ``__init__`` signature (its defaults are what ``--help`` shows) and
    pass the row parser and the verifier here.

    Args:
        path: the JSONL (served for every split), or a folder with ``<split>.jsonl``.
        split: the split :attr:`problems` draws from.
        n: use only a seeded sample of this many problems (``None``: all).
        seed: sampling seed.
        name: task name (default: the subclass's ``default_name``).
        instruction: appended to every question in :meth:`prompt` (``None``: the bare question).
        parse_row: ``(row, where, index) -> Problem`` for one record; raises ``TaskDataError``.
        verifier: ``(completion, reference) -> float``.
    """

    def __init__(
        self,
        path: str,
        split: str,
        n: int | None,
        seed: int | None,
        name: str | None,
        instruction: str | None,
        parse_row: Callable[[dict[str, Any], str, int], Problem],
        verifier: Callable[[str, str], float],
    ) -> None:
        super().__init__(split, n, seed, name)
        self.path = path
        self.instruction = instruction
        self._parse_row = parse_row
        self._verifier = verifier

    def load(self, split: str) -> list[Problem]:
        path = split_file(self.path, split)
        return [self._parse_row(row, where, i) for i, (where, row) in enumerate(iter_jsonl(path))]

    def prompt(self, problem: Problem) -> list[dict[str, Any]]:
        text = problem["question"] + (f"\n\n{self.instruction}" if self.instruction else "")
        return [{"role": "user", "content": text}]

    def check(self, completion: str, reference: str) -> float:
        return float(self._verifier(completion, reference))
