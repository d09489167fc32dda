"""The BFCL reader and the reward check on real BFCL result files (tests/data/bfcl_results/README.md)."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

from lightning_agents.datamodules.trajectories import load_rollouts
from lightning_agents.topology.reward_check import reward_check

DATA = Path(__file__).resolve().parents[1] / "data" / "bfcl_results"
BASE = DATA / "glyphh-ada-1.1_BFCL_v4_multi_turn_base_result.json"
TRUTH = [str(DATA / "BFCL_v4_multi_turn_base.json"), str(DATA / "BFCL_v4_multi_turn_base_possible_answer.json")]
# What BFCL's runner writes for a test case whose inference raised (bfcl_eval/_llm_response_generation.py).
FAILED = {
    "result": "Error during inference: Request timed out.",
    "traceback": "Traceback (most recent call last):\n  ...",
}


def test_failed_inference_is_a_trial_never_played(tmp_path):
    lines = BASE.read_text().splitlines()
    path = tmp_path / BASE.name
    path.write_text("\n".join([lines[0], json.dumps({"id": "multi_turn_base_999", **FAILED}), *lines[1:]]) + "\n")
    loaded = load_rollouts([str(path)], ground_truth=TRUTH)
    assert len(loaded) == len(lines) and len(loaded.not_run) == 1 and not loaded.skipped
    assert "Error during inference: Request timed out." in loaded.not_run[0]


def test_failed_inference_first_in_its_file(tmp_path):
    # Format detection reads the first record: a failed inference there was "cannot tell the format".
    path = tmp_path / BASE.name
    path.write_text(json.dumps({"id": "multi_turn_base_999", **FAILED}) + "\n" + BASE.read_text())
    loaded = load_rollouts([str(path)], ground_truth=TRUTH)
    assert len(loaded.not_run) == 1 and not loaded.skipped


def test_question_file_without_func_docs_warns_once(tmp_path, caplog):
    shutil.copy(DATA / "BFCL_v4_multi_turn_base.json", tmp_path)
    shutil.copy(DATA / "BFCL_v4_multi_turn_base_possible_answer.json", tmp_path)
    with caplog.at_level(logging.WARNING):
        load_rollouts(
            [str(BASE)],
            ground_truth=[
                str(tmp_path / p)
                for p in ("BFCL_v4_multi_turn_base.json", "BFCL_v4_multi_turn_base_possible_answer.json")
            ],
            skip_invalid=True,
        )
    warned = [r.getMessage() for r in caplog.records if "multi_turn_func_doc" in r.getMessage()]
    assert len(warned) == 1 and str(tmp_path / "multi_turn_func_doc") in warned[0]


def test_rejected_calls_marked_from_the_inference_log(shared_data):
    # The real Claude record, with the result of its first call replaced by BFCL's error answer.
    source = shared_data / "bfcl" / "claude_multi_turn_base_result.json"
    record = json.loads(source.read_text().splitlines()[0])
    for entry in record["inference_log"]:
        tool = next(
            (
                i
                for k, v in (entry.items() if isinstance(entry, dict) else ())
                if k.startswith("step_")
                for i in v
                if i["role"] == "tool"
            ),
            None,
        )
        if tool is not None:
            tool["content"] = json.dumps({"error": "cd: nowhere: No such directory"})
            break
    truth = [
        str(shared_data / "bfcl" / f)
        for f in ("BFCL_v4_multi_turn_base.json", "BFCL_v4_multi_turn_base_possible_answer.json")
    ]
    from lightning_agents.datamodules.bfcl_rollouts import load_ground_truth, parse_bfcl

    rollout = parse_bfcl(record, "x", 0, load_ground_truth(truth)[record["id"]])
    first = rollout.info["turn_calls"][0][0]
    assert len(first) == 3 and first[2] is False
    assert sum(len(c) == 3 for turn in rollout.info["turn_calls"] for c in turn) == 1


def test_reward_check_covers_bfcl_file_rewards(tmp_path):
    # BFCL's verdicts (score files @55e023f) written into the records as `valid`, as a file with its scores has them.
    valid = {f"multi_turn_base_{n}": True for n in (0, 113, 143, 159, 170, 180)}
    path = tmp_path / BASE.name
    path.write_text(
        "".join(
            json.dumps({**json.loads(x), "valid": valid[json.loads(x)["id"]]}) + "\n"
            for x in BASE.read_text().splitlines()
        )
    )
    rollouts = load_rollouts([str(path)], ground_truth=TRUTH)
    check = reward_check(rollouts, 1.0)
    # base_0 passes BFCL only because two of its calls failed there, which `result` does not say.
    assert (check["checked"], check["agree"], check["file_only"], check["verifier_only"]) == (6, 5, 1, 0)
    # Trials the reader scored from the possible answer are the verifier's own scores: not checked.
    assert reward_check(load_rollouts([str(BASE)], ground_truth=TRUTH), 1.0)["checked"] == 0


def test_curate_warns_that_result_only_files_give_calls_without_their_results(shared_data, tmp_path, caplog):
    # A result file without inference_log records each turn's calls, not their outputs: its SFT
    # conversations put one call after another with no tool result between them.
    from lightning_agents.commands.curate import CurateCommand

    class _Tool(CurateCommand):
        pass

    with caplog.at_level(logging.WARNING):
        _Tool().curate(rollouts=[str(BASE)], ground_truth=TRUTH, output=str(tmp_path / "r"))
    sft = [json.loads(line) for line in (tmp_path / "r" / "sft.jsonl").read_text().splitlines()]
    assert sft and f"{len(sft)} of {len(sft)} SFT conversation(s) make tool calls whose results" in caplog.text
    caplog.clear()
    bfcl = shared_data / "bfcl"
    with caplog.at_level(logging.WARNING):
        _Tool().curate(
            rollouts=[str(bfcl / "claude_multi_turn_base_result.json")],
            ground_truth=[str(bfcl / "BFCL_v4_multi_turn_base_possible_answer.json")],
            output=str(tmp_path / "c"),
        )
    assert "whose results" not in caplog.text  # inference_log records every output


def test_an_inference_log_turn_that_ends_repeating_a_read_counts_the_loop(shared_data, tmp_path):
    # The shared Claude record multi_turn_base_0, turn 2: cd(temp), grep(budget analysis), then its
    # closing text. Here the turn ends on the grep made again (as a turn BFCL cut at its step limit
    # ends on a call): the state_info logged after the turn sat on that repeat, which went straight
    # to the state's node, and the loop was not counted.
    from lightning_agents.topology.graph import build_quotient
    from lightning_agents.topology.metrics import loop_count

    claude = shared_data / "bfcl" / "claude_multi_turn_base_result.json"
    record = json.loads(claude.read_text().splitlines()[0])
    turns = [i for i, entry in enumerate(record["inference_log"]) if isinstance(entry, dict)]
    turn = record["inference_log"][turns[1]]
    assert [item["content"] for item in turn["step_1"] if item["role"] == "assistant"] == [
        [{"grep": '{"file_name": "final_report.pdf", "pattern": "budget analysis"}'}]
    ]
    turn["step_2"] = turn["step_1"]  # the closing text's step replaced by the grep again
    path = tmp_path / "claude_result.json"
    path.write_text(json.dumps(record) + "\n")
    truth = [shared_data / "bfcl" / "BFCL_v4_multi_turn_base_possible_answer.json", TRUTH[0]]
    (as_logged,) = [r for r in load_rollouts([claude], ground_truth=truth) if r.task_id == "multi_turn_base_0"]
    (repeated,) = load_rollouts([path], ground_truth=truth)
    assert loop_count(build_quotient([as_logged]), 0) == 0
    assert loop_count(build_quotient([repeated]), 0) == 1
