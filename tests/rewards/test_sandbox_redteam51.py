"""Red team 51: ``isinstance``/``issubclass`` on the program's classes (RT51-1), a thread whose target
is a method (RT51-2), and a list made inside a let-go literal (RT51-3), with review_quiet's
finding 4 and the program's own containers (``return self.log``), which a call's value now numbers.
Each case states what one file does.
"""

from __future__ import annotations

import pathlib
import sys

import pytest

import lightning_agents

_REWARDS_TESTS = pathlib.Path(lightning_agents.__file__).resolve().parent.parent / "tests" / "rewards"
if str(_REWARDS_TESTS) not in sys.path:
    sys.path.insert(0, str(_REWARDS_TESTS))

from sandbox_modes import one_file_passes, score  # noqa: E402

from lightning_agents.rewards import CodeVerifier  # noqa: E402


def _verdict(program, tests):
    return score(CodeVerifier(isolation="process", timeout_s=30), program, tests)


def _agrees(program, tests, passes):
    """One file and the sandbox give ``passes``; the sandbox's verdict."""
    assert one_file_passes(program, tests) is passes
    verdict = _verdict(program, tests)
    assert verdict.passed is passes, verdict
    return verdict


ZOO = """
class Animal:
    def __init__(self, name):
        self.name = name
    def speak(self):
        return "..."
class Dog(Animal):
    def speak(self):
        return "woof"
class Stack:
    def __init__(self):
        self.items = []
    def push(self, x):
        self.items.append(x)
def make_dog(name):
    return Dog(name)
"""

# RT51-1: the tests check the class of what the program made (``isinstance(s, Stack)``,
# ``assertIsInstance``, a subclass, ``issubclass`` between the program's classes). Stack is a stand-in
# (a Remote), so each raised TypeError (isinstance() arg 2 must be a type): a right program got 0.
TYPE_CHECKS = {
    "exact class": "s = Stack()\nassert isinstance(s, Stack)\n",
    "another class": "s = Stack()\nassert not isinstance(s, Animal)\n",
    "a subclass's instance": "d = make_dog('rex')\nassert isinstance(d, Animal) and isinstance(d, Dog)\n",
    "a base's instance is not the subclass's": "assert not isinstance(Animal('a'), Dog)\n",
    "plain data": "assert not isinstance([1], Stack) and not isinstance(None, Dog)\n",
    "in a tuple": "assert isinstance(Dog('a'), (int, Stack, Animal))\n",
    "issubclass": "assert issubclass(Dog, Animal) and not issubclass(Animal, Dog) and issubclass(Stack, Stack)\n",
    "assertIsInstance": (
        "import unittest\nclass T(unittest.TestCase):\n    def test(self):\n"
        "        self.assertIsInstance(make_dog('a'), Animal)\n        self.assertNotIsInstance(Stack(), Dog)\n"
    ),
}


@pytest.mark.parametrize("tests", list(TYPE_CHECKS.values()), ids=list(TYPE_CHECKS))
def test_rt51_1_isinstance_on_the_programs_classes_answers_as_in_one_file(tests):
    _agrees(ZOO, tests, True)


def test_rt51_1_a_metaclass_instancecheck_answers_as_in_one_file():
    """The answer is the program's own check, run on its side: a wrong program whose metaclass says
    every object is a Stack fails where one file fails, and passes where one file passes."""
    program = (
        "class Meta(type):\n    def __instancecheck__(cls, obj):\n        return True\n"
        "class Stack(metaclass=Meta):\n    pass\n"
    )
    _agrees(program, "assert not isinstance(5, Stack)\n", False)
    _agrees(program, "assert isinstance(5, Stack)\n", True)


def test_rt51_1_isinstance_with_a_function_raises_as_in_one_file():
    """A global that is no class: the same TypeError, raised by the candidate's own check."""
    tests = "import pytest\nwith pytest.raises(TypeError):\n    isinstance(Stack(), make_dog)\n"
    _agrees(ZOO, tests, True)


def test_rt51_1_a_forged_type_check_answer_fails_closed():
    """An answer that is no bool (Python's check always gives one) breaks the channel: the
    candidate's process is the program's, so it can rewrite what answers."""
    program = ZOO + (
        "import sys\nchecks = getattr(sys.modules.get('la_handles'), '_TYPE_CHECKS', None)\n"
        "if checks is not None:\n    checks['@isinstance '] = lambda obj, cls: 'yes'\n"
    )
    verdict = _verdict(program, "assert isinstance(Stack(), Stack)\n")
    assert verdict.passed is False
    assert verdict.reason == "bad_reply" and "no bool" in str(verdict.detail), verdict


def test_rt51_1_issubclass_of_a_class_that_cannot_cross_fails_closed():
    """``issubclass(type(s), Stack)``: ``type(s)`` is the harness's handle class, which the candidate
    cannot be asked about. Sticky (LeftOutTouched), never a TypeError the tests could take."""
    tests = "s = Stack()\ntry:\n    ok = issubclass(type(s), Stack)\nexcept TypeError:\n    ok = True\nassert ok\n"
    verdict = _verdict(ZOO, tests)
    assert verdict.passed is False and "issubclass" in str(verdict.detail), verdict


COUNTER = """
import threading
class Counter:
    def __init__(self):
        self.n = 0
        self.lock = threading.Lock()
    def increment(self):
        with self.lock:
            self.n += 1
    def value(self):
        return self.n
"""


def test_rt51_2_a_thread_whose_target_is_a_method_runs_as_in_one_file():
    """RT51-2: ``threading.Thread(target=c.increment)`` (the usual thread-safety test) reads the
    target's ``__name__`` for the thread's name; the method's stand-in refused that read with a
    sticky LeftOutTouched, so a right program got 0. Thread takes an AttributeError for no name."""
    tests = (
        "import threading\nc = Counter()\n"
        "threads = [threading.Thread(target=c.increment) for _ in range(8)]\n"
        "for t in threads:\n    t.start()\nfor t in threads:\n    t.join()\n"
        "assert c.value() == 8\n"
    )
    _agrees(COUNTER, tests, True)


def test_rt51_2_a_method_stand_in_still_refuses_other_attributes():
    """Only ``__name__`` answers (as absent): ``s.f.__doc__`` and the like still fail closed."""
    verdict = _verdict(COUNTER, "c = Counter()\nassert c.increment.__qualname__\n")
    assert verdict.passed is False and "LeftOutTouched" in str(verdict.detail), verdict


BANK = """
class Bank:
    def __init__(self, accounts):
        self.accounts = accounts
    def open(self, name):
        self.accounts[name] = []
    def deposit(self, name, amount):
        self.accounts[name].append(amount)
    def history(self, name):
        return self.accounts[name]  # wrong: the task asks for a copy
"""
# the tests pass a literal the program fills; it goes quiet at the first call after
DEFENSIVE_COPY = {
    "a later deposit shows in the history read before": (
        "b = Bank({})\nb.open('a')\nb.deposit('a', 5)\nh = b.history('a')\nb.deposit('a', 7)\n"
        "assert h == [5], 'history must be a copy'\n"
    ),
    "changing the history read changes the bank's": (
        "b = Bank({})\nb.open('a')\nb.deposit('a', 5)\nh = b.history('a')\nh.append(99)\n"
        "assert b.history('a') == [5], 'history must be a copy'\n"
    ),
}


@pytest.mark.parametrize("tests", list(DEFENSIVE_COPY.values()), ids=list(DEFENSIVE_COPY))
def test_rt51_3_a_list_made_inside_a_let_go_literal_is_the_programs_own(tests):
    """RT51-3 (wrong pass, since 7aab048): the ``{}`` the tests passed goes quiet before ``open``
    runs, so the list ``open`` puts into it is never numbered; ``history`` then gives the tests a
    copy, and a program that hands out its internal list passes a test of a defensive copy. One
    file fails it; so did 30f976d (the dict was live, its new list numbered with ``grow``); with a
    dict the tests hold, 101f628 failed it too. Mended: a call's value numbers its containers."""
    _agrees(BANK, tests, False)


RIGHT_BANK = BANK.replace(
    "return self.accounts[name]  # wrong: the task asks for a copy", "return list(self.accounts[name])"
)


@pytest.mark.parametrize("tests", list(DEFENSIVE_COPY.values()), ids=list(DEFENSIVE_COPY))
def test_rt51_3_the_right_bank_passes_and_the_wrong_one_fails(tests):
    """Both directions in one test (each fails on 101f628, where the wrong bank passed): the
    program that returns a copy passes, as in one file, and the one that hands out its list fails."""
    _agrees(RIGHT_BANK, tests, True)
    _agrees(BANK, tests, False)


GRAPH = """
class G:
    def __init__(self, adj):
        self.adj = adj
    def add(self, u, v):
        self.adj.setdefault(u, []).append(v)
    def nb(self, u):
        return self.adj[u]
"""
GRAPH_TESTS = {
    "a later add shows in the list read before": "g = G({})\ng.add(1, 2)\nn = g.nb(1)\ng.add(1, 3)\nassert n == [2, 3]\n",
    "two reads are one list": "g = G({})\ng.add(1, 2)\nassert g.nb(1) is g.nb(1)\n",
}


@pytest.mark.parametrize("tests", list(GRAPH_TESTS.values()), ids=list(GRAPH_TESTS))
def test_review_quiet_f4_a_list_made_inside_a_let_go_literal_reads_as_one_file(tests):
    """review_quiet finding 4 (a right program failed, since 7aab048): the list ``add`` puts into
    the let-go ``{}`` is the one ``nb`` gives the tests, as in one file."""
    _agrees(GRAPH, tests, True)


OWN = """
class Log:
    def __init__(self, a):
        self.a = a
        self.log = []
    def add(self, x):
        self.a.append(x)
        self.log.append(x)
    def items(self):
        return self.log
    def pair(self):
        return [self.a, self.log]
    def fresh(self):
        return list(self.log)
    async def touch(self):
        return len(self.log)
"""
OWN_TESTS = {
    # the program's own list (``self.log = []``), read by a getter and by an attribute read
    "a getter's list follows later changes": "s = Log([])\ns.add(1)\nx = s.items()\ns.add(2)\nassert x == [1, 2]\n",
    "a change by the tests reaches the program": "s = Log([])\nx = s.items()\nx.append(5)\nassert s.items() == [5]\n",
    "an attribute read is the program's list": "s = Log([])\nx = s.log\ns.add(3)\nassert x == [3] and s.log is x\n",
    # a let-go literal (quiet, named again by the reply) and the program's own list in one value
    "a quiet literal and an own list in one reply": (
        "s = Log([0])\ns.add(1)\ns.add(2)\np = s.pair()\ns.add(3)\n"
        "assert p == [[0, 1, 2, 3], [1, 2, 3]] and s.pair()[1] is p[1] and s.pair()[0] is p[0]\n"
    ),
    # a fresh result stays the tests' own: a later change of the program's does not reach it
    "a fresh copy each call, with an own list read": (
        "s = Log([])\ns.add(1)\nf = s.fresh()\nx = s.items()\ns.add(2)\nassert f == [1] and x == [1, 2]\n"
        "assert s.fresh() is not s.fresh()\n"
    ),
    # not after an await: a call's value is a copy then (review_rt51's F3, test_sandbox_f3.py)
}


@pytest.mark.parametrize("tests", list(OWN_TESTS.values()), ids=list(OWN_TESTS))
def test_a_list_the_program_made_itself_is_its_own_as_in_one_file(tests):
    """The documented limit before RT51-3's fix ("a list the program made, read from ``s.items``
    ... is not the program's"): a container the program holds, in a call's value, is numbered
    there, so the tests get the program's list, aliased as in one file; a fresh one is pruned
    in the same reply and stays the tests' alone."""
    _agrees(OWN, tests, True)
