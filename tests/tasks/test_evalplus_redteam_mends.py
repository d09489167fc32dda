"""evalplus grading, the session-42 red team's findings on cc87f5e (/work/h42/review_evalplus/REPORT.md).

- H1: the whole program's limit is ``timeout_s`` plus what evalplus's ``untrusted_check`` gives
  the candidate (each of its two runs ``min(60 s, the sum of its inputs' limits) + 1 s``), not
  ``timeout_s + 4 x the reference's total``: a right candidate a little slower than the reference
  on every input, under every input's limit, timed out.
- H2: a HumanEval candidate does not run as ``__main__`` (``CodeVerifier(module_name=...)``):
  openai/human-eval (``human_eval/execution.py`` @ 6d43fb9) and evalplus
  (``evalplus/eval/__init__.py`` @ 26d6d00) ``exec`` the program in a fresh ``{}``, so its
  ``if __name__ == "__main__":`` blocks never run. A wrong function replaced inside one scored 1;
  a right one whose block reads ``input()`` or fails a self-test scored 0. The RL record's
  verifier carries the name too; ``CodeVerifier``'s default stays ``"__main__"``.
- M1: reference inputs slower than 1 s in the parallel first pass are timed again alone, keeping
  the smaller time (the first pass's times sized the limits for good).
- L1: writes to ``sys.__stdout__`` are dropped with the prints (they hit the output cap).
- L2: the dropped stream refuses bytes, as evalplus's ``StringIO`` does.
- L3: the dropped-prints statement goes after a leading docstring (``__doc__`` was None).
- L5: a release row's RL prompt record leaves out its inputs, canonical solution and ``test``.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from lightning_agents.rewards.isolation import isolation_report
from lightning_agents.tasks import HumanEvalTask

DATA = Path(__file__).resolve().parents[1] / "data" / "code"

sandboxed = pytest.mark.skipif(not isolation_report()["bwrap_works"], reason="bubblewrap is unavailable here")


def _fence(code: str) -> str:
    return f"```python\n{code}\n```"


def _write(path: Path, rows: list[dict]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def _row(task_id: str, body: str, base: list, plus: list | None = None) -> dict:
    name = "f" + task_id.rsplit("/", 1)[1]
    return {
        "task_id": task_id,
        "prompt": f"def {name}(x):\n    '''x'''\n",
        "entry_point": name,
        "canonical_solution": body,
        "base_input": base,
        "plus_input": plus or [],
        "atol": 0,
    }


@pytest.fixture(scope="module")
def task_40(tmp_path_factory):
    """A release row with 10 base and 30 plus inputs and an instant reference (every input gets
    evalplus's 4 s floor), under a task whose ``timeout_s`` is 3 s."""
    folder = tmp_path_factory.mktemp("rt42")
    row = _row("HumanEval/980", "    return x + 1\n", [[i] for i in range(10)], [[i] for i in range(10, 40)])
    task = HumanEvalTask(_write(folder / "rows.jsonl", [row]), timeout_s=3.0, evalplus_cache=None)
    (problem,) = task.problems
    return task, problem


@pytest.fixture(scope="module")
def plain_task(tmp_path_factory):
    """An original-format HumanEval row (its own ``check``), as HumanEval.jsonl's."""
    folder = tmp_path_factory.mktemp("plain42")
    row = {
        "task_id": "HumanEval/981",
        "prompt": "def f981(x):\n    '''x'''\n",
        "entry_point": "f981",
        "canonical_solution": "    return x + 1\n",
        "test": "def check(candidate):\n    assert candidate(1) == 2\n    assert candidate(5) == 6\n",
    }
    task = HumanEvalTask(_write(folder / "rows.jsonl", [row]), evalplus_cache=None)
    (problem,) = task.problems
    return task, problem


# --- H1: the program's limit covers evalplus's budget for both runs


def test_h1_evalplus_budget_is_two_runs_of_at_most_61_s():
    from lightning_agents.tasks.evalplus import EVALPLUS_TIME_CAP_S, evalplus_budget

    # 10 base inputs at the 4 s floor: 41 s; 30 plus inputs: min(60, 120) + 1 = 61 s
    assert evalplus_budget([0.001] * 40, 10) == 102.0
    # a run with no inputs costs nothing; a slow input's own limit is 4 x its time
    assert evalplus_budget([0.001, 2.5], 2) == 4.0 + 10.0 + 1.0
    assert evalplus_budget([100.0] * 5, 2) == EVALPLUS_TIME_CAP_S


@sandboxed
def test_h1_the_program_limit_is_timeout_plus_evalplus_budget(task_40):
    task, problem = task_40
    assert problem["evalplus_budget_s"] == 102.0
    # was max(3, 3 + 4 x ~0 s) = 3.0 s
    assert task.time_limit(problem) == 3.0 + 102.0
    assert task.prompt_record(problem)["verifier"]["init_args"]["timeout_s"] == 105.0


@sandboxed
def test_h1_a_right_candidate_slower_than_the_reference_under_every_limit_passes(task_40):
    """0.1 s a call on 40 inputs (4 s in all): far under each input's 4 s and evalplus's 102 s, so
    evalplus passes it; it timed out at the program's 3 s before. (A looping candidate still stops
    at its input's limit: tests/tasks/test_evalplus_session42.py, G2.)"""
    task, problem = task_40
    code = "import time\n\ndef f980(x):\n    time.sleep(0.1)\n    return x + 1\n"
    assert task.verify(_fence(code), problem) == 1.0


# --- H2: main blocks do not run, as in human-eval's and evalplus's exec(program, {})

WRONG_IN_MAIN = "def {f}(x):\n    return 0\n\nif __name__ == '__main__':\n    def {f}(x):\n        return x + 1\n"
READS_STDIN = "def {f}(x):\n    return x + 1\n\nif __name__ == '__main__':\n    n = int(input())\n    print({f}(n))\n"
FAILING_SELF_TEST = "def {f}(x):\n    return x + 1\n\nif __name__ == '__main__':\n    assert {f}(1) == 3, 'self-test'\n"


@sandboxed
@pytest.mark.parametrize("which", ["release", "plain"])
def test_h2_main_blocks_do_not_run_in_either_kind_of_row(which, task_40, plain_task):
    task, problem = task_40 if which == "release" else plain_task
    f = problem["entry_point"]
    assert task.verify(_fence(WRONG_IN_MAIN.format(f=f)), problem) == 0.0
    assert task.verify(_fence(READS_STDIN.format(f=f)), problem) == 1.0
    assert task.verify(_fence(FAILING_SELF_TEST.format(f=f)), problem) == 1.0


@sandboxed
def test_h2_the_rl_record_verifier_scores_the_raw_completion_the_same(plain_task, task_40):
    """RSTG scores a prompt record's raw completion with the record's ``verifier`` (no
    ``program_for``): the spec carries the module name."""
    from lightning_agents.rewards import resolve_verifier
    from lightning_agents.rewards.registry import RewardScorer

    for task, problem in (plain_task, task_40):
        record = task.prompt_record(problem)
        assert record["verifier"]["init_args"]["module_name"] == "solution"
        f = problem["entry_point"]
        completions = [_fence(WRONG_IN_MAIN.format(f=f)), _fence(READS_STDIN.format(f=f))]
        scored = RewardScorer(max_workers=1).score(completions, [record["reference"]] * 2, [record["verifier"]] * 2)
        assert list(scored.rewards) == [0.0, 1.0]
        assert resolve_verifier(record["verifier"]).module_name == "solution"


@sandboxed
def test_h2_the_prompt_reader_gives_humaneval_records_the_module_name():
    from lightning_agents.datamodules.prompts import normalize_prompt_record
    from lightning_agents.rewards import resolve_verifier

    raw = {"task_id": "HumanEval/982", "prompt": "def g(x):\n    '''x'''\n", "entry_point": "g", "test": "x = 1\n"}
    record = normalize_prompt_record(raw)
    assert resolve_verifier(record["verifier"]).module_name == "solution"


@sandboxed
def test_h2_codeverifier_keeps_main_by_default_and_refuses_stdlib_names():
    from lightning_agents.rewards import CodeVerifier

    tests = "def check(candidate):\n    assert candidate(1) == 2\n\ncheck(f)\n"
    program = WRONG_IN_MAIN.format(f="f")
    # other users of the sandbox: the program still runs as __main__
    assert CodeVerifier().module_name == "__main__"
    assert CodeVerifier()(program, tests) == 1.0
    assert CodeVerifier(module_name="solution")(program, tests) == 0.0
    for name in ("builtins", "json", "os.path", ""):
        with pytest.raises(ValueError, match="module_name"):
            CodeVerifier(module_name=name)


@sandboxed
@pytest.mark.parametrize("head", ["", "__name__ = 'builtins'\n"])
def test_h2_a_class_dressed_as_a_builtin_is_not_taken_for_it(head):
    """The harness knows built-in and standard-library exception classes by identity, not by
    ``__module__`` (which the module name, or the program itself, sets): a class of the program's
    that calls itself ``builtins.ValueError`` is not caught by the tests' ``except ValueError``,
    and one that derives from ``ValueError`` is."""
    from lightning_agents.rewards import CodeVerifier

    tests = (
        "def check(candidate):\n    try:\n        candidate(1)\n    except ValueError:\n        return\n"
        "    raise AssertionError('not raised')\n\ncheck(f)\n"
    )
    dressed = (
        f"{head}class E(Exception):\n    pass\n\nE.__name__ = E.__qualname__ = 'ValueError'\n"
        "E.__module__ = 'builtins'\n\ndef f(x):\n    raise E('x')\n"
    )
    derived = f"{head}class E(ValueError):\n    pass\n\ndef f(x):\n    raise E('x')\n"
    verifier = CodeVerifier(module_name="solution")
    assert verifier(dressed, tests) == 0.0
    assert verifier(derived, tests) == 1.0


def test_h2_the_name_goes_after_the_docstring_and_future_imports():
    from lightning_agents.rewards.code import insert_first

    code = '"""doc"""\nfrom __future__ import annotations\nx = __name__\n'
    out = insert_first(code, "__name__ = 'solution'")
    assert out == '"""doc"""\nfrom __future__ import annotations\n__name__ = \'solution\'\nx = __name__\n'
    namespace: dict = {"__name__": "__main__"}
    exec(compile(out, "s.py", "exec"), namespace)  # noqa: S102
    assert (namespace["x"], namespace["__doc__"]) == ("solution", "doc")
    assert insert_first("def f(:\n", "x = 1") == "def f(:\n"


# --- M1: slow reference inputs are timed again alone


def test_m1_slow_reference_inputs_are_timed_again_alone_keeping_the_minimum(tmp_path, monkeypatch):
    from lightning_agents.tasks import evalplus

    monkeypatch.setattr(evalplus, "_MEMORY_CACHE", {})
    running, calls, lock = [0], [], threading.Lock()

    def fake_reference(row, where, inputs):
        with lock:
            running[0] += 1
            calls.append(([inp[0] for inp in inputs], running[0]))
        time.sleep(0.2)
        with lock:
            running[0] -= 1
        if len(inputs) == 3:  # the first pass, beside another row's run
            return {"out": [0, 0, 0], "times": [0.01, 2.0, 3.0]}
        return {"out": [0] * len(inputs), "times": [1.2, 3.5][: len(inputs)]}

    monkeypatch.setattr(evalplus, "_run_reference", fake_reference)
    rows = [_row(f"HumanEval/99{i}", "    return 0\n", [[1], [2], [3]]) for i in range(2)]
    path = Path(_write(tmp_path / "rows.jsonl", rows))
    items = [(f"{path}:{i + 1}", r) for i, r in enumerate(rows)]
    found = evalplus.expected_outputs(path, items, tmp_path / "c")
    for where, _ in items:
        # was [0.01, 2.0, 3.0]: the first pass's times, kept for good
        assert found[where]["times"] == [0.01, 1.2, 3.0]
    # the first pass ran both rows at once; each row's slow inputs ran again after it, alone
    assert [inputs for inputs, _ in calls[:2]] == [[1, 2, 3], [1, 2, 3]]
    assert calls[2:] == [([2, 3], 1), ([2, 3], 1)]
    # a later load reads the cache and runs nothing
    monkeypatch.setattr(evalplus, "_MEMORY_CACHE", {})
    monkeypatch.setattr(evalplus, "_run_reference", lambda *a: pytest.fail("ran again"))
    assert evalplus.expected_outputs(path, items, tmp_path / "c") == found


def test_m1_a_cache_from_before_is_timed_again_once(tmp_path, monkeypatch):
    from lightning_agents.tasks import evalplus

    rows = [_row("HumanEval/993", "    return 0\n", [[1], [2]])]
    path = Path(_write(tmp_path / "rows.jsonl", rows))
    items = [(f"{path}:1", rows[0])]
    folder = tmp_path / "c"
    folder.mkdir()
    (folder / f"{evalplus._file_key(path)}.json").write_text(json.dumps({"1": {"out": [0, 0], "times": [0.5, 4.0]}}))
    monkeypatch.setattr(evalplus, "_MEMORY_CACHE", {})
    seen = []
    monkeypatch.setattr(
        evalplus, "_run_reference", lambda row, where, inputs: seen.append(inputs) or {"out": [0], "times": [2.5]}
    )
    assert evalplus.expected_outputs(path, items, folder)[f"{path}:1"]["times"] == [0.5, 2.5]
    assert seen == [[[2]]]
    assert json.loads((folder / f"{evalplus._file_key(path)}.json").read_text())["1"]["retimed"] is True


# --- LOW: the dropped prints


@sandboxed
def test_l1_a_right_program_writing_to_the_real_stdout_passes(task_40):
    task, problem = task_40
    code = "import sys\n\ndef f980(x):\n    sys.__stdout__.write('x' * 3000 + '\\n')\n    return x + 1\n"
    assert task.verify(_fence(code), problem) == 1.0


@sandboxed
def test_l2_the_dropped_stream_refuses_bytes_as_evalplus_stringio_does(task_40):
    task, problem = task_40
    code = (
        "import sys\n\ndef f980(x):\n    try:\n        sys.stdout.write(b'x')\n    except TypeError:\n"
        "        return x + 1\n    return 0\n"
    )
    assert task.verify(_fence(code), problem) == 1.0


def test_l3_discard_prints_keeps_the_module_docstring():
    import sys

    from lightning_agents.tasks.evalplus import discard_prints

    saved = sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__
    namespace: dict = {}
    try:
        exec(compile(discard_prints('"""kept"""\nx = 1\n'), "s.py", "exec"), namespace)  # noqa: S102
    finally:
        sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__ = saved
    assert namespace["__doc__"] == "kept"


# --- L5: what a release row's prompt record carries


@sandboxed
def test_l5_a_release_rows_prompt_record_leaves_out_inputs_and_solution(task_40):
    task, problem = task_40
    record = task.prompt_record(problem)
    assert not {"base_input", "plus_input", "canonical_solution", "test"} & set(record)
    assert record["reference"] == problem["reference"]


def test_l5_the_prompt_reader_leaves_out_the_canonical_solution():
    from lightning_agents.datamodules.prompts import read_prompt_records

    records = read_prompt_records(str(DATA / "evalplus_release.jsonl"))
    assert records and not any("canonical_solution" in r for r in records)
