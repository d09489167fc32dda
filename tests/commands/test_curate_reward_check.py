"""curate says how far the files' rewards agree with the verifier its RL records name, in every
path (one process, shards merged), and warns when they disagree often."""

import json
import logging
from pathlib import Path

import pytest

from lightning_agents.commands.curate import CurateCommand

RETAIL = str(Path(__file__).resolve().parents[1] / "data" / "tau_bench_other" / "retail-gpt-4o-records.json")
LOGGER = "lightning_agents.commands.curate"


class _Tool(CurateCommand):
    """The mixin alone, as the trainer would carry it."""


def _check(out: Path) -> dict:
    return json.loads((out / "report" / "summary.json").read_text())["reward_check"]


def test_real_airline_rewards_agree_with_the_verifier_and_the_run_says_so(shared_data, tmp_path, capsys, caplog):
    # 198 of 200: the figure docs/topocurate.md gives for the action match against tau-bench's replay
    # (197 before flights passed with their origin and destination matched the ground truth's)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        _Tool().curate(rollouts=[str(shared_data / "tau_bench" / "gpt-4o-airline.json")], output=str(tmp_path / "o"))
    check = _check(tmp_path / "o")
    assert (check["checked"], check["agree"], check["file_only"], check["verifier_only"]) == (200, 198, 0, 2)
    assert "agrees with the files' rewards on 198 of 200 trials" in capsys.readouterr().out
    assert "reward check" not in caplog.text


def test_a_file_whose_rewards_the_verifier_disputes_is_warned_about_in_one_run_and_in_shards(tmp_path, caplog):
    # retail task 13: the file credits a ground truth whose PayPal return tau-bench rejected
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        _Tool().curate(rollouts=[RETAIL], skip_invalid=True, output=str(tmp_path / "one"))
    assert "agrees with the files' rewards on 2 of 3 trials" in caplog.text and "task 13 trial 13" in caplog.text
    shards = []
    for index in range(2):
        written = _Tool().curate(
            rollouts=[RETAIL], skip_invalid=True, output=str(tmp_path / "s"), num_shards=2, shard_index=index
        )
        shards.append(written["shard"])
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        _Tool().curate(merge=shards, output=str(tmp_path / "merged"))
    assert _check(tmp_path / "merged") == _check(tmp_path / "one")
    assert "2 of 3 trials" in caplog.text


@pytest.mark.parametrize("reward", [0.0, 1.0])
def test_the_check_counts_each_side(tmp_path, reward):
    from lightning_agents.datamodules.trajectories import load_rollouts
    from lightning_agents.topology.reward_check import reward_check

    rollouts = load_rollouts(RETAIL, skip_invalid=True)
    for r in rollouts:
        r.reward = reward
    check = reward_check(rollouts, 0.5)
    # tasks 47 and 50 (the verifier: 0 and 1) and 13 (verifier 0)
    assert check["checked"] == 3 and check["agree"] == (2 if reward == 0 else 1)
    assert (check["file_only"], check["verifier_only"]) == ((0, 1) if reward == 0 else (2, 0))


def test_a_large_input_is_checked_on_an_even_sample(shared_data):
    from lightning_agents.datamodules.trajectories import load_rollouts
    from lightning_agents.topology.reward_check import reward_check

    rollouts = load_rollouts(str(shared_data / "tau_bench" / "gpt-4o-airline.json"))
    check = reward_check(rollouts, 0.5, max_trials=50)
    assert check["checked"] == 50 and check["agree"] >= 47


@pytest.mark.parametrize(
    "spec",
    [
        {"class_path": "lightning_agents.tasks.tau_actions.TauActionVerifier"},
        {"class_path": "lightning_agents.tasks.tau_actions.TauActionVerifier", "init_args": {}},
    ],
    ids=["class_path_only", "empty_init_args"],
)
def test_the_reward_check_still_checks_an_action_match_verifier_given_as_a_mapping(spec):
    # Review of 32ca778, LOW-1: resolve_verifier (what RSTG builds the record's verifier with) reads {class_path[, init_args]}
    # as the class path itself; b417076 skipped every non-string verifier, so such a tau file's
    # reward check silently checks 0 trials where the string form checks 3.
    from lightning_agents.datamodules.trajectories import load_rollouts
    from lightning_agents.topology.reward_check import reward_check

    plain = reward_check(load_rollouts(str(RETAIL), skip_invalid=True), 0.5)
    rollouts = load_rollouts(str(RETAIL), skip_invalid=True)
    for r in rollouts:
        r.info["verifier"] = dict(spec)
    assert plain["checked"] == 3
    assert reward_check(rollouts, 0.5) == plain
