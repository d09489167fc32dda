"""TopoCurate's long-conversation windows count a turn's reasoning as the row renders it (session 44).

Solar-Open's template reads an assistant's reasoning from ``reasoning`` only
(``tests/data/tool_call_outputs/templates/upstage-Solar-Open-100B.jinja``, llama.cpp's
``models/templates/``); curated messages keep it as ``reasoning_content``. The windows were counted
on the messages as they were, without the reasoning, so a window that fitted by that count was
tokenized longer than ``max_length`` and cut, losing its last trained turn.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from chat_template_helpers import OUTPUTS, REAL_TEMPLATES, tokenizer_with_template

from lightning_agents.datamodules.topocurate import TopoCurateDataModule
from lightning_agents.models import load_tokenizer
from lightning_agents.tasks.arithmetic import CALCULATOR_TOOL

SOLAR = OUTPUTS / "upstage-Solar-Open-100B.jinja"
THOUGHT = "Let me think about this step by step, carefully checking every digit of the sum. " * 3


def _trial(task: str, trial: int, correct: bool) -> dict:
    said = "4" if correct else "5"
    call = {
        "id": f"c{trial}x{task[-1]}abcd",
        "type": "function",
        "function": {"name": "calculator", "arguments": '{"expression": "2 + 2"}'},
    }
    return {
        "task_id": task,
        "trial": trial,
        "reward": float(correct),
        "info": {"reference": "4", "verifier": "lightning_agents.rewards.arithmetic.ArithmeticVerifier"},
        "tools": [CALCULATOR_TOOL],
        "traj": [
            {"role": "user", "content": f"Hello, I have a question for {task}."},
            {"role": "assistant", "content": "Sure, ask.", "reasoning": THOUGHT},
            {"role": "user", "content": "What is 2 + 2?"},
            {"role": "assistant", "content": "", "tool_calls": [call], "reasoning": THOUGHT},
            {"role": "tool", "tool_call_id": call["id"], "name": "calculator", "content": said},
            {"role": "assistant", "content": f"The answer is {said}.", "reasoning": THOUGHT},
        ],
    }


def test_windows_count_the_reasoning_the_template_renders(tmp_path):
    _, bos, special = REAL_TEMPLATES[SOLAR]
    tok = tokenizer_with_template(load_tokenizer("embedded:student"), SOLAR.read_text(), bos, "<|endoftext|>", special)
    tok.save_pretrained(tmp_path / "tok")
    path = tmp_path / "rollouts.json"
    path.write_text(json.dumps([_trial(f"task{t}", k, k != 1) for t in range(3) for k in range(3)]))

    def module(max_length):
        dm = TopoCurateDataModule(
            rollouts=[str(path)], cache_dir=None, tokenizer=str(tmp_path / "tok"), max_length=max_length
        )
        dm.setup("fit")
        return dm

    whole = max(len(r["input_ids"]) for r in module(4096).datasets["fit"])
    # Between the length without the last turns' reasoning and with it: the whole conversation no
    # longer fits, so it is split at the second user turn instead of being cut from the right.
    dm = module(whole - 20)
    rows = dm.datasets["fit"]
    assert len(rows) > len(dm.curated["sft"])  # split into windows
    assert all(len(r["input_ids"]) < whole - 20 for r in rows)
