"""Review of sandbox handles (session 48): the protocols a handle answers where the program's class
leaves them to ``object``.

A handle refused ``==``, ``hash`` and ``bool`` outright, so LeetCode's own linked-list helpers
failed every right program: ``while node:`` (``bool``), a ``seen`` set of nodes (``hash``) and
``assertEqual(s.me(), s)`` (``==`` of an object with itself). The candidate now tells, with a new
handle, which of these its class takes from ``object``; only those answer in the harness, as
``object``'s would (``==`` by identity, ``object``'s hash, true). A class that overrides one still
fails closed, and a candidate that lies about its class gains only what a class without the
override gives in one file: never its own ``__eq__``'s answer.
"""

from __future__ import annotations

import pytest
from sandbox_modes import ISOLATIONS, one_file_passes, score

from lightning_agents.rewards import CodeVerifier


def _verdict(program, tests, isolation="process"):
    return score(CodeVerifier(isolation=isolation, timeout_s=30), program, tests)


def _agrees(program, tests, passes, isolation="process"):
    assert one_file_passes(program, tests) is passes
    verdict = _verdict(program, tests, isolation)
    assert verdict.passed is passes, verdict
    if not passes:
        assert verdict.reason == "wrong_answer", verdict
    return verdict


LINKED = (
    "class ListNode:\n    def __init__(self, val=0, next=None):\n        self.val = val\n        self.next = next\n\n"
    "class Solution:\n    def reverseList(self, head):\n        prev = None\n        while head:\n"
    "            head.next, prev, head = prev, head, head.next\n        return prev\n"
)
LINKED_WRONG = LINKED.replace("        return prev\n", "        return ListNode(3, ListNode(1, ListNode(2)))\n")
BUILD = (
    "def build(xs):\n    head = None\n    for x in reversed(xs):\n        head = ListNode(x, head)\n    return head\n\n"
)
# LeetCode's usual helper: ``while node:`` asks the node's truth
WHILE_NODE_TESTS = BUILD + (
    "def to_list(node):\n    out = []\n    while node:\n        out.append(node.val)\n        node = node.next\n"
    "    return out\n\nassert to_list(Solution().reverseList(build([1, 2, 3]))) == [3, 2, 1]\n"
)
# a walk that stops at a cycle keeps the nodes it saw in a set
SEEN_TESTS = BUILD + (
    "def to_list(node):\n    seen, out = set(), []\n    while node is not None and node not in seen:\n"
    "        seen.add(node)\n        out.append(node.val)\n        node = node.next\n    return out\n\n"
    "assert to_list(Solution().reverseList(build([1, 2, 3]))) == [3, 2, 1]\n"
)
SELF = "class Builder:\n    def __init__(self):\n        self.items = []\n    def add(self, x):\n        self.items.append(x)\n        return self\n"
SELF_WRONG = SELF.replace("        return self\n", "        return Builder()\n")
# == of an instance with itself (unittest's assertEqual, a list of handles under the tests' ==)
SELF_TESTS = (
    "import unittest\n\nclass T(unittest.TestCase):\n    def test(self):\n        b = Builder()\n"
    "        self.assertEqual(b.add(1), b)\n        assert [b.add(2)] == [b]\n        assert b.add(3) != 0\n\n"
    "result = unittest.TextTestRunner().run(unittest.defaultTestLoader.loadTestsFromTestCase(T))\n"
    "assert result.wasSuccessful()\n"
)

CASES = {
    "while node:": (LINKED, LINKED_WRONG, WHILE_NODE_TESTS),
    "a set of nodes": (LINKED, LINKED_WRONG, SEEN_TESTS),
    "== of an instance with itself": (SELF, SELF_WRONG, SELF_TESTS),
}


@pytest.mark.parametrize("isolation", ISOLATIONS)
@pytest.mark.parametrize("case", list(CASES))
def test_object_defaults_answer_as_in_one_file(case, isolation):
    right, wrong, tests = CASES[case]
    _agrees(right, tests, True, isolation)
    _agrees(wrong, tests, False, isolation)


# a class that overrides the protocol: its answer is the program's, never asked by the harness
OVERRIDES = {
    "__eq__": (
        "    def __eq__(self, other):\n        return True\n    __hash__ = object.__hash__\n",
        "assert S() == 1\n",
    ),
    "__hash__": ("    def __hash__(self):\n        return 0\n", "assert len({S(), S()}) == 2\n"),
    "__len__": ("    def __len__(self):\n        return 0\n", "assert not S()\n"),
    "__bool__": ("    def __bool__(self):\n        return False\n", "assert not S()\n"),
}


@pytest.mark.parametrize("case", list(OVERRIDES))
def test_an_overridden_protocol_still_fails_closed(case):
    body, tests = OVERRIDES[case]
    program = "class S:\n" + body
    assert one_file_passes(program, tests)
    verdict = _verdict(program, tests)
    assert not verdict.passed and verdict.reason == "wrong_answer", verdict
    assert "held in the sandbox" in verdict.detail, verdict


def test_a_candidate_that_claims_object_defaults_gets_only_identity():
    """The program's ``__eq__`` says True to anything, and it rewrites its own process's table to
    claim ``object``'s protocols: ``==`` is then identity, as for a class without ``__eq__``."""
    program = (
        "import sys\n\nif 'la_handles' in sys.modules:  # in the sandbox\n"
        "    sys.modules['la_handles']._defaults = lambda kind: ['eq', 'hash', 'bool']\n\n"
        "class Solution:\n    def __eq__(self, other):\n        return True\n"
        "    def twoSum(self, nums, target):\n        return self\n"
    )
    tests = "assert Solution().twoSum([2, 7], 9) == [0, 1]\n"
    assert one_file_passes(program, tests)
    verdict = _verdict(program, tests)
    assert not verdict.passed and verdict.reason == "wrong_answer", verdict


@pytest.mark.parametrize("frame", [[0, "A"], [0, "A", ["eq", "all"]], [0, "A", "eq"], [0, "A", [1]]])
def test_a_malformed_new_handle_breaks_the_channel(frame):
    program = (
        f"import sys\nsys.modules['la_wire']._HANDLES.encode = lambda value: {{'h': {frame!r}}}\n\n"
        "class A:\n    pass\n\ndef make():\n    return A()\n"
    )
    verdict = _verdict(program, "assert make() is not None\n")
    assert not verdict.passed and verdict.reason == "bad_reply", verdict
    assert "bad handle" in verdict.detail, verdict
