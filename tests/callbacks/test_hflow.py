"""HFlowCallback inside a real Trainer fit, then a resume from its checkpoint."""

from __future__ import annotations

import lightning as L
import pytest
import torch

from lightning_agents.callbacks import HFlowCallback
from lightning_agents.datamodules.chat import ChatDataModule
from lightning_agents.modules.sft import SFTModule

TEACHER = {"name": "teacher", "model": "embedded:teacher", "kind": "hf", "input_price": 4.0, "output_price": 8.0}


def _callback(**kw):
    from lightning_agents.hflow import SearchConfig

    search = SearchConfig(
        eval_problems=6,
        population_size=3,
        offspring=3,
        max_nodes=3,
        questions_per_generation=1,
        lambda_cost=50.0,
        workers=1,
    )
    args = dict(task_size=12, backbones=[TEACHER], trained_input_price=1.0, trained_output_price=2.0, search=search)
    args.update(kw)
    return HFlowCallback(**args)


def _trainer(tmp_path, cb, max_epochs, **kw):
    from lightning.pytorch.callbacks import ModelCheckpoint
    from lightning.pytorch.loggers import TensorBoardLogger

    return L.Trainer(
        default_root_dir=tmp_path,
        max_epochs=max_epochs,
        limit_train_batches=2,
        limit_val_batches=0,
        logger=TensorBoardLogger(tmp_path, name="tb"),
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[cb, ModelCheckpoint(dirpath=tmp_path / "ckpt", save_last=True)],
        accelerator="cpu",
        **kw,
    )


def _bare_trainer(tmp_path, cb):
    """One epoch of one batch with no logger and no checkpoints: the callback alone keeps files."""
    return L.Trainer(
        default_root_dir=tmp_path,
        max_epochs=1,
        limit_train_batches=1,
        limit_val_batches=0,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[cb],
        accelerator="cpu",
    )


def test_callback_runs_logs_and_survives_checkpoint_resume(tmp_path):
    data = ChatDataModule(embedded_size=64, batch_size=8, max_length=96, val=None)
    cb = _callback()
    module = SFTModule(lr=1e-3)
    seen_modes = []
    original = module.model.generate

    def spy(*args, **kwargs):  # the trained model itself generates, in eval mode
        seen_modes.append(module.model.training)
        return original(*args, **kwargs)

    module.model.generate = spy
    _trainer(tmp_path, cb, max_epochs=1).fit(module, data)
    assert cb.search is not None and cb.runs == 1
    assert cb.search.pool.get("trained").model is module.model  # shared, not copied
    assert seen_modes and not any(seen_modes) and module.model.training
    trained_calls = cb.search.pool.ledger.summary("backbone")["trained"]["calls"]
    assert trained_calls > 0
    population = [i.hash for i in cb.search.population]
    prefs = len(cb.search.preferences)
    memory = cb.search.memory.state_dict()

    # TensorBoard got the scalar, the text and the picture.
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(
        str(next((tmp_path / "tb").rglob("events.out.tfevents.*")).parent), size_guidance={"images": 0, "tensors": 0}
    )
    acc.Reload()
    assert "hflow/best_fitness" in acc.Tags()["scalars"]
    assert "hflow/best_workflow" in acc.Tags()["images"]
    assert any(t.startswith("hflow/best_workflow") for t in acc.Tags()["tensors"])

    ckpt = tmp_path / "ckpt" / "last.ckpt"
    state = torch.load(ckpt, weights_only=False)["callbacks"]
    saved = next(v for k, v in state.items() if k.startswith("HFlowCallback"))
    assert [i["hash"] for i in saved["search"]["population"]] == population

    resumed_cb = _callback()
    module2 = SFTModule(lr=1e-3)
    trainer = _trainer(tmp_path, resumed_cb, max_epochs=2)
    trainer.fit(module2, data, ckpt_path=str(ckpt))
    search = resumed_cb.search
    assert resumed_cb.runs == 2 and search.generation == 2
    assert search.pool.get("trained").model is module2.model
    assert len(search.preferences) >= prefs
    assert search.pool.ledger.summary("backbone")["trained"]["calls"] > trained_calls  # ledger carried over
    assert search.memory.data["lineage"][: len(memory["lineage"])] == memory["lineage"]
    assert search.history[0]["best_workflow"] == cb.search.history[0]["best_workflow"]


def test_callback_requires_prices():
    with pytest.raises(ValueError, match="trained_input_price"):
        HFlowCallback(trained_output_price=1.0)


def test_callback_on_a_task_with_tools_evolves_agent_workflows(tmp_path):
    # The callback builds its search from the same factory as `evolve`, so a task with tools must
    # get agent seeds, and the model being trained must run multi-turn episodes with the tools.
    from lightning_agents.hflow import AGENT_OPERATORS

    data = ChatDataModule(embedded_size=32, batch_size=8, max_length=96, val=None)
    cb = _callback(task="embedded:agent_world/val", task_size=6)
    module = SFTModule(lr=1e-3)
    requests = []
    original = module.model.generate

    def spy(*args, **kwargs):
        requests.append(kwargs.get("input_ids", args[0] if args else None))
        return original(*args, **kwargs)

    module.model.generate = spy
    _trainer(tmp_path, cb, max_epochs=1).fit(module, data)
    assert cb.search is not None and cb.runs == 1
    ops = {n.op for i in cb.search.population for n in i.workflow.nodes}
    assert ops and ops <= set(AGENT_OPERATORS), ops
    assert cb.search.pool.ledger.summary("backbone")["trained"]["calls"] > 0
    # The trained model saw the task's tool schemas in its prompts (rendered by its chat template).
    from lightning_agents.tasks import build_task

    tool_names = {t["function"]["name"] for t in build_task("embedded:agent_world/val", n=6).tools}
    prompts = [module.tokenizer.decode(ids[0]) for ids in requests if ids is not None]
    assert prompts and all(any(name in p for name in tool_names) for p in prompts)


def test_a_missing_sandbox_stops_the_fit_before_the_first_epoch(tmp_path, monkeypatch):
    # The first generation runs after an epoch: a missing sandbox used to stop the fit only then,
    # after the epoch and the calls paid before the first program ran.
    from lightning_agents.rewards import isolation

    def unavailable(mode):
        raise isolation.IsolationUnavailable(f"sandbox isolation={mode!r} is unavailable on this machine")

    monkeypatch.setattr(isolation, "check_isolation", unavailable)
    module = SFTModule(lr=1e-3)
    steps = []
    original = module.training_step
    module.training_step = lambda *a, **k: steps.append(1) or original(*a, **k)
    data = ChatDataModule(embedded_size=64, batch_size=8, max_length=96, val=None)
    with pytest.raises(isolation.IsolationUnavailable):
        _trainer(tmp_path, _callback(), max_epochs=1).fit(module, data)
    assert not steps


def test_a_fit_without_logger_or_output_still_keeps_the_search_on_disk(tmp_path):
    # With logger=False and no output the answers, traces and the best workflows lived only in
    # the checkpoint: a person's answers and the search's result were nowhere to read.
    import yaml

    data = ChatDataModule(embedded_size=32, batch_size=8, max_length=96, val=None)
    cb = _callback()
    trainer = _bare_trainer(tmp_path, cb)
    trainer.fit(SFTModule(lr=1e-3), data)
    folder = tmp_path / "hflow"
    assert len(cb.search.preferences) > 0
    lines = (folder / "preferences.jsonl").read_text().splitlines()
    assert len(lines) == len(cb.search.preferences)
    assert (folder / "traces.jsonl").stat().st_size > 0 and (folder / "calls.jsonl").stat().st_size > 0
    ranked = yaml.safe_load((folder / "best_workflows.yaml").read_text())
    assert ranked[0]["hash"] == cb.search.best().hash and len(ranked) <= 5
    assert len((folder / "history.jsonl").read_text().splitlines()) == len(cb.search.history) > 1


def test_a_fresh_fit_reuses_old_traces_except_the_trained_models(tmp_path):
    # Traces a previous fit left in the output folder were served to the next fit as a cache,
    # including the trained model's, computed with weights it no longer has.
    data = ChatDataModule(embedded_size=32, batch_size=8, max_length=96, val=None)
    out = tmp_path / "search"
    cb = _callback(output=str(out))
    trainer = _bare_trainer(tmp_path, cb)
    trainer.fit(SFTModule(lr=1e-3), data)

    def uses(trace, backbone):
        return any(s["backbone"] == backbone for s in trace["steps"])

    logged = cb.search.evaluator.cache.values()
    assert any(uses(t, "trained") for t in logged) and any(not uses(t, "trained") for t in logged)

    fresh = _callback(output=str(out))
    fresh._task = cb._task
    search = fresh._build(SFTModule(lr=1e-3))
    kept = list(search.evaluator.cache.values())
    assert kept and not any(uses(t, "trained") for t in kept)
