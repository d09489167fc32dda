"""BFCL records scored by the execution verifier: the reader's reference carries the task's environment,
``bfcl_verifier`` chooses the verifier, and ``curate``'s reward check and RL records
use the chosen one, against BFCL's own verdicts on real result files (tests/data/bfcl_results/README.md,
../shared/data/bfcl)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
from bfcl_glyphh import BFCL_VALID, DATA, glyphh_rollouts

from lightning_agents.datamodules.bfcl_rollouts import (
    BFCL_EXECUTION_VERIFIER,
    BFCL_VERIFIER,
)
from lightning_agents.datamodules.trajectories import RolloutFormatError, load_rollouts
from lightning_agents.tasks.bfcl_execution import shared_verifier

needs_bfcl = pytest.mark.skipif(
    importlib.util.find_spec("bfcl_eval") is None,
    reason="bfcl-eval is not installed (optional: pip install --no-deps bfcl-eval)",
)
CATEGORIES = ("base", "miss_param")


def _truth(category: str, folder: Path = DATA) -> list[str]:
    return [
        str(folder / f"BFCL_v4_multi_turn_{category}.json"),
        str(folder / f"BFCL_v4_multi_turn_{category}_possible_answer.json"),
    ]


def _result(category: str) -> Path:
    return DATA / f"glyphh-ada-1.1_BFCL_v4_multi_turn_{category}_result.json"


def _questions(category: str) -> dict[str, dict]:
    lines = Path(_truth(category)[0]).read_text().splitlines()
    return {q["id"]: q for q in map(json.loads, filter(str.strip, lines))}


def test_reference_carries_the_task_environment():
    # RL training scores a record from its reference alone: the initial state must be in it.
    for category in CATEGORIES:
        questions = _questions(category)
        for rollout in load_rollouts([str(_result(category))], ground_truth=_truth(category)):
            environment = json.loads(rollout.info["reference"])["environment"]
            question = questions[rollout.task_id]
            assert environment["initial_config"] == question["initial_config"]
            assert environment["involved_classes"] == question["involved_classes"]
            assert environment["category"] == f"multi_turn_{category}"
            assert rollout.info["verifier"] == BFCL_VERIFIER  # call match stays the default


@needs_bfcl
def test_setting_chooses_the_verifier_and_execution_gives_bfcl_verdicts():
    rollouts = glyphh_rollouts("execution")
    assert {r.info["verifier"] for r in rollouts.values()} == {BFCL_EXECUTION_VERIFIER}
    assert {task: r.reward == 1.0 for task, r in rollouts.items()} == BFCL_VALID  # 9 of 9
    rollouts = glyphh_rollouts()
    assert {r.info["verifier"] for r in rollouts.values()} == {BFCL_VERIFIER}
    # The calls alone cannot tell that two of base_0's calls failed in BFCL and changed nothing.
    assert rollouts["multi_turn_base_0"].reward == 0.0


def test_unknown_setting_is_named():
    with pytest.raises(ValueError, match="bfcl_verifier='exec': expected one of call_match, execution"):
        load_rollouts([str(_result("base"))], ground_truth=_truth("base"), bfcl_verifier="exec")


def test_execution_without_bfcl_eval_names_the_install_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "bfcl_eval", None)  # `import bfcl_eval` now fails, as when not installed
    shared_verifier.cache_clear()
    try:
        with pytest.raises(ImportError, match=r"pip install --no-deps bfcl-eval"):
            load_rollouts([str(_result("base"))], ground_truth=_truth("base"), bfcl_verifier="execution")
    finally:
        shared_verifier.cache_clear()


@needs_bfcl
def test_missing_environment_names_the_result_file_and_line():
    # The possible answers alone carry no initial state: execution cannot score, and says which file to add.
    result = _result("base")
    with pytest.raises(RolloutFormatError) as caught:
        load_rollouts([str(result)], ground_truth=_truth("base")[1:], bfcl_verifier="execution")
    message = str(caught.value)
    assert f"{result}:1:" in message and "multi_turn_base_0" in message
    assert "question file" in message and "bfcl_verifier=call_match" in message


def _tampered_questions(tmp_path: Path, change) -> list[str]:
    """The base question file with ``change(question)`` applied to its second line, and its possible answers."""
    lines = Path(_truth("base")[0]).read_text().splitlines()
    question = json.loads(lines[1])
    change(question)
    lines[1] = json.dumps(question)
    path = tmp_path / "BFCL_v4_multi_turn_base.json"
    path.write_text("\n".join(lines) + "\n")
    (tmp_path / "multi_turn_func_doc").symlink_to(DATA / "multi_turn_func_doc")
    return [str(path), _truth("base")[1]]


def test_tampered_initial_config_names_the_question_file_and_line(tmp_path):
    truth = _tampered_questions(tmp_path, lambda q: q.update(initial_config={"GorillaFileSystem": "root"}))
    with pytest.raises(RolloutFormatError, match=rf"^{truth[0]}:2: 'initial_config' must be an object"):
        load_rollouts([str(_result("base"))], ground_truth=truth)


@needs_bfcl
def test_tampered_involved_classes_name_the_result_file_and_line(tmp_path):
    # A class BFCL has none of passes the shape check; the execution verifier refuses the record, not the reward.
    truth = _tampered_questions(tmp_path, lambda q: q.update(involved_classes=[*q["involved_classes"], "ShellAPI"]))
    task = json.loads(Path(truth[0]).read_text().splitlines()[1])["id"]
    result = _result("base")
    line = next(n for n, x in enumerate(result.read_text().splitlines(), 1) if json.loads(x)["id"] == task)
    with pytest.raises(RolloutFormatError, match=rf"^{result}:{line}: task '{task}'.*\['ShellAPI'\]"):
        load_rollouts([str(result)], ground_truth=truth, bfcl_verifier="execution")


def _with_bfcl_verdicts(tmp_path: Path) -> list[str]:
    """The committed result files with BFCL's verdicts written in as ``valid``, as a file with its scores has them."""
    paths = []
    for category in CATEGORIES:
        path = tmp_path / _result(category).name
        records = [json.loads(x) for x in _result(category).read_text().splitlines() if x.strip()]
        path.write_text("".join(json.dumps({**r, "valid": BFCL_VALID[r["id"]]}) + "\n" for r in records))
        paths.append(str(path))
    return paths


@needs_bfcl
def test_curate_reward_check_and_rl_records_use_the_execution_verifier(tmp_path):
    from lightning_agents.commands.curate import CurateCommand
    from lightning_agents.rewards.registry import RewardScorer
    from lightning_agents.topology.runs import curate_files
    from lightning_agents.topology.selection import SelectionConfig

    truth = [path for category in CATEGORIES for path in _truth(category)]
    CurateCommand().curate(
        rollouts=_with_bfcl_verdicts(tmp_path),
        ground_truth=truth,
        output=str(tmp_path / "out"),
        bfcl_verifier="execution",
    )
    check = json.loads((tmp_path / "out" / "report" / "summary.json").read_text())["reward_check"]
    # The call-match verifier agrees on 8 of these 9 (base_0, see above).
    assert (check["checked"], check["agree"]) == (9, 9)

    # Every task's RL record (the curated file of single trials selects none for RL) names the execution
    # verifier, and RL training's scorer, given the record's verifier and reference, gives BFCL's verdict.
    results = [str(_result(category)) for category in CATEGORIES]
    curated, rollouts = curate_files(results, SelectionConfig(), {"ground_truth": truth, "bfcl_verifier": "execution"})
    scorer = RewardScorer(max_workers=1)
    for rollout in rollouts:
        record = curated.rl_candidate(rollout.task_id)
        assert record["verifier"] == BFCL_EXECUTION_VERIFIER
        scored = scorer.score([json.dumps(rollout.messages)], [record["reference"]], [record["verifier"]])
        assert scored.rewards == [float(BFCL_VALID[rollout.task_id])], rollout.task_id


@needs_bfcl
def test_shared_claude_file_with_execution(shared_data, tmp_path):
    # BFCL passes both (eval_claude_small/.../BFCL_v4_multi_turn_base_score.json, gorilla PR 1205).
    from lightning_agents.rewards.registry import RewardScorer
    from lightning_agents.topology.runs import curate_files
    from lightning_agents.topology.selection import SelectionConfig

    bfcl = shared_data / "bfcl"
    results = [str(bfcl / "claude_multi_turn_base_result.json")]
    inputs = {"ground_truth": _truth("base", bfcl), "bfcl_verifier": "execution"}
    curated, rollouts = curate_files(results, SelectionConfig(), inputs)
    assert [r.reward for r in rollouts] == [1.0, 1.0]
    scorer = RewardScorer(max_workers=1)
    for rollout in rollouts:
        record = curated.rl_candidate(rollout.task_id)
        assert record["verifier"] == BFCL_EXECUTION_VERIFIER
        assert scorer.score([json.dumps(rollout.messages)], [record["reference"]], [record["verifier"]]).rewards == [
            1.0
        ]
    # The documented command passes the possible answers only: no initial state, so execution refuses.
    with pytest.raises(RolloutFormatError, match=r"claude_multi_turn_base_result\.json:1: .*question file"):
        load_rollouts(results, ground_truth=_truth("base", bfcl)[1:], bfcl_verifier="execution")


@needs_bfcl
def test_the_curation_cache_follows_the_bfcl_verifier(tmp_path):
    # A curation cached under call match was served under execution (5 successes instead of 6).
    from lightning_agents.datamodules.topocurate import TopoCurateDataModule

    def curate(bfcl_verifier):
        module = TopoCurateDataModule(
            rollouts=[str(_result("base"))],
            ground_truth=_truth("base"),
            cache_dir=str(tmp_path),
            bfcl_verifier=bfcl_verifier,
        )
        return module.curate()["sft"], module.cache_hit

    # base_0 is a success by execution only (BFCL passes it), so execution picks one more trial for SFT
    (call_match, hit), (execution, hit_execution) = curate("call_match"), curate("execution")
    assert (len(call_match), hit, len(execution), hit_execution) == (5, False, 6, False)
    assert curate("execution") == (execution, True)


@needs_bfcl
def test_an_rl_record_whose_environment_was_edited_stops_the_load_at_its_line(tmp_path):
    # Loaded, it scored nan at every training step; now the prompt reader names the file and line.
    from lightning_agents.datamodules.chat import DataFormatError
    from lightning_agents.datamodules.prompts import read_prompt_records
    from lightning_agents.topology.runs import curate_files
    from lightning_agents.topology.selection import SelectionConfig

    inputs = {"ground_truth": _truth("base"), "bfcl_verifier": "execution"}
    curated, rollouts = curate_files([str(_result("base"))], SelectionConfig(), inputs)
    records = [curated.rl_candidate(rollout.task_id) for rollout in rollouts][:3]
    path = tmp_path / "rl_tasks.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    assert len(read_prompt_records(str(path))) == 3
    reference = json.loads(records[1]["reference"])
    del reference["environment"]
    records[1] = {**records[1], "reference": json.dumps(reference)}
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    with pytest.raises(DataFormatError, match=rf"^{path}:2: its reference cannot be scored by .*BFCLExecutionVerifier"):
        read_prompt_records(str(path))
