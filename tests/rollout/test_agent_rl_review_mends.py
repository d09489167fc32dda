"""Multi-turn agent rollouts on real chat templates, the review of 7dd504a / fb480a0 (session 41):
the RL glue renders calls as the text path does (templates that iterate arguments as a mapping
stopped the batch at the first call), a JSON-escaped tool result counts as shown in both branches of
the glue, a template without a tool role is refused before any sampling on every path, the
per-turn observation names the call it refused, and an earlier message with more calls than a
template renders per message is rendered as one-call messages instead of crashing."""

from __future__ import annotations

import pytest
import torch
from chat_template_helpers import CALCULATOR, OURS, OUTPUTS, REAL_TEMPLATES, tokenizer_with_template
from test_agent_rl_real_templates import _ScriptedTokens, _tokenizer

from lightning_agents.errors import LightningAgentsError
from lightning_agents.models import load_tokenizer
from lightning_agents.rollout import HFGenerationEngine, SamplingConfig, agent_turn
from lightning_agents.rollout.agent_loop import continuation_text, run_agent_loop, run_agent_rl
from lightning_agents.rollout.agent_turn import ModelReply, apply_reply, model_tool_call_style, start_episode
from lightning_agents.tasks import CalculatorTask

XML = "<tool_call>\n<function=calculator>\n<parameter=expression>\n17*23\n</parameter>\n</function>\n</tool_call>"
GLM = "<tool_call>calculator<arg_key>expression</arg_key><arg_value>17*23</arg_value></tool_call>"
LLAMA = '{"name": "calculator", "parameters": {"expression": "EXPR"}}'
R7B = OUTPUTS / "CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja"


def _real(path, eos=None, bos=None):
    """A real template (tests/data) on the embedded tokenizer, with its eos/bos."""
    known_eos, known_bos, special = REAL_TEMPLATES.get(path, (eos, bos, None))
    from chat_template_helpers import SPECIAL_WIDE

    return tokenizer_with_template(
        load_tokenizer("embedded:student"),
        path.read_text(),
        bos or known_bos,
        eos or known_eos,
        special or SPECIAL_WIDE,
    )


def _call(i, arguments='{"expression": "1"}'):
    return {"id": f"c{i}", "type": "function", "function": {"name": "calculator", "arguments": arguments}}


# ------------------------------------------------------------------------------------------- H1
@pytest.mark.parametrize(
    ("name", "reply"), [("qwen3_coder.jinja", XML), ("qwen3_5_4b.jinja", XML), ("glm_4_6.jinja", GLM)]
)
def test_rl_token_path_continues_after_a_call_on_templates_that_iterate_arguments(name, reply):
    # continuation_text rendered the episode's calls with arguments as JSON strings; these templates
    # iterate them as a mapping (`|items`) or refuse a string, so the whole batch stopped at the first call.
    tok = _real(OURS / name)
    task = CalculatorTask(split="val", n=1)
    engine = _ScriptedTokens(tok, [reply, "It is 391."])
    batch = run_agent_rl(engine, task, task.problems, num_samples=2, sampling=SamplingConfig(), max_turns=3)
    for rollout in batch.rollouts:
        assert rollout["info"]["tool_calls"] == 1 and rollout["info"]["finished"]
    glue = tok.decode(batch.out.completion_ids[0][~batch.out.loss_mask[0].bool()].tolist())
    assert "391" in glue


# ------------------------------------------------------------------------------------------- M1
@pytest.mark.parametrize("content", ['{"result": 391}', "line one\nline two"])
@pytest.mark.parametrize("path", [R7B, OURS / "vllm_toolace.jinja"], ids=["command_r7b", "toolace"])
def test_json_escaped_tool_results_are_not_refused_in_the_second_branch(path, content):
    # Command R7B closes a conversation ending with the assistant with an empty CHATBOT turn and
    # ToolACE ends with an assistant header, so the glue is cut by turn ends; that branch looked for
    # the raw text only, while both write the result JSON-escaped, and the batch stopped.
    eos, bos = ("<|END_OF_TURN_TOKEN|>", "<BOS_TOKEN>") if path == R7B else (None, None)
    tok = _real(path, eos, bos)
    msgs = [{"role": "user", "content": "?"}, {"role": "assistant", "content": "", "tool_calls": [_call(0)]}]
    new = [{"role": "tool", "tool_call_id": "c0", "name": "calculator", "content": content}]
    glue = continuation_text(tok, msgs, new, [CALCULATOR], None, [tok.eos_token])
    assert "391" in glue or "line two" in glue


def test_a_dropped_message_in_the_second_branch_is_named_as_such(shared_data):
    # Qwen3 drops earlier reasoning, so its glue is cut by turn ends (the second branch); a new
    # message it leaves out was refused as "renders earlier turns differently", not the real cause.
    tok = _tokenizer(shared_data, "qwen3.jinja")
    msgs = [
        {"role": "user", "content": "?"},
        {"role": "assistant", "content": "<think>\nx\n</think>\n\nA", "tool_calls": [_call(0)]},
        {"role": "tool", "tool_call_id": "c0", "name": "calculator", "content": "391"},
        {"role": "assistant", "content": "<think>\ny\n</think>\n\nIt is 391."},
    ]
    # Qwen3's template has no branch for a `function` message: it renders nothing of it
    new = [{"role": "user", "content": "and?"}, {"role": "function", "content": "unseen 4711"}]
    with pytest.raises(LightningAgentsError, match="does not render 'function' messages"):
        continuation_text(tok, msgs, new, None, None, ["<|im_end|>"])


# ------------------------------------------------------------------------------------------- H2
class _NoSampling:
    """A text engine on a real template that fails the test if asked to generate."""

    def __init__(self, tok):
        self.tokenizer, self.calls = tok, 0

    def generate(self, *args, **kwargs):
        self.calls += 1
        raise AssertionError("sampled before the template was checked")


def test_the_text_path_refuses_a_template_that_drops_tool_results(shared_data):
    # Phi-3.5 renders no tool messages: run_agent_loop (the rollout command, SFT/TopoCurate inputs)
    # fed the model prompts without its results and wrote rollouts as if it had seen them.
    tok = _tokenizer(shared_data, "phi3_5.jinja")
    assert agent_turn.model_renders_tool_results(tok) is False
    task = CalculatorTask(split="val", n=1)
    engine = _NoSampling(tok)
    with pytest.raises(LightningAgentsError, match="does not render 'tool' messages"):
        run_agent_loop(engine, task.problems, trials=1, task=task, max_turns=3)
    assert engine.calls == 0


def test_the_rl_path_refuses_a_template_that_drops_tool_results_before_sampling(shared_data):
    # run_agent_rl refused Phi-3.5 only in the glue, after a whole generation batch had run.
    tok = _tokenizer(shared_data, "phi3_5.jinja")
    task = CalculatorTask(split="val", n=1)
    engine = _ScriptedTokens(tok, ["It is 391."])
    with pytest.raises(LightningAgentsError, match="does not render 'tool' messages"):
        run_agent_rl(engine, task, task.problems, num_samples=1, sampling=SamplingConfig(), max_turns=2)
    assert engine.sampled == []


@pytest.mark.parametrize("path", sorted(REAL_TEMPLATES), ids=lambda p: p.name)
def test_templates_that_render_tool_results_are_not_refused(path):
    # Only Phi-3.5 (no tool role) of the real templates drops a result; a template that refuses the
    # probe (Hermes without tools, Kimi's `append` in this jinja build) is "not known", not refused.
    if not path.is_file():
        pytest.skip(f"{path} is absent (../shared/data)")
    expected = False if path.name == "phi3_5.jinja" else (True, None)
    got = agent_turn.model_renders_tool_results(_real(path))
    assert got is expected if expected is False else got in expected, path.name


# ------------------------------------------------------------------------------------------- M2
def test_the_per_turn_observation_names_the_call_that_was_not_run(shared_data):
    # On the text path the dropped call is in no rendered message: "this call was not run" named nothing.
    tok = _tokenizer(shared_data, "llama3_1.jinja")
    task = CalculatorTask(split="val", n=1)
    e = start_episode(task, task.problems[0], tool_call_style=model_tool_call_style(tok), calls_per_turn=1)
    apply_reply(e, ModelReply(LLAMA.replace("EXPR", "17*23") + "; " + LLAMA.replace("EXPR", "2+2")))
    assert e.messages[-1]["content"] == (
        'error: only 1 tool call(s) per turn; calculator({"expression": "2+2"}) was not run, call it again'
    )


# ------------------------------------------------------------------------------------------- H3
def _two_call_history():
    return [
        {"role": "user", "content": "17*23 and 2+2?"},
        {"role": "assistant", "content": "", "tool_calls": [_call(0, '{"expression": "17*23"}'), _call(1)]},
        {"role": "tool", "tool_call_id": "c1", "name": "calculator", "content": "4"},
        {"role": "tool", "tool_call_id": "c0", "name": "calculator", "content": "391"},
        {"role": "tool", "tool_call_id": "call_0_invalid", "name": "invalid", "content": "error: malformed"},
    ]


def test_a_message_with_more_calls_than_the_limit_becomes_one_call_messages_each_with_its_result():
    from lightning_agents.rollout.hf_engine import one_call_per_message

    split = one_call_per_message(_two_call_history(), 1)
    assert [(m["role"], m.get("tool_call_id") or [c["id"] for c in m.get("tool_calls", [])]) for m in split] == [
        ("user", []),
        ("assistant", ["c0"]),
        ("tool", "c0"),
        ("assistant", ["c1"]),
        ("tool", "c1"),
        ("tool", "call_0_invalid"),
    ]
    assert one_call_per_message(_two_call_history(), None) == _two_call_history()


@pytest.mark.parametrize("name", ["llama3_1.jinja", "llama3_2.jinja"])
def test_a_one_call_template_renders_another_models_two_call_message(shared_data, name):
    # An HFlow verify node on a Llama backbone continuing an episode whose agent node (another
    # backbone) wrote two calls in one message: the template raised and the run stopped.
    tok = _tokenizer(shared_data, name)
    text = HFGenerationEngine(torch.nn.Linear(1, 1), tok).render(_two_call_history(), [CALCULATOR])
    assert text.index('"17*23"') < text.index("391") < text.index('"1"') < text.index('"4"')
    # the RL glue renders the same way
    new = [{"role": "user", "content": "thanks; and 5*5?"}]
    glue = continuation_text(tok, _two_call_history(), new, [CALCULATOR], None, ["<|eot_id|>"])
    assert "5*5" in glue
