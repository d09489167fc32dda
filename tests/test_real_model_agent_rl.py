"""``real_model`` tier: multi-turn agent rollouts for RL on SmolLM2-135M-Instruct with real chat
templates (Qwen2.5's, which renders tool calls and results, and Qwen3's, which rewrites history):
the first turn is a calculator call written in the template's format (its log-probs taken by a
forward pass of the model), the later turns are sampled at temperature 0.7 and top-p 0.9 from the
episode's token stream. The trainer's log-probs of every sampled token equal the sampler's within
1e-3 across turns, and the loss covers exactly those tokens. Run with ``python -m pytest -m real_model``."""

from __future__ import annotations

import pytest
import torch
from test_real_model import smollm2, smollm2_gguf  # noqa: F401  (session fixtures)

from lightning_agents.models import load_model_and_tokenizer
from lightning_agents.modules.rstg import completion_logprobs
from lightning_agents.rollout import HFGenerationEngine, SamplingConfig
from lightning_agents.rollout.agent_loop import run_agent_rl
from lightning_agents.rollout.hf_engine import GenerationOutput
from lightning_agents.tasks import CalculatorTask

pytestmark = pytest.mark.real_model

CALL = '<tool_call>\n{"name": "calculator", "arguments": {"expression": "17*23"}}\n</tool_call>'
TEMPERATURE = 0.7


class _CallFirst(HFGenerationEngine):
    """The first turn is ``CALL`` plus the turn's end token, with the model's own log-probs of it;
    later turns are sampled by the HF engine."""

    turns = 0

    def generate(self, prompts, num_samples=1, sampling=None, tools=None, seeds=None, **kwargs):
        self.turns += 1
        if self.turns > 1:
            return super().generate(prompts, num_samples, sampling, tools, seeds, **kwargs)
        tok = self.tokenizer
        ids = tok(CALL, add_special_tokens=False)["input_ids"] + [tok.convert_tokens_to_ids("<|im_end|>")]
        rows = []
        with torch.no_grad():
            for prompt in prompts:
                logits = self.model(torch.tensor([list(prompt) + ids])).logits[0, len(prompt) - 1 : -1]
                logp = torch.log_softmax(logits.float() / sampling.temperature, -1)
                rows.append(logp.gather(-1, torch.tensor(ids)[:, None]).squeeze(-1))
        n = len(prompts)
        prompt_ids, prompt_mask = self.encode_prompts(prompts)
        completion = torch.tensor([ids] * n)
        return GenerationOutput(
            prompt_ids=prompt_ids,
            prompt_mask=prompt_mask,
            completion_ids=completion,
            completion_mask=torch.ones_like(completion),
            logprobs=torch.stack(rows),
            texts=[CALL] * n,
            truncated=torch.zeros(n, dtype=torch.bool),
            entropies=torch.zeros(completion.shape),
        )


@pytest.mark.parametrize("template", ["qwen2_5.jinja", "qwen3.jinja"])
def test_multi_turn_sampler_and_trainer_agree_on_the_real_model(smollm2, shared_data, template):  # noqa: F811
    model, tok = load_model_and_tokenizer(smollm2)
    tok.chat_template = (shared_data / "chat_templates" / template).read_text()
    engine = _CallFirst(model.float().eval(), tok)
    task = CalculatorTask(split="val", n=2)
    sampling = SamplingConfig(max_new_tokens=32, temperature=TEMPERATURE, top_p=0.9)
    batch = run_agent_rl(engine, task, task.problems, num_samples=2, sampling=sampling, max_turns=2, seeds=[1, 2])
    out = batch.out
    with torch.no_grad():
        logp, _ = completion_logprobs(
            model, out.prompt_ids, out.prompt_mask, out.completion_ids, out.completion_mask, temperature=TEMPERATURE
        )
    m = out.loss_mask.bool()
    assert all(r["info"]["tool_calls"] == 1 and r["info"]["turns"] == 2 for r in batch.rollouts)
    assert float((torch.exp(logp[m] - out.logprobs[m]) - 1).abs().max()) < 1e-3
    for row in range(len(batch.rollouts)):
        glue = tok.decode(out.completion_ids[row][~m[row] & out.completion_mask[row].bool()].tolist())
        assert "<tool_response>\n391\n</tool_response>" in glue and CALL not in glue
        assert tok.decode(out.completion_ids[row][m[row]].tolist()).startswith(CALL + "<|im_end|>")
