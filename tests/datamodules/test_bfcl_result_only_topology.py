"""A BFCL result file without inference_log: each call BFCL ran is answered in the topology.

The file logs the model's calls per step but not their outputs (glyphh-ada-1.1's results,
tests/data/bfcl_results). Before, each call stayed pending in the quotient graph forever: no call
was ever a write, so every trial had 0 writes and an empty strategy, and a trial pooled with one
that logged its outputs (the shared Claude file) parted from it at every state-changing call.
"""

from pathlib import Path

from lightning_agents.datamodules.trajectories import load_rollouts
from lightning_agents.topology.graph import build_quotient, group_by_task
from lightning_agents.topology.pipeline import curate_rollouts
from lightning_agents.topology.records import CALL, OBSERVATION

DATA = Path(__file__).resolve().parents[1] / "data" / "bfcl_results"
GLYPHH = DATA / "glyphh-ada-1.1_BFCL_v4_multi_turn_base_result.json"
TRUTH = [DATA / "BFCL_v4_multi_turn_base_possible_answer.json", DATA / "BFCL_v4_multi_turn_base.json"]


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
    # multi_turn_base_0: cd, mkdir, mv, mv | cd | (sort reads) | cd, mv, cd: 8 changes of state,
    # the last two cds one after the other apart from the mv (no write repeated at once).
    assert got[("multi_turn_base_0", 0)].writes == 9
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
    # They part at their next decision: glyphh moves the report to 'temp/final_report.pdf', Claude
    # lists the folder first; the turns' recorded states then keep Claude's path apart.
