"""The one extractor per answer format: fenced code, ``The answer is N``, ``#### N`` and ``\\boxed{}``.

Every extractor reads a completion's final text only (:func:`strip_reasoning`): what a reasoning
model wrote inside ``<think>...</think>`` (Solar-Open's ``<|think|>...<|end|>``, Mistral's
``[THINK]...[/THINK]``, Gemma 4's ``<|channel>...<channel|>``, gpt-oss's ``analysis`` channel) is
drafts, not its answer.

Every task, verifier and HFlow operator reads answers through these functions, so two methods can
never score the same completion differently because they pulled a different answer out of it.
Pure Python, no imports from the rest of the package.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

__all__ = [
    "all_boxed",
    "answer_value",
    "split_marked_reasoning",
    "strip_reasoning",
    "extract_code",
    "extract_gsm8k_answer",
    "extract_program",
    "extract_stated_answer",
    "gold_gsm8k_answer",
    "last_boxed",
    "last_number",
    "normalize_number",
]

# What models put between "answer is" (or \boxed{, ####) and the number: spaces, ":", markdown
# bold, a dollar sign or an escaped one (GSM8K's money questions), LaTeX's \( \[ and \text{. One
# token per step, none of which can start a number, so a long run of them fails in linear time:
# with overlapping \s* quantifiers, 500 spaces after "answer is" took 39 s to reject (catastrophic
# backtracking in a reward function).
_WRAP = r"(?:[\s:=*$]|\\\(|\\\[|\\text\{|\\\$)*"

_THINK_OPEN, _THINK_CLOSE = "<think>", "</think>"


def strip_reasoning(text: str | None) -> str:
    """A completion without its reasoning block: what follows the last ``</think>``, or a
    Solar-Open reply's answer (:func:`split_marked_reasoning`).

    Reasoning models (DeepSeek-R1, QwQ, Qwen3 with thinking on) served without a reasoning parser
    return their thinking in the content, drafts included: a ``#### 5`` or a code block tried and
    dropped there would otherwise be read as the answer. Templates that open the block in the
    prompt leave only ``</think>`` in the completion. A completion that opens a block and never
    closes it stopped mid-thought (usually at the token limit): it has no answer, ``""``.
    """
    text = text or ""
    if _marked(text):
        return split_marked_reasoning(text)[1]
    if _THINK_CLOSE in text:
        return text.rsplit(_THINK_CLOSE, 1)[1]
    if text.lstrip().startswith(_THINK_OPEN):
        return ""
    return split_marked_reasoning(text)[1]


# Solar-Open's reasoned turn: `<|think|>REASONING<|end|><|begin|>assistant` then `<|content|>ANSWER` or
# `<|tool_calls|>CALLS` (its template renders an assistant's `reasoning` so; the generation prompt
# ends with `<|begin|>assistant`). The delimiters are special tokens: the engines hand a Solar-Open
# reply over decoded with them (rollout.hf_engine.decode_completions), which is what is read here.
_SOLAR_REASONED = re.compile(r"\s*<\|think\|>(.*?)(?:<\|end\|>(?:<\|begin\|>assistant)?|\Z)", re.DOTALL)
_SOLAR_CONTENT = re.compile(r"\s*<\|content\|>")


# The other reasoning blocks whose delimiters are special tokens, as the engines hand them over
# (decoded with them): Mistral's `[THINK]RSN[/THINK]ANS` (Magistral, Ministral-3 Reasoning), Gemma 4's
# `<|channel>thought\nRSN<channel|>ANS` (it may close a reply with one more, empty, channel), gpt-oss's
# `<|channel|>analysis<|message|>RSN<|end|><|start|>assistant<|channel|>final<|message|>ANS`.
_MISTRAL_REASONED = re.compile(r"\s*\[THINK\](.*?)(?:\[/THINK\]|\Z)", re.DOTALL)
_GEMMA4_OPEN = re.compile(r"\s*<\|channel>")
# Gemma 4's template writes a turn's reasoning as `<|channel>thought\nRSN\n<channel|>`: the newline
# before the close is the template's, so the stored reasoning re-renders as sampled (not `RSN\n\n`).
_GEMMA4_CHANNEL = re.compile(r"<\|channel>(?:thought(?:\n|(?=<channel\|>)))?(.*?)\n?(?:<channel\|>|\Z)", re.DOTALL)
_HARMONY_OPEN = re.compile(r"\s*<\|channel\|>")
_HARMONY_FINAL = "<|channel|>final<|message|>"


def _marked(text: str) -> bool:
    """Whether ``text`` opens with a reasoning or content marker of a marked style's."""
    return any(
        marker.match(text)
        for marker in (_SOLAR_REASONED, _SOLAR_CONTENT, _MISTRAL_REASONED, _GEMMA4_OPEN, _HARMONY_OPEN)
    )


def split_marked_reasoning(text: str) -> tuple[str, str]:
    """Split a reply, read with its marker tokens, into the reasoning it opens with and the rest.

    Solar-Open's ``<|think|>RSN<|end|><|begin|>assistant<|content|>ANS`` is ``("RSN", "ANS")`` (a
    leading ``<|content|>`` is dropped); Mistral's ``[THINK]RSN[/THINK]ANS`` and Gemma 4's
    ``<|channel>thought\nRSN<channel|>ANS`` likewise; gpt-oss's answer is its last ``final``
    message, what comes before it reasoning (a reply without one has no answer). A reasoning never
    closed (cut at the token limit) has no answer, ``("RSN", "")``. Any other text is ``("", text)``.
    """
    mistral = _MISTRAL_REASONED.match(text)
    if mistral:
        return mistral.group(1), text[mistral.end() :]
    if _GEMMA4_OPEN.match(text):
        thoughts = [found.group(1) for found in _GEMMA4_CHANNEL.finditer(text)]
        return "\n".join(part for part in thoughts if part), _GEMMA4_CHANNEL.sub("", text)
    if _HARMONY_OPEN.match(text):
        before, final, answer = text.rpartition(_HARMONY_FINAL)
        return (before, answer.removesuffix("<|end|>")) if final else (text, "")
    found = _SOLAR_REASONED.match(text)
    reasoning, rest = (found.group(1), text[found.end() :]) if found else ("", text)
    content = _SOLAR_CONTENT.match(rest)
    return reasoning, rest[content.end() :] if content else rest


# A fence opens with ``` and any info string on its own line, so openers and closers pair up
# whatever the language (a ```bash block's closer read as an opener ran the prose after it as
# code); a block is code when its tag is empty or Python's however spelled (```Python, ``` python,
# ```python3.11, ```py3). All complete Python blocks are joined (a model often puts the function
# and its usage in separate blocks); an unterminated last fence is a truncated answer, taken as is.
_FENCE = re.compile(r"```([^\n`]*)\n(.*?)```", re.DOTALL)
_OPEN_FENCE = re.compile(r"```([^\n`]*)\n(.*)\Z", re.DOTALL)
_PYTHON_TAG = re.compile(r"(?:py|python)[0-9.]*", re.IGNORECASE)


def _is_python(tag: str) -> bool:
    words = tag.split()
    return not words or _PYTHON_TAG.fullmatch(words[0]) is not None


def extract_code(text: str | None) -> str | None:
    """The code of a completion: its Python (or untagged) fenced blocks joined by newlines, else
    the body of an unterminated last fence, else ``None`` (no fence, or only other languages')."""
    text = strip_reasoning(text)
    blocks, end = [], 0
    for match in _FENCE.finditer(text):
        end = match.end()
        if _is_python(match.group(1)):
            blocks.append(match.group(2))
    if blocks:
        code = "\n".join(blocks)
    else:
        tail = _OPEN_FENCE.search(text, end)
        if tail is None or not _is_python(tail.group(1)):
            return None
        code = tail.group(2)
    return code if code.strip() else None


def extract_program(completion: str | None) -> str:
    """The program to run for a completion: :func:`extract_code`, or the whole text when it has no fence."""
    completion = strip_reasoning(completion)
    code = extract_code(completion)
    if code is not None:
        return code
    # A fence with nothing in it is an empty program, not prose to run.
    return "" if "```" in (completion or "") else (completion or "")


_STATED_RE = re.compile(r"answer is", re.IGNORECASE)


def extract_stated_answer(text: str | None) -> str | None:
    """The number stated last as ``The answer is N`` (commas removed, ``12.0`` -> ``12``), else
    ``None``; read as :func:`answer_value` reads a statement (``The answer is 9 * 2 = 18`` is 18)."""
    text = strip_reasoning(text)
    marker = _last_match(_STATED_RE, text)
    value = None if marker is None else answer_value(text[marker.end() :])
    return None if value is None else _decimal_text(value)


def _last_match(pattern: re.Pattern, text: str) -> re.Match | None:
    found = None
    for found in pattern.finditer(text):  # noqa: B007 - the last one is wanted
        pass
    return found


_WRAP_RE = re.compile(_WRAP)
# Commas inside the digits are thousands separators wherever they stand (`1,000` and `8,5` are
# 1000 and 85); a comma and a blank end the number (`12, 13` is a list, below).
_DIGITS = r"\d[\d,]*(?:\.\d+)?|\.\d+"
_MINUS = "\u2212"  # the Unicode minus sign (`−3`), which LaTeX-trained models print
_LEADING = re.compile(rf"([-+{_MINUS}]?)\s?(?:\\?\$\s?)?({_DIGITS})")
# What after a number makes it the first operand of an expression rather than the answer: an
# operator and another operand (`16 - 3 - 4 = 9`, `9 \times 2`, a range `5-6`, `7.2% - 5.1%`).
_CONTINUES = re.compile(r"%?\s?(?:[-+*/^×÷]|\\times|\\cdot|\\div|x(?=\s))\s?(?:\\?\$)?\s?[\d.(]")
_MIXED = re.compile(r"\s(\d+)\s?/\s?(\d+)(?![\d.])")  # `2 1/2`
_FRACTION = re.compile(r"\s?/\s?(\d+)(?![\d.])")  # `3/4`
# A number written with a suffix that scales it (`70k`) or in e-notation (`1e3`): not read.
_SCALED = re.compile(r"(?:[kK]|[eE][-+]?\d)(?![A-Za-z])")
# A number run on into more digits (`1.000.000`, `1,0000`): not one number.
_MALFORMED = re.compile(r"[.,]\d")
# What joins a second number to the answer in a hedge or a list (`12, 13`, `12 or 13`,
# `12 \text{ or } 13`, `18 dollars and 50 cents`); see _another_number.
_JOINER = re.compile(r"(?:[A-Za-z]+[ \t]*)?(?:[,;±]|or\b|and\b|\\pm)|\\text\{[ \t]*(?:or|and)[ \t]*\}")


def answer_value(statement: str) -> Decimal | None:
    """The number a final-answer statement gives (what follows ``####``, ``The answer is`` or the
    inside of ``\\boxed{}``), read on its first line.

    ``18``, ``$1,234.50``, ``75%`` read as themselves; an equation as its result (``9 * 2 = 18``
    and ``N = 520`` are 18 and 520; ``18, since x = 5`` is 18); ``3/4`` and ``2 1/2`` as their values.
    ``None`` for what names no single number: an expression without its result (``16 - 3``), a
    range (``5-6``), a hedge or a list (``12 or 13``, ``12, 13``), a scaled number (``70k``,
    ``1e3``), a malformed one (``1.000.000``) or words: reading their first number paid the first
    operand of an equation (``#### 16 - 3 - 4 = 9`` scored 16), which RL would learn.
    """
    line = _first_line(statement)
    value, expression = _leading_value(line)
    if value is not None and not expression:
        return value
    if "=" in line:
        value, expression = _leading_value(line.rsplit("=", 1)[1])
        return None if expression else value
    return None


def _another_number(after: str) -> bool:
    """Whether another number follows the answer, bare or joined to it (``12 13``, ``12, 13``,
    ``12 or 13``): a hedge or a list names no single number. Read as its first number,
    ``#### 12 or 13`` paid a policy for covering two answers. Blanks are stripped by hand: one
    regex with ``\\s*`` on both sides of an optional joiner backtracks cubically on a run of
    blanks (5 s for 1,000 of them after ``The answer is 12``)."""
    rest = after.lstrip()
    joiner = _JOINER.match(rest)
    if joiner is not None:
        rest = rest[joiner.end() :].lstrip()
    rest = rest.removeprefix("\\").removeprefix("$").lstrip()
    return rest[:1].isdigit()


# A hedge whose second number follows a few words later (`12 or maybe 13`, `12 (possibly 13)`,
# `12 (if not 13)`): read within the answer's own sentence only, and bounded, so a later sentence
# that mentions a number is not taken for one.
_HEDGE = re.compile(rf"\b(?:maybe|perhaps|possibly|alternatively|if not)\b[^\d\n.]{{0,30}}?({_DIGITS})")
# A bare `or` right after the answer (`12 - or 13`, `12 (or 13)`, `12 or even 13`). After a unit or
# other words it is a restatement (`120 minutes, or 2 hours`, `36 eggs, or 3 dozen`), not a hedge.
_BARE_OR = re.compile(rf"[^A-Za-z%\d\n.]*\b(?:or|otherwise)\b[^\d\n.]{{0,30}}?({_DIGITS})")
_SENTENCE_END = re.compile(r"[.!?](?:\s|$)|\n")


def _hedged(after: str, value: Decimal) -> bool:
    """Whether the answer's sentence offers a different number as an alternative (``12 or maybe
    13``): reading its first number paid a policy that names two answers for the one it got right."""
    end = _SENTENCE_END.search(after, 0, 120)
    stop = end.start() if end else 120
    found = _HEDGE.search(after, 0, stop) or _BARE_OR.match(after, 0, stop)
    if found is None:
        return False
    try:
        return Decimal(found.group(1).replace(",", "")) != value
    except InvalidOperation:
        return True


def _first_line(statement: str) -> str:
    """The first line of a statement that holds more than wrapping: ``The answer is:`` then the
    number on the next line, or inside a ``$$``/``\\[`` display whose delimiters have lines of their
    own, is read there. Three lines at most: a statement is what follows its marker closely."""
    lines = statement.lstrip().split("\n", 3)[:3]
    return next((line for line in lines if not _WRAP_RE.fullmatch(line)), "")


def _leading_value(text: str) -> tuple[Decimal | None, bool]:
    """``(the number text starts with, whether something continues after it that makes it no answer)``."""
    rest = text[_WRAP_RE.match(text).end() :]
    match = _LEADING.match(rest)
    if match is None:
        return None, True
    try:
        value = Decimal(match.group(1).replace(_MINUS, "-") + match.group(2).replace(",", ""))
    except InvalidOperation:
        return None, True
    after = rest[match.end() :]
    if _MALFORMED.match(after):
        return None, True
    mixed = _MIXED.match(after)
    fraction = _FRACTION.match(after)
    if mixed and value == value.to_integral_value() and int(mixed.group(2)):
        sign = -1 if value < 0 else 1
        value += sign * Decimal(mixed.group(1)) / Decimal(mixed.group(2))
        after = after[mixed.end() :]
    elif fraction:
        if not int(fraction.group(1)):
            return None, True
        value /= Decimal(fraction.group(1))
        after = after[fraction.end() :]
    if _CONTINUES.match(after) or _SCALED.match(after) or _another_number(after) or _hedged(after, value):
        return None, True
    return value, False


_NUMBER = rf"[-+{_MINUS}]?(?:\$ ?)?(?:{_DIGITS})"
# Final-answer statements, strongest first. Only these count: a number merely mentioned in the
# reasoning is not an answer, which keeps the reward from paying for lucky intermediate values.
_HASHES = re.compile(r"####")
# Also markdown's `**Answer**:`, a note between answer and verb (`the answer (arabic numerals) is`,
# the zero-shot CoT trigger) and a line opening with `A:` (the Q:/A: format of few-shot prompts and
# of OpenAI's GSM8K model samples). The last statement wins, so an `A:` that opens the reasoning
# gives way to the `The answer is N` after it.
_ANSWER = re.compile(
    r"answer(?:\*\*)?\s{0,3}(?:\([^()\n]{1,40}\)\s{0,3})?(?:is|:)|^[ \t]*(?-i:A):", re.IGNORECASE | re.MULTILINE
)
_LAST_NUMBER = re.compile(_NUMBER)
# A line that opens a new few-shot question (not the completion's first line).
_NEXT_QUESTION = re.compile(r"\n[ \t]*(?:Q|Question)[ \t]*:")


def normalize_number(text: str | None) -> Decimal | None:
    """Parse ``"$1,234.50"``, ``"18 dollars"``, ``"75%"`` into a ``Decimal``; ``None`` if no number."""
    if text is None:
        return None
    match = _LAST_NUMBER.search(str(text))
    if match is None:
        return None
    raw = match.group(0).replace("$", "").replace(",", "").replace(" ", "").replace(_MINUS, "-")
    try:
        return Decimal(raw)
    except InvalidOperation:
        return None


def _decimal_text(value: Decimal) -> str:
    """``Decimal`` as the shortest plain text: ``18.00`` -> ``18``, ``2.50`` -> ``2.5``."""
    # Neither int() (Python refuses integers of 4300+ digits, which a degenerate completion can
    # state) nor normalize() (it rounds to the context's 28 digits): trailing zeros cut as text.
    text = format(value, "f")
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def last_number(text: str | None) -> str | None:
    """The last number in ``text`` as plain text (what a program printed), else ``None``."""
    found = _LAST_NUMBER.findall(text or "")
    if not found:
        return None
    value = normalize_number(found[-1])
    return None if value is None else _decimal_text(value)


def gold_gsm8k_answer(solution: str) -> Decimal | None:
    """The gold number of a GSM8K reference: what follows its last ``#### ``; else the reference
    itself when it is one number (``18``, ``$1,234``, ``-3``, ``1/2``, ``18 dollars``); else the
    answer a worked solution states (``A: 18``, ``The answer is 18``, ``\\boxed{18}``); else ``None``.

    Never the first number of a worked solution: ``Janet sells 16 - 3 - 4 = 9 eggs ... A: 18`` was
    gold 16, so the right answer scored 0 and ``#### 16`` scored 1.
    """
    if "####" in solution:
        return answer_value(solution.rsplit("####", 1)[1])
    value = _bare_number(solution)
    return value if value is not None else extract_gsm8k_answer(solution)


def extract_gsm8k_answer(completion: str | None, fallback_last_number: bool = False) -> Decimal | None:
    """The model's final answer: the last ``#### N``, else the last ``\\boxed{N}``, else the last
    ``answer is N`` / ``answer: N`` / ``A: N`` line (each read by :func:`answer_value`, so ``None``
    when that statement names no single number), else a bare answer: a one-line completion that is
    its only number (``$320``, ``39 miles``); with ``fallback_last_number``, when there is no
    statement, the last number in the text. A base model on a few-shot ``Q:``/``A:`` prompt runs
    on into an example of its own making: only the text before a line opening with ``Q:`` or
    ``Question:`` is read, else that example's ``A:`` would override the model's own answer."""
    completion = strip_reasoning(completion)
    next_question = _NEXT_QUESTION.search(completion)
    if next_question is not None:
        completion = completion[: next_question.start()]
    hashes = _last_match(_HASHES, completion)
    if hashes is not None:
        return answer_value(completion[hashes.end() :])
    boxed = last_boxed(completion)
    if boxed is not None:
        return answer_value(boxed)
    stated = _last_match(_ANSWER, completion)
    if stated is not None:
        return answer_value(completion[stated.end() :])
    found = _LAST_NUMBER.findall(completion)
    if len(found) == 1 and "\\boxed" not in completion and "\\fbox" not in completion:
        # A box that never closed is an answer cut off, not a bare one.
        bare = _bare_number(completion)
        if bare is not None:
            return bare
    if fallback_last_number and found:
        return normalize_number(found[-1])
    return None


def _bare_number(text: str) -> Decimal | None:
    """The number a one-line text is (``18``, ``$320``, ``39 miles``, ``-3``, ``2 1/2``), else ``None``:
    a text that opens with words (``The total is 18.``) states no answer, it mentions a number."""
    text = text.strip()
    if "\n" in text:
        return None
    value, more = _leading_value(text)
    return None if more else value


def all_boxed(text: str | None) -> list[str]:
    """The contents of every complete ``\\boxed{...}`` (or ``\\fbox{...}``) after the reasoning, in order."""
    text = strip_reasoning(text)
    boxes = []
    while True:
        start = max(text.rfind("\\boxed"), text.rfind("\\fbox"))
        if start < 0:
            return boxes[::-1]
        box = last_boxed(text)
        if box is not None:
            boxes.append(box)
        text = text[:start]


def last_boxed(text: str | None) -> str | None:
    """The contents of the last ``\\boxed{...}`` (or ``\\fbox{...}``), braces matched; ``None`` if absent."""
    text = strip_reasoning(text)
    start, command = max((text.rfind(c), c) for c in ("\\boxed", "\\fbox"))
    if start < 0:
        return None
    brace = start + len(command)
    while brace < len(text) and text[brace] in " \t\n":
        brace += 1
    if brace >= len(text) or text[brace] != "{":
        # ``\boxed 5``: the argument is the token after the command, not a brace further on
        token = re.match(r"[^\s$]*", text[brace:]).group(0).rstrip(".,;")
        return token or None
    depth = 0
    for i in range(brace, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return text[brace + 1 : i]
    return None  # unbalanced: the answer was cut off
