"""The vLLM engines' logic with vLLM itself isolated (it needs a CUDA machine).

``FakeVLLM`` stands in for the ``vllm`` package: an ``LLM`` that samples with a Hugging Face copy
of the model it was created from and changes its weights only through the ``collective_rpc``
weight-loading path, so the tests see whether the trainer really pushes its weights and reads
the sampler's log-probs. The server engine is tested against a local HTTP server answering in the
OpenAI completions format vLLM uses. ``benchmarks/rstg_gpu_check.py`` runs the real thing on a GPU.
"""

from __future__ import annotations

import math
import sys
import types
from types import SimpleNamespace

import pytest
import torch
from fake_http import JSONHandler, serve

from lightning_agents.errors import LightningAgentsError
from lightning_agents.models import load_causal_lm, load_model_and_tokenizer
from lightning_agents.rollout import SamplingConfig
from lightning_agents.rollout.vllm_engine import pack_completions, parse_token_logprobs

PROMPTS = [
    [{"role": "user", "content": "Ava has 3 apples and gets 4 more. How many apples does Ava have now?"}],
    [{"role": "user", "content": "Ben buys 6 boxes with 7 coins each. How many coins does Ben buy?"}],
]


# ----------------------------------------------------------------------------- pure layout
def test_pack_completions_layout():
    _, tok = load_model_and_tokenizer("embedded:student")
    eos, pad = tok.eos_token_id, tok.pad_token_id
    prompt_ids = torch.tensor([[pad, 5, 6], [7, 8, 9]])
    prompt_mask = torch.tensor([[0, 1, 1], [1, 1, 1]])
    out = pack_completions(
        tok,
        prompt_ids,
        prompt_mask,
        2,
        [[10, 11, eos], [12], [13, eos, 14], [15, 16]],
        [[-0.1, -0.2, -0.3], [-0.4], [-0.5, math.nan, -0.6], [-0.7, -0.8]],
        ["stop", "length", "stop", "length"],
    )
    assert out.completion_ids.shape == (4, 3)
    assert out.completion_mask.tolist() == [[1, 1, 1], [1, 0, 0], [1, 1, 0], [1, 1, 0]]
    assert out.completion_ids[2].tolist() == [13, eos, pad]  # nothing after the first EOS
    assert out.truncated.tolist() == [False, True, False, True]
    assert math.isnan(float(out.logprobs[2, 1])) and float(out.logprobs[1, 1]) == 0.0
    assert torch.equal(out.prompt_ids[1], prompt_ids[0]) and torch.equal(out.prompt_ids[2], prompt_ids[1])
    assert out.entropies is None
    with pytest.raises(ValueError, match="log-probs"):
        pack_completions(tok, prompt_ids[:1], prompt_mask[:1], 1, [[1, 2]], [[-0.1]], ["stop"])


def test_parse_token_logprobs():
    ids, lps = parse_token_logprobs({"tokens": ["token_id:5", "token_id:17"], "token_logprobs": [-0.5, None]})
    assert ids == [5, 17] and lps[0] == -0.5 and math.isnan(lps[1])
    with pytest.raises(LightningAgentsError, match="token_id"):
        parse_token_logprobs({"tokens": ["hello"], "token_logprobs": [-1.0]})


# ----------------------------------------------------------------------------- colocated (fake vllm)
class _FakeLLM:
    instances: list[_FakeLLM] = []

    def __init__(self, model, **kwargs):
        self.kwargs = kwargs
        self.hf = load_causal_lm(model).eval()
        self.calls: list[str] = []
        self.loaded: list[str] = []
        _FakeLLM.instances.append(self)

    def sleep(self, level=1):
        self.calls.append(f"sleep{level}")

    def wake_up(self):
        self.calls.append("wake")

    def reset_prefix_cache(self):
        self.calls.append("reset")

    def collective_rpc(self, method, args=()):
        self.calls.append("load")
        runner = SimpleNamespace(model=SimpleNamespace(load_weights=self._load))
        return [method(SimpleNamespace(model_runner=runner), *args)]

    def _load(self, weights):
        state = self.hf.state_dict()
        with torch.no_grad():
            for name, tensor in weights:
                state[name].copy_(tensor)
                self.loaded.append(name)

    def _sample(self, ids, params):
        return self.hf.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            do_sample=True,
            temperature=params.temperature,
            top_k=None,
            top_p=None,
            max_new_tokens=params.max_tokens,
            eos_token_id=2,
            pad_token_id=0,
        )

    @torch.no_grad()
    def generate(self, prompts, params, use_tqdm=False):
        from lightning_agents.modules.rstg import completion_logprobs

        self.calls.append("generate")
        self.params = params
        results = []
        per_prompt = params if isinstance(params, list) else [params] * len(prompts)
        for p, request in zip(prompts, per_prompt):
            ids = torch.tensor([p["prompt_token_ids"]] * request.n)
            if request.seed is None:
                seq = self._sample(ids, request)
            else:
                with torch.random.fork_rng():
                    torch.manual_seed(request.seed)  # vLLM: a per-request generator
                    seq = self._sample(ids, request)
            comp = seq[:, ids.shape[1] :]
            outputs = []
            for row in range(request.n):
                toks = comp[row].tolist()
                finish = "length"
                if 2 in toks:
                    toks, finish = toks[: toks.index(2) + 1], "stop"
                c = torch.tensor([toks])
                lp, _ = completion_logprobs(
                    self.hf, ids[:1], torch.ones_like(ids[:1]), c, torch.ones_like(c), request.temperature
                )
                steps = [{t: SimpleNamespace(logprob=float(v))} for t, v in zip(toks, lp[0])]
                outputs.append(SimpleNamespace(token_ids=toks, logprobs=steps, finish_reason=finish))
            results.append(SimpleNamespace(outputs=outputs))
        return results


@pytest.fixture
def fake_vllm(monkeypatch):
    module = types.ModuleType("vllm")
    module.LLM = _FakeLLM
    module.SamplingParams = lambda **kw: SimpleNamespace(**kw)
    monkeypatch.setitem(sys.modules, "vllm", module)
    _FakeLLM.instances.clear()
    return module


def test_colocated_engine_asks_for_processed_logprobs_and_sleeps_between_uses(fake_vllm):
    from lightning_agents.rollout.vllm_engine import VLLMGenerationEngine

    _, tok = load_model_and_tokenizer("embedded:student")
    engine = VLLMGenerationEngine(
        "embedded:student", tok, sleep_mode=True, chat_template_kwargs={"enable_thinking": False}
    )
    llm = _FakeLLM.instances[-1]
    assert llm.kwargs["logprobs_mode"] == "processed_logprobs" and llm.kwargs["enable_sleep_mode"]
    torch.manual_seed(0)
    out = engine.generate(PROMPTS, num_samples=3, sampling=SamplingConfig(max_new_tokens=12, temperature=0.8))
    assert out.completion_ids.shape[0] == 6 and out.entropies is None
    assert llm.calls == ["sleep1", "wake", "generate", "sleep1"]
    # Per-prompt seeds become each request's SamplingParams.seed: a prompt's samples do not depend
    # on the other prompts or the global random state.
    sampling = SamplingConfig(max_new_tokens=12, temperature=1.0)
    seeded = engine.generate(PROMPTS, num_samples=3, sampling=sampling, seeds=[7, 8])
    assert [sp.seed for sp in llm.params] == [7, 8]
    torch.manual_seed(123)
    alone = engine.generate(PROMPTS[1:], num_samples=3, sampling=sampling, seeds=[8])
    assert alone.texts == seeded.texts[3:]
    with pytest.raises(ValueError, match="2 seeds for 1 prompts"):
        engine.generate(PROMPTS[:1], sampling=sampling, seeds=[1, 2])
    student = load_causal_lm("embedded:student")
    engine.sync_weights(student.state_dict().items(), chunk_bytes=1 << 14)
    assert llm.calls[-1] == "reset" and llm.calls.count("load") > 1  # chunked
    assert set(llm.loaded) == set(student.state_dict())


def test_rstg_with_vllm_engine_syncs_weights_every_step_and_trains(fake_vllm, tmp_path, monkeypatch):
    from lightning_agents.modules.rstg import RSTGModule
    from tests.modules.test_rstg import _one_step, _records

    m = RSTGModule(
        engine="vllm",
        guidance=True,
        num_generations=4,
        max_new_tokens=16,
        teacher_k=2,
        lr=1e-3,
        micro_batch_size=8,
        beta_start=0.5,
        # Guidance weight 1 (not the teacher's pass rate, 0 at 16 tokens): every all-wrong group
        # moves the weights, whatever the samples.
        sample_weight="none",
        teacher_cache=str(tmp_path / "c.jsonl"),
        chat_template_kwargs={"enable_thinking": False},
    )
    m.configure_model()
    llm = _FakeLLM.instances[-1]
    records = _records(3)
    metrics: dict[str, float] = {}
    _one_step(m, [records], 0, metrics=metrics)
    # Synced before sampling; the sampler's log-probs are the trainer's (same weights): gap ~ 0.
    assert llm.calls.index("load") < llm.calls.index("generate")
    assert metrics["train/sampler_logprob_gap_abs"] < 1e-4
    # After the update the sampler is stale until the next step syncs it.
    stale = max(float((a - b).abs().max()) for a, b in zip(llm.hf.parameters(), m.model.parameters()))
    assert stale > 0
    monkeypatch.setattr(RSTGModule, "global_step", property(lambda self: 1))  # the next optimizer step
    metrics2: dict[str, float] = {}
    _one_step(m, [records], 1, metrics=metrics2)
    assert llm.calls.count("load") >= 2 and metrics2["train/sampler_logprob_gap_abs"] < 1e-4


# ----------------------------------------------------------------------------- server (fake HTTP server)
class _Server:
    def __init__(self, tokens, logprobs, finish):
        self.requests: list[tuple[str, dict]] = []
        outer = self

        class Handler(JSONHandler):
            def _send(self, body):
                self.send_json(200, body)

            def do_GET(self):
                outer.requests.append((self.path, {}))
                self._send(
                    {"object": "list", "data": [{"id": "policy", "object": "model", "created": 0, "owned_by": "vllm"}]}
                )

            def do_POST(self):
                body = self.read_json()
                outer.requests.append((self.path, body))
                if self.path.endswith("/completions"):
                    choices = [
                        {
                            "index": i,
                            "text": "",
                            "finish_reason": finish[i],
                            "logprobs": {
                                "tokens": [f"token_id:{t}" for t in tokens[i]],
                                "token_logprobs": logprobs[i],
                                "top_logprobs": None,
                                "text_offset": [0] * len(tokens[i]),
                            },
                        }
                        for i in range(body["n"])
                    ]
                    self._send(
                        {"id": "x", "object": "text_completion", "created": 0, "model": "policy", "choices": choices}
                    )
                else:
                    self._send({})

        self.httpd, self.url = serve(Handler)

    def close(self):
        self.httpd.shutdown()


def test_server_engine_sends_token_ids_and_reads_sampled_logprobs(tmp_path):
    pytest.importorskip("openai")
    from lightning_agents.rollout.vllm_engine import VLLMServerEngine

    _, tok = load_model_and_tokenizer("embedded:student")
    eos = tok.eos_token_id
    # Sample 0 stopped on EOS but the server left the stop token out; sample 1 hit the limit.
    server = _Server([[40, 41], [42, 43, 44]], [[-0.1, -0.2], [-0.3, -0.4, -0.5]], ["stop", "length"])
    try:
        engine = VLLMServerEngine(server.url, tok, weights_dir=str(tmp_path / "w"))
        out = engine.generate(PROMPTS, num_samples=2, sampling=SamplingConfig(max_new_tokens=3, temperature=0.9))
        completions = [b for p, b in server.requests if p.endswith("/completions")]
        assert len(completions) == 2
        ids, mask = engine._hf.encode_prompts(PROMPTS)
        # Requests run concurrently: compare the prompts sent as a set.
        sent = sorted(c["prompt"] for c in completions)
        assert sent == sorted(ids[i][mask[i].bool()].tolist() for i in range(2))
        assert completions[0]["logprobs"] == 0 and completions[0]["return_tokens_as_token_ids"]
        assert completions[0]["temperature"] == 0.9 and completions[0]["max_tokens"] == 3
        # nothing left for a server's --generation-config defaults to fill (top_k 20, a penalty)
        assert completions[0]["top_k"] == -1 and completions[0]["repetition_penalty"] == 1.0
        assert completions[0]["min_p"] == 0.0 and completions[0]["presence_penalty"] == 0.0
        assert all("seed" not in c for c in completions)
        engine.generate(PROMPTS, num_samples=2, sampling=SamplingConfig(max_new_tokens=3), seeds=[5, 6])
        seeded = [b for p, b in server.requests if p.endswith("/completions")][2:]
        by_prompt = {tuple(c["prompt"]): c["seed"] for c in seeded}
        assert by_prompt == {tuple(ids[i][mask[i].bool()].tolist()): s for i, s in enumerate([5, 6])}
        assert out.completion_ids[0].tolist() == [40, 41, eos] and out.truncated.tolist() == [False, True] * 2
        assert math.isnan(float(out.logprobs[0, 2])) and float(out.logprobs[1, 2]) == pytest.approx(-0.5)
        student = load_causal_lm("embedded:student")
        engine.sync_weights(student.state_dict().items())
        from safetensors.torch import load_file

        saved = load_file(str(tmp_path / "w" / "model.safetensors"))
        assert set(saved) == set(student.state_dict())
        assert torch.equal(saved["model.embed_tokens.weight"], student.state_dict()["model.embed_tokens.weight"])
        paths = [p for p, _ in server.requests]
        assert paths[-2:] == ["/collective_rpc", "/reset_prefix_cache"]
        assert server.requests[-2][1] == {"method": "reload_weights"}
    finally:
        server.close()


def test_the_colocated_engine_tells_vllm_the_templates_end_of_turn(fake_vllm):
    """Before: SamplingParams carried no stop ids, so vLLM stopped at the EOS and the generation
    config's ids only and ran a ChatML fine-tune of a base model past ``<|im_end|>``."""
    from chat_template_helpers import tokenizer_with_template

    from lightning_agents.rollout.vllm_engine import VLLMGenerationEngine

    _, tok = load_model_and_tokenizer("embedded:student")
    tok = tokenizer_with_template(tok, tok.chat_template, None, "<|endoftext|>")
    engine = VLLMGenerationEngine("embedded:student", tok)
    engine.generate(PROMPTS, num_samples=1, sampling=SamplingConfig(max_new_tokens=4, temperature=1.0))
    im_end = tok.convert_tokens_to_ids("<|im_end|>")
    assert [sp.stop_token_ids for sp in _FakeLLM.instances[-1].params] == [[tok.eos_token_id, im_end]] * len(PROMPTS)
