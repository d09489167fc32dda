"""The review of 6525551 (evalplus release rows), mended (session 41).

- F1: outputs are compared with Python's ``==`` as evalplus compares them (``True == 1``), not the
  harness's type-strict rewrite; a candidate's object with a lying ``__eq__`` still fails.
- F2: a release row's time limit grows with its reference's time, as evalplus sizes its limits.
- F3: a row skipped for a limit is tried again under higher limits (and kept under the same ones).
- F4: processes loading one file at once compute its references once (a file lock).
- F5, F6: an unreadable cache file is warned about and recomputed; the first load logs what it
  computes and where it is cached.
- F8: the rows computed beside one whose canonical raises are cached.
- F9: the oracles call built-ins through ``builtins`` (an entry point may be named ``sum``).

Rows: ``tests/data/code/evalplus_bool_answers.jsonl`` (see ``tests/data/code/README.md``).
"""

from __future__ import annotations

import json
import multiprocessing
from pathlib import Path

import pytest

from lightning_agents.rewards.isolation import isolation_report
from lightning_agents.tasks import HumanEvalTask
from lightning_agents.tasks._files import TaskDataError

DATA = Path(__file__).resolve().parents[1] / "data" / "code"

pytestmark = pytest.mark.skipif(not isolation_report()["bwrap_works"], reason="bubblewrap is unavailable here")


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


@pytest.fixture(scope="module")
def bool_task(tmp_path_factory):
    return HumanEvalTask(str(DATA / "evalplus_bool_answers.jsonl"), evalplus_cache=str(tmp_path_factory.mktemp("c")))


@pytest.fixture(scope="module")
def bool_problems(bool_task):
    return {p["id"]: p for p in bool_task.problems}


# openai/human-eval HumanEval.jsonl.gz, HumanEval/147's canonical solution: it counts, so n < 3
# gives 0, where evalplus's canonical (@ 8939a53) returns False
HE147_ORIGINAL = (
    "def get_max_triples(n):\n"
    "    A = [i*i - i + 1 for i in range(1,n+1)]\n    ans = []\n    for i in range(n):\n"
    "        for j in range(i+1,n):\n            for k in range(j+1,n):\n"
    "                if (A[i]+A[j]+A[k])%3 == 0:\n                    ans += [(A[i],A[j],A[k])]\n"
    "    return len(ans)\n"
)
# /work/h41/review_tasks/s14_natural_mbpp.py: right on ints; MBPP+ passes True/False as ints
NATURAL = {
    "Mbpp/167": "def next_power_of_2(n):\n    p = 1\n    while p < n:\n        p <<= 1\n    return p\n",
    "Mbpp/235": "def even_bit_set_number(n):\n    mask, bit = 0, 1\n    while (1 << bit) <= n:\n"
    "        mask |= 1 << bit\n        bit += 2\n    return n | mask\n",
}


def test_f1_right_answers_mixing_bool_and_int_score_1_as_in_evalplus(bool_task, bool_problems):
    verify = lambda pid, code: bool_task.verify(_fence(code), bool_problems[pid])  # noqa: E731
    for pid, p in bool_problems.items():
        assert verify(pid, p["prompt"] + p["canonical_solution"]) == 1.0, pid
    right = {**NATURAL, "HumanEval/147": HE147_ORIGINAL}
    assert {pid: verify(pid, code) for pid, code in right.items()} == dict.fromkeys(right, 1.0)
    # still wrong: off by one on every n >= 3
    assert verify("HumanEval/147", HE147_ORIGINAL.replace("return len(ans)", "return len(ans) + (n > 2)")) == 0.0


def test_f1_a_candidates_lying_eq_still_fails(bool_task, bool_problems):
    # The comparison runs on what crossed the harness's wire: plain data, so the candidate's
    # __eq__ never runs; an object that is not plain data is refused, a subclass goes as its base.
    p = bool_problems["HumanEval/147"]
    liar = "class Liar:\n    def __eq__(self, other):\n        return True\n    __hash__ = None\n"
    for code in (
        liar + "def get_max_triples(n):\n    return Liar()\n",
        "class L(int):\n    def __eq__(self, other):\n        return True\n    __hash__ = int.__hash__\n"
        "def get_max_triples(n):\n    return L(12345)\n",
        "class S(list):\n    def __eq__(self, other):\n        return True\ndef get_max_triples(n):\n    return S()\n",
    ):
        assert bool_task.verify(_fence(code), p) == 0.0, code


def test_f1_known_wrong_programs_still_score_0(tmp_path):
    rows = [json.loads(line) for line in (DATA / "evalplus_release.jsonl").read_text().splitlines()]
    rows = [r for r in rows if r["task_id"] in ("HumanEval/0", "Mbpp/3")]
    task = HumanEvalTask(_write(tmp_path / "wrong.jsonl", rows), evalplus_cache=str(tmp_path / "c"))
    by_id = {p["id"]: p for p in task.problems}
    wrong = {
        "HumanEval/0": "def has_close_elements(numbers, threshold):\n"
        "    s = sorted(numbers)\n    return any(b - a <= threshold for a, b in zip(s, s[1:]))\n",
        "Mbpp/3": "def is_not_prime(n):\n    return n == 1 or (n > 2 and (n % 2 == 0 or n % 5 == 0))\n",
    }
    for pid, code in wrong.items():
        assert task.verify(_fence(code), by_id[pid]) == 0.0, pid
    # a bool answer given as 0/1 is right in evalplus (True == 1): HumanEval/0 returns bools
    right = "def has_close_elements(numbers, threshold):\n    s = sorted(numbers)\n"
    right += "    return int(any(b - a < threshold for a, b in zip(s, s[1:])))\n"
    assert task.verify(_fence(right), by_id["HumanEval/0"]) == 1.0


def test_f2_a_slow_reference_gives_its_row_more_time(tmp_path):
    # the canonical sleeps 0.02 s on each of 150 inputs (3 s); a right candidate twice as slow (6 s)
    # is inside evalplus's 4 x the reference's time, though over the task's timeout_s of 3 s
    row = _row("HumanEval/950", "    time.sleep(0.02)\n    return x\n", [[i] for i in range(150)], "import time\n\n")
    task = HumanEvalTask(_write(tmp_path / "slow.jsonl", [row]), timeout_s=3.0, evalplus_cache=None)
    (problem,) = task.problems
    slower = "import time\n\ndef f950(x):\n    time.sleep(0.04)\n    return x\n"
    assert task.verify(_fence(slower), problem) == 1.0
    limit = task.time_limit(problem)
    assert 3.0 + 4 * 3.0 <= limit <= 2 * 61.0
    # the RL record's verifier carries the same limit
    assert task.prompt_record(problem)["verifier"]["init_args"]["timeout_s"] == limit
    # a problem that is no release row keeps timeout_s
    assert task.time_limit({k: v for k, v in problem.items() if k != "evalplus_ref_s"}) == 3.0


def test_f3_a_row_skipped_for_a_limit_is_retried_under_higher_limits(tmp_path, monkeypatch):
    from lightning_agents.tasks import evalplus

    cache = str(tmp_path / "cache")
    slow = _row("HumanEval/951", "    time.sleep(0.8)\n    return x\n", [[1], [2], [3]], "import time\n\n")
    fast = _row("HumanEval/952", "    return x + 1\n", [[1], [2]])
    path = _write(tmp_path / "rows.jsonl", [slow, fast])
    monkeypatch.setitem(evalplus.REFERENCE_LIMITS, "timeout_s", 1.0)
    assert [p["id"] for p in HumanEvalTask(path, evalplus_cache=cache).problems] == ["HumanEval/952"]
    # the same limits again (another rank, another run): the skip is reused, nothing runs
    real = evalplus._run_reference

    def no_sandbox(*args, **kwargs):
        raise AssertionError("ran again")

    monkeypatch.setattr(evalplus, "_MEMORY_CACHE", {})
    monkeypatch.setattr(evalplus, "_run_reference", no_sandbox)
    assert [p["id"] for p in HumanEvalTask(path, evalplus_cache=cache).problems] == ["HumanEval/952"]
    # higher limits, a new process: the skipped row runs again and is graded
    monkeypatch.setattr(evalplus, "_MEMORY_CACHE", {})
    monkeypatch.setattr(evalplus, "_run_reference", real)
    monkeypatch.setitem(evalplus.REFERENCE_LIMITS, "timeout_s", 120.0)
    assert [p["id"] for p in HumanEvalTask(path, evalplus_cache=cache).problems] == ["HumanEval/951", "HumanEval/952"]


def _load_in_child(path: str, cache: str, counter: str, barrier, out: str) -> None:
    import time

    from lightning_agents.tasks import evalplus

    def counted(row, where, inputs):
        with open(counter, "a") as fh:
            fh.write(where + "\n")
        time.sleep(1.0)  # long enough for the other process to reach the cache
        if row["task_id"].endswith("/1"):
            return {"skip": "a limit", "limits": dict(evalplus.REFERENCE_LIMITS)}
        return {"out": [inp[0] for inp in inputs], "times": [0.0 for _ in inputs]}

    evalplus._run_reference = counted
    rows = [(f"{path}:{i}", json.loads(line)) for i, line in enumerate(Path(path).read_text().splitlines(), 1)]
    barrier.wait()
    found = evalplus.expected_outputs(Path(path), rows, cache)
    Path(out).write_text(json.dumps(sorted(k for k, v in found.items() if "skip" not in v)))


def test_f4_concurrent_loads_run_each_reference_once_and_agree(tmp_path):
    rows = [_row(f"HumanEval/{i}", "    return x\n", [[i]]) for i in range(1, 4)]
    path = _write(tmp_path / "rows.jsonl", rows)
    counter, cache = tmp_path / "count.txt", tmp_path / "cache"
    ctx = multiprocessing.get_context("fork")
    barrier = ctx.Barrier(2)
    procs = [
        ctx.Process(target=_load_in_child, args=(path, str(cache), str(counter), barrier, str(tmp_path / f"{i}.json")))
        for i in range(2)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    assert sorted(counter.read_text().split()) == [f"{path}:{i}" for i in (1, 2, 3)]
    kept = [json.loads((tmp_path / f"{i}.json").read_text()) for i in range(2)]
    assert kept[0] == kept[1] == [f"{path}:2", f"{path}:3"]


def test_f5_a_corrupt_cache_file_is_warned_about_and_recomputed(tmp_path, monkeypatch, caplog):
    from lightning_agents.tasks import evalplus

    cache = tmp_path / "cache"
    path = _write(tmp_path / "rows.jsonl", [_row("HumanEval/953", "    return x * 2\n", [[1], [2], [3]])])
    assert len(HumanEvalTask(path, evalplus_cache=str(cache)).problems) == 1
    (cached,) = cache.glob("*.json")
    cached.write_text(cached.read_text()[:20])
    monkeypatch.setattr(evalplus, "_MEMORY_CACHE", {})
    with caplog.at_level("WARNING", logger="lightning_agents.tasks.evalplus"):
        task = HumanEvalTask(path, evalplus_cache=str(cache))
        (problem,) = task.problems
    assert f"{cached}: evalplus cache file unreadable" in caplog.text
    assert task.verify(_fence("def f953(x):\n    return x + x\n"), problem) == 1.0
    assert json.loads(cached.read_text())["1"]["out"] == [2, 4, 6]


def test_f6_a_first_load_logs_its_row_count_and_cache_path(tmp_path, caplog):
    cache = tmp_path / "cache"
    path = _write(tmp_path / "rows.jsonl", [_row("HumanEval/957", "    return -x\n", [[1], [2], [3]])])
    with caplog.at_level("INFO", logger="lightning_agents.tasks.evalplus"):
        assert len(HumanEvalTask(path, evalplus_cache=str(cache)).problems) == 1
    (cached,) = cache.glob("*.json")
    assert "computing the canonical outputs of 1 evalplus row(s) (3 inputs)" in caplog.text
    assert str(cached) in caplog.text and "computed 1 evalplus row(s) in" in caplog.text


def test_f8_rows_computed_beside_a_failing_one_are_cached(tmp_path, monkeypatch):
    from lightning_agents.tasks import evalplus

    cache = tmp_path / "cache"
    good = _row("HumanEval/954", "    return x - 1\n", [[1], [2]])
    bad = _row("HumanEval/955", "    return 1 / x\n", [[1], [0]])
    path = _write(tmp_path / "rows.jsonl", [good, bad, {**good, "task_id": "HumanEval/956"}])
    with pytest.raises(TaskDataError, match=r"rows\.jsonl:2: the canonical solution of HumanEval/955 .*ZeroDivision"):
        _ = HumanEvalTask(path, evalplus_cache=str(cache)).problems
    (cached,) = cache.glob("*.json")
    assert sorted(json.loads(cached.read_text())) == ["1", "3"]
    # the retry runs the failing row alone
    ran, real = [], evalplus._run_reference
    monkeypatch.setattr(evalplus, "_MEMORY_CACHE", {})
    monkeypatch.setattr(
        evalplus, "_run_reference", lambda row, where, inputs: ran.append(where) or real(row, where, inputs)
    )
    with pytest.raises(TaskDataError, match="HumanEval/955"):
        _ = HumanEvalTask(path, evalplus_cache=str(cache)).problems
    assert ran == [f"{path}:2"]


def test_f9_the_oracles_call_no_builtin_by_its_bare_name():
    import ast
    import builtins

    from lightning_agents.tasks.evalplus import _ORACLES

    bare = {
        node.id
        for node in ast.walk(ast.parse(_ORACLES))
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and hasattr(builtins, node.id)
    }
    assert not bare, f"the oracles call built-ins an entry point could be named: {sorted(bare)}"
