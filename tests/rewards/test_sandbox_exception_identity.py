"""Classes cross by identity, not by names the program can rebind (session 40, second red team).

The red team of 1a2a840 (``/work/h40/redteam_sandbox2``) found that the candidate side took a
class for the standard library's, a built-in or asyncio's ``CancelledError`` by looking its name up
where the program can rebind it: ``json.decoder.JSONDecodeError = Mine`` (G1), ``builtins.ValueError
= Mine`` (G4), any class named ``CancelledError`` (G5); and that an own ``__str__`` giving a str
subclass (G2) or a text past the reply's budget (G3) lost the class a right program raised. Each
case runs the program and tests through the real sandbox, with what they do in one file.
"""

from __future__ import annotations

import pytest
from sandbox_modes import ISOLATIONS, score

from lightning_agents.rewards import CodeVerifier


def _verdict(program, tests, isolation="process"):
    return score(CodeVerifier(isolation=isolation, timeout_s=60), program, tests)


# Wrong programs that bind a class of their own where the candidate side looked the real one up;
# in one file each fails its tests (red team a11.1a, a11.2, a16.1 and variants).
FORGED = {
    # G1: a KeyError subclass bound as json's JSONDecodeError; before, the tests got the real one
    "json.decoder.JSONDecodeError rebound": (
        "import json, json.decoder\n"
        "class JSONDecodeError(KeyError):\n"
        "    pass\n"
        "JSONDecodeError.__module__ = 'json.decoder'\n"
        "json.decoder.JSONDecodeError = json.JSONDecodeError = JSONDecodeError\n"
        "def f(x):\n"
        "    raise JSONDecodeError('not json at all')\n",
        "import json\nimport pytest\nwith pytest.raises(json.JSONDecodeError):\n    f(1)\n",
    ),
    # G1: a module of the program's own in sys.modules, its class named as the standard library's
    "statistics module replaced": (
        "import sys, types\n"
        "fake = types.ModuleType('statistics')\n"
        "class StatisticsError(LookupError):\n"
        "    pass\n"
        "StatisticsError.__module__ = 'statistics'\n"
        "fake.StatisticsError = StatisticsError\n"
        "sys.modules['statistics'] = fake\n"
        "def f(x):\n"
        "    raise StatisticsError('no median')\n",
        "import importlib, sys\nimport pytest\nsys.modules.pop('statistics', None)\n"
        "statistics = importlib.import_module('statistics')\n"
        "with pytest.raises(statistics.StatisticsError):\n    f(1)\n",
    ),
    # G4: builtins.ValueError rebound to a KeyError subclass; before, taken for the built-in
    "builtins.ValueError rebound": (
        "import builtins\n"
        "class ValueError(KeyError):\n"
        "    pass\n"
        "builtins.ValueError = ValueError\n"
        "def f(x):\n"
        "    raise ValueError('bad')\n",
        "import pytest\nwith pytest.raises(ValueError, match='^bad$'):\n    f(1)\n",
    ),
    # G4: builtins.type rebound so the candidate side read a KeyError as a ValueError
    "builtins.type rebound": (
        "import builtins\n"
        "real_type = type\n"
        "def type(*a):\n"
        "    if len(a) == 1 and real_type(a[0]) is KeyError:\n"
        "        return ValueError\n"
        "    return real_type(*a)\n"
        "builtins.type = type\n"
        "def f(x):\n"
        "    raise KeyError('bad')\n",
        "try:\n    f(1)\nexcept ValueError:\n    pass\n",
    ),
    # G5: a class of the program's own named CancelledError; before, it became asyncio's
    "own CancelledError": (
        "class CancelledError(Exception):\n    pass\ndef f(x):\n    raise CancelledError('own')\n",
        "import asyncio\ntry:\n    f(1)\nexcept asyncio.CancelledError:\n    pass\n",
    ),
    # G5: the real one's shape and module, bound in asyncio.exceptions' place after asyncio ran
    "CancelledError look-alike bound in asyncio.exceptions": (
        "import asyncio, asyncio.exceptions\n"
        "class CancelledError(BaseException):\n"
        "    pass\n"
        "CancelledError.__module__ = 'asyncio.exceptions'\n"
        "asyncio.exceptions.CancelledError = CancelledError\n"
        "def f(x):\n"
        "    raise CancelledError()\n",
        "import asyncio\ntry:\n    f(1)\nexcept asyncio.CancelledError:\n    pass\nexcept BaseException:\n"
        "    raise AssertionError('not asyncio.CancelledError')\n",
    ),
}


@pytest.mark.parametrize("isolation", ISOLATIONS)
@pytest.mark.parametrize("case", sorted(FORGED))
def test_classes_bound_in_the_real_ones_place_are_the_programs_own(case, isolation):
    program, tests = FORGED[case]
    verdict = _verdict(program, tests, isolation)
    assert verdict.reason == "wrong_answer", (case, verdict)


# Right programs raising the real classes: they pass as in one file (they did before too).
RIGHT = {
    "json": (
        "import json\ndef f(x):\n    return json.loads(x)\n",
        "import json\nimport pytest\nwith pytest.raises(json.JSONDecodeError) as info:\n    f('[1,')\n"
        "assert type(info.value) is json.JSONDecodeError and info.value.pos == 3\n",
    ),
    "statistics": (
        "import statistics\ndef f(x):\n    return statistics.median(x)\n",
        "import statistics\nimport pytest\nwith pytest.raises(statistics.StatisticsError):\n    f([])\n",
    ),
    "asyncio.CancelledError from a call": (
        "import asyncio\n"
        "async def job():\n    await asyncio.sleep(10)\n"
        "async def main():\n    task = asyncio.ensure_future(job())\n    await asyncio.sleep(0)\n"
        "    task.cancel()\n    await task\n"
        "def f(x):\n    asyncio.run(main())\n",
        "import asyncio\nimport pytest\nwith pytest.raises(asyncio.CancelledError):\n    f(1)\n",
    ),
}


@pytest.mark.parametrize("case", sorted(RIGHT))
def test_the_real_classes_still_cross(case):
    program, tests = RIGHT[case]
    verdict = _verdict(program, tests)
    assert verdict.passed, (case, verdict)


def test_an_own_str_giving_a_str_subclass_is_its_text():
    # G2 (a11.3, a12.1): str() takes a StrEnum member from __str__; before, sent as "raises", so
    # a right program failed pytest.raises(ValueError, match=...)
    program = (
        "import enum\n"
        "class Code(str, enum.Enum):\n"
        "    BAD = 'bad thing'\n"
        "    def __str__(self):\n"
        "        return self\n"
        "class E(ValueError):\n"
        "    def __str__(self):\n"
        "        return Code.BAD\n"
        "def f(x):\n"
        "    raise E('ignored')\n"
    )
    tests = (
        "import pytest\nwith pytest.raises(ValueError, match='^bad thing$') as info:\n    f(1)\n"
        "assert type(str(info.value)) is str\n"
    )
    verdict = _verdict(program, tests)
    assert verdict.passed, verdict


LONG_STR = (
    "class BadRows(ValueError):\n"
    "    def __str__(self):\n"
    "        return ', '.join(str(i) for i in range(self.args[0]))\n"
    "def check(n):\n    raise BadRows(n)\n"
)


def test_an_own_str_past_the_budget_keeps_its_class():
    # G3 (a12.2, a11.7): a 170 KB own str, past the 128 KiB text budget; before, by name only, so a
    # right program failed plain pytest.raises(ValueError); its class and args still cross
    tests = (
        "import pytest\nwith pytest.raises(ValueError) as info:\n    check(30_000)\n"
        "assert type(info.value).__name__ == 'BadRows' and info.value.args == (30_000,)\n"
    )
    verdict = _verdict(LONG_STR, tests)
    assert verdict.passed, verdict


@pytest.mark.parametrize(
    "tests",
    [
        "try:\n    check(30_000)\nexcept ValueError as e:\n    assert len(str(e)) <= 500\n",
        "import pytest\nwith pytest.raises(ValueError, match='29999$'):\n    check(30_000)\n",
    ],
)
def test_reading_an_own_str_past_the_budget_fails_loudly(tests):
    # its text did not cross: any read of it raises, so no check on it passes (nor a wrong one)
    verdict = _verdict(LONG_STR, tests)
    assert verdict.reason == "wrong_answer" and "longer than the sandbox carries" in verdict.detail, verdict


OWN_STR = (
    "class Amount(ValueError):\n"
    "    def __init__(self, amount):\n"
    "        super().__init__(amount)\n"
    "        self.amount = amount\n"
    "    def __str__(self):\n"
    "        return f'amount {self.args[0]} must be positive'\n"
    "def f(x):\n    raise Amount(x)\n"
)


def test_a_copy_of_an_own_str_exception_keeps_its_text():
    # G7 (a11.4a): before, copy.copy(e) gave str(e.args[0]), '-3'; in one file the program's
    # __str__ runs on the copy
    tests = (
        "import copy\ntry:\n    f(-3)\nexcept ValueError as e:\n"
        "    for c in (copy.copy(e), copy.deepcopy(e)):\n"
        "        assert type(c) is type(e) and c.args == (-3,), vars(c)\n"
        "        assert str(c) == 'amount -3 must be positive', str(c)\n"
    )
    verdict = _verdict(OWN_STR, tests)
    assert verdict.passed, verdict


def test_a_stdlib_subclass_field_that_raises_leaves_the_others():
    # G9 (a11.8): a JSONDecodeError subclass whose colno property raises; before, every field and
    # the args were dropped, so e.pos was missing; in one file only e.colno raises
    program = (
        "import json\n"
        "class E(json.JSONDecodeError):\n"
        "    @property\n"
        "    def colno(self):\n"
        "        raise RuntimeError('no colno')\n"
        "    @colno.setter\n"
        "    def colno(self, v):\n"
        "        pass\n"
        "def f(x):\n    raise E('m', 'abc', 1)\n"
    )
    tests = (
        "import json\ntry:\n    f(1)\nexcept json.JSONDecodeError as e:\n"
        "    assert (e.pos, e.doc, e.lineno) == (1, 'abc', 1), vars(e)\n"
    )
    verdict = _verdict(program, tests)
    assert verdict.passed, verdict


def test_the_allowlist_is_taken_by_identity_before_the_program_runs():
    # G1/G10: the candidate side imports the allowlisted classes itself when it starts (the
    # program has not run yet) and keeps them; re.error is spelt re.PatternError from 3.13 on
    import importlib.util
    import json
    import re
    import statistics
    import sys
    from pathlib import Path

    jail = Path(__file__).resolve().parents[2] / "lightning_agents" / "rewards" / "_jail"
    saved = list(sys.path)
    try:
        spec = importlib.util.spec_from_file_location("la_candidate_identity", jail / "la_candidate.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path[:] = saved
    real = module._STDLIB_REAL
    assert real["json.decoder.JSONDecodeError"] is json.JSONDecodeError
    assert real["statistics.StatisticsError"] is statistics.StatisticsError
    pattern = "re.PatternError" if hasattr(re, "PatternError") else "re.error"
    assert real[pattern] is re.error and module._stdlib_name(re.error) == pattern
    assert len(real) == len(module.STDLIB_CLASSES) - 1  # one spelling of re's class
    fake = type("JSONDecodeError", (ValueError,), {"__module__": "json.decoder"})
    assert module._stdlib_name(fake) is None
