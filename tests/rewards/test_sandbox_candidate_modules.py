"""Modules the tests use without importing them, because the candidate's program imports them.

In one file (how evalplus and MBPP grade), MBPP+'s Mbpp/596 test calls ``sys.getsizeof`` and only
the solution imports ``sys``; Mbpp/293 calls ``math.isclose`` and only the solution imports
``math``. The harness used to bind every free name of the tests to a ``Remote`` of the candidate,
so both canonical solutions scored 0 (``'Remote' object has no attribute 'getsizeof'``). The
candidate now reports which of its globals are modules bound under their own name, and the harness
imports those that are standard-library modules itself. The attack tests below show that a false
report gets a 0 or a load error, never a pass, and that the harness imports nothing on the
candidate's word that the tests do not use.

Rows: evalplus/evalplus ``MbppPlus.jsonl`` @ 767efcc368e0ef16568bba4ee2f1b005e849e8a6 (Apache-2.0),
fields ``canonical_solution`` and ``assertion`` (evalplus's MBPP asserts; these two rows have no
``test_imports`` in ``MbppBase.jsonl``), verbatim.
"""

from __future__ import annotations

import pytest
from sandbox_modes import ISOLATIONS, forged_ready, score

from lightning_agents.rewards import CodeVerifier

MBPP_596_SOLUTION = "\nimport sys \ndef tuple_size(tuple_list):\n  return sys.getsizeof(tuple_list)\n"
MBPP_596_TEST = (
    '\nassert tuple_size(("A", 1, "B", 2, "C", 3) ) == sys.getsizeof(("A", 1, "B", 2, "C", 3))\n'
    'assert tuple_size((1, "Raju", 2, "Nikhil", 3, "Deepanshu") ) == sys.getsizeof((1, "Raju", 2, "Nikhil", 3, '
    '"Deepanshu"))\n'
    'assert tuple_size(((1, "Lion"), ( 2, "Tiger"), (3, "Fox"), (4, "Wolf"))  ) == sys.getsizeof(((1, "Lion"), '
    '( 2, "Tiger"), (3, "Fox"), (4, "Wolf")))\n'
)
MBPP_293_SOLUTION = "\nimport math\ndef otherside_rightangle(w,h):\n  return math.sqrt(w * w + h * h)\n"
MBPP_293_TEST = (
    "\nassert math.isclose(otherside_rightangle(7,8), 10.63014581273465, rel_tol=0.001)\n"
    "assert math.isclose(otherside_rightangle(3,4), 5, rel_tol=0.001)\n"
    "assert math.isclose(otherside_rightangle(7,15), 16.55294535724685, rel_tol=0.001)\n"
)


@pytest.fixture(params=ISOLATIONS)
def verifier(request) -> CodeVerifier:
    """Both isolation modes run the same candidate and harness scripts."""
    return CodeVerifier(isolation=request.param, timeout_s=10)


@pytest.mark.parametrize(
    ("solution", "tests"), [(MBPP_596_SOLUTION, MBPP_596_TEST), (MBPP_293_SOLUTION, MBPP_293_TEST)], ids=["596", "293"]
)
def test_canonical_solution_passes_when_only_it_imports_the_module(verifier, solution, tests):
    verdict = score(verifier, solution, tests)
    assert verdict.passed, verdict


def test_wrong_answer_still_fails_with_the_module_resolved(verifier):
    wrong = MBPP_293_SOLUTION.replace("w * w + h * h", "w * w + h")
    verdict = score(verifier, wrong, MBPP_293_TEST)
    assert not verdict.passed and verdict.reason == "wrong_answer", verdict


def test_tests_get_the_real_module_not_the_candidates(verifier):
    # In one file this wrong program passes Mbpp/596: the tests' `sys` is its fake, whose
    # getsizeof agrees with its answers. The harness imports the real sys instead.
    fake = (
        "import types\nsys = types.ModuleType('sys')\nsys.getsizeof = lambda x: 0\ndef tuple_size(t):\n    return 0\n"
    )
    one_file = {}
    exec(fake + MBPP_596_TEST, one_file)  # noqa: S102 -- shows the attack works in plain Python
    verdict = score(verifier, fake, MBPP_596_TEST)
    assert not verdict.passed and verdict.reason == "wrong_answer", verdict


def test_module_the_candidate_did_not_import_stays_the_candidates(verifier):
    # Mbpp/120, 442 and 574 use math.isclose with neither tests nor solution importing math: a
    # NameError in one file, a 0 here, whatever the program does not bind.
    program = MBPP_293_SOLUTION.replace("import math\n", "from math import sqrt\n").replace("math.sqrt", "sqrt")
    verdict = score(verifier, program, MBPP_293_TEST)
    assert not verdict.passed and verdict.reason == "wrong_answer", verdict


@pytest.mark.parametrize(
    "program",
    [
        "import copy\n",  # the entry point is a module (its report is true)
        forged_ready({"ready": 1, "modules": ["copy"]}),  # ... or the program only says so
    ],
    ids=["imported", "forged"],
)
def test_entry_point_reported_as_a_module_scores_zero(verifier, program):
    # An entry point named like a standard-library module: bound to that module, the tests would
    # call nothing of the candidate's, so the verdict is a 0 (not a verifier error, not a pass).
    verdict = score(verifier, program, "assert copy([1, 2]) == [1, 2]\n")
    assert not verdict.passed and verdict.reason == "wrong_answer", verdict
    mixed = score(verifier, "import copy, math\n", "assert copy([1, 2]) == [1, 2]\nassert f(math.pi) == 3\n")
    assert not mixed.passed and mixed.reason == "wrong_answer", mixed


def test_non_stdlib_entry_point_reported_as_a_module_stays_remote(verifier):
    # Bound as a module under its own name but not a standard-library one: still the candidate's
    # (a Remote), and calling a module there is the candidate's TypeError, a 0.
    program = "import sys\ntuple_size = type(sys)('tuple_size')\n"
    verdict = score(verifier, program, MBPP_596_TEST)
    assert not verdict.passed and verdict.reason == "wrong_answer", verdict


def test_reports_import_nothing_the_tests_do_not_use(verifier):
    # The tests are trusted: what the harness imports is only what they name. Modules the
    # program reports (os, subprocess, shutil, builtins) are not imported for it.
    program = "import builtins, os, shutil, subprocess\ndef f():\n    return 1\n"
    tests = "assert f() == 1\nassert not {'shutil', 'subprocess'} & set(__import__('sys').modules)\n"
    verdict = score(verifier, program, tests)
    assert verdict.passed, verdict


@pytest.mark.parametrize("name", ["antigravity", "readline", "site"])
def test_modules_with_import_side_effects_are_never_imported(verifier, name):
    # `antigravity` opens a web browser when imported, `readline` may write to descriptor 1 (the
    # verdict's stream), `site` runs .pth files: even where the tests name one, the harness
    # leaves it the candidate's rather than import it on the candidate's word.
    program = f"import sys\n{name} = type(sys)('{name}')\ndef f():\n    return 1\n"
    tests = (
        f"assert f() == 1\nassert '{name}' not in __import__('sys').modules\nassert type({name}).__name__ == 'Remote'\n"
    )
    verdict = score(verifier, program, tests)
    assert verdict.passed, verdict


def test_harness_caps_hold_for_the_modules_it_imports(verifier):
    # The module the tests get is the harness's own import, under the caps main() set before the
    # tests ran: its CPU cap (harness_cpu_s = int(timeout_s) + 1) and its address-space cap.
    tests = (
        "assert f() == 1\n"
        "assert resource.getrlimit(resource.RLIMIT_CPU)[0] == 11\n"
        "assert resource.getrlimit(resource.RLIMIT_AS)[0] == 1024 << 20\n"
    )
    verdict = score(verifier, "import resource\ndef f():\n    return 1\n", tests)
    assert verdict.passed, verdict


@pytest.mark.parametrize(
    "message",
    [
        {"ready": 1, "modules": "sys"},
        {"ready": 1, "modules": [1]},
        {"ready": 1, "modules": {"sys": "sys"}},
        {"ready": 1, "modules": ["sys"], "names": ["tuple_size"]},
        {"ready": 2, "modules": ["sys"]},
    ],
)
def test_malformed_ready_frame_is_a_load_error(verifier, message):
    verdict = score(verifier, forged_ready(message), MBPP_596_TEST)
    assert not verdict.passed and verdict.reason == "load_error", verdict


def test_forged_report_cannot_pass_a_wrong_program(verifier):
    # The frame claims the entry point and every module it can think of; the program then exits
    # before answering a call: the claims buy nothing, the first call breaks the channel.
    message = {"ready": 1, "modules": ["tuple_size", "sys", "os", "subprocess", "builtins", "antigravity"]}
    verdict = score(verifier, forged_ready(message), MBPP_596_TEST)
    assert not verdict.passed and verdict.reason == "candidate_died", verdict


def test_a_module_the_standard_library_lacks_here_is_not_imported_from_the_trainers_path(
    verifier, tmp_path, monkeypatch
):
    # sys.stdlib_module_names lists Windows-only modules: importing `winreg` on Linux searched the
    # rest of the harness's path and ran a winreg.py found there, on the candidate's claim.
    marker = tmp_path / "ran_in_harness"
    (tmp_path / "winreg.py").write_text(f"open({str(marker)!r}, 'w').write('x')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    program = "import sys\nwinreg = type(sys)('winreg')\ndef f():\n    return 1\n"
    score(verifier, program, "assert f() == 1\nassert winreg is not None\n")
    assert not marker.exists()


@pytest.mark.parametrize("ready", [True, 1.0])
def test_ready_must_be_the_integer_one(verifier, ready):
    # as docs/sandbox.md says, a malformed ready frame is a load error (True and 1.0 equal 1 in Python)
    verdict = score(verifier, forged_ready({"ready": ready, "modules": []}), "assert f() == 1\n")
    assert not verdict.passed and verdict.reason == "load_error", verdict
