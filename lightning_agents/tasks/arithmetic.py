"""The embedded task: seeded arithmetic word problems, their exact verifier, the calculator world.

Everything here is pure Python so the task can be generated, checked and served to any model
(the tiny embedded checkpoints or a real one) without torch. The splits are disjoint by
construction: every question is drawn from a seed stream of its own and questions that occur in
an earlier split are dropped.
"""

from __future__ import annotations

import ast
import hashlib
import json
import operator
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from lightning_agents.tasks.answers import extract_stated_answer
from lightning_agents.tasks.base import Problem, Task
from lightning_agents.tasks.tools import ToolWorld, parse_arguments

__all__ = [
    "ArithmeticTask",
    "ArithmeticVerifier",
    "CALCULATOR_TOOL",
    "CalculatorTask",
    "CalculatorWorld",
    "PROGRAM_SYSTEM_PROMPT",
    "SPLIT_SIZES",
    "arithmetic_conversation",
    "calculator",
    "extract_final_answer",
    "make_arithmetic_split",
]

# Sizes used when a caller does not ask for a count. Test is large enough that one problem moves
# accuracy by 0.2 points, small enough to evaluate on a CPU in seconds.
SPLIT_SIZES = {"train": 20000, "val": 200, "test": 500}
_SPLIT_SEEDS = {"train": 1013, "val": 2027, "test": 3041}

PROGRAM_SYSTEM_PROMPT = "Write Python code that prints the answer."

CALCULATOR_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "calculator",
        "description": "Evaluate an arithmetic expression with + - * / and parentheses.",
        "parameters": {
            "type": "object",
            "properties": {"expression": {"type": "string", "description": "for example 37 + 48"}},
            "required": ["expression"],
        },
    },
}

_NAMES = ["Ava", "Ben", "Cleo", "Dan", "Eli", "Fay", "Gus", "Hana", "Ivo", "Jun", "Kai", "Lea", "Max", "Nia"]
_ITEMS = ["apples", "coins", "books", "stamps", "cards", "shells", "pens", "marbles", "stones", "tickets"]


@dataclass(frozen=True)
class _Template:
    """One kind of problem: how to draw operands, phrase the question and write the expression."""

    kind: str
    draw: Callable[[random.Random], tuple[int, ...]]
    text: str
    expression: str


def _two(lo: int, hi: int, lo2: int | None = None, hi2: int | None = None):
    return lambda rng: (rng.randint(lo, hi), rng.randint(lo if lo2 is None else lo2, hi if hi2 is None else hi2))


def _sub(rng: random.Random) -> tuple[int, int]:
    return rng.randint(10, 99), rng.randint(1, 9)


# The mix is a difficulty ladder that leaves a tiny student room to improve: one-digit facts are
# memorised quickly, sums and differences with a two-digit operand need carries, and two-digit plus
# two-digit sums need a stronger model.
_TEMPLATES = [
    _Template("add1", _two(1, 9), "{n} has {a} {i} and gets {b} more. How many {i} does {n} have now?", "{a} + {b}"),
    _Template("mul1", _two(2, 9), "{n} buys {a} boxes with {b} {i} each. How many {i} does {n} buy?", "{a} * {b}"),
    _Template(
        "add21", _two(10, 99, 1, 9), "{n} had {a} {i} and found {b} more. How many {i} are there in total?", "{a} + {b}"
    ),
    _Template("sub21", _sub, "{n} had {a} {i} and gave away {b}. How many {i} are left?", "{a} - {b}"),
    _Template(
        "add22", _two(10, 99), "{n} collects {a} {i} on Monday and {b} on Tuesday. How many {i} is that?", "{a} + {b}"
    ),
]


def _question_key(question: str) -> str:
    return hashlib.sha1(question.encode()).hexdigest()[:12]


def _generate(seed: int, n: int, exclude: set[str]) -> list[dict[str, str]]:
    rng = random.Random(seed)
    records: list[dict[str, str]] = []
    seen = set(exclude)
    attempts = 0
    while len(records) < n:
        attempts += 1
        if attempts > 50 * n + 1000:
            raise ValueError(f"could not draw {n} distinct problems (got {len(records)}); ask for fewer")
        template = rng.choice(_TEMPLATES)
        values = template.draw(rng)
        fields = {"a": values[0], "b": values[1], "n": rng.choice(_NAMES), "i": rng.choice(_ITEMS)}
        question = template.text.format(**fields)
        key = _question_key(question)
        if key in seen:
            continue
        seen.add(key)
        expression = template.expression.format(**fields)
        records.append(
            {
                "id": f"arith-{key}",
                "question": question,
                "expression": expression,
                "answer": calculator(expression),
                "kind": template.kind,
            }
        )
    return records


_SPLIT_CACHE: dict[tuple[str, int, int], list[dict[str, str]]] = {}


def make_arithmetic_split(split: str, n: int | None = None, seed: int | None = None) -> list[dict[str, str]]:
    """Return the problems of one split of the embedded task.

    Args:
        split: ``"train"``, ``"val"`` or ``"test"``. Val and test never contain a question of the
            splits before them (train, then val), so held-out accuracy is really held out.
        n: number of problems; defaults to ``SPLIT_SIZES[split]``.
        seed: override the split's fixed seed (for extra, differently drawn training sets).

    Returns:
        A list of dicts with ``id``, ``question``, ``expression``, ``answer`` (an integer as a
        string) and ``kind`` (the template family).
    """
    if split not in _SPLIT_SEEDS:
        raise ValueError(f"unknown split {split!r}; expected one of {sorted(_SPLIT_SEEDS)}")
    n = SPLIT_SIZES[split] if n is None else n
    seed = _SPLIT_SEEDS[split] if seed is None else seed
    cache_key = (split, n, seed)
    if cache_key not in _SPLIT_CACHE:
        exclude: set[str] = set()
        # Earlier splits are excluded at their default size so the held-out guarantee holds for
        # the splits the library itself uses.
        for earlier in ("train", "val"):
            if earlier == split:
                break
            exclude.update(r["id"][len("arith-") :] for r in make_arithmetic_split(earlier))
        _SPLIT_CACHE[cache_key] = _generate(seed, n, exclude)
    return [dict(r) for r in _SPLIT_CACHE[cache_key]]


_BINARY_OPS: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
}


def _evaluate(node: ast.AST) -> float | int:
    if isinstance(node, ast.Expression):
        return _evaluate(node.body)
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = _evaluate(node.operand)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY_OPS:
        return _BINARY_OPS[type(node.op)](_evaluate(node.left), _evaluate(node.right))
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow):
        base, exponent = _evaluate(node.left), _evaluate(node.right)
        # An unbounded power is the one way a tiny expression can hang the caller.
        if abs(exponent) > 64:
            raise ValueError("exponent too large")
        return base**exponent
    raise ValueError(f"unsupported expression element {type(node).__name__}")


def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression safely (numbers, + - * / // % **, parentheses).

    Args:
        expression: the expression text, for example ``"37 + 48"``.

    Returns:
        The result as text: an integer when the value is integral, else a float rounded to 6
        places, or ``"error: ..."`` for anything that is not a valid expression. Errors are
        returned, not raised, because the result goes back to a model as a tool message.
    """
    try:
        value = _evaluate(ast.parse(str(expression).replace(",", ""), mode="eval"))
    except ZeroDivisionError:
        return "error: division by zero"
    # MemoryError: the parser's answer to thousands of stacked unary operators
    except (SyntaxError, ValueError, TypeError, OverflowError, RecursionError, MemoryError) as exc:
        return f"error: {str(exc) or type(exc).__name__}"
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            return "error: not a finite number"
        if value.is_integer():
            return str(int(value))
        return str(round(value, 6))
    return str(value)


def extract_final_answer(completion: str) -> str | None:
    """The number stated last as ``The answer is N`` (commas removed), else ``None``."""
    return extract_stated_answer(completion)


class ArithmeticVerifier:
    """Exact-match verifier of the embedded task: 1.0 when the stated final answer equals the gold.

    The model must state its answer as ``The answer is N``; a bare number or an answer hidden in
    other text scores 0, which keeps the reward unambiguous for RL.
    """

    def __call__(self, completion: str, reference: str) -> float:
        """Score ``completion`` against the gold integer ``reference``."""
        predicted = extract_final_answer(completion)
        if predicted is None:
            return 0.0
        try:
            return float(int(predicted) == int(str(reference).replace(",", "")))
        except ValueError:
            return 0.0


def arithmetic_conversation(record: dict[str, str], style: str = "direct") -> dict[str, Any]:
    """The gold conversation for one problem, in OpenAI message format.

    Args:
        record: a problem from :func:`make_arithmetic_split`.
        style: ``"direct"`` (one message: the expression, its value, then ``The answer is N.``),
            ``"tool"`` (call the calculator, read the tool message, then answer; the conversation
            carries ``tools``) or ``"program"`` (a system prompt asks for a Python program that
            prints the answer).

    Returns:
        ``{"messages": [...]}`` plus ``"tools"`` for the tool style.
    """
    question = {"role": "user", "content": record["question"]}
    final = {"role": "assistant", "content": f"The answer is {record['answer']}."}
    if style == "direct":
        # Writing the expression first puts the operands next to the digits being produced, which
        # is what makes multi-digit arithmetic learnable for a model of a few hundred thousand weights.
        worked = {
            "role": "assistant",
            "content": f"{record['expression']} = {record['answer']}. The answer is {record['answer']}.",
        }
        return {"messages": [question, worked]}
    if style == "tool":
        call = {
            "id": f"call_{record['id'][-6:]}",
            "type": "function",
            "function": {"name": "calculator", "arguments": json.dumps({"expression": record["expression"]})},
        }
        return {
            "messages": [
                question,
                {"role": "assistant", "content": "", "tool_calls": [call]},
                {"role": "tool", "tool_call_id": call["id"], "name": "calculator", "content": record["answer"]},
                final,
            ],
            "tools": [CALCULATOR_TOOL],
        }
    if style == "program":
        program = f"```python\nprint({record['expression']})\n```"
        return {
            "messages": [
                {"role": "system", "content": PROGRAM_SYSTEM_PROMPT},
                question,
                {"role": "assistant", "content": program},
            ]
        }
    raise ValueError(f"unknown conversation style {style!r}; expected direct, tool or program")


class ArithmeticTask(Task):
    """The embedded arithmetic word problems, answered as ``The answer is N`` (or by a program).

    Args:
        split: ``train``, ``val`` or ``test``.
        n: number of problems (``None``: the split's default size).
        seed: draw a different set of problems than the split's default (e.g. a "related task").
        name: task name (default ``arithmetic-<split>``).
        style: ``direct`` (answer in text, :class:`ArithmeticVerifier`) or ``program`` (a system
            prompt asks for a Python program; scored by running it, ``ProgramOutputVerifier``).
    """

    default_name = "arithmetic"

    def __init__(
        self,
        split: str = "val",
        n: int | None = None,
        seed: int | None = None,
        name: str | None = None,
        style: Literal["direct", "program"] = "direct",
    ) -> None:
        if style not in ("direct", "program"):
            raise ValueError(f"ArithmeticTask style must be 'direct' or 'program', got {style!r}")
        super().__init__(split, n, seed, name or f"arithmetic-{split}" + (f"-s{seed}" if seed is not None else ""))
        self.style = style
        self.system_prompt = PROGRAM_SYSTEM_PROMPT if style == "program" else None
        self._verifier = ArithmeticVerifier()

    def load(self, split: str) -> list[Problem]:
        return self.get_problems(split)

    def get_problems(self, split: str | None = None, n: int | None = None, seed: int | None = None) -> list[Problem]:
        """The first ``n`` problems of the split's generator (already a random draw, so ``seed`` is not
        needed; the constructor's ``seed`` picks a different draw, see :func:`make_arithmetic_split`)."""
        records = make_arithmetic_split(split or self.split_name, n=n, seed=self.seed)
        return [{**r, "reference": r["answer"]} for r in records]

    def conversation(self, problem: Problem, style: str | None = None) -> dict[str, Any]:
        """The gold conversation (see :func:`arithmetic_conversation`) in this task's style or ``style``."""
        return arithmetic_conversation(problem, style or self.style)

    def check(self, completion: str, reference: str) -> float:
        if self.style == "program":
            from lightning_agents.rewards.code import ProgramOutputVerifier

            return float(ProgramOutputVerifier()(completion, reference))
        return float(self._verifier(completion, reference))

    def verifier_spec(self) -> str:
        if self.style == "program":
            return "lightning_agents.rewards.ProgramOutputVerifier"
        return "lightning_agents.rewards.ArithmeticVerifier"


@dataclass
class CalculatorWorld(ToolWorld):
    """The embedded task's world: one ``calculator`` tool with an ``expression`` argument.

    Bad calls (unknown tool, arguments that are not a JSON object, no expression, an expression
    the calculator rejects) return an ``error: ...`` observation, so a model can see its mistake
    and retry, which is what TopoCurate's recovery metric looks for.

    Args:
        tools: the tool schemas offered to the model.
    """

    tools: list[dict[str, Any]] = field(default_factory=lambda: [CALCULATOR_TOOL])

    def execute(self, name: str, arguments: str | dict) -> tuple[str, bool]:
        """Evaluate a ``calculator`` call."""
        if name != "calculator":
            return f"error: unknown tool {name!r}; the only tool is 'calculator'", True
        arguments, error = parse_arguments(arguments)
        if error:
            return error, True
        if not isinstance(arguments.get("expression"), (str, int, float)):
            return "error: calculator needs an 'expression' string argument", True
        result = calculator(str(arguments["expression"]))
        return result, result.startswith("error:")


class CalculatorTask(ArithmeticTask):
    """The embedded arithmetic problems with the calculator tool: call it, read the result, answer.

    Args:
        split: ``train``, ``val`` or ``test``.
        n: number of problems (``None``: the split's default size).
        seed: draw a different set of problems than the split's default.
        name: task name (default ``calculator-<split>``).
    """

    default_name = "calculator"
    domain = "agent"
    tools = [CALCULATOR_TOOL]

    def __init__(
        self, split: str = "val", n: int | None = None, seed: int | None = None, name: str | None = None
    ) -> None:
        super().__init__(split, n, seed, name or f"calculator-{split}")

    def conversation(self, problem: Problem, style: str | None = None) -> dict[str, Any]:
        return arithmetic_conversation(problem, style or "tool")

    def environment(self, problem: Problem) -> CalculatorWorld:
        return CalculatorWorld()
