"""`generate`'s prompt file is read by the one JSON Lines reader the tasks and PromptDataModule use."""

from __future__ import annotations

import gzip

import pytest

from lightning_agents.commands.generate import read_generation_prompts
from lightning_agents.datamodules.chat import DataFormatError


def test_a_parquet_file_is_named_as_such(tmp_path):
    # generate had its own line loop: a Parquet file raised a bare UnicodeDecodeError
    path = tmp_path / "prompts.jsonl"
    path.write_bytes(b"PAR1\x15\x04\x15\xff\xfe\x00")
    with pytest.raises(DataFormatError, match=r"prompts\.jsonl:1: a Parquet file"):
        read_generation_prompts(path)


def test_gzipped_and_bom_prompt_files_are_read(tmp_path):
    gz = tmp_path / "prompts.jsonl.gz"
    gz.write_bytes(gzip.compress(b'{"prompt": "hi", "id": "a"}\n'))
    bom = tmp_path / "bom.jsonl"
    bom.write_bytes(b'\xef\xbb\xbf{"messages": [{"role": "user", "content": "yo"}]}\n')
    assert [r["id"] for r in read_generation_prompts(gz)] == ["a"]
    assert read_generation_prompts(bom)[0]["prompt"] == [{"role": "user", "content": "yo"}]
