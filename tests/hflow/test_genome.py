import random

import pytest

from lightning_agents.hflow import Mutator, Node, Workflow, WorkflowError


def _sample() -> Workflow:
    return Workflow(
        nodes=[
            Node("gen", "generate", prompt="Answer the question.", backbone="student"),
            Node("prog", "programmer", backbone="teacher", params={"retries": 2}),
            Node("vote", "vote", backbone="student", params={"samples": 3, "temperature": 0.7}),
            Node("fmt", "format", prompt="The answer is {answer}."),
        ],
        edges=[("gen", "vote"), ("prog", "vote"), ("vote", "fmt")],
        output="fmt",
        name="sample",
    )


def test_round_trip_dict_json_yaml_file(tmp_path):
    wf = _sample().validate(["student", "teacher"])
    assert Workflow.from_dict(wf.to_dict()) == wf
    assert Workflow.from_json(wf.to_json()) == wf
    assert Workflow.from_yaml(wf.to_yaml()) == wf
    for name in ("w.yaml", "w.json"):
        assert Workflow.load(wf.save(tmp_path / name)) == wf
    assert "op: programmer" in wf.to_yaml()  # readable, not an opaque blob


def test_hash_ignores_names_but_not_content():
    wf = _sample()
    renamed = Workflow.from_dict(wf.to_dict())
    mapping = {"gen": "a", "prog": "b", "vote": "c", "fmt": "d"}
    for n in renamed.nodes:
        n.id = mapping[n.id]
    renamed.edges = [(mapping[s], mapping[t]) for s, t in renamed.edges]
    renamed.output, renamed.name = "d", "other"
    assert renamed.hash() == wf.hash()
    changed = wf.copy()
    changed.node("prog").prompt = "Write Python."
    assert changed.hash() != wf.hash()
    swapped = wf.copy()
    swapped.edges = [("prog", "vote"), ("gen", "vote"), ("vote", "fmt")]  # ballot order matters
    assert swapped.hash() != wf.hash()


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda w: w.edges.append(("fmt", "gen")), "cycle|sink"),
        (lambda w: setattr(w, "output", "vote"), "sink"),
        (lambda w: w.nodes.append(Node("dead", "generate", backbone="student")), "sink|lead to the output"),
        (lambda w: w.edges.append(("gen", "fmt")), "inputs"),
        (lambda w: setattr(w.node("gen"), "backbone", "gpt-9"), "not in the pool"),
        (lambda w: setattr(w.node("gen"), "op", "teleport"), "unknown operator"),
        (lambda w: w.nodes.append(Node("gen", "generate", backbone="student")), "duplicate"),
    ],
)
def test_validation_rejects_bad_graphs(mutate, message):
    wf = _sample()
    mutate(wf)
    with pytest.raises(WorkflowError, match=message):
        wf.validate(["student", "teacher"])


def test_from_dict_rejects_unknown_keys():
    d = _sample().to_dict()
    d["nodes"][0]["promt"] = "typo"
    with pytest.raises(WorkflowError, match="unknown keys"):
        Workflow.from_dict(d)


def test_render_png(tmp_path):
    png = _sample().render_png(tmp_path / "w.png")
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and (tmp_path / "w.png").stat().st_size > 5000


def test_mutation_and_crossover_always_yield_valid_dags():
    pool = ["student", "teacher"]
    kinds = {"add": 0, "remove": 0, "replace": 0, "prompt": 0, "backbone": 0, "params": 0, "crossover": 0}
    for seed in range(150):
        rng = random.Random(seed)
        m = Mutator(pool, rng, max_nodes=5, code_task=seed % 2 == 0)
        a, b = m.random_workflow(3), m.random_workflow(3)
        assert a.is_valid(pool, 5) and b.is_valid(pool, 5)
        for _ in range(4):
            child, edit = m.mutate(a)
            child.validate(pool, 5)
            kinds[edit.split(":")[0]] = kinds.get(edit.split(":")[0], 0) + 1
            a = child
        child, edit = m.cross(a, b)
        child.validate(pool, 5)
        kinds[edit.split(":")[0]] += 1
    # Every kind of edit really happens (a mutator returning its input would pass validity alone).
    assert all(kinds[k] > 10 for k in ("add", "remove", "replace", "prompt", "backbone", "params", "crossover")), kinds
    assert kinds.get("none", 0) < 30


def test_crossover_grafts_donor_subgraph():
    rng = random.Random(3)
    m = Mutator(["student", "teacher"], rng, max_nodes=6)
    a = Workflow(
        [Node("g", "generate", backbone="student"), Node("r", "refine", backbone="student")], [("g", "r")], "r"
    )
    b = Workflow([Node("p", "programmer", backbone="teacher")], output="p")
    seen = set()
    for _ in range(20):
        child, edit = m.crossover(a, b)
        child.validate(["student", "teacher"], 6)
        seen.add(tuple(sorted(n.op for n in child.nodes)))
    # Replacing g gives programmer->refine; replacing the output r gives programmer alone.
    assert ("programmer", "refine") in seen and ("programmer",) in seen
