import networkx as nx
import pytest

from lightning_agents.topology import SignatureConfig, build_prefix_tree, build_quotient_graph, group_by_task
from lightning_agents.topology.graph import TURN_END, build_quotient
from lightning_agents.topology.metrics import loop_count, semantic_efficiency


def test_prefix_tree_shares_prefix_and_splits_at_first_difference(rollout):
    trials = [
        rollout("t", 0, 1.0, ["u:hi", "c:get_a", "o:1", "a:The answer is 1."]),
        rollout("t", 1, 0.0, ["u:hi", "c:get_a", "o:1", "a:Sorry, I cannot."]),
        rollout("t", 2, 0.0, ["u:hi", "c:get_b", "o:2"]),
    ]
    tree = build_prefix_tree(trials)
    paths = tree.graph["paths"]
    assert nx.is_arborescence(tree)
    assert {p[0] for p in paths.values()} == {tree.graph["root"]}
    # User text is context (no signature): trial 0 and 1 share 2 steps, trial 2 leaves them at the root.
    assert paths[0][:3] == paths[1][:3] and paths[0][3] != paths[1][3]
    assert paths[2][:1] == paths[0][:1] and paths[2][1] != paths[0][1]
    branch = sorted(n for n, d in tree.out_degree() if d >= 2)
    assert branch == [paths[0][0], paths[0][2]]
    assert tree.nodes[paths[0][0]]["success"] == 1 and tree.nodes[paths[0][0]]["failure"] == 2
    assert tree.nodes[paths[0][1]]["success"] == 1 and tree.nodes[paths[0][1]]["failure"] == 1


def test_error_makes_a_retry_loop_a_cycle(rollout):
    trial = rollout(
        "t", 0, 1.0, ['c:book{"x": 1}', "e:Error: card declined", 'c:book{"x": 1}', "o:booked", "a:Done, thanks!"]
    )
    graph = build_quotient_graph([trial])
    path = graph.graph["trials"][0]["path"]
    root = graph.graph["root"]
    # root -book-> Q -error-> root -book-> Q -ok-> W -text-> E
    assert path[0] == path[2] == root and path[1] == path[3]
    assert len(set(path)) == 4 and graph.number_of_edges() == 4
    assert nx.find_cycle(graph, root) == [(root, path[1]), (path[1], root)]
    assert graph.edges[root, path[1]]["traversals"] == 2 and graph.edges[root, path[1]]["success"] == 1
    assert graph.edges[path[1], root]["error"] and graph.graph["trials"][0]["errors"] == [2]


def test_same_writes_merge_whatever_was_read_before(rollout):
    a = rollout("t", 0, 1.0, ["c:get_a", "o:a", 'c:book{"f": "HAT1"}', "o:ok", "a:Thanks, bye"])
    b = rollout("t", 1, 1.0, ["c:get_b", "o:b", 'c:book{"f": "HAT1"}', "o:ok", "a:Thanks, bye"])
    graph = build_quotient_graph([a, b])
    pa, pb = graph.graph["trials"][0]["path"], graph.graph["trials"][1]["path"]
    assert pa[1:4] != pb[1:4]
    assert pa[4:] == pb[4:]  # merged after the successful write
    assert graph.number_of_nodes() == 9  # a prefix tree would need 11
    assert build_prefix_tree([a, b]).number_of_nodes() == 11
    end = pa[-1]
    assert graph.nodes[end]["ends_success"] == 2 and graph.nodes[end]["success"] == 2


def test_different_write_arguments_do_not_merge(rollout):
    a = rollout("t", 0, 1.0, ['c:book{"f": "HAT1"}', "o:ok"])
    b = rollout("t", 1, 0.0, ['c:book{"f": "HAT2"}', "o:ok"])
    graph = build_quotient_graph([a, b])
    assert graph.graph["trials"][0]["path"][-1] != graph.graph["trials"][1]["path"][-1]


def test_read_only_results_stay_distinct_until_a_write(rollout):
    a = rollout("t", 0, 1.0, ["c:get_a", "o:1", "a:statement one"])
    b = rollout("t", 1, 0.0, ["c:get_a", "o:2", "a:statement two"])
    graph = build_quotient_graph([a, b])
    pa, pb = graph.graph["trials"][0]["path"], graph.graph["trials"][1]["path"]
    assert pa[1] == pb[1] and pa[2] != pb[2] and pa[3] != pb[3]


def test_recorded_environment_state_merges_different_actions(rollout):
    a = rollout("t", 0, 1.0, ["u:make dir", "c:mkdir", "o:None@S1", "u:next", "c:ls"])
    b = rollout("t", 1, 0.0, ["u:make dir", "c:mkdir_p", "o:None", "a:done@S1", "u:next", "c:ls"])
    graph = build_quotient_graph([a, b])
    pa, pb = graph.graph["trials"][0]["path"], graph.graph["trials"][1]["path"]
    assert pa[2] == pb[3]  # same recorded state, same node
    assert pa[-2:] == pb[-2:]
    assert graph.nodes[pa[-1]]["success"] == 1 and graph.nodes[pa[-1]]["failure"] == 1


def test_edge_counts_are_distinct_trials(rollout):
    trials = [rollout("t", i, float(i % 2), ["u:hi", "c:get_a", "o:1"]) for i in range(5)]
    graph = build_quotient_graph(trials)
    root = graph.graph["root"]
    (child,) = graph.successors(root)
    assert graph.edges[root, child]["success"] == 2 and graph.edges[root, child]["failure"] == 3
    assert graph.nodes[root]["success"] + graph.nodes[root]["failure"] == 5


def test_unscored_trials_are_counted_apart(rollout):
    graph = build_quotient_graph([rollout("t", 0, None, ["a:hi"]), rollout("t", 1, 1.0, ["a:hi"])])
    root = graph.graph["root"]
    (child,) = graph.successors(root)
    assert graph.edges[root, child]["unscored"] == 1 and graph.edges[root, child]["success"] == 1
    assert graph.graph["trials"][0]["outcome"] is None


def test_input_order_does_not_change_the_graph(rollout):
    trials = [
        rollout("t", 0, 1.0, ["u:hi", "c:get_a", "o:1"]),
        rollout("t", 1, 0.0, ["u:hi", "c:get_b", "o:2"]),
        rollout("t", 2, 1.0, ["u:hey?", "c:get_b", "o:2"]),
    ]
    g1, g2 = build_quotient_graph(trials), build_quotient_graph(trials[::-1])
    assert nx.utils.graphs_equal(g1, g2)
    assert g1.graph["trials"] == g2.graph["trials"]


def test_one_task_only_and_unique_trials(rollout):
    with pytest.raises(ValueError, match="one task"):
        build_quotient_graph([rollout("a", 0, 1.0, ["u:x"]), rollout("b", 0, 1.0, ["u:x"])])
    with pytest.raises(ValueError, match="no rollouts"):
        build_quotient_graph([])
    with pytest.raises(ValueError, match="two rollouts numbered trial 0"):
        group_by_task([rollout("a", 0, 1.0, ["u:x"]), rollout("a", 0, 0.0, ["u:y"])])
    groups = group_by_task(
        [rollout("10", 1, 1.0, ["u:x"]), rollout("2", 0, 1.0, ["u:x"]), rollout("10", 0, 1.0, ["u:x"])]
    )
    assert list(groups) == ["2", "10"] and [r.trial for r in groups["10"]] == [0, 1]


def test_user_wording_never_splits_trials(rollout):
    a = rollout("t", 0, 1.0, ["u:I want to fly to Seattle?", "c:get_user", "o:1", "u:yes", 'c:book{"f": 1}', "o:ok"])
    b = rollout(
        "t", 1, 0.0, ["u:Book me a flight to Seattle.", "c:get_user", "o:1", "u:Thanks, bye", 'c:book{"f": 1}', "o:ok"]
    )
    graph = build_quotient_graph([a, b])
    assert graph.graph["trials"][0]["path"] == graph.graph["trials"][1]["path"]
    # Abstracting the user's text instead (the old behaviour) splits them at the root.
    split = build_quotient_graph([a, b], SignatureConfig(user_text="abstract"))
    assert split.graph["trials"][0]["path"][1] != split.graph["trials"][1]["path"][1]


def test_reads_in_any_order_merge_and_a_repeated_read_is_a_loop(rollout):
    a = rollout("t", 0, 1.0, ["c:get_a", "o:1", "c:get_b", "o:2", 'c:book{"f": 1}', "o:ok"])
    b = rollout("t", 1, 1.0, ["c:get_b", "o:2", "c:get_a", "o:1", "c:get_a", "o:1", 'c:book{"f": 1}', "o:ok"])
    graph = build_quotient_graph([a, b])
    pa, pb = graph.graph["trials"][0]["path"], graph.graph["trials"][1]["path"]
    assert pa[4] == pb[4] == pb[6]  # {a, b} read, whatever the order; the second get_a comes back
    assert pa[-1] == pb[-1]
    assert (
        graph.graph["trials"][0]["strategy"]
        == graph.graph["trials"][1]["strategy"]
        == (("call", "assistant", "book", '{"f":1}'),)
    )


def test_bfcl_turn_keyed_states_make_a_perfect_trial_acyclic(rollout):
    # The environment is unchanged by turn 2 ("ls" reads only), so without the turn in the state key
    # turn 2 would end on turn 1's node: a spurious cycle in a perfect trial.
    trial = rollout("t", 0, 1.0, ["u:make a dir", "c:mkdir", "o:None@1:S1", "u:list it", "c:ls", "o:temp@2:S1"])
    graph = build_quotient_graph([trial])
    assert nx.is_directed_acyclic_graph(graph)
    looping = build_quotient_graph([rollout("t", 0, 1.0, ["c:mkdir", "o:None@S1", "c:ls", "o:temp@S1"])])
    assert not nx.is_directed_acyclic_graph(looping)


def test_a_loop_as_a_turns_last_step_is_counted_before_the_turn_end_state(rollout):
    # The state after a turn sits on the turn's last step. When that step comes back to a node of
    # the trial (the same read made again, an error), the trial went straight to the state's node
    # and the loop was not counted: a model cut at BFCL's step limit while repeating a read looked
    # like one that read once.
    once = rollout("t", 0, 1.0, ["u:q", "c:get_a", "o:1@1:S", "u:next", "c:get_b", "o:2@2:S"])
    twice = rollout("t", 1, 1.0, ["u:q", "c:get_a", "o:1", "c:get_a", "o:1@1:S", "u:next", "c:get_b", "o:2@2:S"])
    graph = build_quotient([once, twice])
    a, b = graph.graph["trials"][0], graph.graph["trials"][1]
    assert len(a["path"]) == 5 and loop_count(graph, 0) == 0  # no extra move without a loop
    # 0 -get_a-> C -1-> X -get_a-> C' -1-> X (the loop) -turn end-> S1 -get_b-> -2-> S2
    assert b["path"][2] == b["path"][4] and b["path"][5] == a["path"][2] and b["path"][-1] == a["path"][-1]
    assert b["signatures"][4] == TURN_END and len(b["signatures"]) == len(b["path"]) - 1
    assert loop_count(graph, 1) == 1 and semantic_efficiency(graph, 1) == 4 / 7
    assert graph.edges[(b["path"][4], b["path"][5])][5] == {TURN_END: 1}
    # An error as the turn's last step takes the trial back to where it called from, then on.
    failed = build_quotient([rollout("t", 0, 0.0, ["u:q", "c:set_a", "e:denied@1:S", "u:next", "c:get_b", "o:2@2:S"])])
    path = failed.graph["trials"][0]["path"]
    assert path[:4] == [0, 1, 0, 2] and loop_count(failed, 0) == 1
    assert failed.graph["trials"][0]["errors"] == [2]
    assert failed.edges[(1, 0)][4] is True and failed.edges[(0, 2)][4] is False
    # A turn end that comes back to the node of its own state is one step, as before.
    same = build_quotient([rollout("t", 0, 1.0, ["c:mkdir", "o:None@S1", "c:ls", "e:no@S1"])])
    assert same.graph["trials"][0]["path"] == [0, 1, 2, 3, 2]
