"""GSM8K answer checking; the verifier and its extractor live in :mod:`lightning_agents.tasks`."""

from lightning_agents.tasks.answers import extract_gsm8k_answer, gold_gsm8k_answer, normalize_number
from lightning_agents.tasks.gsm8k import GSM8KVerifier

__all__ = ["GSM8KVerifier", "extract_gsm8k_answer", "gold_gsm8k_answer", "normalize_number"]
