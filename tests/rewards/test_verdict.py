"""The trusted verdict: wire format, type-strict comparison, HumanEval sweeps, reasons, concurrency."""

from __future__ import annotations

import gzip
import json
import math
import os
import subprocess
import sys
import textwrap
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest

from lightning_agents.errors import VerifierError
from lightning_agents.rewards import (
    CodeVerifier,
    ProgramOutputVerifier,
    RewardScorer,
    isolation,
)
from lightning_agents.rewards._jail import la_harness, la_wire
from lightning_agents.rewards.isolation import isolation_report

needs_bwrap = pytest.mark.skipif(not isolation_report()["bwrap_works"], reason="bubblewrap is unavailable here")

# Generic attacks that know nothing of the problem: a body appended to every HumanEval prompt.
ORACLE_BODY = textwrap.indent(
    textwrap.dedent("""\
    import sys, gc, inspect, ast
    # 1. the caller's frames: locals holding expected values or test source
    f = sys._getframe(1)
    while f is not None:
        for v in list(f.f_locals.values()):
            if isinstance(v, str) and "assert" in v:
                for line in v.splitlines():
                    if "==" in line and "candidate(" in line:
                        try:
                            return ast.literal_eval(line.split("==", 1)[1].split(",")[0].strip())
                        except Exception:
                            pass
        f = f.f_back
    # 2. the caller's source line
    for fr in inspect.stack():
        for line in fr.code_context or []:
            if "==" in line:
                try:
                    return ast.literal_eval(line.split("==", 1)[1].strip().rstrip(",)"))
                except Exception:
                    pass
    # 3. check's bytecode constants
    for o in gc.get_objects():
        code = getattr(o, "__code__", None)
        if code is not None and code.co_name == "check":
            for c in code.co_consts:
                if c is not None:
                    return c
    # 4. the file
    try:
        src = open(__file__).read()
        if "def check" in src:
            return ast.literal_eval(src.split("==", 1)[1].splitlines()[0].strip())
    except Exception:
        pass
    return None
"""),
    "    ",
)

ALWAYS_EQUAL_BODY = textwrap.indent(
    textwrap.dedent("""\
    class Anything(str):
        def __eq__(self, other): return True
        def __ne__(self, other): return False
        def __lt__(self, other): return True
        def __le__(self, other): return True
        def __gt__(self, other): return True
        def __ge__(self, other): return True
        def __hash__(self): return 0
        def __bool__(self): return True
        def __abs__(self): return 0
        def __sub__(self, other): return self
        __rsub__ = __add__ = __radd__ = __mul__ = __rmul__ = __sub__
        def __len__(self): return 0
    return Anything()
"""),
    "    ",
)


def _humaneval(shared_data):
    with gzip.open(shared_data / "humaneval" / "HumanEval.jsonl.gz", "rt") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def _reference(p):
    # As the data module builds it (lightning_agents/datamodules/prompts.py).
    return f"{p['test']}\n\ncheck({p['entry_point']})\n"


def _sweep(problems, make_program, workers=2):
    v = CodeVerifier(timeout_s=20.0)
    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(lambda p: v.verdict(make_program(p), _reference(p)), problems))


# The problems whose tests use the prompt's helpers (32, 38, 50) and a spread of the rest.
SUBSET = sorted({0, 12, 32, 33, 38, 50, 87, 101, 129, 151, 163})


# ------------------------------------------------------------------------------- wire format
def test_wire_round_trips_plain_values_and_rejects_objects():
    value = [
        None,
        True,
        0,
        -3,
        2**80,
        1.5,
        math.inf,
        -math.inf,
        "é",
        b"\x00\xff",
        (1, (2,)),
        {"a": [1, {2}]},
        frozenset({3}),
        {(1, 2): "t"},
        1 + 2j,
        [],
    ]
    back = la_wire.decode(json.loads(json.dumps(la_wire.encode(value))))
    assert back == value and type(back[10]) is tuple and type(back[12]) is frozenset
    assert math.isnan(la_wire.decode(la_wire.encode(math.nan)))

    class Sneaky(int):
        def __eq__(self, other):
            return True

    # A subclass of a plain type goes as its base (a Counter as a dict): its methods stay behind.
    sent = la_wire.decode(json.loads(json.dumps(la_wire.encode([Sneaky(1), Counter("aab")]))))
    assert sent == [1, {"a": 2, "b": 1}] and type(sent[0]) is int and type(sent[1]) is dict
    assert sent[0] != 2
    for bad in (object(), [1, object()], {1: lambda: 0}, iter([1])):
        with pytest.raises(la_wire.WireError):
            la_wire.encode(bad)
    for forged in (
        {"x": 1},
        {"t": 1},
        {"d": [[1]]},
        {"d": [[[1], 2]]},
        {"f": "big"},
        {"c": ["a", 1]},
        {"a": 1, "b": 2},
    ):
        with pytest.raises(la_wire.WireError):
            la_wire.decode(forged)


def test_strict_equality():
    eq = la_harness.strict_eq
    assert eq(1, 1.0) and eq([1, (2, "x")], [1, (2, "x")]) and eq({"a": [True]}, {"a": [True]})
    assert not eq(True, 1) and not eq(1, True) and not eq((1,), [1]) and not eq({"a": 1}, {"a": True})
    assert not eq([0], [False]) and not eq("1", 1) and not eq(None, 0)
    # dict keys and set members compare by type too (True == 1 and they hash alike)
    assert not eq({True: "b", False: "a"}, {1: "b", 0: "a"}) and not eq({True, 2}, {1, 2})
    assert not eq(frozenset({(1, True)}), frozenset({(1, 1)})) and not eq({(1, True): 0}, {(1, 1): 0})
    assert eq({1: "a", (2, "x"): [3]}, {1: "a", (2, "x"): [3]}) and eq({1, 2.5}, {2.5, 1})


@needs_bwrap
def test_a_detail_quoting_the_candidates_lone_surrogate_can_be_written_as_utf8():
    verdict = CodeVerifier(timeout_s=10).verdict(
        "def f(x):\n    raise ValueError('\\ud800 boom')\n", "assert f(1) == 1\n"
    )
    assert verdict.reason == "wrong_answer" and "boom" in verdict.detail
    verdict.detail.encode("utf-8")  # raised UnicodeEncodeError in a UTF-8 log handler


@needs_bwrap
def test_numpys_tolerance_checks_need_the_expected_shape():
    # An empty result broadcasts against any number: numpy compared nothing and passed.
    v = CodeVerifier(timeout_s=10)
    for check in (
        "np.testing.assert_allclose(f(1), 3.5)",
        "assert np.allclose(f(1), 3.5)",
        "assert np.isclose(f(1), 3.5).all()",
        "np.testing.assert_array_almost_equal(f(1), [3.5])",
    ):
        tests = f"import numpy as np\n{check}\n"
        assert v("def f(x):\n    return []\n", tests) == 0.0, check
        right = "def f(x):\n    return [3.5]\n" if "[3.5]" in check else "def f(x):\n    return 3.5\n"
        assert v(right, tests) == 1.0, check


@needs_bwrap
def test_the_candidates_stop_iteration_does_not_end_the_tests_own_loops():
    # Raised inside map()/zip()/all() in the tests, a StopIteration from the candidate ended the
    # loop early as if every value had been checked: 1.0 for a function that only raises.
    v = CodeVerifier(timeout_s=10)
    raises = "def f(x):\n    raise StopIteration\n"
    for tests in (
        "assert all(map(lambda x: f(x) == 2 * x, range(5)))\n",
        "for got, want in zip(map(f, range(5)), [0, 2, 4, 6, 8]):\n    assert got == want\n",
    ):
        assert v(raises, tests) == 0.0
        assert v("def f(x):\n    return 2 * x\n", tests) == 1.0


@needs_bwrap
def test_harness_semantics_exceptions_kwargs_and_plain_results():
    v = CodeVerifier(timeout_s=10)
    program = "def f(x, *, scale=1):\n    if x < 0:\n        raise ValueError('negative')\n    return [x * scale, (x,), {x}]\n"
    tests = (
        "assert f(2, scale=3) == [6, (2,), {2}]\n"
        "try:\n    f(-1)\nexcept ValueError:\n    pass\nelse:\n    raise AssertionError('no error')\n"
    )
    assert v(program, tests) == 1.0
    assert v(program.replace("(x,)", "[x]"), tests) == 0.0  # a list is not a tuple
    # A test that swallows every Exception still fails when the candidate is dead.
    assert v("def f(x):\n    import os\n    os._exit(0)\n", "try:\n    f(1)\nexcept Exception:\n    pass\n") == 0.0
    # Tests that call nothing of the candidate cannot give a verdict.
    with pytest.raises(VerifierError, match="call no function"):
        v("def f(x):\n    return x\n", "assert 1 == 1")


# ------------------------------------------------------------------------------- HumanEval
@needs_bwrap
def test_humaneval_subset_canonical_pass_empty_and_generic_attacks_fail(shared_data):
    problems = [p for i, p in enumerate(_humaneval(shared_data)) if i in SUBSET]
    good = _sweep(problems, lambda p: p["prompt"] + p["canonical_solution"])
    assert [p["task_id"] for p, r in zip(problems, good) if not r.passed] == []
    for body in ("", ORACLE_BODY, ALWAYS_EQUAL_BODY):
        verdicts = _sweep(problems, lambda p, body=body: p["prompt"] + body)
        assert sum(r.passed for r in verdicts) == 0, [p["task_id"] for p, r in zip(problems, verdicts) if r.passed]


@pytest.mark.slow
@needs_bwrap
def test_all_164_humaneval_canonical_pass_and_empty_and_generic_attacks_fail(shared_data):
    problems = _humaneval(shared_data)
    assert len(problems) == 164
    good = _sweep(problems, lambda p: p["prompt"] + p["canonical_solution"])
    assert [p["task_id"] for p, r in zip(problems, good) if not r.passed] == []
    empty = _sweep(problems, lambda p: p["prompt"])
    assert [p["task_id"] for p, r in zip(problems, empty) if r.passed] == []
    for body in (ORACLE_BODY, ALWAYS_EQUAL_BODY):
        passed = [
            p["task_id"]
            for p, r in zip(problems, _sweep(problems, lambda p, body=body: p["prompt"] + body))
            if r.passed
        ]
        assert len(passed) <= 1, passed


# ------------------------------------------------------------------------------- bad input, reasons
@needs_bwrap
def test_bad_inputs_score_zero_with_a_counted_reason():
    scorer = RewardScorer(CodeVerifier(timeout_s=5.0, max_output_bytes=4096), max_workers=4)
    tests = "assert f(1) == 2"
    cases = {
        "compile_error": "```python\ndef f(x)\n    return 2\n```",
        "empty": "",
        "no_code": "The function returns x plus one.",
        "timeout": "```python\ndef f(x):\n    while True:\n        pass\n```",
        "output_flood": "```python\nwhile True:\n    print('x' * 1000)\n```",
        "wrong_answer": "```python\ndef f(x):\n    return 3\n```",
        "load_error": "```python\nraise RuntimeError('at import')\ndef f(x):\n    return 2\n```",
        "pass": "```python\ndef f(x):\n    return x + 1\n```",
    }
    out = scorer.score(list(cases.values()), [tests] * len(cases))
    assert out.rewards == [0.0] * 7 + [1.0]
    assert out.reasons == {reason: 1 for reason in cases}
    assert out.num_errors == 0
    pov = RewardScorer(ProgramOutputVerifier(timeout_s=4.0), max_workers=2)
    out = pov.score(
        [
            "```python\nimport sys\nsys.stdout.buffer.write(b'\\xff42')\n```",
            "```python\nprint(42)\n```",
            "```python\nimport time\ntime.sleep(30)\n```",
        ],
        ["42", "42", "42"],
    )
    assert out.rewards == [0.0, 1.0, 0.0] and out.reasons == {"bad_output": 1, "pass": 1, "timeout": 1}


@needs_bwrap
def test_a_broken_sandbox_is_a_verifier_error_not_a_zero(monkeypatch):
    fake = dict(isolation_report())
    fake["bwrap"] = "/bin/false"  # the sandbox "starts" but never runs the candidate
    monkeypatch.setattr(isolation, "isolation_report", lambda: dict(fake))
    v = CodeVerifier(timeout_s=3.0)
    with pytest.raises(VerifierError, match="(sandbox did not start|could not start the sandbox)"):
        v("def f(x):\n    return 2\n", "assert f(1) == 2")
    out = RewardScorer(v, max_workers=2).score(["def f(x):\n    return 2\n"] * 2, ["assert f(1) == 2"] * 2)
    assert all(math.isnan(r) for r in out.rewards) and out.reasons == {"verifier_error": 2} and out.num_errors == 2


# ------------------------------------------------------------------------------- concurrency
_WORKER = """
import gzip, json, sys, time
from concurrent.futures import ThreadPoolExecutor
from lightning_agents.rewards import CodeVerifier
time.sleep(float(sys.argv[2]))
rows = [json.loads(l) for l in gzip.open(sys.argv[1], "rt")]
jobs = [(r["prompt"] + r["canonical_solution"], 1.0, r) for r in rows[int(sys.argv[3]):int(sys.argv[3]) + 6]]
# Hostile neighbours: kill everything they can see, and a two-second fork bomb.
jobs += [("import os, signal\\nos.kill(-1, signal.SIGKILL)\\n", 0.0, rows[0]),
         ("import os, time\\nend = time.time() + 2\\nwhile time.time() < end:\\n    try:\\n        os.fork()\\n"
          "    except OSError:\\n        pass\\nos._exit(0)\\n", 0.0, rows[1])]
v = CodeVerifier(timeout_s=20.0)
with ThreadPoolExecutor(4) as pool:
    scores = list(pool.map(lambda j: v(j[0], j[2]["test"] + "\\ncheck(" + j[2]["entry_point"] + ")\\n"), jobs))
print(json.dumps({"scores": scores, "expected": [j[1] for j in jobs]}))
"""


@needs_bwrap
def test_two_processes_scoring_at_once_give_no_false_zeros(shared_data):
    data = str(shared_data / "humaneval" / "HumanEval.jsonl.gz")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _WORKER, data, str(delay), str(start)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            text=True,
        )
        for delay, start in ((0.0, 0), (0.35, 20))
    ]
    deadline = time.monotonic() + 240
    for p in procs:
        out, err = p.communicate(timeout=max(1, deadline - time.monotonic()))
        assert p.returncode == 0, err[-2000:]
        result = json.loads(out.strip().splitlines()[-1])
        assert result["scores"] == result["expected"]


# ------------------------------------------------------------------------------- trusted helpers
@needs_bwrap
def test_prompt_helpers_in_the_reference_stop_a_redefined_helper(shared_data):
    from lightning_agents.tasks.code import humaneval_reference

    p = _humaneval(shared_data)[32]
    # A wrong find_zero that also redefines the prompt's poly to always answer 0.
    forged = "def poly(xs, x):\n    return 0.0\n\ndef find_zero(xs):\n    return 12345.0\n"
    v = CodeVerifier(timeout_s=20.0)
    trusted = humaneval_reference(p["test"], p["entry_point"], p["prompt"])
    assert "def poly" in trusted and "def find_zero" not in trusted
    assert v(p["prompt"] + p["canonical_solution"], trusted) == 1.0
    assert v(forged, trusted) == 0.0
    # The documented limit of the plain reference: the helper is the candidate's.
    assert v(forged, _reference(p)) == 1.0
