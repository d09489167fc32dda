"""A cut-off JSONL line is reported at a column of that line (docs audit, session 39).

Before, each reader handed the parser the line with its newline, so a truncated third line read
``file.jsonl:3: invalid JSON (Expecting ',' delimiter at line 2 column 1)``: a second line that
contradicted the file line in front of it.
"""

import json
import re

import pytest

CONVERSATION = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}
PROMPT = {"prompt": "What is 1 + 1? Answer with a number.", "reference": "2"}


def _file(tmp_path, record):
    path = tmp_path / "cut.jsonl"
    whole = json.dumps(record)
    path.write_text(whole + "\n" + whole + "\n" + whole[:-1] + "\n" + whole + "\n")  # the third cut before its }
    return path, len(whole)


def _readers():
    from lightning_agents.commands.generate import read_generation_prompts
    from lightning_agents.datamodules.chat import read_conversations
    from lightning_agents.datamodules.prompts import read_prompt_records

    return {
        "sft conversations": lambda p: read_conversations(str(p)),
        "rl prompts": lambda p: read_prompt_records(str(p)),
        "generate prompts": read_generation_prompts,
    }


@pytest.mark.parametrize("reader", ["sft conversations", "rl prompts", "generate prompts"])
def test_a_cut_off_line_names_its_file_line_and_a_column_of_it(tmp_path, reader):
    path, end = _file(tmp_path, PROMPT if reader == "rl prompts" else CONVERSATION)
    with pytest.raises(ValueError) as exc:
        _readers()[reader](path)
    message = str(exc.value)
    assert message.startswith(f"{path}:3: invalid JSON ("), message
    assert "line 2" not in message, message
    # the position just past the line's last character, where the missing `}` (or `,`) belongs
    assert re.search(rf"Expecting ',' delimiter at column {end}\)", message), message
