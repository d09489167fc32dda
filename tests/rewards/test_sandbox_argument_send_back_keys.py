"""A dict argument the candidate changed keeps the tests' keys where they stay (review of 93bf6c6).

93bf6c6 wrote a changed dict back by emptying and refilling it, so every key became a plain copy
(the tests' ``IntEnum`` or namedtuple keys lost their type) and a loop of the tests over an
``OrderedDict`` broke ("mutated during iteration") where the candidate only changed a value. In one
file the candidate's ``d[k] = v`` keeps the key object and its place. Each case is checked against
one file first.
"""

from __future__ import annotations

import pytest
from sandbox_modes import agrees_with_one_file

ADD_KEY = "def add(d):\n    d[3] = 'c'\n"
BUMP = "def bump(d, k):\n    d[k] = d[k] + 1\n"
TRUE_FOR_ONE = "def swap(d):\n    del d[1]\n    d[True] = 'b'\n"
REORDER = "def first_last(d):\n    d.move_to_end(next(iter(d)))\n    d['x'] = 0\n"

CASES = {
    "IntEnum keys stay the tests' own when a key is added": (
        ADD_KEY,
        "import enum\nclass K(enum.IntEnum):\n    A = 1\nd = {K.A: 'a'}\nadd(d)\n"
        "assert [type(k).__name__ for k in d] == ['K', 'int']\nassert list(d.values()) == ['a', 'c']\n",
        True,
    ),
    "a namedtuple key stays one when its value changes": (
        "def bump(d):\n    for k in d:\n        d[k] += 1\n",
        "from collections import namedtuple\nP = namedtuple('P', 'x y')\nd = {P(1, 2): 0}\nbump(d)\n"
        "assert next(iter(d)).x == 1\nassert list(d.values()) == [1]\n",
        True,
    ),
    "the tests loop over an OrderedDict the candidate changes values of": (
        BUMP,
        "from collections import OrderedDict\nd = OrderedDict(a=1, b=2)\nfor k in d:\n    bump(d, k)\n"
        "assert list(d.items()) == [('a', 2), ('b', 3)]\n",
        True,
    ),
    "1 deleted and True put in its place is True": (
        TRUE_FOR_ONE,
        "d = {1: 'a'}\nswap(d)\nassert [type(k).__name__ for k in d] == ['bool']\nassert list(d.values()) == ['b']\n",
        True,
    ),
    "an OrderedDict reordered and grown keeps the candidate's order": (
        REORDER,
        "from collections import OrderedDict\nd = OrderedDict(a=1, b=2)\nfirst_last(d)\nassert list(d) == ['b', 'a', 'x']\n",
        True,
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_changed_dict_argument_is_written_as_one_file_changes_it(case):
    program, tests, passes = CASES[case]
    agrees_with_one_file(case, program, tests, passes)
