"""The generation engines on two edges: a call with no prompts (all three engines return the same
empty :class:`GenerationOutput`), and concurrent calls of one ``VLLMServerEngine`` sharing its
``max_concurrency`` slots first come, first served (against the fake ``vllm serve``)."""

from __future__ import annotations

import threading
import time

import pytest
import torch
from test_vllm_engines import _FakeLLM, fake_vllm  # noqa: F401 -- the fixture, used by name
from vllm_server_fake import error_body, sample, slow_counter

from lightning_agents.models import load_model_and_tokenizer
from lightning_agents.rollout import GenerationOutput, HFGenerationEngine, SamplingConfig

SAMPLE = SamplingConfig(max_new_tokens=8, temperature=1.0)


@pytest.fixture(scope="module")
def student():
    return load_model_and_tokenizer("embedded:student")


def _layout(out: GenerationOutput) -> dict:
    tensors = ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask", "logprobs", "truncated")
    return {name: (tuple(getattr(out, name).shape), getattr(out, name).dtype) for name in tensors}


# ----------------------------------------------------------------------------- no prompts
def test_every_engine_returns_the_same_empty_output_for_no_prompts(student, server, fake_vllm):  # noqa: F811
    """Before: the HF engine raised ValueError("generate() needs at least one prompt") and both vLLM
    engines ValueError("max() arg is an empty sequence") from inside prompt encoding."""
    pytest.importorskip("openai")
    from lightning_agents.rollout.vllm_engine import VLLMGenerationEngine, VLLMServerEngine

    model, tok = student
    hf = HFGenerationEngine(model, tok).generate([], num_samples=4, sampling=SAMPLE, seeds=[])
    srv = server(lambda body, k: [sample([5, tok.eos_token_id])])
    served = VLLMServerEngine(srv.url, tok).generate([], num_samples=4, sampling=SAMPLE, seeds=[])
    assert srv.requests == []  # nothing to ask the server, not even its model list
    colocated_engine = VLLMGenerationEngine("embedded:student", tok, sleep_mode=True)
    colocated = colocated_engine.generate([], num_samples=4, sampling=SAMPLE)
    assert "generate" not in _FakeLLM.instances[-1].calls and "wake" not in _FakeLLM.instances[-1].calls
    for out in (hf, served, colocated):
        assert isinstance(out, GenerationOutput) and out.texts == [] and out.num_completion_tokens == 0
        assert _layout(out) == _layout(hf)
    assert _layout(hf)["completion_ids"] == ((0, 1), torch.long) and _layout(hf)["truncated"] == ((0,), torch.bool)
    # the engines' own entropy conventions: HF reports them, vLLM does not
    assert hf.entropies is not None and tuple(hf.entropies.shape) == (0, 1)
    assert served.entropies is None and colocated.entropies is None
    # a call with prompts keeps the same ranks and dtypes, so rows concatenate with an empty call's
    full = HFGenerationEngine(model, tok).generate(["2 + 3 ="], num_samples=2, sampling=SAMPLE)
    assert {k: v[1] for k, v in _layout(full).items()} == {k: v[1] for k, v in _layout(hf).items()}
    # rows concatenate after padding to a common width, as between any two outputs
    padded = torch.nn.functional.pad(hf.completion_ids, (0, full.completion_ids.shape[1] - 1))
    assert torch.cat([padded, full.completion_ids]).shape == (
        len(full.completion_ids),
        full.completion_ids.shape[1],
    )


def test_no_prompts_still_checks_seeds_and_refuses_synced_gpus(student):
    model, tok = student
    engine = HFGenerationEngine(model, tok)
    with pytest.raises(ValueError, match="1 seeds for 0 prompts"):
        engine.generate([], seeds=[3])
    # a process with nothing to sample must still join the other processes' forwards: returning
    # at once would leave them waiting, so it is refused by name
    with pytest.raises(ValueError, match=r"prompts=\[\]\) with synced generation"):
        engine.generate([], synced_gpus=True)


def test_no_prompts_are_refused_where_transformers_would_sync_on_its_own(student, monkeypatch):
    """synced_gpus=None lets transformers sync a ZeRO-3 / FSDP model over several processes: a rank
    that returned early paired its next collective with the others' generation (review of fa7be9a,
    two gloo processes). The distributed state is faked to isolate the decision."""
    import torch.distributed as dist
    import transformers.integrations.fsdp as fsdp

    engine = HFGenerationEngine(*student)
    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "get_world_size", lambda group=None: 2)
    assert isinstance(engine.generate([]), GenerationOutput)  # not sharded: nothing to join
    monkeypatch.setattr(fsdp, "is_fsdp_managed_module", lambda module: True)
    with pytest.raises(ValueError, match=r"ZeRO-3 / FSDP model over several processes"):
        engine.generate([])
    ids, mask = engine.encode_prompts([])
    assert ids.shape == mask.shape == (0, 0) and ids.dtype == torch.long


def test_a_401_names_where_the_api_key_comes_from(student, server):
    """Before: "answered 401 ...", with nothing on how to give the engine (or RSTG) a key."""
    pytest.importorskip("openai")
    from lightning_agents.errors import LightningAgentsError
    from lightning_agents.rollout.vllm_engine import VLLMServerEngine

    _, tok = student
    srv = server(lambda body, k: ("status", 401, error_body("Unauthorized", 401, "AuthenticationError")))
    with pytest.raises(LightningAgentsError, match=r"answered 401 .*VLLM_API_KEY.*vllm_server_api_key_env"):
        VLLMServerEngine(srv.url, tok).generate(["2 + 3 ="], sampling=SAMPLE)


# ----------------------------------------------------------------------------- first come, first served


def _wait_for(predicate, what: str, limit: float = 30.0) -> None:
    deadline = time.monotonic() + limit
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


def test_a_small_call_is_not_starved_by_a_big_one_in_another_thread(student, server):
    """Before: the slots were a semaphore, which a big call's worker took back the instant it gave
    it up (the next prompt of its call) while the small call's waiting thread was still being woken;
    the small call's one prompt went out after all 16 of the big call's (17th of 17)."""
    pytest.importorskip("openai")
    from lightning_agents.rollout.vllm_engine import VLLMServerEngine

    _, tok = student
    opened = threading.Event()

    def reply(body, k):
        # the big call's first two requests hold both slots until the small call has queued
        if k < 2:
            opened.wait(30)
        else:
            time.sleep(0.05)
        return [sample([5, tok.eos_token_id])]

    srv = server(reply)
    engine = VLLMServerEngine(srv.url, tok, max_concurrency=2)
    big = [[{"role": "user", "content": f"question {i}"}] for i in range(16)]
    small = [{"role": "user", "content": "the small call's only question, longer than the others"}]
    small_ids = engine._hf.encode_prompts([small])[0][0].tolist()
    errors: list[BaseException] = []

    def run(prompts):
        try:
            engine.generate(prompts, num_samples=1, sampling=SAMPLE)
        except BaseException as exc:  # noqa: BLE001 -- reported by the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(big,), daemon=True)]
    threads[0].start()
    _wait_for(lambda: len(srv.completions) >= 2, "the big call's first requests")
    threads.append(threading.Thread(target=run, args=([small],), daemon=True))
    threads[1].start()
    time.sleep(1.0)  # time for the small call to queue for a slot (no bound is asserted on it)
    opened.set()
    for t in threads:
        t.join(30)
    assert not any(t.is_alive() for t in threads) and errors == []
    position = [c["prompt"] for c in srv.completions].index(small_ids)
    # it queued while the big call's two requests were out, before their workers asked again: it
    # gets the first slot freed (3rd request; 4th when the other freed slot's request wins the race
    # to the server)
    assert position <= 3, f"the small call's prompt was request {position + 1} of {len(srv.completions)}"


def test_lowering_max_concurrency_during_a_call_counts_the_requests_in_flight(student, server):
    """Before: setting max_concurrency rebuilt the semaphore, which forgot the requests in flight:
    lowered from 4 to 2 while 4 were out, the server saw 4 + 2 = 6 at once."""
    pytest.importorskip("openai")
    from lightning_agents.rollout.vllm_engine import VLLMServerEngine

    _, tok = student
    reply, state = slow_counter(tok, 0.5)
    srv = server(reply)
    engine = VLLMServerEngine(srv.url, tok, max_concurrency=4)
    first = threading.Thread(
        target=engine.generate,
        args=([[{"role": "user", "content": f"question {i}"}] for i in range(8)],),
        kwargs=dict(num_samples=1, sampling=SAMPLE),
        daemon=True,
    )
    first.start()
    _wait_for(lambda: state["inflight"] == 4, "4 requests in flight")
    engine.max_concurrency = 2
    engine.generate([[{"role": "user", "content": f"another {i}"}] for i in range(4)], num_samples=1, sampling=SAMPLE)
    first.join(30)
    assert not first.is_alive() and len(srv.completions) == 12
    assert state["peak"] <= 4


def test_fifo_slots_grant_in_arrival_order_and_let_cancelled_waiters_go():
    from lightning_agents.rollout.vllm_engine import FifoSlots

    slots = FifoSlots(1)
    assert slots.acquire()
    order: list[int] = []
    cancel = threading.Event()

    def waiter(i, cancelled=None):
        if slots.acquire(cancelled):
            order.append(i)
            slots.release()

    threads = []
    for i in range(4):
        threads.append(threading.Thread(target=waiter, args=(i, cancel.is_set if i == 1 else None), daemon=True))
        threads[-1].start()
        _wait_for(lambda n=i + 1: len(slots._queue) == n, f"waiter {i} queued")
    cancel.set()
    slots.wake()
    _wait_for(lambda: len(slots._queue) == 3, "the cancelled waiter to leave")
    slots.release()
    for t in threads:
        t.join(10)
    assert order == [0, 2, 3] and slots.held == 0
    # a raised limit lets queued waiters in at once; a release too many is a bug, not a no-op
    slots.limit = 3
    assert slots.acquire() and slots.acquire() and slots.acquire() and slots.held == 3
    for _ in range(3):
        slots.release()
    with pytest.raises(ValueError, match="released more often"):
        slots.release()


def test_an_interrupt_right_after_queueing_does_not_block_later_acquires():
    """Ctrl-C delivered on the line after a ticket joins the queue (review of fa7be9a: outside
    the try, the ticket stayed at the head and every later acquire waited forever)."""
    import inspect
    import sys
    import threading

    from lightning_agents.rollout.vllm_engine import FifoSlots

    code = FifoSlots.acquire.__code__
    lines, first = inspect.getsourcelines(FifoSlots.acquire)
    append_line = first + next(i for i, x in enumerate(lines) if "self._queue.append(ticket)" in x)
    seen = {"append": False, "fired": False}

    def local(frame, event, arg):
        if event == "line":
            if seen["append"] and not seen["fired"]:
                seen["fired"] = True
                raise KeyboardInterrupt("simulated Ctrl-C")
            if frame.f_lineno == append_line:
                seen["append"] = True
        return local

    slots = FifoSlots(2)
    sys.settrace(lambda frame, event, arg: local if frame.f_code is code else None)
    try:
        with pytest.raises(KeyboardInterrupt):
            slots.acquire()
    finally:
        sys.settrace(None)
    assert seen["fired"] and len(slots._queue) == 0 and slots.held == 0
    got = []
    later = threading.Thread(target=lambda: got.append(slots.acquire()), daemon=True)
    later.start()
    later.join(10)
    assert got == [True]
