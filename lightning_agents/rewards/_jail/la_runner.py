"""What a test runner would run of the trusted tests, for the harness (``la_harness.run``).

Tests written for a runner keep their checks where executing the file as a module never reaches:
pytest-style ``test_*`` functions, ``unittest.TestCase`` classes with no runner line
(BigCodeBench's shape), ``unittest.main()`` or ``check(f)`` under ``if __name__ == "__main__":``.
Executed so, they ended without calling the candidate and passed any program (red team 46's W0).
The harness runs them as the script or pytest would: the ``__main__`` blocks where they stand,
``unittest.main()`` on the tests' own cases, then each ``test*`` function, pytest-style ``Test*``
class and ``TestCase`` class that nothing ran. A failure of any of the tests' ``TestCase`` tests,
run by whatever runner, fails the tests (``CaseFailed``): a runner would report it.

Standard library only; ``unittest`` is imported only for tests that name it, ``inspect`` only for
a ``test*`` function to run.
"""

import ast
import itertools
import sys
import types

#: The ``__name__`` the tests run under (``la_harness.run``): their functions' ``__module__``.
TESTS_MODULE = "__tests__"

# TestCase classes one of whose tests started (by any runner), and the failed tests' reports.
_ran_cases = set()
_failures = []


class TestsExited(SystemExit):
    """``unittest.main()`` ended the tests as it ends a script (``sys.exit``). Only this module
    raises it: a ``SystemExit`` of the candidate's is a plain one, which still fails the tests."""


class CaseFailed(AssertionError):
    """A ``TestCase`` test of the tests' own failed or raised, whether or not the tests looked
    at the result of the runner that ran it."""


def run_main_guards(tree):
    """Make each module-level ``if __name__ == "__main__":`` of ``tree`` true, in place, so that its
    block runs where it stands, as when the file runs as a script (the tests' ``__name__`` stays
    :data:`TESTS_MODULE`)."""
    for node in tree.body:
        if isinstance(node, ast.If) and _is_main_test(node.test):
            node.test = ast.copy_location(ast.Constant(True), node.test)
    return tree


def _is_main_test(test):
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq)):
        return False
    sides = (test.left, test.comparators[0])
    named = any(isinstance(side, ast.Name) and side.id == "__name__" for side in sides)
    return named and any(isinstance(side, ast.Constant) and side.value == "__main__" for side in sides)


def watch_unittest(env):
    """Import ``unittest`` and have it work for the tests in ``env`` as in their own file: every
    ``TestCase`` run is recorded (its class, and a report when it fails), and ``unittest.main()``
    runs the tests' ``TestCase`` classes (in a script it loads ``__main__``, here the harness, and
    parses the harness's ``argv``) and raises :class:`TestsExited`, or returns with
    ``exit=False``."""
    import unittest

    original = unittest.TestCase.run

    def run(self, result=None):
        _ran_cases.add(type(self))
        if result is None:
            result = self.defaultTestResult()
        before = _bad_counts(result)
        try:
            return original(self, result)
        finally:
            report = _report(result, before)
            if report is not None:
                _failures.append(report)

    def main(*args, exit=True, **kwargs):  # noqa: A002 -- unittest.main's own keyword
        result = unittest.TestResult()
        _suite(unittest, _own_cases(env)).run(result)
        if exit:
            raise TestsExited(not result.wasSuccessful())
        return types.SimpleNamespace(result=result)

    unittest.TestCase.run = run
    unittest.main = main


_BAD = ("failures", "errors", "unexpectedSuccesses")


def _bad_counts(result):
    return [len(getattr(result, kind, ())) for kind in _BAD]


def _report(result, before=(0, 0, 0)):
    """``"<test id>: <exception>"`` for a test ``result`` records as failed since it held
    ``before`` (the exception is its traceback's first line past the last frame: an
    ``assertEqual`` message goes on for lines of diff), or ``None`` where none failed."""
    kind = next((k for k, n in zip(_BAD, before) if len(getattr(result, k, ())) > n), None)
    if kind is None:
        return None
    entry = getattr(result, kind)[-1]
    if kind == "unexpectedSuccesses":
        return f"{entry.id()}: unexpected success"
    test, text = entry
    lines = str(text).splitlines()
    frames = [i for i, line in enumerate(lines) if line.startswith('  File "')]
    after = lines[frames[-1] + 1 :] if frames else lines
    said = next((line for line in after if line.strip() and not line[:1].isspace()), "(no traceback)")
    return f"{test.id()}: {said}"


def _suite(unittest, classes):
    loader = unittest.TestLoader()
    return unittest.TestSuite(loader.loadTestsFromTestCase(cls) for cls in classes)


def _own_cases(env):
    """The ``TestCase`` classes the tests define, in their order."""
    unittest = sys.modules.get("unittest")
    if unittest is None:
        return []
    return [
        value
        for value in list(env.values())
        if isinstance(value, type) and issubclass(value, unittest.TestCase) and value.__module__ == TESTS_MODULE
    ]


def run_uncalled(env, tree):
    """Run what a runner would and the tests did not: each ``TestCase`` class of theirs none of
    whose tests ran, and each ``test*`` function and pytest-style ``Test*`` class their code never
    names (one it names is a helper the tests call themselves). Raises what a test raised, or
    :class:`CaseFailed` for a failed ``TestCase`` test, whichever runner ran it."""
    named = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)}
    for name, value in list(env.items()):
        if not name.startswith(("test", "Test")) or name in named:
            continue
        if type(value) is types.FunctionType and value.__globals__ is env and name.startswith("test"):
            _call_test(value, _pytest_arguments(value))
        elif isinstance(value, type) and value.__module__ == TESTS_MODULE and name.startswith("Test"):
            if not _is_test_case(value):
                _run_pytest_class(value)
    unittest = sys.modules.get("unittest")
    pending = [cls for cls in _own_cases(env) if cls not in _ran_cases]
    if pending:
        result = unittest.TestResult()
        _suite(unittest, pending).run(result)
        report = _report(result)
        if report is not None and not _failures:
            # unittest was not watched (the tests reached TestCase without naming unittest)
            _failures.append(report)
    if _failures:
        raise CaseFailed(f"{len(_failures)} failed: {_failures[0]}")


def _is_test_case(cls):
    unittest = sys.modules.get("unittest")
    return unittest is not None and issubclass(cls, unittest.TestCase)


def _pytest_arguments(function):
    """The keyword sets pytest would call ``function`` with (its ``parametrize`` marks, crossed),
    or ``[]`` where it would not run it here (a skip or xfail mark, a parameter no mark gives: a
    fixture)."""
    marks = [mark for mark in getattr(function, "pytestmark", ()) if hasattr(mark, "name")]
    if any(mark.name in ("skip", "xfail") for mark in marks):
        return []
    if any(mark.name == "skipif" and any(arg is True for arg in mark.args) for mark in marks):
        return []
    import inspect  # here: its import costs every verdict's harness a few ms

    axes = [_parametrized(mark) for mark in marks if mark.name == "parametrize"]
    calls = [dict(itertools.chain.from_iterable(d.items() for d in combo)) for combo in itertools.product(*axes)]
    required = {
        p.name
        for p in inspect.signature(function).parameters.values()
        if p.default is p.empty and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    }
    return [kwargs for kwargs in calls if required <= set(kwargs)]


def _parametrized(mark):
    """``[{argname: value, ...}, ...]`` of one ``pytest.mark.parametrize(argnames, argvalues)``."""
    argnames = mark.args[0] if mark.args else mark.kwargs.get("argnames", ())
    argvalues = mark.args[1] if len(mark.args) > 1 else mark.kwargs.get("argvalues", ())
    if isinstance(argnames, str):
        argnames = [part.strip() for part in argnames.split(",") if part.strip()]
    structures = sys.modules.get("_pytest.mark.structures")
    param = getattr(structures, "ParameterSet", None)
    rows = []
    for row in argvalues:
        if param is not None and isinstance(row, param):  # pytest.param(...): its values, always a tuple
            values = tuple(row.values)
        else:
            values = (row,) if len(argnames) == 1 else tuple(row)
        rows.append(dict(zip(argnames, values)))
    return rows


def _call_test(function, calls):
    """Call a pytest-style test ``function`` once per keyword set; a coroutine it returns (an
    ``async def`` test) runs to its end. ``pytest.skip()`` inside skips that call."""
    for kwargs in calls:
        try:
            outcome = function(**kwargs)
            if isinstance(outcome, types.CoroutineType):
                import asyncio

                asyncio.run(outcome)
        except BaseException as err:
            if not _skipped(err):
                raise


def _skipped(err):
    """``err`` is pytest's or unittest's own skip (by identity: the candidate cannot raise these)."""
    outcomes = sys.modules.get("_pytest.outcomes")
    unittest = sys.modules.get("unittest")
    kinds = ((outcomes.Skipped, outcomes.XFailed) if outcomes else ()) + ((unittest.SkipTest,) if unittest else ())
    return bool(kinds) and isinstance(err, kinds)


def _run_pytest_class(cls):
    """Run a pytest-style test class (no ``__init__`` of its own): a fresh instance per ``test*``
    method, with its ``setup_method``/``teardown_method`` and the class's ``setup_class``/
    ``teardown_class``, as pytest does."""
    if "__init__" in vars(cls):
        return  # pytest does not collect it
    # inherited ones too, in definition order, base classes first (a name once)
    names = dict.fromkeys(name for klass in reversed(cls.__mro__) for name in vars(klass))
    methods = [name for name in names if name.startswith("test") and callable(getattr(cls, name, None))]
    if not methods:
        return
    if hasattr(cls, "setup_class"):
        cls.setup_class()
    try:
        for name in methods:
            instance = cls()
            method = getattr(instance, name)
            if hasattr(instance, "setup_method"):
                instance.setup_method(method)
            try:
                _call_test(method, _pytest_arguments(method))
            finally:
                if hasattr(instance, "teardown_method"):
                    instance.teardown_method(method)
    finally:
        if hasattr(cls, "teardown_class"):
            cls.teardown_class()
