"""HumanEval-style code: complete a Python function; hidden ``check(entry_point)`` tests score it.

Records are ``{task_id, prompt, test, entry_point}`` (``canonical_solution`` optional; HumanEval-X's
Python rows, which name no ``entry_point``, take the one their test's ``check(<name>)`` call names). This is the
one place that builds the test program of a problem (``test`` + ``check(entry_point)``) and the
example tests of its docstring. Programs run in :mod:`lightning_agents.rewards.sandbox` through
:class:`~lightning_agents.rewards.CodeVerifier`.
"""

from __future__ import annotations

import math
from typing import Any

from lightning_agents.tasks._files import TaskDataError, iter_jsonl, split_file
from lightning_agents.tasks.base import Problem, Task
from lightning_agents.tasks.code_examples import example_assertions

__all__ = [
    "CANDIDATE_MODULE",
    "CODE_INSTRUCTION",
    "HumanEvalTask",
    "humaneval_problem",
    "humaneval_reference",
    "names_entry_point",
]

#: The ``__name__`` a HumanEval candidate runs under (see :class:`HumanEvalTask`'s ``module_name``).
#: Not ``"__main__"``: openai/human-eval's ``check_correctness`` (``human_eval/execution.py`` @
#: 6d43fb9) and evalplus's ``unsafe_execute`` (``evalplus/eval/__init__.py`` @ 26d6d00) run
#: ``exec(program, {})``, which never runs a main block: a wrong function replaced by a right one
#: inside ``if __name__ == "__main__":`` scored 1 here, and a right one whose main block reads
#: ``input()`` or runs a failing self-test scored 0. Not ``"builtins"`` (what those graders' name
#: resolves to) or another standard-library module's name either: the program's classes take
#: their ``__module__`` from it. ``"solution"``, as its file, ``solution.py``.
CANDIDATE_MODULE = "solution"

#: Fields of an evalplus release row that its RL prompt record leaves out (see
#: :meth:`HumanEvalTask.prompt_record`).
RELEASE_ONLY_FIELDS = ("base_input", "plus_input", "canonical_solution", "test", "assertion")

CODE_INSTRUCTION = (
    "Complete the following Python function. Answer with the full program (the function with "
    "its imports) in one ```python code block."
)


def humaneval_reference(test: str, entry_point: str, prompt: str | None = None) -> str:
    """The trusted test program for a candidate: the problem's ``check`` function, then ``check(entry_point)``.

    With ``prompt``, the prompt's helper functions and imports come first (e.g. HumanEval/32's
    ``poly``): the tests then use the trusted helpers instead of looking them up in the candidate,
    which could redefine them (see docs/sandbox.md). Tests that define no ``check`` (MBPP+ in
    evalplus's original format calls the function at module level) are used as they are. An
    entry point named like a built-in (MBPP's ``sum``) is named in a ``# la-candidate-names:`` line,
    or the tests would call Python's own.
    """
    import builtins

    helpers = _prompt_helpers(prompt, entry_point) if prompt else ""
    # HumanEval-X's tests end with their own check(<entry point>): a second call would run them twice
    call = f"\n\ncheck({entry_point})\n" if _defines_check(test) and not _checked_entry_point(test) else "\n"
    names = f"# la-candidate-names: {entry_point}\n" if hasattr(builtins, entry_point) else ""
    return f"{names}{helpers}\n\n{test}{call}" if helpers else f"{names}{test}{call}"


def _defines_check(test: str) -> bool:
    import ast

    try:
        tree = ast.parse(test)
    except SyntaxError:
        return True  # the harness reports the tests as broken either way
    return any(isinstance(node, ast.FunctionDef) and node.name == "check" for node in tree.body)


def _checked_entry_point(test: str) -> str | None:
    """The name a test's own module-level ``check(<name>)`` call passes (HumanEval-X's tests end
    with one and its rows have no ``entry_point`` field); None when it makes no such call."""
    import ast

    try:
        tree = ast.parse(test)
    except SyntaxError:
        return None
    names = [
        node.value.args[0].id
        for node in tree.body
        if isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Call)
        and isinstance(node.value.func, ast.Name)
        and node.value.func.id == "check"
        and len(node.value.args) == 1
        and isinstance(node.value.args[0], ast.Name)
    ]
    return names[-1] if names else None


def _prompt_helpers(prompt: str, entry_point: str) -> str:
    import ast

    try:
        tree = ast.parse(prompt)
    except SyntaxError:
        # A stub that ends at its `def ...:` line (BigCodeBench's code_prompt, every one of its 1,140)
        # does not parse; with a body it does, and its imports were lost with it (BigCodeBench/775's
        # tests use the prompt's `string` and scored a correct solution 0).
        last = prompt.rstrip().rsplit("\n", 1)[-1]
        indent = last[: len(last) - len(last.lstrip())]
        prompt = f"{prompt.rstrip()}\n{indent}    pass\n"
        try:
            tree = ast.parse(prompt)
        except SyntaxError:
            return ""
    keep = [
        node
        for node in tree.body
        if isinstance(node, (ast.Import, ast.ImportFrom))
        or (isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name != entry_point)
    ]
    return "\n\n".join(ast.get_source_segment(prompt, node) or "" for node in keep)


def names_entry_point(prompt: str, entry_point: str) -> bool:
    """Whether ``prompt`` names ``entry_point`` as a function: defines or calls it.

    MBPP+ in evalplus's original format (``tools/mbpp/to_original_fmt.py`` on ``MbppPlus.jsonl`` @
    767efcc) prompts with the task's description alone ("Write a function to find the shared
    elements from the given two lists."): 386 of its 399 prompts never say what the tests call
    (``similar_elements``), so every answer under another name failed. The release's prompts end
    with an example ``assert similar_elements(...)``, which names it. A word of the description
    (``sum`` in "find the sum of ...", Mbpp/126's entry point) does not count.
    """
    import re

    return re.search(rf"(?<![\w.]){re.escape(entry_point)}\s*\(", prompt) is not None


def _signature(solution: Any, entry_point: str) -> str | None:
    """``def name(args):`` of the entry point as the canonical solution defines it last at module
    level (the arguments' order and names, which the tests rely on; defaults as ``...``), or None
    (a method, a lambda, a ``def`` under ``if``: the prompt then gives the name alone)."""
    import ast

    if not isinstance(solution, str):
        return None
    try:
        tree = ast.parse(solution)
    except SyntaxError:
        return None
    # the last definition: Python keeps it, and the tests call it
    found = [
        node
        for node in tree.body
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == entry_point
    ]
    if not found:
        return None
    args = found[-1].args
    # A default is shown as `...`: the argument is optional, but its value (a lookup table, the
    # answer itself) is the solution's, not the task's to give away.
    args = ast.arguments(
        posonlyargs=args.posonlyargs,
        args=args.args,
        vararg=args.vararg,
        kwonlyargs=args.kwonlyargs,
        kw_defaults=[None if d is None else ast.Constant(...) for d in args.kw_defaults],
        kwarg=args.kwarg,
        defaults=[ast.Constant(...) for _ in args.defaults],
    )
    return f"def {entry_point}({ast.unparse(args)}):"


def _refuse_evalplus_release(row: dict[str, Any], where: str) -> None:
    """A row of evalplus's *release* files (``HumanEvalPlus.jsonl``, ``MbppPlus.jsonl``) reaching
    :func:`humaneval_problem` as it is: its extra tests are only inputs (``base_input``,
    ``plus_input``) whose expected outputs come from running the canonical solution, and its
    ``test`` (if any) is HumanEval's base ``check()``, so it would be scored on base tests alone.
    :meth:`HumanEvalTask.load` builds the full test first (:mod:`lightning_agents.tasks.evalplus`);
    a row that did not go through it is refused rather than silently scored on the base tests."""
    from lightning_agents.tasks.evalplus import is_release_row

    if is_release_row(row):
        fields = [k for k in ("plus_input", "base_input") if k in row]
        raise TaskDataError(
            f"{where}: an evalplus release record (it has {fields}): its plus tests are only inputs, "
            "graded against the canonical solution's outputs; load the file with HumanEvalTask, which "
            "computes them in the sandbox, or use HumanEval+ in its original format (evalplus's "
            "tools/humaneval/to_original_fmt.py, or the evalplus/humanevalplus dataset)"
        )


def humaneval_problem(row: dict[str, Any], where: str) -> Problem:
    """A HumanEval row as a problem: ``question`` is the function stub, ``reference`` the test program.

    A row without ``entry_point`` (HumanEval-X's Python rows) takes the function its test's own
    ``check(<name>)`` call names, when the prompt defines it."""
    if "entry_point" not in row and isinstance(row.get("test"), str) and isinstance(row.get("prompt"), str):
        name = _checked_entry_point(row["test"])
        if name and f"def {name}(" in row["prompt"]:
            row = {**row, "entry_point": name}
    _refuse_evalplus_release(row, where)
    missing = [k for k in ("prompt", "test", "entry_point") if not isinstance(row.get(k), str)]
    if missing:
        hint = " (or a test ending with check(<entry point>))" if missing == ["entry_point"] else ""
        raise TaskDataError(
            f"{where}: a HumanEval record needs string fields {missing}{hint} (it has {sorted(row)[:8]})"
        )
    pid = row.get("task_id", row.get("id", where))
    return {
        **row,
        "id": str(pid),
        "question": row["prompt"],
        "prompt_text": row["prompt"],
        "reference": humaneval_reference(row["test"], row["entry_point"], row["prompt"]),
    }


class HumanEvalTask(Task):
    """HumanEval function-completion problems; a candidate is a complete Python function.

    The docstring's ``>>>`` examples are the tests HFlow's ``test`` operator can run; the hidden
    ``check`` tests score the final code with :class:`lightning_agents.rewards.CodeVerifier`.

    Args:
        path: ``HumanEval.jsonl`` or ``HumanEval.jsonl.gz`` (served for every split), or a folder with
            ``<split>.jsonl``.
        split: the split :attr:`problems` draws from.
        n: use only a seeded sample of this many problems (``None``: all).
        seed: sampling seed.
        name: task name (default ``humaneval``).
        timeout_s: sandbox time limit per program (loading it and running all its tests). An
            evalplus release row gets more where its reference was slow: see :meth:`time_limit`.
        memory_mb: memory cap of each program's sandbox in MiB.
        site_packages: let programs import the trainer's installed packages (numpy, ...); MBPP
            solutions use them, HumanEval's do not.
        max_reply_bytes: largest value one call of the program may return, as JSON (``None``: the
            verifier's default, 1 MiB). MBPP+'s Mbpp/630 returns 1.4 MB for one input; see
            docs/sandbox.md for what each MBPP+ problem needs.
        evalplus_cache: where the expected outputs of evalplus release rows (``HumanEvalPlus.jsonl``,
            ``MbppPlus.jsonl`` with ``base_input``/``plus_input``) are kept, one file per data file's
            content (``"default"``: ``$XDG_CACHE_HOME/lightning_agents/evalplus``; ``None``: memory
            only). They are the canonical solution's outputs, computed in the sandbox on first load;
            see :mod:`lightning_agents.tasks.evalplus`.
        module_name: the candidate program's ``__name__`` (:class:`~lightning_agents.rewards.CodeVerifier`'s
            ``module_name``): :data:`CANDIDATE_MODULE` by default, so its ``if __name__ ==
            "__main__":`` blocks do not run, as in human-eval's and evalplus's graders, which
            ``exec`` the program in a fresh ``{}`` (``__name__`` is then the builtins module's,
            ``'builtins'``); ``"__main__"`` runs them.
    """

    default_name = "humaneval"
    domain = "code"
    answer_template = "```python\n{answer}\n```"

    def __init__(
        self,
        path: str,
        split: str = "test",
        n: int | None = None,
        seed: int | None = 0,
        name: str | None = None,
        timeout_s: float = 10.0,
        memory_mb: int = 1024,
        site_packages: bool = False,
        max_reply_bytes: int | None = None,
        evalplus_cache: str | None = "default",
        module_name: str = CANDIDATE_MODULE,
    ) -> None:
        super().__init__(split, n, seed, name)
        self.path = path
        self.timeout_s = timeout_s
        self.memory_mb = memory_mb
        self.site_packages = site_packages
        self.max_reply_bytes = max_reply_bytes
        self.evalplus_cache = evalplus_cache
        self.module_name = module_name
        self._verifiers: dict[float, Any] = {}
        self._problem_verifiers: dict[str, Any] = {}

    def load(self, split: str) -> list[Problem]:
        from lightning_agents.tasks.evalplus import release_tests

        path = split_file(self.path, split)
        rows = release_tests(path, list(iter_jsonl(path)), self.evalplus_cache)
        return [humaneval_problem(row, where) for where, row in rows]

    def user_message(self, problem: Problem) -> str:
        """The instruction and the problem's stub; when the stub never names the function the tests
        call, a line naming it (see :func:`names_entry_point`)."""
        text = f"{CODE_INSTRUCTION}\n\n```python\n{problem['prompt_text']}```"
        if not names_entry_point(problem["prompt_text"], problem["entry_point"]):
            signature = _signature(problem.get("canonical_solution"), problem["entry_point"])
            text += f"\n\nName the function `{problem['entry_point']}`" + (f": `{signature}`." if signature else ".")
        return text

    def extract_answer(self, text: str) -> str | None:
        """The code of an answer (:func:`~lightning_agents.rewards.code.function_code`, as the RL
        records' verifier reads it)."""
        from lightning_agents.rewards.code import function_code

        return function_code(text)

    def answer_from_stdout(self, stdout: str) -> str | None:
        return None  # a code task's answer is the code, not what it prints

    def program_for(self, code: str, problem: Problem) -> str:
        """The program run for ``code``: the stub first when the model returned only a body; for an
        evalplus release row, its prints dropped as evalplus drops them
        (:func:`~lightning_agents.tasks.evalplus.discard_prints`). It is
        :func:`~lightning_agents.rewards.code.function_program`, which the RL records' verifier
        applies too (:meth:`verifier_spec_for`)."""
        from lightning_agents.rewards.code import function_program

        return function_program(code, problem["entry_point"], problem["prompt_text"], "evalplus_ref_s" in problem)

    def example_tests(self, problem: Problem) -> str | None:
        return example_assertions(problem["prompt_text"], problem["entry_point"])

    def time_limit(self, problem: Problem) -> float:
        """Seconds the sandbox gives a candidate for ``problem``: :attr:`timeout_s`, or for an
        evalplus release row (which records ``evalplus_ref_s``, its reference's seconds on all
        inputs, and ``evalplus_budget_s``) ``timeout_s + evalplus_budget_s``.

        ``evalplus_budget_s`` is what evalplus's ``untrusted_check`` gives the candidate: each of
        its two runs (base, plus inputs) ``min(60 s, the sum of its inputs' limits) + 1 s``, at
        most :data:`~lightning_agents.tasks.evalplus.EVALPLUS_TIME_CAP_S` in all
        (:func:`~lightning_agents.tasks.evalplus.evalplus_budget`); ``timeout_s`` is for loading
        the program and the calls' round trips. Each input has its own limit in the test program
        (:func:`~lightning_agents.tasks.evalplus.input_time_limits`), so a looping candidate still
        stops at its input's limit; this one only bounds the whole. Before session 42's second
        mends it was ``timeout_s + 4 x evalplus_ref_s`` (10.1 s for 40 instant inputs, where
        evalplus gives 102 s): a right candidate 0.3 s a call, under every input's limit, timed
        out. A problem with ``evalplus_ref_s`` only (built by older code) keeps that rule.
        """
        from lightning_agents.tasks.evalplus import EVALPLUS_TIME_CAP_S, EVALPLUS_TIME_FACTOR

        ref = problem.get("evalplus_ref_s")
        if isinstance(ref, bool) or not isinstance(ref, (int, float)) or not ref >= 0:
            return self.timeout_s
        budget = problem.get("evalplus_budget_s")
        if not isinstance(budget, bool) and isinstance(budget, (int, float)) and budget >= 0:
            limit = self.timeout_s + min(EVALPLUS_TIME_CAP_S, budget)
        else:
            limit = min(EVALPLUS_TIME_CAP_S, self.timeout_s + EVALPLUS_TIME_FACTOR * ref)
        # up to a tenth of a second: one verifier per limit, and a stable number in RL records
        return max(self.timeout_s, math.ceil(limit * 10) / 10)

    def _verifier_for(self, timeout_s: float):
        if timeout_s not in self._verifiers:
            from lightning_agents.rewards.code import CodeVerifier

            extra = {} if self.max_reply_bytes is None else {"max_reply_bytes": self.max_reply_bytes}
            self._verifiers[timeout_s] = CodeVerifier(
                timeout_s=timeout_s,
                memory_mb=self.memory_mb,
                site_packages=self.site_packages,
                module_name=self.module_name,
                **extra,
            )
        return self._verifiers[timeout_s]

    def check(self, completion: str, reference: str) -> float:
        """Score ``completion`` against the test program ``reference`` under :attr:`timeout_s`, the
        completion being the whole program (the task as a verifier knows no problem: :meth:`verify`
        does, and gives it the stub, :meth:`time_limit` and the prints rule)."""
        return float(self._verifier_for(self.timeout_s)(completion, reference))

    def verify(self, completion: str, problem: Problem) -> float:
        """Score ``completion`` with the verifier the problem's RL record names
        (:meth:`verifier_spec_for`), built from that spec: evaluation and RL read the answer,
        build the program and run it in one way."""
        return float(self.problem_verifier(problem)(completion, problem["reference"]))

    def verifier_spec_for(self, problem: Problem) -> dict[str, Any]:
        """The verifier of ``problem``'s RL record: :class:`~lightning_agents.rewards.CodeVerifier`
        with the problem's :meth:`time_limit`, its ``entry_point`` and ``stub`` (the prompt's
        stub, put before a body-only answer) and, for an evalplus release row, ``drop_prints``,
        so that ``verifier(completion, reference)`` builds the program as :meth:`program_for`
        does. Plain JSON. Before session 42 the record's verifier ran the raw completion: a
        body-only answer that evaluation passed scored 0 in RL, and a release row's prints counted
        against the output cap there."""
        spec = self._spec(self.time_limit(problem))
        spec = {"class_path": spec, "init_args": {}} if isinstance(spec, str) else spec
        spec["init_args"]["entry_point"] = problem["entry_point"]
        spec["init_args"]["stub"] = problem["prompt_text"]
        if "evalplus_ref_s" in problem:
            spec["init_args"]["drop_prints"] = True
        return spec

    def problem_verifier(self, problem: Problem):
        """The verifier :meth:`verify` scores ``problem`` with: built from :meth:`verifier_spec_for`
        by :func:`~lightning_agents.rewards.resolve_verifier`, as RL builds a record's (one per
        distinct spec, kept)."""
        import json

        from lightning_agents.rewards.registry import resolve_verifier

        spec = self.verifier_spec_for(problem)
        key = json.dumps(spec, sort_keys=True)
        if key not in self._problem_verifiers:
            self._problem_verifiers[key] = resolve_verifier(spec)
        return self._problem_verifiers[key]

    def prompt_record(self, problem: Problem) -> dict[str, Any]:
        """As :meth:`Task.prompt_record`, its ``verifier`` the problem's own (:meth:`verifier_spec_for`).

        An evalplus release row's record leaves out its inputs, canonical solution and ``test``
        (the ``reference`` is that test program): they reach no prompt and no verdict, and
        travelled with every batch and saved record (over 8 MB for MBPP+'s Mbpp/630)."""
        record = super().prompt_record(problem)
        record["verifier"] = self.verifier_spec_for(problem)
        if "evalplus_ref_s" in problem:
            for key in RELEASE_ONLY_FIELDS:
                record.pop(key, None)
        return record

    def verifier_spec(self) -> str | dict[str, Any]:
        return self._spec(self.timeout_s)

    def _spec(self, timeout_s: float) -> str | dict[str, Any]:
        init_args: dict[str, Any] = {}
        if timeout_s != 10.0:
            init_args["timeout_s"] = timeout_s
        if self.memory_mb != 1024:
            init_args["memory_mb"] = self.memory_mb
        if self.site_packages:
            init_args["site_packages"] = True
        if self.max_reply_bytes is not None:
            init_args["max_reply_bytes"] = self.max_reply_bytes
        if self.module_name != "__main__":
            init_args["module_name"] = self.module_name
        if not init_args:
            return "lightning_agents.rewards.CodeVerifier"
        return {"class_path": "lightning_agents.rewards.CodeVerifier", "init_args": init_args}
