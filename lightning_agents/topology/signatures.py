"""Step signatures: what two steps must share to count as the same semantic step.

A signature is a plain tuple ``(kind, actor, name, detail)`` of strings so it hashes fast and
prints readably:

- a call: ``("call", actor, tool name, canonical arguments JSON)``; call ids are dropped because
  they are random per run;
- an observation: ``("observation", "tool", tool name, "error:<hash>" | "ok:<hash>")``, a short hash
  of the normalised content with the error flag in front, so every error observation is
  recognisable without keeping its text;
- free text: ``("text", actor, "", label)`` where the label abstracts the text: by default a
  rule-based class (question, confirm, deny, answer, ...), or a cluster id from a sentence encoder
  the user passes in (:class:`EncoderTextAbstractor`).

Decisions are the agent's. User messages are context, not decisions: by default they get no
signature at all (``SignatureConfig.user_text="context"``), so a simulated user's wording can
never make trials diverge. Free-text tool arguments (a ``think`` thought, a
``transfer_to_human_agents`` summary, a message body) are worded differently in every trial too:
a string argument of at least ``free_text_words`` words becomes ``"<text>"`` in the signature, so
the call is compared by tool and structured arguments only (see :func:`mask_free_text`).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from lightning_agents.topology.records import CALL, OBSERVATION, TEXT, Rollout, Step

__all__ = [
    "EncoderTextAbstractor",
    "Signature",
    "SignatureConfig",
    "abstract_text",
    "canonical_arguments",
    "hash_observation",
    "is_error_text",
    "is_read_only_tool",
    "mask_free_text",
    "signature_label",
    "step_signature",
    "trajectory_signatures",
]

Signature = tuple[str, str, str, str]

_READ_ONLY_PREFIXES = (
    "get",
    "list",
    "search",
    "find",
    "lookup",
    "read",
    "check",
    "calculate",
    "calculator",
    "think",
    "query",
    "fetch",
    "view",
    "show",
    "describe",
    "count",
    "retrieve",
    "display",
    "estimate",
    "ls",
    "pwd",
    "cat",
    "grep",
    "wc",
    "diff",
    "du",
    "tail",
    "head",
)
_TOKEN_SPLIT = re.compile(r"[_\W]+")


#: Tools that end or hand off an episode without changing the environment's data: tau-bench's
#: reward ignores ``transfer_to_human_agents``, so it is no state change to the verifier and no
#: strategy of its own to TopoCurate (a trial that also transferred used the same strategy).
STATELESS_TOOLS = frozenset({"transfer_to_human_agents"})


def is_read_only_tool(name: str) -> bool:
    """Default guess whether a tool leaves the environment unchanged, from its name.

    The first word of the name (``get_user_details`` -> ``get``) is compared with read verbs
    (get, list, search, find, calculate, ...). BFCL rollouts name their reads themselves (BFCL's
    own list, in ``Rollout.info["read_only_tools"]``, which the quotient graph prefers); for
    others pass ``read_only_tools`` to :class:`SignatureConfig` when the names mislead.
    """
    first = _TOKEN_SPLIT.split(name.strip().lower(), maxsplit=1)[0] if name else ""
    return first in _READ_ONLY_PREFIXES


def _normalise(value: Any) -> Any:
    # Integral floats and ints compare equal in the environment, so they must hash equal here.
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, dict):
        return {str(k): _normalise(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_normalise(v) for v in value]
    return value


def canonical_arguments(arguments: Any) -> str:
    """The canonical JSON text of a call's arguments (keys sorted, no whitespace, 1.0 -> 1).

    Args:
        arguments: a dict, a JSON string of one, or ``None``. A string that is not JSON is kept
            as a JSON string so a malformed call still gets a stable signature.
    """
    if arguments is None:
        return "{}"
    if isinstance(arguments, str):
        text = arguments.strip()
        if not text:
            return "{}"
        try:
            # Integral floats become ints while parsing, in C; the recursive `_normalise` walk
            # is then only needed when a string value may carry whitespace to strip.
            arguments = json.loads(text, parse_float=_parse_float)
        except (ValueError, RecursionError):  # not JSON, a 4300+ digit number, too deep
            return json.dumps(text, ensure_ascii=False)
        fast = json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        # No whitespace is left outside strings, so whitespace next to a quote, or any escape
        # (an escaped newline or control character), is the only sign of a string to strip.
        if "\\" not in fast and not _PADDED_RE.search(fast):
            return fast
    return json.dumps(_normalise(arguments), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


_PADDED_RE = re.compile(r'"\s|\s"')


def _parse_float(text: str) -> float | int:
    value = float(text)
    return int(value) if value.is_integer() else value


FREE_TEXT = "<text>"


def _mask(value: Any, min_words: int) -> Any:
    if isinstance(value, str):
        return FREE_TEXT if len(value.split()) >= min_words else value
    if isinstance(value, dict):
        return {k: _mask(v, min_words) for k, v in value.items()}
    if isinstance(value, list):
        return [_mask(v, min_words) for v in value]
    return value


def mask_free_text(canonical: str, min_words: int) -> str:
    """Replace every free-text string value of canonical argument JSON by ``"<text>"``.

    The rule: a string value with at least ``min_words`` whitespace-separated words is free text
    (identifiers, codes, dates, names, airports and short addresses have fewer). Its exact
    wording is a per-trial accident, not a different decision, so it is left out of the
    signature; structured arguments next to it are kept.

    Args:
        canonical: the output of :func:`canonical_arguments`.
        min_words: the word count from which a string is free text.
    """
    # Cheap pre-check: a value of min_words words holds at least min_words - 1 spaces.
    if canonical.count(" ") < min_words - 1:
        return canonical
    try:
        value = json.loads(canonical)
    except (ValueError, RecursionError):  # not JSON, a 4300+ digit number, too deep
        return canonical
    return json.dumps(_mask(value, min_words), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


# the second \s* only after a bracket: two adjacent \s* backtrack quadratically on a long blank run
_ERROR_RE = re.compile(r"^\s*(?:[\[{(\"']\s*)?(error|exception|traceback|failed|failure)\b", re.IGNORECASE)
_WS_RE = re.compile(r"\s+")


def is_error_text(content: str) -> bool:
    """Whether an observation without an explicit error flag reads as an error.

    True for text that starts with ``Error``/``Exception``/``Traceback``/``Failed`` (tau-bench's
    tools return ``"Error: ..."``) and for a JSON object whose top-level keys include ``error``
    (BFCL's tools return ``{"error": "..."}``).
    """
    if not content:
        return False
    if _ERROR_RE.match(content):
        return True
    text = content.lstrip()
    if text.startswith("{") and '"error"' in text[:200]:
        try:
            parsed = json.loads(text)
        except (ValueError, RecursionError):  # not JSON, a 4300+ digit number, too deep
            return False
        return isinstance(parsed, dict) and "error" in parsed
    return False


def hash_observation(content: str) -> str:
    """A 16-hex-digit hash of an observation's normalised content.

    JSON content is re-serialised with sorted keys so key order does not matter; other text has
    its whitespace collapsed.
    """
    text = (content or "").strip()
    if text[:1] in ("{", "["):
        try:
            # C-accelerated round trip; key order is the only variation real tools show.
            text = json.dumps(json.loads(text), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        except (ValueError, RecursionError):  # not JSON, a 4300+ digit number, too deep
            text = _WS_RE.sub(" ", text)
    else:
        text = _WS_RE.sub(" ", text)
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()


_CONFIRM_RE = re.compile(
    r"^\W*(yes|yeah|yep|sure|ok|okay|confirm(ed)?|correct|that'?s (right|correct)|please (proceed|go ahead)|go ahead|proceed)\b",
    re.IGNORECASE,
)
_DENY_RE = re.compile(r"^\W*(no|nope|not really|don'?t|do not|cancel|never mind)\b", re.IGNORECASE)
_STOP_RE = re.compile(r"###STOP###|\b(thank you|thanks|bye|goodbye|that'?s all|that'?s everything)\b", re.IGNORECASE)
_ANSWER_RE = re.compile(r"\banswer is\b", re.IGNORECASE)
# "?" and the question marks of scripts that do not use it: full-width (Chinese, Japanese), Arabic,
# Greek (U+037E), Armenian, Ethiopic. Agents answer in the user's language; without these a
# question in Chinese was a "statement" and split from the same request in English.
_QUESTION_RE = re.compile("[?\uff1f\u061f\u037e\u055e\u1367]")
_APOLOGY_RE = re.compile(r"\b(sorry|apolog|unfortunately|unable|cannot|can'?t)\b", re.IGNORECASE)


def abstract_text(actor: str, text: str) -> str:
    """Default abstraction of a free-text message into a coarse class.

    Free text from a simulated user or an assistant is worded differently in every trial; its
    exact words would make every trial its own branch. The class keeps what matters for the
    interaction's shape: ``empty``, ``stop`` (thanks/bye/``###STOP###``), ``answer`` (``The answer
    is ...``), ``confirm``, ``deny``, ``apology`` (cannot/unable/sorry), ``question`` (asks
    something), else ``statement``.

    Args:
        actor: the speaker's role (kept by the caller in the signature, not used here).
        text: the message text.
    """
    text = (text or "").strip()
    if not text:
        return "empty"
    # Long messages state their point at the start or the end; scanning those keeps this O(1).
    window = text if len(text) <= 600 else text[:300] + " " + text[-300:]
    if "###STOP###" in window:
        return "stop"
    if _ANSWER_RE.search(window):
        return "answer"
    # A message that asks something is a question whatever its opening courtesy: agents write
    # "Sure! Could you ...?", "No worries! Could you ...?", "Thank you, ... What would you like
    # ...?" for the same request, and classing those by the first word split equivalent states.
    if _QUESTION_RE.search(window):
        return "question"
    if len(text) < 200 and _STOP_RE.search(text):
        return "stop"
    if _CONFIRM_RE.match(text):
        return "confirm"
    if _DENY_RE.match(text):
        return "deny"
    if _APOLOGY_RE.search(text[:200]):
        return "apology"
    return "statement"


class EncoderTextAbstractor:
    """Free-text abstraction by clustering sentence embeddings from an encoder you supply.

    Texts are clustered per actor with leader clustering: a text joins the first cluster whose
    leader has cosine similarity at least ``threshold``, else it starts a new cluster. The order
    of first appearance decides the leaders, so the result is deterministic for a given input.

    Args:
        encoder: ``encoder(texts: list[str]) -> sequence of vectors`` (for example
            ``SentenceTransformer(...).encode``); called in batches of new texts.
        threshold: cosine similarity needed to join a cluster, in (0, 1].
        batch_size: texts per encoder call in :meth:`prepare`.
    """

    def __init__(
        self, encoder: Callable[[list[str]], Sequence[Sequence[float]]], threshold: float = 0.85, batch_size: int = 256
    ) -> None:
        if not callable(encoder):
            raise TypeError(f"encoder must be callable, got {type(encoder).__name__}")
        if not 0.0 < threshold <= 1.0:
            raise ValueError(f"threshold must be in (0, 1], got {threshold}")
        self.encoder = encoder
        self.threshold = threshold
        self.batch_size = batch_size
        self._labels: dict[tuple[str, str], str] = {}
        self._leaders: dict[str, list[list[float]]] = {}
        self._vectors: dict[str, list[float]] = {}

    @staticmethod
    def _unit(vector: Sequence[float]) -> list[float]:
        values = [float(x) for x in vector]
        norm = math.sqrt(sum(x * x for x in values))
        if norm == 0.0:
            return values
        return [x / norm for x in values]

    def prepare(self, items: Iterable[tuple[str, str]]) -> None:
        """Encode ``(actor, text)`` pairs in batches ahead of use (otherwise one call per text)."""
        pending = []
        seen = set(self._vectors)
        for _, text in items:
            text = (text or "").strip()
            if text and text not in seen:
                seen.add(text)
                pending.append(text)
        for start in range(0, len(pending), self.batch_size):
            batch = pending[start : start + self.batch_size]
            vectors = list(self.encoder(batch))
            if len(vectors) != len(batch):
                raise ValueError(f"encoder returned {len(vectors)} vectors for {len(batch)} texts")
            for text, vector in zip(batch, vectors):
                self._vectors[text] = self._unit(vector)

    def __call__(self, actor: str, text: str) -> str:
        """The cluster label ``c<index>`` of ``text`` among ``actor``'s texts."""
        text = (text or "").strip()
        if not text:
            return "empty"
        key = (actor, text)
        label = self._labels.get(key)
        if label is not None:
            return label
        if text not in self._vectors:
            self.prepare([(actor, text)])
        vector = self._vectors[text]
        leaders = self._leaders.setdefault(actor, [])
        for index, leader in enumerate(leaders):
            if sum(a * b for a, b in zip(vector, leader)) >= self.threshold:
                label = f"c{index}"
                break
        else:
            leaders.append(vector)
            label = f"c{len(leaders) - 1}"
        self._labels[key] = label
        return label


@dataclass
class SignatureConfig:
    """How steps are turned into signatures.

    Args:
        text_abstractor: ``f(actor, text) -> label`` for free text; :func:`abstract_text` by
            default, or an :class:`EncoderTextAbstractor`.
        read_only_tools: names of tools that do not change the environment, for every
            rollout; ``None``: a rollout's own list (``info["read_only_tools"]``, set by the BFCL
            reader) where it has one, else a guess from the name (:func:`is_read_only_tool`).
        include_system: give system messages a signature (off by default: the system prompt is
            the same for every trial of a task and adds nothing to the topology).
        user_text: ``"context"`` (default): user messages get no signature, since they are the
            simulated user's words, not the agent's decisions; ``"abstract"``: they are
            abstracted like the assistant's text (the behaviour before TopoCurate read only
            agent-side events).
        free_text_words: string tool arguments of at least this many words are free text and
            compared as ``"<text>"`` (:func:`mask_free_text`); ``0`` keeps every argument verbatim.
    """

    text_abstractor: Callable[[str, str], str] = abstract_text
    read_only_tools: frozenset[str] | None = None
    include_system: bool = False
    user_text: Literal["context", "abstract"] = "context"
    free_text_words: int = 6
    _read_only_cache: dict[str, bool] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if self.user_text not in ("context", "abstract"):
            raise ValueError(f"user_text must be 'context' or 'abstract', got {self.user_text!r}")
        if self.free_text_words < 0:
            raise ValueError(f"free_text_words must be 0 (off) or more, got {self.free_text_words}")

    def is_read_only(self, name: str) -> bool:
        """Whether tool ``name`` leaves the environment unchanged."""
        cached = self._read_only_cache.get(name)
        if cached is None:
            cached = name in self.read_only_tools if self.read_only_tools is not None else is_read_only_tool(name)
            self._read_only_cache[name] = cached
        return cached


DEFAULT_CONFIG = SignatureConfig()


def step_signature(step: Step, config: SignatureConfig = DEFAULT_CONFIG) -> Signature | None:
    """The signature of one step, or ``None`` for a step that is left out (system text)."""
    if step.kind == CALL:
        arguments = canonical_arguments(step.arguments)
        if config.free_text_words:
            arguments = mask_free_text(arguments, config.free_text_words)
        return (CALL, step.actor, step.name or "", arguments)
    if step.kind == OBSERVATION:
        return (
            OBSERVATION,
            "tool",
            step.name or "",
            ("error:" if step.error else "ok:") + hash_observation(step.content),
        )
    if step.kind == TEXT:
        if step.actor == "system" and not config.include_system:
            return None
        if step.actor == "user" and config.user_text == "context":
            return None
        return (TEXT, step.actor, "", config.text_abstractor(step.actor, step.content))
    raise ValueError(f"unknown step kind {step.kind!r}; expected call, observation or text")


def trajectory_signatures(
    rollout: Rollout, config: SignatureConfig = DEFAULT_CONFIG, memo: dict | None = None
) -> list[tuple[Signature, Step]]:
    """``(signature, step)`` for every step of ``rollout`` that has a signature, in order.

    Args:
        rollout: the trajectory.
        config: signature settings.
        memo: a dict reused across the trials of one task: trials repeat the same calls,
            observations and messages, and each distinct one is then canonicalised, hashed or
            classified once.
    """
    out = []
    for step in rollout.steps:
        if memo is None:
            sig = step_signature(step, config)
        else:
            arguments = step.arguments
            if step.kind == CALL and not isinstance(arguments, str):
                sig = step_signature(step, config)  # dict arguments are not hashable; canonicalise directly
            else:
                key = (step.kind, step.actor, step.name, arguments, step.error, step.content)
                sig = memo.get(key, memo)
                if sig is memo:
                    sig = memo[key] = step_signature(step, config)
        if sig is not None:
            out.append((sig, step))
    return out


def signature_label(sig: Signature, width: int = 40) -> str:
    """A short human-readable form of a signature, for tables and graph drawings."""
    kind, actor, name, detail = sig
    if kind == CALL:
        text = f"{actor}:{name}({detail[1:-1] if detail.startswith('{') else detail})"
    elif kind == OBSERVATION:
        text = f"{name}->{'ERROR' if detail.startswith('error:') else 'ok'}"
    else:
        text = f"{actor}:{detail}"
    return text if len(text) <= width else text[: width - 1] + "…"
