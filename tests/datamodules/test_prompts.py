"""PromptDataModule: every accepted record format normalises to {id, prompt, reference, verifier}."""

from __future__ import annotations

import json

import pytest

from lightning_agents.datamodules.chat import DataFormatError
from lightning_agents.datamodules.prompts import PromptDataModule, normalize_prompt_record, read_prompt_records
from lightning_agents.rewards import CodeVerifier, GSM8KVerifier, resolve_verifier


def test_embedded_direct_and_program():
    recs = read_prompt_records("embedded:arithmetic/val", size=5)
    assert len(recs) == 5
    assert recs[0]["prompt"][-1]["role"] == "user" and recs[0]["verifier"].endswith("ArithmeticVerifier")
    assert all(r["reference"].lstrip("-").isdigit() for r in recs)
    prog = read_prompt_records("embedded:arithmetic/val", size=2, embedded_style="program")
    assert prog[0]["prompt"][0]["role"] == "system" and prog[0]["verifier"].endswith("ProgramOutputVerifier")
    with pytest.raises(ValueError, match="style"):
        read_prompt_records("embedded:arithmetic/val", size=2, embedded_style="tool")


def test_gsm8k_records_score_with_their_verifier(shared_data):
    recs = read_prompt_records(str(shared_data / "gsm8k" / "test.jsonl"), size=20)
    assert len(recs) == 20
    v = resolve_verifier(recs[0]["verifier"])
    assert isinstance(v, GSM8KVerifier)
    assert all(v(r["answer"], r["reference"]) == 1.0 for r in recs)
    assert "####" in recs[0]["prompt"][0]["content"]  # the instruction asks for the gold format


def test_humaneval_records_pass_with_canonical_solution(shared_data):
    recs = read_prompt_records(str(shared_data / "humaneval" / "HumanEval.jsonl.gz"), size=3)
    assert recs[0]["id"] == "HumanEval/0"
    v = resolve_verifier(recs[0]["verifier"])
    assert isinstance(v, CodeVerifier)
    for r in recs:
        # The prompt carries the original function stub; stub + canonical body is a full program.
        assert r["prompt"][0]["content"].endswith("```")
        assert v(r["prompt_text"] + r["canonical_solution"], r["reference"]) == 1.0


def test_rl_task_records_and_errors(tmp_path):
    path = tmp_path / "rl_tasks.jsonl"
    rows = [
        {"id": "t1", "prompt": [{"role": "user", "content": "2+2?"}], "reference": "4", "score": 0.3},
        {"id": "t2", "prompt": "3+3?", "reference": 6, "verifier": "lightning_agents.rewards.GSM8KVerifier"},
    ]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    recs = read_prompt_records(str(path))
    assert recs[0]["score"] == 0.3 and recs[0]["verifier"] is None
    assert recs[1]["prompt"] == [{"role": "user", "content": "3+3?"}] and recs[1]["reference"] == "6"
    with pytest.raises(DataFormatError, match="unknown prompt record"):
        normalize_prompt_record({"text": "x"}, "f.jsonl:3")
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{not json\n")
    with pytest.raises(DataFormatError, match="bad.jsonl:1"):
        read_prompt_records(str(bad))


def test_datamodule_batches_and_overrides():
    dm = PromptDataModule(
        train="embedded:arithmetic/train",
        val="embedded:arithmetic/val",
        train_size=10,
        val_size=4,
        batch_size=4,
        eval_batch_size=3,
        system_prompt="Be brief.",
        force_verifier="lightning_agents.rewards.GSM8KVerifier",
    )
    dm.setup("fit")
    batches = list(dm.train_dataloader())
    assert [len(b) for b in batches] == [4, 4, 2]
    assert all(r["prompt"][0] == {"role": "system", "content": "Be brief."} for b in batches for r in b)
    assert all(r["verifier"].endswith("GSM8KVerifier") for b in batches for r in b)
    ids = sorted(r["id"] for b in batches for r in b)
    assert ids == sorted(r["id"] for r in dm.records["train"])  # shuffled, nothing lost
    assert [len(b) for b in dm.val_dataloader()] == [3, 1]
    with pytest.raises(ValueError):
        PromptDataModule(batch_size=0)
