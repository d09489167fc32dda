"""Tool-call arguments logged as Python dict literals (``str(dict)``) instead of JSON.

Some harnesses write a call's arguments with ``str(dict)``: single quotes, ``True``/``None``. The
readers took only JSON and stopped on such a file. The real records below are the shared GPT-4o
airline run (``../shared/data/tau_bench``) and tau2 retail record, with their arguments rewritten so.
"""

import copy
import json
import re

import pytest

from lightning_agents.datamodules import _rollout_fields
from lightning_agents.datamodules._rollout_fields import PYTHON_LITERAL_MAX_CHARS, PYTHON_LITERAL_MAX_TOKENS
from lightning_agents.datamodules.trajectories import RolloutFormatError, load_rollouts
from lightning_agents.topology import curate_rollouts
from lightning_agents.topology.signatures import canonical_arguments


@pytest.fixture(scope="module")
def records(shared_data):
    return json.loads((shared_data / "tau_bench" / "gpt-4o-airline.json").read_text())[:12]


def _as_python(records):
    """The records with every call's arguments written as ``str(dict)``; how many were changed."""
    records = copy.deepcopy(records)
    changed = 0
    for record in records:
        for message in record["traj"]:
            for call in message.get("tool_calls") or []:
                text = str(json.loads(call["function"]["arguments"]))
                changed += text != call["function"]["arguments"]
                call["function"]["arguments"] = text
    return records, changed


def _calls(rollouts):
    return [[(s.name, canonical_arguments(s.arguments)) for s in r.steps if s.kind == "call"] for r in rollouts]


@pytest.mark.parametrize("suffix", [".json", ".jsonl"])
def test_python_literal_arguments_read_as_their_json_would(records, tmp_path, suffix, caplog):
    caplog.set_level("WARNING")
    python, changed = _as_python(records)
    assert changed > 20  # the rewrite is not JSON any more
    path = tmp_path / f"python{suffix}"
    json_path = tmp_path / f"json{suffix}"
    if suffix == ".jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in python))
        json_path.write_text("".join(json.dumps(r) + "\n" for r in records))
    else:
        path.write_text(json.dumps(python))
        json_path.write_text(json.dumps(records))
    got, expected = load_rollouts(path), load_rollouts(json_path)
    assert _calls(got) == _calls(expected)
    # Logged where a CLI user sees it (WARNING), with the count: the SFT data carries JSON the files did not write.
    rewritten = sum(a != b for a, b in zip(python, records))  # records with a call whose text changed
    assert rewritten == 9
    assert f"read the tool-call arguments of {rewritten} record(s) written as Python dict literals" in caplog.text
    # The messages SFT trains on carry JSON arguments, not the Python text (nor the record's own
    # text, which a JSON Lines reader keeps for later).
    for rollout, original in zip(got, expected):
        for message, want in zip(rollout.messages, original.messages):
            for call, want_call in zip(message.get("tool_calls") or [], want.get("tool_calls") or []):
                assert json.loads(call["function"]["arguments"]) == json.loads(want_call["function"]["arguments"])
    a, b = curate_rollouts(got), curate_rollouts(expected)
    assert a.sft == b.sft and [s.task_id for s in a.rl] == [s.task_id for s in b.rl]
    for conversation in a.sft_conversations():
        for message in conversation["messages"]:
            for call in message.get("tool_calls") or []:
                json.loads(call["function"]["arguments"])


def test_true_none_and_nested_literals_become_json(records, tmp_path):
    records = copy.deepcopy(records[:3])
    i = next(i for i, m in enumerate(records[2]["traj"]) if m.get("tool_calls"))
    records[2]["traj"][i]["tool_calls"][0]["function"]["arguments"] = (
        "{'reservation_id': 'ZFA04Y', 'insurance': True, 'note': None, 'legs': [{'n': 1, 'x': 2.5}], 'q': \"it's\", "
        "'seats': ('12A', '12B')}"
    )
    path = tmp_path / "literals.json"
    path.write_text(json.dumps(records))
    rollout = load_rollouts(path)[2]
    call = next(s for s in rollout.steps if s.kind == "call")
    expected = {
        "reservation_id": "ZFA04Y",
        "insurance": True,
        "note": None,
        "legs": [{"n": 1, "x": 2.5}],
        "q": "it's",
        "seats": ["12A", "12B"],  # a tuple reads as a list, as in Hermes' text calls
    }
    assert json.loads(call.arguments) == expected
    assert json.loads(rollout.messages[i]["tool_calls"][0]["function"]["arguments"]) == expected


def test_tau2_python_literal_arguments(shared_data, tmp_path):
    record = json.loads((shared_data / "tau2_bench" / "retail_example_trajectory.json").read_text())
    call = record["simulation_run"]["messages"][4]["tool_calls"][0]
    arguments = call["arguments"]
    call["arguments"] = str(arguments)
    assert "'" in call["arguments"]
    path = tmp_path / "tau2.json"
    path.write_text(json.dumps(record))
    (rollout,) = load_rollouts(path)
    step = next(s for s in rollout.steps if s.kind == "call")
    assert step.arguments == arguments


def _refused(records, tmp_path, text):
    """The third record's first call given ``text`` as its arguments: the file, the message's
    index of that call, and the refusal's message."""
    records = copy.deepcopy(records[:3])
    i = next(i for i, m in enumerate(records[2]["traj"]) if m.get("tool_calls"))
    records[2]["traj"][i]["tool_calls"][0]["function"]["arguments"] = text
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(records))
    with pytest.raises(RolloutFormatError) as info:
        load_rollouts(path)
    return path, i, str(info.value)


@pytest.mark.parametrize(
    "text, why",
    [
        ("{1: 'a'}", "it has an object key that is not a string"),
        ("{'a': {1, 2}}", "it holds a set, which is not JSON"),
        ("{'a': 1e999}", "it holds inf, which is not JSON"),
        ("{'a', 'b'}", "a set, not a dict"),
        ("['a', 'b']", "it does not start with '{'"),
        ("{'a': open('x')}", "it holds a Call expression, not a literal"),  # never evaluated
        ("{'a': 1", "SyntaxError"),
        ("reservation ZFA04Y", "it does not start with '{'"),
    ],
)
def test_text_that_is_neither_names_the_file_record_field_and_setting(records, tmp_path, text, why):
    path, i, message = _refused(records, tmp_path, text)
    assert message.startswith(f"{path}[2]: traj[{i}].tool_calls[0].function.arguments is not valid JSON (")
    assert f"nor a Python dict literal ({why}" in message
    assert "skip_invalid" in message and message.endswith("(openai format)")
    skipped = load_rollouts(path, skip_invalid=True)
    assert len(skipped) == 2 and skipped.skipped == [message]


@pytest.mark.parametrize(
    "text, why",
    [
        # Python reads each of these, but as something else than the text says, or than a tool
        # reading JSON would have: str(dict) writes none of them.
        ('{"path": "C:\\temp\\x41"}', "str(dict) writes {'path': 'C:\\tempA'..."),  # a Windows path
        ("{'s': '\\101'}", "str(dict) writes {'s': 'A'}"),  # an octal escape
        ("{'n': 0x10}", "str(dict) writes {'n': 16}"),
        ("{'n': 1_000}", "str(dict) writes {'n': 1000}"),
        ("{'s': 'ab' 'cd'}", "str(dict) writes {'s': 'abcd'}"),
        ("{'a': 1,}", "str(dict) writes {'a': 1}"),
        ("{'a': 1, 'a': 2}", "str(dict) writes {'a': 2}"),
        # A model's own invalid JSON: its tool would have refused the call.
        ('{"refund": True, "note": None}', "str(dict) writes {'refund': True, 'n..."),
        ('{"pattern": "\\d+"}', "str(dict) writes {'pattern': '\\\\d+'}"),
    ],
)
def test_text_python_reads_otherwise_than_str_dict_writes_is_refused(records, tmp_path, text, why):
    path, i, message = _refused(records, tmp_path, text)
    assert message.startswith(f"{path}[2]: traj[{i}].tool_calls[0].function.arguments is not valid JSON (")
    assert "nor a Python dict literal (not what str(dict) writes: Python reads it as a value that" in message
    assert why in message and "skip_invalid" in message and message.endswith("(openai format)")
    assert len(load_rollouts(path, skip_invalid=True)) == 2


def _with_arguments(records, tmp_path, text, name="args.json"):
    """The first three records with the first call of the third one's arguments set to ``text``."""
    records = copy.deepcopy(records[:3])
    i = next(i for i, m in enumerate(records[2]["traj"]) if m.get("tool_calls"))
    records[2]["traj"][i]["tool_calls"][0]["function"]["arguments"] = text
    path = tmp_path / name
    path.write_text(json.dumps(records))
    return path, i


def test_a_python_literal_of_many_tokens_is_refused_before_it_is_parsed(records, tmp_path):
    # ast.literal_eval builds a syntax tree first: a 4 MB literal list of small ints took 1.9 GB
    # and 12 s. Its cost is in tokens (2.7 million here), counted without parsing.
    text = "{'a': [" + "0, " * 1_333_333 + "0]}"
    path, _ = _with_arguments(records, tmp_path, text, "long.json")
    with pytest.raises(
        RolloutFormatError, match=r"nor a Python dict literal \(over 100,000 tokens, the most read as a Python literal"
    ):
        load_rollouts(path)
    # At the limit it is read.
    text = "{'a': [" + "0, " * (PYTHON_LITERAL_MAX_TOKENS // 2 - 4) + "0]}"
    path, _ = _with_arguments(records, tmp_path, text, "limit.json")
    assert len(load_rollouts(path)) == 3


def test_a_long_str_dict_of_few_tokens_is_read(records, tmp_path):
    # A file-writing call's str(dict): 335,056 characters, mostly one string (refused by the
    # 262,144-character cap of 21230d2).
    value = {"path": "src/app.py", "content": "def f(x):\n    return x\n" * 13_400, "overwrite": True}
    path, i = _with_arguments(records, tmp_path, str(value))
    (_, _, third) = load_rollouts(path)
    assert len(str(value)) == 335_056
    assert third.messages[i]["tool_calls"][0]["function"]["arguments"] == json.dumps(value)


def test_the_character_cap_refuses_before_the_text_is_scanned(records, tmp_path, monkeypatch):
    monkeypatch.setattr(_rollout_fields, "PYTHON_LITERAL_MAX_CHARS", 1_000)
    text = "{'a': '" + "x" * 1_000 + "'}"
    path, _ = _with_arguments(records, tmp_path, text)
    with pytest.raises(RolloutFormatError, match=r"\(1,009 characters, over the 1,000 read as a Python literal"):
        load_rollouts(path)
    assert PYTHON_LITERAL_MAX_CHARS == 1 << 24


@pytest.mark.parametrize(
    "text",
    [
        # Python 3.8-3.9 (Unicode 12-13) escape U+1FAE0 (Unicode 14), which 3.10+ write as it is.
        "{'note': 'melting \\U0001fae0 face', 'reservation_id': 'ZFA04Y'}",
        "{'note': 'melting \U0001fae0 face', 'reservation_id': 'ZFA04Y'}",
        # Python 3.12+ (Unicode 15) write U+1FAE8 as it is, which 3.10-3.11 escape.
        "{'note': 'shaking \U0001fae8 face', 'reservation_id': 'ZFA04Y'}",
        "{'note': 'shaking \\U0001fae8 face', 'reservation_id': 'ZFA04Y'}",
    ],
)
def test_str_dict_written_by_another_pythons_unicode_database_is_read(records, tmp_path, text):
    # 21230d2 refused these: repr on the reader's Python escapes (or not) the character otherwise.
    path, i = _with_arguments(records, tmp_path, text)
    (_, _, third) = load_rollouts(path)
    arguments = json.loads(third.messages[i]["tool_calls"][0]["function"]["arguments"])
    assert arguments["note"] in ("melting \U0001fae0 face", "shaking \U0001fae8 face")


@pytest.mark.parametrize(
    "text, why",
    [
        # A Windows path: 'é' and '☃' are as old as Unicode, so their escapes are never a Python's own.
        ("{'path': 'C:\\u00e9t\\u2603'}", "not what str(dict) writes"),
        ("{'path': 'C:\\xe9t'}", "not what str(dict) writes"),
        # Python parses an f-string's braces: what it hides would not be counted.
        ("{'a': f'{1}'}", "it holds a prefixed string"),
        ("{'a': 1 # note\n}", "it holds a comment, line break or backslash outside its strings"),
    ],
)
def test_escapes_of_old_characters_and_hidden_syntax_are_still_refused(records, tmp_path, text, why):
    path, _ = _with_arguments(records, tmp_path, text)
    with pytest.raises(RolloutFormatError, match=re.escape(f"nor a Python dict literal ({why}")):
        load_rollouts(path)


def test_an_escaped_backslash_before_u_is_kept_as_written(records, tmp_path):
    # '\\\\U0001fae8' is a backslash and the text "U0001fae8", not the character.
    text = "{'pattern': '\\\\U0001fae8'}"
    path, i = _with_arguments(records, tmp_path, text)
    (_, _, third) = load_rollouts(path)
    assert json.loads(third.messages[i]["tool_calls"][0]["function"]["arguments"]) == {"pattern": "\\U0001fae8"}
