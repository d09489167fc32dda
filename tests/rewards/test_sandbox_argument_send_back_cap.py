"""The candidate's changes to a big argument come back within the reply's cap (review of 93bf6c6).

Since 93bf6c6 the candidate sends back the whole contents of each argument it changed. Requests
may be far larger than ``max_reply_bytes`` (the cap on a reply), so a right program that sorted a
big argument in place (``l.sort()`` inside ``median``) was cut off ("frame ... exceeds the limit")
even where the tests never look at that argument; before 93bf6c6 it passed, and it passes in one
file. A reply may now be as much larger than the cap as the largest request the harness sent.
"""

from __future__ import annotations

import pytest
from sandbox_modes import ISOLATIONS, one_file_passes, score

from lightning_agents.rewards import CodeVerifier

CAP = 1 << 16  # small, so a 30,000-int argument (about 210 kB as JSON) is far past it
DATA = "data = [(i * 7919) % 1000003 for i in range(30000)]\n"
MEDIAN_SORTS = "def median(l):\n    l.sort()\n    return l[len(l) // 2]\n"
UNCHECKED = DATA + "assert median(data) == sorted(data)[15000]\n"
CHECKED = DATA + "want = sorted(data)\nassert median(data) == want[15000]\nassert data == want\n"
GROWS = "def median(l):\n    l.extend(range(10**6, 10**6 + 60000))\n    return 0\n"


def _verdict(program, tests, isolation="process"):
    return score(CodeVerifier(isolation=isolation, timeout_s=60, max_reply_bytes=CAP), program, tests)


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_sorting_a_big_argument_in_place_passes_where_the_tests_never_look(isolation):
    assert one_file_passes(MEDIAN_SORTS, UNCHECKED)
    verdict = _verdict(MEDIAN_SORTS, UNCHECKED, isolation)
    assert verdict.passed, verdict


def test_a_big_argument_sorted_in_place_comes_back():
    assert one_file_passes(MEDIAN_SORTS, CHECKED)
    verdict = _verdict(MEDIAN_SORTS, CHECKED)
    assert verdict.passed, verdict


def test_a_reply_past_the_request_and_the_cap_still_fails():
    # 60,000 new 7-digit ints on top of the 30,000 sent: past the request's size plus the cap
    assert one_file_passes(GROWS, DATA + "assert median(data) == 0\n")
    verdict = _verdict(GROWS, DATA + "assert median(data) == 0\n")
    assert not verdict.passed and "exceeds the limit" in verdict.detail, verdict
