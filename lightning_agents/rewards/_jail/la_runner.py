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
and ``xfail`` marks work as in pytest, on the ``TestCase`` tests it would run too (not under
``unittest.main()``, which ignores them); a ``yield`` test stops pytest 9 at collection
(:class:`CollectionError`). The candidate's calls inside a test that carries ``xfail``, expects to
fail (``unittest.expectedFailure``) or skipped are no evidence that it is right, and tests with no
other call of it fail (:class:`NoEvidence`).

Every decision here reads only the tests' own objects and the harness's count of calls: never a
value the candidate returned (a condition string sees only names the tests bound by import or to
a literal, or computed from those alone with no call).

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
# tests left out because they take a fixture the harness cannot give (capsys, tmp_path, monkeypatch,
# a parametrized fixture): a pass must not rest on them (:func:`unrunnable`)
_unrunnable = []


def unrunnable():
    """``"<test>: <fixture>"`` for each test left out for a fixture the harness cannot give (pytest
    would have run it): the caller turns a pass into no verdict, never a pass that skipped them."""
    return list(_unrunnable)


def _steer_unconditional():
    """A skip or ``xfail`` that holds whatever the tests computed (``pytest.mark.skip``, an
    ``xfail`` with no condition, ``unittest.skip``) decided a test while calls of the candidate made
    outside any test were in, and the tests make such marks where a reply may decide whether they
    apply (:func:`_placed_marks`: ``if f(0) is None: pytestmark = pytest.mark.skip``): those calls
    are no evidence either. A mark written as a plain decorator of a module-level test is not."""
    if _dynamic_marks[0] and _counter[0]() > _inside[0]:
        _steered.append(True)


# the tests make a skip or xfail mark outside a plain decorator or a module-level pytestmark
_dynamic_marks = [False]
# what names a skip or an expected failure, in pytest's and unittest's spellings
_MARK_WORDS = frozenset({"skip", "skipif", "xfail", "skipIf", "skipUnless", "expectedFailure"})
# the nodes a mark may sit under and still be the decorator (or pytestmark) as written
_PLAIN_PATH = (ast.Call, ast.Attribute, ast.Name, ast.List, ast.Tuple, ast.keyword, ast.Constant, ast.Starred)


def _placed_marks(tree):
    """Whether ``tree`` makes a skip or xfail mark anywhere but as written on a module-level test
    (a decorator of a ``def`` or class at module level or in such a class, a ``pytestmark = ...``
    there, ``pytest.param(..., marks=...)`` inside either), reached through calls, attributes and
    literals only: one under an ``if``, a conditional expression or a helper may be applied on a
    reply. The bodies of the tests themselves are not read (a ``pytest.skip()`` there is seen when
    it runs)."""
    plain = set()

    def keep(node):
        todo = [node]
        while todo:
            item = todo.pop()
            if not isinstance(item, _PLAIN_PATH):
                continue  # what lies below it stays unmarked: dynamic if it names a mark
            plain.add(id(item))
            todo.extend(ast.iter_child_nodes(item))

    aliases, decorating = {}, set()

    def static(body):
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                for decorator in node.decorator_list:
                    keep(decorator)
                    if isinstance(decorator, ast.Name):
                        decorating.add(id(decorator))
                if isinstance(node, ast.ClassDef):
                    static(node.body)
            elif isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["pytestmark"]:
                keep(node.value)
            elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                aliases.setdefault(node.targets[0].id, []).append(node)

    static(tree.body)
    # a mark bound once to a name that is only ever a plain decorator (``slow =
    # pytest.mark.skip(reason="slow")``, ``@slow``) is applied as written, whatever the replies are
    # (before, it counted as placed on a reply, and a right program whose only calls were the
    # module's own scored 0 as NoEvidence, where pytest passes it)
    occurrences = {alias: [] for alias in aliases}
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in occurrences:
            occurrences[node.id].append(node)
    for alias, assigns in aliases.items():
        uses = occurrences[alias]
        stores = [node for node in uses if not isinstance(node.ctx, ast.Load)]
        loads = [node for node in uses if isinstance(node.ctx, ast.Load)]
        if len(assigns) == 1 and len(stores) == 1 and all(id(node) in decorating for node in loads):
            keep(assigns[0].value)
    tests = {
        id(node)
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test")
    }
    todo = [tree]
    while todo:
        node = todo.pop()
        if id(node) in tests:
            todo.extend(node.decorator_list)
            continue
        word = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else None
        if word in _MARK_WORDS and id(node) not in plain and not isinstance(getattr(node, "ctx", None), ast.Store):
            return True
        todo.extend(ast.iter_child_nodes(node))
    return False


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
# (class, method name) of each TestCase test that started: the others of its class still run as
# pytest runs them (red team 49's X5: ``TestAdd("test_small").run()`` hid ``test_big``)
_ran_case_tests = set()
_failures = []
# unittest.main() ran (its selection): the TestCase classes it left out stay out, as in a script
_main_ran = []
# what each pytest.main(...) of the tests selects (_selection), and its --runxfail/xfail_strict
_selections = []
_runxfail = []
_strict_xfail = []
# run_uncalled started: the tests' module has run, and what pytest.main selected is settled
_uncalled = []


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
# those the tests called with arguments of their own (a helper ``test_case(inp, expected)``, or one
# row of a parametrized test): pytest's calls of them still run, those wanting a fixture do not
_called_by_hand = []


def mark_tests(tree):
    """Have each module-level ``test*`` function of ``tree`` record its calls (an innermost
    decorator, in place), also one defined in a module-level ``if``, ``try`` or ``with``: one the
    tests ran themselves, through ``globals()`` or a list, is not run again by :func:`run_uncalled`
    (a second run broke tests that keep state between calls, and called the candidate twice)."""
    _dynamic_marks[0] = _placed_marks(tree)  # read before the decorators below are added
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
        # an ``async def`` test the tests called and never awaited ran none of its body: still to
        # run; so is one they called with arguments of their choosing (``test_add(1)`` for one row
        # of a parametrize mark, ``test_big(n=1)`` over its default): pytest's own calls differ
        if isinstance(outcome, types.CoroutineType):
            pass
        elif args or kwargs:
            _called_by_hand.append(recorded)
        elif not _ran(recorded):
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


def _by_hand(name, value):
    """The tests called the ``test*`` function ``value`` (bound to ``name``) with arguments."""
    return any(
        "__la_marked__" in vars(function)
        and function.__name__ == name
        and any(function is called for called in _called_by_hand)
        for function in _reached(value)
    )


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
        _ran_case_tests.add((type(self), getattr(self, "_testMethodName", None)))
        if result is None:
            result = self.defaultTestResult()
        before, skipped, watch = _bad_counts(result), len(getattr(result, "skipped", ())), _Watch()
        xfail = vars(self).get(XFAIL_ATTRIBUTE)
        try:
            if xfail is not None:
                return _run_xfailing(original, self, result, xfail)
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
                else:
                    _steer_unconditional()  # unittest.skip(...) put on the class after a reply
                watch.unprove()
            elif xfail is not None or _expecting_failure(self):
                watch.unprove()  # pytest's xfail mark as unittest's expectedFailure

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


def _suite(unittest, classes, module_marks, conditions):
    """The suite pytest would run of ``classes``' tests, those no ``TestCase`` runner of the tests'
    ran: those ``pytest.main(...)``'s selection keeps where the tests called it, less those pytest's
    ``skip``/``skipif`` marks skip or an ``xfail(run=False)`` holds (their ``setUp`` and, for a class
    all so left out, ``setUpClass`` do not run, as in pytest); an ``xfail`` mark that holds goes with
    its test (:data:`XFAIL_ATTRIBUTE`). pytest gives ``TestCase`` methods no ``parametrize`` rows:
    unittest calls such a method with no arguments, and it fails, as under pytest."""
    loader = unittest.TestLoader()
    suites = []
    for cls in classes:
        outer = [*_class_marks(cls), *module_marks]
        tests = []
        for name in loader.getTestCaseNames(cls):
            if (cls, name) in _ran_case_tests:
                continue  # the tests ran it themselves (their own suite, ``Case("test_x").run()``)
            method = getattr(cls, name, None)
            marks = [*_marks(getattr(method, "pytestmark", None)), *outer]
            if not _chosen(_Item(name, cls.__name__, marks, "", method)) or _skips(marks, conditions):
                continue
            xfail = _xfail(marks, conditions)
            if xfail is not None and not xfail.run:
                continue
            test = cls(name)
            if xfail is not None:
                vars(test)[XFAIL_ATTRIBUTE] = xfail
            vars(test)["run"] = _with_fixtures(test, marks)  # TestCase.__call__ reads self.run
            tests.append(test)
        suites.append(unittest.TestSuite(tests))
    return unittest.TestSuite(suites)


#: Where :func:`_suite` puts the ``xfail`` mark that holds for a ``TestCase`` test it runs.
XFAIL_ATTRIBUTE = "_la_xfail"


def _run_xfailing(run, test, result, xfail):
    """Run the ``TestCase`` ``test`` (``run``: unittest's own ``TestCase.run``) under its pytest
    ``xfail`` mark, as pytest reports it into ``result``: a failure or error the mark expects is
    an expected failure, one it does not expect (``raises=``, a ``BaseException`` beyond those)
    stands; a pass is a success, or a failure (:class:`XPassStrict`) under a strict mark."""
    seen = _seen_result()
    result.startTest(test)
    try:
        run(test, seen)
    finally:
        result.stopTest(test)
    if seen.skipped:
        result.addSkip(test, seen.skipped[0][1])
    elif seen.unexpectedSuccesses:
        result.addUnexpectedSuccess(test)
    elif xfail.strict and seen.subtests_passed:
        _add_xpass_strict(result, test, f"{test.id()}: a subTest passed")
    elif seen.raised:
        kind, err = next(((k, e) for k, e in seen.raised if k != "expected" and not xfail.expects(e[1])), (None, None))
        if kind is None:
            result.addExpectedFailure(test, seen.raised[0][1])
        else:
            getattr(result, kind)(test, err)
    elif xfail.strict:
        _add_xpass_strict(result, test, f"{test.id()} passed")
    else:
        result.addSuccess(test)


def _add_xpass_strict(result, test, what):
    """Record into ``result`` the :class:`XPassStrict` failure of ``test`` (``what`` passed) under
    its strict ``xfail`` mark, raised so that the failure carries a traceback as unittest's do."""
    try:
        raise XPassStrict(f"{what}; its strict xfail mark expects it to fail")
    except XPassStrict:
        result.addFailure(test, sys.exc_info())


def _seen_result():
    """A ``unittest.TestResult`` that keeps what the test raised, as ``(kind, exc_info)``: the
    ``result`` method that reports it (``addError``, ``addFailure``; ``expected`` for unittest's
    own ``expectedFailure``)."""
    import unittest

    class Seen(unittest.TestResult):
        def __init__(self):
            super().__init__()
            self.raised = []
            self.subtests_passed = 0

        def addError(self, test, err):  # noqa: N802 -- unittest's name
            self.raised.append(("addError", err))

        def addFailure(self, test, err):  # noqa: N802 -- unittest's name
            self.raised.append(("addFailure", err))

        def addSubTest(self, test, subtest, err):  # noqa: N802 -- unittest's name
            if err is None:
                self.subtests_passed += 1  # pytest 9 reports it alone: XPASS, strict a failure
            else:
                failed = issubclass(err[0], test.failureException)
                self.raised.append(("addFailure" if failed else "addError", err))

        def addExpectedFailure(self, test, err):  # noqa: N802 -- unittest's name
            self.raised.append(("expected", err))

    return Seen()


def _own_cases(env):
    """The ``TestCase`` classes the tests define, in their order, those nested in a pytest-style
    ``Test*`` class too (pytest collects them there)."""
    unittest = sys.modules.get("unittest")
    if unittest is None:
        return []
    classes, seen, todo = [], set(), [value for value in list(env.values()) if isinstance(value, type)]
    while todo:
        value = todo.pop(0)
        if value.__module__ != TESTS_MODULE or id(value) in seen:
            continue
        seen.add(id(value))  # by identity: a metaclass's __eq__/__hash__ is the tests' code
        if issubclass(value, unittest.TestCase):
            classes.append(value)
        elif value.__name__.startswith("Test") and "__init__" not in vars(value):
            todo.extend(_nested_classes(value))  # pytest collects a TestCase in a Test* class too
    return classes


def run_uncalled(env, tree):
    """Run what a runner would and the tests did not: each ``TestCase`` class of theirs none of
    whose tests ran, each pytest-style ``Test*`` class, and each ``test*`` function their code never
    names (one it names is a helper the tests call themselves), those ``pytest.main(...)`` selects
    where they called it. Raises what a test raised, :class:`CaseFailed` for a failed ``TestCase``
    test, whichever runner ran it, or :class:`NoEvidence` where every call of the candidate went
    to a test whose outcome shows nothing of it."""
    _uncalled.append(True)
    named = _named(tree)
    # module-level plain defs carry the ran mark (mark_tests): whether the tests ran one is known,
    # so one they only name (``test_x = pytest.mark.slow(test_x)``, ``test_x.timeout = 5``, a local
    # of that name) still runs, as pytest runs it
    recorded = {
        node.name
        for node in _module_statements(tree.body)
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test")
    }
    module_marks = _marks(env.get("pytestmark"))
    conditions = _Conditions(env, tree)
    uncalled = [(name, value) for name, value in list(env.items()) if name.startswith(("test", "Test"))]
    # a pytest-style class runs whether or not the tests name it (red team 49's X1: ``TestAdd.CASES``
    # read in its own methods, ``super(TestAdd, self)``, ``TestAdd().test_small()`` under
    # ``__main__`` hid every test of it): pytest collects it by name alone, and a second run of
    # tests the tests ran by hand is what pytest does too
    uncalled = [
        (name, value) for name, value in uncalled if name not in named or name in recorded or _pytest_class(value)
    ]
    _no_yield_tests(uncalled, env)
    _fixture_env[0] = _module_fixtures(env)
    _selections[:] = [_resolved(selection, env, module_marks) for selection in _selections]
    xunit = _Xunit(env)
    try:
        for name, value in uncalled:
            if _already_ran(name, value):
                continue  # the tests ran it themselves (a decorator of theirs may wrap the mark)
            if _tests_function(value, env) and name.startswith("test"):
                helper = _by_hand(name, value)
                for kwargs, xfail, marks, row in _pytest_calls(value, module_marks, conditions):
                    if helper and any(_unknown_fixture(given) for given in kwargs.values()):
                        continue  # a helper the tests call with their own arguments (pytest errors)
                    if _chosen(_Item(name, None, marks, row, value)):
                        xunit.function(value, kwargs, xfail, name, marks)
            elif isinstance(value, type) and value.__module__ == TESTS_MODULE and name.startswith("Test"):
                if not _is_test_case(value):
                    xunit.module()
                    _run_pytest_class(value, [*_class_marks(value), *module_marks], conditions)
        # inside: pytest tears module fixtures and teardown_module down after the TestCase tests too
        _run_pending_cases(env, xunit, module_marks, conditions)
    finally:
        try:
            _tear_down(_wide_teardowns)
        finally:
            xunit.close()
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


def _run_pending_cases(env, xunit, module_marks, conditions):
    """Run the tests' ``TestCase`` classes none of whose tests ran, as pytest runs them: inside
    ``setup_module`` and the module's wider autouse fixtures, set up before the first class's
    ``setUpClass`` (review_final 48's G8: before, neither ran for them, so data ``setup_module``
    made was missing for a right program). ``unittest.main()`` ran: a script, none of these."""
    if _main_ran:
        return
    unittest = sys.modules.get("unittest")
    pending = [
        cls
        for cls in _own_cases(env)
        if cls not in _ran_cases
        or any((cls, name) not in _ran_case_tests for name in unittest.TestLoader().getTestCaseNames(cls))
    ]
    if not pending:
        return
    suite = _suite(unittest, pending, module_marks, conditions)
    if suite.countTestCases():
        xunit.module()
        _wide_autouse()
    result = unittest.TestResult()
    suite.run(result)
    report = _report(result)
    if report is not None and not _failures:
        # unittest was not watched (the tests reached TestCase without naming unittest)
        _failures.append(report)


def _wide_autouse():
    """Set up the tests' module-level autouse fixtures of module, package or session scope now,
    as pytest does before a ``TestCase`` class's ``setUpClass``; their teardowns wait on
    :data:`_wide_teardowns`. One that cannot be given, or skips, is met again by each test's
    :func:`_given` (recorded, or the test skipped)."""
    known = _fixture_env[0]
    for name, (_, marker) in list(known.items()):
        if getattr(marker, "autouse", False) and getattr(marker, "scope", None) in ("module", "package", "session"):
            teardowns = []
            try:
                _fixture_value(name, known, {}, teardowns)
            except FixtureUnavailable:
                pass
            except BaseException as err:
                if not _skipped(err):
                    raise  # an error fails the tests, as pytest errors every test it reaches
            finally:
                _tear_down(teardowns)


def _with_fixtures(test, marks):
    """``test``'s ``run`` (a ``TestCase`` test pytest would run) inside the pytest fixtures pytest
    gives it: the tests' autouse ones, module-level and of its class, and those its
    ``usefixtures`` marks name, set up before ``setUp`` and torn down after ``tearDown``
    (review_final 48's G8: a ``yield`` autouse fixture's teardown check never ran for a
    ``TestCase`` test and passed a wrong program). ``xunit`` ``setup_function`` is not one: pytest
    gives it to test functions only."""

    def run(result=None):
        name = test.id()
        try:
            kwargs, teardowns = _given(None, {}, name, test, _used_fixtures(marks))
        except BaseException as err:
            if not _skipped(err):
                raise  # a fixture's error fails the test, as pytest reports it
            _steered.append(True)  # pytest.skip() in a fixture: its reason may read a reply
            return result
        if kwargs is None:
            return result  # a fixture it cannot be given here: left out and recorded (unrunnable)
        try:
            return type(test).run(test, result)
        finally:
            _tear_down(teardowns)

    return run


class CollectionError(AssertionError):
    """pytest stops at collecting the tests' file, which runs none of its tests and fails every
    program: a ``test*`` function or a pytest-style class's ``test*`` method is a generator
    (``yield``), which pytest 9 refuses ("'yield' keyword is allowed in fixtures, but not in
    tests"). Called, such a test runs none of its body, and the other tests decided the verdict."""


def _no_yield_tests(uncalled, env):
    """Raise :class:`CollectionError` where one of the ``uncalled`` ``(name, value)`` pairs that
    pytest collects is a generator function, as pytest sees it (without :func:`ran_mark`'s wrapper,
    with the tests' own decorators: a ``functools.wraps`` wrapper is no generator function)."""
    found = []
    for name, value in uncalled:
        if _already_ran(name, value):
            continue
        if _tests_function(value, env) and name.startswith("test"):
            found.append((name, vars(value).get("__wrapped__") if "__la_marked__" in vars(value) else value))
        elif isinstance(value, type) and value.__module__ == TESTS_MODULE and name.startswith("Test"):
            classes = [(name, value)]  # and those nested in it, which pytest collects too
            while classes:
                label, cls = classes.pop()
                if not _is_test_case(cls) and "__init__" not in vars(cls):
                    found.extend((f"{label}.{method}", getattr(cls, method)) for method in _class_tests(cls))
                    classes.extend((f"{label}.{nested.__name__}", nested) for nested in _nested_classes(cls))
    if not found:
        return
    import inspect

    for name, function in found:
        if getattr(function, "_pytestfixturefunction", None) is not None:
            continue  # a fixture named test* (pytest before 8.4 leaves the function): no test
        if getattr(function, "__test__", True) is not False and inspect.isgeneratorfunction(function):
            raise CollectionError(f"{name} is a generator: pytest collects no test of a file with a yield test")


def _class_tests(cls):
    """The ``test*`` methods pytest collects of a pytest-style class, inherited ones too, in
    definition order, base classes first (a name once)."""
    names = dict.fromkeys(name for klass in reversed(cls.__mro__) for name in vars(klass))
    return [name for name in names if name.startswith("test") and callable(getattr(cls, name, None))]


class _Xunit:
    """pytest's xunit-style fixtures of the tests' module: ``setup_module``/``teardown_module``
    once around the pytest-style tests and ``TestCase`` tests run here (set up before the first), and
    ``setup_function``/``teardown_function`` around each test function's call, as pytest runs
    them (before, none ran: a right program failed on data ``setup_module`` made, and
    ``teardown_module``'s checks never ran)."""

    def __init__(self, env):
        self.env, self.set_up = env, False

    def _hook(self, name):
        value = self.env.get(name)
        return value if _tests_function(value, self.env) else None

    def module(self):
        if not self.set_up:
            self.set_up = True
            setup = self._hook("setup_module")
            if setup is not None:
                _call_optional(setup, sys.modules.get(TESTS_MODULE))

    def function(self, function, kwargs, xfail, name, marks=()):
        """Run the test ``function`` once (:func:`_run_call`, with its ``marks``) inside its xunit
        fixtures."""
        self.module()
        setup, teardown = self._hook("setup_function"), self._hook("teardown_function")
        if setup is not None:
            _call_optional(setup, function)
        try:
            _run_call(function, kwargs, xfail, name, marks=marks)
        finally:
            if teardown is not None:
                _call_optional(teardown, function)

    def close(self):
        teardown = self._hook("teardown_module") if self.set_up else None
        if teardown is not None:
            _call_optional(teardown, sys.modules.get(TESTS_MODULE))


def _call_optional(function, argument):
    """Call an xunit fixture as pytest does (``_call_with_optional_argument``): with ``argument``
    where it takes a parameter, without where it takes none (``def setup_method(self):``, the
    usual shape, raised TypeError here and a right program scored 0; so did ``def
    setup_class(cls):`` written without ``@classmethod``)."""
    return function(*([argument] if _takes_argument(function) else []))


def _takes_argument(function):
    """pytest passes an xunit fixture its module or function where it takes a parameter."""
    import inspect

    return bool(inspect.signature(function).parameters)


def _named(tree):
    """The names the tests read (a helper they call themselves, ``asyncio.run(test_awaits())``),
    leaving out a class's bases: ``class TestB(TestA)`` does not run ``TestA``'s own tests."""
    bases = {id(base) for node in ast.walk(tree) if isinstance(node, ast.ClassDef) for base in node.bases}
    return {
        node.id
        for node in ast.walk(tree)
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and id(node) not in bases
    }


def _pytest_class(value):
    """``value`` is a class of the tests' own that is no ``TestCase``: pytest-style, if its name says so."""
    return isinstance(value, type) and value.__module__ == TESTS_MODULE and not _is_test_case(value)


def _is_test_case(cls):
    unittest = sys.modules.get("unittest")
    return unittest is not None and issubclass(cls, unittest.TestCase)


def _marks(value):
    """pytest marks held in ``value`` (one mark, or a list, as ``pytestmark`` is written)."""
    marks = value if isinstance(value, (list, tuple)) else [value] if value is not None else []
    return [mark for mark in marks if hasattr(mark, "name")]


def _class_marks(cls):
    """The pytest marks of a class: its own ``pytestmark`` and its bases' (a subclass's own list
    does not hide its base's), in pytest's order (``get_unpacked_marks``: the MRO reversed, base
    classes first), which decides the first ``xfail`` that holds and how rows' ids join."""
    return [mark for klass in reversed(cls.__mro__) for mark in _marks(vars(klass).get("pytestmark"))]


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
    _computed_names(tree, env, names)
    return names


# what an expression :func:`_computed_names` takes may hold: no call, lambda, comprehension or ``:=``
_INERT = (
    ast.Name,
    ast.Attribute,
    ast.Subscript,
    ast.Slice,
    ast.Constant,
    ast.Tuple,
    ast.List,
    ast.Compare,
    ast.BoolOp,
    ast.UnaryOp,
    ast.BinOp,
    ast.IfExp,
    ast.Load,
    ast.cmpop,
    ast.operator,
    ast.boolop,
    ast.unaryop,
)


def _computed_names(tree, env, names):
    """Add to ``names`` (:func:`_names`) the globals the tests compute from those names alone, in
    their module's body: ``PY_VERSION = sys.version_info[:2]``, bound by that one statement only,
    an expression of names already in ``names``, attributes, subscripts, operators and literals,
    with no call (a reply reaches none of these). Its value is computed again here from ``names``
    and taken where the tests' global still equals it (so no later ``globals()[...] = ...``)."""
    counts = {}
    for name in _binding_names(tree):
        counts[name] = counts.get(name, 0) + 1
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            target = node.targets[0].id
        elif isinstance(node, ast.AnnAssign) and node.value is not None and isinstance(node.target, ast.Name):
            target = node.target.id
        else:
            continue
        if counts.get(target) != 1 or target in names or not _inert(node.value, names):
            continue
        try:
            code = compile(ast.Expression(node.value), f"<the tests' {target}>", "eval")
            value = eval(code, dict(names))  # noqa: S307 -- the trusted tests' own expression
            held = env.get(target, _names)
            if type(held) is type(value) and (held == value) is True:
                names[target] = value
        except Exception:  # noqa: BLE001,S112 -- not computed here: a condition on it is not told
            continue


def _inert(expression, names):
    """``expression`` reads only ``names`` (no ``__builtins__``, no dunder attribute) and calls
    nothing (:data:`_INERT`)."""
    for part in ast.walk(expression):
        if not isinstance(part, _INERT):
            return False
        if isinstance(part, ast.Name) and (part.id not in names or part.id == "__builtins__"):
            return False
        if isinstance(part, ast.Attribute) and part.attr.startswith("__"):
            return False
    return True


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
    """A ``skipif``/``xfail`` condition (or ``xfail``'s ``run=``) of the tests (``skipif.with_args(...)``
    too) that is not a literal or a string reads a name not in ``safe``. A mark made another way (``Mark(...)``) is
    not followed."""
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
        if name not in ("skipif", "xfail", "with_args"):
            continue
        given = [*node.args, *(k.value for k in node.keywords if k.arg in ("condition", "run", None))]
        for value in given:
            if any(isinstance(part, ast.Name) and part.id not in safe for part in ast.walk(value)):
                return True
    return False


def _bound_names(tree):
    """Every name a module-level binding of ``tree`` binds (:func:`_global_bindings`)."""
    return set(_binding_names(tree))


def _binding_names(tree):
    """The name each module-level binding of ``tree`` binds (:func:`_global_bindings`), once per
    binding: a name bound twice is there twice."""
    bound = []
    for node in _global_bindings(tree):
        if isinstance(node, ast.alias):
            bound.append((node.asname or node.name).split(".")[0])
        elif isinstance(node, ast.Name):
            bound.append(node.id)
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            bound.extend(node.names)
        elif isinstance(node, ast.MatchMapping):
            bound.append(node.rest)
        else:
            bound.append(node.name)
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
                _steer_unconditional()
                return True
            holding = [condition for condition in held if conditions.evaluate(mark, condition) is True]
            if holding:
                conditions.steer(mark, holding)
                return True
    if any(mark.name == "skip" for mark in marks):
        _steer_unconditional()
        return True
    return False


class _Xfail:
    """The ``xfail`` mark that holds for a test, as pytest reads it."""

    def __init__(self, mark):
        run, strict = mark.kwargs.get("run", True), mark.kwargs.get("strict")
        # pytest runs the test where ``run`` is true: ``run=None`` or ``""`` leaves it out as
        # ``False`` does; a value not of a builtin type is taken as run (its __bool__ not called)
        self.run = bool(run) if type(run) in _TRUTHS else True
        # strict where it is not a false bool or int: a strict mark fails more programs, never fewer
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
            elif not held:
                _steer_unconditional()
            if not held or holding:
                xfail = _Xfail(mark)
                if not xfail.run:
                    # a test left out on ``run=RUNS``, where ``RUNS`` may hold a reply, as a skip
                    conditions.steer(mark, [mark.kwargs["run"]])
                return xfail
    return None


def _pytest_calls(function, outer, conditions):
    """The calls pytest would make of a test ``function`` with marks ``outer`` beside its own (its
    class's, the module's): ``[(kwargs, xfail, marks)]``, one per ``parametrize`` combination
    (stacked marks crossed, ``pytest.param`` read with its own marks), leaving out those a skip
    mark skips or an ``xfail(run=False)`` holds; a parameter no mark gives is a fixture's, given
    when the test runs (:func:`_run_call`). Marks in pytest's order: the function's, a ``pytest.param``'s, ``outer``."""
    own = _marks(getattr(function, "pytestmark", ()))
    if _skips([*own, *outer], conditions):
        return []
    import inspect  # here: its import costs every verdict's harness a few ms

    # pytest's node id joins the rows' ids in its order of the marks: the function's, then outer's
    axes = [_parametrized(mark) for mark in [*own, *outer] if mark.name == "parametrize"]
    required = {
        p.name
        for p in inspect.signature(function).parameters.values()
        if p.default is p.empty and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    }
    calls = []
    for combo in itertools.product(*axes):  # pytest's order too: the first mark's rows vary slowest
        kwargs = dict(itertools.chain.from_iterable(values.items() for values, _, _ in combo))
        marks = [*own, *itertools.chain.from_iterable(param_marks for _, param_marks, _ in combo), *outer]
        if _skips(marks, conditions):
            continue
        # a parameter no mark gives is a fixture's: given by name when the test runs (_run_call);
        # one an ``indirect`` mark gives goes through its fixture's request.param, which the harness
        # cannot give (before, the test got the raw row: a right program failed on it)
        kwargs.update({name: _Wanted(name) for name in sorted(required - set(kwargs))})
        kwargs.update({name: _Wanted(name, indirect=True) for name in _indirect([*own, *outer]) if name in kwargs})
        ids = [row_id for _, _, row_id in combo]
        row = None if None in ids else "-".join(ids) if combo else ""
        xfail = _xfail(marks, conditions)
        if xfail is None or xfail.run:
            calls.append((kwargs, xfail, marks, row))
    return calls


def _row_ids(function, outer):
    """The ids of a test ``function``'s rows, as :func:`_pytest_calls` gives them (``None`` for
    one not told here), every row's, skipped or not: those a node id may name."""
    own = _marks(getattr(function, "pytestmark", ()))
    axes = [[row_id for _, _, row_id in _parametrized(mark)] for mark in [*own, *outer] if mark.name == "parametrize"]
    return [None if None in ids else "-".join(ids) for ids in itertools.product(*axes)] if axes else [""]


def _argnames(mark):
    """``(names, single)`` of one ``pytest.mark.parametrize``: its argnames, a str split at commas,
    and whether they were given as a str (pytest takes a row as the value itself only for one name
    given so: ``("a",)`` or ``["a"]`` take each row as a tuple of values, as for several names)."""
    argnames = mark.args[0] if mark.args else mark.kwargs.get("argnames", ())
    if isinstance(argnames, str):
        return [part.strip() for part in argnames.split(",") if part.strip()], True
    return argnames, False


def _parametrized(mark):
    """``[({argname: value, ...}, marks), ...]`` of one ``pytest.mark.parametrize(argnames,
    argvalues)``: a row's marks are those its ``pytest.param(..., marks=...)`` gives."""
    argnames, single = _argnames(mark)
    argvalues = mark.args[1] if len(mark.args) > 1 else mark.kwargs.get("argvalues", ())
    structures = sys.modules.get("_pytest.mark.structures")
    param = getattr(structures, "ParameterSet", None)
    ids = mark.kwargs.get("ids")
    rows = []
    for index, row in enumerate(argvalues):
        if param is not None and isinstance(row, param):  # pytest.param(...): its values, always a tuple
            values, marks, given = tuple(row.values), _marks(list(row.marks)), row.id
        else:
            values, marks, given = (row,) if single and len(argnames) == 1 else tuple(row), [], None
        if given is None and ids is not None:
            # ids=[...]: a str is the row's id, None generates one; ids=function is not called here
            given = (ids[index] if index < len(ids) else None) if type(ids) in (list, tuple) else _UNTOLD
        row_id = _plain_id(given) if given is not None else _generated_id(argnames, values, index)
        rows.append((dict(zip(argnames, values)), marks, row_id))
    return _unique_ids(rows)


_UNTOLD = object()


def _plain_id(text):
    """``text`` as pytest writes it in a node id where that is ``text`` itself (printable ASCII, no
    backslash, which pytest escapes), else ``None``: not told here."""
    if type(text) is str and text.isascii() and text.isprintable() and "\\" not in text:
        return text
    return None


def _generated_id(argnames, values, index):
    """The id pytest 7 to 9 generates for a row with no id given, where its values are of the
    types whose ids this knows: a str (up to 100 characters, :func:`_plain_id`), an int, a float,
    a bool, ``None``, ``complex``, and ``argname`` plus ``index`` for a list, tuple, dict or set.
    ``None`` for any other (a class, an enum, a long str: what pytest writes varies)."""
    if len(argnames) != len(values):
        return None
    parts = []
    for name, value in zip(argnames, values):
        kind = type(value)
        if kind is str:
            part = _plain_id(value) if len(value) <= 100 else None
        elif value is None or kind in (int, float, bool, complex):
            part = str(value)
        elif kind in (list, tuple, dict, set, frozenset):
            part = f"{name}{index}"
        else:
            part = None
        if part is None:
            return None
        parts.append(part)
    return "-".join(parts)


def _unique_ids(rows):
    """``rows`` with their ids made unique as pytest makes them (``1``, ``1`` -> ``1_0``, ``1_1``);
    all ``None`` where one is not told here: a known id may clash with that one's."""
    ids = [row_id for _, _, row_id in rows]
    if None in ids:
        return [(values, marks, None) for values, marks, _ in rows]
    counts = {row_id: ids.count(row_id) for row_id in ids}
    suffixes = dict.fromkeys(ids, 0)
    for index, row_id in enumerate(ids):
        if counts[row_id] > 1:
            suffix = "_" if row_id and row_id[-1].isdigit() else ""
            new = f"{row_id}{suffix}{suffixes[row_id]}"
            while new in ids:
                suffixes[row_id] += 1
                new = f"{row_id}{suffix}{suffixes[row_id]}"
            ids[index] = new
            suffixes[row_id] += 1
    return [(values, marks, row_id) for (values, marks, _), row_id in zip(rows, ids)]


class _Wanted:
    """A test's parameter that no ``parametrize`` mark gives: the fixture of that name
    (``indirect``: one a ``parametrize(..., indirect=True)`` mark gives through ``request.param``)."""

    __slots__ = ("indirect", "name")

    def __init__(self, name, indirect=False):
        self.name, self.indirect = name, indirect


# pytest's own fixtures (pytest 7 to 9): a test asking for one runs under pytest
_PYTEST_FIXTURES = frozenset(
    {
        "cache",
        "capfd",
        "capfdbinary",
        "caplog",
        "capsys",
        "capsysbinary",
        "doctest_namespace",
        "monkeypatch",
        "pytestconfig",
        "record_property",
        "record_testsuite_property",
        "record_xml_attribute",
        "recwarn",
        "request",
        "subtests",
        "tmp_path",
        "tmp_path_factory",
        "tmpdir",
        "tmpdir_factory",
    }
)


def _unknown_fixture(given):
    """``given`` (a test's argument) asks for a fixture pytest would not find: neither the tests'
    own nor pytest's. Only then does pytest error on a ``test*`` the tests also call by hand with
    arguments (a helper); one whose fixtures pytest finds runs under pytest (before, it was taken
    for a helper and left out: ``test_big(big)`` run by hand as ``test_big(5)`` under
    ``__main__`` passed a program wrong on pytest's ``big``)."""
    return type(given) is _Wanted and given.name not in _fixture_env[0] and given.name not in _PYTEST_FIXTURES


def _indirect(marks):
    """The argnames ``parametrize`` marks among ``marks`` give indirectly (``indirect=True`` or a
    list naming them): pytest hands their rows to the fixture of that name as ``request.param``."""
    found = set()
    for mark in marks:
        if mark.name != "parametrize":
            continue
        indirect = mark.kwargs.get("indirect", mark.args[2] if len(mark.args) > 2 else False)
        if indirect is True:
            found.update(_argnames(mark)[0])
        elif isinstance(indirect, (list, tuple)):
            found.update(name for name in indirect if type(name) is str)
    return found


def _filtering_warnings(marks):
    """A context in which the ``filterwarnings`` marks among ``marks`` hold, as pytest applies them
    around a test (the harness reads its filters at each call of the candidate: an ``error`` one
    there cannot reach the sandbox, and ``filterwarnings("error")`` passed a program that warns)."""
    import contextlib

    filters = [arg for mark in marks if mark.name == "filterwarnings" for arg in mark.args if type(arg) is str]
    if not filters:
        return contextlib.nullcontext()
    import warnings

    from _pytest.config import parse_warning_filter

    stack = contextlib.ExitStack()
    stack.enter_context(warnings.catch_warnings())
    for text in reversed(filters):  # pytest applies the closest mark last: it wins
        warnings.filterwarnings(*parse_warning_filter(text, escape=False))
    return stack


def _used_fixtures(marks):
    """The fixture names ``usefixtures`` marks among ``marks`` ask for, in order (pytest runs them
    for the test as if it took them as parameters)."""
    return [name for mark in marks if mark.name == "usefixtures" for name in mark.args if type(name) is str]


class FixtureUnavailable(Exception):
    """A fixture a test asks for cannot be given here (pytest's own ``capsys``, ``tmp_path``,
    ``monkeypatch``, ``request``; one with ``params``; an ``async`` one): the test is left out and
    recorded (:func:`unrunnable`), so a pass cannot rest on it."""


# the fixtures the tests define at module level (name -> definition), set by run_uncalled, and the
# values of those not function-scoped (one per verdict) with their teardowns
_fixture_env = [{}]
_wide_values = {}
_wide_teardowns = []
# the pytest-style class whose test is being given its fixtures (None for a module-level test)
_test_class = [None]


def _fixture_of(value):
    """``(function, marker)`` where ``value`` is a pytest fixture definition (``@pytest.fixture``),
    else ``None``; read by type, never through an attribute lookup of an object of another kind."""
    structures = sys.modules.get("_pytest.fixtures")
    kind = getattr(structures, "FixtureFunctionDefinition", None)
    if kind is not None and type(value) is kind:  # pytest 8.4 on
        return value._get_wrapped_function(), value._fixture_function_marker
    if type(value) is types.FunctionType and "_pytestfixturefunction" in vars(value):  # before 8.4
        return value, vars(value)["_pytestfixturefunction"]
    return None


def _module_fixtures(env):
    """The tests' module-level fixtures by the name tests ask for them."""
    found = {}
    for name, value in list(env.items()):
        fixture = _fixture_of(value)
        if fixture is not None:
            found[getattr(fixture[1], "name", None) or name] = fixture
    return found


def _class_fixtures(instance):
    """The fixtures a pytest-style test class defines (bound to ``instance``), by name."""
    found = {}
    cls = type(instance)
    for klass in reversed(cls.__mro__):
        for name, value in vars(klass).items():
            fixture = _fixture_of(value)
            if fixture is not None:
                function, marker = fixture
                bound = function.__get__(instance, cls) if type(function) is types.FunctionType else function
                found[getattr(marker, "name", None) or name] = (bound, marker)
    return found


def _fixture_value(name, known, cache, teardowns, asking=()):
    """The value of fixture ``name`` for one test, its own fixtures first (``known``: the fixtures
    in reach; ``cache``: this test's values; a fixture's teardown, the rest of a ``yield`` one, goes
    on ``teardowns``). Raises :class:`FixtureUnavailable` for one that cannot be given here."""
    if name in cache:
        return cache[name]
    fixture = known.get(name)
    if fixture is None or name in asking:
        raise FixtureUnavailable(f"fixture {name!r} is not one the tests define")
    function, marker = fixture
    if getattr(marker, "params", None) is not None:
        raise FixtureUnavailable(f"fixture {name!r} is parametrized")
    scope = getattr(marker, "scope", "function")
    wide = scope != "function"
    # one value per definition (two classes' own ``data`` fixtures are two), and per test class for
    # a class-scoped one: keyed by name alone, the first class's value reached the second's tests
    key = (name, id(getattr(function, "__func__", function)), _test_class[0] if scope == "class" else None)
    if wide and key in _wide_values:
        return _wide_values[key]
    import inspect

    if inspect.iscoroutinefunction(function) or inspect.isasyncgenfunction(function):
        raise FixtureUnavailable(f"fixture {name!r} is async")
    wanted = {
        p.name
        for p in inspect.signature(function).parameters.values()
        if p.default is p.empty and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    }
    given = {p: _fixture_value(p, known, cache, teardowns, (*asking, name)) for p in sorted(wanted)}
    value = function(**given)
    if isinstance(value, types.GeneratorType):
        generator, value = value, next(value)
        (_wide_teardowns if wide else teardowns).append(generator)
    if wide:
        _wide_values[key] = value
    else:
        cache[name] = value
    return value


def _tear_down(generators):
    """Finish ``yield`` fixtures, the latest first, as pytest does; a second ``yield`` is an error."""
    while generators:
        generator = generators.pop()
        try:
            next(generator)
        except StopIteration:
            continue
        raise RuntimeError("a fixture yielded twice")


def _given(function, kwargs, name, instance=None, uses=()):
    """``kwargs`` with each wanted fixture's value, and the teardowns to run after the test, or
    ``None`` where one cannot be given (recorded: :func:`unrunnable`). The tests' autouse fixtures
    run too, as pytest runs them for every test, and those its ``usefixtures`` marks name
    (``uses``: before, never run, so a yield fixture's teardown checks passed a wrong program)."""
    known = dict(_fixture_env[0])
    if instance is not None:
        known.update(_class_fixtures(instance))
    _test_class[0] = None if instance is None else type(instance)
    cache, teardowns = {}, []
    autouse = [n for n, (_, marker) in known.items() if getattr(marker, "autouse", False)]
    try:
        for fixture in [*autouse, *uses]:
            _fixture_value(fixture, known, cache, teardowns)
        indirect = [value.name for value in kwargs.values() if type(value) is _Wanted and value.indirect]
        if indirect:
            raise FixtureUnavailable(f"fixture {indirect[0]!r} is parametrized indirectly (request.param)")
        given = {
            key: _fixture_value(value.name, known, cache, teardowns) if type(value) is _Wanted else value
            for key, value in kwargs.items()
        }
    except FixtureUnavailable as err:
        _tear_down(teardowns)
        _unrunnable.append(f"{name}: {err}")
        return None, []
    except BaseException:
        _tear_down(teardowns)
        raise
    return given, teardowns


def _run_call(function, kwargs, xfail, name, instance=None, marks=()):
    """Call a pytest-style test ``function`` once with ``kwargs``, as pytest runs one test: its
    fixtures given first (the tests' own, module-level or of its class, and their autouse ones; a
    test wanting one that cannot be given is left out and recorded, :func:`unrunnable`); a
    coroutine it returns (an ``async def`` test) runs to its end; ``pytest.skip()`` or
    ``pytest.xfail()`` inside skips it; under an ``xfail`` mark (``xfail``) a failure it expects is
    no failure, and a pass fails only a strict mark. The candidate's calls in a test that skipped
    or carries ``xfail`` are no evidence (:class:`NoEvidence`): a wrong program fails an xfail
    test as pytest expects, and may pass one (XPASS) that checks the wrong thing."""
    watch = _Watch()
    teardowns = []
    try:
        kwargs, teardowns = _given(function, kwargs, name, instance, _used_fixtures(marks))
        if kwargs is None:
            return
        with _filtering_warnings(marks):
            outcome = function(**kwargs)
        if isinstance(outcome, types.AsyncGeneratorType):
            raise AssertionError(f"{name} is an async generator: pytest fails it, none of its body runs")
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
        try:
            _tear_down(teardowns)
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


def _has_constructor(cls):
    """``cls`` has an ``__init__`` or ``__new__`` other than ``object``'s, its own or inherited: pytest
    collects no such class (its ``hasinit``/``hasnew``). A ``NamedTuple`` row or a subclass of a
    helper that takes arguments is data the tests build themselves; instantiated bare, it raised
    ``TypeError`` and failed a right program (review of red team 49's X1, which made named classes run)."""
    return cls.__init__ is not object.__init__ or cls.__new__ is not object.__new__


def _run_pytest_class(cls, marks, conditions):
    """Run a pytest-style test class (no constructor, :func:`_has_constructor`, and ``__test__`` not
    false) with ``marks`` (its own, its bases', the module's): a fresh instance per ``test*`` method,
    with its ``setup_method``/
    ``teardown_method`` and the class's ``setup_class``/``teardown_class`` (these only where a
    method runs: none does for a class all skipped or left out), as pytest does."""
    if _has_constructor(cls) or not getattr(cls, "__test__", True) or _skips(marks, conditions):
        # pytest does not collect it (``__test__ = False``: a template its subclasses fill in), or
        # skips all of it (its setup_class too)
        return
    set_up = False
    try:
        for name in _class_tests(cls):
            instance = cls()
            method = getattr(instance, name)
            calls = [
                call
                for call in _pytest_calls(method, marks, conditions)
                if _chosen(_Item(name, cls.__name__, call[2], call[3], method))
            ]
            if not calls:
                continue
            if not set_up:
                set_up = True
                if hasattr(cls, "setup_class"):
                    _call_optional(cls.setup_class, cls)
            if hasattr(instance, "setup_method"):
                _call_optional(instance.setup_method, method)
            try:
                for kwargs, xfail, call_marks, _ in calls:
                    _run_call(method, kwargs, xfail, f"{cls.__name__}.{name}", instance, call_marks)
            finally:
                if hasattr(instance, "teardown_method"):
                    _call_optional(instance.teardown_method, method)
    finally:
        if set_up and hasattr(cls, "teardown_class"):
            _call_optional(cls.teardown_class, cls)
    # pytest collects a Test* class defined inside it too, under its marks (before, never run: a
    # wrong program passed what it fails there)
    for nested in _nested_classes(cls):
        if not _is_test_case(nested):  # :func:`_own_cases` runs those
            _run_pytest_class(nested, [*_class_marks(nested), *marks], conditions)


def _nested_classes(cls):
    """The ``Test*`` classes of the tests defined in the body of the class ``cls`` or of a base of
    it, which pytest collects under it (it reads every class's ``__dict__`` along the MRO), a
    ``TestCase`` among them (:func:`_own_cases` runs those). ``__qualname__`` tells one defined
    there from an alias, and ``cls`` and its bases are never their own nested class: no cycles."""
    found = []
    for klass in cls.__mro__:
        for name, nested in list(vars(klass).items()):
            defined = isinstance(nested, type) and nested.__qualname__ == f"{klass.__qualname__}.{name}"
            if defined and name.startswith("Test") and nested.__module__ == TESTS_MODULE:
                if not any(nested is other for other in (*found, *cls.__mro__)):
                    found.append(nested)
    return found


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
    trainer's working directory inside the trusted harness). A call from a test that
    :func:`run_uncalled` runs records nothing: the tests to run were chosen before it (a nested
    run's selection is not the file's, and it must not leave out the tests after it)."""
    if not _uncalled:
        _selections.append(_selection(args))
    return 0


def _selection(args):
    """What ``pytest.main(args)`` runs of the tests: ``None`` for all of them, else ``(node ids or
    None, -k expression or None, -m expression or None)``; a node id is ``(the names after its
    file's, its [param] or None)`` (``file::TestA::test_b[1-2]``). Anything not read here (an option it does
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
            *parts, last = word.split("::")[1:]
            last, bracket, param = last.partition("[")
            if bracket and not param.endswith("]"):
                return None  # no node id pytest knows: it runs nothing (an error)
            ids.append(((*parts, last), param[:-1] if bracket else None))
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


def _resolved(selection, env, module_marks):
    """``selection`` with its node ids checked against the tests in ``env`` (``module_marks``: the
    module's marks): one that names no test of theirs (a typo, a nested class, a ``[param]`` no
    row of the test has) made pytest stop with an error and run nothing; here it selects all of
    them. A ``[param]`` may name a row whose id is not told here (:func:`_generated_id`)."""
    if selection is None or selection[0] is None:
        return selection
    for parts, param in selection[0]:
        value = env.get(parts[0]) if parts else None
        if len(parts) == 1 and type(value) is types.FunctionType:
            function, outer = value, module_marks
        elif len(parts) == 1 and isinstance(value, type) and param is None:
            continue
        elif len(parts) == 2 and isinstance(value, type) and callable(getattr(value, parts[1], None)):
            function, outer = getattr(value, parts[1]), [*_class_marks(value), *module_marks]
            if param is not None and _is_test_case(value):
                return None  # pytest gives a TestCase's methods no rows
        else:
            return None
        if param is not None:
            rows = _row_ids(function, outer)
            if param not in rows and None not in rows:
                return None
    return selection


class _Item:
    """One test as ``pytest.main``'s selection reads it: its ``name`` (a function's or a
    method's), ``class_name`` (or ``None``), ``marks`` (its own, its row's, its class's, the
    module's), ``row`` (its parametrize id: ``""`` for none, ``None`` where not told here) and the
    ``function`` pytest sees (its attributes are ``-k`` names too)."""

    def __init__(self, name, class_name, marks, row="", function=None):
        self.name, self.class_name, self.marks, self.row, self.function = name, class_name, marks, row, function

    def keywords(self):
        """The names a ``-k`` word may match that are known here, as pytest's
        ``KeywordMatcher.from_item`` gathers them: the test's (with its row's id), its class's, its
        marks', and the attributes set on its function (all of them before pytest 9, which leaves
        out ``_private`` ones and ``pytestmark``). The file's and its folders' names are not known
        (:data:`PYTEST_FILE`)."""
        names = [*(mark.name for mark in self.marks)]
        names.append(self.name if not self.row else f"{self.name}[{self.row}]")
        if self.class_name is not None:
            names.append(self.class_name)
        matchable = getattr(sys.modules.get("_pytest.mark"), "_is_matchable_function_attribute", None)
        names.extend(name for name in _attributes(self.function) if matchable is None or matchable(name))
        return [name.lower() for name in names if type(name) is str]


def _attributes(function):
    """The attribute names of a test ``function`` as pytest sees it: :func:`ran_mark`'s wrapper
    has two of its own (``__la_marked__``, and ``__wrapped__`` where the tests' function has
    none), which the tests' file has not: a ``-k "not wrapped"`` must not leave the test out."""
    function = getattr(function, "__func__", function)
    if type(function) is not types.FunctionType:
        return []
    names = vars(function)
    if "__la_marked__" not in names:
        return list(names)
    inner = vars(names.get("__wrapped__")) if type(names.get("__wrapped__")) is types.FunctionType else {}
    return [name for name in names if name != "__la_marked__" and (name != "__wrapped__" or name in inner)]


#: What ``-k`` is certain to match in the tests' file's name, which is not known here: pytest
#: collects ``test_*.py`` and ``*_test.py`` by default, so every such name holds ``test`` and
#: ``.py``. Any other word may be in the real file's name or its folders' (``test_add.py``,
#: ``tests/unit/``), where pytest keeps every test: such a word is unknown, never false.
PYTEST_FILE = ("test", ".py")


def _chosen(item):
    """The test ``item`` (:class:`_Item`) is one that some ``pytest.main(...)`` of the tests
    selects, or they called none."""
    return not _selections or any(_keeps(selection, item) for selection in _selections)


def _keeps(selection, item):
    """``selection`` keeps the test ``item``. ``-k`` words match, as pytest's do, any of its names
    (:meth:`_Item.keywords`) as a substring in any case; a word none of them holds may match the
    file's or a folder's name, unknown here (:data:`PYTEST_FILE`), so the test is left out only
    where the expression is false whatever those names are (``not slow`` leaves out
    ``test_slow``; ``add`` keeps every test). ``-m`` words are mark names."""
    if selection is None:
        return True
    ids, keyword, markexpr = selection
    if ids is not None and not any(_names_item(parts, param, item) for parts, param in ids):
        return False
    mark_names = {mark.name for mark in item.marks}
    if keyword is not None:
        known = item.keywords()

        def match(word):
            word = word.lower()
            if any(word in name for name in (*known, *PYTEST_FILE)):
                return True
            return None  # the file's or a folder's name may hold it (PYTEST_FILE)

        if _kleene(keyword, match) is False:
            return False
    return markexpr is None or _kleene(markexpr, lambda word: word in mark_names) is not False


def _names_item(parts, param, item):
    """A node id's names after the file (``parts``) and ``[param]`` (or ``None``) name ``item``
    (a row whose id is not told here may be the one)."""
    if parts not in ((item.name,), (item.class_name,), (item.class_name, item.name)):
        return False
    return param is None or item.row is None or param == item.row


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
