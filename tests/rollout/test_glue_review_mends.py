"""The review's findings on the session-44 glue / stop-token change (commit bc948ef), mended.

MED1: ``stop_token_ids`` leaves the tokenizer's EOS out where the chat template writes it inside a
turn (a tokenizer whose EOS is Solar-Open's ``<|end|>``, which the template writes after the
reasoning), so the HF engine samples a reasoning turn on to its answer. vLLM stops at the EOS
whatever ``stop_token_ids`` says unless ``ignore_eos`` is set (vllm-project/vllm @018d5dc78efa,
``vllm/v1/core/sched/utils.py`` ``check_stop`` stops at ``sampling_params.eos_token_id``, which
``vllm/sampling_params.py`` ``update_from_generation_config`` sets only when ``not ignore_eos``;
the completions server takes ``ignore_eos`` in its request, ``vllm/entrypoints/openai/completion/
protocol.py`` ``CompletionRequest`` @002032ee2b18). Both vLLM engines still ended such a turn after
its thought, and the server engine then added the EOS a second time (NaN log-prob).

MED2: Gemma 4's template writes a message's text after its calls' responses; bc948ef cut that text
from the glue. The trained stream is the sampled tokens plus the template's rendering of what
follows them, which holds the text again (every served request shows it there).

LOW: the warning for a template whose answer closer is written inside a turn named Solar-Open and
``<|flush|>`` for any template, called the stop list (``['<|calls|>']``, a call stop) an answer stop,
and was keyed on the template's first 200 characters and the tokenizer's name.
"""

from __future__ import annotations

import logging
import sys
import types
from types import SimpleNamespace

import pytest
from chat_template_helpers import OUTPUTS
from test_glue_leftovers import _tok
from vllm_server_fake import sample

from lightning_agents.rollout import SamplingConfig, hf_engine
from lightning_agents.rollout.agent_loop import continuation_text
from lightning_agents.rollout.hf_engine import stop_token_ids, template_messages
from lightning_agents.tasks import CalculatorTask
from lightning_agents.template_clock import render_chat_template

SOLAR = OUTPUTS / "upstage-Solar-Open-100B.jinja"
GEMMA4 = OUTPUTS / "google-gemma-4-31B-it.jinja"
PROMPT = [[{"role": "user", "content": "What is 17*23?"}]]
SAMPLE = SamplingConfig(max_new_tokens=8, temperature=1.0)


def _as_vllm_serves(script):
    """A fake server's reply that stops the scripted tokens as vLLM's ``check_stop`` does: at the
    EOS unless the request sets ``ignore_eos`` (``stop_reason`` None, the EOS kept), else at the
    first of its ``stop_token_ids`` (``stop_reason`` that id)."""

    def reply(body, k):
        eos, stops = script["eos"], body.get("stop_token_ids") or []
        for n, token in enumerate(script["tokens"], 1):
            if token == eos and not body.get("ignore_eos"):
                return [sample(script["tokens"][:n], finish="stop")]
            if token in stops:
                return [sample(script["tokens"][:n], finish="stop", stop_reason=token)]
        return [sample(script["tokens"], finish="length")]

    return reply


# ----------------------------------------------------------------------------- MED1: vLLM stops at the EOS
def test_MED1_a_server_sample_stopped_at_an_eos_written_inside_a_turn_is_not_given_a_second_eos(server):
    """The review's repro: the server ended the sample at the EOS <|end|> (stop, ``stop_reason``
    None) and the engine, no longer finding it among its stops, appended it again: [40, 41, 467, 467]
    with a NaN log-prob. The EOS is added back only where it is a stop token."""
    pytest.importorskip("openai")
    from lightning_agents.rollout.vllm_engine import VLLMServerEngine

    tok = _tok(SOLAR)  # REAL_TEMPLATES' EOS for Solar-Open: <|end|>
    end = tok.convert_tokens_to_ids("<|end|>")
    assert tok.eos_token_id == end
    srv = server(lambda body, k: [sample([40, 41, end], [-0.1, -0.1, -0.1], "stop")])
    out = VLLMServerEngine(srv.url, tok).generate(PROMPT, num_samples=1, sampling=SAMPLE)
    n = int(out.completion_mask[0].sum())
    assert out.completion_ids[0, :n].tolist() == [40, 41, end]


def test_MED1_the_server_engine_samples_a_reasoning_turn_past_the_eos_its_template_writes_inside_it(server):
    """Against a server that stops as vLLM does: without ``ignore_eos`` in the request the turn
    ended at the thought's <|end|>; with it, the sample goes on to the answer and stops at a stop id."""
    pytest.importorskip("openai")
    from lightning_agents.rollout.vllm_engine import VLLMServerEngine

    tok = _tok(SOLAR)
    end, calls = tok.convert_tokens_to_ids("<|end|>"), tok.convert_tokens_to_ids("<|calls|>")
    tokens = [40, 41, end, 42, 43, calls]  # thought <|end|> ... a turn that ends at a stop id
    srv = server(_as_vllm_serves({"eos": tok.eos_token_id, "tokens": tokens}))
    engine = VLLMServerEngine(srv.url, tok)
    assert end not in engine.stop_ids and calls in engine.stop_ids
    out = engine.generate(PROMPT, num_samples=1, sampling=SAMPLE)
    body = next(b for p, b in srv.requests if p.endswith("/completions"))
    assert body.get("ignore_eos") is True and body["stop_token_ids"] == list(engine.stop_ids)
    n = int(out.completion_mask[0].sum())
    assert out.completion_ids[0, :n].tolist() == tokens and not bool(out.truncated[0])


def _recording_vllm(monkeypatch):
    from test_vllm_engines import _FakeLLM

    class _RecordingLLM(_FakeLLM):
        def generate(self, prompts, params, use_tqdm=False):  # records the params, samples nothing
            self.params = params
            done = SimpleNamespace(token_ids=[], logprobs=[], finish_reason="length")
            return [SimpleNamespace(outputs=[done]) for _ in prompts]

    module = types.ModuleType("vllm")
    module.LLM = _RecordingLLM
    module.SamplingParams = lambda **kw: SimpleNamespace(**kw)
    monkeypatch.setitem(sys.modules, "vllm", module)
    _FakeLLM.instances.clear()
    return _FakeLLM.instances


def test_MED1b_the_colocated_vllm_engine_does_not_stop_at_an_eos_that_stop_token_ids_left_out(monkeypatch):
    """The same on the colocated engine: SamplingParams must ignore the EOS there, with the stop ids."""
    from lightning_agents.rollout.vllm_engine import VLLMGenerationEngine

    instances = _recording_vllm(monkeypatch)
    tok = _tok(SOLAR)
    engine = VLLMGenerationEngine("embedded:student", tok)
    assert tok.eos_token_id not in engine.stop_ids
    engine.generate(PROMPT * 2, num_samples=1, sampling=SamplingConfig(max_new_tokens=4, temperature=1.0))
    params = instances[-1].params
    assert [getattr(sp, "ignore_eos", False) for sp in params] == [True, True]
    assert all(sp.stop_token_ids == list(engine.stop_ids) for sp in params)


def test_an_eos_that_stops_generation_is_not_ignored_and_a_server_that_left_it_out_gets_it_back(server, monkeypatch):
    """Regression guard (passes before and after): where the EOS is a stop token neither engine
    sends ``ignore_eos``, and a server sample that stopped at the EOS and left it out still gets it."""
    pytest.importorskip("openai")
    from lightning_agents.rollout.vllm_engine import VLLMGenerationEngine, VLLMServerEngine

    tok = _tok(SOLAR, eos="<|endoftext|>")  # the real Solar-Open EOS, never written inside a turn
    eos = tok.eos_token_id
    srv = server(lambda body, k: [sample([40, 41], finish="stop")])
    engine = VLLMServerEngine(srv.url, tok)
    assert eos in engine.stop_ids
    out = engine.generate(PROMPT, num_samples=1, sampling=SAMPLE)
    assert "ignore_eos" not in next(b for p, b in srv.requests if p.endswith("/completions"))
    assert out.completion_ids[0].tolist() == [40, 41, eos]
    instances = _recording_vllm(monkeypatch)
    VLLMGenerationEngine("embedded:student", tok).generate(PROMPT, num_samples=1, sampling=SAMPLE)
    assert not hasattr(instances[-1].params[0], "ignore_eos")


# ----------------------------------------------------------------------------- MED2: Gemma 4 text then call
def test_MED2_gemma4_glue_after_a_text_then_call_turn_is_what_the_template_writes_after_the_call():
    """What a served model sees after its call is the template's rendering
    ``<|tool_response>response:...<tool_response|>Let me compute.<turn|>\\n``; the glue that stopped
    at ``<tool_response|>`` trained the next turn in a context no served request has."""
    tok = _tok(GEMMA4)
    tools = CalculatorTask(split="val", n=1).tools
    call = {
        "id": "c1x1y1z1q",
        "type": "function",
        "function": {"name": "calculator", "arguments": {"expression": "17*23"}},
    }
    conv = [
        {"role": "user", "content": "What is 17*23?"},
        {"role": "assistant", "content": "Let me compute.", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1x1y1z1q", "name": "calculator", "content": "391"},
    ]
    served = render_chat_template(
        tok, template_messages(tok, conv), tools=tools, tokenize=False, add_generation_prompt=True
    )
    glue = continuation_text(tok, conv[:2], conv[2:], tools, None, ["<turn|>", "<|tool_response>"], "<|tool_response>")
    assert served.endswith("<|tool_response>" + glue)
    assert glue.endswith("<tool_response|>Let me compute.<turn|>\n")  # the served rendering's tail


# ----------------------------------------------------------------------------- LOW: the no-answer-stop warning
def _warning(caplog, tok, config=None) -> str:
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger=hf_engine.__name__):
        stop_token_ids(tok, config)
    return caplog.text


def test_the_no_answer_stop_warning_names_no_model_and_calls_no_call_stop_an_answer_stop(caplog, monkeypatch):
    """It said "Solar-Open ... <|flush|>" for any template (GigaChat3's too), and for a tokenizer
    whose EOS is <|end|> that "an answer stops only at ['<|calls|>']", a call's stop token."""
    monkeypatch.setattr(hf_engine, "_NO_ANSWER_STOP", set())
    text = _warning(caplog, _tok(SOLAR))
    assert "closes an answer with <|end|>" in text
    assert "generation stops only at ['<|calls|>']" in text
    assert "Solar" not in text and "<|flush|>" not in text and "an answer stops only at" not in text
    text = _warning(caplog, _tok(SOLAR, eos="<|endoftext|>"))
    assert "generation stops only at ['<|endoftext|>', '<|calls|>']" in text


def test_the_no_answer_stop_warning_is_once_per_whole_template_and_stop_list(caplog, monkeypatch):
    """Keyed on the template's first 200 characters and the tokenizer's name, it stayed silent for a
    second template that starts the same (a variant of a model's template) and for a second tokenizer
    with another EOS; the same tokenizer again is still warned once."""
    monkeypatch.setattr(hf_engine, "_NO_ANSWER_STOP", set())
    tok = _tok(SOLAR)
    assert "closes an answer" in _warning(caplog, tok)
    assert _warning(caplog, tok) == ""  # once
    variant = _tok(SOLAR)
    variant.chat_template = tok.chat_template + "{# a variant #}"
    assert "closes an answer" in _warning(caplog, variant)
    assert "closes an answer" in _warning(caplog, _tok(SOLAR, eos="<|endoftext|>"))
