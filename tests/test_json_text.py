"""Every reader of user files and model text turns each way ``json.loads`` fails into its own error
naming the file and line: a 4,300+ digit integer (``ValueError``) and deep nesting
(``RecursionError``) escaped handlers that caught only ``JSONDecodeError``, so one such line ended
a load, even with ``skip_invalid``, with no file or line in the message."""

from __future__ import annotations

import json

import pytest

from lightning_agents.json_text import JSONTextError, loads_json

HUGE = '{"prompt": "hi", "reference": ' + "9" * 5000 + "}"
DEEP = "[" * 100_000 + "]" * 100_000


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"a": 1,}', "Expecting property name enclosed in double quotes at column 9"),
        ('{\n"a": }', "Expecting value at line 2 column 6"),
        (HUGE, "Exceeds the limit (4300 digits)"),
        (DEEP, "nested too deeply"),
    ],
)
def test_every_failure_is_one_error_with_a_reason(text, message):
    with pytest.raises(JSONTextError) as info:
        loads_json(text)
    assert message in str(info.value)
    assert isinstance(info.value, ValueError)


def test_hooks_pass_through_and_their_refusals_are_errors_too():
    assert loads_json('{"x": 1.5}', parse_float=str) == {"x": "1.5"}

    def refuse(name):
        raise ValueError(f"{name} is not JSON")

    with pytest.raises(JSONTextError, match="NaN is not JSON"):
        loads_json('{"x": NaN}', parse_constant=refuse)


def _lines(tmp_path, name, bad):
    # One line every reader accepts, so the error is the bad line's.
    chat = [{"role": "user", "content": "What is 2+2?"}, {"role": "assistant", "content": "4"}]
    good = json.dumps(
        {
            "prompt": "What is 2+2?",
            "reference": "4",
            "question": "What is 2+2?",
            "answer": "#### 4",
            "messages": chat,
            "traj": chat,
            "reward": 1.0,
            "task_id": 0,
            "query_id": "q0",
            "winner": None,
        }
    )
    path = tmp_path / name
    path.write_text(good + "\n" + bad + "\n")
    return path


def _readers():
    from lightning_agents.callbacks.accuracy import HeldOutAccuracy
    from lightning_agents.commands.generate import read_generation_prompts
    from lightning_agents.datamodules.chat import read_conversations
    from lightning_agents.datamodules.prompts import read_prompt_records
    from lightning_agents.datamodules.trajectories import load_rollouts
    from lightning_agents.hflow.preferences import FileRater
    from lightning_agents.tasks._files import iter_jsonl

    return {
        "held-out accuracy file": lambda p: HeldOutAccuracy(path=str(p)).problems(),
        "generation prompts": read_generation_prompts,
        "conversations": lambda p: read_conversations(str(p)),
        "prompt records": lambda p: read_prompt_records(str(p)),
        "rollouts": lambda p: load_rollouts(str(p)),
        "rater answers": lambda p: FileRater(str(p)).reload(),
        "task files": lambda p: list(iter_jsonl(p)),
    }


@pytest.mark.parametrize("reader", list(_readers()))
@pytest.mark.parametrize("bad", [HUGE, DEEP], ids=["huge-int", "deep"])
def test_file_readers_name_the_file_and_line(tmp_path, reader, bad):
    path = _lines(tmp_path, "data.jsonl", bad)
    with pytest.raises(ValueError, match=rf"{path}:2: (invalid JSON|not JSON)"):
        _readers()[reader](path)


@pytest.mark.parametrize("reader", list(_readers()))
def test_a_line_cut_short_is_placed_in_that_line_not_in_the_next(tmp_path, reader):
    # The readers hand ``loads_json`` the line with its newline; before, a cut-off line was
    # reported "data.jsonl:2: invalid JSON (... at line 2 column 1)", the newline's next line
    cut = '{"prompt": "What is 2+2?", "reference": "4",'
    path = _lines(tmp_path, "data.jsonl", cut)
    with pytest.raises(ValueError) as info:
        _readers()[reader](path)
    message = str(info.value)
    assert f"{path}:2: " in message and f"column {len(cut) + 1}" in message and "line 2" not in message, message


@pytest.mark.parametrize("bad", [HUGE, DEEP], ids=["huge-int", "deep"])
def test_skip_invalid_skips_the_line_instead_of_ending_the_load(tmp_path, bad):
    from lightning_agents.datamodules.chat import read_conversations
    from lightning_agents.datamodules.trajectories import load_rollouts

    path = _lines(tmp_path, "data.jsonl", bad)
    _, errors = read_conversations(str(path), skip_invalid=True)
    assert any(f"{path}:2: invalid JSON" in e for e in errors)
    rollouts = load_rollouts(str(path), skip_invalid=True)
    assert any(f"{path}:2: invalid JSON" in e for e in rollouts.skipped)


@pytest.mark.parametrize("bad", [HUGE, DEEP], ids=["huge-int", "deep"])
def test_a_json_list_names_the_element(tmp_path, bad):
    from lightning_agents.datamodules.trajectories import RolloutFormatError, load_rollouts

    path = tmp_path / "rollouts.json"
    chat = [{"role": "user", "content": "What is 2+2?"}, {"role": "assistant", "content": "4"}]
    path.write_text("[" + json.dumps({"task_id": 0, "traj": chat, "reward": 1.0}) + ",\n" + bad + "]")
    with pytest.raises(RolloutFormatError, match=rf"{path}:2: invalid JSON \(.* in element 1\)"):
        load_rollouts(str(path))
