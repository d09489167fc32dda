"""RSTG on the RL records ``lightning-agents curate`` writes for tau-bench, tau2 and BFCL.

Their verifiers score a whole agent episode (tool calls with their results, across the user's
turns), and the records name no task with tools, so RSTG sampled one text per prompt, without the
tools, tool results or a user, and the verifier could score none of them. On the real tau-bench
airline file every one of 16 sampled completions got a NaN reward in two steps
(``train/unverified_frac`` 1, ``train/verifier_errors`` 8 a step, loss 0, ``train/reward_mean``
logged as 0), as did the ground truth's own calls written as one assistant turn. The module now
refuses such records at setup, naming the file and the record.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from one_step import one_step_trainer

from lightning_agents.commands.curate import CurateCommand
from lightning_agents.datamodules.prompts import PromptDataModule, read_prompt_records
from lightning_agents.datamodules.trajectories import load_rollouts
from lightning_agents.modules.rstg import RSTGModule, RSTGSettingError, episode_verifier
from lightning_agents.tasks.tau_actions import TauActionVerifier
from lightning_agents.topology import SelectionConfig
from lightning_agents.topology.pipeline import rl_prompt_record

DATA = Path(__file__).resolve().parents[1] / "data"
BFCL = DATA / "bfcl_results"
TAU = "lightning_agents.tasks.tau_actions.TauActionVerifier"
BFCL_ACTIONS = "lightning_agents.tasks.tau_actions.BFCLActionVerifier"


class _Curate(CurateCommand):
    """The curate command's mixin alone."""


def _module(tmp_path) -> RSTGModule:
    return RSTGModule(
        model="embedded:student",
        guidance=False,
        teacher=None,
        num_generations=2,
        max_new_tokens=4,
        micro_batch_size=4,
        teacher_cache=str(tmp_path / "cache.jsonl"),
        log_samples_every_n_steps=0,
    )


def _fit(module: RSTGModule, data: PromptDataModule, tmp_path: Path) -> None:
    one_step_trainer(tmp_path).fit(module, datamodule=data)


def _write(records: list[dict], path: Path) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def _tau2_records() -> list[dict]:
    # rl_prompt_record is what curate writes each RL line with; these real runs hold one trial per
    # task, which curate's RL selection (pass rate strictly between 0 and 1) would leave out.
    rollouts = load_rollouts([str(DATA / "tau2_runs" / "sierra-gpt-4.1-retail.json")])
    return [rl_prompt_record(r) for r in rollouts]


def _bfcl_records() -> list[dict]:
    rollouts = load_rollouts(
        [str(BFCL / "glyphh-ada-1.1_BFCL_v4_multi_turn_base_result.json")],
        ground_truth=[
            str(BFCL / "BFCL_v4_multi_turn_base.json"),
            str(BFCL / "BFCL_v4_multi_turn_base_possible_answer.json"),
        ],
    )
    return [rl_prompt_record(r) for r in rollouts]


def test_curated_tau_bench_records_are_refused_at_setup(shared_data, tmp_path):
    out = tmp_path / "curated"
    _Curate().curate(
        rollouts=[str(shared_data / "tau_bench" / "gpt-4o-airline.json")],
        output=str(out),
        selection=SelectionConfig(rl_top_n=2),
        draw_tasks=0,
    )
    path = out / "rl_tasks.jsonl"
    records = read_prompt_records(str(path))
    assert {r["verifier"] for r in records} == {TAU} and all(r.get("task") is None for r in records)
    # What the policy would have been asked to write: the ground truth's calls as one assistant turn,
    # in the student's tool-call format. The verifier cannot read it, so no policy could be rewarded.
    calls = json.loads(records[0]["reference"])["actions"]
    one_turn = "".join(
        f'<tool_call>{{"name": "{a["name"]}", "arguments": {json.dumps(a["kwargs"])}}}</tool_call>' for a in calls
    )
    with pytest.raises(ValueError, match="not valid JSON"):
        TauActionVerifier()(one_turn, records[0]["reference"])

    module = _module(tmp_path)
    with pytest.raises(RSTGSettingError, match=rf"data\.train \({path}\), record 1 .*TauActionVerifier") as err:
        _fit(module, PromptDataModule(train=str(path), val=None, batch_size=1), tmp_path)
    assert "sft.jsonl" in str(err.value)
    assert module.model is None  # refused before any model was loaded


def test_topocurate_rl_mode_on_tau_bench_is_refused_at_setup(shared_data, tmp_path):
    from lightning_agents.datamodules.topocurate import TopoCurateDataModule

    tau_file = str(shared_data / "tau_bench" / "gpt-4o-airline.json")
    data = TopoCurateDataModule(rollouts=tau_file, mode="rl", selection={"rl_top_n": 2}, cache_dir=None)
    with pytest.raises(RSTGSettingError, match=r"TopoCurate RL records of .*gpt-4o-airline\.json.*, record 1 "):
        _fit(_module(tmp_path), data, tmp_path)


@pytest.mark.parametrize(("records", "verifier"), [(_tau2_records, TAU), (_bfcl_records, BFCL_ACTIONS)])
def test_curated_tau2_and_bfcl_records_are_refused_at_setup(records, verifier, tmp_path):
    path = _write(records(), tmp_path / "rl_tasks.jsonl")
    with pytest.raises(RSTGSettingError, match=rf"\({path}\), record 1 .*{verifier}"):
        _fit(_module(tmp_path), PromptDataModule(train=str(path), val=None, batch_size=1), tmp_path)


def test_a_batch_from_any_datamodule_is_refused_before_sampling(tmp_path):
    # Batches that do not come through a PromptDataModule's setup (another datamodule, the teacher
    # cache command) meet the same check before anything is generated.
    module = _module(tmp_path)
    with pytest.raises(RSTGSettingError, match="a batch of prompt records, record 1 .*BFCLActionVerifier"):
        module._sample(None, _bfcl_records()[:2], 2, module.sampling)


def test_the_refusal_keys_on_the_verifier_not_the_benchmark(tmp_path):
    module = _module(tmp_path)
    forced = [dict(r, verifier="lightning_agents.rewards.ArithmeticVerifier") for r in _tau2_records()]
    module.check_one_shot_records(forced, "forced")  # a verifier of one completion: allowed

    class Stricter(TauActionVerifier):
        pass

    assert episode_verifier(TAU) == TAU
    assert episode_verifier({"class_path": BFCL_ACTIONS, "init_args": {}}) == BFCL_ACTIONS
    assert episode_verifier(Stricter()).endswith("Stricter")
    assert episode_verifier("lightning_agents.tasks.bfcl_execution.BFCLExecutionVerifier")
    assert episode_verifier("ArithmeticVerifier") is None
    assert episode_verifier("no.such.Verifier") is None
