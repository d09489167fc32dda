"""GSM8K grade-school math: ``{question, answer}`` records with the gold number after ``####``."""

from __future__ import annotations

from typing import Any

from lightning_agents.tasks._files import TaskDataError
from lightning_agents.tasks.answers import _decimal_text, extract_gsm8k_answer, gold_gsm8k_answer
from lightning_agents.tasks.base import Problem
from lightning_agents.tasks.question_file import QuestionFileTask

__all__ = ["GSM8KTask", "GSM8KVerifier", "GSM8K_INSTRUCTION"]

GSM8K_INSTRUCTION = "Solve the problem step by step. End with a line '#### N' where N is the final number."


class GSM8KVerifier:
    """1.0 when the completion's stated final answer equals the gold number, else 0.0.

    The stated answer is the last ``#### N``, else the last ``\\boxed{N}``, else the last
    ``The answer is N`` / ``Answer: N`` / ``A: N`` line, else a one-line completion that is its one
    number (``$320``); see :func:`~lightning_agents.tasks.answers.extract_gsm8k_answer`. Commas,
    currency signs and trailing units are ignored and numbers compare by value (``18.00`` equals
    ``18``, ``1/2`` equals ``0.5``). An empty completion, one without a final-answer statement, and
    one whose statement names no single number (a hedge ``12 or 13``, a list ``12, 13``, an
    expression without its result) score 0.

    Args:
        fallback_last_number: also accept the last number in the text when no final-answer
            statement is found (lenient; off by default because it rewards unfinished reasoning).
    """

    def __init__(self, fallback_last_number: bool = False) -> None:
        self.fallback_last_number = fallback_last_number

    def __call__(self, completion: str, reference: str) -> float:
        """Score ``completion`` against ``reference``: a GSM8K solution ending in ``#### N``, just
        ``N``, or a worked solution that states its answer (``A: N``, ``The answer is N``)."""
        gold = gold_gsm8k_answer(str(reference))
        if gold is None:
            raise ValueError(
                f"reference has no gold number (give '#### N', a bare number or a stated answer): "
                f"{str(reference)[-80:]!r}"
            )
        predicted = extract_gsm8k_answer(completion, self.fallback_last_number)
        return float(predicted is not None and predicted == gold)


def gsm8k_problem(row: dict[str, Any], where: str, index: int | None = None) -> Problem:
    """A GSM8K ``{question, answer}`` row as a problem (``reference``: the gold number as text)."""
    if not isinstance(row.get("question"), str) or "####" not in str(row.get("answer", "")):
        raise TaskDataError(
            f"{where}: a GSM8K record needs 'question' and an 'answer' ending in '#### N' (it has {sorted(row)[:8]})"
        )
    gold = gold_gsm8k_answer(row["answer"])
    if gold is None:
        raise TaskDataError(f"{where}: no number after '####'")
    pid = row.get("id", f"gsm8k-{index}" if index is not None else where)
    return {
        **row,
        "id": str(pid),
        "question": row["question"],
        "reference": _decimal_text(gold),
        "solution": row["answer"],
    }


class GSM8KTask(QuestionFileTask):
    """GSM8K word problems from a ``{question, answer}`` JSONL, scored by :class:`GSM8KVerifier`.

    Args:
        path: the JSONL (served for every split), or a folder with ``<split>.jsonl``;
            e.g. ``../shared/data/gsm8k/test.jsonl``.
        split: the split :attr:`problems` draws from.
        n: use only a seeded sample of this many problems (``None``: all).
        seed: sampling seed.
        name: task name (default ``gsm8k``).
        instruction: appended to every question in :meth:`prompt` (``None``: the bare question, as
            HFlow workflows prompt it themselves).
    """

    default_name = "gsm8k"
    answer_template = "The answer is {answer}."

    def __init__(
        self,
        path: str,
        split: str = "test",
        n: int | None = None,
        seed: int | None = 0,
        name: str | None = None,
        instruction: str | None = GSM8K_INSTRUCTION,
    ) -> None:
        super().__init__(path, split, n, seed, name, instruction, gsm8k_problem, GSM8KVerifier())

    def extract_answer(self, text: str) -> str | None:
        value = extract_gsm8k_answer(text)
        return None if value is None else _decimal_text(value)

    def verifier_spec(self) -> str:
        return "lightning_agents.rewards.GSM8KVerifier"
