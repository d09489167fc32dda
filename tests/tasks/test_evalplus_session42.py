"""evalplus release rows, session 42: the review of 438e8ca and what was left.

- G1: the cache lock and file where the folder cannot be locked or written (read-only, a file
  system without ``flock``): the load goes on, warned, where it raised; a crashed holder leaves
  no lock behind.
- G2: each input gets its own time limit, ``max(4 s, 4 x the reference's time on it)``, as
  evalplus's ``untrusted_check``/``unsafe_execute``: a candidate slow on one input fails there,
  and a looping one costs that limit, not the program's.
- G3: what the candidate prints is dropped, as evalplus's ``swallow_io`` drops it: a right program
  that prints a lot passes.
- G4: the prompt reader takes a release row's prompt (it runs nothing); training on such a file
  without the task is refused, naming the way.

Rows: ``tests/data/code/evalplus_release.jsonl`` (see ``tests/data/code/README.md``).
"""

from __future__ import annotations

import errno
import json
import multiprocessing
import os
import signal
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


def _row(task_id: str, body: str, inputs: list, prompt_head: str = "") -> dict:
    name = "f" + task_id.rsplit("/", 1)[1]
    return {
        "task_id": task_id,
        "prompt": f"{prompt_head}def {name}(x):\n    '''x'''\n",
        "entry_point": name,
        "canonical_solution": body,
        "base_input": inputs,
        "plus_input": [],
        "atol": 0,
    }


@pytest.fixture
def fresh_memory(monkeypatch):
    from lightning_agents.tasks import evalplus

    monkeypatch.setattr(evalplus, "_MEMORY_CACHE", {})
    return evalplus


# --- G1: the cache folder


@sandboxed
def test_g1_a_file_system_without_flock_loads_unlocked(tmp_path, fresh_memory, monkeypatch, caplog):
    import fcntl

    def no_locks(fd, op):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(fcntl, "flock", no_locks)
    cache = tmp_path / "cache"
    path = _write(tmp_path / "rows.jsonl", [_row("HumanEval/960", "    return x + 1\n", [[1], [2]])])
    with caplog.at_level("WARNING", logger="lightning_agents.tasks.evalplus"):
        task = HumanEvalTask(path, evalplus_cache=str(cache))
        (problem,) = task.problems
    assert "cannot lock the evalplus cache" in caplog.text
    assert task.verify(_fence("def f960(x):\n    return x + 1\n"), problem) == 1.0
    (cached,) = cache.glob("*.json")
    assert json.loads(cached.read_text())["1"]["out"] == [2, 3]


@sandboxed
def test_g1_a_read_only_cache_folder_is_read_and_never_fails_the_load(tmp_path, fresh_memory, monkeypatch, caplog):
    evalplus = fresh_memory
    cache = tmp_path / "cache"
    path = _write(tmp_path / "rows.jsonl", [_row("HumanEval/961", "    return x * 3\n", [[1], [2]])])
    assert len(HumanEvalTask(path, evalplus_cache=str(cache)).problems) == 1
    # the folder becomes read-only (the tests run as root, where chmod stops nothing: refuse here)
    real_open, real_write = Path.open, Path.write_text

    def read_only_open(self, mode="r", *args, **kwargs):
        if cache in self.parents and any(c in mode for c in "wax+"):
            raise OSError(errno.EROFS, "Read-only file system", str(self))
        return real_open(self, mode, *args, **kwargs)

    def read_only_write(self, *args, **kwargs):
        if cache in self.parents:
            raise OSError(errno.EROFS, "Read-only file system", str(self))
        return real_write(self, *args, **kwargs)

    monkeypatch.setattr(Path, "open", read_only_open)
    monkeypatch.setattr(Path, "write_text", read_only_write)
    # a new process: its rows are in the file, which is read without running anything
    monkeypatch.setattr(evalplus, "_MEMORY_CACHE", {})
    real_run = evalplus._run_reference
    monkeypatch.setattr(evalplus, "_run_reference", lambda *a: pytest.fail("ran a reference the cache holds"))
    with caplog.at_level("WARNING", logger="lightning_agents.tasks.evalplus"):
        task = HumanEvalTask(path, evalplus_cache=str(cache))
        (problem,) = task.problems
    assert task.verify(_fence("def f961(x):\n    return 3 * x\n"), problem) == 1.0
    # a row the file lacks: computed, the write's failure warned about, the load goes on
    monkeypatch.setattr(evalplus, "_MEMORY_CACHE", {})
    monkeypatch.setattr(evalplus, "_run_reference", real_run)
    other = _write(tmp_path / "other.jsonl", [_row("HumanEval/962", "    return x - 3\n", [[5]])])
    with caplog.at_level("WARNING", logger="lightning_agents.tasks.evalplus"):
        (problem,) = HumanEvalTask(other, evalplus_cache=str(cache)).problems
    assert "cannot write the evalplus cache file" in caplog.text
    assert not list(cache.glob("*.tmp"))


def _hold_lock_and_die(folder: str, key: str, ready) -> None:
    from lightning_agents.tasks.evalplus import _locked

    with _locked(Path(folder), key):
        ready.set()
        os.kill(os.getpid(), signal.SIGKILL)


@sandboxed
def test_g1_a_holder_killed_inside_the_lock_leaves_no_lock(tmp_path, fresh_memory):
    evalplus = fresh_memory
    cache = tmp_path / "cache"
    path = _write(tmp_path / "rows.jsonl", [_row("HumanEval/963", "    return x\n", [[7]])])
    ctx = multiprocessing.get_context("fork")
    ready = ctx.Event()
    child = ctx.Process(target=_hold_lock_and_die, args=(str(cache), evalplus._file_key(Path(path)), ready))
    child.start()
    child.join(60)
    assert ready.is_set() and child.exitcode == -signal.SIGKILL
    assert list(cache.glob("*.lock"))
    start = time.monotonic()
    assert len(HumanEvalTask(path, evalplus_cache=str(cache)).problems) == 1
    assert time.monotonic() - start < 60


# --- G2: a time limit per input


@pytest.fixture(scope="module")
def per_input_task(tmp_path_factory):
    # 30 fast inputs; the program's limit is the task's 60 s
    folder = tmp_path_factory.mktemp("g2")
    row = _row("HumanEval/964", "    return x + 1\n", [[i] for i in range(30)])
    return HumanEvalTask(_write(folder / "rows.jsonl", [row]), timeout_s=60.0, evalplus_cache=None)


@sandboxed
def test_g2_a_candidate_slow_on_one_input_fails_as_in_evalplus(per_input_task):
    (problem,) = per_input_task.problems
    limit = per_input_task.time_limit(problem)
    assert limit == 60.0 + 61.0
    # right on every input, 6 s on input 3: over evalplus's max(4 s, 4 x ~0 s) for that input,
    # inside the program's 60 s (it passed before)
    slow = "import time\n\ndef f964(x):\n    if x == 3:\n        time.sleep(6)\n    return x + 1\n"
    verdict = per_input_task._verifier_for(limit).verdict(
        per_input_task.program_for(slow, problem), problem["reference"]
    )
    assert (verdict.passed, verdict.reason) == (False, "wrong_answer")
    assert "input 3 " in verdict.detail and "over its 4.0 s limit" in verdict.detail
    right = "import time\n\ndef f964(x):\n    if x == 3:\n        time.sleep(1)\n    return x + 1\n"
    assert per_input_task.verify(_fence(right), problem) == 1.0


@sandboxed
def test_g2_a_looping_candidate_costs_its_inputs_limit_not_the_programs(per_input_task):
    (problem,) = per_input_task.problems
    start = time.monotonic()
    assert per_input_task.verify(_fence("def f964(x):\n    while True:\n        pass\n"), problem) == 0.0
    # the input's 4 s and the sandbox's start, far below the program's 60 s (which it took before)
    assert time.monotonic() - start < 30


def test_g2_each_input_gets_evalplus_limit():
    from lightning_agents.tasks.evalplus import evalplus_test, input_time_limits

    assert input_time_limits([0.0, 0.5, 1.0, 2.5]) == [4.0, 4.0, 4.0, 10.0]
    row = _row("HumanEval/965", "    return x\n", [[1]])
    assert "_la_limits = [4.0, 10.0]" in evalplus_test(row, [[1], [2]], [1, 2], [0.1, 2.5])
    assert "_la_limits = None\n" in evalplus_test(row, [[1]], [1])


def test_g2_the_timer_calls_no_builtin_by_its_bare_name():
    import ast
    import builtins

    from lightning_agents.tasks.evalplus import _TIMER

    bare = {
        node.id
        for node in ast.walk(ast.parse(_TIMER))
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and hasattr(builtins, node.id)
    }
    assert not bare, f"the timer calls built-ins an entry point could be named: {sorted(bare)}"


# --- G3: prints


@pytest.fixture(scope="module")
def release_task(tmp_path_factory):
    return HumanEvalTask(str(DATA / "evalplus_release.jsonl"), evalplus_cache=str(tmp_path_factory.mktemp("c")))


@pytest.fixture(scope="module")
def release_problems(release_task):
    return {p["id"]: p for p in release_task.problems}


RIGHT_0 = (
    "def has_close_elements(numbers, threshold):\n"
    "    s = sorted(numbers)\n"
    "    return any(b - a < threshold for a, b in zip(s, s[1:]))\n"
)


@sandboxed
def test_g3_a_right_program_printing_a_lot_passes(release_task, release_problems):
    problem = release_problems["HumanEval/0"]
    # about 200 kB a call on stdout and stderr: over the sandbox's output cap (64 KiB) at the first
    # call, which failed it before; evalplus drops it
    noisy = '"""Module docstring."""\nfrom __future__ import annotations\n\nimport sys\n\n' + RIGHT_0.replace(
        "    s = sorted",
        "    for i in range(2000):\n        print('x' * 100)\n    sys.stderr.write('y' * 1000)\n    s = sorted",
    )
    assert release_task.verify(_fence(noisy), problem) == 1.0
    wrong = noisy.replace("b - a < threshold", "b - a <= threshold")
    assert release_task.verify(_fence(wrong), problem) == 0.0


def test_g3_prints_are_dropped_after_future_imports_and_only_for_release_rows(release_problems):
    from lightning_agents.tasks.evalplus import DISCARD_PRINTS, discard_prints

    code = '"""doc"""\nfrom __future__ import annotations\nx = 1\n'
    out = discard_prints(code)
    assert out == f'"""doc"""\nfrom __future__ import annotations\n{DISCARD_PRINTS}\nx = 1\n'
    compile(out, "p.py", "exec")
    assert discard_prints("def f(:\n") == "def f(:\n"
    # a form feed or a line separator inside the docstring is no line end for the parser
    odd = '"""a\x0cb\u2028c"""\r\nfrom __future__ import annotations\r\nx = 1'
    assert discard_prints(odd) == odd.replace("annotations\r\n", f"annotations\r\n{DISCARD_PRINTS}\n")
    compile(discard_prints(odd), "p.py", "exec")
    task = HumanEvalTask("-")
    plain = {k: v for k, v in release_problems["HumanEval/0"].items() if k != "evalplus_ref_s"}
    assert task.program_for(RIGHT_0, plain) == RIGHT_0


# --- G4: the prompt reader


def test_g4_the_prompt_reader_takes_a_release_rows_prompt():
    from lightning_agents.datamodules.prompts import read_prompt_records

    records = {r["id"]: r for r in read_prompt_records(str(DATA / "evalplus_release.jsonl"))}
    assert len(records) == 8
    he0, mbpp2 = records["HumanEval/0"], records["Mbpp/2"]
    assert "def has_close_elements(numbers: List[float], threshold: float) -> bool:" in he0["prompt"][-1]["content"]
    assert he0["prompt"][-1]["content"].startswith("Complete the following Python function.")
    # MBPP+ rows have no `test`: they were refused as unknown records
    assert "similar_elements" in mbpp2["prompt"][-1]["content"]
    for rec in records.values():
        assert rec["reference"] is None and rec["verifier"] is None
        assert not {"base_input", "plus_input", "test"} & set(rec)


def test_g4_training_on_release_rows_without_the_task_is_refused():
    from lightning_agents.datamodules.chat import DataFormatError
    from lightning_agents.datamodules.prompts import PromptDataModule
    from lightning_agents.tasks._files import TaskDataError
    from lightning_agents.tasks.code import humaneval_problem

    dm = PromptDataModule(train=str(DATA / "evalplus_release.jsonl"), val=None)
    with pytest.raises(DataFormatError, match="evalplus release row.*HumanEvalTask"):
        dm.setup("fit")
    row = json.loads((DATA / "evalplus_release.jsonl").read_text().splitlines()[0])
    with pytest.raises(TaskDataError, match="load the file with HumanEvalTask"):
        humaneval_problem(row, "rows.jsonl:1")


# --- G5: the test program's data, read by the JSON parser


def test_g5_the_object_hook_reads_exactly_what_the_walk_read():
    from lightning_agents.tasks.evalplus import _la_decode, _la_encode, _la_tagged

    nan = float("nan")
    values = [
        [[1, 2.5, True, None, "s"], (1, (2.0, [3])), {1, (2, 3)}, frozenset({"a"})],
        {(1, 2): [{3: frozenset({4})}], "k": {"d": 1}, 2**80: -(2**70)},
        [complex(1, float("inf")), complex(nan, -0.0), b"\x00\xff", float("-inf"), nan, -0.0],
        {"t": [1]},  # a dict whose only key is a tag's name
        [[], (), set(), {}, [[[]]]],
    ]

    def typed(v):
        if isinstance(v, (list, tuple, set, frozenset)):
            items = [typed(x) for x in v]
            return type(v).__name__, sorted(items, key=repr) if isinstance(v, (set, frozenset)) else items
        if isinstance(v, dict):
            return "dict", [(typed(k), typed(x)) for k, x in v.items()]
        return type(v).__name__, repr(v)

    for value in values:
        text = json.dumps(_la_encode(value), separators=(",", ":"))
        assert typed(json.loads(text, object_hook=_la_tagged)) == typed(_la_decode(json.loads(text)))
        assert typed(json.loads(text, object_hook=_la_tagged)) == typed(value)


# --- G6 (review of 438e8ca, checked and kept): Python's `==` scope, as evalplus's `out == exp`


@sandboxed
def test_g6_python_eq_passes_and_fails_what_evalplus_does(tmp_path):
    mixed = _row("HumanEval/966", "    return [True, 1.0, (2, 3.0), {1: [False]}]\n", [[0]])
    nan = _row("HumanEval/967", "    return float('nan')\n", [[0]])
    task = HumanEvalTask(_write(tmp_path / "rows.jsonl", [mixed, nan]), evalplus_cache=None)
    by_id = {p["id"]: p for p in task.problems}

    def score(pid: str, answer: str) -> float:
        name = "f" + pid.rsplit("/", 1)[1]
        return task.verify(_fence(f"def {name}(x):\n    return {answer}\n"), by_id[pid])

    # evalplus: [1, True, (2.0, 3), {True: [0]}] == [True, 1.0, (2, 3.0), {1: [False]}]
    assert score("HumanEval/966", "[1, True, (2.0, 3), {True: [0]}]") == 1.0
    # a list for the tuple, a missing key, a near miss with no float answer to give a tolerance
    assert score("HumanEval/966", "[1, True, [2, 3.0], {1: [False]}]") == 0.0
    assert score("HumanEval/966", "[1, True, (2, 3.0), {}]") == 0.0
    assert score("HumanEval/966", "[1, True, (2, 3.0000001), {1: [False]}]") == 0.0
    # nan == nan is False and np.allclose(nan, nan) too: evalplus fails every answer, its own too
    assert score("HumanEval/967", "float('nan')") == 0.0
