"""Experience memory over several runs on one task, and memory files that are not one
(session-35 audit: /work/h35/hflow/memory_runs.py runs `evolve` three times on one memory file)."""

from __future__ import annotations

import json

import pytest

from lightning_agents.hflow import Node, Workflow
from lightning_agents.hflow.memory import ExperienceMemory

ONE = Workflow([Node("g", "generate", backbone="student")])
TWO = Workflow([Node("p", "programmer", backbone="student")])


def _run(path, workflow, fitness, times):
    """One `evolve` run as the memory sees it: loaded from the file, evaluations, fold, save."""
    mem = ExperienceMemory(str(path))
    for _ in range(times):
        mem.record_evaluation("t", "math", workflow, fitness)
        mem.record_edit("t", "math", "add:programmer", "p0", workflow.hash(), fitness - 0.5, 1)
    mem.consolidate("t")
    mem.save()
    return json.loads(path.read_text())


def test_a_second_run_on_the_same_task_reaches_the_domain_once(tmp_path):
    path = tmp_path / "memory.json"
    first = _run(path, ONE, 0.5, 3)
    assert first["domains"]["math"]["op_stats"]["generate"][0] == 3
    # before: the domain kept the first run's counts and seeds for good (the task was "already
    # folded"), so the better workflow a second run found never seeded the domain's next task
    second = _run(path, TWO, 0.9, 2)
    domain = second["domains"]["math"]
    assert domain["op_stats"] == second["tasks"]["t"]["op_stats"] == {"generate": [3, 1.5], "programmer": [2, 1.8]}
    assert domain["edit_stats"]["add"][0] == 5
    assert domain["seeds"][0]["hash"] == TWO.hash()
    # folding again without new evaluations changes nothing
    mem = ExperienceMemory(str(path))
    mem.consolidate("t")
    assert mem.data["domains"]["math"]["op_stats"] == domain["op_stats"]


def test_a_memory_folded_before_folds_were_recorded_is_not_counted_twice(tmp_path):
    path = tmp_path / "memory.json"
    old = _run(path, ONE, 0.5, 3)
    old["domains"]["math"].pop("folded", None)  # as a memory written before this fix
    path.write_text(json.dumps(old))
    mem = ExperienceMemory(str(path))
    mem.consolidate("t")
    assert mem.data["domains"]["math"]["op_stats"] == {"generate": [3, 1.5]}


@pytest.mark.parametrize(
    "text, why",
    [
        ('{"lineage": [], "tasks": {', "Expecting property name enclosed in double quotes"),
        ("[1, 2]", "the memory is a JSON list, not an object"),
        ('{"lineage": [], "tasks": [], "domains": {}}', "its 'tasks' level is a list, not a dict"),
        ('{"lineage": [], "tasks": {"t": {"op_stats": {"cot": 3}}}, "domains": {}}', "tasks.t.op_stats"),
    ],
)
def test_a_memory_file_that_is_not_one_fails_naming_the_file_and_what_is_wrong(tmp_path, text, why):
    # before: a raw JSONDecodeError without the file's name, or an AttributeError once the search ran
    path = tmp_path / "memory.json"
    path.write_text(text)
    with pytest.raises(ValueError, match="not an HFlow experience memory") as err:
        ExperienceMemory(str(path))
    assert str(path) in str(err.value) and why in str(err.value)
