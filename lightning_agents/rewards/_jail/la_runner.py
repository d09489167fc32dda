"""What a test runner would run of the trusted tests, for the harness (``la_harness.run``).

Tests written for a runner keep their checks where executing the file as a module never reaches:
pytest-style ``test_*`` functions, ``unittest.TestCase`` classes with no runner line
(BigCodeBench's shape), ``unittest.main()`` or ``check(f)`` under ``if __name__ == "__main__":``.
Executed so, they ended without calling the candidate and passed any program (red team 46's W0).
The harness runs them as the script or pytest would: the ``__main__`` blocks where they stand,
``unittest.main()`` on the tests' own cases, then each ``test*`` function, pytest-style ``Test*``
class and ``TestCase`` class that nothing ran. A failure of any of the tests' ``TestCase`` tests,
run by whatever runner, fails the tests (``CaseFailed``): a runner would report it.

As in a script, the blocks see ``__file__`` and ``sys.argv`` of the tests' own, and the tests' own
``sys.exit(0)`` ends them with success; ``pytest.main`` collects nothing (the functions it would
find run after the module), and a ``test*`` function the tests ran themselves is not run again.

Standard library only; ``unittest`` is imported only for tests that name it, ``pytest`` (the
trainer's, where it has one) likewise, ``inspect`` only for a ``test*`` function to run.
"""

import ast
import itertools
import sys
import types

#: The ``__name__`` the tests run under (``la_harness.run``): their functions' ``__module__``.
TESTS_MODULE = "__tests__"
#: The tests' ``__file__`` and ``sys.argv[0]``: a script has them, and no file of this name exists.
SCRIPT_PATH = "<tests>"
#: Globals a script has beside ``__name__``: the tests', never names of the candidate's.
SCRIPT_NAMES = frozenset({"__file__"})
#: The decorator :func:`mark_tests` puts on the tests' ``test*`` functions.
RAN_MARK = "__la_ran__"


def script_globals():
    """The globals the tests' module has beside ``__name__``: :data:`SCRIPT_NAMES` as a script sees
    them (``pytest.main([__file__])`` must not make ``__file__`` a name of the candidate's), and
    the :data:`RAN_MARK` decorator :func:`mark_tests` put on their ``test*`` functions."""
    return {"__file__": SCRIPT_PATH, RAN_MARK: ran_mark}


def watch_pytest():
    """Replace ``pytest.main`` (where the trainer has pytest) by a stand-in that collects nothing
    and returns 0. Under the ``__main__`` guard, ``pytest.main([__file__])`` asks for the tests' own
    ``test*`` functions, which :func:`run_uncalled` runs after them; the real one ran in this
    trusted process and collected its working directory (the trainer's): the trainer's own test
    files ran inside every verdict."""
    try:
        import pytest
    except ImportError:
        return  # the tests' own import fails the same way, as a verdict
    pytest.main = lambda *args, **kwargs: 0


# TestCase classes one of whose tests started (by any runner), and the failed tests' reports.
_ran_cases = set()
_failures = []
# unittest.main() ran (its selection): the TestCase classes it left out stay out, as in a script
_main_ran = []


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


# test* functions of the tests' that ran (called by the tests themselves, however they found them)
_ran_tests = []


def mark_tests(tree):
    """Have each module-level ``test*`` function of ``tree`` record its calls (an innermost
    decorator, in place): one the tests ran themselves, through ``globals()`` or a list, is not
    run again by :func:`run_uncalled` (a second run broke tests that keep state between calls, and
    called the candidate twice)."""
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test"):
            node.decorator_list.append(ast.copy_location(ast.Name(RAN_MARK, ast.Load()), node))
    return tree


def ran_mark(function):
    """The decorator of :func:`mark_tests` (``functools.wraps``: pytest's marks and
    ``inspect.signature`` still see the test's own)."""
    import functools

    @functools.wraps(function)
    def recorded(*args, **kwargs):
        outcome = function(*args, **kwargs)
        # an ``async def`` test the tests called and never awaited ran none of its body: still to run
        if not isinstance(outcome, types.CoroutineType) and not _ran(recorded):
            _ran_tests.append(recorded)
        return outcome

    recorded.__la_marked__ = True
    return recorded


def _wrapped_chain(value):
    """``value`` and the functions it wraps (``__wrapped__``, as ``functools.wraps`` sets it)."""
    seen = []
    while value is not None and not any(value is known for known in seen) and len(seen) < 32:
        seen.append(value)
        value = getattr(value, "__wrapped__", None) if type(value) is types.FunctionType else None
    return seen


def _ran(function):
    return any(function is ran for ran in _ran_tests)


def _tests_function(value, env):
    """``value`` is a function the tests define: their own code (or a decorator's wrapper of
    theirs), or :func:`ran_mark`'s wrapper of it."""
    return type(value) is types.FunctionType and (value.__globals__ is env or "__la_marked__" in vars(value))


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
    parses the harness's ``argv``), or those its ``argv``/``defaultTest`` select, and raises
    :class:`TestsExited`, or returns with ``exit=False``. A suite's failure outside its tests
    (a class fixture's) is recorded as well."""
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

    def main(module="__main__", defaultTest=None, argv=None, *args, exit=True, **kwargs):  # noqa: A002,N803 -- unittest.main's own keywords
        result = unittest.TestResult()
        _main_ran.append(True)
        _selected(unittest, env, defaultTest, argv).run(result)
        if exit:
            raise TestsExited(not result.wasSuccessful())
        return types.SimpleNamespace(result=result)

    suite_run = unittest.TestSuite.run

    def run_suite(self, result, debug=False):
        # a class or module fixture's failure (tearDownClass, a class cleanup) goes into the result
        # outside any TestCase.run: a runner reports it, whether or not the tests look at it
        reported, before = len(_failures), _bad_counts(result)
        try:
            return suite_run(self, result, debug)
        finally:
            report = _report(result, before) if len(_failures) == reported else None
            if report is not None:
                _failures.append(report)

    unittest.TestCase.run = run
    unittest.TestSuite.run = run_suite
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


def _selected(unittest, env, default_test, argv):
    """The suite ``unittest.main(defaultTest=..., argv=[prog, words...])`` runs, as its parser reads
    ``argv``: the tests it names, else ``defaultTest``, else all of the tests' own ``TestCase``
    classes; ``-k PATTERN`` keeps the test methods that match, as unittest's does."""
    names, patterns = [], []
    words = iter(list(argv or [])[1:])
    for word in words:
        if word == "-k":
            pattern = next(words, "")
            patterns.append(pattern if "*" in pattern else f"*{pattern}*")
        elif word.startswith("-k"):
            patterns.append(word[2:] if "*" in word[2:] else f"*{word[2:]}*")
        elif word == "--durations":
            next(words, None)  # its number
        elif not word.startswith("-"):
            names.append(word)
    if not names and default_test:
        names = [default_test] if isinstance(default_test, str) else list(default_test)
    loader = unittest.TestLoader()
    loader.testNamePatterns = patterns or None
    if not names:
        return unittest.TestSuite(loader.loadTestsFromTestCase(cls) for cls in _own_cases(env))
    module = types.ModuleType(TESTS_MODULE)
    module.__dict__.update(env)
    return loader.loadTestsFromNames(names, module)


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
    module_marks = _marks(env.get("pytestmark"))
    for name, value in list(env.items()):
        if not name.startswith(("test", "Test")) or name in named:
            continue
        if any(_ran(function) for function in _wrapped_chain(value)):
            continue  # the tests ran it themselves (a decorator of theirs may wrap the mark)
        if _tests_function(value, env) and name.startswith("test"):
            _call_test(value, _pytest_arguments(value, module_marks))
        elif isinstance(value, type) and value.__module__ == TESTS_MODULE and name.startswith("Test"):
            if not _is_test_case(value):
                _run_pytest_class(value, module_marks + _marks(getattr(value, "pytestmark", None)))
    unittest = sys.modules.get("unittest")
    pending = [] if _main_ran else [cls for cls in _own_cases(env) if cls not in _ran_cases]
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


def _marks(value):
    """pytest marks held in ``value`` (one mark, or a list, as ``pytestmark`` is written)."""
    marks = value if isinstance(value, (list, tuple)) else [value] if value is not None else []
    return [mark for mark in marks if hasattr(mark, "name")]


def _skip_condition(mark):
    """A ``skipif`` mark's conditions (positional, or ``condition=``) hold: any that is a bool or
    an int and true. A string condition, which pytest evaluates, is not: the test runs (it may fail
    a right program, never pass a wrong one)."""
    conditions = mark.args if mark.args else (mark.kwargs.get("condition", False),)
    return any(isinstance(condition, int) and condition for condition in conditions)


def _skips(marks):
    """pytest would not run a test (or class) with these marks: ``skip``, ``xfail`` (run here, a
    failure it expects would fail the tests), a ``skipif`` whose condition holds."""
    return any(mark.name in ("skip", "xfail") or (mark.name == "skipif" and _skip_condition(mark)) for mark in marks)


def _pytest_arguments(function, outer=()):
    """The keyword sets pytest would call ``function`` with (its ``parametrize`` marks, crossed),
    or ``[]`` where it would not run it here (a skip or xfail mark, a parameter no mark gives: a
    fixture)."""
    marks = [*outer, *_marks(getattr(function, "pytestmark", ()))]
    if _skips(marks):
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


def _run_pytest_class(cls, marks=()):
    """Run a pytest-style test class (no ``__init__`` of its own): a fresh instance per ``test*``
    method, with its ``setup_method``/``teardown_method`` and the class's ``setup_class``/
    ``teardown_class``, as pytest does."""
    if "__init__" in vars(cls) or _skips(marks):
        return  # pytest does not collect it, or skips all of it (its setup_class too)
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
                _call_test(method, _pytest_arguments(method, marks))
            finally:
                if hasattr(instance, "teardown_method"):
                    instance.teardown_method(method)
    finally:
        if hasattr(cls, "teardown_class"):
            cls.teardown_class()
