"""Task files that are not JSON Lines text are refused naming the file, the line and what they are.

Benchmark copies come in other containers: Hugging Face's datasets as Parquet (MBPP's
``test-00000-of-00001.parquet``), whole-file JSON arrays (google-research's ``sanitized-mbpp.json``,
OlympiadBench's ``test.json``), gzip without the ``.gz`` name. A Parquet or gzip file used to fail
with a bare ``UnicodeDecodeError`` that named neither the file nor the line, and an array with
"invalid JSON (Expecting value at column 2)".
"""

from __future__ import annotations

import gzip
import json

import pytest

from lightning_agents.tasks import BoxedMathTask, GSM8KTask, HumanEvalTask
from lightning_agents.tasks._files import TaskDataError

ROW = {"question": "Tom has 3 apples and buys 2. How many?", "answer": "3 + 2 = 5\n#### 5"}


def test_a_parquet_file_is_named_as_one(tmp_path):
    path = tmp_path / "test-00000-of-00001.parquet"
    # Parquet's magic number opens and closes the file; the bytes between are not UTF-8
    path.write_bytes(b"PAR1\x15\x04\x15\xc6\x01\x15\xc8\x01\x4c\x15\xff\x00" + b"PAR1")
    with pytest.raises(
        TaskDataError, match=r"test-00000-of-00001\.parquet:1: a Parquet file; convert it to JSON Lines"
    ):
        _ = HumanEvalTask(str(path)).problems


def test_a_gzip_file_without_the_gz_name_and_a_gz_name_without_gzip_are_told_apart(tmp_path):
    packed = tmp_path / "test.jsonl"
    packed.write_bytes(gzip.compress((json.dumps(ROW) + "\n").encode()))
    with pytest.raises(TaskDataError, match=r"test\.jsonl:1: gzip-compressed; name it \*\.gz"):
        _ = GSM8KTask(str(packed)).problems
    plain = tmp_path / "test.jsonl.gz"
    plain.write_text(json.dumps(ROW) + "\n")
    with pytest.raises(TaskDataError, match=r"test\.jsonl\.gz:1: named \.gz but not gzip-compressed"):
        _ = GSM8KTask(str(plain)).problems
    # named right, it loads
    right = tmp_path / "right.jsonl.gz"
    right.write_bytes(gzip.compress((json.dumps(ROW) + "\n").encode()))
    assert [p["reference"] for p in GSM8KTask(str(right)).problems] == ["5"]


def test_a_file_that_is_not_utf8_names_its_line(tmp_path):
    path = tmp_path / "latin1.jsonl"
    path.write_bytes((json.dumps(ROW) + "\n").encode() + b'{"question": "caf\xe9", "answer": "#### 1"}\n')
    with pytest.raises(TaskDataError, match=r"latin1\.jsonl:\d+: not UTF-8 text"):
        _ = GSM8KTask(str(path)).problems


@pytest.mark.parametrize("indent", [None, 4])
def test_a_json_array_is_named_as_one(tmp_path, indent):
    path = tmp_path / "test.json"
    rows = [{"problem": "What is 1+1?", "answer": "2"}, {"problem": "What is 2+2?", "answer": "4"}]
    path.write_text(json.dumps(rows, indent=indent) + "\n")
    with pytest.raises(TaskDataError, match=r"test\.json:1: a JSON array, not JSON Lines"):
        _ = BoxedMathTask(str(path)).problems
