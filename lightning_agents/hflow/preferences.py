"""Human pairwise preferences between workflows and the Bradley-Terry scores fitted from them.

A comparison shows two workflows' traces on the same problem and records which one the rater
prefers. Raters: :class:`InteractiveRater` (asks in the terminal), :class:`FileRater` (writes
pending questions to a JSONL a person answers between runs, and reads the answers back) and
:class:`SimulatedRater` (tests and benchmarks). Every answer is kept in a :class:`PreferenceStore`.
"""

from __future__ import annotations

import json
import logging
import math
import random
import re
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, TextIO

from lightning_agents.atomic import atomic_write_text, read_appended
from lightning_agents.errors import LightningAgentsError
from lightning_agents.hflow.genome import AGENT_OPERATORS
from lightning_agents.json_text import loads_json

__all__ = [
    "Comparison",
    "FileRater",
    "InteractiveRater",
    "PreferenceStore",
    "Rater",
    "SimulatedRater",
    "bradley_terry",
]

log = logging.getLogger(__name__)


class PreferenceFileError(LightningAgentsError, ValueError):
    """A preferences or questions file that cannot be read (the message names the file and line)."""


@dataclass
class Comparison:
    """One answered question.

    Args:
        a: hash of the first workflow.
        b: hash of the second workflow.
        problem_id: the problem both traces answer.
        winner: ``a``, ``b`` or ``tie``.
        source: which rater answered (``interactive``, ``file``, ``simulated``).
        generation: search generation the question was asked in.
        fitted: whether the preference model learns from the answer. False for a built pair's
            answer the fitness explains (the search's own decision when it was given, kept so a
            resumed search fits the same answers): it says nothing of a taste, and run 37 found
            such answers, fitted, steering HumanEval's main search into costlier workflows.
    """

    a: str
    b: str
    problem_id: str
    winner: str
    source: str = ""
    generation: int = 0
    fitted: bool = True

    def __post_init__(self) -> None:
        if self.winner not in ("a", "b", "tie"):
            raise ValueError(f"winner must be 'a', 'b' or 'tie', got {self.winner!r}")
        if not isinstance(self.fitted, bool):
            raise ValueError(f"fitted must be true or false, got {self.fitted!r}")


class PreferenceStore:
    """All comparisons so far (append-only); optionally kept in a JSONL file.

    With a ``path``, the answers already in the file are loaded and the file is rewritten
    atomically after each new answer, whichever rater gave it (terminal, file or simulated).
    Loaded answers that no restored search state holds are *pending*: a restarted search that
    asks one of those questions again takes the answer given before instead of asking (a person
    is never asked twice, and a search replayed after a crash makes the choices it made before);
    whatever is left counts once the search has asked its next questions (:meth:`release`).

    Args:
        path: JSONL file of every answer (None: memory only).
    """

    def __init__(self, path: str | None = None) -> None:
        self.path = Path(path) if path else None
        self.comparisons: list[Comparison] = []
        self.pending: list[Comparison] = []
        if self.path is not None and self.path.is_file():
            for i, line in enumerate(self.path.read_text().splitlines()):
                if not line.strip():
                    continue
                try:
                    self.pending.append(Comparison(**loads_json(line)))
                except (TypeError, ValueError) as exc:
                    raise PreferenceFileError(f"{self.path}:{i + 1}: not a comparison ({exc})") from None

    def add(self, comparison: Comparison) -> None:
        """Store an answer (and write the file)."""
        self.comparisons.append(comparison)
        self._write()

    def take(self, a: str, b: str, problem_id: str) -> Comparison | None:
        """The pending answer to "``a`` or ``b`` on ``problem_id``?", stored as an answer, if there is one."""
        for k, c in enumerate(self.pending):
            if c.problem_id != problem_id or {c.a, c.b} != {a, b}:
                continue
            del self.pending[k]
            if c.a != a:  # asked the other way round this time
                c = replace(c, a=a, b=b, winner={"a": "b", "b": "a"}.get(c.winner, c.winner))
            self.comparisons.append(c)
            self._write()
            return c
        return None

    def unfit(self, comparison: Comparison) -> Comparison:
        """Mark the stored answer ``comparison`` not fitted (:attr:`Comparison.fitted`) and write
        the file; returns the marked answer."""
        k = next(i for i, c in enumerate(self.comparisons) if c is comparison)
        self.comparisons[k] = replace(comparison, fitted=False)
        self._write()
        return self.comparisons[k]

    def release(self) -> int:
        """Count every pending answer as given (returns how many)."""
        released, self.pending = self.pending, []
        self.comparisons.extend(released)
        if released:
            self._write()
        return len(released)

    def _write(self) -> None:
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            rows = [*self.comparisons, *self.pending]
            atomic_write_text(self.path, "".join(json.dumps(_row(c)) + "\n" for c in rows))

    def scores(self, items: list[str] | None = None) -> dict[str, float]:
        """Bradley-Terry log-strengths of every compared workflow (and of ``items``, 0 when unseen)."""
        return bradley_terry(self.comparisons, items)

    def state_dict(self) -> dict[str, Any]:
        """Plain data for checkpoints."""
        return {"comparisons": [_row(c) for c in self.comparisons]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` output; answers in the file that the state lacks stay pending."""
        restored = [Comparison(**c) for c in state.get("comparisons", [])]
        known = {_answer_key(c) for c in restored}
        loaded = [*self.comparisons, *self.pending]
        # an answer a later generation unfitted (its pair found built) is the state's answer, not a
        # pending one (else it is stored twice), and keeps the later, better-informed mark
        self.pending = [c for c in loaded if _answer_key(c) not in known]
        unfitted = {_answer_key(c) for c in loaded if not c.fitted}
        self.comparisons = [replace(c, fitted=False) if _answer_key(c) in unfitted else c for c in restored]
        self._write()

    def __len__(self) -> int:
        """Answers kept, pending ones included."""
        return len(self.comparisons) + len(self.pending)


def _answer_key(c: Comparison) -> str:
    """``c`` as one answer, whatever its ``fitted`` mark (the search's decision, made again)."""
    return json.dumps({**asdict(c), "fitted": None}, sort_keys=True)


def _row(c: Comparison) -> dict[str, Any]:
    """A comparison as a file row: ``fitted`` only where it is False, so the files of searches
    that never leave an answer unfitted read as before the field existed."""
    row = asdict(c)
    if row["fitted"]:
        del row["fitted"]
    return row


def bradley_terry(
    comparisons: list[Comparison],
    items: list[str] | None = None,
    iters: int = 500,
    prior: float = 0.5,
    tol: float = 1e-9,
) -> dict[str, float]:
    """Fit Bradley-Terry strengths with Hunter's (2004) MM iteration; returns centred log-strengths.

    P(i beats j) = p_i / (p_i + p_j). A tie counts half a win to each side. ``prior`` adds that many
    virtual wins and losses of every item against a fixed reference item of strength 1, which keeps
    the fit finite for an item that won (or lost) every comparison and shrinks scores of items seen
    only a few times. The fit is about twenty lines, so it is written here rather than pulling in a
    ranking library (none is among the package's dependencies, and torch would be overkill for a
    problem with a few dozen parameters).

    Args:
        comparisons: the answered questions.
        items: items to include even if never compared (they get score 0 before centring).
        iters: most MM iterations.
        prior: virtual comparisons against the reference item (>= 0; 0 is the plain MLE).
        tol: stop when no log-strength moves more than this.
    """
    names = sorted({c.a for c in comparisons} | {c.b for c in comparisons} | set(items or []))
    if not names:
        return {}
    wins = {n: 0.0 for n in names}
    games: dict[tuple[str, str], float] = {}
    for c in comparisons:
        if c.a == c.b:
            continue
        if c.winner == "a":
            wins[c.a] += 1.0
        elif c.winner == "b":
            wins[c.b] += 1.0
        else:
            wins[c.a] += 0.5
            wins[c.b] += 0.5
        key = (c.a, c.b) if c.a < c.b else (c.b, c.a)
        games[key] = games.get(key, 0.0) + 1.0
    strength = {n: 1.0 for n in names}
    opponents: dict[str, list[tuple[str, float]]] = {n: [] for n in names}
    for (i, j), n in games.items():
        opponents[i].append((j, n))
        opponents[j].append((i, n))
    for _ in range(iters):
        new = {}
        for i in names:
            # MM update: p_i <- W_i / sum_j n_ij / (p_i + p_j), with the reference item (strength 1)
            # contributing `prior` wins and `2*prior` games.
            denom = sum(n / (strength[i] + strength[j]) for j, n in opponents[i]) + 2 * prior / (strength[i] + 1.0)
            numer = wins[i] + prior
            new[i] = numer / denom if denom > 0 else strength[i]
        moved = max(abs(math.log(new[n]) - math.log(strength[n])) for n in names)
        strength = new
        if moved < tol:
            break
    logs = {n: math.log(max(strength[n], 1e-300)) for n in names}
    mean = sum(logs.values()) / len(logs)
    return {n: v - mean for n, v in logs.items()}


class Rater:
    """Answers pairwise questions; returns ``a``, ``b``, ``tie``, or None (no answer yet / skipped)."""

    source = "rater"

    def compare(self, problem: dict[str, Any], a: dict[str, Any], b: dict[str, Any], query_id: str) -> str | None:
        """Which trace (``a``/``b``, plain-data traces) is better on ``problem``."""
        raise NotImplementedError

    def replayed(self, winner: str) -> None:
        """A search replaying a generation after a restart took ``winner``, this rater's answer from
        before the restart, instead of asking again (:meth:`PreferenceStore.take`)."""

    def state_dict(self) -> dict[str, Any]:
        """What a resumed search needs to get the answers an uninterrupted one would (none here)."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` output."""


class SimulatedRater(Rater):
    """A stand-in for a person who can check answers: prefers the correct trace, then the cheaper.

    With a ``criterion`` (``(problem, trace) -> value``), the trace with the higher value wins
    first: a hidden taste the fitness does not measure (benchmarks use it).

    Args:
        criterion: the hidden criterion (None: none).
        noise: probability of flipping a decided answer (a careless rater).
        cost_weight: when both are equally correct, prefer the cheaper trace if their costs differ
            by more than this fraction; otherwise answer ``tie``.
        seed: seed of the noise.
    """

    source = "simulated"

    def __init__(
        self,
        noise: float = 0.0,
        cost_weight: float = 0.1,
        seed: int = 0,
        criterion: Callable[[dict[str, Any], dict[str, Any]], float] | None = None,
    ) -> None:
        if not 0.0 <= noise <= 0.5:
            raise ValueError(f"noise must be in [0, 0.5], got {noise}")
        self.noise = noise
        self.cost_weight = cost_weight
        self.criterion = criterion
        self.rng = random.Random(seed)

    def compare(self, problem, a, b, query_id):
        ca_, cb_ = (self.criterion(problem, a), self.criterion(problem, b)) if self.criterion else (0.0, 0.0)
        sa, sb = a["score"], b["score"]
        if ca_ != cb_:
            winner = "a" if ca_ > cb_ else "b"
        elif sa != sb:
            winner = "a" if sa > sb else "b"
        else:
            ca, cb = a["cost"], b["cost"]
            if abs(ca - cb) <= self.cost_weight * max(ca, cb, 1e-12):
                return "tie"
            winner = "a" if ca < cb else "b"
        if self.rng.random() < self.noise:
            winner = "b" if winner == "a" else "a"
        return winner

    def replayed(self, winner: str) -> None:
        # compare() drew once for every decided answer: a replayed one must too, or each later
        # answer of a resumed search gets the flip meant for the one before
        if winner != "tie":
            self.rng.random()

    def state_dict(self) -> dict[str, Any]:
        """The noise generator's state (a resumed search flips the answers an uninterrupted one would)."""
        version, internal, gauss = self.rng.getstate()
        return {"rng": [version, list(internal), gauss]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` output (an empty state, saved before raters had one, changes nothing)."""
        if "rng" in state:
            version, internal, gauss = state["rng"]
            self.rng.setstate((version, tuple(internal), gauss))


def _show(trace: dict[str, Any], label: str) -> str:
    lines = [f"--- {label} (cost {trace['cost']:.6f})"]
    for s in trace["steps"]:
        # an episode's transcript (tool calls and observations) is what a person judges an agent by
        room = 1500 if s["op"] in AGENT_OPERATORS else 300
        lines.append(f"  [{s['node']} {s['op']}@{s['backbone']}] {s['text'][:room]}")
        if s.get("code") and s["code"] not in s["text"]:
            # the program the step wrote (and ran): what a person judges a programmer step by
            lines.append("    program:\n" + "\n".join("      " + x for x in s["code"][:1200].splitlines()))
        if s.get("note"):
            lines.append(f"    ({s['note']})")
    episode = any(s["op"] in AGENT_OPERATORS for s in trace["steps"])
    lines.append(f"  final: {trace['output'][-300:] if episode else trace['output'][:300]}")
    return "\n".join(lines)


class InteractiveRater(Rater):
    """Asks the person at the terminal.

    Args:
        input_fn: reads one answer line (``input`` by default; tests pass a stub).
        stream: where the question is printed.
    """

    source = "interactive"

    def __init__(self, input_fn: Callable[[str], str] = input, stream: TextIO | None = None) -> None:
        self.input_fn = input_fn
        self.stream = stream or sys.stdout
        self.closed = False

    def compare(self, problem, a, b, query_id):
        if self.closed:
            return None
        print(f"\n=== Problem {problem['id']}: {problem['question'][:500]}", file=self.stream)
        print(_show(a, "A"), file=self.stream)
        print(_show(b, "B"), file=self.stream)
        for attempt in range(3):
            try:
                reply = self.input_fn("Which is better? [a/b/t(ie)/s(kip)] ").strip().lower()
            except EOFError:
                # Ctrl-D, or stdin is not a terminal (a run under nohup, CI): the search goes on
                # without questions instead of dying with a traceback after paying for its calls
                self.closed = True
                print(
                    "\n(no more input: the remaining questions of this run are skipped; the answers "
                    "given so far are kept)",
                    file=self.stream,
                )
                return None
            if reply in ("a", "b"):
                return reply
            if reply in ("t", "tie"):
                return "tie"
            if reply in ("s", "skip", ""):
                return None
            # say what went wrong: a silent re-prompt (and a silent skip after three) looked like a hang
            more = "" if attempt == 2 else ", try again"
            print(f"{reply!r} is not an answer: type a, b, t (tie) or s (skip){more}", file=self.stream)
        print("(question skipped)", file=self.stream)
        return None


def _question_line(line: str) -> Any:
    """A questions-file line (None when blank: a person editing the file may leave one)."""
    return loads_json(line) if line.strip() else None


# A line that sets ``winner`` holds a person's answer: ``winner`` is the last key the search writes,
# so a question whose append a kill cut short never reaches a value for it.
_ANSWER = re.compile(r'"winner"\s*:\s*"?\s*(?:a|b|t)', re.IGNORECASE)


def _refuse_to_drop_an_answer(path: Path) -> None:
    """Raise when the last line of ``path`` does not parse, lacks its newline and gives an answer.

    Such a line looks like an append a kill cut short, which is dropped (and the file rewritten
    without it); but an editor that saves without a final newline leaves a person's last answer
    that way too, and a typo in it then deleted the answer with no more than a log line."""
    text = path.read_text()
    if not text or text.endswith("\n"):
        return
    lines = text.splitlines()
    try:
        _question_line(lines[-1])
    except ValueError as exc:
        if _ANSWER.search(lines[-1]):
            raise PreferenceFileError(
                f"{path}:{len(lines)}: not JSON ({exc}); the line gives an answer, so it is kept: mend it"
            ) from None


class FileRater(Rater):
    """File mode: questions go to a JSONL that a person answers between runs.

    Each line is ``{"query_id", "problem", "question", "a", "b", "winner": null}``; the person sets
    ``winner`` to ``"a"``, ``"b"`` or ``"tie"``. On the next run answered lines are read back, so
    a question is asked once and its answer used from then on. A built pair's question (the
    search's ``preference_built_pairs``) also has ``"built": true``: a run restarted from a state
    saved before it was asked still knows the answer for one (:meth:`asked_built`).

    Args:
        path: the questions/answers JSONL.
    """

    source = "file"

    def __init__(self, path: str) -> None:
        self.path = Path(path)
        self._answers: dict[str, str] = {}
        self._rows: dict[str, dict[str, Any]] = {}
        self._pending: set[str] = set()
        self._built: set[tuple[frozenset[str], str]] = set()
        # every open question by (pair either way round, problem): asked the other way round it
        # is the same question, and a second line would ask the person twice
        self._open: set[tuple[frozenset[str], str]] = set()
        self.reload()

    def reload(self) -> None:
        """Re-read the file (answers a person has filled in since)."""
        self._answers.clear()
        self._rows.clear()
        self._pending.clear()
        self._built.clear()
        self._open.clear()
        if not self.path.is_file():
            return
        # a question whose append a kill cut short is dropped: asked again when the search gets there
        _refuse_to_drop_an_answer(self.path)
        for lineno, row in read_appended(self.path, _question_line, "question"):
            if row is None:
                continue
            if isinstance(row, Exception):
                raise PreferenceFileError(f"{self.path}:{lineno}: not JSON ({row})")
            if not isinstance(row, dict) or not isinstance(row.get("query_id"), str):
                raise PreferenceFileError(f"{self.path}:{lineno}: not a question (an object with a 'query_id')")
            if row.get("built") is True:
                self._built.add((frozenset((row.get("workflow_a"), row.get("workflow_b"))), row.get("problem")))
            winner = row.get("winner")
            if winner in ("a", "b", "tie"):
                self._answers[row["query_id"]] = winner
                self._rows[row["query_id"]] = row
            elif winner is None:
                self._pending.add(row["query_id"])
                self._open.add((frozenset((row.get("workflow_a"), row.get("workflow_b"))), row.get("problem")))
            else:
                raise PreferenceFileError(f"{self.path}:{lineno}: winner must be a, b, tie or null, got {winner!r}")

    def answered(self) -> list[Comparison]:
        """Every answered question in the file, as comparisons (whether or not the search asks it again)."""
        out = []
        for qid, row in self._rows.items():
            a, b = row.get("workflow_a"), row.get("workflow_b")
            if a and b:
                out.append(
                    Comparison(a, b, row["problem"], self._answers[qid], self.source, int(row.get("generation", 0)))
                )
        return out

    def asked_built(self, a: str, b: str, problem_id: str) -> bool:
        """Whether the file asks "``a`` or ``b`` on ``problem_id``?" (either way round) as a built pair."""
        return (frozenset((a, b)), problem_id) in self._built

    def compare(self, problem, a, b, query_id, built: bool = False):
        """The answer in the file, or None after writing the question (``built``: marked as a
        built pair's, :meth:`asked_built`) unless it is already there."""
        if query_id in self._answers:
            return self._answers[query_id]
        wa, wb, _ = (query_id.split("-", 2) + ["", ""])[:3]
        if query_id not in self._pending and (frozenset((wa, wb)), problem["id"]) not in self._open:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            row = {
                "query_id": query_id,
                "workflow_a": wa,
                "workflow_b": wb,
                "problem": problem["id"],
                "question": problem["question"],
                "a": {"output": a["output"], "steps": a["steps"], "cost": a["cost"]},
                "b": {"output": b["output"], "steps": b["steps"], "cost": b["cost"]},
                **({"built": True} if built else {}),
                "winner": None,  # the last key: an answer is never cut short (_ANSWER)
            }
            with self.path.open("a") as f:
                f.write(json.dumps(row) + "\n")
            self._pending.add(query_id)
            self._open.add((frozenset((wa, wb)), problem["id"]))
            if built:
                self._built.add((frozenset((wa, wb)), problem["id"]))
        return None
