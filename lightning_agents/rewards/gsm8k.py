"""GSM8K-style numeric answers: the gold follows ``#### `` and the model must state its answer."""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

__all__ = ["GSM8KVerifier", "extract_gsm8k_answer", "gold_gsm8k_answer", "normalize_number"]

_NUMBER = r"[-+]?\$?\s*(?:\d[\d,]*(?:\.\d+)?|\.\d+)"
# Final-answer statements, strongest first. Only these count: a number merely mentioned in the
# reasoning is not an answer, which keeps the reward from paying for lucky intermediate values.
_PATTERNS = [
    re.compile(r"####\s*(" + _NUMBER + r")"),
    re.compile(r"\\boxed\{\s*(" + _NUMBER + r")"),
    re.compile(r"answer\s*(?:is|:)\s*[:=]?\s*\**\s*(" + _NUMBER + r")", re.IGNORECASE),
]
_LAST_NUMBER = re.compile(_NUMBER)


def normalize_number(text: str | None) -> Decimal | None:
    """Parse ``"$1,234.50"``, ``"18 dollars"``, ``"75%"`` into a ``Decimal``; ``None`` if no number."""
    if text is None:
        return None
    match = _LAST_NUMBER.search(str(text))
    if match is None:
        return None
    raw = match.group(0).replace("$", "").replace(",", "").replace(" ", "")
    try:
        return Decimal(raw)
    except InvalidOperation:
        return None


def gold_gsm8k_answer(solution: str) -> Decimal | None:
    """The gold number of a GSM8K solution (after the last ``#### ``), or of a bare number string."""
    if "####" in solution:
        solution = solution.rsplit("####", 1)[1]
    return normalize_number(solution)


def extract_gsm8k_answer(completion: str, fallback_last_number: bool = False) -> Decimal | None:
    """The model's final answer: the last ``#### N``, else the last ``\\boxed{N}``, else the last
    ``answer is N`` / ``answer: N``; with ``fallback_last_number`` the last number in the text."""
    completion = completion or ""
    for pattern in _PATTERNS:
        found = pattern.findall(completion)
        if found:
            return normalize_number(found[-1])
    if fallback_last_number:
        found = _LAST_NUMBER.findall(completion)
        if found:
            return normalize_number(found[-1])
    return None


class GSM8KVerifier:
    """1.0 when the completion's stated final answer equals the gold number, else 0.0.

    Commas, currency signs and trailing units are ignored and numbers compare by value
    (``18.00`` equals ``18``). An empty completion or one without a final-answer statement scores 0.

    Args:
        fallback_last_number: also accept the last number in the text when no final-answer
            statement is found (lenient; off by default because it rewards unfinished reasoning).
    """

    def __init__(self, fallback_last_number: bool = False) -> None:
        self.fallback_last_number = fallback_last_number

    def __call__(self, completion: str, reference: str) -> float:
        """Score ``completion`` against ``reference`` (a GSM8K solution with ``#### N`` or just ``N``)."""
        gold = gold_gsm8k_answer(str(reference))
        if gold is None:
            raise ValueError(f"reference has no gold number: {reference[-80:]!r}")
        predicted = extract_gsm8k_answer(completion, self.fallback_last_number)
        return float(predicted is not None and predicted == gold)
