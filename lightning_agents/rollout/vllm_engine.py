"""vLLM generation engines for RL on GPUs (optional): colocated in the trainer's process, or a
client of an OpenAI-compatible ``vllm serve`` process.

Both return the same :class:`~lightning_agents.rollout.GenerationOutput` as the HF engine
(left-padded prompts, EOS-masked completions, per-token sampling log-probs), so RL code is
engine-agnostic. Prompts are rendered and tokenised here with the HF engine's code and sent as
token ids, so the trainer and the sampler see identical prompt tokens.

Log-probs are vLLM's *processed* ones (after temperature, the distribution the token was drawn
from), not the raw logits' (vLLM's default). vLLM does not return entropies (``entropies`` is
``None``); the RL module computes them where it needs them.

Nothing else in the package imports vLLM or the ``openai`` client.
"""

from __future__ import annotations

import json
import logging
import math
import os
import queue
import threading
import urllib.error
import urllib.request
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import torch

from lightning_agents.errors import LightningAgentsError
from lightning_agents.rollout.hf_engine import (
    GenerationOutput,
    HFGenerationEngine,
    SamplingConfig,
    decode_completions,
    empty_generation_output,
    stop_token_ids,
)

log = logging.getLogger(__name__)

__all__ = ["VLLMGenerationEngine", "VLLMServerEngine", "ignores_eos", "pack_completions", "vllm_available"]


def vllm_available() -> bool:
    """Whether ``vllm`` can be imported here."""
    try:
        import vllm  # noqa: F401
    except ImportError:
        return False
    return True


def pack_completions(
    tokenizer,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    num_samples: int,
    token_ids: Sequence[Sequence[int]],
    logprobs: Sequence[Sequence[float]],
    finish_reasons: Sequence[str | None],
    stop_ids: Sequence[int] | None = None,
) -> GenerationOutput:
    """Lay out sampled token ids and log-probs the way :class:`HFGenerationEngine` does.

    Args:
        tokenizer: the student's tokenizer (pad and EOS ids).
        prompt_ids: ``[N, P]`` left-padded prompts (one row per prompt).
        prompt_mask: ``[N, P]`` their attention mask.
        num_samples: G; ``token_ids`` holds the G samples of each prompt contiguously.
        token_ids: ``N * G`` sampled token-id lists (a stop token, when one ended the sample,
            included as vLLM returns it).
        logprobs: the sampler's log-prob of each token; NaN where the sampler did not report one.
        finish_reasons: anything but ``"stop"`` (``"length"``, a server's ``"abort"``) marks a
            sample that did not finish its turn (truncated), unless it holds a stop id.
        stop_ids: the ids that end a turn (default: the tokenizer's EOS); a sample is cut after
            the first, and is finished there whatever the server's finish reason (a server not told
            about a template's end-of-turn token samples on past it to ``max_tokens``).
    """
    rows = len(token_ids)
    if rows != prompt_ids.shape[0] * num_samples or len(logprobs) != rows or len(finish_reasons) != rows:
        raise ValueError(
            f"{rows} samples, {len(logprobs)} log-prob rows and {len(finish_reasons)} finish reasons "
            f"for {prompt_ids.shape[0]} prompts x {num_samples} samples"
        )
    pad = tokenizer.pad_token_id
    stops = set(stop_ids or [tokenizer.eos_token_id])
    truncated = torch.tensor([reason != "stop" for reason in finish_reasons], dtype=torch.bool)
    samples = []
    for r, ids in enumerate(token_ids):
        ids = list(ids)
        end = next((k for k, token in enumerate(ids) if token in stops), None)
        if end is not None:
            ids = ids[: end + 1]
            truncated[r] = False
        if len(logprobs[r]) < len(ids):
            raise ValueError(f"sample {r}: {len(ids)} tokens but {len(logprobs[r])} log-probs")
        samples.append(ids)
    width = max(1, max((len(ids) for ids in samples), default=1))
    completion = torch.full((rows, width), pad, dtype=torch.long)
    mask = torch.zeros((rows, width), dtype=torch.long)
    lp = torch.zeros((rows, width), dtype=torch.float32)
    for r, ids in enumerate(samples):
        if ids:
            completion[r, : len(ids)] = torch.tensor(ids)
            mask[r, : len(ids)] = 1
            lp[r, : len(ids)] = torch.tensor([float(x) for x in logprobs[r][: len(ids)]])
    texts = decode_completions(tokenizer, completion, mask, sorted(stops))
    return GenerationOutput(
        prompt_ids=prompt_ids.repeat_interleave(num_samples, dim=0),
        prompt_mask=prompt_mask.repeat_interleave(num_samples, dim=0),
        completion_ids=completion,
        completion_mask=mask,
        logprobs=torch.where(mask.bool(), lp, torch.zeros_like(lp)),
        texts=texts,
        truncated=truncated,
        entropies=None,
    )


def local_generation_config(path: str | None, revision: str | None = None):
    """The model's ``GenerationConfig``: the one saved in a local model folder, or for a hub id the
    copy in the local Hugging Face cache at ``revision`` (what vLLM loads: ``llm_kwargs``'
    ``revision``; ``None``, the cached ``main``), without a download; ``None`` where there is none.
    It lists the end-of-turn ids vLLM stops at besides the tokenizer's EOS (Solar-Open's
    ``<|flush|>``): without them the engine did not know a sample had ended there."""
    if not path:
        return None
    from transformers import GenerationConfig

    if Path(path, "generation_config.json").is_file():
        return GenerationConfig.from_pretrained(path)
    if Path(path).exists():
        return None
    try:
        return GenerationConfig.from_pretrained(path, revision=revision, local_files_only=True)
    except Exception:  # noqa: BLE001 - no cached config, or no hub id at all (an in-memory tokenizer)
        return None


def ignores_eos(tokenizer, stop_ids: Sequence[int]) -> bool:
    """Whether vLLM must be told not to stop at the tokenizer's EOS: :func:`stop_token_ids` leaves
    it out where the chat template writes it inside a turn (a tokenizer whose EOS is Solar-Open's
    ``<|end|>``, which the template writes after the reasoning), and vLLM stops at the EOS whatever
    ``stop_token_ids`` says unless ``ignore_eos`` is set (vllm-project/vllm @018d5dc78efa:
    ``vllm/v1/core/sched/utils.py`` ``check_stop`` stops at ``sampling_params.eos_token_id``, which
    ``vllm/sampling_params.py`` ``update_from_generation_config`` sets only when ``not
    ignore_eos``). The ids in ``stop_token_ids`` still stop it then; so the HF engine, which stops
    at ``stop_token_ids`` only, and both vLLM engines end a turn at the same tokens. With
    ``ignore_eos`` vLLM no longer adds its generation config's ids to the stop ids either (same
    function), so they stop only where ``stop_ids`` lists them: it does where the engine reads the
    config (:func:`local_generation_config`: a local model folder, or a hub id's cached copy), not for
    a hub id whose config was never downloaded."""
    eos = tokenizer.eos_token_id
    return isinstance(eos, int) and eos not in stop_ids


def _check_seeds(seeds, prompts) -> None:
    if seeds is not None and len(seeds) != len(prompts):
        raise ValueError(f"generate() got {len(seeds)} seeds for {len(prompts)} prompts")


def _unpadded(prompt_ids: torch.Tensor, prompt_mask: torch.Tensor) -> list[list[int]]:
    return [row[m.bool()].tolist() for row, m in zip(prompt_ids, prompt_mask)]


def _load_weights_on_worker(worker, weights: list[tuple[str, torch.Tensor]]) -> None:
    # Runs inside a vLLM worker (collective_rpc): vLLM's loader maps HF parameter names onto its
    # fused layers (qkv, gate_up) itself.
    worker.model_runner.model.load_weights(weights=weights)


class VLLMGenerationEngine:
    """Samples with a ``vllm.LLM`` in the trainer's process, on the trainer's GPU.

    Call :meth:`sync_weights` with the student before every generation step (the RL module does),
    so that samples come from the policy being trained. With ``sleep_mode`` the engine frees its
    KV cache and offloads its weights between generations, leaving the GPU to the trainer.

    Args:
        model_name_or_path: the model vLLM loads first (the student's path or hub id).
        tokenizer: the student's tokenizer (chat template, pad and EOS ids).
        gpu_memory_utilization: fraction of GPU memory vLLM may take (the trainer needs the rest).
        dtype: vLLM weight dtype.
        sleep_mode: sleep (level 1) after every generation and wake before the next.
        max_model_len: context limit (prompt + completion); ``None`` takes the model's.
        seed: vLLM's sampling seed.
        chat_template_kwargs: extra ``apply_chat_template`` arguments (e.g. ``enable_thinking``).
        llm_kwargs: further ``vllm.LLM`` arguments.
    """

    def __init__(
        self,
        model_name_or_path: str,
        tokenizer,
        gpu_memory_utilization: float = 0.3,
        dtype: str = "bfloat16",
        sleep_mode: bool = True,
        max_model_len: int | None = None,
        seed: int = 0,
        chat_template_kwargs: dict[str, Any] | None = None,
        llm_kwargs: dict[str, Any] | None = None,
    ) -> None:
        if not vllm_available():
            raise ImportError(
                "VLLMGenerationEngine needs vllm (pip install 'lightning-agents[vllm]' on a CUDA "
                "machine); use engine: hf otherwise"
            )
        # In-process engine core: the trainer reaches the vLLM model object directly to load weights.
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        from vllm import LLM

        from lightning_agents.models import resolve_model_path

        self.tokenizer = tokenizer
        self.sleep_mode = sleep_mode
        kwargs = dict(
            model=resolve_model_path(model_name_or_path),
            gpu_memory_utilization=gpu_memory_utilization,
            dtype=dtype,
            enable_prefix_caching=True,
            enable_sleep_mode=sleep_mode,
            seed=seed,
            logprobs_mode="processed_logprobs",
        )
        if max_model_len is not None:
            kwargs["max_model_len"] = max_model_len
        kwargs.update(llm_kwargs or {})
        self.llm = LLM(**kwargs)
        self.stop_ids = stop_token_ids(tokenizer, local_generation_config(kwargs["model"], kwargs.get("revision")))
        # sent only where the EOS is no stop token, so every other request is what it was
        self._eos_setting = {"ignore_eos": True} if ignores_eos(tokenizer, self.stop_ids) else {}
        self._asleep = False
        self._hf = HFGenerationEngine(model=None, tokenizer=tokenizer, chat_template_kwargs=chat_template_kwargs)
        self.sleep()

    @property
    def chat_template_kwargs(self) -> dict[str, Any]:
        """Extra ``apply_chat_template`` arguments."""
        return self._hf.chat_template_kwargs

    def render(self, prompt, tools=None) -> str:
        """The prompt text (chat template applied to message lists)."""
        return self._hf.render(prompt, tools)

    def sleep(self) -> None:
        """Offload weights and drop the KV cache until the next generation (no-op without sleep mode)."""
        if self.sleep_mode and not self._asleep:
            self.llm.sleep(level=1)
            self._asleep = True

    def wake_up(self) -> None:
        """Reload weights and KV cache onto the GPU."""
        if self._asleep:
            self.llm.wake_up()
            self._asleep = False

    @torch.no_grad()
    def sync_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]], chunk_bytes: int = 1 << 30) -> None:
        """Load the trainer's current weights (``model.state_dict().items()``) into vLLM, in chunks
        of about ``chunk_bytes`` so no second full copy of the model is materialised at once."""
        self.wake_up()
        chunk: list[tuple[str, torch.Tensor]] = []
        size = 0
        for name, tensor in named_tensors:
            chunk.append((name, tensor.detach()))
            size += tensor.numel() * tensor.element_size()
            if size >= chunk_bytes:
                self.llm.collective_rpc(_load_weights_on_worker, args=(chunk,))
                chunk, size = [], 0
        if chunk:
            self.llm.collective_rpc(_load_weights_on_worker, args=(chunk,))
        # Cached prefixes hold keys and values of the old weights.
        self.llm.reset_prefix_cache()

    def generate(
        self,
        prompts: Sequence,
        num_samples: int = 1,
        sampling: SamplingConfig | None = None,
        tools=None,
        seeds: Sequence[int] | None = None,
    ) -> GenerationOutput:
        """Sample ``num_samples`` completions per prompt; same output layout as the HF engine.

        ``seeds`` (one per prompt) becomes each request's ``SamplingParams.seed``: vLLM then draws
        that prompt's samples from its own generator, as the HF engine does.
        """
        from vllm import SamplingParams

        sampling = sampling or SamplingConfig()
        _check_seeds(seeds, prompts)
        if not prompts:
            return empty_generation_output(with_entropies=False)  # no wake-up for nothing
        # vLLM refuses n > 1 at temperature 0 ("n must be 1 when using greedy sampling"); greedy
        # samples are all the same, the one is repeated below.
        n = num_samples if sampling.do_sample else 1
        params = [
            SamplingParams(
                n=n,
                max_tokens=sampling.max_new_tokens,
                temperature=sampling.temperature if sampling.do_sample else 0.0,
                top_p=sampling.top_p if sampling.do_sample else 1.0,
                top_k=(sampling.top_k or -1) if sampling.do_sample else -1,
                logprobs=0,
                seed=None if seeds is None else int(seeds[i]),
                # vLLM stops at the EOS and the generation config's ids only, not at the chat
                # template's end-of-turn token a fine-tuned base model writes (<|im_end|>).
                stop_token_ids=list(self.stop_ids),
                **self._eos_setting,
            )
            for i in range(len(prompts))
        ]
        prompt_ids, prompt_mask = self._hf.encode_prompts(prompts, tools)
        self.wake_up()
        try:
            results = self.llm.generate(
                [{"prompt_token_ids": ids} for ids in _unpadded(prompt_ids, prompt_mask)], params, use_tqdm=False
            )
        finally:
            self.sleep()
        ids, lps, reasons = [], [], []
        for res in results:
            for comp in res.outputs:
                ids.append(list(comp.token_ids))
                # logprobs=0 returns exactly the sampled token's entry at each step.
                lps.append(
                    [
                        step[tok].logprob if step and tok in step else math.nan
                        for tok, step in zip(comp.token_ids, comp.logprobs or [{}] * len(comp.token_ids))
                    ]
                )
                reasons.append(comp.finish_reason)
            for _ in range(num_samples - n):
                ids.append(ids[-1])
                lps.append(lps[-1])
                reasons.append(reasons[-1])
        return pack_completions(self.tokenizer, prompt_ids, prompt_mask, num_samples, ids, lps, reasons, self.stop_ids)


class FifoSlots:
    """At most ``limit`` holders at once, granted in the order they asked (first come, first served).

    A ``threading.Semaphore`` lets whoever calls ``acquire`` first after a release take the slot: a
    worker that has just released one and asks again (the next prompt of a big call) takes it back
    before a waiting thread (a small call's prompt) is even scheduled, so the small call waited for
    most of the big one. Here every request waits its turn in a queue.

    ``limit`` may change at any time; holders keep their slots (a lower limit takes effect as they
    release, a higher one at once). A waiter whose ``cancelled()`` turns true leaves the queue
    without a slot once woken (:meth:`wake` after setting what it reads). An interrupt (Ctrl-C)
    while waiting leaves the queue as it was; one that lands between a grant and ``acquire``'s
    return loses that slot, as with ``threading.Semaphore`` (no pure-Python lock closes that
    window). :class:`VLLMServerEngine` acquires only in its worker threads, which signals never
    interrupt.
    """

    def __init__(self, limit: int) -> None:
        self._cond = threading.Condition()
        self._limit = max(1, int(limit))
        self._held = 0
        self._queue: deque[object] = deque()

    @property
    def limit(self) -> int:
        """Holders allowed at once."""
        return self._limit

    @limit.setter
    def limit(self, value: int) -> None:
        with self._cond:
            self._limit = max(1, int(value))
            self._cond.notify_all()

    @property
    def held(self) -> int:
        """Slots held now."""
        return self._held

    def acquire(self, cancelled: Callable[[], bool] | None = None) -> bool:
        """Wait for a slot in arrival order; ``False`` (and no slot) when ``cancelled()`` became true."""
        ticket = object()
        with self._cond:
            try:
                # inside the try: an interrupt right after the append must not strand the ticket
                # at the head of the queue, where it would block every later acquire
                self._queue.append(ticket)
                while not (self._queue[0] is ticket and self._held < self._limit):
                    if cancelled is not None and cancelled():
                        return False
                    self._cond.wait()
                if cancelled is not None and cancelled():
                    return False
                self._held += 1
                return True
            finally:
                # granted, cancelled or interrupted: the ticket leaves the queue and the next one
                # (which may now be first, or fit under the limit) rechecks
                if ticket in self._queue:
                    self._queue.remove(ticket)
                self._cond.notify_all()

    def release(self) -> None:
        """Give a slot back."""
        with self._cond:
            if self._held <= 0:
                raise ValueError("FifoSlots released more often than acquired")
            self._held -= 1
            self._cond.notify_all()

    def wake(self) -> None:
        """Make every waiter re-read its ``cancelled()``."""
        with self._cond:
            self._cond.notify_all()


class VLLMServerEngine:
    """Samples from an OpenAI-compatible ``vllm serve`` process (on other GPUs or another host).

    Start the server on a directory the trainer can write, with processed log-probs, e.g.::

        VLLM_SERVER_DEV_MODE=1 vllm serve /shared/policy --logprobs-mode processed_logprobs

    :meth:`sync_weights` writes the student's weights into ``weights_dir`` (that directory) and asks
    the server to reload them through its ``/collective_rpc`` development endpoint; without a
    ``weights_dir`` the server keeps its weights and the sampler/trainer gap grows with every step
    (log it, and correct it with truncated importance sampling).

    A completion never asks for more tokens than the server's context holds after the prompt
    (``max_model_len`` from its model list): older vLLM releases refuse such a request outright
    (400), current ones shorten it; both now sample up to the limit (the sample is truncated there). Failures
    (unreachable, timed out, an HTTP error after the client's retries of 408/429/5xx) raise a
    :class:`~lightning_agents.errors.LightningAgentsError` naming the server and the setting.

    Args:
        base_url: the server's OpenAI API root, e.g. ``http://localhost:8000/v1``.
        tokenizer: the student's tokenizer (prompts are sent as token ids).
        model: served model name (default: the only one the server lists).
        api_key: the server's API key, if it was started with one.
        timeout: seconds per request (one prompt's G samples).
        max_concurrency: prompts in flight at once, over all calls (concurrent calls take turns,
            first come, first served).
        weights_dir: where the server loads its weights from, shared with the trainer.
        chat_template_kwargs: extra ``apply_chat_template`` arguments (e.g. ``enable_thinking``).
        max_retries: retries of a request that timed out, lost its connection or got 408/429/5xx.
        reload_timeout: seconds a weight reload (``weights_dir``) may take; apart from ``timeout``,
            since a reload of a large model takes longer than one short generation.
    """

    def __init__(
        self,
        base_url: str,
        tokenizer,
        model: str | None = None,
        api_key: str = "EMPTY",
        timeout: float = 600.0,
        max_concurrency: int = 64,
        weights_dir: str | None = None,
        chat_template_kwargs: dict[str, Any] | None = None,
        max_retries: int = 2,
        reload_timeout: float = 600.0,
    ) -> None:
        try:
            from openai import OpenAI
        except ImportError as err:
            raise ImportError(
                "VLLMServerEngine needs the openai client: pip install 'lightning-agents[vllm-server]'"
            ) from err
        import openai

        self._openai = openai
        self.tokenizer = tokenizer
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.reload_timeout = reload_timeout
        self.max_retries = max_retries
        self.client = OpenAI(base_url=self.base_url, api_key=api_key, timeout=timeout, max_retries=max_retries)
        self.stop_ids = stop_token_ids(tokenizer, local_generation_config(getattr(tokenizer, "name_or_path", None)))
        self._eos_setting = {"ignore_eos": True} if ignores_eos(tokenizer, self.stop_ids) else {}
        self._model = model
        self._cards: list | None = None
        self.max_concurrency = max_concurrency
        self.weights_dir = weights_dir
        self._hf = HFGenerationEngine(model=None, tokenizer=tokenizer, chat_template_kwargs=chat_template_kwargs)

    @property
    def chat_template_kwargs(self) -> dict[str, Any]:
        """Extra ``apply_chat_template`` arguments."""
        return self._hf.chat_template_kwargs

    @property
    def max_concurrency(self) -> int:
        """Requests in flight at once, over all calls of this engine. Concurrent calls (from
        several threads) share them first come, first served, request by request: a call's next
        prompt queues behind the prompts other calls were already waiting to send, so a small call
        is not held up until a big one has sent everything. Setting it takes effect at once, and
        requests in flight keep counting against it; a call already running keeps the worker
        threads it started with (``min(limit, prompts)``), so a raise speeds up calls that start
        afterwards, not that one."""
        return self._max_concurrency

    @max_concurrency.setter
    def max_concurrency(self, value: int) -> None:
        self._max_concurrency = value
        slots = getattr(self, "_slots", None)
        if slots is None:
            self._slots = FifoSlots(value)
        else:
            # the same queue, a new limit: requests in flight stay counted (a rebuilt semaphore
            # forgot them and let max_concurrency more in beside them)
            slots.limit = value

    def _server_error(self, exc: Exception, what: str) -> LightningAgentsError:
        """``exc`` from the openai client as an error naming the server and the setting to change."""
        openai, url = self._openai, self.base_url
        if isinstance(exc, openai.APITimeoutError):
            return LightningAgentsError(
                f"vLLM server {url} did not answer {what} within the engine's timeout of {self.timeout:g} s "
                f"(tried {self.max_retries + 1} times); raise VLLMServerEngine(timeout=...) (RSTG: "
                "model.vllm_server_timeout) for long generations, or check the server"
            )
        if isinstance(exc, openai.APIConnectionError):
            return LightningAgentsError(
                f"vLLM server {url} (vllm_server_url) unreachable to {what} after {self.max_retries + 1} "
                f"tries: {exc.__cause__ or exc}"
            )
        if isinstance(exc, openai.NotFoundError):
            return LightningAgentsError(
                f"vLLM server {url} answered 404 to {what}: vllm_server_url must be the OpenAI API root, "
                f"ending in /v1 (e.g. http://localhost:8000/v1), and the model name one it serves ({str(exc)[:200]})"
            )
        if isinstance(exc, openai.AuthenticationError):
            return LightningAgentsError(
                f"vLLM server {url} answered 401 to {what}: it wants its API key (VLLMServerEngine(api_key=...); "
                "RSTG reads it from the environment variable VLLM_API_KEY or the one model.vllm_server_api_key_env "
                f"names) ({str(exc)[:200]})"
            )
        if isinstance(exc, openai.APIStatusError):
            return LightningAgentsError(f"vLLM server {url} answered {exc.status_code} to {what}: {str(exc)[:300]}")
        return LightningAgentsError(f"vLLM server {url} failed {what}: {exc}")

    def _served_models(self) -> list:
        """The server's model list (vLLM's cards carry ``max_model_len``), read once."""
        if self._cards is None:
            try:
                self._cards = list(self.client.models.list().data)
            except self._openai.APIError as exc:
                raise self._server_error(exc, "a request for its model list") from exc
        return self._cards

    @property
    def model(self) -> str:
        """The served model's name."""
        if self._model is None:
            names = [m.id for m in self._served_models()]
            if len(names) != 1:
                raise LightningAgentsError(
                    f"the server at {self.base_url} serves {names}; set the engine's model name "
                    "(VLLMServerEngine(model=...), RSTG: model.vllm_server_model)"
                )
            self._model = names[0]
        return self._model

    @property
    def max_model_len(self) -> int | None:
        """The served model's context limit (prompt + completion) as the server lists it; ``None``
        when it does not say (a server other than vLLM) or has no model list."""
        try:
            cards = self._served_models()
        except LightningAgentsError:
            if self._model is None:
                raise
            return None  # the model is named: sampling can go on without the limit
        limit = next((getattr(c, "max_model_len", None) for c in cards if c.id == self.model), None)
        return limit if isinstance(limit, int) and limit > 0 else None

    def render(self, prompt, tools=None) -> str:
        """The prompt text (chat template applied to message lists)."""
        return self._hf.render(prompt, tools)

    def sync_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Write the weights to ``weights_dir`` and make the server reload them (no-op without it)."""
        if self.weights_dir is None:
            return
        from safetensors.torch import save_file

        from lightning_agents.atomic import atomic_write, atomic_write_text

        folder = Path(self.weights_dir)
        mistral = sorted(p.name for p in folder.glob("consolidated*.safetensors"))
        if mistral:
            # vLLM's default load format reads only consolidated*.safetensors when a folder has
            # them (Mistral's format): model.safetensors would never reach the server.
            raise LightningAgentsError(
                f"vllm_weights_dir {folder} holds {mistral}, which vLLM loads instead of the weights the "
                "trainer writes; delete them from the served folder"
            )
        # Copies: tied weights share storage, which safetensors refuses to write twice.
        tensors = {name: t.detach().to("cpu", copy=True).contiguous() for name, t in named_tensors}
        atomic_write(folder / "model.safetensors", lambda tmp: save_file(tensors, str(tmp), metadata={"format": "pt"}))
        # vLLM reloads only the files a folder's safetensors index lists (and every *.safetensors
        # file when there is none): a checkpoint that came in shards would go on loading its old
        # shards, the new file ignored or loaded in between them. The index names this file alone.
        index = {
            "metadata": {"total_size": sum(t.numel() * t.element_size() for t in tensors.values())},
            "weight_map": dict.fromkeys(tensors, "model.safetensors"),
        }
        atomic_write_text(folder / "model.safetensors.index.json", json.dumps(index, indent=2))
        root = self.base_url.removesuffix("/v1")
        for endpoint, body in (("/collective_rpc", {"method": "reload_weights"}), ("/reset_prefix_cache", None)):
            data = json.dumps(body).encode() if body is not None else b""
            request = urllib.request.Request(
                root + endpoint, data=data, method="POST", headers={"Content-Type": "application/json"}
            )
            try:
                with urllib.request.urlopen(request, timeout=self.reload_timeout) as response:
                    response.read()
            except urllib.error.HTTPError as err:
                raise LightningAgentsError(
                    f"vLLM server {root}{endpoint} answered {err.code}: {err.read()[:200]!r} "
                    "(start it with VLLM_SERVER_DEV_MODE=1 to allow weight reloads)"
                ) from err
            except urllib.error.URLError as err:
                raise LightningAgentsError(
                    f"vLLM server {root}{endpoint} unreachable for a weight reload: {err.reason}"
                ) from err
            except TimeoutError as err:
                raise LightningAgentsError(
                    f"vLLM server {root}{endpoint} did not finish a weight reload within {self.reload_timeout:g} s "
                    "(VLLMServerEngine(reload_timeout=...), RSTG: model.vllm_server_reload_timeout)"
                ) from err

    def _complete(
        self,
        prompt_ids: list[int],
        num_samples: int,
        sampling: SamplingConfig,
        seed: int | None = None,
        max_model_len: int | None = None,
    ):
        max_tokens = sampling.max_new_tokens
        if max_model_len is not None:
            # Older vLLM releases answer 400 to prompt + max_tokens > max_model_len (current ones
            # shorten the completion): ask for what fits, so the samples run to the limit, not vanish.
            max_tokens = min(max_tokens, max_model_len - len(prompt_ids))
            if max_tokens < 1:
                log.warning(
                    "a %d-token prompt leaves no room in the vLLM server's %d-token context (%s); its %d "
                    "samples count as unfinished",
                    len(prompt_ids),
                    max_model_len,
                    self.base_url,
                    num_samples,
                )
                return None
        extra: dict[str, Any] = {
            "return_tokens_as_token_ids": True,
            "skip_special_tokens": False,
            # The server stops at its EOS and generation-config ids only, not at the chat
            # template's end-of-turn token a fine-tuned base model writes (<|im_end|>).
            "stop_token_ids": list(self.stop_ids),
            # vLLM's completions request takes ignore_eos as a sampling parameter (vllm-project/vllm
            # @002032ee2b18 vllm/entrypoints/openai/completion/protocol.py, CompletionRequest)
            **self._eos_setting,
            # Every setting that shapes the distribution is sent: a server started with
            # `--generation-config auto` (vLLM's default) fills missing ones from the checkpoint
            # (Qwen3's top_k 20, Qwen2.5's repetition_penalty 1.05), which the trainer's forward
            # does not apply, so the sampled log-probs would be another distribution's.
            "top_k": sampling.top_k if sampling.do_sample and sampling.top_k else -1,
            "min_p": 0.0,
            "repetition_penalty": 1.0,
            "presence_penalty": 0.0,
            "frequency_penalty": 0.0,
        }
        seeded = {} if seed is None else {"seed": int(seed)}
        try:
            return self.client.completions.create(
                **seeded,
                model=self.model,
                prompt=prompt_ids,
                # vLLM refuses n > 1 at temperature 0 ("n must be 1 when using greedy sampling");
                # greedy samples are all the same, generate() repeats the one.
                n=num_samples if sampling.do_sample else 1,
                max_tokens=max_tokens,
                temperature=sampling.temperature if sampling.do_sample else 0.0,
                top_p=sampling.top_p if sampling.do_sample else 1.0,
                logprobs=0,
                extra_body=extra,
            )
        except self._openai.BadRequestError as exc:
            # A multi-turn episode can outgrow the server's max_model_len: that prompt's samples
            # end unfinished (truncated), the step goes on. Any other bad request is a bug or a
            # misconfiguration and stops the run.
            if "context length" not in str(exc) and "max_model_len" not in str(exc):
                raise self._server_error(exc, f"a completions request ({len(prompt_ids)}-token prompt)") from exc
            log.warning(
                "vLLM server refused a %d-token prompt (%s); its %d samples count as unfinished",
                len(prompt_ids),
                str(exc)[:200],
                num_samples,
            )
            return None
        except self._openai.APIError as exc:
            raise self._server_error(exc, f"a completions request ({len(prompt_ids)}-token prompt)") from exc

    def _complete_all(self, unpadded, num_samples, sampling, seeds) -> list:
        """One completions request per prompt, ``max_concurrency`` at a time. The first failure is
        raised as soon as it happens: prompts not yet sent are dropped and those in flight are
        left to finish in the background, their replies unread. The workers are daemon threads, so
        those leftovers do not hold up the exit of a run that stops on the error (a thread pool's
        threads held it for up to ``timeout x (max_retries + 1)``)."""
        if not unpadded:
            return []
        per_prompt = [None] * len(unpadded) if seeds is None else list(seeds)
        # Resolved once here (max_model_len resolves the model name too), not by every worker
        # thread at its first request.
        limit = self.max_model_len
        todo: queue.SimpleQueue[int] = queue.SimpleQueue()
        for k in range(len(unpadded)):
            todo.put(k)
        results: list = [None] * len(unpadded)
        errors: list[BaseException] = []
        left = [len(unpadded)]
        lock = threading.Lock()
        finished = threading.Event()
        stop = threading.Event()

        slots = self._slots

        def abandoned() -> bool:
            return bool(errors) or stop.is_set()

        def work() -> None:
            while not abandoned():
                try:
                    k = todo.get_nowait()
                except queue.Empty:
                    return
                # the engine-wide slots: a failed call's requests still in flight count against the
                # next call's max_concurrency (without them the server saw 7 at a limit of 4); they
                # are granted in arrival order, so concurrent calls take turns
                if not slots.acquire(cancelled=abandoned):
                    return
                try:
                    results[k] = self._complete(unpadded[k], num_samples, sampling, per_prompt[k], limit)
                except BaseException as exc:  # noqa: BLE001 -- handed to the caller's thread
                    errors.append(exc)
                    finished.set()
                    return
                finally:
                    slots.release()
                with lock:
                    left[0] -= 1
                    if left[0] == 0:
                        finished.set()

        for _ in range(max(1, min(self.max_concurrency, len(unpadded)))):
            threading.Thread(target=work, name="vllm-server-request", daemon=True).start()
        try:
            finished.wait()
        finally:
            # an interrupt (Ctrl-C in a notebook) or the first failure: prompts not yet sent stay unsent,
            # and this call's workers still queued for a slot leave the queue
            stop.set()
            slots.wake()
        if errors:
            raise errors[0]
        return results

    def generate(
        self,
        prompts: Sequence,
        num_samples: int = 1,
        sampling: SamplingConfig | None = None,
        tools=None,
        seeds: Sequence[int] | None = None,
    ) -> GenerationOutput:
        """Sample ``num_samples`` completions per prompt; same output layout as the HF engine.

        ``seeds`` (one per prompt) is sent as each request's ``seed``.
        """
        sampling = sampling or SamplingConfig()
        _check_seeds(seeds, prompts)
        if not prompts:
            return empty_generation_output(with_entropies=False)  # not even the model list is asked for
        prompt_ids, prompt_mask = self._hf.encode_prompts(prompts, tools)
        responses = self._complete_all(_unpadded(prompt_ids, prompt_mask), num_samples, sampling, seeds)
        ids, lps, reasons = [], [], []
        stops = list(self.stop_ids)
        for response in responses:
            if response is None:  # the prompt did not fit the server's context: empty, unfinished samples
                ids += [[] for _ in range(num_samples)]
                lps += [[] for _ in range(num_samples)]
                reasons += ["length"] * num_samples
                continue
            choices = sorted(response.choices, key=lambda c: c.index)
            if not sampling.do_sample and len(choices) == 1:
                choices = choices * num_samples
            if len(choices) != num_samples:
                raise LightningAgentsError(
                    f"vLLM server {self.base_url} returned {len(choices)} samples for a prompt, asked for "
                    f"{num_samples} (n); a server that ignores `n` cannot sample groups"
                )
            for choice in choices:
                try:
                    tokens, values = parse_token_logprobs(choice.logprobs)
                except LightningAgentsError as err:
                    raise LightningAgentsError(f"vLLM server {self.base_url}: {err}") from None
                # vLLM keeps the stop token in the sample and names a stop id other than the EOS
                # (a generation_config end-of-turn id) in ``stop_reason``; only a server that
                # stopped on the EOS and left it out gets it added back, log-prob unknown (NaN).
                # An EOS that is no stop token (the template writes it inside a turn, the request
                # sets ignore_eos) ends no turn and is never added: a sample that ended at it got
                # it a second time.
                stop_reason = getattr(choice, "stop_reason", None)
                if isinstance(stop_reason, int) and stop_reason not in stops:
                    stops.append(stop_reason)
                eos = self.tokenizer.eos_token_id
                stopped_at_eos = choice.finish_reason == "stop" and stop_reason is None and eos in stops
                if stopped_at_eos and (not tokens or tokens[-1] not in stops):
                    tokens, values = tokens + [eos], values + [math.nan]
                ids.append(tokens)
                lps.append(values)
                reasons.append(choice.finish_reason)
        return pack_completions(self.tokenizer, prompt_ids, prompt_mask, num_samples, ids, lps, reasons, stops)


def parse_token_logprobs(logprobs) -> tuple[list[int], list[float]]:
    """Token ids and log-probs of one completions-API choice returned with
    ``return_tokens_as_token_ids`` (tokens spelled ``"token_id:123"``)."""
    if logprobs is None:
        raise LightningAgentsError("the vLLM server returned no logprobs; it must support logprobs=0")
    tokens = logprobs.tokens if hasattr(logprobs, "tokens") else logprobs["tokens"]
    values = logprobs.token_logprobs if hasattr(logprobs, "token_logprobs") else logprobs["token_logprobs"]
    ids = []
    for tok in tokens:
        if not isinstance(tok, str) or not tok.startswith("token_id:"):
            raise LightningAgentsError(
                f"expected tokens spelled 'token_id:N' (return_tokens_as_token_ids), got {tok!r}"
            )
        ids.append(int(tok.split(":", 1)[1]))
    # vLLM sends a log-prob of -inf as -9999.0: unknown, not a number to train with.
    return ids, [math.nan if v is None or float(v) <= -9999.0 else float(v) for v in values]
