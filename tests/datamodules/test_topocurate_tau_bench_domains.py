"""TopoCurateDataModule on pooled tau-bench airline and retail runs (their files name no domain).

Real inputs: the shared GPT-4o airline run (``../shared/data/tau_bench``) and the GPT-4o retail
records in ``tests/data/tau_bench_other/``; both have tasks 13 and 47.
"""

from pathlib import Path

from lightning_agents.datamodules.topocurate import TopoCurateDataModule

RETAIL = Path(__file__).resolve().parents[1] / "data" / "tau_bench_other" / "retail-gpt-4o-records.json"


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
