"""Limits of the trusted harness and of the code benchmarks that the last sandbox round left open.

A harness memory cap far below the default made the harness interpreter abort ("Cannot recover
from MemoryErrors while normalizing exceptions") or exit without a verdict, so a reply built to
expand scored nan instead of 0, and a cap below what numpy needs failed correct programs. Six of
MBPP+'s 399 canonical solutions failed: three return an ``re.Match``, one a 1.4 MB reply, one
needs 20 s of CPU, one a 1 GB reply.
"""

from __future__ import annotations

import json
import re
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from lightning_agents.errors import VerifierError
from lightning_agents.rewards import CodeVerifier
from lightning_agents.rewards.isolation import isolation_report
from lightning_agents.rewards.verdict import MIN_HARNESS_MEMORY_MB, judge
from lightning_agents.tasks.code import HumanEvalTask

needs_bwrap = pytest.mark.skipif(not isolation_report()["bwrap_works"], reason="bubblewrap is unavailable here")
JAIL = Path(__file__).resolve().parents[2] / "lightning_agents" / "rewards" / "_jail"
DATA = Path(__file__).resolve().parents[1] / "data" / "code"
CORRECT = "def f(x):\n    return x + 1\n"
NUMPY_TESTS = "import numpy as np\nassert f(1) == 2\n"


@needs_bwrap
def test_a_harness_cap_below_what_numpy_needs_is_refused_naming_the_setting():
    """64 MiB: OpenBLAS could not map its buffers and exited (no verdict); 96 MiB: the tests'
    import raised MemoryError and a correct program scored 0 (``memory``)."""
    for cap in (64, 96):
        with pytest.raises(ValueError, match=rf"harness_memory_mb must be at least {MIN_HARNESS_MEMORY_MB}"):
            judge(CORRECT, NUMPY_TESTS, harness_memory_mb=cap)
    assert judge(CORRECT, NUMPY_TESTS, harness_memory_mb=MIN_HARNESS_MEMORY_MB).passed


@needs_bwrap
def test_a_harness_that_dies_holding_the_candidates_replies_is_a_zero():
    """The trusted tests abort the harness here, as the interpreter does where the cap strikes
    while it normalizes a MemoryError: after a call it is the candidate's 0, before any call a
    verifier error (nothing of the candidate's was in the harness)."""
    verdict = judge(CORRECT, "assert f(1) == 2\nimport os\nos.abort()\n")
    assert (verdict.passed, verdict.reason) == (False, "memory"), verdict
    assert "SIGABRT" in verdict.detail
    with pytest.raises(VerifierError, match="harness_memory_mb"):
        judge(CORRECT, "import os\nos.abort()\nassert f(1) == 2\n")


@needs_bwrap
def test_tests_that_do_not_fit_before_any_call_are_a_verifier_error_not_a_zero():
    """Memory the trusted tests take for themselves before calling the candidate was the
    candidate's 0 (``memory``) for a correct program."""
    tests = "pad = bytearray(300 << 20)\nassert f(1) == 2\n"
    with pytest.raises(VerifierError, match=r"harness_memory_mb \(now 256\)"):
        judge(CORRECT, tests, harness_memory_mb=256)
    assert judge(CORRECT, tests, harness_memory_mb=512).passed


@needs_bwrap
@pytest.mark.slow
def test_replies_that_expand_past_a_small_harness_cap_always_get_a_verdict():
    """Nested lists, 1.8 to 2 MB of JSON, against the smallest harness cap: the interpreter
    aborted on about 1 in 4 of them (VerifierError, nan); every one is a 0 now. Whether a given
    size still fits beside the decoder depends on the allocator (CI decoded one), so a plain
    ``wrong_answer`` is as right as ``memory``."""
    sizes = range(42000, 46000, 250)
    program = "def f(x):\n    v = []\n    for _ in range(20):\n        v = [v]\n    return [v] * {}\n"

    def one(k):
        try:
            return judge(program.format(k), "assert f(1) == 2\n", harness_memory_mb=128, max_reply_bytes=8 << 20)
        except VerifierError as err:
            return err

    with ThreadPoolExecutor(2) as pool:
        verdicts = list(pool.map(one, sizes))
    failed = [v for v in verdicts if isinstance(v, VerifierError) or v.passed]
    assert not failed, failed
    assert {v.reason for v in verdicts} <= {"memory", "bad_reply", "candidate_died", "wrong_answer"}, verdicts


def test_a_match_crosses_as_a_match_and_a_forged_one_is_refused():
    sys.path.insert(0, str(JAIL))
    try:
        import la_wire
    finally:
        sys.path.remove(str(JAIL))
    for pattern, text in ((r"(?P<a>a+)(b)?(c)", "xxaacyy"), (rb"(a)|(b)", b"zb")):
        real = re.search(pattern, text)
        got = la_wire.decode(json.loads(json.dumps(la_wire.encode(real))))
        assert isinstance(got, la_wire.Match) and bool(got)
        assert (got.span(), got.group(), got.groups(), got.groupdict()) == (
            real.span(),
            real.group(),
            real.groups(),
            real.groupdict(),
        )
        assert (got.string, got.regs, got.lastindex, got.lastgroup, repr(got)) == (
            real.string,
            real.regs,
            real.lastindex,
            real.lastgroup,
            repr(real),
        )
    forged = (
        ["ab", 0, 5, [[0, 1]], [], None],  # endpos past the subject
        ["ab", 0, 2, [[0, 3]], [], None],  # a span past the subject
        ["ab", 0, 2, [[-1, -1]], [], None],  # group 0 unmatched
        ["ab", 0, 2, [[0, 1]], [["x", 1]], None],  # a name for a group that does not exist
        [{"t": [1]}, 0, 0, [[0, 0]], [], None],  # a subject that is not a string
    )
    for body in forged:
        with pytest.raises(la_wire.WireError):
            la_wire.decode({"m": body})


@needs_bwrap
def test_a_regex_match_is_compared_as_evalplus_compares_it():
    """An ``re.Match`` reply was ``bad_reply``, so MBPP+'s Mbpp/737, 787 and 794 failed with their
    canonical solutions; evalplus compares them by ``out is not None``."""
    program = "import re\n\ndef f(text):\n    return re.match(r'(a)(b)?', text)\n"
    tests = (
        "m = f('abc')\n"
        "assert m is not None and m.group() == 'ab' and m.span() == (0, 2) and m.groups() == ('a', 'b')\n"
        "assert f('ac').groups() == ('a', None)\n"
        "assert f('zzz') is None\n"
    )
    assert judge(program, tests).passed
    assert judge(program.replace("'(a)(b)?'", "'(a)(c)?'"), tests).reason == "wrong_answer"


@needs_bwrap
def test_mbpp_rows_that_the_limits_decide():
    """Real MBPP+ rows: Mbpp/630's 1.4 MB reply passes with the task's own reply cap, Mbpp/787's
    match passes, Mbpp/255 (1.05 GB for one input) is a definite 0, not a crash."""
    path = str(DATA / "mbppplus_limits_original_format.jsonl")
    by_id = {p["task_id"]: p for p in HumanEvalTask(path).problems}

    def canonical(task_id):
        problem = by_id[task_id]
        return f"```python\n{problem['prompt'] + problem['canonical_solution']}\n```"

    default = CodeVerifier(timeout_s=20)
    verdict = default.verdict(canonical("Mbpp/630"), by_id["Mbpp/630"]["reference"])
    assert verdict.reason == "candidate_died" and "exceeds the limit of 1048576" in verdict.detail
    task = HumanEvalTask(path, timeout_s=20, max_reply_bytes=2 << 20)
    assert task.verifier_spec()["init_args"]["max_reply_bytes"] == 2 << 20
    assert task.verify(canonical("Mbpp/630"), by_id["Mbpp/630"]) == 1.0
    assert default.verdict(canonical("Mbpp/787"), by_id["Mbpp/787"]["reference"]).passed
    verdict = default.verdict(canonical("Mbpp/255"), by_id["Mbpp/255"]["reference"])
    assert (verdict.passed, verdict.reason) == (False, "memory"), verdict
