"""An agent batch from a sampler that reports no entropies (vLLM) carries none (session 50).

``run_agent_rl`` filled such turns' entropies with zeros and laid them out as a tensor, so RSTG's
``soft_or`` selection read 0 as the student's entropy of every token and never ran the student pass it
makes where the sampler gives none (``out.entropies is None``), and ``train/entropy`` logged 0.
"""

from __future__ import annotations

import pytest
import torch
from test_rl_rows_per_user_turn import NEMO, _Policy, _replies, _ServedTokens, _template

from lightning_agents.models import load_tokenizer
from lightning_agents.rollout import SamplingConfig
from lightning_agents.rollout.agent_loop import run_agent_rl


@pytest.fixture(scope="module")
def base():
    return load_tokenizer("embedded:student")


class _NoEntropies(_ServedTokens):
    """The scripted sampler, reporting no entropies as vLLM's engines do."""

    def generate(self, prompts, num_samples=1, sampling=None, tools=None, seeds=None):
        out = super().generate(prompts, num_samples, sampling, tools, seeds)
        out.entropies = None
        return out


@pytest.mark.parametrize("rows", ["stream", "per_user_turn"])
def test_no_entropies_from_the_sampler_lays_out_none(base, rows):
    tok = _template(base, NEMO)
    script, stops = _replies(tok, calls=True)
    task = _Policy(split="val", n=1)
    for engine, expected in ((_ServedTokens(tok, script, stops), True), (_NoEntropies(tok, script, stops), False)):
        batch = run_agent_rl(engine, task, task.problems, num_samples=1, sampling=SamplingConfig(), rows=rows)
        assert int(batch.out.action_mask.sum()) > 0
        assert (batch.out.entropies is not None) == expected, engine
        if expected:
            assert isinstance(batch.out.entropies, torch.Tensor)
