"""Multi-turn agent rollouts on the real chat templates of ../shared/data (attached to the embedded
tokenizer): the token stream's assistant-masked tokens are exactly the sampled replies, tool results
sit outside the loss, a template that drops tool results is refused instead of hiding them, and
Llama 3.1/3.2's one-call-per-turn templates get an observation for a second call instead of
crashing the batch."""

from __future__ import annotations

import pytest
import torch
from chat_template_helpers import CALCULATOR, SPECIAL_WIDE, tokenizer_with_template

from lightning_agents.errors import LightningAgentsError
from lightning_agents.models import load_tokenizer
from lightning_agents.rollout import SamplingConfig, agent_turn
from lightning_agents.rollout.agent_loop import continuation_text, run_agent_loop, run_agent_rl
from lightning_agents.rollout.hf_engine import GenerationOutput
from lightning_agents.tasks import CalculatorTask
from lightning_agents.template_clock import render_chat_template

BEGIN, DS_BOS, DS_EOS = "<|begin_of_text|>", "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"
# template -> (eos, bos, the model's call to calculator(EXPR) in the template's own format)
HERMES = '<tool_call>\n{"name": "calculator", "arguments": {"expression": "EXPR"}}\n</tool_call>'
LLAMA = '{"name": "calculator", "parameters": {"expression": "EXPR"}}'
DEEPSEEK = (
    "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>calculator\n"
    '```json\n{"expression": "EXPR"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>'
)
TEMPLATES = {
    "qwen2_5.jinja": ("<|im_end|>", None, HERMES),
    "qwen3.jinja": ("<|im_end|>", None, HERMES),
    "qwen3_instruct_2507.jinja": ("<|im_end|>", None, HERMES),
    "smollm2.jinja": ("<|im_end|>", None, HERMES),
    "llama3_1.jinja": ("<|eot_id|>", BEGIN, LLAMA),
    "llama3_2.jinja": ("<|eot_id|>", BEGIN, LLAMA),
    "deepseekv3.jinja": (DS_EOS, DS_BOS, DEEPSEEK),
}


def _tokenizer(shared_data, name):
    eos, bos, _ = TEMPLATES.get(name, ("<|end|>", None, None))
    template = (shared_data / "chat_templates" / name).read_text()
    return tokenizer_with_template(load_tokenizer("embedded:student"), template, bos, eos, SPECIAL_WIDE)


class _ScriptedTokens:
    """A token-id sampler that "samples" scripted replies (each ending with the turn's end token)."""

    def __init__(self, tok, replies):
        self.tokenizer, self.replies, self.turn = tok, replies, 0
        self.stop_ids = [tok.eos_token_id]
        self.sampled: list[list[int]] = []

    def render(self, messages, tools=None):
        return render_chat_template(self.tokenizer, messages, tools=tools, tokenize=False, add_generation_prompt=True)

    def _next_reply(self) -> tuple[str, int]:
        """The next scripted reply (the last one repeats) and the stop token it ends with."""
        return self.replies[min(self.turn, len(self.replies) - 1)], self.tokenizer.eos_token_id

    def generate(self, prompts, num_samples=1, sampling=None, tools=None, seeds=None):
        tok = self.tokenizer
        text, stop = self._next_reply()
        self.turn += 1
        ids = tok(text, add_special_tokens=False)["input_ids"] + [stop]
        self.sampled.append(ids)
        rows = len(prompts)
        completion = torch.tensor([ids] * rows)
        return GenerationOutput(
            prompt_ids=torch.zeros((rows, 1), dtype=torch.long),
            prompt_mask=torch.ones((rows, 1), dtype=torch.long),
            completion_ids=completion,
            completion_mask=torch.ones_like(completion),
            logprobs=torch.full(completion.shape, -0.5),
            # the markers as the model wrote them (real Qwen tokenizers keep <tool_call> in decoded text)
            texts=[tok.decode(ids[:-1], skip_special_tokens=False)] * rows,
            truncated=torch.zeros(rows, dtype=torch.bool),
            entropies=torch.zeros(completion.shape),
        )


@pytest.mark.parametrize("name", sorted(TEMPLATES))
def test_masks_cover_exactly_the_sampled_replies_and_tool_results_are_shown(shared_data, name):
    tok = _tokenizer(shared_data, name)
    call = TEMPLATES[name][2]
    engine = _ScriptedTokens(tok, [call.replace("EXPR", "17*23"), call.replace("EXPR", "391+1"), "It is 392."])
    task = CalculatorTask(split="val", n=1)
    batch = run_agent_rl(engine, task, task.problems, num_samples=1, sampling=SamplingConfig(), max_turns=3)
    out, rollout = batch.out, batch.rollouts[0]
    assert rollout["info"]["tool_calls"] == 2 and rollout["info"]["finished"]
    ids, mask = out.completion_ids[0], out.loss_mask[0].bool()
    # the loss covers the sampled tokens, in order, and nothing the template inserted
    assert ids[mask].tolist() == [t for turn in engine.sampled for t in turn]
    assert torch.all(out.logprobs[0][mask] == -0.5) and torch.all(out.logprobs[0][~mask] == 0)
    glue = tok.decode(ids[~mask & out.completion_mask[0].bool()].tolist(), skip_special_tokens=False)
    assert "391" in glue and "392" in glue  # both tool results, outside the loss


def test_a_template_that_renders_no_tool_messages_is_refused_not_silently_emptied(shared_data):
    # Phi-3.5's template has no branch for the tool role: the glue after a call was just
    # "<|assistant|>", and the model went on as if its call had returned nothing.
    tok = _tokenizer(shared_data, "phi3_5.jinja")
    call = {"id": "c", "type": "function", "function": {"name": "calculator", "arguments": '{"expression": "1+2"}'}}
    msgs = [{"role": "user", "content": "1+2?"}, {"role": "assistant", "content": "", "tool_calls": [call]}]
    new = [{"role": "tool", "tool_call_id": "c", "name": "calculator", "content": "3"}]
    with pytest.raises(LightningAgentsError, match="does not render 'tool' messages"):
        continuation_text(tok, msgs, new, [CALCULATOR], None, ["<|end|>"])


def test_a_llama_tool_result_written_through_tojson_still_counts_as_shown(shared_data):
    tok = _tokenizer(shared_data, "llama3_1.jinja")
    call = {"id": "c", "type": "function", "function": {"name": "calculator", "arguments": '{"expression": "1"}'}}
    msgs = [{"role": "user", "content": "?"}, {"role": "assistant", "content": "", "tool_calls": [call]}]
    new = [{"role": "tool", "tool_call_id": "c", "name": "calculator", "content": 'line "one"\nline two'}]
    glue = continuation_text(tok, msgs, new, [CALCULATOR], None, ["<|eot_id|>"])
    assert '\\"one\\"\\nline two' in glue


@pytest.mark.parametrize("name", ["llama3_1.jinja", "llama3_2.jinja"])
def test_two_calls_in_one_llama_reply_are_an_observation_not_a_crash(shared_data, name):
    # Llama 3.1/3.2 raise "This model only supports single tool-calls at once!" on an assistant
    # message with two calls: the next render of the episode stopped the whole rollout batch.
    tok = _tokenizer(shared_data, name)
    two = LLAMA.replace("EXPR", "17*23") + "; " + LLAMA.replace("EXPR", "2+2")
    task = CalculatorTask(split="val", n=1)
    engine = _ScriptedTokens(tok, [two, "It is 391."])
    batch = run_agent_rl(engine, task, task.problems, num_samples=1, sampling=SamplingConfig(), max_turns=3)
    traj = batch.rollouts[0]["traj"]
    assert len(traj[-4]["tool_calls"]) == 1 and batch.rollouts[0]["info"]["tool_calls"] == 1
    assert traj[-3]["content"] == "391"
    refused = agent_turn.TOOL_CALLS_PER_TURN.format(limit=1, call='calculator({"expression": "2+2"})')
    assert traj[-2]["content"] == refused
    glue = tok.decode(batch.out.completion_ids[0][~batch.out.loss_mask[0].bool()].tolist())
    assert "only 1 tool call(s) per turn" in glue

    class _Texts:  # the text path (run_agent_loop renders every turn's conversation)
        def __init__(self):
            self.tokenizer, self.turn = tok, 0

        def generate(self, conversations, num_samples=1, sampling=None, tools=None):
            for c in conversations:
                render_chat_template(tok, c, tools=tools, tokenize=False, add_generation_prompt=True)
            self.turn += 1
            return type("Out", (), {"texts": [two if self.turn == 1 else "391."] * len(conversations)})()

    rollouts = run_agent_loop(_Texts(), task.problems, trials=1, task=task, max_turns=3)
    assert rollouts[0]["info"]["finished"] and rollouts[0]["info"]["tool_errors"] == 1
    assert agent_turn.model_calls_per_turn(tok) == 1


def test_templates_that_take_several_calls_per_turn_are_not_limited(shared_data):
    for name in ("qwen2_5.jinja", "qwen3.jinja", "deepseekv3.jinja", "smollm2.jinja"):
        assert agent_turn.model_calls_per_turn(_tokenizer(shared_data, name)) is None, name


def test_a_follow_up_user_turn_after_qwen3_reasoning_extends_the_stream(shared_data):
    # Qwen3 drops the <think> block of every assistant turn before the latest user message: a user's
    # next turn (BFCL multi-turn) after an episode that reasoned was refused, stopping the batch.
    tok = _tokenizer(shared_data, "qwen3.jinja")
    call = {"id": "c", "type": "function", "function": {"name": "calculator", "arguments": '{"expression": "1+2"}'}}
    msgs = [
        {"role": "user", "content": "1+2?"},
        {"role": "assistant", "content": "<think>\nuse the tool\n</think>\n\n", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c", "name": "calculator", "content": "3"},
        {"role": "assistant", "content": "<think>\nit said 3\n</think>\n\nIt is 3."},
    ]
    new = [{"role": "user", "content": "And times 4?"}]
    glue = continuation_text(tok, msgs, new, [CALCULATOR], None, ["<|im_end|>"])
    assert glue == "\n<|im_start|>user\nAnd times 4?<|im_end|>\n<|im_start|>assistant\n"


@pytest.mark.parametrize("name", ["qwen2_5.jinja", "llama3_1.jinja", "qwen3.jinja"])
def test_the_next_prompt_shows_the_models_earlier_call_as_it_wrote_it(shared_data, name):
    # Episodes keep OpenAI-format calls (arguments as a JSON string); Qwen2.5's and Llama 3.1's
    # templates tojson them whole, so the text path showed every earlier call double-encoded.
    from lightning_agents.rollout import HFGenerationEngine
    from lightning_agents.rollout.agent_turn import ModelReply, apply_reply, model_tool_call_style, start_episode

    tok = _tokenizer(shared_data, name)
    call = TEMPLATES[name][2].replace("EXPR", "17*23")
    task = CalculatorTask(split="val", n=1)
    episode = start_episode(task, task.problems[0], tool_call_style=model_tool_call_style(tok))
    apply_reply(episode, ModelReply(call))
    assert isinstance(episode.messages[-2]["tool_calls"][0]["function"]["arguments"], str)
    text = HFGenerationEngine(torch.nn.Linear(1, 1), tok).render(episode.messages, task.tools)
    key = "parameters" if "llama" in name else "arguments"
    assert f'"{key}": {{"expression": "17*23"}}' in text
    assert '\\"expression\\"' not in text
