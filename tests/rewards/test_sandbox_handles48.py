"""Sandbox handles, session 48 (red team 48's N1): LeetCode's ``Solution().method(...)``.

LeetCode's tests, and LiveCodeBench's functional problems (starter code ``class Solution``), call
methods on an instance of the program's own class: ``assert Solution().twoSum([2, 7, 11, 15], 9)
== [0, 1]``, ``s = Solution(); s.moveZeroes(nums); assert nums == [...]``, and the "design"
problems ``c = LRUCache(2); c.put(1, 1); c.get(1)``. The instance is not plain data, so before
handles every right program was ``bad_reply`` ("cannot send a value of type Solution"). Now such an
instance stays in the sandbox and the tests get a handle (``la_handles``): its method calls go
through the channel as any call (in-place changes of the arguments come back), the same instance
is the same handle, a handle passed back arrives as the candidate's own object, and every other use
of a handle (``==``, ``bool``, ``repr``, ``hash``, a data attribute) fails the verdict closed.

Every verdict case is checked against one file first (``one_file_passes``), except the fail-closed
ones, where one file passes by asking the program's own ``__eq__``/``__bool__``.
"""

from __future__ import annotations

import pytest
from sandbox_modes import ISOLATIONS, one_file_passes, score

from lightning_agents.rewards import CodeVerifier


def _verdict(program, tests, isolation="process"):
    return score(CodeVerifier(isolation=isolation, timeout_s=30), program, tests)


def _agrees(program, tests, passes, isolation="process"):
    """One file and the sandbox (``isolation``) give ``passes`` for ``program`` under ``tests``."""
    assert one_file_passes(program, tests) is passes
    verdict = _verdict(program, tests, isolation)
    assert verdict.passed is passes, verdict
    if not passes:
        assert verdict.reason == "wrong_answer", verdict  # a fail of the tests, not a broken channel
    return verdict


TWO_SUM = (
    "from typing import List\n\nclass Solution:\n    def twoSum(self, nums: List[int], target: int) -> List[int]:\n"
    "        seen = {}\n        for i, x in enumerate(nums):\n            if target - x in seen:\n"
    "                return [seen[target - x], i]\n            seen[x] = i\n"
)
TWO_SUM_WRONG = TWO_SUM.replace("return [seen[target - x], i]", "return [i, seen[target - x]]")
TWO_SUM_TESTS = (
    "assert Solution().twoSum([2, 7, 11, 15], 9) == [0, 1]\nassert Solution().twoSum([3, 2, 4], 6) == [1, 2]\n"
)

MOVE_ZEROES = (
    "class Solution:\n    def moveZeroes(self, nums):\n        k = 0\n        for x in nums:\n            if x:\n"
    "                nums[k] = x\n                k += 1\n        for i in range(k, len(nums)):\n"
    "            nums[i] = 0\n"
)
# returns the answer instead of changing nums in place (LeetCode's "do not return anything")
MOVE_ZEROES_WRONG = (
    "class Solution:\n    def moveZeroes(self, nums):\n        return [x for x in nums if x] + [0] * nums.count(0)\n"
)
MOVE_ZEROES_TESTS = (
    "def test_move():\n    nums = [0, 1, 0, 3, 12]\n    s = Solution()\n    assert s.moveZeroes(nums) is None\n"
    "    assert nums == [1, 3, 12, 0, 0]\n\n\ntest_move()\n"
)

LRU = (
    "from collections import OrderedDict\n\nclass LRUCache:\n    def __init__(self, capacity: int):\n"
    "        self.cap = capacity\n        self.d = OrderedDict()\n\n    def get(self, key: int) -> int:\n"
    "        if key not in self.d:\n            return -1\n        self.d.move_to_end(key)\n        return self.d[key]\n\n"
    "    def put(self, key: int, value: int) -> None:\n        self.d[key] = value\n        self.d.move_to_end(key)\n"
    "        if len(self.d) > self.cap:\n            self.d.popitem(last=False)\n"
)
LRU_WRONG = LRU.replace("        self.d.move_to_end(key)\n        return self.d[key]", "        return self.d[key]")
# several instances at once: each keeps its own state in the sandbox
LRU_TESTS = (
    "a, b = LRUCache(2), LRUCache(1)\na.put(1, 1)\na.put(2, 2)\nb.put(1, 10)\nassert a.get(1) == 1\na.put(3, 3)\n"
    "assert a.get(2) == -1\nassert a.get(1) == 1\nb.put(2, 20)\nassert b.get(1) == -1\nassert b.get(2) == 20\n"
)

# a handle passed back arrives as the candidate's own object; the same instance is the same handle
MERGE = (
    "class Tally:\n    def __init__(self):\n        self.n = 0\n    def add(self, k):\n        self.n += k\n"
    "        return self\n    def merge(self, other):\n        self.n += other.n\n    def total(self):\n"
    "        return self.n\n    def pair(self, other):\n        return [self, other]\n"
)
MERGE_WRONG = MERGE.replace("self.n += other.n", "self.n += other.n if other is not self else 0")
MERGE_TESTS = (
    "a, b = Tally(), Tally()\nassert a.add(3) is a\nassert a.add(1) is not b\nb.add(4)\na.merge(b)\n"
    "assert a.total() == 8 and b.total() == 4\nx, y = a.pair(b)\nassert x is a and y is b\na.merge(a)\n"
    "assert a.total() == 16\n"
)

# the candidate puts instances of its class into an argument: they come back as handles
FILL = (
    "class Node:\n    def __init__(self, v):\n        self.v = v\n    def val(self):\n        return self.v\n\n"
    "class Solution:\n    def build(self, out, n):\n        out.extend(Node(i * i) for i in range(n))\n"
    "        return out[-1]\n"
)
FILL_WRONG = FILL.replace("return out[-1]", "return Node((n - 1) ** 2)")
FILL_TESTS = (
    "out = []\nlast = Solution().build(out, 4)\nassert len(out) == 4\nassert [o.val() for o in out] == [0, 1, 4, 9]\n"
    "assert last is out[-1]\n"
)

# the program's own exception from a method, and a method it does not have, reach the tests as in one file
RAISES = "class Stack:\n    def __init__(self):\n        self.items = []\n    def pop(self):\n        return self.items.pop()\n"
RAISES_WRONG = RAISES.replace("return self.items.pop()", "return self.items.pop() if self.items else None")
RAISES_TESTS = (
    "import pytest\ns = Stack()\nwith pytest.raises(IndexError):\n    s.pop()\nwith pytest.raises(AttributeError):\n"
    "    s.push(1)\n"
)

# LeetCode's linked lists: the tests build them from handles and walk them by their data attributes,
# which are read (and written) in the sandbox; ``node.next`` is the same handle each time
LINKED = (
    "class ListNode:\n    def __init__(self, val=0, next=None):\n        self.val = val\n        self.next = next\n\n"
    "class Solution:\n    def reverseList(self, head):\n        prev = None\n        while head:\n"
    "            head.next, prev, head = prev, head, head.next\n        return prev\n"
)
LINKED_WRONG = LINKED.replace("        return prev\n", "        return ListNode(3, ListNode(2, ListNode(1)))\n")
LINKED_TESTS = (
    "def build(xs):\n    head = None\n    for x in reversed(xs):\n        head = ListNode(x, head)\n    return head\n\n"
    "def walk(node):\n    out = []\n    while node is not None:\n        out.append(node.val)\n"
    "        node = node.next\n    return out\n\n"
    "h = build([1, 2, 3])\ntail = h.next.next\nr = Solution().reverseList(h)\nassert r is tail\n"
    "assert walk(r) == [3, 2, 1]\nassert h.next is None\nn = ListNode(7)\nn.next = ListNode(8)\nn.val = 6\n"
    "assert walk(n) == [6, 8]\nassert not hasattr(n, 'prev') and hasattr(n, 'val')\n"
)

# a handle kept as a class attribute of the tests' TestCase (read as ``self.s``), and a method's
# stand-in kept as one (``self.pop``): plain values there, as the instance and method are in one file
CLASS_ATTRIBUTE_TESTS = (
    "import unittest\n\nclass TestStack(unittest.TestCase):\n    s = Stack()\n    pop = s.pop\n\n"
    "    def test_pop(self):\n        with self.assertRaises(IndexError):\n            self.s.pop()\n"
    "        with self.assertRaises(IndexError):\n            self.pop()\n\n\n"
    "result = unittest.TextTestRunner().run(unittest.defaultTestLoader.loadTestsFromTestCase(TestStack))\n"
    "assert result.wasSuccessful()\n"
)

CASES = {
    "twoSum": (TWO_SUM, TWO_SUM_WRONG, TWO_SUM_TESTS),
    "moveZeroes in place": (MOVE_ZEROES, MOVE_ZEROES_WRONG, MOVE_ZEROES_TESTS),
    "LRUCache, two at once": (LRU, LRU_WRONG, LRU_TESTS),
    "a handle passed back": (MERGE, MERGE_WRONG, MERGE_TESTS),
    "handles in an argument": (FILL, FILL_WRONG, FILL_TESTS),
    "raises": (RAISES, RAISES_WRONG, RAISES_TESTS),
    "a handle as a class attribute of the tests": (RAISES, RAISES_WRONG, CLASS_ATTRIBUTE_TESTS),
    "linked list, attributes read and set": (LINKED, LINKED_WRONG, LINKED_TESTS),
}


@pytest.mark.parametrize("isolation", ISOLATIONS)
@pytest.mark.parametrize("case", list(CASES))
def test_a_right_leetcode_program_passes_and_a_wrong_one_fails(case, isolation):
    right, wrong, tests = CASES[case]
    _agrees(right, tests, True, isolation)
    _agrees(wrong, tests, False, isolation)


# -- what a handle must not answer from the candidate ---------------------------------------------

ALWAYS_EQUAL = (
    "class Solution:\n    def __eq__(self, other):\n        return True\n    def __hash__(self):\n        return 0\n"
    "    def __bool__(self):\n        return True\n    def __repr__(self):\n        return '[0, 1]'\n"
    "    def __len__(self):\n        return 2\n    def twoSum(self, nums, target):\n        return self\n"
)
FAIL_CLOSED = {
    "==": "assert Solution().twoSum([2, 7], 9) == [0, 1]\n",
    "!= (in a try)": "try:\n    assert not (Solution() != [0, 1])\nexcept BaseException:\n    pass\nassert Solution() is not None\n",
    "bool": "assert Solution()\n",
    "repr": "assert repr(Solution()) == '[0, 1]'\n",
    "str": "assert str(Solution()) == '[0, 1]'\n",
    "len": "assert len(Solution()) == 2\n",
    "hash": "assert {Solution(): 1}\n",
    "a method as a value": "s = Solution()\nassert s.twoSum == s.twoSum\n",
    "copy": "import copy\nassert copy.copy(Solution()) is not None\n",
}


@pytest.mark.parametrize("case", list(FAIL_CLOSED))
def test_a_use_of_a_handle_other_than_a_call_fails_closed(case):
    tests = FAIL_CLOSED[case]
    assert one_file_passes(ALWAYS_EQUAL, tests)  # the program's own dunders answer, in one file
    verdict = _verdict(ALWAYS_EQUAL, tests)
    assert not verdict.passed and verdict.reason == "wrong_answer", verdict
    assert "LeftOutTouched" in verdict.detail or "held in the sandbox" in verdict.detail, verdict


def test_an_attribute_that_is_not_plain_data_fails_closed():
    """A data attribute whose value is neither plain data nor an instance of the program's class
    (a ``Fraction``) cannot cross: ``bad_reply``, as a call returning it is."""
    program = (
        "from fractions import Fraction\n\nclass Node:\n    def __init__(self):\n        self.f = Fraction(1, 3)\n"
    )
    tests = "from fractions import Fraction\nassert Node().f == Fraction(1, 3)\n"
    assert one_file_passes(program, tests)
    verdict = _verdict(program, tests)
    assert not verdict.passed and verdict.reason == "bad_reply", verdict


# -- forged handle frames -------------------------------------------------------------------------

# The program rewrites its own process's handle table (it can: it runs there) to send frames the
# harness never issued. The harness refuses each: bad_reply.
FORGE = "import sys\nT = sys.modules['la_wire']._HANDLES\nclass A:\n    pass\n"
FORGERIES = {
    "a number never issued": "def f():\n    return 5\n",
    "a known number before any was issued": "def f():\n    return 0\n",
    "a number skipped": "def f():\n    return [3, 'A']\n",
    "a number re-issued": "def f():\n    return [0, 'A']\n",
    "a malformed handle": "def f():\n    return [0, 'A', 1]\n",
}


def test_a_malformed_answer_to_an_attribute_read_breaks_the_channel():
    program = (
        "import sys\n\nclass A:\n    x = 1\n\ndef make():\n    return A()\n\n"
        "sys.modules['la_handles']._read = lambda instance, attribute, table: [0, 5, 'more']\n"
    )
    verdict = _verdict(program, "assert make().x == 5\n")
    assert not verdict.passed and verdict.reason == "bad_reply", verdict
    assert "malformed answer" in verdict.detail, verdict


@pytest.mark.parametrize("case", list(FORGERIES))
def test_a_forged_handle_breaks_the_channel(case):
    # the first call issues handle 0 honestly; the second sends the forged frame
    body = FORGERIES[case].replace("def f():\n    return ", "FORGED = ")
    program = (
        FORGE + body + "\ndef make():\n    return A()\n\ndef forge():\n"
        "    T.encode = lambda value: {'h': FORGED}  # in force when the reply is encoded\n    return A()\n"
    )
    if case == "a known number before any was issued":
        tests = "x = forge()\n"
    else:
        tests = "h = make()\nx = forge()\n"
    verdict = _verdict(program, tests)
    assert not verdict.passed and verdict.reason == "bad_reply", verdict
    assert "handle" in verdict.detail, verdict
