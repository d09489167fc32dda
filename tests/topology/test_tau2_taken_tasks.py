"""A tau2 simulation without its own task takes one from the ground-truth ``tasks.json`` files
only where it is its own domain's, or its base domain's for a variant; otherwise it is refused
(clear evidence) or warned (none either way), never scored against another domain's task silently.

Real inputs: tests/data/tau2_pooled_ground_truth (sierra-research/tau2-bench @ 59b1453,
adaptive-agent's airline and medical_triage files and those domains' tasks.json),
tests/data/tau2_pooled (blakeelias/tau2-bench's airline and airline_tighter_policy runs of task
11) and tests/data/tau2_acceptable_outcomes (blakeelias/tau2-bench's airline-relaxed runs of task
8); their READMEs give the sources.
"""

import json
import logging
from pathlib import Path

import pytest

from lightning_agents.datamodules.trajectories import RolloutFormatError, load_ground_truth, load_rollouts

DATA = Path(__file__).resolve().parents[1] / "data"
POOLED = DATA / "tau2_pooled_ground_truth"
AIRLINE = POOLED / "adaptive-agent-airline.json"
MEDICAL = POOLED / "adaptive-agent-medical_triage.json"
AIRLINE_TASKS = POOLED / "airline-tasks-59b1453.json"
MEDICAL_TASKS = POOLED / "medical_triage-tasks-59b1453.json"
TIGHTER = DATA / "tau2_pooled" / "grok-3-airline_tighter_policy-task11.json"
AIRLINE_11 = DATA / "tau2_pooled" / "grok-3-airline-task11.json"
RELAXED = DATA / "tau2_acceptable_outcomes" / "grok-3-mini-airline-relaxed-task8.json"


def _write(path: Path, data) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))
    return path


def _without(path: Path, field: str, where: Path) -> Path:
    """The results file at ``path`` with its top-level ``field`` emptied (``tasks``) or removed."""
    data = json.loads(path.read_text())
    if field == "tasks":
        data["tasks"] = []
    else:
        del data[field]
    return _write(where, data)


def _warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def test_a_file_naming_no_domain_is_refused_a_task_of_the_domain_its_policy_is_not_of(tmp_path):
    # The medical_triage simulations with their file's `domain` removed, as in ironshell's list of
    # adaptive-agent medical simulations (real: 44 of its 64 were scored against airline's tasks
    # silently). Each simulation's own policy is headed "# Medical Triage Agent Policy".
    nameless = _without(MEDICAL, "domain", tmp_path / "nameless.json")
    with pytest.raises(RolloutFormatError) as caught:
        load_rollouts([nameless], ground_truth=[AIRLINE_TASKS])
    message = str(caught.value)
    assert message.startswith(f"{nameless}:simulations[")
    assert "its file names no domain" in message
    assert f"of the airline tasks (from {AIRLINE_TASKS})" in message
    assert "its policy is headed '# Medical Triage Agent Policy', which is not the airline domain's" in message


def test_a_file_naming_no_domain_takes_a_named_domains_task_with_a_warning(tmp_path, caplog):
    # Its airline simulations' policy is airline's: taken, with a warning naming the file, the
    # task's domain and its file (before: silent).
    nameless = _without(AIRLINE, "domain", tmp_path / "nameless-airline.json")
    with caplog.at_level(logging.WARNING):
        rollouts = load_rollouts([nameless], ground_truth=[AIRLINE_TASKS])
    assert sorted(r.task_id for r in rollouts) == ["1", "2"]
    assert all(r.info.get("reference") for r in rollouts)
    taken = [w for w in _warnings(caplog) if "its simulations name no domain" in w]
    assert len(taken) == 1
    assert taken[0].startswith(f"{nameless}: ")
    assert f"2 of them take the 'airline' domain's tasks of their ids from {AIRLINE_TASKS}" in taken[0]
    # Without a policy the simulations' own reward_info tells: the medical simulations' checked
    # nl_assertions are not airline's tasks' (session 42; before, taken with a warning only).
    data = json.loads(MEDICAL.read_text())
    del data["domain"]
    for sim in data["simulations"]:
        sim.pop("policy", None)
    bare = _write(tmp_path / "bare-medical.json", data)
    with pytest.raises(
        RolloutFormatError, match=r"bare-medical\.json:simulations\[0\]: its reward_info\.nl_assertions"
    ):
        load_rollouts([bare], ground_truth=[AIRLINE_TASKS])


def test_a_variant_takes_its_base_domains_tasks_with_a_warning(tmp_path, caplog):
    # airline_tighter_policy runs airline's task 11 (which names `airline`): taken, warned.
    sims = _without(TIGHTER, "tasks", tmp_path / "tighter.json")
    tasks = _write(tmp_path / "airline" / "tasks.json", json.loads(AIRLINE_11.read_text())["tasks"])
    with caplog.at_level(logging.WARNING):
        (rollout,) = load_rollouts([sims], ground_truth=[tasks])
    assert rollout.info["environment"]["domain"] == "airline_tighter_policy"
    assert rollout.info["reference"]
    (warning,) = [w for w in _warnings(caplog) if "variant" in w]
    assert warning.startswith(f"{sims}: its simulations are of domain 'airline_tighter_policy', a variant of 'airline'")
    assert f"take the 'airline' domain's tasks of their ids from {tasks}" in warning


def test_a_variants_own_task_file_naming_its_base_domain_is_taken_without_a_warning(tmp_path, caplog):
    # blakeelias's airline-relaxed/tasks.json: its task "8" names `airline`. Given as the
    # variant's own file it is the right one (before: "wrong for another domain" warned); in an
    # airline/ folder it is the base domain's, warned.
    sims = _without(RELAXED, "tasks", tmp_path / "relaxed.json")
    own_tasks = json.loads(RELAXED.read_text())["tasks"]
    own = _write(tmp_path / "airline-relaxed" / "tasks.json", own_tasks)
    with caplog.at_level(logging.WARNING):
        rollouts = load_rollouts([sims], ground_truth=[own])
    assert rollouts and all(r.info.get("reference") or r.info.get("acceptable_outcomes") for r in rollouts)
    assert not [w for w in _warnings(caplog) if "tasks of their ids" in w]
    base = _write(tmp_path / "airline" / "tasks.json", own_tasks)
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        load_rollouts([sims], ground_truth=[base])
    assert [w for w in _warnings(caplog) if "a variant of 'airline'" in w and str(base) in w]


def test_a_task_naming_no_domain_is_taken_with_a_warning(tmp_path, caplog):
    # medical_triage's own tasks with their domain stripped (as banking_knowledge's and mock's real
    # tasks.json name none): its simulations take them, warned, since no file names their domain.
    tasks = json.loads(MEDICAL_TASKS.read_text())
    for task in tasks:
        del task["user_scenario"]["instructions"]["domain"]
    stripped = _write(tmp_path / "tasks-nodomain.json", tasks)
    with caplog.at_level(logging.WARNING):
        assert len(load_rollouts([MEDICAL], ground_truth=[stripped])) == 2
    (warning,) = [w for w in _warnings(caplog) if "(none named)" in w]
    assert warning.startswith(f"{MEDICAL}: its simulations are of domain 'medical_triage'")
    assert f"take tasks that name no domain ((none named)) of their ids from {stripped}" in warning
    # airline's tasks stripped alike: the simulations' own reward_info.nl_assertions are not theirs,
    # refused (session 42; before, taken with the same warning and scored against airline's tasks).
    tasks = json.loads(AIRLINE_TASKS.read_text())
    for task in tasks:
        del task["user_scenario"]["instructions"]["domain"]
    stripped = _write(tmp_path / "airline-tasks-nodomain.json", tasks)
    with pytest.raises(
        RolloutFormatError, match=r"medical_triage\.json:simulations\[0\]: its reward_info\.nl_assertions"
    ):
        load_rollouts([MEDICAL], ground_truth=[stripped])


def test_a_variants_task_file_beside_its_base_domains_is_refused_naming_both(tmp_path):
    # Both files' task "8" names `airline` (a variant's own tasks.json names its base domain): the
    # refusal names both files and says so (before: "two versions of the airline domain's
    # tasks.json differ", though one is airline-relaxed's own).
    relaxed_tasks = json.loads(RELAXED.read_text())["tasks"]
    own = _write(tmp_path / "airline-relaxed" / "tasks.json", relaxed_tasks)
    other = [dict(t, description={"purpose": "airline's own task 8"}) for t in relaxed_tasks]
    base = _write(tmp_path / "airline" / "tasks.json", other)
    with pytest.raises(RolloutFormatError) as caught:
        load_ground_truth([base, own])
    message = str(caught.value)
    assert f"{base}[0] and {own}[0]" in message
    assert "two versions" not in message
    assert "both files' tasks name domain 'airline'" in message
    assert "a variant domain's own tasks.json" in message
