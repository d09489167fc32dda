"""The review of the task layer (commit 3608c39), mended: each test failed before.

evalplus release rows scored on base tests only (refused then; graded on their plus inputs
since session 41, tests/tasks/test_evalplus_release.py), a solution without a box as the reference,
multi-part answers compared in order by the fallback and as sets by math-verify, file-format
messages (line numbers, gzip contents, BOM, JSONL of arrays), ``[""]`` answers, the "Name the
function" line, and a trailing control space.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from lightning_agents.datamodules.chat import DataFormatError
from lightning_agents.datamodules.prompts import normalize_prompt_record, read_prompt_records
from lightning_agents.tasks import BoxedMathTask, GSM8KTask, HumanEvalTask
from lightning_agents.tasks._files import TaskDataError
from lightning_agents.tasks.math import BoxedMathVerifier, normalize_latex

SHARED_HE = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "humaneval" / "HumanEval.jsonl.gz"
GSM_ROW = {"question": "Tom has 3 apples and buys 2. How many?", "answer": "3 + 2 = 5\n#### 5"}
FALLBACK = BoxedMathVerifier(use_math_verify=False)


def _write(path: Path, rows: list[dict]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


# 1. evalplus HumanEval+ in its release format


@pytest.mark.skipif(not SHARED_HE.exists(), reason="../shared/data/humaneval is absent")
def test_an_evalplus_release_row_is_graded_on_its_plus_inputs(tmp_path):
    # refused in session 40 (scored on base tests only before); graded on every input since session 41
    from lightning_agents.rewards.isolation import isolation_report

    if not isolation_report()["bwrap_works"]:
        pytest.skip("bubblewrap is unavailable here")
    with gzip.open(SHARED_HE, "rt") as fh:
        row = json.loads(fh.readline())
    # the shape tools/humaneval/init_plus.py writes (evalplus/evalplus @ 4690cb6^): HumanEval's own
    # test, the extra cases only as inputs
    row.update(contract="", base_input=[[[1.0, 2.0], 0.5]], plus_input=[[[1.0, 2.5, 3.0, 4.5, 5.0, 6.5], 0.4]], atol=0)
    path = tmp_path / "HumanEvalPlus-v0.1.10.jsonl"
    _write(path, [row])
    task = HumanEvalTask(str(path), evalplus_cache=None)
    (problem,) = task.problems
    canonical = row["prompt"] + row["canonical_solution"]
    assert task.verify(f"```python\n{canonical}\n```", problem) == 1.0
    # right on HumanEval's check(), wrong on the plus input only: 0
    broken = canonical.replace("def has_close_elements(", "def _right(", 1) + (
        "\n\ndef has_close_elements(numbers, threshold):\n"
        "    return 'WRONG' if numbers == [1.0, 2.5, 3.0, 4.5, 5.0, 6.5] else _right(numbers, threshold)\n"
    )
    assert task.verify(f"```python\n{broken}\n```", problem) == 0.0


def test_release_rows_are_graded_and_original_format_rows_load(tmp_path):
    from lightning_agents.rewards.isolation import isolation_report

    if not isolation_report()["bwrap_works"]:
        pytest.skip("bubblewrap is unavailable here")
    base = {
        "task_id": "HumanEval/0",
        "prompt": "def add(a, b):\n    '''Add.'''\n",
        "canonical_solution": "    return a + b\n",
        "entry_point": "add",
        "test": "def check(candidate):\n    assert candidate(1, 2) == 3\n",
    }
    release = {**base, "base_input": [[1, 2]], "plus_input": [[-5, 5]], "atol": 0}
    task = HumanEvalTask(_write(tmp_path / "release.jsonl", [release]), evalplus_cache=None)
    (problem,) = task.problems
    # right on the base test, wrong on the plus input
    assert task.verify("```python\ndef add(a, b):\n    return abs(a) + abs(b)\n```", problem) == 0.0
    assert task.verify("```python\ndef add(a, b):\n    return a + b\n```", problem) == 1.0
    # to_original_fmt.py's check() runs every input against the stored results: used as it is, even
    # with the input fields left on the row
    original = {
        **release,
        "test": "def check(candidate):\n    inputs = [[1, 2], [-5, 5]]\n    results = [3, 0]\n"
        "    for inp, exp in zip(inputs, results):\n        assert candidate(*inp) == exp\n",
    }
    (kept,) = HumanEvalTask(_write(tmp_path / "original.jsonl", [original])).problems
    assert "inputs = [[1, 2], [-5, 5]]" in kept["reference"]


# 2. and 7. where the reference comes from


def test_a_solution_without_a_box_is_refused_naming_its_line(tmp_path, caplog):
    rows = [
        {"problem": "What is 1+1?", "solution": "So it is $\\boxed{2}$."},
        {"problem": "What is 2+2?", "solution": ["Add them.", "The sum is 4."]},  # OlympiadBench's shape
    ]
    # a file with no usable row is refused; one with some is read, the rest skipped with a warning
    # naming the first such line (tests/tasks/test_task_review2_mends.py)
    with pytest.raises(
        TaskDataError, match=r"no row has an answer .*olympiad\.jsonl:1: .*'solution' with the answer in \\boxed"
    ):
        _ = BoxedMathTask(_write(tmp_path / "olympiad.jsonl", rows[1:] * 2)).problems
    assert len(BoxedMathTask(_write(tmp_path / "mixed.jsonl", rows)).problems) == 1
    assert "mixed.jsonl:2: a math record without 'answer'" in caplog.text


@pytest.mark.parametrize("empty", ["", [], [""], ["", ""]])
def test_an_empty_answer_leaves_the_boxed_solution_as_the_reference(tmp_path, empty):
    row = {"problem": "What is 1+1?", "answer": empty, "solution": "So it is $\\boxed{2}$."}
    task = BoxedMathTask(_write(tmp_path / "m.jsonl", [row]))
    (problem,) = task.problems
    assert task.verify("\\boxed{2}", problem) == 1.0
    assert task.verify("\\boxed{3}", problem) == 0.0


# 3. and 4. lists of answers


@pytest.mark.parametrize(
    ("predicted", "gold", "score"),
    [
        # OlympiadBench's judge pairs comma parts in any order for its is_multiple_answer records
        ("3, 1, 2", "1,2,3", 1.0),
        ("(2,7,13), (1,8,19)", "$(1,8,19), (2,7,13)$", 1.0),
        ("g(n)=1, f(n)=n", "$f(n)=n$, $g(n)=1$", 1.0),
        ("\\{3, 1\\}", "\\{1, 3\\}", 1.0),
        ("378,351,297,270,216,189,135,108,54,27", "27,54,108,135,189,216,270,297,351,378", 1.0),
        # order inside brackets counts: a point, an interval, a point within a list
        ("(2, 1)", "(1, 2)", 0.0),
        ("[2, 1)", "[1, 2)", 0.0),
        ("(8,1,19), (2,7,13)", "(1,8,19), (2,7,13)", 0.0),
        # every part paired with its own: a repeated part is not two
        ("-2, 3", "-2, -2", 0.0),
        ("-2", "-2, -2", 0.0),
        ("16, 3, 1", "16, 3, 1, 1", 0.0),
        ("1,000", "1000", 1.0),
        ("\\frac{1}{100}, 100", "100, \\frac{1}{100}", 1.0),  # `,100` after a brace is no thousands separator
    ],
)
def test_list_answers_match_in_any_order_outside_brackets(predicted, gold, score):
    # any order is the record's choice (is_multiple_answer); lists are ordered by default
    # (tests/tasks/test_task_review2_mends.py)
    assert BoxedMathVerifier(use_math_verify=False, any_order=True)(f"\\boxed{{{predicted}}}", gold) == score
    verifier = BoxedMathVerifier(any_order=True)  # math-verify when installed: the same verdicts
    assert verifier(f"\\boxed{{{predicted}}}", gold) == score


def test_math_verify_does_not_compare_lists_as_sets():
    pytest.importorskip("math_verify")
    verifier = BoxedMathVerifier()
    assert verifier.backend == "math-verify"
    # OlympiadBench 2532 and 2356: math-verify alone scores these 1
    assert verifier("\\boxed{-2}", "-2,-2") == 0.0
    assert verifier("\\boxed{16,3,1}", "16,3,1,1") == 0.0
    # the parts boxed one by one, a repeated one included
    assert verifier("\\boxed{-2} and \\boxed{-2}", "-2,-2") == 1.0
    assert verifier("\\boxed{3, \\frac{1}{2}}", "3, 0.5") == 1.0
    # reordered: right unless the record's question asks for an order (any_order=False)
    assert verifier("\\boxed{\\frac{1}{2}, 3}", "3, 0.5") == 1.0
    assert BoxedMathVerifier(any_order=False)("\\boxed{\\frac{1}{2}, 3}", "3, 0.5") == 0.0


# 9. control space at the end


def test_a_trailing_control_space_leaves_no_backslash():
    assert normalize_latex("\\frac{1}{2}\\ ") == "\\frac{1}{2}"
    assert FALLBACK("\\boxed{\\frac{1}{2}\\ }", "\\frac12") == 1.0
    assert FALLBACK("\\boxed{5\\ \\text{cm}}", "5") == 1.0
    assert normalize_latex("a\\\\") == "a\\\\"  # a row break keeps both backslashes


# 5. file formats


def test_a_bad_byte_is_reported_on_its_own_line(tmp_path):
    line = json.dumps(GSM_ROW) + "\n"
    path = tmp_path / "lat.jsonl"
    path.write_bytes(line.encode() * 59 + b'{"question": "caf\xe9?", "answer": "#### 1"}\n' + line.encode() * 140)
    with pytest.raises(TaskDataError, match=r"lat\.jsonl:60: not UTF-8 text"):
        _ = GSM8KTask(str(path)).problems


def test_a_gzip_file_with_latin1_inside_is_not_called_broken(tmp_path):
    path = tmp_path / "lat.jsonl.gz"
    path.write_bytes(
        gzip.compress((json.dumps(GSM_ROW) + "\n").encode() + b'{"question": "caf\xe9?", "answer": "#### 1"}\n')
    )
    with pytest.raises(TaskDataError, match=r"lat\.jsonl\.gz:2: a gzip file whose contents are not UTF-8 text"):
        _ = GSM8KTask(str(path)).problems


def test_a_utf8_bom_is_skipped(tmp_path):
    path = tmp_path / "bom.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + (json.dumps(GSM_ROW) + "\n").encode() * 2)
    assert [p["reference"] for p in GSM8KTask(str(path)).problems] == ["5", "5"]
    packed = tmp_path / "bom.jsonl.gz"
    packed.write_bytes(gzip.compress(path.read_bytes()))
    assert len(GSM8KTask(str(packed)).problems) == 2


def test_a_jsonl_of_arrays_is_not_called_a_json_array(tmp_path):
    path = tmp_path / "arrays.jsonl"
    path.write_text('["a", 1]\n["b", 2]\n')
    with pytest.raises(TaskDataError, match=r"arrays\.jsonl:1: expected a JSON object") as info:
        _ = GSM8KTask(str(path)).problems
    assert "JSON array" not in str(info.value)


# 6. PromptDataModule's reader and record classes


def test_prompt_files_are_read_by_the_task_layers_reader(tmp_path):
    parquet = tmp_path / "train-00000-of-00001.parquet.jsonl"
    parquet.write_bytes(b"PAR1\x15\x04\x15\xc6\x01\x15\xc8\x01\x4c\x15\xff\x00PAR1")
    with pytest.raises(DataFormatError, match=r"parquet\.jsonl:1: a Parquet file"):
        read_prompt_records(str(parquet))
    array = tmp_path / "array.jsonl"
    array.write_text(json.dumps([GSM_ROW, GSM_ROW]) + "\n")
    with pytest.raises(DataFormatError, match=r"array\.jsonl:1: a JSON array, not JSON Lines"):
        read_prompt_records(str(array))
    bom = tmp_path / "bom.jsonl"
    bom.write_bytes(b"\xef\xbb\xbf" + (json.dumps(GSM_ROW) + "\n").encode())
    assert [r["reference"] for r in read_prompt_records(str(bom))] == ["5"]


def test_a_record_with_problem_question_and_answer_is_math():
    # math-evaluation-harness's AIME 2024 / AMC 2023 copies (answers as floats in AMC's)
    row = {
        "id": 0,
        "problem": "Cities A and B are 45 miles apart ...",
        "question": "Cities A and B ...",
        "answer": 27.0,
    }
    record = normalize_prompt_record(row, "amc23_test.jsonl:1")
    assert record["verifier"] == "lightning_agents.rewards.BoxedMathVerifier"
    assert record["reference"] == "27.0"
    # a GSM8K row that also has a `problem` field is still GSM8K when its answer ends in `#### N`
    gsm = normalize_prompt_record({**GSM_ROW, "problem": "x"}, "gsm.jsonl:1")
    assert gsm["verifier"] == "lightning_agents.rewards.GSM8KVerifier"


# 8. the "Name the function" line


def _name_line(solution: str) -> str:
    problem = {
        "prompt_text": "'''\nWrite a function that does it.\n'''",
        "entry_point": "f",
        "canonical_solution": solution,
    }
    return HumanEvalTask("-").user_message(problem).split("```")[-1].strip()


def test_the_name_line_uses_the_last_definition_and_hides_default_values():
    assert _name_line("def f(a):\n    return a\n\ndef f(a, b):\n    return a + b\n") == (
        "Name the function `f`: `def f(a, b):`."
    )
    assert _name_line("def f(n, _table={1: 'one', 2: 'two'}):\n    return _table[n]\n") == (
        "Name the function `f`: `def f(n, _table=...):`."
    )
    assert (
        _name_line("def f(a, /, b, *, c=1, d):\n    return a\n")
        == "Name the function `f`: `def f(a, /, b, *, c=..., d):`."
    )
    # a method or a lambda: the name alone
    assert _name_line("class Solution:\n    def f(self, n):\n        return n\n") == "Name the function `f`."
    assert _name_line("f = lambda n: n + 1\n") == "Name the function `f`."
