"""VLLMServerEngine against a fake ``vllm serve`` replying in vLLM's exact shapes (see
``vllm_server_fake.py`` for the source of each shape), faults included: what the engine returns
(token ids, log-probs, finished/truncated) and the errors it raises (naming the server and the
setting)."""

from __future__ import annotations

import glob
import json
import math
import os
import sys
import threading
import time
import types
from types import SimpleNamespace

import pytest
import torch
from vllm_server_fake import error_body, sample, slow_counter

from lightning_agents.errors import LightningAgentsError
from lightning_agents.models import load_causal_lm, load_model_and_tokenizer
from lightning_agents.rollout import HFGenerationEngine, SamplingConfig

pytest.importorskip("openai")
from lightning_agents.rollout.vllm_engine import VLLMServerEngine  # noqa: E402

PROMPT = [[{"role": "user", "content": "Ava has 3 apples and gets 4 more. How many apples does Ava have now?"}]]
SAMPLE = SamplingConfig(max_new_tokens=8, temperature=1.0)


@pytest.fixture(scope="module")
def tok():
    return load_model_and_tokenizer("embedded:student")[1]


def test_vllms_reply_shapes_give_ids_logprobs_and_finished_flags(tok, server):
    """Choices out of index order, a -9999 (vLLM's -inf) and a missing log-prob, a stop id named in
    ``stop_reason``, an ``abort``: each sample lands in its row with the right flags."""
    eos = tok.eos_token_id
    srv = server(
        lambda body, k: [
            sample([40, 41, 1], [-0.5, -9999.0, -0.25], "stop", stop_reason=1, index=2),
            sample([42, eos], [-0.1, None], "stop", index=0),
            sample([43, 44, 45], [-1.0, -2.0, -3.0], "abort", index=3),
            sample([46, 47, 48], [-0.3] * 3, "length", index=1),
        ]
    )
    out = VLLMServerEngine(srv.url, tok).generate(PROMPT, num_samples=4, sampling=SAMPLE)
    assert out.completion_ids.tolist() == [[42, eos, 0], [46, 47, 48], [40, 41, 1], [43, 44, 45]]
    assert out.completion_mask.tolist() == [[1, 1, 0], [1, 1, 1], [1, 1, 1], [1, 1, 1]]
    assert out.truncated.tolist() == [False, True, False, True]
    lp = out.logprobs
    assert math.isnan(lp[0, 1]) and math.isnan(lp[2, 1]) and lp[2, 0] == -0.5 and lp[3, 2] == -3.0


@pytest.mark.parametrize(
    "fault",
    [
        ("drop",),  # the connection closes half-way through the reply
        ("close",),  # no reply at all
        ("status", 503, error_body("Service Unavailable", 503, "ServiceUnavailableError")),
        ("status", 429, error_body("Too many requests", 429, "RateLimitError"), {"retry-after": "0"}),
    ],
    ids=["dropped-mid-reply", "closed", "503", "429"],
)
def test_a_passing_fault_is_retried_and_the_retry_is_read(tok, server, fault):
    eos = tok.eos_token_id
    srv = server(lambda body, k: fault if k == 0 else [sample([7, eos], [-0.5, -0.5])] * 2)
    out = VLLMServerEngine(srv.url, tok).generate(PROMPT, num_samples=2, sampling=SAMPLE)
    assert len(srv.completions) == 2
    assert out.completion_ids.tolist() == [[7, eos]] * 2 and out.truncated.tolist() == [False, False]


def _raised(engine_or_url, tok, **kwargs) -> str:
    engine = VLLMServerEngine(engine_or_url, tok, **kwargs) if isinstance(engine_or_url, str) else engine_or_url
    with pytest.raises(LightningAgentsError) as err:
        engine.generate(PROMPT, num_samples=2, sampling=SAMPLE)
    return str(err.value)


def test_server_failures_name_the_server_and_the_setting(tok, server):
    """Before: the openai client's own errors reached the run ("Connection error.", "Request timed
    out.", "Error code: 404"), naming neither the server nor what to change."""
    # nothing listens on port 9
    assert "http://127.0.0.1:9/v1 (vllm_server_url) unreachable" in _raised("http://127.0.0.1:9/v1", tok)
    hung = server(lambda body, k: ("sleep", 2.0, [sample([5])] * 2))
    message = _raised(hung.url, tok, timeout=0.2, max_retries=0)
    assert hung.url in message and "timeout of 0.2 s" in message and "VLLMServerEngine(timeout=" in message
    dead = server(lambda body, k: ("status", 500, error_body("EngineDeadError", 500, "InternalServerError")))
    message = _raised(dead.url, tok)
    assert f"{dead.url} answered 500" in message and "EngineDeadError" in message and len(dead.completions) == 3
    rooted = server(lambda body, k: [sample([5])] * 2)
    message = _raised(rooted.url.removesuffix("/v1"), tok, model="policy")
    assert "answered 404" in message and "ending in /v1" in message
    bad = server(lambda body, k: ("status", 400, error_body("temperature must be in [0, 2], got 3.0.")))
    message = _raised(bad.url, tok)
    assert f"{bad.url} answered 400" in message and "temperature must be in [0, 2]" in message


def test_a_server_returning_fewer_samples_than_asked_is_named(tok, server):
    srv = server(lambda body, k: [sample([5, tok.eos_token_id])])  # a server that ignores n
    message = _raised(srv.url, tok)
    assert srv.url in message and "1 samples" in message and "asked for 2" in message


def _old_vllm(max_model_len):
    """Older vLLM releases' answer to prompt + max_tokens over max_model_len (current ones shorten
    max_tokens instead), else samples of max_tokens tokens."""

    def reply(body, k):
        n, wanted = len(body["prompt"]), body["max_tokens"]
        if n + wanted > max_model_len:
            return (
                "status",
                400,
                error_body(
                    f"This model's maximum context length is {max_model_len} tokens. However, you requested "
                    f"{n + wanted} tokens ({n} in the messages, {wanted} in the completion). Please reduce the "
                    "length of the messages or completion."
                ),
            )
        return [sample([5] * wanted, finish="length")] * body["n"]

    return reply


def test_a_prompt_near_the_context_limit_samples_what_is_left_of_it(tok, server):
    """Before: max_new_tokens was sent as is, an older vLLM refused prompt + max_tokens over its
    max_model_len, and the prompt's samples came back empty although the prompt fitted."""
    srv = server(_old_vllm(48), max_model_len=48)
    engine = VLLMServerEngine(srv.url, tok)
    out = engine.generate(PROMPT, num_samples=2, sampling=SamplingConfig(max_new_tokens=40))
    (body,) = srv.completions
    assert len(body["prompt"]) + body["max_tokens"] == 48
    assert out.completion_mask.sum(1).tolist() == [body["max_tokens"]] * 2 and out.truncated.tolist() == [True] * 2
    # a prompt with no room left is not sent: its samples are empty and unfinished
    full = server(_old_vllm(len(body["prompt"])), max_model_len=len(body["prompt"]))
    out = VLLMServerEngine(full.url, tok).generate(PROMPT, num_samples=2, sampling=SAMPLE)
    assert full.completions == [] and out.completion_mask.sum() == 0 and out.truncated.tolist() == [True, True]


def test_greedy_decoding_asks_vllm_for_one_sample(tok, server):
    """vLLM refuses n > 1 at temperature 0 ("n must be 1 when using greedy sampling",
    vllm/sampling_params.py); before, a greedy call for several samples per prompt failed."""

    def reply(body, k):
        if body["temperature"] == 0.0 and body["n"] > 1:
            return ("status", 400, error_body(f"n must be 1 when using greedy sampling, got {body['n']}."))
        return [sample([9, tok.eos_token_id])] * body["n"]

    srv = server(reply)
    out = VLLMServerEngine(srv.url, tok).generate(
        PROMPT, num_samples=3, sampling=SamplingConfig(max_new_tokens=4, do_sample=False)
    )
    assert srv.completions[0]["n"] == 1
    assert out.completion_ids.tolist() == [[9, tok.eos_token_id]] * 3


def _vllm_reload_files(folder: str) -> list[str]:
    """The files vLLM's reload reads from a local folder: every ``*.safetensors`` or, when
    ``model.safetensors.index.json`` exists, only those its ``weight_map`` names
    (vllm/model_executor/model_loader/default_loader.py ``_prepare_weights`` and
    weight_utils.py ``filter_duplicate_safetensors_files``, vllm commit 00b5ad0, Apache-2.0)."""
    files = glob.glob(os.path.join(folder, "*.safetensors"))
    index = os.path.join(folder, "model.safetensors.index.json")
    if os.path.isfile(index):
        with open(index) as f:
            listed = {os.path.join(folder, name) for name in json.load(f)["weight_map"].values()}
        files = [f for f in files if f in listed]
    return sorted(files)


def test_a_sharded_checkpoint_in_the_served_folder_reloads_the_trainers_weights(tok, server, tmp_path):
    """Before: the sync wrote model.safetensors next to the served checkpoint's shards and their
    index, vLLM's reload read the index's shards only, and the server kept its first weights."""
    from safetensors.torch import load_file, save_file

    state = {k: v.detach().clone().contiguous() for k, v in load_causal_lm("embedded:student").state_dict().items()}
    names = sorted(state)
    shards = {"model-00001-of-00002.safetensors": names[::2], "model-00002-of-00002.safetensors": names[1::2]}
    for fname, keys in shards.items():
        save_file({k: state[k] for k in keys}, str(tmp_path / fname), metadata={"format": "pt"})
    weight_map = {k: fname for fname, keys in shards.items() for k in keys}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    trained = {k: v + 1.0 for k, v in state.items()}
    srv = server(lambda body, k: [])
    VLLMServerEngine(srv.url, tok, weights_dir=str(tmp_path)).sync_weights(trained.items())
    assert [p for p, _ in srv.requests] == ["/collective_rpc", "/reset_prefix_cache"]
    served: dict[str, torch.Tensor] = {}
    for f in _vllm_reload_files(str(tmp_path)):
        served.update(load_file(f))
    assert set(served) == set(trained)
    assert all(torch.equal(served[k], trained[k]) for k in trained)


def test_the_colocated_engine_asks_vllm_for_one_greedy_sample(tok, monkeypatch):
    """The same refusal in ``vllm.SamplingParams`` itself: before, a colocated greedy call for
    several samples per prompt raised there."""

    def sampling_params(**kw):
        if kw["temperature"] == 0.0 and kw["n"] > 1:  # vllm/sampling_params.py _verify_greedy_sampling
            raise ValueError(f"n must be 1 when using greedy sampling, got {kw['n']}.")
        return SimpleNamespace(**kw)

    class LLM:
        def __init__(self, **kwargs):
            pass

        def sleep(self, level=1):
            pass

        def wake_up(self):
            pass

        def generate(self, prompts, params, use_tqdm=False):
            step = {9: SimpleNamespace(logprob=-0.5)}
            out = SimpleNamespace(token_ids=[9, tok.eos_token_id], logprobs=[step, {}], finish_reason="stop")
            return [SimpleNamespace(outputs=[out] * p.n) for p in params]

    monkeypatch.setitem(sys.modules, "vllm", types.SimpleNamespace(LLM=LLM, SamplingParams=sampling_params))
    from lightning_agents.rollout.vllm_engine import VLLMGenerationEngine

    engine = VLLMGenerationEngine("embedded:student", tok)
    out = engine.generate(PROMPT * 2, num_samples=3, sampling=SamplingConfig(max_new_tokens=4, do_sample=False))
    assert out.completion_ids.tolist() == [[9, tok.eos_token_id]] * 6
    assert out.logprobs[:, 0].tolist() == [-0.5] * 6 and out.truncated.tolist() == [False] * 6


def test_a_served_folder_in_mistrals_format_is_refused_before_a_silent_sync(tok, server, tmp_path):
    """vLLM's default load format reads only consolidated*.safetensors from a folder that has them
    (default_loader.py, "mistral"): before, the sync wrote model.safetensors that no reload read."""
    from safetensors.torch import save_file

    save_file({"w": torch.zeros(1)}, str(tmp_path / "consolidated.safetensors"))
    srv = server(lambda body, k: [])
    with pytest.raises(LightningAgentsError, match=r"consolidated\.safetensors.*delete them"):
        VLLMServerEngine(srv.url, tok, weights_dir=str(tmp_path)).sync_weights([("w", torch.ones(1))])
    assert srv.requests == []


def test_a_failing_prompt_stops_the_call_without_waiting_for_slow_ones(tok, server):
    """Before: the error surfaced only once every prompt before it, and every request in flight,
    had finished (a step's slowest generation, minutes on a real server)."""

    def reply(body, k):
        if len(body["prompt"]) == failing:
            return ("status", 400, error_body("temperature must be in [0, 2], got 3.0."))
        return ("sleep", 12.0, [sample([5, tok.eos_token_id])] * 2)

    prompts = [[{"role": "user", "content": "a slow one"}], [{"role": "user", "content": "a failing prompt, longer"}]]
    _, mask = HFGenerationEngine(model=None, tokenizer=tok).encode_prompts(prompts)
    failing = int(mask[1].sum())
    assert failing != int(mask[0].sum())
    srv = server(reply)
    before = set(threading.enumerate())
    start = time.monotonic()
    with pytest.raises(Exception, match="temperature must be in"):
        VLLMServerEngine(srv.url, tok).generate(prompts, num_samples=2, sampling=SAMPLE)
    assert time.monotonic() - start < 6.0
    # the slow request still in flight must not hold up the exit of a run that stops on the error:
    # the first version left it on a thread pool's (non-daemon) thread, which the interpreter joins
    # at exit (the process lived on for the slow reply, up to timeout x (max_retries + 1))
    holding = [t.name for t in set(threading.enumerate()) - before if not t.daemon]
    assert holding == []


def test_a_weight_reload_has_its_own_timeout(tok, server, tmp_path):
    """The first version waited for a reload as long as for one generation (``timeout``): a user
    who shortened that broke healthy reloads of a large model."""
    srv = server(lambda body, k: [], reload_s=2.0)
    weights = {"w": torch.zeros(2)}
    VLLMServerEngine(srv.url, tok, timeout=1.0, weights_dir=str(tmp_path)).sync_weights(weights.items())
    with pytest.raises(LightningAgentsError, match=r"reload_timeout"):
        engine = VLLMServerEngine(srv.url, tok, weights_dir=str(tmp_path), reload_timeout=0.5)
        engine.sync_weights(weights.items())


def test_an_interrupted_call_sends_no_more_prompts(tok, server):
    """Ctrl-C in a notebook (where the kernel lives on) left the workers sending every prompt of the
    abandoned call: 20 of 20 instead of the 4 already in flight."""
    import os
    import signal

    reply, _ = slow_counter(tok, 0.5)
    srv = server(reply)
    prompts = [[{"role": "user", "content": f"question {i}"}] for i in range(20)]

    def interrupt(*_):
        raise KeyboardInterrupt

    # a signal of our own, raising what Ctrl-C raises: test runners may ignore SIGINT in workers
    previous = signal.signal(signal.SIGUSR1, interrupt)
    timer = threading.Timer(0.8, lambda: os.kill(os.getpid(), signal.SIGUSR1))
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            VLLMServerEngine(srv.url, tok, max_concurrency=2).generate(prompts, num_samples=1, sampling=SAMPLE)
    finally:
        timer.cancel()
        signal.signal(signal.SIGUSR1, previous)
    sent = len(srv.completions)
    time.sleep(2.0)
    assert len(srv.completions) == sent <= 6


def test_a_failed_calls_leftovers_count_against_the_next_calls_concurrency(tok, server):
    """The first failure returns at once and leaves requests in flight; the next call started its own
    max_concurrency beside them (the server saw 7 at a limit of 4)."""
    reply, state = slow_counter(tok, 0.5)
    state["fail_first"] = True
    srv = server(reply)
    engine = VLLMServerEngine(srv.url, tok, max_concurrency=4)
    prompts = [[{"role": "user", "content": f"question {i}"}] for i in range(8)]
    with pytest.raises(LightningAgentsError, match="temperature must be in"):
        engine.generate(prompts, num_samples=1, sampling=SAMPLE)
    engine.generate(prompts, num_samples=1, sampling=SAMPLE)
    assert state["peak"] <= 4


def test_max_concurrency_set_after_construction_is_what_the_server_sees(tok, server):
    # the engine-wide slots were sized once in __init__: raised later, the threads waited on them (review 4)
    reply, state = slow_counter(tok, 0.5)
    srv = server(reply)
    engine = VLLMServerEngine(srv.url, tok, max_concurrency=2)
    engine.max_concurrency = 6
    engine.generate([[{"role": "user", "content": f"question {i}"}] for i in range(6)], num_samples=1, sampling=SAMPLE)
    assert state["peak"] == 6
