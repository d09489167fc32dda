"""The ``Task`` interface: where problems come from, how a model is prompted, how an answer is verified.

One class per task serves every method: RSTG's prompt data (:meth:`Task.prompt_record`), HFlow's
evaluation (:meth:`Task.score` and the operator hooks), ``lightning-agents rollout`` and the agent
loop (:attr:`Task.tools`, :meth:`Task.environment`, :meth:`Task.verify_episode`) and TopoCurate's
RL output (the rollouts name the task). A user's task subclasses :class:`Task` and is named by
class path in YAML. Pure Python: no torch, no Lightning.
"""

from __future__ import annotations

import random
from typing import Any, Literal

from lightning_agents.tasks.answers import extract_stated_answer, last_number
from lightning_agents.tasks.tools import ToolWorld

__all__ = ["Problem", "Task", "class_path"]

# A problem is a plain dict so that it travels through JSON files, DataLoaders and worker processes
# unchanged: ``id`` and ``question`` always, ``reference`` (what :meth:`Task.check` compares
# against, as text) always, anything else the task needs.
Problem = dict[str, Any]


def class_path(obj: Any) -> str:
    """``module.Class`` of an object or class, the form YAML configs and rollout files name it by."""
    cls = obj if isinstance(obj, type) else type(obj)
    return f"{cls.__module__}.{cls.__qualname__}"


class Task:
    """Base class of tasks.

    Subclasses implement :meth:`load` (all problems of a split) and :meth:`check` (score a
    completion against a reference); everything else has a default that suits single-turn tasks
    answered with ``The answer is N``. Tool-using tasks also set :attr:`tools` and return a fresh
    world from :meth:`environment`.

    A task object is also a verifier: ``task(completion, reference)`` is :meth:`check`, so RL
    records can name the task's class as their ``verifier``.

    Args:
        split: the split :attr:`problems` draws from (``train``, ``val`` or ``test``; a task with one
            file serves that file for every split).
        n: number of problems in :attr:`problems` (``None``: all of the split).
        seed: seed of the sample when ``n`` is smaller than the split.
        name: task name (memory keys, reports); default the class's :attr:`default_name`.
    """

    default_name = "task"
    #: ``math``, ``code`` or ``agent``; HFlow's experience memory keeps priors per domain.
    domain: Literal["math", "code", "agent"] = "math"
    #: OpenAI tool schemas offered to the model; empty for single-turn tasks.
    tools: list[dict[str, Any]] = []
    #: How a final answer is stated (HFlow's vote and format operators write answers this way).
    answer_template = "The answer is {answer}."
    #: System message put before every prompt (``None``: none).
    system_prompt: str | None = None

    def __init__(
        self, split: str = "val", n: int | None = None, seed: int | None = None, name: str | None = None
    ) -> None:
        if n is not None and n < 1:
            raise ValueError(f"{type(self).__name__}: n must be >= 1 or None, got {n}")
        self.split_name = split
        self.n = n
        self.seed = seed
        self.name = name or self.default_name
        self._problems: list[Problem] | None = None

    # -- problems -------------------------------------------------------------------------------
    def load(self, split: str) -> list[Problem]:
        """All problems of ``split`` as dicts with ``id``, ``question`` and ``reference``."""
        raise NotImplementedError(f"{type(self).__name__} must implement load(split)")

    def get_problems(self, split: str | None = None, n: int | None = None, seed: int | None = None) -> list[Problem]:
        """Problems of ``split`` (default :attr:`split_name`): all, or a seeded sample of ``n`` in a stable order."""
        problems = self.load(split or self.split_name)
        if not problems:
            raise ValueError(f"task {self.name!r} has no problems in split {split or self.split_name!r}")
        ids = [p["id"] for p in problems]
        if len(set(ids)) != len(ids):
            raise ValueError(f"task {self.name!r} has duplicate problem ids in split {split or self.split_name!r}")
        if n is None or n >= len(problems):
            return list(problems)
        return random.Random(seed or 0).sample(problems, n)

    @property
    def problems(self) -> list[Problem]:
        """The problems this task object was configured with (``split``, ``n``, ``seed``), loaded once."""
        if self._problems is None:
            self._problems = self.get_problems(self.split_name, self.n, self.seed)
        return self._problems

    @problems.setter
    def problems(self, problems: list[Problem]) -> None:
        # Narrowing a task to chosen problems (a test, a rater set) keeps every other behaviour.
        self._problems = list(problems)

    def sample(self, n: int | None, seed: int = 0) -> list[Problem]:
        """A seeded sample of ``n`` of :attr:`problems` (all when ``n`` is None or too large)."""
        if n is None or n >= len(self.problems):
            return list(self.problems)
        return random.Random(seed).sample(self.problems, n)

    def split(self, n_first: int, seed: int = 0) -> tuple[list[Problem], list[Problem]]:
        """Disjoint ``(first n_first, rest)`` of :attr:`problems` after a seeded shuffle (search set vs rater set)."""
        order = list(self.problems)
        random.Random(seed).shuffle(order)
        return order[:n_first], order[n_first:]

    # -- prompting ------------------------------------------------------------------------------
    def user_message(self, problem: Problem) -> str:
        """What the model sees as the user turn."""
        return problem["question"]

    def prompt(self, problem: Problem) -> list[dict[str, Any]]:
        """The prompt as OpenAI messages: :attr:`system_prompt` (when set), then the user turn."""
        messages = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        return messages + [{"role": "user", "content": self.user_message(problem)}]

    def conversation(self, problem: Problem) -> dict[str, Any]:
        """A gold conversation solving ``problem`` (``{"messages", "tools"?}``) for SFT; not every task has one."""
        raise NotImplementedError(f"{type(self).__name__} has no gold conversations")

    # -- verification ---------------------------------------------------------------------------
    def check(self, completion: str, reference: str) -> float:
        """Score ``completion`` against ``reference`` in [0, 1].

        Raises:
            lightning_agents.errors.VerifierError: the answer could not be verified (the checker
                itself failed); callers treat that as "no reward", never as 0.
        """
        raise NotImplementedError(f"{type(self).__name__} must implement check(completion, reference)")

    def __call__(self, completion: str, reference: str) -> float:
        """The task as a verifier: :meth:`check`."""
        return self.check(completion, reference)

    def verify(self, completion: str, problem: Problem) -> float:
        """Score a completion of ``problem``."""
        return self.check(completion, problem["reference"])

    def score(self, text: str, problem: Problem) -> float:
        """HFlow's name for :meth:`verify`: score a workflow's final text."""
        return float(self.verify(text, problem))

    def verifier_spec(self) -> str | dict[str, Any]:
        """What an RL record names as its ``verifier``: a class path or ``{class_path, init_args}``
        that builds a ``verifier(completion, reference)``. Default: this task's own class, built with
        its default arguments (override when :meth:`check` depends on constructor arguments)."""
        return class_path(self)

    def prompt_record(self, problem: Problem) -> dict[str, Any]:
        """The RL prompt record of ``problem``: ``{id, prompt, reference, verifier, task}`` plus its other fields."""
        extra = {k: v for k, v in problem.items() if k not in ("id", "question", "reference")}
        return {
            **extra,
            "id": str(problem["id"]),
            "prompt": self.prompt(problem),
            "reference": str(problem["reference"]),
            "verifier": self.verifier_spec(),
            "task": class_path(self),
        }

    # -- tools ----------------------------------------------------------------------------------
    def environment(self, problem: Problem) -> ToolWorld | None:
        """A fresh world for one episode of ``problem`` (``None`` for tasks without tools)."""
        return None

    def next_user_turn(
        self, messages: list[dict[str, Any]], world: ToolWorld | None, problem: Problem
    ) -> list[dict[str, Any]] | None:
        """The user's next messages once the model has answered without a call, or ``None``: the
        episode ends with that answer (the default). Tasks whose user speaks several times (BFCL's
        fixed multi-turn questions) return each turn in order, then ``None`` after the last."""
        return None

    def verify_episode(self, messages: list[dict[str, Any]], world: ToolWorld | None, problem: Problem) -> float:
        """Score a finished episode: by default the last assistant message with :meth:`verify`.
        Tasks whose success is a state of the world override this to check the world."""
        last = messages[-1] if messages else {}
        if last.get("role") != "assistant" or last.get("tool_calls"):
            return 0.0
        return float(self.verify(last.get("content") or "", problem))

    # -- HFlow operator hooks -------------------------------------------------------------------
    def extract_answer(self, text: str) -> str | None:
        """The answer stated in ``text``, in a form :meth:`format_answer` can state again (HFlow votes
        on it, grouping ballots by :meth:`answer_key`)."""
        return extract_stated_answer(text)

    def answer_key(self, answer: str) -> str:
        """What two answers must share to count as the same ballot in a vote (default: the answer)."""
        return answer

    def format_answer(self, answer: str, template: str | None = None) -> str:
        """A final statement of ``answer`` (``template`` with ``{answer}``, default :attr:`answer_template`)."""
        return (template or self.answer_template).format(answer=answer)

    def answer_from_stdout(self, stdout: str) -> str | None:
        """The answer a program printed: its last number."""
        return last_number(stdout)

    def program_for(self, code: str, problem: Problem) -> str:
        """The program the sandbox runs for a candidate's code (math: the code itself)."""
        return code

    def example_tests(self, problem: Problem) -> str | None:
        """Test code from the problem statement's examples (``None`` when it has none)."""
        return None

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, split={self.split_name!r}, n={self.n})"
