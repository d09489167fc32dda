"""Shared by the tests that attach real chat templates to the embedded tokenizer: the tool schemas
the conversations use, the tokenizer with a template and its special tokens, and the labelled
runs of a tokenized row. (``tests/`` is on ``sys.path`` through its rootdir ``conftest.py``.)
"""

from __future__ import annotations

import copy
import re

from lightning_agents.datamodules.conversations import IGNORE_INDEX

#: The special tokens of the eight shared templates.
SPECIAL = re.compile(r"<\|[A-Za-z_]+\|>|<｜[^｜]+｜>|</?(?:tool_call|tool_response|think)>")
#: Also Mistral's ``[TOOL_CALLS]``-style tokens and ``<|...|>`` tokens with digits or dots.
SPECIAL_WIDE = re.compile(r"<\|[^|<>\s]+\|>|<｜[^｜]+｜>|\[/?[A-Z_]{2,}\]|</?(?:tool_call|tool_response|think|tools)>")

CALCULATOR = {
    "type": "function",
    "function": {
        "name": "calculator",
        "description": "Evaluate an arithmetic expression.",
        "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]},
    },
}
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather of a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


def tokenizer_with_template(base, template: str, bos: str | None, eos: str, special: re.Pattern = SPECIAL):
    """The embedded tokenizer with the template attached and the template's special tokens added."""
    tok = copy.deepcopy(base)
    specials = sorted(set(special.findall(template)) | {eos} | ({bos} if bos else set()))
    tok.add_special_tokens({"additional_special_tokens": specials}, replace_extra_special_tokens=False)
    tok.chat_template = template
    tok.eos_token = eos
    if bos:
        tok.bos_token = bos
    return tok


def labelled_runs(tokenizer, row):
    """Decoded text of each maximal run of labelled tokens."""
    runs, current = [], []
    for token, label in zip(row["input_ids"], row["labels"]):
        if label != IGNORE_INDEX:
            current.append(token)
        elif current:
            runs.append(current)
            current = []
    if current:
        runs.append(current)
    return [tokenizer.decode(run) for run in runs]
