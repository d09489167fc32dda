"""Faults of real rollout files that curation must survive without picking wrong data.

Found by checking TopoCurate against an independent reference on the real tau-bench airline file
(session 36, /work/h36/topo/): a trial the agent never acted in, and agent questions written in
scripts whose question mark is not ``?``.
"""

from __future__ import annotations

import copy
import json

import pytest

from lightning_agents.datamodules.trajectories import load_rollouts
from lightning_agents.topology import abstract_text, analyze_task, build_quotient_graph, curate_rollouts
from lightning_agents.topology.selection import outcome_filter, size_matched_baselines


def _no_agent_step_task(rollout):
    # Trial 1 is a success whose record ends before the agent's first step (a run cut short, or
    # a task the ground truth lets pass untouched): only the user's message is left.
    return [
        rollout("t", 0, 1.0, ["u:hi", "c:get_a", "o:1", 'c:book{"x": 1}', "o:ok", "a:Booked."]),
        rollout("t", 1, 1.0, ["u:hi"]),
        rollout("t", 2, 0.0, ["u:hi", "c:get_a", "o:1", "a:Sorry, I cannot."]),
    ]


def test_success_without_agent_step_is_no_sft_pick(rollout):
    result = curate_rollouts(_no_agent_step_task(rollout))
    # SFT on a conversation without an assistant message teaches nothing, and its budget slot
    # went to it ahead of a real success.
    assert result.sft == [("t", 0)]
    sft, _ = outcome_filter(result.analyses)
    assert ("t", 1) not in sft
    baselines = size_matched_baselines(result.analyses, result.sft, result.rl)
    for name, picks in baselines["sft"].items():
        assert ("t", 1) not in picks, name


def test_success_without_agent_step_leaves_efficiency_alone(rollout):
    # Its path is the root alone: counted as the shortest success it gave every real success
    # efficiency 0.0 (0 steps over its length), so the SFT rank lost its efficiency term.
    _, trajectories = analyze_task(build_quotient_graph(_no_agent_step_task(rollout)))
    by_trial = {t.trial: t for t in trajectories}
    assert by_trial[0].efficiency == 1.0
    assert by_trial[1].efficiency is None


def test_real_trial_cut_before_the_agent_replied(shared_data, tmp_path):
    records = [r for r in json.loads((shared_data / "tau_bench/gpt-4o-airline.json").read_text()) if r["task_id"] == 20]
    cut = copy.deepcopy(records)
    cut[0]["traj"] = cut[0]["traj"][:2]  # system policy + the user's first message; reward stays 1
    assert cut[0]["reward"] == 1.0 and all(m["role"] != "assistant" for m in cut[0]["traj"])
    (tmp_path / "cut.json").write_text(json.dumps(cut))
    (tmp_path / "without.json").write_text(json.dumps(records[1:]))
    result = curate_rollouts(load_rollouts([str(tmp_path / "cut.json")]))
    without = curate_rollouts(load_rollouts([str(tmp_path / "without.json")]))
    assert ("20", 0) not in result.sft and len(result.sft) == 2
    for row in result.sft_conversations():
        assert any(m["role"] == "assistant" for m in row["messages"])
    # The other successes' efficiency is what it is without the cut trial (it was 0.0 for each).
    efficiency = {t.trial: t.efficiency for t in result.analyses[0].trajectories if t.trial}
    assert efficiency == {t.trial: t.efficiency for t in without.analyses[0].trajectories}
    assert all(e > 0 for e in efficiency.values())


@pytest.mark.parametrize(
    "text",
    [
        "请问您的用户ID是什么？",  # full-width question mark (Chinese, Japanese)
        "ご予約番号を教えていただけますか？",
        "هل يمكنك تأكيد رقم الحجز؟",  # Arabic question mark
    ],
)
def test_non_ascii_questions_are_questions(text):
    # A question is a question whatever its opening, also in scripts without '?': otherwise the
    # same request in two trials splits by wording into statement/question nodes.
    assert abstract_text("assistant", text) == "question"
