"""Memory steering's temperature comes from every observation of the level, not from the keys asked
about alone (HFlow run 15, issue 17).

With one of the asked keys observed, their spread was 0 (a floor of 1e-3), so one sample's shrunk
difference from the prior (the mean of the level's other keys, e.g. prompt and settings edits) sent
that key, or every other key, to the floor: one ``add:vote`` that gained 0.02 made ``add:cot`` four
times less likely in the simulated searches from the second generation on.
"""

from __future__ import annotations

from lightning_agents.hflow.memory import ExperienceMemory

CHOICES = ["add:cot", "add:vote", "add:programmer", "add:refine", "backbone:mid", "backbone:o1"]


def test_one_good_choice_does_not_push_every_other_choice_to_the_floor():
    memory = ExperienceMemory()
    memory.record_edit("t", "math", "prompt:cot:template", "p", "c1", -0.05, 1)  # not an asked key
    memory.record_edit("t", "math", "add:vote", "p", "c2", 0.02, 1)
    w = memory.steering("t", "math", "choice_stats", CHOICES)
    assert w["add:vote"] == max(w.values())
    # one sample moves a choice a little (shrinkage), whichever side of the prior it lies on
    assert min(w.values()) > 0.75, w


def test_one_bad_choice_is_moved_a_little_not_to_the_floor():
    memory = ExperienceMemory()
    memory.record_edit("t", "math", "prompt:cot:template", "p", "c1", 0.0, 1)
    memory.record_edit("t", "math", "params:cot.temperature", "p", "c2", 0.0, 1)
    memory.record_edit("t", "math", "backbone:o1", "p", "c3", -0.3, 1)
    w = memory.steering("t", "math", "choice_stats", CHOICES)
    assert w["backbone:o1"] < 1.0 == w["backbone:mid"]
    assert w["backbone:o1"] > 0.75, w
    # two samples: still a little
    memory.record_edit("t", "math", "backbone:o1", "p", "c4", -0.3, 1)
    assert memory.steering("t", "math", "choice_stats", CHOICES)["backbone:o1"] > 0.6


def test_many_samples_still_move_a_choice_a_lot():
    memory = ExperienceMemory()
    for _ in range(20):
        memory.record_edit("t", "math", "add:cot", "p", "c", -0.3, 1)
        memory.record_edit("t", "math", "add:vote", "p", "c", 0.0, 1)
    w = memory.steering("t", "math", "choice_stats", CHOICES)
    assert w["add:cot"] < 0.5 < w["add:vote"] == 1.0
    # experience steers, it never forbids
    assert min(w.values()) >= 0.25


def test_a_given_temperature_is_used_as_is():
    memory = ExperienceMemory()
    memory.record_edit("t", "math", "prompt:cot:template", "p", "c1", -0.05, 1)
    memory.record_edit("t", "math", "add:vote", "p", "c2", 0.02, 1)
    w = memory.steering("t", "math", "choice_stats", CHOICES, temperature=0.001)
    assert w["add:cot"] == 0.25  # the caller asked for a sharp rule
