"""SFT warns when data.max_length lets rows run past the model's context (docs audit, session 39).

Before, SFT on the embedded student (max_position_embeddings 512) with data.max_length 9000 trained
without a word on positions the model never learned; RSTG checked its context, SFT did not.
"""

import json
import warnings

import lightning as L
import pytest

from lightning_agents import ChatDataModule, SFTModule


def _conversations(path, words):
    with path.open("w") as handle:
        for i in range(4):
            messages = [
                {"role": "user", "content": f"Say {i} many times."},
                {"role": "assistant", "content": " ".join([str(i)] * words)},
            ]
            handle.write(json.dumps({"messages": messages}) + "\n")
    return str(path)


def _fit(tmp_path, train, max_length, **data):
    trainer = L.Trainer(
        accelerator="cpu",
        devices=1,
        max_steps=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tmp_path,
    )
    dm = ChatDataModule(train=train, val=None, batch_size=2, max_length=max_length, cache_dir=None, **data)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(SFTModule(), dm)
    return [str(w.message) for w in caught if "max_length" in str(w.message)]


@pytest.mark.parametrize("pack", [False, True])
def test_rows_longer_than_the_model_context_are_warned_about_naming_both_settings(tmp_path, pack):
    found = _fit(tmp_path, _conversations(tmp_path / "long.jsonl", 700), 2000, pack=pack)
    assert len(found) == 1, found
    assert "data.max_length=2000 is longer than the context of model.model 'embedded:student'" in found[0]
    assert "512 tokens, max_position_embeddings 512" in found[0]
    assert "4 of 4 training rows are longer" in found[0] or pack
    assert "Set data.max_length to at most 512" in found[0]


def test_a_generous_max_length_over_short_conversations_says_nothing(tmp_path):
    assert _fit(tmp_path, _conversations(tmp_path / "short.jsonl", 20), 2000) == []
