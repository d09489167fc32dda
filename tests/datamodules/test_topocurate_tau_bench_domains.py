"""TopoCurateDataModule on pooled tau-bench airline and retail runs (their files name no domain).

Real inputs: the shared GPT-4o airline run (``../shared/data/tau_bench``) and the GPT-4o retail
records in ``tests/data/tau_bench_other/``; both have tasks 13 and 47. ``retail-all-errored-run.json``
there is a real retail run file whose only trial raised, so nothing in it names a domain.
"""

from pathlib import Path

from lightning_agents.datamodules.topocurate import CACHE_VERSION, TopoCurateDataModule

RETAIL = Path(__file__).resolve().parents[1] / "data" / "tau_bench_other" / "retail-gpt-4o-records.json"
ERRORED = RETAIL.parent / "retail-all-errored-run.json"


def test_the_pooled_selection_names_each_task_by_its_domain(shared_data, tmp_path):
    # Airline's task 13 and retail's were one task in the selection (and in a cache written then,
    # which the bumped CACHE_VERSION keeps from being served).
    airline = shared_data / "tau_bench" / "gpt-4o-airline.json"
    dm = TopoCurateDataModule(rollouts=[str(airline), str(RETAIL)], mode="rl", cache_dir=str(tmp_path / "cache"))
    curated = dm.curate()
    assert curated["summary"]["input"]["tasks"] == 53
    assert curated["selection"]["rl"] and all(t.startswith("airline/") for t in curated["selection"]["rl"])
    assert {r["environment"]["domain"] for r in curated["rl"]} == {"airline"}
    assert {c["task_id"].split("/")[0] for c in curated["sft"]} == {"airline", "retail"}


def test_a_run_whose_trials_all_raised_leaves_the_selection_as_it_was(tmp_path):
    # It counted as a domain of its own: every retail id became retail/<id>, so a checkpoint's
    # selection (and the RL order) changed by adding a file that holds no trajectory.
    def curate(files, name):
        dm = TopoCurateDataModule(rollouts=[str(f) for f in files], mode="rl", cache_dir=str(tmp_path / name))
        return dm.curate()

    alone, pooled = curate([RETAIL], "alone"), curate([RETAIL, ERRORED], "pooled")
    assert pooled["selection"] == alone["selection"]
    assert sorted(task for task, _ in pooled["selection"]["sft"]) == ["13", "50"]
    assert pooled["rl"] == alone["rl"] and len(pooled["not_run_rollouts"]) == 2


def test_the_resume_warning_names_what_may_have_changed(tmp_path, caplog):
    # It said "(inputs or settings changed)" also when only the curation code (CACHE_VERSION) had.
    dm = TopoCurateDataModule(rollouts=[str(RETAIL)], mode="rl", cache_dir=str(tmp_path / "cache"))
    dm.load_state_dict({"topocurate_selection": {"sft": [["retail/13", 0]], "rl": []}})
    with caplog.at_level("WARNING"):
        dm.curate()
    assert "the curated selection differs from the one recorded in the checkpoint" in caplog.text
    assert "files, the curation settings, or the curation code" in caplog.text
    assert f"(CACHE_VERSION, now {CACHE_VERSION})" in caplog.text
