"""A BFCL result file without inference_log: each call BFCL ran is answered in the topology.

The file logs the model's calls per step but not their outputs (glyphh-ada-1.1's results,
tests/data/bfcl_results). Before, each call stayed pending in the quotient graph forever: no call
was ever a write, so every trial had 0 writes and an empty strategy, and a trial pooled with one
that logged its outputs (the shared Claude file) parted from it at every state-changing call.
"""

import json
from pathlib import Path

from lightning_agents.datamodules.trajectories import load_rollouts
from lightning_agents.tasks.tau_actions import BFCL_READ_ONLY_TOOLS
from lightning_agents.topology.graph import build_quotient, group_by_task
from lightning_agents.topology.pipeline import curate_rollouts
from lightning_agents.topology.records import CALL, OBSERVATION
from lightning_agents.topology.signatures import SignatureConfig

DATA = Path(__file__).resolve().parents[1] / "data" / "bfcl_results"
GLYPHH = DATA / "glyphh-ada-1.1_BFCL_v4_multi_turn_base_result.json"
TRUTH = [DATA / "BFCL_v4_multi_turn_base_possible_answer.json", DATA / "BFCL_v4_multi_turn_base.json"]
TURN_READS = Path(__file__).resolve().parents[1] / "data" / "bfcl_turn_reads"


def _trajectories(rollouts):
    return {(t.task_id, t.trial): t for a in curate_rollouts(rollouts).analyses for t in a.trajectories}


def test_every_call_is_answered_and_its_writes_count():
    rollouts = load_rollouts([GLYPHH], ground_truth=TRUTH)
    for r in rollouts:
        calls = [s for s in r.steps if s.kind == CALL]
        answers = [s for s in r.steps if s.kind == OBSERVATION]
        assert [s.name for s in answers] == [s.name for s in calls] and not any(s.error for s in answers)
        assert not any(m["role"] == "tool" for m in r.messages)  # no invented tool message for SFT
    got = _trajectories(rollouts)
    # multi_turn_base_113: add_to_watchlist is its one write (get_* and get_watchlist read).
    assert got[("multi_turn_base_113", 0)].writes == 1
    # multi_turn_base_0, turn by turn: cd, mkdir, mv, mv | cd (grep reads) | sort (reads: BFCL's
    # list) | cd, mv, cd (diff reads): 8 writes. BFCL's execution rejected the first mv (a path
    # as destination), which a file without outputs cannot show, so it counts (docs/topocurate.md).
    assert got[("multi_turn_base_0", 0)].writes == 8
    assert got[("multi_turn_base_0", 0)].steps == 24  # 12 calls, each answered


def test_pooled_with_a_run_that_logged_outputs_the_trials_share_the_states_they_reach(shared_data):
    claude = shared_data / "bfcl" / "claude_multi_turn_base_result.json"
    truth = [shared_data / "bfcl" / "BFCL_v4_multi_turn_base_possible_answer.json", *TRUTH[1:]]
    rollouts = load_rollouts([claude, GLYPHH], ground_truth=truth)
    trials = group_by_task(rollouts)["multi_turn_base_0"]
    assert [r.source.split("[")[0].split(":")[0] for r in trials] == [str(claude), str(GLYPHH)]
    paths = build_quotient(trials).graph["trials"]
    claude_path, glyphh_path = paths[0]["path"], paths[1]["path"]
    # Claude reads (pwd, ls) before cd(folder='document'), glyphh goes straight to it: once the
    # cd has run they are in one state (reads before a write are no state of their own). Before,
    # glyphh's cd never came back, so its next call was made "while the cd was pending" and the
    # two paths shared only the root.
    assert claude_path[6] == glyphh_path[2]
    assert set(claude_path) & set(glyphh_path) == {0, claude_path[6]}
    # They part at their next decision: Claude lists the folder (ls), glyphh makes the temp folder
    # (mkdir, in one reply with its first mv); after the first turn Claude's path goes on from the
    # states its file recorded and glyphh's from the states named by its writes, never shared.


def test_a_read_asked_for_again_in_a_later_turn_is_no_loop():
    # glyphh-ada-1.1 multi_turn_miss_param_139 (tests/data/bfcl_turn_reads, BFCL scores it valid):
    # turn 1 adds ZETA to the watchlist, turns 2 and 3 each ask for the watchlist and get_watchlist
    # is called each time. Without a state per turn the second read came back to the node of the
    # first: loops 1, efficiency 0.75 for a perfect trial.
    truth = [TURN_READS / "BFCL_v4_multi_turn_miss_param_possible_answer.json"]
    truth.append(TURN_READS / "BFCL_v4_multi_turn_miss_param.json")
    rollouts = load_rollouts([TURN_READS / "glyphh-ada-1.1_multi_turn_miss_param_139_result.json"], ground_truth=truth)
    (got,) = _trajectories(rollouts).values()
    assert (got.reward, got.loops, got.efficiency, got.writes) == (1.0, 0, 1.0, 1)
    # Each turn's last step names the state after it, with the turn (as inference_log states are)
    # and by the writes so far: turns 2 and 3 only read, so the three differ only in the turn.
    states = [s.state for s in rollouts[0].steps if s.state is not None]
    assert [s.split(":", 2)[:2] for s in states] == [["1", "calls"], ["2", "calls"], ["3", "calls"]]
    assert len({s.split(":", 1)[1] for s in states}) == 1


def test_bfcl_reads_are_told_by_bfcls_own_list(shared_data):
    # sort, compute_exchange_rate and contact_customer_support only read (BFCL_READ_ONLY_TOOLS,
    # the verifier's list); the name guess took them for writes, in the strategy of the trial.
    glyphh = _trajectories(load_rollouts([GLYPHH], ground_truth=TRUTH))
    assert glyphh[("multi_turn_base_180", 0)].writes == 5
    assert glyphh[("multi_turn_base_170", 0)].writes == 5
    claude_file = shared_data / "bfcl" / "claude_multi_turn_base_result.json"
    truth = [shared_data / "bfcl" / "BFCL_v4_multi_turn_base_possible_answer.json", *TRUTH[1:]]
    claude = [r for r in load_rollouts([claude_file], ground_truth=truth) if r.task_id == "multi_turn_base_0"]
    strategy = [call[2] for call in build_quotient(claude).graph["trials"][0]["strategy"]]
    assert strategy == ["cd", "mkdir", "mv", "cd", "cd", "mv", "cd"]  # its sort(final_report.pdf) reads
    # A list given in the settings still decides alone.
    given = build_quotient(claude, SignatureConfig(read_only_tools=frozenset({"pwd", "ls", "grep", "diff"})))
    assert "sort" in [call[2] for call in given.graph["trials"][0]["strategy"]]


def _turn_reads_variant(tmp_path, result):
    # glyphh-ada-1.1 multi_turn_miss_param_139 with its `result` (calls per turn) replaced.
    record = json.loads((TURN_READS / "glyphh-ada-1.1_multi_turn_miss_param_139_result.json").read_text())
    path = tmp_path / "variant_result.json"
    path.write_text(json.dumps({**record, "result": result}) + "\n")
    truth = [TURN_READS / "BFCL_v4_multi_turn_miss_param_possible_answer.json"]
    truth.append(TURN_READS / "BFCL_v4_multi_turn_miss_param.json")
    (got,) = _trajectories(load_rollouts([path], ground_truth=truth)).values()
    return got, record["result"]


def test_a_read_repeated_as_a_turns_last_step_is_a_loop(tmp_path):
    # The same real record with turn 2's get_watchlist() step made twice, as its last steps. The
    # turn's end state sat on the second read, which went straight to the state's node: loops 0,
    # efficiency 1.0, the same as the trial that read once.
    record = json.loads((TURN_READS / "glyphh-ada-1.1_multi_turn_miss_param_139_result.json").read_text())
    turns = record["result"]
    doubled, _ = _turn_reads_variant(tmp_path, [turns[0], turns[1] * 2, turns[2]])
    assert (doubled.reward, doubled.loops, doubled.writes) == (1.0, 1, 1)
    # Just as when a closing message follows the repeat (the state then sits on the message).
    closed, _ = _turn_reads_variant(tmp_path, [turns[0], turns[1] * 2 + ["Here is your watchlist."], turns[2]])
    assert closed.loops == 1
    assert doubled.efficiency == closed.efficiency == 9 / 11  # 8 steps of the shortest route, 11 taken
    # A turn that ends by reading the same thing twice in a row: one loop too.
    twice = [[{"get_watchlist": "{}"}], [{"get_watchlist": "{}"}]]
    ends_twice, _ = _turn_reads_variant(tmp_path, [turns[0] + twice, turns[1], turns[2]])
    assert ends_twice.loops == 1 and ends_twice.efficiency < 1.0


def test_a_read_list_given_in_the_settings_decides_at_turn_ends_too(tmp_path):
    # Two trials of the real record: trial 1 also calls get_stock_info(ZETA) in turn 1. By BFCL's
    # list it reads, so the trials are in one state after each turn. Told that get_stock_info
    # writes (a read list without it), they are in other states from turn 1 on; the turn-end
    # states were named by BFCL's list whatever the settings said, and still joined them.
    record = json.loads((TURN_READS / "glyphh-ada-1.1_multi_turn_miss_param_139_result.json").read_text())
    extra = [{"get_stock_info": '{"symbol": "ZETA"}'}]
    other = {**record, "valid": False, "result": [record["result"][0] + [extra], *record["result"][1:]]}
    path = tmp_path / "two_trials_result.json"
    path.write_text(json.dumps({**record, "valid": True}) + "\n" + json.dumps(other) + "\n")
    rollouts = list(load_rollouts([path]))

    def turn_ends(config):
        trials = build_quotient(rollouts, config).graph["trials"]
        # Every step of these trials has a signature: step i enters path[i + 1].
        return [{trials[r.trial]["path"][i + 1] for i, s in enumerate(r.steps) if s.state} for r in rollouts]

    by_bfcl = turn_ends(SignatureConfig())
    assert len(by_bfcl[0]) == 3 and by_bfcl[0] == by_bfcl[1]
    told = turn_ends(SignatureConfig(read_only_tools=frozenset(BFCL_READ_ONLY_TOOLS - {"get_stock_info"})))
    assert len(told[0]) == 3 and not told[0] & told[1]
