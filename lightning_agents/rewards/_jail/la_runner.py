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
find run after the module, those its ``-k``, ``-m`` and node ids select), and a ``test*`` function
the tests ran themselves is not run again. pytest's ``skip``, ``skipif`` (string conditions too)
and ``xfail`` marks work as in pytest; the candidate's calls inside a test that carries ``xfail``,
expects to fail (``unittest.expectedFailure``) or skipped are no evidence that it is right, and
tests with no other call of it fail (:class:`NoEvidence`).

Every decision here reads only the tests' own objects and the harness's count of calls: never a
value the candidate returned (a condition string sees only names the tests bound by import or to
a literal).

Standard library only; ``unittest`` is imported only for tests that name it, ``pytest`` (the
trainer's, where it has one) likewise, ``inspect`` only for a ``test*`` function to run, ``re``
and ``platform`` only for a ``pytest.main`` selection or a string condition.
"""

import ast
import builtins
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


# The harness's count of its calls of the candidate (count_calls), and how many of them went to
# tests whose outcome shows nothing of the program: xfail, expectedFailure, a skip after the call.
_counter = [lambda: 0]
_unproven = [0]
# calls made while a test ran (outermost ones only); the others came from module-level code or a
# class fixture (setUpClass), where the tests may compute what a skip or xfail decides on
_inside = [0]
_depth = [0]
# a test was skipped or taken as xfail on a decision the candidate's replies may have made: a
# computed (not string) skipif/xfail condition that held, a skip raised in a test, a unittest skip
_steered = []
# skips the TestCase tests' own runs recorded (those a suite records beside them are its fixtures')
_case_skips = [0]


def count_calls(counter):
    """Have the runner read the harness's count of its calls of the candidate with ``counter()``:
    its channel's own count, which nothing of the candidate's reaches."""
    _counter[0] = counter


class _Watch:
    """The candidate's calls from here on, to count as no evidence (:meth:`unprove`) or not."""

    def __init__(self):
        self.start = _counter[0]()
        self.outer = _depth[0] == 0
        _depth[0] += 1

    def unprove(self):
        # a test nested in another such test (a TestCase run inside an xfail test) counts twice:
        # more calls taken for no evidence can fail a right program, never pass a wrong one
        _unproven[0] += max(0, _counter[0]() - self.start)

    def close(self):
        """The test ended: its calls (an outermost test's) were made inside a test."""
        _depth[0] -= 1
        if self.outer:
            _inside[0] += max(0, _counter[0]() - self.start)


class NoEvidence(AssertionError):
    """Every call of the candidate went to a test whose outcome shows nothing of it: pytest passes
    an ``xfail`` test that fails (so a wrong program) and one that passes, unittest an
    ``expectedFailure`` that fails, and a skip after the call says nothing; the tests hold no other
    check. A 0, not a verifier error: the candidate's replies had their say in those tests (a
    ``skip`` on a ``None`` result is the candidate's choice to make)."""


class XPassStrict(AssertionError):
    """A test marked ``xfail(strict=True)`` passed: pytest fails it."""


def watch_pytest():
    """Replace ``pytest.main`` (where the trainer has pytest) by :func:`pytest_main`, which collects
    nothing and returns 0. Under the ``__main__`` guard, ``pytest.main([__file__])`` asks for the
    tests' own ``test*`` functions, which :func:`run_uncalled` runs after them, those its arguments
    select; the real one ran in this trusted process and collected its working directory (the
    trainer's): the trainer's own test files ran inside every verdict."""
    try:
        import pytest
    except ImportError:
        return  # the tests' own import fails the same way, as a verdict
    pytest.main = pytest_main
    decorator = getattr(sys.modules.get("_pytest.mark.structures"), "MarkDecorator", None)
    if decorator is not None and callable(getattr(decorator, "with_args", None)):
        decorator.with_args = _recording(decorator.with_args)


# each skipif/xfail mark the tests made with arguments, and the harness's count of calls of the
# candidate then: a condition computed before its first reply cannot hold on one (:func:`_recording`)
_made = []


def _recording(with_args):
    """pytest's ``MarkDecorator.with_args`` (what ``pytest.mark.skipif(cond, ...)`` calls, after
    ``cond`` is computed) that records the mark it makes in :data:`_made`."""

    def recorded(self, *args, **kwargs):
        made = with_args(self, *args, **kwargs)
        if getattr(made, "name", None) in ("skipif", "xfail"):
            _made.append((getattr(made, "mark", made), _counter[0]()))
        return made

    return recorded


# TestCase classes one of whose tests started (by any runner), and the failed tests' reports.
_ran_cases = set()
_failures = []
# unittest.main() ran (its selection): the TestCase classes it left out stay out, as in a script
_main_ran = []
# what each pytest.main(...) of the tests selects (_selection), and its --runxfail/xfail_strict
_selections = []
_runxfail = []
_strict_xfail = []


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
    decorator, in place), also one defined in a module-level ``if``, ``try`` or ``with``: one the
    tests ran themselves, through ``globals()`` or a list, is not run again by :func:`run_uncalled`
    (a second run broke tests that keep state between calls, and called the candidate twice)."""
    for node in _module_statements(tree.body):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test"):
            node.decorator_list.append(ast.copy_location(ast.Name(RAN_MARK, ast.Load()), node))
    return tree


def _module_statements(body):
    """The statements of ``body`` that run at module level: those of its compound statements'
    blocks too (``if``, ``try``, ``with``, loops, ``match``), not those in a ``def`` or ``class``."""
    for node in body:
        yield node
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        for field in ("body", "orelse", "finalbody"):
            block = getattr(node, field, None)
            if isinstance(block, list):
                yield from _module_statements(block)
        for part in (*getattr(node, "handlers", ()), *getattr(node, "cases", ())):
            yield from _module_statements(part.body)


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


def _reached(value):
    """``value`` and the plain functions it reaches (at most 32): those it wraps (``__wrapped__``,
    as ``functools.wraps`` sets it) and those its closure holds (a decorator's wrapper that calls
    the function it was given, without ``functools.wraps``)."""
    seen, todo = [], [value]
    while todo and len(seen) < 32:
        item = todo.pop(0)
        if type(item) is not types.FunctionType or any(item is known for known in seen):
            continue
        seen.append(item)
        todo.append(vars(item).get("__wrapped__"))
        for cell in item.__closure__ or ():
            try:
                todo.append(cell.cell_contents)
            except ValueError:
                pass  # a cell not filled yet
    return seen


def _already_ran(name, value):
    """The tests ran the ``test*`` function ``value`` bound to ``name`` themselves: the recording
    wrapper of the ``def`` of that name is in what ``value`` reaches, and ran (not that of another
    test a decorator of the tests' holds: that one ran says nothing of this one)."""
    return any(
        "__la_marked__" in vars(function) and function.__name__ == name and _ran(function)
        for function in _reached(value)
    )


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
    (a class fixture's) is recorded as well. The candidate's calls in a test that expects to fail
    (``expectedFailure``) or skipped are no evidence (:class:`NoEvidence`)."""
    import unittest

    original = unittest.TestCase.run

    def run(self, result=None):
        _ran_cases.add(type(self))
        if result is None:
            result = self.defaultTestResult()
        before, skipped, watch = _bad_counts(result), len(getattr(result, "skipped", ())), _Watch()
        try:
            return original(self, result)
        finally:
            watch.close()
            report = _report(result, before)
            if report is not None:
                _failures.append(report)
            if len(getattr(result, "skipped", ())) > skipped:
                _case_skips[0] += len(getattr(result, "skipped", ())) - skipped
                if not _skip_decorated(self):
                    _steered.append(True)  # a SkipTest raised in setUp or the test, on anything
                watch.unprove()
            elif _expecting_failure(self):
                watch.unprove()

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
        skipped, case_skips = len(getattr(result, "skipped", ())), _case_skips[0]
        try:
            return suite_run(self, result, debug)
        finally:
            report = _report(result, before) if len(_failures) == reported else None
            if report is not None:
                _failures.append(report)
            if len(getattr(result, "skipped", ())) - skipped > _case_skips[0] - case_skips:
                # a skip outside its tests' runs: a setUpClass's SkipTest, perhaps on a reply
                _steered.append(True)

    unittest.TestCase.run = run
    unittest.TestSuite.run = run_suite
    unittest.main = main
    for name, skips_when in (("skipIf", True), ("skipUnless", False)):
        steering = _steering(getattr(unittest, name), skips_when)
        setattr(unittest, name, steering)
        setattr(unittest.case, name, steering)


def _steering(decorator, skips_when):
    """``unittest.skipIf``/``skipUnless`` (``decorator``) that records a skip decided after the
    candidate had replied (:data:`_steered`): the condition may be computed from a reply
    (``skipUnless(HAS_ADD)``, ``HAS_ADD = add(0, 0) is not None``). ``unittest.skip`` decides
    nothing on a reply."""

    def decide(condition, reason):
        if bool(condition) is skips_when and _counter[0]() > 0:
            _steered.append(True)
        return decorator(condition, reason)

    return decide


def _skip_decorated(test):
    """``test`` (a ``TestCase``) was skipped by a decorator of its class or method, as
    ``TestCase.run`` reads it: decided where the tests define it (:func:`_steering`)."""
    method = getattr(test, getattr(test, "_testMethodName", ""), None)
    return bool(getattr(type(test), "__unittest_skip__", False) or getattr(method, "__unittest_skip__", False))


def _expecting_failure(test):
    """``test`` (a ``TestCase``) is one unittest expects to fail (``@unittest.expectedFailure`` on
    its method or class), read as unittest reads it."""
    method = getattr(test, getattr(test, "_testMethodName", ""), None)
    return bool(
        getattr(test, "__unittest_expecting_failure__", False)
        or getattr(method, "__unittest_expecting_failure__", False)
    )


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


def _suite(unittest, classes, module_marks):
    """The suite of ``classes``' tests, those ``pytest.main(...)``'s selection keeps where the tests
    called it."""
    loader = unittest.TestLoader()
    if not _selections:
        return unittest.TestSuite(loader.loadTestsFromTestCase(cls) for cls in classes)
    suites = []
    for cls in classes:
        marks = [*_class_marks(cls), *module_marks]
        kept = [
            name
            for name in loader.getTestCaseNames(cls)
            if _chosen(name, cls.__name__, [*_marks(getattr(getattr(cls, name, None), "pytestmark", None)), *marks])
        ]
        suites.append(unittest.TestSuite(cls(name) for name in kept))
    return unittest.TestSuite(suites)


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
    names (one it names is a helper the tests call themselves), those ``pytest.main(...)`` selects
    where they called it. Raises what a test raised, :class:`CaseFailed` for a failed ``TestCase``
    test, whichever runner ran it, or :class:`NoEvidence` where every call of the candidate went
    to a test whose outcome shows nothing of it."""
    named = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)}
    module_marks = _marks(env.get("pytestmark"))
    conditions = _Conditions(env, tree)
    _selections[:] = [_resolved(selection, env) for selection in _selections]
    for name, value in list(env.items()):
        if not name.startswith(("test", "Test")) or name in named:
            continue
        if _already_ran(name, value):
            continue  # the tests ran it themselves (a decorator of theirs may wrap the mark)
        if _tests_function(value, env) and name.startswith("test"):
            for kwargs, xfail, marks in _pytest_calls(value, module_marks, conditions):
                if _chosen(name, None, marks):
                    _run_call(value, kwargs, xfail, name)
        elif isinstance(value, type) and value.__module__ == TESTS_MODULE and name.startswith("Test"):
            if not _is_test_case(value):
                _run_pytest_class(value, [*_class_marks(value), *module_marks], conditions)
    unittest = sys.modules.get("unittest")
    pending = [] if _main_ran else [cls for cls in _own_cases(env) if cls not in _ran_cases]
    if pending:
        result = unittest.TestResult()
        _suite(unittest, pending, module_marks).run(result)
        report = _report(result)
        if report is not None and not _failures:
            # unittest was not watched (the tests reached TestCase without naming unittest)
            _failures.append(report)
    if _failures:
        raise CaseFailed(f"{len(_failures)} failed: {_failures[0]}")
    calls = _counter[0]()
    # where a skip or xfail may have been decided on a reply, the calls made outside any test (the
    # module's code, a setUpClass) are no evidence either: ``SUPPORTED = f(0) is not None`` and
    # ``skipif(not SUPPORTED)`` skipped the only test of a program returning None, and it passed
    outside = max(0, calls - _inside[0]) if _steered else 0
    if calls and calls <= _unproven[0] + outside:
        raise NoEvidence(
            f"all {calls} calls of the candidate were in tests whose outcome shows nothing of it "
            "(marked xfail, expectedFailure, or skipped after the call), or outside any test where a "
            "skip or xfail may have been decided on its replies, and no other test calls it"
        )


def _is_test_case(cls):
    unittest = sys.modules.get("unittest")
    return unittest is not None and issubclass(cls, unittest.TestCase)


def _marks(value):
    """pytest marks held in ``value`` (one mark, or a list, as ``pytestmark`` is written)."""
    marks = value if isinstance(value, (list, tuple)) else [value] if value is not None else []
    return [mark for mark in marks if hasattr(mark, "name")]


def _class_marks(cls):
    """The pytest marks of a class: its own ``pytestmark`` and its bases' (pytest reads them along
    the MRO: a subclass's own list does not hide its base's)."""
    return [mark for klass in cls.__mro__ for mark in _marks(vars(klass).get("pytestmark"))]


class _Conditions:
    """The globals string ``skipif``/``xfail`` conditions are evaluated with (:func:`_names`),
    built at the first such condition: most tests have none."""

    def __init__(self, env, tree):
        self.env, self.tree, self.names, self.computed = env, tree, None, None

    def steer(self, mark, holding):
        """Conditions of ``mark`` that held for a skip or an xfail: one the tests computed (not a
        string, whose names the candidate cannot reach) after the candidate's first reply, where
        the tests write a condition that reads a name the candidate may have reached, may hold on a
        reply (:data:`_steered`). A mark not recorded when made (:func:`_recording`) is taken as
        made after a reply."""
        if all(type(condition) is str for condition in holding):
            return
        made = getattr(mark, "mark", mark)
        calls = next((count for known, count in _made if known is made), 1)
        if calls and self.reply_conditions():
            _steered.append(True)

    def reply_conditions(self):
        """The tests write a ``skipif``/``xfail`` condition that reads a name beyond those a string
        condition sees (:func:`_names`) and the builtins: ``skipif(not SUPPORTED)``, where
        ``SUPPORTED = f(0) is not None``; ``skipif(sys.version_info < (3, 8))`` reads none."""
        if self.computed is None:
            if self.names is None:
                self.names = _names(self.env, self.tree)
            safe = set(self.names) | (set(dir(builtins)) - _bound_names(self.tree))
            self.computed = _computed_conditions(self.tree, safe)
        return self.computed

    def evaluate(self, mark, condition):
        """``True``/``False`` for one condition of ``mark`` as pytest evaluates it, or ``None``
        where it cannot be told here (an error, a name left out, a condition that is not a bool, an
        int or a string, a string's value not of a builtin type: the caller fails closed)."""
        if type(condition) in (bool, int) or _numpy_bool(condition):
            return bool(condition)
        if type(condition) is not str:
            return None  # pytest would bool() it: a foreign __bool__ is not called here
        if self.names is None:
            self.names = _names(self.env, self.tree)
        try:
            code = compile(condition, f"<{mark.name} condition>", "eval")
            result = eval(code, dict(self.names))  # noqa: S307 -- the trusted tests' own condition
        except Exception:  # noqa: BLE001 -- pytest fails the test; here the caller fails closed
            return None
        # builtin types only: their truth is their own (a value of another's, its __bool__)
        return bool(result) if type(result) in _TRUTHS else None


def _numpy_bool(value):
    """``value`` is numpy's own bool (``np.int64(1) > 0``), whose truth is numpy's, where the tests
    imported numpy."""
    numpy = sys.modules.get("numpy")
    return numpy is not None and type(value) is getattr(numpy, "bool_", None)


_LITERALS = (bool, int, float, str, bytes, type(None))
_TRUTHS = (*_LITERALS, tuple, list, dict, set, frozenset)


def _names(env, tree):
    """What a string condition sees: pytest's ``os``, ``sys`` and ``platform`` (no ``config``: a
    condition naming it cannot be told), the builtins, and those globals of the tests' that the
    candidate cannot have reached: names bound only by the tests' module-level imports, and names
    bound only by module-level assignments of a literal (in a ``try`` of imports and such
    assignments too: ``HAS_NUMPY = True``) that still hold one of those literals. pytest gives the
    condition every global; one the tests computed may hold what the candidate returned, and a
    condition on it would let the candidate say whether a test runs."""
    import os
    import platform

    imported, literals, other = set(), {}, set()
    safe_imports = {
        id(alias)
        for node in _module_statements(tree.body)
        if isinstance(node, (ast.Import, ast.ImportFrom))
        for alias in node.names
    }
    safe_literals = {id(target): value for target, value in _literal_assignments(tree)}
    for node in _global_bindings(tree):
        if isinstance(node, ast.alias):
            bound = (node.asname or node.name).split(".")[0]
            (imported if id(node) in safe_imports else other).add(bound)
        elif isinstance(node, ast.Name) and id(node) in safe_literals:
            literals.setdefault(node.id, []).append(safe_literals[id(node)])
        elif isinstance(node, ast.Name):
            other.add(node.id)
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            other.update(node.names)
        elif isinstance(node, ast.MatchMapping):
            other.add(node.rest)
        else:  # a def, a class, ``except ... as``, a ``match`` capture
            other.add(node.name)
    names = {"__builtins__": builtins, "os": os, "sys": sys, "platform": platform}
    for name in imported - other - set(literals):
        if name in env:
            names[name] = env[name]
    for name, values in literals.items():
        value = env.get(name, _names)
        if name not in other and name not in imported and type(value) in _LITERALS:
            if any(type(value) is type(literal) and value == literal for literal in values):
                names[name] = value
    return names


def _global_bindings(tree):
    """The nodes of ``tree`` that bind a global of the tests': imports, assignment targets, ``del``,
    ``def``/``class`` names, ``except ... as`` and ``match`` captures at module level (not inside a
    function, class or comprehension, which bind their own), and anywhere a ``global``/``nonlocal``
    statement or the target of a ``:=`` (which binds outside a comprehension)."""
    scoped = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
    comprehensions = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
    found, todo = [], [tree]
    for node in ast.walk(tree):
        if isinstance(node, (ast.Global, ast.Nonlocal)):
            found.append(node)
        elif isinstance(node, ast.NamedExpr):
            found.append(node.target)
    while todo:
        node = todo.pop()
        if isinstance(node, ast.alias):
            found.append(node)
        elif isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            found.append(node)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found.append(node)
        elif isinstance(node, (ast.ExceptHandler, ast.MatchAs, ast.MatchStar)) and node.name:
            found.append(node)
        elif isinstance(node, ast.MatchMapping) and node.rest:
            found.append(node)
        if isinstance(node, scoped):
            # what a def or class evaluates where it stands: decorators, defaults, bases
            todo.extend(getattr(node, "decorator_list", ()))
            todo.extend(getattr(node, "bases", ()))
            if not isinstance(node, ast.ClassDef):
                todo.extend(node.args.defaults + [d for d in node.args.kw_defaults if d is not None])
        elif not isinstance(node, comprehensions):
            todo.extend(ast.iter_child_nodes(node))
    return found


def _literal_assignments(tree):
    """``(target Name node, value)`` of the module-level assignments of a literal that nothing of
    the candidate's can have steered: in the module's body, or in a module-level ``try`` that holds
    only imports, ``pass`` and such assignments (``try: import numpy; HAS = True`` ...)."""
    found = []

    def literal(node):
        if isinstance(node, ast.Assign) and all(isinstance(t, ast.Name) for t in node.targets):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None and isinstance(node.target, ast.Name):
            targets, value = [node.target], node.value
        else:
            return None
        try:
            constant = ast.literal_eval(value)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            return None
        return [(target, constant) for target in targets] if type(constant) in _LITERALS else None

    for node in tree.body:
        if isinstance(node, ast.Try):
            blocks = [node.body, node.orelse, node.finalbody, *(handler.body for handler in node.handlers)]
            statements = [statement for block in blocks for statement in block]
            plain = (ast.Import, ast.ImportFrom, ast.Pass)
            if all(isinstance(s, plain) or literal(s) is not None for s in statements):
                found.extend(pair for s in statements if not isinstance(s, plain) for pair in literal(s))
        elif literal(node) is not None:
            found.extend(literal(node))
    return found


def _computed_conditions(tree, safe):
    """A ``skipif``/``xfail`` condition of the tests (``skipif.with_args(...)`` too) that is not a
    literal or a string reads a name not in ``safe``. A mark made another way (``Mark(...)``) is
    not followed."""
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
        if name not in ("skipif", "xfail", "with_args"):
            continue
        given = [*node.args, *(k.value for k in node.keywords if k.arg in ("condition", None))]
        for value in given:
            if any(isinstance(part, ast.Name) and part.id not in safe for part in ast.walk(value)):
                return True
    return False


def _bound_names(tree):
    """Every name a module-level binding of ``tree`` binds (:func:`_global_bindings`)."""
    bound = set()
    for node in _global_bindings(tree):
        if isinstance(node, ast.alias):
            bound.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, ast.Name):
            bound.add(node.id)
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            bound.update(node.names)
        elif isinstance(node, ast.MatchMapping):
            bound.add(node.rest)
        else:
            bound.add(node.name)
    return bound


def _conditions(mark):
    """A ``skipif``/``xfail`` mark's conditions, as pytest reads them: ``condition=``, else its
    positional arguments (none: the mark holds unconditionally)."""
    return (mark.kwargs["condition"],) if "condition" in mark.kwargs else tuple(mark.args)


def _skips(marks, conditions):
    """pytest would skip a test (or class) with these marks: a ``skipif`` one of whose conditions
    holds (one that cannot be told here does not: the test runs, which can fail a right program,
    never pass a wrong one), or a ``skip``."""
    for mark in marks:
        if mark.name == "skipif":
            held = _conditions(mark)
            if not held:
                return True
            holding = [condition for condition in held if conditions.evaluate(mark, condition) is True]
            if holding:
                conditions.steer(mark, holding)
                return True
    return any(mark.name == "skip" for mark in marks)


class _Xfail:
    """The ``xfail`` mark that holds for a test, as pytest reads it."""

    def __init__(self, mark):
        run, strict = mark.kwargs.get("run", True), mark.kwargs.get("strict")
        # not a bool or an int: taken the strict way (run, strict), never a test left out
        self.run = not (type(run) in (bool, int) and not run)
        self.strict = bool(_strict_xfail) if strict is None else not (type(strict) in (bool, int) and not strict)
        self.raises = mark.kwargs.get("raises")

    def expects(self, err):
        """``err``, raised by the test, is a failure the mark expects: an ``Exception`` (or
        ``pytest.fail``), of ``raises=`` where it gives a class or a tuple of classes (anything else
        it gives expects nothing: the failure stands). A ``BaseException`` beyond those (the
        candidate gone, its ``SystemExit``) still ends the tests."""
        outcomes = sys.modules.get("_pytest.outcomes")
        if not (isinstance(err, Exception) or (outcomes is not None and isinstance(err, outcomes.Failed))):
            return False
        raises = self.raises
        if raises is None:
            return True
        if isinstance(raises, type) or (type(raises) is tuple and all(isinstance(kind, type) for kind in raises)):
            return isinstance(err, raises)
        return False


def _xfail(marks, conditions):
    """The first ``xfail`` mark of ``marks`` that holds (unconditional, or a condition holds: one
    that cannot be told here does not, and the test runs as any other), or ``None``; ``None`` under
    ``pytest.main([... "--runxfail"])``."""
    if _runxfail:
        return None
    for mark in marks:
        if mark.name == "xfail":
            held = _conditions(mark)
            holding = [condition for condition in held if conditions.evaluate(mark, condition) is True]
            if holding:
                conditions.steer(mark, holding)
            if not held or holding:
                return _Xfail(mark)
    return None


def _pytest_calls(function, outer, conditions):
    """The calls pytest would make of a test ``function`` with marks ``outer`` beside its own (its
    class's, the module's): ``[(kwargs, xfail, marks)]``, one per ``parametrize`` combination
    (stacked marks crossed, ``pytest.param`` read with its own marks), leaving out those a skip
    mark skips or an ``xfail(run=False)`` holds, and all where it takes a parameter no mark gives
    (a fixture). Marks in pytest's order: the function's, a ``pytest.param``'s, ``outer``."""
    own = _marks(getattr(function, "pytestmark", ()))
    if _skips([*own, *outer], conditions):
        return []
    import inspect  # here: its import costs every verdict's harness a few ms

    axes = [_parametrized(mark) for mark in [*outer, *own] if mark.name == "parametrize"]
    required = {
        p.name
        for p in inspect.signature(function).parameters.values()
        if p.default is p.empty and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    }
    calls = []
    for combo in itertools.product(*axes):
        kwargs = dict(itertools.chain.from_iterable(values.items() for values, _ in combo))
        marks = [*own, *itertools.chain.from_iterable(param_marks for _, param_marks in combo), *outer]
        if not required <= set(kwargs) or _skips(marks, conditions):
            continue
        xfail = _xfail(marks, conditions)
        if xfail is None or xfail.run:
            calls.append((kwargs, xfail, marks))
    return calls


def _parametrized(mark):
    """``[({argname: value, ...}, marks), ...]`` of one ``pytest.mark.parametrize(argnames,
    argvalues)``: a row's marks are those its ``pytest.param(..., marks=...)`` gives."""
    argnames = mark.args[0] if mark.args else mark.kwargs.get("argnames", ())
    argvalues = mark.args[1] if len(mark.args) > 1 else mark.kwargs.get("argvalues", ())
    # pytest takes a row as the value itself only for one name given as a str: ("a",) or ["a"]
    # take each row as a tuple of values, as for several names
    single = isinstance(argnames, str)
    if single:
        argnames = [part.strip() for part in argnames.split(",") if part.strip()]
    structures = sys.modules.get("_pytest.mark.structures")
    param = getattr(structures, "ParameterSet", None)
    rows = []
    for row in argvalues:
        if param is not None and isinstance(row, param):  # pytest.param(...): its values, always a tuple
            values, marks = tuple(row.values), _marks(list(row.marks))
        else:
            values, marks = (row,) if single and len(argnames) == 1 else tuple(row), []
        rows.append((dict(zip(argnames, values)), marks))
    return rows


def _run_call(function, kwargs, xfail, name):
    """Call a pytest-style test ``function`` once with ``kwargs``, as pytest runs one test: a
    coroutine it returns (an ``async def`` test) runs to its end; ``pytest.skip()`` or
    ``pytest.xfail()`` inside skips it; under an ``xfail`` mark (``xfail``) a failure it expects is
    no failure, and a pass fails only a strict mark. The candidate's calls in a test that skipped
    or carries ``xfail`` are no evidence (:class:`NoEvidence`): a wrong program fails an xfail
    test as pytest expects, and may pass one (XPASS) that checks the wrong thing."""
    watch = _Watch()
    try:
        outcome = function(**kwargs)
        if isinstance(outcome, types.CoroutineType):
            import asyncio

            asyncio.run(outcome)
    except BaseException as err:
        if _skipped(err):
            _steered.append(True)  # its reason may read what the module got from the candidate
        elif not (xfail is not None and xfail.expects(err)):
            raise
        watch.unprove()
        return
    finally:
        watch.close()
    if xfail is not None:
        watch.unprove()
        if xfail.strict:
            raise XPassStrict(f"{name} passed; its strict xfail mark expects it to fail")


def _skipped(err):
    """``err`` is pytest's or unittest's own skip (by identity: the candidate cannot raise these)."""
    outcomes = sys.modules.get("_pytest.outcomes")
    unittest = sys.modules.get("unittest")
    kinds = ((outcomes.Skipped, outcomes.XFailed) if outcomes else ()) + ((unittest.SkipTest,) if unittest else ())
    return bool(kinds) and isinstance(err, kinds)


def _run_pytest_class(cls, marks, conditions):
    """Run a pytest-style test class (no ``__init__`` of its own) with ``marks`` (its own, its
    bases', the module's): a fresh instance per ``test*`` method, with its ``setup_method``/
    ``teardown_method`` and the class's ``setup_class``/``teardown_class`` (these only where a
    method runs: none does for a class all skipped or left out), as pytest does."""
    if "__init__" in vars(cls) or _skips(marks, conditions):
        return  # pytest does not collect it, or skips all of it (its setup_class too)
    # inherited ones too, in definition order, base classes first (a name once)
    names = dict.fromkeys(name for klass in reversed(cls.__mro__) for name in vars(klass))
    methods = [name for name in names if name.startswith("test") and callable(getattr(cls, name, None))]
    set_up = False
    try:
        for name in methods:
            instance = cls()
            method = getattr(instance, name)
            calls = [call for call in _pytest_calls(method, marks, conditions) if _chosen(name, cls.__name__, call[2])]
            if not calls:
                continue
            if not set_up:
                set_up = True
                if hasattr(cls, "setup_class"):
                    cls.setup_class()
            if hasattr(instance, "setup_method"):
                instance.setup_method(method)
            try:
                for kwargs, xfail, _ in calls:
                    _run_call(method, kwargs, xfail, f"{cls.__name__}.{name}")
            finally:
                if hasattr(instance, "teardown_method"):
                    instance.teardown_method(method)
    finally:
        if set_up and hasattr(cls, "teardown_class"):
            cls.teardown_class()


# pytest.main(...): what it selects.

# short options of pytest's that select nothing, and those that take a value and select nothing
_SHORT_FLAGS = frozenset("qvsxl")
_SHORT_VALUED = frozenset("pWr")
_LONG_FLAGS = frozenset(
    {
        "--quiet",
        "--verbose",
        "--exitfirst",
        "--showlocals",
        "--disable-warnings",
        "--disable-pytest-warnings",
        "--no-header",
        "--no-summary",
        "--strict-markers",
        "--strict-config",
        "--runxfail",
    }
)
_LONG_VALUED = frozenset(
    {"--tb", "--maxfail", "--durations", "--durations-min", "--color", "--capture", "--log-level", "--junitxml"}
)


def pytest_main(args=None, *more, **kwargs):
    """``pytest.main``'s stand-in: records what ``args`` select of the tests (:func:`_selection`),
    which :func:`run_uncalled` runs after the module, and returns 0 (the real one collected the
    trainer's working directory inside the trusted harness)."""
    _selections.append(_selection(args))
    return 0


def _selection(args):
    """What ``pytest.main(args)`` runs of the tests: ``None`` for all of them, else ``(node ids or
    None, -k expression or None, -m expression or None)``; a node id is the names after its file's
    (``file::TestA::test_b``), its parameters dropped. Anything not read here (an option it does
    not know: ``--deselect``, ``--lf``, ``-c``; an argument not a ``str``; an expression it cannot
    parse) selects all of them: more tests than asked can fail a right program, never pass a wrong
    one. A path (``__file__``) selects the whole file; so do no arguments (the real one collected
    the working directory)."""
    if type(args) not in (list, tuple):
        return None
    ids, whole, keyword, markexpr = [], False, None, None
    words = iter(list(args))
    for word in words:
        if type(word) is not str:
            return None
        if word.startswith("--"):
            option, equals, value = word.partition("=")
            if option in _LONG_VALUED:
                if not equals:
                    next(words, None)
            elif word == "--runxfail":
                _runxfail.append(True)
            elif word not in _LONG_FLAGS:
                return None
        elif word.startswith("-") and len(word) > 1:
            chars = iter(word[1:])
            for char in chars:
                if char in _SHORT_FLAGS:
                    continue
                if char not in "kmoW" and char not in _SHORT_VALUED:
                    return None
                rest = "".join(chars)
                if rest.startswith("=") and word[1] == char:
                    # argparse reads ``-k=expr`` as ``-k expr``; ``-k=`` gives it no value
                    rest = rest[1:]
                    if not rest:
                        return None
                value = rest or next(words, None)
                if type(value) is not str:
                    return None
                if char == "k":
                    keyword = value
                elif char == "m":
                    markexpr = value
                elif char == "o":
                    _ini_option(value)
        elif "::" in word:
            ids.append(tuple(part.split("[", 1)[0] for part in word.split("::")[1:]))
        else:
            whole = True
    try:
        keyword, markexpr = _expression(keyword), _expression(markexpr)
    except (SyntaxError, RecursionError):
        return None
    return (None if whole or not ids else ids, keyword, markexpr)


# what pytest reads as a true ini bool (its ``_strtobool``)
_INI_TRUE = frozenset({"y", "yes", "t", "true", "on", "1"})


def _ini_option(value):
    """``-o name=value``: the one ini option read here, ``xfail_strict`` (``strict_xfail``,
    ``strict``), taken when true; the others select nothing."""
    name, _, setting = value.partition("=")
    if name.strip() in ("xfail_strict", "strict_xfail", "strict") and setting.strip().lower() in _INI_TRUE:
        _strict_xfail.append(True)


def _resolved(selection, env):
    """``selection`` with its node ids checked against the tests in ``env``: one that names no
    test of theirs (a typo, a nested class) made pytest stop with an error and run nothing; here it
    selects all of them."""
    if selection is None or selection[0] is None:
        return selection
    for parts in selection[0]:
        value = env.get(parts[0]) if parts else None
        if len(parts) == 1 and (type(value) is types.FunctionType or isinstance(value, type)):
            continue
        if len(parts) == 2 and isinstance(value, type) and callable(getattr(value, parts[1], None)):
            continue
        return None
    return selection


def _chosen(name, class_name, marks):
    """The test ``name`` (of class ``class_name``, or a function), with ``marks``, is one that
    some ``pytest.main(...)`` of the tests selects, or they called none."""
    return not _selections or any(_keeps(selection, name, class_name, marks) for selection in _selections)


def _keeps(selection, name, class_name, marks):
    """``selection`` keeps the test. ``-k`` words match, as pytest's do, any name of the test's in
    any case: its own, its class's, its marks', and also its file's and folders', unknown here (in
    ``test_add.py``, ``-k add`` keeps every test): a word no known name holds may match, so a test
    is left out only where the expression is false whatever those unknown names are (``not slow``
    leaves out ``test_slow``). ``-m`` words are mark names."""
    if selection is None:
        return True
    ids, keyword, markexpr = selection
    if ids is not None and not any(parts in ((name,), (class_name,), (class_name, name)) for parts in ids):
        return False
    mark_names = {mark.name for mark in marks}
    known = [text.lower() for text in (name, class_name, *mark_names) if type(text) is str]
    if (
        keyword is not None
        and _kleene(keyword, lambda word: True if any(word.lower() in n for n in known) else None) is False
    ):
        return False
    return markexpr is None or _kleene(markexpr, lambda word: word in mark_names) is not False


def _expression(text):
    """pytest's ``-k``/``-m`` expression ``text`` as a tree: ``("or"|"and", left, right)``,
    ``("not", operand)``, ``("word", text)``; ``None`` for no expression (no filter). Raises
    ``SyntaxError`` where pytest's grammar differs (``-m "mark(k=1)"``, a quote, a bad token)."""
    import re

    if text is None or not text.strip():
        return None
    tokens = []
    for match in re.finditer(r"[ \t]*(?:(\()|(\))|((?:\w|:|\+|-|\.|\[|\]|\\|/)+)|(\S))", text):
        opened, closed, word, other = match.groups()
        if other is not None:
            raise SyntaxError(f"unexpected character {other!r} in {text!r}")
        tokens.append("(" if opened else ")" if closed else word)
    position = [0]

    def peek():
        return tokens[position[0]] if position[0] < len(tokens) else None

    def take():
        position[0] += 1
        return tokens[position[0] - 1]

    def either():
        tree = both()
        while peek() == "or":
            take()
            tree = ("or", tree, both())
        return tree

    def both():
        tree = single()
        while peek() == "and":
            take()
            tree = ("and", tree, single())
        return tree

    def single():
        token = peek()
        if token == "not":
            take()
            return ("not", single())
        if token == "(":
            take()
            tree = either()
            if peek() != ")":
                raise SyntaxError(f"expected ')' in {text!r}")
            take()
            return tree
        if token is None or token in (")", "and", "or"):
            raise SyntaxError(f"expected a word in {text!r}")
        take()
        if peek() == "(":
            raise SyntaxError(f"mark arguments are not read here: {text!r}")
        return ("word", token)

    tree = either()
    if peek() is not None:
        raise SyntaxError(f"unexpected {peek()!r} in {text!r}")
    return tree


def _kleene(tree, match):
    """``tree`` (:func:`_expression`) with ``match(word)`` giving ``True``, ``False`` or ``None``
    (may be either): ``True``/``False`` where that holds whatever the ``None`` words are."""
    kind = tree[0]
    if kind == "word":
        return match(tree[1])
    if kind == "not":
        value = _kleene(tree[1], match)
        return None if value is None else not value
    left, right = _kleene(tree[1], match), _kleene(tree[2], match)
    if kind == "and":
        return False if False in (left, right) else True if left is True and right is True else None
    return True if True in (left, right) else False if left is False and right is False else None
