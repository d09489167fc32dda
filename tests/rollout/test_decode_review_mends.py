"""Solar-Open replies read with their marker tokens (11f8ab1), the review's findings: a reasoning
that mentions ``</think>`` is not scored as the answer; an RSTG teacher cache filled with the old
decode (glued answers, pass rates that scored the reasoning) is not served; HFlow's retry sends a
completion back as answer plus reasoning, not markers inside the content (session 44)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from chat_template_helpers import OUTPUTS, REAL_TEMPLATES, tokenizer_with_template

from lightning_agents.hflow import (
    ArithmeticTask,
    Backbone,
    BackbonePool,
    Node,
    Workflow,
    WorkflowExecutor,
)
from lightning_agents.tasks import extract_stated_answer, strip_reasoning

SOLAR = OUTPUTS / "upstage-Solar-Open-100B.jinja"


# --- LOW-A: strip_reasoning reads `</think>` before Solar's markers ---------------------------------
@pytest.mark.parametrize(
    "reasoning",
    [
        "HTML-ish tags such as </think> close a block. So the answer is 10.",
        "A </think> here. So the answer is 10.",
    ],
)
def test_a_solar_reasoning_that_mentions_a_think_close_tag_is_not_scored(
    reasoning,
):
    text = f"<|think|>{reasoning}<|end|><|begin|>assistant<|content|>I counted them all."
    assert strip_reasoning(text) == "I counted them all."
    assert extract_stated_answer(text) is None


# --- MED-B: RSTG's teacher cache serves pass rates and answers computed from the old decode ---------
def test_a_solar_teacher_cache_filled_before_the_marked_decode_is_not_served(tmp_path, monkeypatch):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "modules"))
    from test_rstg import _module, _records

    import lightning_agents.modules.rstg as rstg_mod

    # the settings teacher_key hashed up to 11f8ab1, when a Solar reply was scored on "RSNassistantANS"
    before = {
        "k", "max_new_tokens", "temperature", "top_p", "dtype", "chat_template", "chat_template_kwargs", "tools",
        "reference", "verifier", "success_threshold", "teacher_files", "task", "max_turns", "max_tool_calls", "seed",
    }  # fmt: skip
    seen = []
    real = rstg_mod.teacher_cache_key
    monkeypatch.setattr(
        rstg_mod,
        "teacher_cache_key",
        lambda t, p, s: seen.append((t, p, s)) or real(t, p, s),
    )
    m = _module(tmp_path)
    rec = _records(1)[0]
    plain_key = m.teacher_key(rec)
    teacher, prompt, settings = seen[-1]
    # guard: a template the engines decode as before keeps its key (its caches stay valid)
    assert plain_key == real(teacher, prompt, {k: v for k, v in settings.items() if k in before})
    _, bos, special = REAL_TEMPLATES[SOLAR]
    # the student's tokenizer with Solar-Open's template and its special tokens (as a Solar student has)
    m.tokenizer = tokenizer_with_template(m.tokenizer, SOLAR.read_text(), bos, "<|endoftext|>", special)
    solar_key = m.teacher_key(rec)
    teacher, prompt, settings = seen[-1]
    assert solar_key != real(teacher, prompt, {k: v for k, v in settings.items() if k in before})


# --- LOW-C: HFlow's retry sends a Solar completion back with its markers as content -----------------
def test_the_programmer_retry_sends_a_solar_completion_back_as_answer_and_reasoning():
    from lightning_agents.hflow import Completion

    class SolarScripted(Backbone):
        tool_call_style = "solar_open"  # what LocalHFBackbone reports for Solar's template

        def __init__(self):
            super().__init__("solar", 1.0, 1.0)
            self.seen = []

        def _complete(self, requests):
            out = []
            for r in requests:
                self.seen.append(r.messages)
                code = "print(undefined_name)" if len(r.messages) <= 2 else "print(sum(range(5)) * 3)"
                out.append(
                    Completion(
                        f"<|think|>Let me write it.<|end|><|begin|>assistant<|content|>```python\n{code}\n```",
                        10,
                        5,
                    )
                )
            return out

    backbone = SolarScripted()
    one = ArithmeticTask("val", n=1)
    traces = WorkflowExecutor(one, BackbonePool([backbone])).run(
        Workflow([Node("p", "programmer", backbone="solar", params={"retries": 1})]),
        one.problems,
    )
    assert traces[0].answer == "30"
    sent = backbone.seen[1][-2]
    assert sent["role"] == "assistant"
    # the template wraps content in <|content|>...<|end|>: marker text there is a second assistant turn
    assert "<|begin|>" not in sent["content"] and "<|think|>" not in sent["content"], sent
