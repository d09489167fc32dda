"""The HFlow operators and the executor that runs a workflow on a batch of problems.

Execution is node by node in topological order, each node batched over every problem, so a local
backbone answers a whole layer in one ``generate`` call and an HTTP backbone fans it out to its
concurrency limit. Each node produces a :class:`Result` per problem (text, extracted answer, code);
the output node's text is what the task scores. Per-problem costs are accumulated from the same
completions the ledger books.

Operators (the node's ``prompt`` is its system prompt; empty uses the default below):

- ``generate``: one call; upstream answers, if any, are shown as hints.
- ``cot``: one call with a step-by-step instruction and a longer length limit.
- ``vote``: self-consistency; ``samples`` sampled calls plus the upstream answers are ballots, the
  most frequent answer wins (ties: first seen). On code, ballots are grouped by behaviour on the
  docstring's examples and inputs made from them, and by :func:`code_shape` where the docstring
  gives none. With one input and no samples the vote passes its input's result on unchanged.
- ``programmer``: the model writes Python; it runs in :func:`lightning_agents.rewards.sandbox.run_python`
  and the printed output is the answer; on an error the traceback goes back to the model, up to
  ``retries`` times.
- ``refine``: the model reviews the upstream answer and may replace it; an unusable reply keeps
  the upstream result.
- ``test``: runs the upstream code against the problem's examples (code tasks); failures go back
  to the model for a fix, up to ``retries`` times. Without examples it only checks the code runs.
  Each example runs on its own (:func:`_example_harness`), so a run says how many passed; when no
  attempt passes them all, the one that passed the most is kept (ties: the earliest, so the input
  program wins them), not the last fix: a wrong docstring (HumanEval/47, /116) or a bad fixer
  must not replace a program with a worse one. The note says which round was kept.
- ``format``: no model call; restates the upstream answer with the template in ``prompt``.
- ``agent`` (tasks with tools): a multi-turn episode in the problem's own world, every turn the
  shared :func:`~lightning_agents.rollout.agent_turn.agent_turn` of the rollouts: the model sees
  its world's tools (a BFCL record's own; the task's when the world lists none), its calls run in
  the world and the observations come back, until it replies without a call and the task's user
  has no further turn (BFCL's fixed turns come one after another) or ``max_turns`` run out.
  ``prompt`` is the agent's system prompt (empty: the task's own). The result is the episode: the
  task's :meth:`~lightning_agents.tasks.Task.verify_episode` scores it (its final state, for a world).
- ``verify``: continues the upstream episode in the same world: appends ``prompt`` as a user turn
  (``{question}`` in it stands for the problem's request, so the request can be made again) and
  runs up to ``max_turns`` more turns, for the episodes ``when`` selects (``unfinished``: those
  that ended without a reply; ``errors``: those too that met a tool error; ``always``).
"""

from __future__ import annotations

import ast
import copy
import dataclasses
import json
import re
import secrets
from collections import Counter
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from lightning_agents.errors import VerifierError
from lightning_agents.hflow.backbones import (
    BackbonePool,
    Completion,
    Request,
    request_seed,
)
from lightning_agents.hflow.genome import AGENT_OPERATORS, PARAM_DEFAULTS, Node, Workflow, WorkflowError, has_tools
from lightning_agents.rollout.agent_turn import (
    AgentEpisode,
    ModelReply,
    agent_turn,
    model_call_format,
    model_needs_alphanumeric_ids,
    model_notice_role,
    next_user_turn,
    offered_tools,
    reply_message,
    score_episode,
    start_episode,
)
from lightning_agents.rollout.tool_calls import TOOL_CALL_STYLES, is_notice, malformed_call
from lightning_agents.tasks import Task, extract_code, strip_reasoning
from lightning_agents.tasks.code_examples import (
    MAX_GENERATED,
    behaviour_program,
    parse_behaviour,
)

__all__ = [
    "CODE_PROMPTS",
    "DEFAULT_MAX_TOKENS",
    "DEFAULT_PROMPTS",
    "Result",
    "Trace",
    "WorkflowExecutor",
    "code_shape",
    "episode_transcript",
    "execute_python",
]

DEFAULT_PROMPTS: dict[str, str] = {
    "generate": "",
    "cot": "Think step by step, then finish with 'The answer is N.'",
    "vote": "",
    "programmer": "Write Python code that prints the answer.",
    "refine": "Check the previous answer. If it is wrong, correct it. Finish with 'The answer is N.'",
    "test": "The code failed its tests. Fix it and reply with the whole corrected code in a ```python block.",
    "format": "",
    "agent": "",
    "verify": "Check with the tools that the request is fully done. If it is not, finish it, then reply.",
}
# Code tasks: the answer is a function, so the instructions talk about code, not numbers.
CODE_PROMPTS: dict[str, str] = {
    "generate": "",
    "cot": "Reason briefly about the algorithm and the edge cases, then reply with the whole function in a "
    "```python block.",
    "vote": "",
    "programmer": "Write the complete Python function in a ```python block.",
    "refine": "Review the function above for bugs and missed edge cases. Reply with the whole corrected function "
    "in a ```python block (unchanged if it is right).",
    "test": "The code failed its tests. Fix it and reply with the whole corrected code in a ```python block.",
    "format": "",
    "agent": "",
    "verify": DEFAULT_PROMPTS["verify"],
}
# Completion limits by operator when neither the search settings nor the node set one. Math answers
# are short; a code answer is a whole function (160 of HumanEval's 164 canonical solutions are
# longer than 48 tokens), so code tasks get room for one.
DEFAULT_MAX_TOKENS: dict[str, dict[str, int]] = {
    "math": {"generate": 48, "cot": 96, "vote": 48, "programmer": 64, "refine": 48, "test": 256},
    "code": {"generate": 512, "cot": 768, "vote": 512, "programmer": 512, "refine": 512, "test": 768},
}
# Tasks with tools: the math limits, and per turn of an episode a tool call or a short reply (what
# the agent-world benchmarks use).
DEFAULT_MAX_TOKENS["agent"] = {**DEFAULT_MAX_TOKENS["math"], "agent": 48, "verify": 48}
_VERIFY_WHEN = ("unfinished", "errors", "always")


@dataclass
class Result:
    """What one node produced for one problem.

    Args:
        text: the node's final text.
        answer: the answer extracted from it (None when there is none).
        code: the program involved, if any.
        note: what happened (e.g. ``ran ok``, ``retry 1: NameError``), shown in traces.
        episode: the episode an ``agent`` / ``verify`` node ran (conversation and world); the task
            scores it instead of ``text``. Not part of the stored trace.
    """

    text: str = ""
    answer: str | None = None
    code: str | None = None
    note: str = ""
    episode: AgentEpisode | None = None


@dataclass
class Trace:
    """A workflow's run on one problem: every node's result, the final text, its cost and score."""

    problem_id: str
    steps: list[dict[str, Any]] = field(default_factory=list)
    output: str = ""
    answer: str | None = None
    cost: float = 0.0
    input_tokens: int = 0
    output_tokens: int = 0
    score: float = 0.0
    errors: int = 0

    def to_dict(self) -> dict[str, Any]:
        """Plain data (stored in the evaluation cache and shown to raters)."""
        return {
            "problem_id": self.problem_id,
            "steps": self.steps,
            "output": self.output,
            "answer": self.answer,
            "cost": self.cost,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "score": self.score,
            "errors": self.errors,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Trace:
        """Inverse of :meth:`to_dict`."""
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})


def execute_python(code: str, timeout_s: float = 5.0, memory_mb: int = 256):
    """Run ``code`` in the package sandbox; returns its ``SandboxResult``."""
    from lightning_agents.rewards.sandbox import run_python

    return run_python(code, timeout_s=timeout_s, memory_mb=memory_mb)


def episode_transcript(messages: list[dict[str, Any]], preambles: Mapping[int, str] | None = None) -> str:
    """A readable transcript of an episode for raters and the reflective optimizer: the user turns,
    every tool call with its arguments and the observation it got, and the replies.

    ``preambles`` holds, by index in ``messages``, a call turn's text before its calls that its
    message does not hold as content (:attr:`~lightning_agents.rollout.agent_turn.AgentEpisode.preambles`:
    gpt-oss's, folded into ``thinking``); it is shown as the agent's words, as a call turn's content is.
    """
    lines = []
    for i, m in enumerate(messages):
        role = m.get("role")
        if role == "system":
            continue
        if is_notice(m):  # a malformed call's notice told as a user message: the environment's answer
            lines.append(f"  -> {m['content']}")
        elif role == "user":
            lines.append(f"user: {m.get('content') or ''}")
        elif role == "assistant":
            if preambles and i in preambles and not m.get("content"):
                lines.append(f"agent: {preambles[i]}")
            if m.get("content"):
                # a broken call block is the agent acting, not its final reply
                acting = m.get("tool_calls") or any(malformed_call(m["content"], st) for st in TOOL_CALL_STYLES)
                lines.append(f"{'agent' if acting else 'reply'}: {m['content']}")
            for call in m.get("tool_calls") or []:
                fn = call.get("function", call)
                args = fn.get("arguments")
                lines.append(f"call {fn.get('name')} {args if isinstance(args, str) else json.dumps(args)}")
        elif role == "tool":
            lines.append(f"  -> {m.get('content') or ''}")
    return "\n".join(lines)


def _fill_question(prompt: str, task: Task, problem: dict[str, Any]) -> str:
    """A verify prompt with ``{question}`` replaced by the problem's request (other braces kept)."""
    return prompt.replace("{question}", task.user_message(problem))


class _Shape(ast.NodeTransformer):
    """Docstrings and type hints out, and the names in ``renamable`` (those a program binds itself)
    numbered by first use: what :func:`code_shape` compares."""

    def __init__(self, renamable: set[str]) -> None:
        self.renamable, self.names = renamable, {}

    def _name(self, name: str) -> str:
        if name not in self.renamable:
            return name
        return self.names.setdefault(name, f"_v{len(self.names)}")

    def visit_Name(self, node: ast.Name) -> ast.AST:
        node.id = self._name(node.id)
        return node

    def visit_arg(self, node: ast.arg) -> ast.AST:
        node.arg = self._name(node.arg)
        node.annotation = None
        return node

    def _body(self, node: ast.AST) -> ast.AST:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            node.name = self._name(node.name)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            node.returns = None
        return self.generic_visit(node)

    def visit_Expr(self, node: ast.Expr) -> ast.AST | None:
        # a bare string is a docstring, wherever it stands (HumanEval/115's follows an import)
        if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            return None  # dropped (the shape is only compared, never run: an emptied body is fine)
        return self.generic_visit(node)

    visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = visit_Module = _body


def code_shape(code: str, entry_point: str = "") -> str:
    """``code`` with what cannot change its behaviour taken out (layout, comments, docstrings,
    type hints, the names it binds itself; imported names, builtins and ``entry_point`` stay), or
    the stripped text when it does not parse. Two programs with one shape compute the same thing."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return code.strip()
    try:
        return ast.dump(_Shape(_renamable(tree, entry_point)).visit(tree), annotate_fields=False)
    except RecursionError:
        return code.strip()


def _renamable(tree: ast.AST, entry_point: str) -> set[str]:
    """The names a program binds itself (assignments, parameters, its own functions and classes),
    less those whose spelling can matter: imported names, ``entry_point``, and names also used as an
    attribute or a keyword argument (``self.solve``, ``f(n=1)``). Free names (builtins, what a star
    import brings) are never renamed, so ``floor`` and ``ceil`` stay apart."""
    bound, fixed = set(), {entry_point}
    for n in ast.walk(tree):
        if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del)):
            bound.add(n.id)
        elif isinstance(n, ast.arg):
            bound.add(n.arg)
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(n.name)
        elif isinstance(n, (ast.Import, ast.ImportFrom)):
            fixed |= {(a.asname or a.name).split(".")[0] for a in n.names}
        elif isinstance(n, ast.Attribute):
            fixed.add(n.attr)
        elif isinstance(n, ast.keyword) and n.arg:
            fixed.add(n.arg)
        elif isinstance(n, (ast.Global, ast.Nonlocal)):
            fixed |= set(n.names)
    return bound - fixed


# Parts of the example harness (see _example_harness); `_hflow_` names are the checks' own.
_HARNESS_HEAD = """
import os as _hflow_os
import sys as _hflow_sys
import traceback as _hflow_traceback


def _hflow_say(line):
    try:  # what the program printed comes first, not after (or split around) the harness's line
        _hflow_sys.stdout.flush()
    except Exception:
        pass
    _hflow_os.write(1, ("\\n" + line + "\\n").encode())


_hflow_say(MARKER + " start")
_hflow_passed = 0
_hflow_first = None
"""
_HARNESS_TRY = """
try:
    pass
except Exception as _hflow_error:
    if _hflow_first is None:  # the first failure is what the fixer reads (stderr's tail)
        _hflow_first = _hflow_error
        _hflow_traceback.print_exc()
else:
    _hflow_passed += 1
"""
_HARNESS_TAIL = """
_hflow_say("%s %d %d" % (MARKER, _hflow_passed, TOTAL))
if _hflow_first is not None:
    # again at the end: what the program wrote to stderr after the first failure would push it
    # out of the tail the fixer reads
    _hflow_traceback.print_exception(type(_hflow_first), _hflow_first, _hflow_first.__traceback__)
    raise SystemExit(1)
"""
_SETUP = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def _example_harness(tests: str, marker: str) -> tuple[str, int]:
    """The code appended to a program to run the task's example checks ``tests`` one by one, and
    how many examples it counts.

    An example is a run of statements that ends with an ``assert`` (``_hflow_got = f(x)`` then
    ``assert _hflow_close(...)``: what :func:`~lightning_agents.tasks.code_examples.example_assertions`
    writes, MBPP's own asserts alike), or what follows the last ``assert``; imports and definitions
    outside an example run as they stand. Each example runs in its own ``try``: one that raises
    (an ``Exception``) counts as failed and the next one runs; the first failure's traceback goes
    to stderr, for the fixer, and again at the end. Before the first example the harness writes
    ``<marker> start``, after the last one ``<marker> <passed> <total>``, straight to the standard
    output's descriptor (a program that rebinds ``print`` or ``sys.stdout`` does not hide them;
    what it printed itself is flushed first) and exits with status 1 when one failed. The count
    exists only when the run got through every example: a program that exits (``sys.exit``
    raises ``SystemExit``, which no ``except Exception`` stops; ``os._exit``), crashes or hangs on
    the way leaves no count line (:func:`_examples_passed` reads 0), and one that does not run at
    all (an import or syntax error, a ``sys.exit`` or ``input()`` at module level) leaves no start
    line either (-1: below a program that runs, so a fix that runs beats a crashing input even
    when both pass no example, as on HumanEval/116 whose docstring the right program contradicts). ``marker`` is fresh per run, so an honest
    program never prints it; a program that reads it from its own source or code objects can
    forge a count (the sandbox holds such a program; the count is no defence against it).
    Unparsable ``tests``, or tests ``ast.unparse`` cannot write back (a literal over Python's
    4,300-digit limit, deep nesting), run as they stand, between the two lines, as one example."""
    head = _HARNESS_HEAD.replace("MARKER", repr(marker))
    try:
        body = ast.parse(tests).body
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return _whole_tests_harness(tests, marker)
    out = ast.parse(head).body
    group: list[ast.stmt] = []
    total = 0

    def close() -> None:
        nonlocal group, total
        guarded = ast.parse(_HARNESS_TRY).body[0]
        guarded.body = group
        out.append(guarded)
        group, total = [], total + 1

    for stmt in body:
        if not group and isinstance(stmt, _SETUP):
            out.append(stmt)
            continue
        group.append(stmt)
        if isinstance(stmt, ast.Assert):
            close()
    if group:
        close()
    tail = _HARNESS_TAIL.replace("MARKER", repr(marker)).replace("TOTAL", str(total))
    out += ast.parse(tail).body
    try:
        return "\n\n" + ast.unparse(ast.Module(body=out, type_ignores=[])) + "\n", total
    except (ValueError, RecursionError, MemoryError):
        return _whole_tests_harness(tests, marker)


def _whole_tests_harness(tests: str, marker: str) -> tuple[str, int]:
    """``tests`` as they stand between the start and count lines, counted as one example (for
    tests :func:`_example_harness` cannot split): the count line is written only if they all pass."""
    head = _HARNESS_HEAD.replace("MARKER", repr(marker))
    tail = f"\n_hflow_say({marker!r} + ' 1 1')\n"
    return f"\n\n{head}\n{tests}\n{tail}", 1


_COUNT = re.compile(r"[0-9]{1,9}")


def _examples_passed(stdout: str, marker: str, total: int) -> int:
    """How many examples passed, from the lines :func:`_example_harness` wrote with ``marker``:
    the count; 0 when the run started the examples but wrote no count (it exited, crashed or hung
    on one) or wrote more than one (an honest program never prints the marker); -1 when it never
    reached the examples (it does not run)."""
    started, counts = False, []
    for line in (stdout or "").splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == marker and parts[1] == "start":
            started = True
        elif len(parts) == 3 and parts[0] == marker and _COUNT.fullmatch(parts[1]) and parts[2] == str(total):
            counts.append(min(int(parts[1]), total))
    if not started:
        return -1
    return counts[0] if len(counts) == 1 else 0


def _error_tail(result) -> str:
    lines = [line for line in (result.stderr or "").strip().splitlines() if line.strip()]
    if result.timed_out:
        # the examples run one by one: an earlier one's failure is on stderr before a later one hangs
        return "the program timed out" + (" after this error:\n" + "\n".join(lines[-3:]) if lines else "")
    return "\n".join(lines[-3:]) if lines else f"exit code {result.returncode} and no output"


class WorkflowExecutor:
    """Runs workflows on problems with a backbone pool.

    Args:
        task: the task (answer extraction, formatting, scoring).
        pool: the backbone pool (its ledger books every call).
        sandbox_timeout_s: time limit per program run.
        sandbox_memory_mb: memory limit per program run.
        sandbox_workers: programs run in parallel (they are subprocesses).
        max_tokens: completion limit per operator for this task (``{"cot": 800, ...}``), over the
            domain defaults in :data:`DEFAULT_MAX_TOKENS`; a node's ``max_tokens`` param overrides both.
    """

    def __init__(
        self,
        task: Task,
        pool: BackbonePool,
        sandbox_timeout_s: float = 5.0,
        sandbox_memory_mb: int = 256,
        sandbox_workers: int = 4,
        max_tokens: dict[str, int] | None = None,
    ) -> None:
        self.task = task
        self.pool = pool
        self.max_tokens = {**DEFAULT_MAX_TOKENS.get(task.domain, DEFAULT_MAX_TOKENS["math"]), **(max_tokens or {})}
        self.prompts = CODE_PROMPTS if task.domain == "code" else DEFAULT_PROMPTS
        self.sandbox_timeout_s = sandbox_timeout_s
        self.sandbox_memory_mb = sandbox_memory_mb
        self.sandbox_workers = sandbox_workers
        self._text_scorable: bool | None = None

    # ------------------------------------------------------------------------------ helpers
    def _call(self, node: Node, requests: list[Request], ctx: dict[str, Any], traces: list[Trace], rows: list[int]):
        outs = self.pool.complete(
            node.backbone, requests, role="workflow", workflow=ctx["workflow"], generation=ctx["generation"]
        )
        backbone = self.pool.get(node.backbone)
        for row, c in zip(rows, outs):
            traces[row].errors += c.error is not None
            traces[row].cost += backbone.cost(c.input_tokens, c.output_tokens, c.cached_tokens)
            traces[row].input_tokens += c.input_tokens
            traces[row].output_tokens += c.output_tokens
        return outs

    def _messages(self, node: Node, problem: dict[str, Any], hints: list[Result]) -> list[dict[str, Any]]:
        prompt = node.prompt or self.prompts[node.op]
        user = self.task.user_message(problem)
        answers = [h.answer for h in hints if h.answer is not None]
        if answers:
            user += "\nAnswers from earlier steps: " + "; ".join(answers)
        messages = [{"role": "system", "content": prompt}] if prompt else []
        return messages + [{"role": "user", "content": user}]

    def _request(self, node: Node, messages, ctx, problem, k: int = 0, default_temperature: float = 0.0) -> Request:
        return Request(
            messages=messages,
            max_tokens=int(node.params.get("max_tokens", self.max_tokens.get(node.op, 64))),
            temperature=float(node.params.get("temperature", default_temperature)),
            # canonical node id: equivalent workflows draw the same samples
            seed=request_seed(ctx["workflow"], ctx["ids"][node.id], problem["id"], k, ctx.get("salt", 0)),
        )

    def _run_programs(self, programs: list[str]):
        if len(programs) <= 1 or self.sandbox_workers <= 1:
            return [execute_python(p, self.sandbox_timeout_s, self.sandbox_memory_mb) for p in programs]
        with ThreadPoolExecutor(max_workers=self.sandbox_workers) as ex:
            return list(ex.map(lambda p: execute_python(p, self.sandbox_timeout_s, self.sandbox_memory_mb), programs))

    def _text_result(self, c: Completion) -> Result:
        if c.error is not None:
            return Result(text="", answer=None, code=None, note=f"call failed: {c.error[:200]}")
        return Result(text=c.text, answer=self.task.extract_answer(c.text), code=extract_code(c.text))

    def _example_tests(self, problem: dict[str, Any]) -> str | None:
        """The task's tests from the problem statement's examples (``None`` when it has none)."""
        return self.task.example_tests(problem)

    def _vote_by_behaviour(self, problems, ballots: list[list[str]], texts: list[list[str]]) -> list[Result]:
        """Self-consistency for code: candidates are grouped by what they return on the docstring's
        example inputs and on inputs made from them (exact strings would make every ballot unique;
        most plausible candidates agree on the stated examples). Candidates that pass the examples
        come first; among them the group whose outputs the most candidates share, input by input,
        wins (ties: the larger group, then the first seen)."""
        jobs = [(i, k) for i in range(len(problems)) for k in range(len(ballots[i]))]
        tag = secrets.token_hex(8)
        programs = [
            behaviour_program(
                self.task.program_for(ballots[i][k], problems[i]),
                problems[i].get("prompt", ""),
                problems[i].get("entry_point", ""),
                tag,
                generated=MAX_GENERATED,
            )
            for i, k in jobs
        ]
        runs = self._run_programs(programs) if programs else []
        signature: dict[tuple[int, int], tuple[str, bool]] = {}
        for (i, k), run in zip(jobs, runs):
            # what a failed run printed still counts: the examples may have run before a generated input killed it
            signature[(i, k)] = parse_behaviour(run.stdout, run.returncode == 0, tag)
        results = []
        for i in range(len(problems)):
            if not ballots[i]:
                results.append(Result(text=texts[i][0] if texts[i] else "", note="no ballots"))
                continue
            groups: dict[str, list[int]] = {}
            passes: dict[str, bool] = {}
            for k in range(len(ballots[i])):
                sig, ok = signature[(i, k)]
                if sig == "":
                    # no example and no generated input ran (31 of HumanEval's 164 docstrings give
                    # none): behaviour cannot tell candidates apart, so copies of one program that
                    # differ in layout, comments or names are grouped; before, every ballot fell
                    # into one group and the first won, a `return None` stub over two right ones
                    sig = "\x1e" + code_shape(ballots[i][k], problems[i].get("entry_point", ""))
                groups.setdefault(sig, []).append(k)
                passes[sig] = passes.get(sig, False) or ok
            # per input, how many candidates of its tier (passing the examples or not) return what
            # this one returns, summed: right programs that differ on one generated input outside
            # the problem's domain (one raises, one returns) still back each other on the rest,
            # where an exact-signature group would split them and let a consistent wrong group win
            outputs = {sig: sig.split("\x1f") for sig in groups}
            agreement = {
                g: sum(
                    len(groups[h])
                    for j, out in enumerate(outputs[g])
                    for h in groups
                    if passes[h] == passes[g] and outputs[h][j : j + 1] == [out]
                )
                for g in groups
            }
            best = max(groups, key=lambda g: (passes[g], agreement[g], len(groups[g]), -groups[g][0]))
            winner = ballots[i][groups[best][0]]
            results.append(
                Result(
                    text=self.task.format_answer(winner),
                    answer=winner,
                    code=winner,
                    note=f"behaviour groups {[len(v) for v in groups.values()]}, "
                    f"winner passes examples: {passes[best]}",
                )
            )
        return results

    # ---------------------------------------------------------------------------- operators
    def _op_generate(self, node, problems, inputs, ctx, traces):
        rows = list(range(len(problems)))
        reqs = [self._request(node, self._messages(node, problems[i], inputs[i]), ctx, problems[i]) for i in rows]
        outs = self._call(node, reqs, ctx, traces, rows)
        return [self._text_result(c) for c in outs]

    _op_cot = _op_generate

    def _op_vote(self, node, problems, inputs, ctx, traces):
        samples = int(node.params.get("samples", 3 if not any(inputs) else 0))
        if samples == 0 and inputs and all(len(x) == 1 for x in inputs):
            # One ballot and no samples: it wins. Its input's result goes on unchanged (text and
            # program too: a later refine reads the text, a later test the program), so the vote
            # computes what the workflow without it does, and shares its hash (Workflow.canonical).
            return [dataclasses.replace(x[0], note="one ballot: the input's result") for x in inputs]
        ballots: list[list[str]] = [[h.answer for h in inputs[i] if h.answer is not None] for i in range(len(problems))]
        texts: list[list[str]] = [[] for _ in problems]
        if samples > 0:
            pairs = [(i, j) for i in range(len(problems)) for j in range(samples)]
            rows = [i for i, _ in pairs]
            # k is the sample index within its problem, so a problem's samples do not depend on
            # which other problems share the batch (the cache stores traces per problem)
            reqs = [
                self._request(
                    node, self._messages(node, problems[i], []), ctx, problems[i], k=j, default_temperature=0.7
                )
                for i, j in pairs
            ]
            outs = self._call(node, reqs, ctx, traces, rows)
            for i, c in zip(rows, outs):
                if c.error is not None:
                    continue
                texts[i].append(c.text)
                answer = self.task.extract_answer(c.text)
                if answer is not None:
                    ballots[i].append(answer)
        if self.task.domain == "code":
            return self._vote_by_behaviour(problems, ballots, texts)
        results = []
        for i in range(len(problems)):
            if not ballots[i]:
                results.append(Result(text=texts[i][0] if texts[i] else "", note="no ballots"))
                continue
            counts = Counter(self.task.answer_key(b) for b in ballots[i])
            best = max(counts.values())
            # the first ballot seen among the most frequent, as written (a key need not be printable)
            winner = next(b for b in ballots[i] if counts[self.task.answer_key(b)] == best)
            results.append(Result(text=self.task.format_answer(winner), answer=winner, note=f"votes {dict(counts)}"))
        return results

    def _op_programmer(self, node, problems, inputs, ctx, traces):
        retries = int(node.params.get("retries", 1))
        conversations = [self._messages(node, problems[i], inputs[i]) for i in range(len(problems))]
        results: list[Result | None] = [None] * len(problems)
        pending = list(range(len(problems)))
        last_text = [""] * len(problems)
        for attempt in range(retries + 1):
            if not pending:
                break
            reqs = [self._request(node, conversations[i], ctx, problems[i], k=attempt) for i in pending]
            outs = self._call(node, reqs, ctx, traces, pending)
            for i, c in zip(pending, outs):
                if c.error is not None:  # the call itself failed: this problem gets no program
                    results[i] = Result(text="", answer=None, note=f"call failed: {c.error[:200]}")
            kept = [(i, c) for i, c in zip(pending, outs) if c.error is None]
            pending, outs = [i for i, _ in kept], [c for _, c in kept]
            # The whole reply when it has no fence, but never a reasoning model's <think> drafts.
            codes = [extract_code(c.text) or strip_reasoning(c.text).strip() for c in outs]
            runs = self._run_programs([self.task.program_for(code, problems[i]) for code, i in zip(codes, pending)])
            still = []
            for i, c, code, run in zip(pending, outs, codes, runs):
                last_text[i] = c.text
                if self.task.domain == "code":
                    answer = code if run.returncode == 0 else None
                else:
                    answer = self.task.answer_from_stdout(run.stdout) if run.returncode == 0 else None
                if answer is not None:
                    results[i] = Result(
                        text=self.task.format_answer(answer),
                        answer=answer,
                        code=code,
                        note=f"ran ok (attempt {attempt + 1})",
                    )
                    continue
                error = _error_tail(run) if run.returncode != 0 else "the program printed no answer"
                conversations[i] = conversations[i] + [
                    self._assistant(node, c.text),
                    {"role": "user", "content": f"Running it failed: {error}\nFix the code."},
                ]
                still.append(i)
            pending = still
        for i in pending:
            results[i] = Result(
                text=last_text[i], answer=None, code=extract_code(last_text[i]), note="no working program"
            )
        return results  # type: ignore[return-value]

    def _op_refine(self, node, problems, inputs, ctx, traces):
        prompt = node.prompt or self.prompts["refine"]
        rows = list(range(len(problems)))
        reqs = []
        for i in rows:
            prev = inputs[i][0]
            messages = [
                {"role": "user", "content": self.task.user_message(problems[i])},
                self._assistant(node, prev.text),
                {"role": "user", "content": prompt},
            ]
            reqs.append(self._request(node, messages, ctx, problems[i]))
        outs = self._call(node, reqs, ctx, traces, rows)
        results = []
        for i, c in zip(rows, outs):
            new = self._text_result(c)
            prev = inputs[i][0]
            if new.answer is None:
                results.append(Result(prev.text, prev.answer, prev.code, note="refine unusable; kept input"))
            else:
                same = prev.answer is not None and self.task.answer_key(new.answer) == self.task.answer_key(prev.answer)
                new.note = "confirmed" if same else "changed"
                results.append(new)
        return results

    def _op_test(self, node, problems, inputs, ctx, traces):
        retries = int(node.params.get("retries", 1))
        current = [inputs[i][0] for i in range(len(problems))]
        pending = [
            i for i in range(len(problems)) if current[i].code or (self.task.domain == "code" and current[i].answer)
        ]
        tests = {i: self._example_tests(problems[i]) for i in pending}
        # per problem, the attempt that passed the most examples so far: (passed, round, result);
        # a later one replaces it only by passing more, so the input wins ties
        best: dict[int, tuple[int, int, Result]] = {}
        totals: dict[int, int] = {}
        for attempt in range(retries + 1):
            if not pending:
                break
            programs = []
            # the marker proves the examples ran: a program that exits 0 before them (a
            # `__main__` block calling sys.exit) did not pass them; a fresh one per run, so a
            # program cannot print it itself
            marker = f"__hflow_examples_ran_{secrets.token_hex(8)}__"
            for i in pending:
                code = current[i].answer if self.task.domain == "code" and current[i].answer else current[i].code
                program = self.task.program_for(code, problems[i])
                if tests[i]:
                    harness, totals[i] = _example_harness(tests[i], marker)
                    program += harness
                programs.append(program)
            runs = self._run_programs(programs)
            # without examples: a program that runs passes, one that does not (-1) ties with the rest
            counts = {
                i: _examples_passed(run.stdout, marker, totals[i]) if tests[i] else -1 for i, run in zip(pending, runs)
            }
            passed = {
                i: run.returncode == 0 and (not tests[i] or counts[i] == totals[i]) for i, run in zip(pending, runs)
            }
            failed = [(i, run) for i, run in zip(pending, runs) if not passed[i]]
            for i in pending:
                if passed[i]:
                    current[i] = Result(
                        current[i].text, current[i].answer, current[i].code, note=f"tests pass (round {attempt})"
                    )
                elif i not in best or counts[i] > best[i][0]:
                    best[i] = (counts[i], attempt, current[i])
            if not failed or attempt == retries:
                for i, _run in failed:
                    n, k, kept = best[i]
                    if not tests[i]:
                        what = "no examples, it does not run"
                    elif n < 0:
                        what = "it does not reach the examples"
                    else:
                        what = f"{n}/{totals[i]} examples pass"
                    current[i] = Result(kept.text, kept.answer, kept.code, note=f"tests fail; kept round {k} ({what})")
                break
            prompt = node.prompt or self.prompts["test"]
            reqs = []
            for i, run in failed:
                messages = [
                    {"role": "user", "content": self.task.user_message(problems[i])},
                    self._assistant(node, current[i].text),
                    {"role": "user", "content": f"{prompt}\n{_error_tail(run)}"},
                ]
                reqs.append(self._request(node, messages, ctx, problems[i], k=attempt))
            outs = self._call(node, reqs, ctx, traces, [i for i, _ in failed])
            for (i, _), c in zip(failed, outs):
                fixed = self._text_result(c)
                if fixed.code or fixed.answer:
                    current[i] = fixed
            pending = [i for i, _ in failed]
        return current

    def _episode_turns(
        self, node, episodes, rows, problems, ctx, traces, max_turns: int, user_turns: bool = False
    ) -> None:
        """Advance ``episodes`` (of problems ``rows``) up to ``max_turns`` turns with the shared agent turn;
        with ``user_turns``, an answered episode hears the task's next user turn (BFCL), as in the rollouts."""
        row_of = {id(e.messages): r for e, r in zip(episodes, rows)}
        tools_of = {id(e.messages): offered_tools(e, self.task.tools) for e in episodes}
        max_tokens = int(node.params.get("max_tokens", self.max_tokens.get(node.op, 48)))
        temperature = float(node.params.get("temperature", 0.0))

        def generate(conversations, tools):
            rs = [row_of[id(m)] for m in conversations]
            turn = {id(e.messages): e.turns for e in episodes}
            requests = [
                Request(
                    messages=list(m),
                    max_tokens=max_tokens,
                    temperature=temperature,
                    # canonical node id and the turn: equivalent workflows draw the same samples
                    seed=request_seed(
                        ctx["workflow"], ctx["ids"][node.id], problems[r]["id"], turn[id(m)], ctx.get("salt", 0)
                    ),
                    tools=tools_of[id(m)] or None,
                )
                for m, r in zip(conversations, rs)
            ]
            outs = self._call(node, requests, ctx, traces, rs)
            return [ModelReply(c.text, c.tool_calls, c.truncated, c.error) for c in outs]

        for _ in range(max_turns):
            if all(e.finished for e in episodes):
                break
            for step in agent_turn(episodes, generate, self.task.tools):
                if user_turns and step.finished:
                    next_user_turn(self.task, step.episode)

    def _episode_result(self, episode: AgentEpisode, skip: int = 0) -> Result:
        """The result of an episode: its transcript from message ``skip`` on (the trace a rater and
        the optimizer read), its final reply as the answer, and the episode itself for scoring."""
        last = episode.messages[-1] if episode.messages else {}
        answer = (last.get("content") or "") if episode.answered else None
        how = "answered" if episode.answered else ("cut off" if episode.truncated else "ran out of turns")
        if episode.error:
            how = f"call failed: {episode.error[:200]}"
        note = f"{episode.turns} turns, {episode.calls} calls, {episode.errors} errors; {how}"
        preambles = {i - skip: text for i, text in episode.preambles.items() if i >= skip}
        return Result(episode_transcript(episode.messages[skip:], preambles), answer, None, note, episode)

    def _agent_params(self, node: Node) -> tuple[int, int | None]:
        defaults = PARAM_DEFAULTS[node.op]
        max_turns = int(node.params.get("max_turns", defaults["max_turns"]))
        calls = node.params.get("max_tool_calls", defaults["max_tool_calls"])
        if max_turns < 1 or (calls is not None and int(calls) < 0):
            raise WorkflowError(f"{node.op} node {node.id!r}: max_turns must be >= 1 and max_tool_calls >= 0")
        return max_turns, None if calls is None else int(calls)

    def _assistant(self, node: Node, text: str) -> dict:
        """A completion sent back as the assistant's message (a retry, a refine, a test fix): a
        Solar-Open or gpt-oss completion comes with its marker tokens, which as content would render a
        second assistant turn inside the message (gpt-oss's template refuses its channel header); its
        reasoning goes where the template reads it (:func:`~lightning_agents.rollout.agent_turn.reply_message`)."""
        return reply_message(text, self._tool_call_style(node))

    def _tool_call_style(self, node: Node) -> str:
        """How the node's backbone writes tool calls: a local model in its chat template's format;
        an endpoint returns them parsed (its text, when it does not, is read as ``<tool_call>``)."""
        return getattr(self.pool.get(node.backbone), "tool_call_style", "hermes")

    def _calls_per_turn(self, node: Node) -> int | None:
        """Tool calls the node's backbone can render per assistant message (a local model's chat
        template may allow one; an endpoint's server renders its own template: ``None``)."""
        return getattr(self.pool.get(node.backbone), "calls_per_turn", None)

    def _alphanumeric_ids(self, node: Node) -> bool | None:
        """Whether the node's backbone's chat template takes only nine-character alphanumeric call
        ids (Mistral's raise on any other, vLLM's Mistral v0.3 template on fewer than nine): the ids
        its episodes write then take that form. A backbone may state it (``alphanumeric_ids``); a
        local model's template is probed once per template; an endpoint renders its own (``None``:
        as the tool-call style writes them)."""
        backbone = self.pool.get(node.backbone)
        stated = getattr(backbone, "alphanumeric_ids", None)
        if stated is not None:
            return stated
        probe = getattr(backbone, "_template_fact", None)  # LocalHFBackbone's per-template cache
        return None if probe is None else probe("alphanumeric_ids", model_needs_alphanumeric_ids)

    def _notice_role(self, node: Node) -> str:
        """The role of a malformed call's notice in a turn without calls on the node's backbone
        (:func:`~lightning_agents.rollout.agent_turn.model_notice_role`): a local model's template is
        probed once per template (Gemma 4's shows no lone tool message: a user message); an endpoint
        parses its calls itself (``"tool"``)."""
        probe = getattr(self.pool.get(node.backbone), "_template_fact", None)  # LocalHFBackbone's cache
        return "tool" if probe is None else probe("notice_role", model_notice_role)

    def _call_format(self, node: Node) -> str | None:
        """How a malformed call's notice says calls are written on the node's backbone
        (:func:`~lightning_agents.rollout.agent_turn.model_call_format`: Mistral Small 3.2's
        ``NAME[ARGS]{...}``), probed once per template; an endpoint: the style's own form (``None``)."""
        probe = getattr(self.pool.get(node.backbone), "_template_fact", None)  # LocalHFBackbone's cache
        return None if probe is None else probe("call_format", model_call_format)

    def _check_tool_results(self, node: Node, episodes: list[AgentEpisode]) -> None:
        """Refuse, before any call, a backbone whose chat template leaves tool results out of the
        prompt (Phi-3.5's) on episodes with tools: its model would go on without seeing them while
        the trace records them as seen. An endpoint renders on its server: not checked."""
        if not any(offered_tools(e, self.task.tools) for e in episodes):
            return
        if getattr(self.pool.get(node.backbone), "renders_tool_results", None) is False:
            raise WorkflowError(
                f"{node.op} node {node.id!r}: backbone {node.backbone!r}'s chat template does not render "
                "'tool' messages, so its model would continue without seeing what its tool calls returned; "
                "give the node a backbone whose template renders tool results"
            )

    def _op_agent(self, node, problems, inputs, ctx, traces):
        max_turns, max_calls = self._agent_params(node)
        style = self._tool_call_style(node)
        per_turn = self._calls_per_turn(node)  # once per node: a local backbone's probe shares its generation lock
        nine = self._alphanumeric_ids(node)
        notice_role = self._notice_role(node)
        call_format = self._call_format(node)
        episodes = []
        for p in problems:
            opening = self.task.prompt(p)
            if node.prompt:
                # the node's system prompt takes the place of the task's own
                opening = [{"role": "system", "content": node.prompt}] + [m for m in opening if m["role"] != "system"]
            episodes.append(
                start_episode(
                    self.task,
                    p,
                    messages=opening,
                    max_tool_calls=max_calls,
                    tool_call_style=style,
                    calls_per_turn=per_turn,
                    alphanumeric_ids=nine,
                    notice_role=notice_role,
                    call_format=call_format,
                )
            )
        self._check_tool_results(node, episodes)
        # The task's later user turns come in the agent's own episode only: after a verify node's
        # instruction the conversation no longer holds just the task's turns.
        self._episode_turns(node, episodes, list(range(len(problems))), problems, ctx, traces, max_turns, True)
        return [self._episode_result(e) for e in episodes]

    def _op_verify(self, node, problems, inputs, ctx, traces):
        max_turns, max_calls = self._agent_params(node)
        when = node.params.get("when", PARAM_DEFAULTS["verify"]["when"])
        if when not in _VERIFY_WHEN:
            raise WorkflowError(f"verify node {node.id!r}: when must be one of {_VERIFY_WHEN}, got {when!r}")
        prompt = node.prompt or self.prompts["verify"]
        style = self._tool_call_style(node)
        per_turn = self._calls_per_turn(node)
        nine = self._alphanumeric_ids(node)
        notice_role = self._notice_role(node)
        call_format = self._call_format(node)
        results: list[Result] = []
        todo: list[tuple[int, AgentEpisode, int]] = []
        for i in range(len(problems)):
            prev = inputs[i][0]
            if prev.episode is None:
                results.append(Result(prev.text, prev.answer, prev.code, "no episode to verify"))
                continue
            # a copy: the upstream result keeps the episode it ended with
            episode = copy.deepcopy(prev.episode)
            wanted = when == "always" or not episode.answered or (when == "errors" and episode.errors > 0)
            if not wanted:
                results.append(Result(prev.text, prev.answer, prev.code, "left as it was", episode))
                continue
            skip = len(episode.messages)
            episode.messages.append({"role": "user", "content": _fill_question(prompt, self.task, problems[i])})
            episode.reopen()
            episode.tool_call_style = style  # this node's model writes the calls from here on
            episode.calls_per_turn = per_turn
            episode.alphanumeric_ids = nine
            episode.notice_role = notice_role
            episode.call_format = call_format
            if max_calls is not None:
                episode.max_tool_calls = episode.calls + max_calls  # this node's own budget of calls
            todo.append((i, episode, skip))
            results.append(Result())
        if todo:
            episodes = [e for _, e, _ in todo]
            self._check_tool_results(node, episodes)
            self._episode_turns(node, episodes, [i for i, _, _ in todo], problems, ctx, traces, max_turns)
            for i, episode, skip in todo:
                results[i] = self._episode_result(episode, skip)
        return results

    def _op_format(self, node, problems, inputs, ctx, traces):
        template = node.prompt or None
        results = []
        for i in range(len(problems)):
            prev = inputs[i][0]
            if prev.answer is None:
                results.append(Result(prev.text, None, prev.code, note="nothing to format"))
                continue
            try:
                text = self.task.format_answer(prev.answer, template)
            except (KeyError, IndexError, ValueError):
                text = self.task.format_answer(prev.answer)  # a broken template must not lose the answer
            results.append(Result(text, prev.answer, prev.code, note="formatted"))
        return results

    # ------------------------------------------------------------------------------- public
    def run(
        self, workflow: Workflow, problems: list[dict[str, Any]], generation: int = 0, salt: int = 0
    ) -> list[Trace]:
        """Run ``workflow`` on every problem and score it.

        Args:
            workflow: a valid workflow (validated against the pool here).
            problems: task problems.
            generation: generation number the calls are booked under.
            salt: extra seed material (0 keeps runs of the same workflow identical).

        Returns:
            One scored :class:`Trace` per problem, in order.
        """
        workflow.validate(self.pool.names)
        if (
            has_tools(self.task)
            and workflow.node(workflow.output).op not in AGENT_OPERATORS
            and not self._scores_text()
        ):
            raise WorkflowError(
                f"task {self.task.name!r} scores episodes in its world: the workflow's output must be an "
                f"{' or '.join(AGENT_OPERATORS)} node, not {workflow.node(workflow.output).op!r}"
            )
        ctx = {"workflow": workflow.hash(), "ids": workflow.canonical_ids(), "generation": generation, "salt": salt}
        traces = [Trace(problem_id=p["id"]) for p in problems]
        if not problems:
            return traces
        results: dict[str, list[Result]] = {}
        for node_id in workflow.topological_order():
            node = workflow.node(node_id)
            preds = workflow.predecessors(node_id)
            inputs = [[results[p][i] for p in preds] for i in range(len(problems))]
            out = getattr(self, f"_op_{node.op}")(node, problems, inputs, ctx, traces)
            results[node_id] = out
            for t, r in zip(traces, out):
                t.steps.append(
                    {
                        "node": node_id,
                        "op": node.op,
                        "backbone": node.backbone,
                        "text": r.text,
                        "answer": r.answer,
                        "code": r.code,
                        "note": r.note,
                    }
                )
        final = results[workflow.output]
        for t, r, p in zip(traces, final, problems):
            t.output, t.answer = r.text, r.answer
            # an episode is scored as the rollouts score it: the task checks the whole episode
            t.score = (
                score_episode(self.task, r.episode) if r.episode is not None else float(self.task.score(r.text, p))
            )
        return traces

    def _scores_text(self) -> bool:
        """Whether the task can score a single answer text (a task with tools may check only episodes)."""
        if self._text_scorable is None:
            probe = self.task.problems[0] if self.task.problems else None
            self._text_scorable = True
            if probe is not None:
                try:
                    self.task.score("", probe)
                except VerifierError:
                    self._text_scorable = False
                except Exception:  # noqa: BLE001 - a failure about the empty text says nothing here
                    pass
        return self._text_scorable
