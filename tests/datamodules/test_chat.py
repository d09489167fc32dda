"""ChatDataModule: sources, file:line errors, skip_invalid, batching and packing."""

import json

import pytest
import torch

from lightning_agents.datamodules.chat import ChatDataModule, DataFormatError, read_conversations
from lightning_agents.datamodules.conversations import IGNORE_INDEX
from lightning_agents.models import load_causal_lm

GOOD = {
    "messages": [
        {"role": "user", "content": "Ava has 2 pens and gets 3 more."},
        {"role": "assistant", "content": "The answer is 5."},
    ]
}


def write_jsonl(path, lines):
    path.write_text("\n".join(lines) + "\n")
    return path


def test_bad_lines_are_reported_with_file_and_line(tmp_path):
    path = write_jsonl(
        tmp_path / "data.jsonl",
        [
            json.dumps(GOOD),
            "{not json",
            json.dumps({"messages": [{"role": "user", "content": "hi"}]}),
            json.dumps(GOOD),
        ],
    )
    with pytest.raises(DataFormatError, match=rf"^{path}:2: invalid JSON"):
        read_conversations(str(path))
    conversations, errors = read_conversations(str(path), skip_invalid=True)
    assert len(conversations) == 2
    assert errors[0].startswith(f"{path}:2: invalid JSON")
    assert errors[1] == f"{path}:3: no assistant message to learn from"


def test_json_list_and_datasets_sources(tmp_path):
    import datasets

    (tmp_path / "list.json").write_text(json.dumps([GOOD, {"messages": "x"}]))
    with pytest.raises(DataFormatError, match=r"list.json\[1\]: 'messages' must be a non-empty list"):
        read_conversations(str(tmp_path / "list.json"))
    datasets.Dataset.from_list([GOOD, GOOD]).save_to_disk(str(tmp_path / "saved"))
    conversations, _ = read_conversations(str(tmp_path / "saved"))
    assert len(conversations) == 2 and conversations[0]["messages"][1]["content"] == "The answer is 5."


def test_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        read_conversations(str(tmp_path / "absent.jsonl"))


def test_datamodule_batches_have_assistant_only_labels(tmp_path):
    dm = ChatDataModule(
        train="embedded:arithmetic/train",
        val=None,
        embedded_size=40,
        embedded_styles=["direct", "tool"],
        batch_size=8,
        max_length=128,
    )
    dm.setup("fit")
    batch = next(iter(dm.train_dataloader()))
    assert batch["input_ids"].shape == batch["labels"].shape == batch["attention_mask"].shape
    assert batch["input_ids"].shape[1] % 8 == 0
    assert (batch["labels"][batch["attention_mask"] == 0] == IGNORE_INDEX).all()
    supervised = (batch["labels"] != IGNORE_INDEX).sum(1)
    assert (supervised > 0).all() and (supervised < batch["attention_mask"].sum(1)).all()
    assert dm.val_dataloader() == []


def test_skip_invalid_in_datamodule_keeps_going_and_counts(tmp_path):
    path = write_jsonl(tmp_path / "d.jsonl", [json.dumps(GOOD), "[]", json.dumps(GOOD)])
    dm = ChatDataModule(train=str(path), val=None, skip_invalid=True, batch_size=2)
    dm.setup("fit")
    assert len(dm.datasets["fit"]) == 2
    assert dm.state_dict()["skipped"]["fit"] == 1
    with pytest.raises(DataFormatError, match=rf"{path}:2:"):
        ChatDataModule(train=str(path), val=None).setup("fit")


def test_packing_keeps_conversations_apart():
    """A packed row gives every conversation exactly the logits it gets alone."""
    dm = ChatDataModule(train="embedded:arithmetic/train", val=None, embedded_size=6, batch_size=6, max_length=256)
    dm.setup("fit")
    single_rows = dm.datasets["fit"]
    packed_dm = ChatDataModule(
        train="embedded:arithmetic/train",
        val=None,
        embedded_size=6,
        batch_size=6,
        max_length=256,
        pack=True,
        shuffle=False,
    )
    packed_dm.setup("fit")
    packed_rows = packed_dm.datasets["fit"]
    assert len(packed_rows) < len(single_rows)
    assert sum(len(r["input_ids"]) for r in packed_rows) == sum(len(r["input_ids"]) for r in single_rows)
    model = load_causal_lm("embedded:student", attn_implementation="sdpa").eval()
    batch = next(iter(packed_dm.train_dataloader()))
    with torch.no_grad():
        # No cache: transformers only derives the block-diagonal mask from position_ids in training-style calls.
        packed_logits = model(input_ids=batch["input_ids"], position_ids=batch["position_ids"], use_cache=False).logits
        row = packed_rows[0]
        starts = [i for i, p in enumerate(row["position_ids"]) if p == 0]
        ends = starts[1:] + [len(row["input_ids"])]
        for start, end in zip(starts, ends):
            alone = model(input_ids=torch.tensor([row["input_ids"][start:end]]), use_cache=False).logits[0]
            torch.testing.assert_close(packed_logits[0, start:end], alone, atol=1e-4, rtol=1e-4)


def test_a_source_truncated_to_nothing_says_so_not_that_it_is_unset(tmp_path):
    # Real tau-bench trajectories start with a ~2,000-token policy; at the default max_length every
    # one lost its assistant turns, and the error said to "set the `train` source" that was set.
    long = {
        "messages": [
            {"role": "system", "content": "Policy: " + "be careful. " * 400},
            {"role": "user", "content": "Ava has 2 pens and gets 3 more."},
            {"role": "assistant", "content": "The answer is 5."},
        ]
    }
    path = write_jsonl(tmp_path / "long.jsonl", [json.dumps(long)] * 3)
    dm = ChatDataModule(train=str(path), val=None, max_length=128, cache_dir=None)
    dm.setup("fit")
    with pytest.raises(ValueError, match=r"long\.jsonl.* gave no trainable rows: 3 of 3 .*max_length=128") as err:
        dm.train_dataloader()
    assert "set the `train` source" not in str(err.value)
    with pytest.raises(ValueError, match="no fit data: set the `train` source"):
        ChatDataModule(train=None, val=None).train_dataloader()


def test_rows_cut_inside_an_assistant_turn_are_counted_in_a_warning(tmp_path, caplog):
    # Truncation kept half an assistant turn labelled (a tool call cut mid-arguments) and said
    # nothing: only rows that lost every assistant token were reported.
    reply = "The answer is " + "five and " * 60 + "done."
    record = {
        "messages": [
            {"role": "user", "content": "Ava has 2 pens and gets 3 more."},
            {"role": "assistant", "content": reply},
        ]
    }
    short = {"messages": [{"role": "user", "content": "2+3?"}, {"role": "assistant", "content": "5."}]}
    path = write_jsonl(tmp_path / "cut.jsonl", [json.dumps(record)] * 2 + [json.dumps(short)])
    with caplog.at_level("WARNING"):
        dm = ChatDataModule(train=str(path), val=None, max_length=64, cache_dir=None)
        dm.setup("fit")
    assert len(dm.datasets["fit"]) == 3
    assert "2 of 3 conversation(s) end at max_length=64 inside an assistant turn" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING"):
        ChatDataModule(train=str(path), val=None, max_length=1024, cache_dir=None).setup("fit")
    assert "inside an assistant turn" not in caplog.text


def test_the_tokenized_cache_follows_xdg_cache_home_like_the_curation_cache(tmp_path, monkeypatch):
    from lightning_agents.datamodules.topocurate import default_cache_dir

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    data = ChatDataModule(embedded_size=8, val=None)
    assert data.cache_dir == str(tmp_path / "lightning_agents" / "tokenized")
    assert default_cache_dir() == tmp_path / "lightning_agents" / "topocurate"
