"""The priced model pool HFlow nodes call: local HF causal LMs and OpenAI-compatible endpoints.

Every call goes through :meth:`BackbonePool.complete`, which records its tokens and cost in the
:class:`Ledger` under the workflow, generation and role (``workflow`` or ``optimizer``) that made
it. Prices are per million tokens and must be given: an unknown price is a configuration error,
never a silent zero, because a free model would win every cost-aware search. Prompt tokens a server
reports as served from its prompt cache are priced at the backbone's ``cached_input_price`` (by
default its ``input_price``).
"""

from __future__ import annotations

import dataclasses
import datetime
import email.utils
import hashlib
import json
import logging
import math
import os
import re
import threading
from collections import defaultdict, deque
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from lightning_agents.atomic import read_appended
from lightning_agents.content_parts import PROMPT_PARTS_JOIN, content_text
from lightning_agents.errors import LightningAgentsError

log = logging.getLogger(__name__)

# how a request's system messages can be sent (the ``system_role`` option of both backbone kinds)
SYSTEM_ROLES = ("system", "developer", "user")

__all__ = [
    "Backbone",
    "BackboneError",
    "BackbonePool",
    "BackboneSpec",
    "Completion",
    "ConfigError",
    "Ledger",
    "LocalHFBackbone",
    "OpenAIBackbone",
    "Request",
    "build_backbone",
]


class ConfigError(LightningAgentsError, ValueError):
    """A backbone or pool is configured wrongly (missing price, unknown name, missing key)."""


class BackboneError(LightningAgentsError, RuntimeError):
    """A model call failed for good (after the configured retries).

    Args:
        message: what failed.
        paid: what the failed call was billed for anyway (unusable replies that reported usage
            before it stopped the run), as failed completions to book.
    """

    def __init__(self, message: str, paid: Sequence[Completion] = ()) -> None:
        super().__init__(message)
        self.paid = list(paid)


@dataclass
class Request:
    """One chat completion request.

    Args:
        messages: OpenAI-format messages.
        max_tokens: completion length limit.
        temperature: sampling temperature; 0 means greedy decoding.
        seed: sampling seed, so sampled calls are reproducible whatever thread runs them.
        tools: OpenAI tool schemas the model may call (``None``: none). A local model sees them
            through its chat template, as in a rollout; an HTTP endpoint gets them as ``tools=``.
    """

    messages: list[dict[str, Any]]
    max_tokens: int = 64
    temperature: float = 0.0
    seed: int = 0
    tools: list[dict[str, Any]] | None = None


@dataclass
class Completion:
    """One completion and the tokens it was billed for.

    Args:
        text: the completion text.
        input_tokens: prompt tokens.
        output_tokens: completion tokens.
        error: why the call failed for good (after its retries), None when it succeeded; a failed
            call costs the problem it was made for, not the run.
        tool_calls: tool calls the endpoint returned parsed (OpenAI format, ``message.tool_calls``);
            ``None`` when it returned none or returns them inside ``text`` (a local model writes
            ``<tool_call>`` blocks, which the agent turn parses as a rollout does).
        truncated: the completion stopped at ``max_tokens`` instead of finishing.
        cached_tokens: the share of ``input_tokens`` the server served from its prompt cache (billed
            at the backbone's ``cached_input_price``); 0 when it reports none.
        replayed: served from the call log (paid and booked before a restart), not sent again.
    """

    text: str
    input_tokens: int
    output_tokens: int
    error: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    truncated: bool = False
    cached_tokens: int = 0
    replayed: bool = False


def request_seed(*parts: Any) -> int:
    """A 31-bit seed derived from arbitrary parts (stable across processes, unlike ``hash``)."""
    blob = json.dumps(parts, sort_keys=True, default=str).encode()
    return int.from_bytes(hashlib.sha256(blob).digest()[:4], "big") & 0x7FFFFFFF


def _price(prices: tuple[float, float, float], input_tokens: int, output_tokens: int, cached_tokens: int = 0) -> float:
    """Dollars for these token counts at ``(input, output, cached input)`` prices per million.

    The cached share enters as a discount on the full prompt price, so with no cached tokens, or a
    cached price equal to the input price, the figure is bit for bit the one without caching.
    """
    pin, pout, pcached = prices
    return (input_tokens * pin + output_tokens * pout + cached_tokens * (pcached - pin)) / 1e6


class Backbone:
    """A priced chat model. Subclasses implement :meth:`_complete`.

    Args:
        name: the name nodes refer to it by.
        input_price: cost per one million prompt tokens (required).
        output_price: cost per one million completion tokens (required).
        cached_input_price: cost per one million prompt tokens the server served from its prompt
            cache and reports as such (OpenAI's and DeepSeek's discount); None: ``input_price``.
    """

    kind = "abstract"
    # Whether a restart is served the answers the call log holds for the requests it sends again
    # (paid calls); a local model being trained changes between them, and costs nothing to ask.
    replays_logged_answers = True

    def __init__(
        self,
        name: str,
        input_price: float | None,
        output_price: float | None,
        cached_input_price: float | None = None,
    ) -> None:
        if not name:
            raise ConfigError("a backbone needs a name")
        for label, price in (("input_price", input_price), ("output_price", output_price)):
            if price is None:
                raise ConfigError(
                    f"backbone {name!r} has no {label}: every backbone needs a price per million input and output "
                    "tokens (use a small positive number for a local model whose compute you want to count)"
                )
        for label, price in (
            ("input_price", input_price),
            ("output_price", output_price),
            ("cached_input_price", cached_input_price),
        ):
            if price is not None and (not isinstance(price, (int, float)) or not math.isfinite(price) or price < 0):
                raise ConfigError(f"backbone {name!r}: {label} must be a finite number >= 0, got {price!r}")
        self.name = name
        self.input_price = float(input_price)
        self.output_price = float(output_price)
        self.cached_input_price = self.input_price if cached_input_price is None else float(cached_input_price)

    @property
    def prices(self) -> tuple[float, float, float]:
        """``(input_price, output_price, cached_input_price)`` per million tokens."""
        return (self.input_price, self.output_price, self.cached_input_price)

    def cost(self, input_tokens: int, output_tokens: int, cached_tokens: int = 0) -> float:
        """Cost of a call with these token counts (``cached_tokens`` is a share of ``input_tokens``)."""
        return _price(self.prices, input_tokens, output_tokens, cached_tokens)

    def complete(
        self, requests: Sequence[Request], on_answer: Callable[[Request, Completion], None] | None = None
    ) -> list[Completion]:
        """Answer every request (same order).

        Args:
            requests: the requests.
            on_answer: called once with every request and its completion, failed ones included (the
                pool books them); here once the batch is done, by :class:`OpenAIBackbone` as each
                answer arrives, so a process killed mid-batch has booked every answer it received.
        """
        if not requests:
            return []
        out = self._complete(list(requests))
        if len(out) != len(requests):
            raise BackboneError(f"backbone {self.name!r} returned {len(out)} completions for {len(requests)} requests")
        for r, c in zip(requests, out) if on_answer is not None else ():
            on_answer(r, c)
        return out

    def _complete(self, requests: list[Request]) -> list[Completion]:
        raise NotImplementedError

    def wire_fields(self, request: Request) -> dict[str, Any]:
        """The :func:`request_key` fields in which what this backbone sends for ``request`` differs
        from the request itself (``{}``: it sends the request as it is)."""
        return {}

    def describe(self) -> dict[str, Any]:
        """Plain-data description (kind, name, prices) for reports."""
        return {
            "name": self.name,
            "kind": self.kind,
            "input_price": self.input_price,
            "output_price": self.output_price,
            "cached_input_price": self.cached_input_price,
        }


class LocalHFBackbone(Backbone):
    """A local Hugging Face causal LM, through the shared loader and generation engine.

    Requests with the same length limit and temperature are batched into one ``generate`` call.
    A lock serialises calls on the model (generation mutates its train/eval mode and the global
    torch RNG), and sampled batches are seeded from their requests' seeds so results do not depend
    on which thread got there first.

    Args:
        name: pool name.
        model: path, hub id or ``embedded:student`` / ``embedded:teacher`` (ignored when
            ``model_object`` is given).
        input_price: cost per one million prompt tokens.
        output_price: cost per one million completion tokens.
        dtype: weight dtype when loading.
        device: device when loading (None: CPU).
        model_object: an already loaded model to share (no copy), e.g. the one being trained.
        tokenizer: its tokenizer (required with ``model_object``).
        batch_size: most requests per ``generate`` call.
        cached_input_price: cost per one million cached prompt tokens (None: ``input_price``);
            accepted as for any backbone, though a local model reports no cached tokens.
        system_role: how a request's ``system`` messages reach the chat template, as for
            :class:`OpenAIBackbone`: ``system`` as they are, ``developer`` as a ``developer`` message,
            ``user`` with their text opening the next user message (for a model whose template
            raises on a system message, Gemma 1 and 2's "System role not supported").
    """

    kind = "hf"
    replays_logged_answers = False

    def __init__(
        self,
        name: str,
        model: str | None = None,
        input_price: float | None = None,
        output_price: float | None = None,
        dtype: Literal["float32", "bfloat16", "float16"] = "float32",
        device: str | None = None,
        model_object: Any = None,
        tokenizer: Any = None,
        batch_size: int = 64,
        cached_input_price: float | None = None,
        system_role: Literal["system", "developer", "user"] = "system",
    ) -> None:
        super().__init__(name, input_price, output_price, cached_input_price)
        _check_system_role(name, system_role)
        if model_object is None and not model:
            raise ConfigError(f"local backbone {name!r} needs a model path or a model object")
        if model_object is not None and tokenizer is None:
            raise ConfigError(f"local backbone {name!r}: a shared model object needs its tokenizer")
        self.model_name = model
        self.dtype = dtype
        self.device = device
        self.batch_size = batch_size
        self.system_role = system_role
        self._model = model_object
        self._tokenizer = tokenizer
        self._engine = None
        self._lock = threading.Lock()
        # the chat template's answers (tool-call style, calls per turn, tool results rendered) as
        # (template, answer): probed once per template, so a read does not wait on a generation,
        # and probed again once datamodules/chat.py or export.py sets another template
        self._template_facts: dict[str, tuple[Any, Any]] = {}

    def _template_fact(self, name: str, probe) -> Any:
        engine = self._engine
        cached = self._template_facts.get(name)
        if engine is not None and cached is not None and cached[0] == getattr(engine.tokenizer, "chat_template", None):
            return cached[1]
        with self._lock:
            tokenizer = self._ensure_engine().tokenizer
            template = getattr(tokenizer, "chat_template", None)
            cached = self._template_facts.get(name)
            if cached is None or cached[0] != template:
                cached = self._template_facts[name] = (template, probe(tokenizer))
            return cached[1]

    def _ensure_engine(self):
        from lightning_agents.rollout.hf_engine import HFGenerationEngine

        if self._engine is None:
            if self._model is None:
                from lightning_agents.models import load_model_and_tokenizer

                self._model, self._tokenizer = load_model_and_tokenizer(
                    self.model_name, dtype=self.dtype, device=self.device, padding_side="left"
                )
            self._engine = HFGenerationEngine(self._model, self._tokenizer)
        return self._engine

    @property
    def model(self):
        """The underlying model (loaded on first use)."""
        return self._ensure_engine().model

    @property
    def tool_call_style(self) -> str:
        """How the model writes tool calls: its chat template's format (agent operators parse its
        replies with it; an endpoint parses them itself)."""
        from lightning_agents.rollout.agent_turn import model_tool_call_style

        return self._template_fact("tool_call_style", model_tool_call_style)

    @property
    def calls_per_turn(self) -> int | None:
        """Tool calls its chat template renders in one assistant message (1 for Llama 3.1/3.2,
        whose templates raise on more; ``None``: any number). Agent operators answer the calls
        beyond it as observations, where a reply with two calls made the next render raise."""
        from lightning_agents.rollout.agent_turn import model_calls_per_turn

        return self._template_fact("calls_per_turn", model_calls_per_turn)

    @property
    def renders_tool_results(self) -> bool | None:
        """Whether its chat template renders ``tool`` messages (``False`` for Phi-3.5's, which
        leaves every tool result out of the prompt; ``None``: not known). Agent operators refuse a
        backbone answering ``False`` on a task with tools."""
        from lightning_agents.rollout.agent_turn import model_renders_tool_results

        return self._template_fact("renders_tool_results", model_renders_tool_results)

    def _complete(self, requests: list[Request]) -> list[Completion]:
        import torch

        from lightning_agents.rollout.hf_engine import SamplingConfig

        out: list[Completion | None] = [None] * len(requests)
        messages = [_send_system_as(r.messages, self.system_role) for r in requests]
        with self._lock:
            engine = self._ensure_engine()
            limit = getattr(engine.model.config, "max_position_embeddings", None)
            groups: dict[tuple[int, float, str], list[int]] = defaultdict(list)
            for i, r in enumerate(requests):
                max_tokens = r.max_tokens
                if limit:
                    # Long multi-turn prompts (refine, retries) can outgrow a small model's context:
                    # shorten the completion to fit, and answer nothing when even the prompt does not.
                    rendered = engine.render(messages[i], r.tools or None)
                    n_prompt = len(engine.tokenizer(rendered, add_special_tokens=False, verbose=False)["input_ids"])
                    max_tokens = min(max_tokens, limit - n_prompt)
                    if max_tokens <= 0:
                        out[i] = Completion("", 0, 0, truncated=True)  # nothing ran, nothing is billed
                        continue
                # One generate call renders one tool list, so requests group by their tools too.
                tools_key = json.dumps(r.tools, sort_keys=True) if r.tools else ""
                groups[(max_tokens, float(r.temperature), tools_key)].append(i)
            for (max_tokens, temperature, _tools), idx in sorted(groups.items()):
                tools = requests[idx[0]].tools or None
                for start in range(0, len(idx), self.batch_size):
                    chunk = idx[start : start + self.batch_size]
                    sampling = SamplingConfig(
                        max_new_tokens=max_tokens,
                        temperature=temperature if temperature > 0 else 1.0,
                        do_sample=temperature > 0,
                    )
                    if temperature > 0:
                        torch.manual_seed(request_seed([requests[i].seed for i in chunk]))
                    gen = engine.generate([messages[i] for i in chunk], sampling=sampling, tools=tools)
                    prompt_tokens = gen.prompt_mask.sum(dim=1).tolist()
                    completion_tokens = gen.completion_mask.sum(dim=1).tolist()
                    for row, i in enumerate(chunk):
                        out[i] = Completion(
                            gen.texts[row].strip(),
                            int(prompt_tokens[row]),
                            int(completion_tokens[row]),
                            truncated=bool(gen.truncated[row]),
                        )
        return out  # type: ignore[return-value]


class OpenAIBackbone(Backbone):
    """An OpenAI-compatible chat endpoint, called through the official ``openai`` client.

    The client's own retries are off; this class applies a policy per error class instead:

    - connection errors, timeouts, HTTP 408/409/429 and 5xx are retried with exponential backoff
      (``backoff_s * 2**attempt``); when the server says how long to wait (``retry-after-ms`` or
      ``retry-after``, seconds or an HTTP date, or, with no such header, a ``google.rpc.RetryInfo``
      ``retryDelay`` in the error body, as Gemini sends) the wait is the longer of the two, each
      wait capped at :attr:`MAX_RETRY_AFTER_S`; when the retries run out, or the next wait would
      take one call's waits past :attr:`MAX_TOTAL_WAIT_S`, the call fails for good (a shortened
      wait would retry before the server said to);
    - a response that is not a chat completion (a proxy's HTML page, an ``{"error": ...}`` body
      with status 200 as some routers send when the upstream provider fails, a body cut short, a
      ``message.content`` of an unexpected shape, a reply the server cut off with ``finish_reason``
      ``abort`` (vLLM, SGLang) or ``error`` (OpenRouter)) is retried like a server error; the tokens
      such a response reports in its ``usage`` are booked with the call (the provider bills them);
    - ``message.content`` given as a list of content parts (Mistral's reasoning models) is read as
      its ``text`` parts joined (``thinking`` parts are reasoning, not the answer);
    - HTTP 400/413/422 (a bad or too long request, e.g. a context overflow) fail at once;
    - a call that failed for good returns a :class:`Completion` with ``error`` set: it costs the
      problem it was made for, not the run;
    - HTTP 401/402/403/404 (wrong key, no credit left, model or URL), HTTP 429 with code
      ``insufficient_quota`` (OpenAI's "You exceeded your current quota": no wait lifts it), HTTP
      429 whose ``google.rpc.QuotaFailure`` names a per-day quota (Gemini's
      ``GenerateRequestsPerDayPerProjectPerModel-FreeTier``: it resets daily, so no wait within
      the run's limits lifts it; per-minute quotas are rate limits and are retried), HTTP 429 for
      OpenRouter's spent daily limit on free models (``free-models-per-day``, named with its
      ``X-RateLimit-Reset`` when the body has it), HTTP
      400 with code ``unsupported_parameter`` or ``unsupported_value`` (a model that rejects
      ``max_tokens``, ``temperature``, ``seed`` or the ``system`` role: the error names the
      backbone option that fixes it), a chat template's refusal of a request that holds a system
      message ("System role not supported", Gemma 1 and 2's; "Conversation roles must alternate
      user/assistant/user/assistant/...", Mixtral-8x7B-Instruct-v0.1's) answered with HTTP 400
      (vLLM), 422 (TGI) or 500 (SGLang), and a response without token usage (its cost would be
      unknown) raise
      :class:`BackboneError`: no later call could do better. So do ``max_consecutive_failures``
      failures in a row (the endpoint is down); a request the server refused (HTTP 400/413/422)
      counts toward them only until the endpoint has answered a call,
      since after that it is the request's fault (a context overflow, a content filter), not the
      endpoint's. Once such an error is raised the backbone sends nothing more: requests of the
      same batch and of other threads not yet sent fail with the same error, those already waiting
      for a concurrency slot included.
    - every answer is handed to the pool (and booked) as it arrives, not when its batch is done:
      the answers of a batch that an error or a kill cut short are paid all the same.
    - a response reporting 0 prompt tokens for a completion (ollama when the prompt was cached) is
      accepted with a warning, once per backbone: the ledger then understates that call's cost.
    - an empty answer is a completion (billed, scored 0), with a warning once per backbone when
      the model spent the whole limit reasoning (``reasoning_content`` / ``reasoning``, or only
      ``completion_tokens_details.reasoning_tokens`` as OpenAI's reasoning models report it, cut at
      ``finish_reason: length``), wrote only reasoning though it stopped, was withheld by a content
      filter (``finish_reason: content_filter``) or refused (``message.refusal``).
    - prompt tokens served from the server's prompt cache (OpenAI's
      ``usage.prompt_tokens_details.cached_tokens``, DeepSeek's ``usage.prompt_cache_hit_tokens``,
      both a share of ``prompt_tokens``) are priced at ``cached_input_price``; a missing, null or
      malformed count is 0, and the count is capped at ``prompt_tokens``. Reasoning tokens are
      already inside ``completion_tokens`` and are not added again, unless the usage shows them
      left out (``total_tokens`` = prompt + completion + reasoning, as xAI's API and gateways in
      front of Gemini report thinking; with no total, more reasoning than completion tokens): then
      they are billed as output too.
    - tool call ``arguments`` sent as an object (TGI) are kept as the JSON string OpenAI sends.

    At most ``max_concurrency`` requests are in flight per backbone, across all threads.
    Model quirks are options: o1-style reasoning models reject ``temperature`` and want
    ``max_completion_tokens`` instead of ``max_tokens``; o1-mini and o1-preview (and chat
    templates such as Gemma 1 and 2's) reject a ``system`` message, which ``system_role`` sends
    another way.

    Args:
        name: pool name.
        model: the model name sent to the server.
        base_url: e.g. ``https://api.openai.com/v1`` or ``http://127.0.0.1:8000/v1``.
        input_price: cost per one million prompt tokens.
        output_price: cost per one million completion tokens.
        api_key_env: name of the environment variable holding the API key (None: a placeholder
            key, for local servers that check none).
        timeout_s: per-request timeout in seconds.
        max_retries: retries after the first attempt (retryable errors only).
        backoff_s: first backoff delay in seconds (doubled each retry; a longer ``retry-after`` from
            the server is waited instead, up to :attr:`MAX_RETRY_AFTER_S`).
        max_concurrency: most simultaneous requests to this endpoint.
        send_temperature: send ``temperature`` (False for models that reject it).
        send_seed: send ``seed`` (False for servers that reject it).
        max_tokens_param: name of the completion-length field, ``max_tokens`` or
            ``max_completion_tokens``.
        max_consecutive_failures: failed calls in a row after which the run stops.
        cached_input_price: cost per one million prompt tokens the server reports as cached
            (e.g. 0.075 for gpt-4o-mini, whose ``input_price`` is 0.15); None: ``input_price``.
        system_role: how a request's ``system`` messages are sent: ``system`` as they are;
            ``developer`` as OpenAI's ``developer`` role (o1 from 2024-12-17, o3, o4-mini); ``user``
            with their text opening the next user message, separated by a blank line, as Gemma 3's
            chat template merges a system message itself (``first_user_prefix``), for templates that
            raise on one (Gemma 1 and 2's, Mixtral-8x7B-Instruct-v0.1's), and as o1-mini and
            o1-preview, which take neither ``system`` nor ``developer``, need.
        alphanumeric_ids: the served model takes only nine-character alphanumeric call ids
            (Mistral's: vLLM's Mistral path answers any other with HTTP 400, "Tool call id must
            be a-z, A-Z, 0-9, with a length of 9"). ``True``: a history's other ids (another
            backbone's ``call_0_0``, in an HFlow verify node) are sent renamed, in each call and
            its results, by the rule SFT and local rollouts use
            (:func:`~lightning_agents.rollout.tool_calls.nine_character_call_ids`), and the calls
            its episodes run get such ids. ``None`` (default): sent as they are; the endpoint's
            template cannot be read here to tell.
    """

    kind = "openai"
    RETRY_STATUS = frozenset({408, 409, 429})
    FATAL_STATUS = frozenset({401, 402, 403, 404})
    # What the server says about this one request (a context overflow, a content filter): after the
    # endpoint has answered, such a refusal costs its problem, not the run.
    REFUSED_STATUS = frozenset({400, 413, 422})
    # HTTP 400 codes that OpenAI gives a model rejecting a request field: the same for every request
    CONFIG_ERROR_CODES = frozenset({"unsupported_parameter", "unsupported_value"})
    # the backbone option that stops sending the rejected field
    PARAM_FIXES = {
        "max_tokens": "max_tokens_param: max_completion_tokens",
        "max_completion_tokens": "max_tokens_param: max_tokens",
        "temperature": "send_temperature: false",
        "seed": "send_seed: false",
    }
    # HTTP 429 codes that mean the account is out of credit, not a rate limit: retrying cannot help
    OUT_OF_CREDIT_CODES = frozenset({"insufficient_quota"})
    # finish_reason values of a status-200 reply that the server cut off by failing, not an answer:
    # vLLM's and SGLang's "abort" (the request was aborted mid-generation), OpenRouter's "error" (the
    # upstream provider failed mid-generation), DeepSeek's "insufficient_system_resource" ("the
    # request is interrupted due to insufficient resource of the inference system"); retried like a
    # server error, their usage booked
    FAILED_FINISH = frozenset({"abort", "error", "insufficient_system_resource"})
    MAX_RETRY_AFTER_S = 60.0  # longest single wait a server's retry-after gets
    MAX_TOTAL_WAIT_S = 300.0  # longest total wait of one call's retries

    def __init__(
        self,
        name: str,
        model: str,
        base_url: str,
        input_price: float | None = None,
        output_price: float | None = None,
        api_key_env: str | None = None,
        timeout_s: float = 60.0,
        max_retries: int = 3,
        backoff_s: float = 1.0,
        max_concurrency: int = 4,
        send_temperature: bool = True,
        send_seed: bool = True,
        max_tokens_param: Literal["max_tokens", "max_completion_tokens"] = "max_tokens",
        max_consecutive_failures: int = 16,
        cached_input_price: float | None = None,
        system_role: Literal["system", "developer", "user"] = "system",
        alphanumeric_ids: bool | None = None,
    ) -> None:
        super().__init__(name, input_price, output_price, cached_input_price)
        if not base_url or not base_url.startswith(("http://", "https://")):
            raise ConfigError(f"backbone {name!r}: base_url must start with http:// or https://, got {base_url!r}")
        if "?" in base_url:
            # the client appends /chat/completions to the query (".../dep/?api-version=Xchat/completions");
            # a fragment it drops, which is harmless
            raise ConfigError(
                f"backbone {name!r}: base_url {base_url!r} has a query, which the client cannot "
                "extend with /chat/completions; for Azure OpenAI use the v1 API, "
                "https://<resource>.openai.azure.com/openai/v1, which needs no api-version"
            )
        if not model:
            raise ConfigError(f"backbone {name!r}: the endpoint's model name is required")
        if max_concurrency < 1 or max_retries < 0 or timeout_s <= 0:
            raise ConfigError(f"backbone {name!r}: need max_concurrency >= 1, max_retries >= 0, timeout_s > 0")
        if max_tokens_param not in ("max_tokens", "max_completion_tokens"):
            raise ConfigError(f"backbone {name!r}: max_tokens_param must be max_tokens or max_completion_tokens")
        _check_system_role(name, system_role)
        self.api_key = None
        self.api_key_env = api_key_env
        if api_key_env:
            self.api_key = os.environ.get(api_key_env)
            if not self.api_key:
                raise ConfigError(f"backbone {name!r}: environment variable {api_key_env} (its API key) is not set")
        try:
            import openai
        except ImportError:
            raise ConfigError(
                f"backbone {name!r}: kind openai needs the openai client: pip install 'lightning-agents[hflow]'"
            ) from None
        self._openai = openai
        self.model_name = model
        self.base_url = base_url.rstrip("/")
        self.url = self.base_url + "/chat/completions"
        self.timeout_s = float(timeout_s)
        self.max_retries = int(max_retries)
        self.backoff_s = float(backoff_s)
        self.max_concurrency = int(max_concurrency)
        self.send_temperature = bool(send_temperature)
        self.send_seed = bool(send_seed)
        self.max_tokens_param = max_tokens_param
        self.system_role = system_role
        self.alphanumeric_ids = alphanumeric_ids
        self.max_consecutive_failures = int(max_consecutive_failures)
        self.client = openai.OpenAI(
            base_url=self.base_url, api_key=self.api_key or "none", timeout=self.timeout_s, max_retries=0
        )
        self._slots = threading.BoundedSemaphore(self.max_concurrency)
        self._attempts_lock = threading.Lock()
        self.attempts = 0  # total HTTP attempts, retries included (read by tests and reports)
        self.failures = 0  # calls that failed for good
        self._consecutive = 0
        self._answered = False  # whether the endpoint has answered a call yet
        self._stopped: str | None = None  # the error that stopped the run: nothing is sent after it
        self._stopping = threading.Event()  # set with _stopped: wakes calls waiting to retry
        self._warned_zero_prompt = False
        self._warned: set[str] = set()  # kinds of reply warned about once

    def complete(
        self, requests: Sequence[Request], on_answer: Callable[[Request, Completion], None] | None = None
    ) -> list[Completion]:
        """Answer every request (same order), handing each completion to ``on_answer`` as it
        arrives. When an error stops the run, the rest of the batch finishes or fails unsent and
        the error is raised; every answer that came back was handed over (the provider bills it)."""
        requests = list(requests)
        if len(requests) <= 1:
            return [self._answer(r, on_answer) for r in requests]
        with ThreadPoolExecutor(max_workers=min(self.max_concurrency, len(requests))) as pool:
            futures = [pool.submit(self._answer, r, on_answer) for r in requests]
        errors = [f.exception() for f in futures if f.exception() is not None]
        if errors:
            # the first error that stopped the run, not one of the unsent requests that followed it
            raise BackboneError(self._stopped) if self._stopped else errors[0]
        return [f.result() for f in futures]

    def _complete(self, requests: list[Request]) -> list[Completion]:
        return self.complete(requests)

    def _answer(self, request: Request, on_answer: Callable[[Request, Completion], None] | None) -> Completion:
        """One request's completion, handed to ``on_answer`` as soon as it is there; a call that
        stops the run hands over the tokens of the unusable replies it was billed for first."""
        try:
            completion = self._one(request)
        except BackboneError as exc:
            for paid in exc.paid if on_answer is not None else ():
                on_answer(request, paid)
            raise
        if on_answer is not None:
            on_answer(request, completion)
        return completion

    def _stop(self, message: str, billed: Sequence[int] = (0, 0, 0)) -> BackboneError:
        """The error that stops the run; every request of this backbone not yet sent fails with it
        unsent (a 401 must not be sent again by the rest of the batch and the other workers)."""
        with self._attempts_lock:
            self._stopped = self._stopped or message
        self._stopping.set()
        paid = [Completion("", int(billed[0]), int(billed[1]), error=message, cached_tokens=int(billed[2]))]
        return BackboneError(message, paid if any(billed) else ())

    def _messages(self, request: Request) -> list[dict[str, Any]]:
        """The request's messages as sent: system messages as ``system_role`` says, and call ids
        the served model refuses renamed (``alphanumeric_ids``); the request's own list when
        neither changes it."""
        messages = _send_system_as(request.messages, self.system_role)
        if self.alphanumeric_ids:
            from lightning_agents.rollout.tool_calls import nine_character_call_ids

            messages = nine_character_call_ids(messages)
        return messages

    def _params(self, request: Request) -> dict[str, Any]:
        params: dict[str, Any] = {
            "model": self.model_name,
            "messages": self._messages(request),
            self.max_tokens_param: request.max_tokens,
        }
        if self.send_temperature:
            params["temperature"] = request.temperature
        if self.send_seed:
            params["seed"] = request.seed
        if request.tools:
            params["tools"] = request.tools
        return params

    def wire_fields(self, request: Request) -> dict[str, Any]:
        """What :meth:`_params` sends otherwise than the request says: system messages moved by
        ``system_role``, ``temperature`` / ``seed`` not sent (``None``), and the completion limit's
        field name when it is not ``max_tokens``. Only options that change the request add a field,
        so with the defaults this is ``{}`` and a request's key is the one older logs hold."""
        out: dict[str, Any] = {}
        messages = self._messages(request)
        if messages is not request.messages:
            out["messages"] = messages
        if not self.send_temperature:
            out["temperature"] = None
        if not self.send_seed:
            out["seed"] = None
        if self.max_tokens_param != "max_tokens":
            out["max_tokens_param"] = self.max_tokens_param
        return out

    def _failed(self, message: str, billed: Sequence[int] = (0, 0, 0), refused: bool = False) -> Completion:
        """A call that failed for good. ``refused``: the server answered and refused this request
        (HTTP 400/413/422: a context overflow, a content filter), which says nothing about the
        endpoint once it has answered other calls, so it does not count toward
        ``max_consecutive_failures`` then; before any answer it does (every request refused is a
        configuration error: a wrong model name on a router, say)."""
        with self._attempts_lock:
            self.failures += 1
            if not (refused and self._answered):
                self._consecutive += 1
            down = self._consecutive >= self.max_consecutive_failures
        log.warning("%s", message)
        if down:
            raise self._stop(f"{message} -- {self.max_consecutive_failures} calls in a row failed; stopping", billed)
        return Completion("", int(billed[0]), int(billed[1]), error=message, cached_tokens=int(billed[2]))

    def _one(self, request: Request) -> Completion:
        openai = self._openai
        last = ""
        retry_after: float | None = None
        waited = 0.0
        billed = [0, 0, 0]  # tokens of malformed responses that reported usage (the provider bills them)
        params = self._params(request)
        for attempt in range(self.max_retries + 1):
            if self._stopped is not None:
                raise self._stop(self._stopped, billed)
            if attempt:
                wait = self.backoff_s * 2 ** (attempt - 1)
                if retry_after is not None:
                    wait = max(wait, min(retry_after, self.MAX_RETRY_AFTER_S))
                if waited + wait > self.MAX_TOTAL_WAIT_S:
                    # a shortened wait would send the retry before the server said to, and every
                    # later one back to back: the call fails once the waiting budget is spent
                    return self._failed(
                        f"{last} -- gave up after {attempt} attempts and {waited:.0f} s of waiting "
                        f"(the next wait, {wait:.0f} s, would pass the {self.MAX_TOTAL_WAIT_S:.0f} s a call may wait)",
                        billed,
                    )
                waited += wait
                if self._stopping.wait(wait):  # the run stopped while this call waited to retry
                    raise self._stop(self._stopped or last, billed)
            retry_after = None
            try:
                with self._slots:
                    if self._stopped is not None:
                        # the run stopped while this call waited for a slot (the search's workers
                        # queue on the same backbone): it fails unsent, like the check above
                        raise BackboneError(self._stopped)
                    with self._attempts_lock:  # `+=` on an attribute is not atomic across threads
                        self.attempts += 1
                    response = self.client.chat.completions.create(**params)
                completion = self._parse(response)
                with self._attempts_lock:
                    self._consecutive = 0
                    self._answered = True
                completion.input_tokens += billed[0]
                completion.output_tokens += billed[1]
                completion.cached_tokens += billed[2]
                return completion
            except BackboneError as exc:  # a response that stops the run (no usage), or a stop met at the slot
                raise self._stop(str(exc), billed) from None
            except _MalformedResponse as exc:
                last = f"{self.name}: {exc} from {self.url}"
                billed[0] += exc.input_tokens
                billed[1] += exc.output_tokens
                billed[2] += exc.cached_tokens
            except ValueError as exc:  # the client could not decode the body (JSON cut short)
                last = f"{self.name}: unreadable response body from {self.url} ({exc})"
            except openai.APIStatusError as exc:
                last = f"{self.name}: HTTP {exc.status_code} from {self.url}: {_status_detail(exc)}"
                if exc.status_code in self.FATAL_STATUS:
                    raise self._stop(f"{last} -- {self._fatal_hint(exc.status_code)}", billed) from None
                # SGLang answers a chat template's exception with HTTP 500, vLLM 400, TGI 422
                role_refusal = (
                    _system_role_refusal(exc, params["messages"])
                    if exc.status_code in (400, 422) or exc.status_code >= 500
                    else None
                )
                if role_refusal is not None:
                    raise self._stop(f"{last} -- {role_refusal}: {self._role_fix()}", billed) from None
                if exc.status_code == 400 and exc.code in self.CONFIG_ERROR_CODES:
                    raise self._stop(self._config_hint(exc, last), billed) from None
                if exc.status_code == 429 and isinstance(exc.code, str) and exc.code in self.OUT_OF_CREDIT_CODES:
                    # OpenAI's "You exceeded your current quota": a 429 that no wait lifts (402 elsewhere)
                    raise self._stop(f"{last} -- {self._fatal_hint(402)}", billed) from None
                daily = self._daily_limit_hint(exc) if exc.status_code == 429 else None
                if daily is not None:
                    # a per-day quota: every later request fails the same way until it resets, hours
                    # after any wait a call may make, in every worker
                    raise self._stop(f"{last} -- {daily}", billed) from None
                if exc.status_code not in self.RETRY_STATUS and exc.status_code < 500:
                    # a bad request stays bad: no retry
                    return self._failed(last, billed, refused=exc.status_code in self.REFUSED_STATUS)
                retry_after = _retry_after(exc)
            except openai.APITimeoutError:
                last = f"{self.name}: request timed out after {self.timeout_s}s calling {self.url}"
            except openai.APIConnectionError as exc:
                last = f"{self.name}: connection error calling {self.url}: {exc}"
            log.warning("%s (attempt %d of %d)", last, attempt + 1, self.max_retries + 1)
        return self._failed(f"{last} -- gave up after {self.max_retries + 1} attempts", billed)

    def _fatal_hint(self, status: int) -> str:
        """What to check for an HTTP 401/402/403/404, naming the backbone's settings."""
        if status == 402:
            # DeepSeek's and OpenRouter's "Insufficient Balance": every later request fails the same way
            return f"check backbone {self.name!r}: the account behind it is out of credit"
        if status == 404:
            return (
                f"check backbone {self.name!r}: base_url {self.base_url!r} (the client adds /chat/completions) "
                f"and model {self.model_name!r}"
            )
        key = f"the key in ${self.api_key_env} (api_key_env)" if self.api_key_env else "api_key_env (none is set)"
        return f"check backbone {self.name!r}: {key} and that it may use model {self.model_name!r}"

    def _daily_limit_hint(self, exc: Any) -> str | None:
        """What to do about an HTTP 429 for a spent per-day limit, None for any other 429 (a rate
        limit, retried): Gemini's per-day quota (:func:`_daily_quota`) or OpenRouter's daily limit
        on free models (:func:`_openrouter_daily_limit`)."""
        quota = _daily_quota(exc.body)
        if quota is not None:
            quota_id, zero = quota
            state = (
                "has a limit of 0: the model is not available on this tier; use another tier or model"
                if zero
                else "is used up (or not available on this tier) and resets daily: raise the quota or switch backbone"
            )
            return f"the daily quota {quota_id} of backbone {self.name!r} (model {self.model_name!r}) {state}"
        limit = _openrouter_daily_limit(exc.body)
        if limit is not None:
            name, reset = limit
            when = f"it resets at {reset}" if reset else "it resets daily"
            return (
                f"OpenRouter's daily limit on free models ({name}) of backbone {self.name!r} (model "
                f"{self.model_name!r}) is used up and {when}: add credit, wait for the reset or switch backbone"
            )
        return None

    def _role_fix(self) -> str:
        """How to stop sending the system role a model rejects."""
        also = (
            "; `system_role: developer` suits models that take OpenAI's developer role (o1, o3, o4-mini)"
            if self.system_role == "system"
            else ""
        )
        return (
            f"set `system_role: user` in the config of backbone {self.name!r} (the system text then opens the "
            f"next user message){also}"
        )

    def _config_hint(self, exc: Any, message: str) -> str:
        """The error for a request field the model rejects, naming the backbone option to set."""
        param = str(exc.param or "")
        if param not in self.PARAM_FIXES:  # no param field: look for the field's name in the message
            text = str(exc.message)
            param = next((p for p in self.PARAM_FIXES if f"'{p}'" in text), param)
        fix = self.PARAM_FIXES.get(param)
        how = (
            f"set `{fix}` in the config of backbone {self.name!r}"
            if fix
            else f"the model rejects request field {param or '?'}; backbone {self.name!r} has no option to drop it"
        )
        return f"{message} -- every request would fail the same way: {how}"

    def _parse(self, response: Any) -> Completion:
        usage = getattr(response, "usage", None)
        prompt_tokens = getattr(usage, "prompt_tokens", None)
        completion_tokens = getattr(usage, "completion_tokens", None)
        counted = isinstance(prompt_tokens, int) and isinstance(completion_tokens, int)
        cached = _cached_tokens(usage, prompt_tokens) if counted else 0
        if counted:  # reasoning a gateway reported beside completion_tokens is billed output all the same
            completion_tokens += _uncounted_reasoning(usage, prompt_tokens, completion_tokens)
        billed = (prompt_tokens, completion_tokens, cached) if counted else (0, 0, 0)
        try:
            choice = response.choices[0]
            text = content_text(choice.message.content, non_text="skip").strip()
            calls = _tool_calls(getattr(choice.message, "tool_calls", None))
            truncated = getattr(choice, "finish_reason", None) == "length"
            refusal = getattr(choice.message, "refusal", None)
        except (KeyError, IndexError, TypeError, AttributeError, ValueError):
            error = getattr(response, "error", None) or (getattr(response, "model_extra", None) or {}).get("error")
            what = f"an error in a status-200 body: {error}" if error else f"not a chat completion: {response}"
            raise _MalformedResponse(what[:300], *billed) from None
        if not counted:  # checked first: a cut-off reply without usage would be retried unbilled
            raise BackboneError(
                f"{self.name}: response carries no token usage, so its cost is unknown: {str(response)[:300]}"
            )
        finish = getattr(choice, "finish_reason", None)
        if isinstance(finish, str) and finish in self.FAILED_FINISH:
            # the text so far is what was generated before the server gave up, not the model's answer
            error = getattr(choice, "error", None)
            why = f" ({error})" if error else ""
            raise _MalformedResponse(f"a reply cut off by the server (finish_reason {finish!r}){why}"[:300], *billed)
        if prompt_tokens == 0 and completion_tokens > 0:
            with self._attempts_lock:
                warn, self._warned_zero_prompt = not self._warned_zero_prompt, True
            if warn:
                log.warning(
                    "%s: the server reported 0 prompt tokens for a %d-token completion (ollama does when the "
                    "prompt was cached): the ledger understates the cost of such calls (warned once)",
                    self.name,
                    completion_tokens,
                )
        if not text and not calls:
            self._warn_empty(choice, truncated, refusal, completion_tokens, _reasoning_tokens(usage))
        return Completion(
            text, prompt_tokens, completion_tokens, tool_calls=calls, truncated=truncated, cached_tokens=cached
        )

    def _warn_empty(
        self, choice: Any, truncated: bool, refusal: Any, completion_tokens: int, reasoning_tokens: int = 0
    ) -> None:
        """Warn, once per backbone and kind, about an empty answer that is billed and scores 0 for a
        reason the user can act on: a reasoning model that spent the whole limit thinking
        (``reasoning_content`` from vLLM's and DeepSeek's reasoning parsers, ``reasoning`` from
        OpenRouter, or only ``usage.completion_tokens_details.reasoning_tokens`` from OpenAI's
        o-series and gpt-5, which show no reasoning text), a reply that is all reasoning though the
        model stopped (a server's reasoning parser that found no end of the thinking), a content
        filter (``finish_reason: content_filter``, Azure's and Gemini's), or a refusal (OpenAI's
        ``message.refusal``)."""
        message = choice.message
        reasoning = getattr(message, "reasoning_content", None) or getattr(message, "reasoning", None)
        if truncated and (reasoning or reasoning_tokens > 0):
            kind, why = (
                "reasoning",
                (
                    f"the model spent all {completion_tokens} completion tokens reasoning and wrote no answer; raise "
                    "search.max_tokens for the operators (search.optimizer_max_tokens for the optimizer)"
                ),
            )
        elif isinstance(refusal, str) and refusal:
            kind, why = "refusal", f"the model refused: {refusal[:200]!r}"
        elif getattr(choice, "finish_reason", None) == "content_filter":
            kind, why = "content_filter", "the provider's content filter withheld it (finish_reason content_filter)"
        elif isinstance(reasoning, str) and reasoning.strip():
            kind, why = (
                "reasoning_only",
                (
                    "the reply is all reasoning (reasoning_content / reasoning) and no content, though the model "
                    "stopped: the server's reasoning parser may not have found the end of its thinking"
                ),
            )
        else:
            return
        with self._attempts_lock:
            first = kind not in self._warned
            self._warned.add(kind)
        if first:
            log.warning("%s: an empty answer, billed and scored 0: %s (warned once)", self.name, why)

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "model": self.model_name, "url": self.url}


class _MalformedResponse(Exception):
    """A status-200 response that holds no chat completion (retried, then the call fails).

    ``input_tokens`` / ``output_tokens`` / ``cached_tokens``: the usage it reported anyway (billed
    by the provider).
    """

    def __init__(self, message: str, input_tokens: int = 0, output_tokens: int = 0, cached_tokens: int = 0) -> None:
        super().__init__(message)
        self.input_tokens = input_tokens
        self.output_tokens = output_tokens
        self.cached_tokens = cached_tokens


def _cached_tokens(usage: Any, prompt_tokens: int) -> int:
    """The prompt tokens a response's ``usage`` says came from the server's prompt cache.

    OpenAI sends ``prompt_tokens_details.cached_tokens``, DeepSeek ``prompt_cache_hit_tokens``
    (its ``prompt_cache_miss_tokens`` are the rest of ``prompt_tokens``). Servers that cache
    nothing send neither, or ``prompt_tokens_details: null``; a count that is not a non-negative
    integer is read as 0 (the prompt is then priced in full, never below what was billed), and a
    count above ``prompt_tokens`` is capped there (the cached share cannot exceed the prompt).
    """
    details = getattr(usage, "prompt_tokens_details", None)
    for count in (getattr(details, "cached_tokens", None), getattr(usage, "prompt_cache_hit_tokens", None)):
        if isinstance(count, int) and not isinstance(count, bool) and count > 0:
            return min(count, max(prompt_tokens, 0))
    return 0


def _reasoning_tokens(usage: Any) -> int:
    """``usage.completion_tokens_details.reasoning_tokens`` (0 when missing, null or malformed)."""
    count = getattr(getattr(usage, "completion_tokens_details", None), "reasoning_tokens", None)
    return count if isinstance(count, int) and not isinstance(count, bool) and count > 0 else 0


def _uncounted_reasoning(usage: Any, prompt_tokens: int, completion_tokens: int) -> int:
    """Reasoning tokens a response reports outside ``completion_tokens``, to be billed as output.

    OpenAI counts ``completion_tokens_details.reasoning_tokens`` inside ``completion_tokens``; xAI's
    API (grok-3-mini: ``completion_tokens: 1, reasoning_tokens: 386, total_tokens: 399`` for a
    12-token prompt) and some gateways in front of Gemini map only the answer's tokens there and
    the thinking tokens to ``reasoning_tokens`` alone (``completion_tokens: 0, reasoning_tokens:
    60, total_tokens: 81`` for a 21-token prompt), though both bill the thinking as output. Counted only where the usage
    itself shows them left out: ``total_tokens`` equal to prompt + completion + reasoning, or, with
    no total, more reasoning than completion tokens. Otherwise 0: they are inside already.
    """
    reasoning = _reasoning_tokens(usage)
    if not reasoning:
        return 0
    total = getattr(usage, "total_tokens", None)
    if isinstance(total, int) and not isinstance(total, bool):
        return reasoning if total == prompt_tokens + completion_tokens + reasoning else 0
    return reasoning if reasoning > completion_tokens else 0


def _status_detail(exc: Any) -> str:
    """What an HTTP error says: the client's message, plus the server's own reason when the client
    found no ``error.message`` in the body (TGI's ``{"error": "<string>"}``, a proxy's HTML page)."""
    message = str(exc.message)
    if " - " in message:  # the client quoted the body's error message
        return message[:300]
    body = exc.body
    if isinstance(body, str):
        detail = body
    elif isinstance(body, dict):
        detail = json.dumps(body)
    else:
        try:
            detail = exc.response.text
        except Exception:  # noqa: BLE001 -- a body that cannot be read has no reason to quote
            detail = ""
    detail = " ".join(str(detail).split())[:300]
    return f"{message} - {detail}" if detail else message


def _retry_after(exc: Any) -> float | None:
    """Seconds the server asked to wait (``retry-after-ms``, ``retry-after`` in seconds or as an
    HTTP date, or Gemini's ``google.rpc.RetryInfo`` in the body), None when it did not say."""
    try:
        headers = exc.response.headers
    except Exception:  # noqa: BLE001
        return _retry_delay(getattr(exc, "body", None))
    seconds = _retry_after_header(headers)
    return seconds if seconds is not None else _retry_delay(getattr(exc, "body", None))


def _error_object(body: Any) -> dict[str, Any]:
    """The error object of an error body, ``{}`` when it has none.

    Gemini's OpenAI-compatible endpoint sends the body as a one-element list
    (``[{"error": {...}}]``); a gateway passes it on as ``{"error": {...}}``, of which the client
    keeps the error itself. Anything else (a string, an empty list) has none.
    """
    if isinstance(body, list) and body:
        body = body[0]
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        body = body["error"]
    return body if isinstance(body, dict) else {}


def _google_details(body: Any) -> list[dict[str, Any]]:
    """The ``google.rpc`` details (``error.details``) of an error body, ``[]`` when it has none
    (details that are not a list, in a body of any shape :func:`_error_object` reads)."""
    details = _error_object(body).get("details")
    return [d for d in details if isinstance(d, dict)] if isinstance(details, list) else []


def _daily_quota(body: Any) -> tuple[str, bool] | None:
    """The id of a per-day quota an HTTP 429 says is exhausted, and whether its limit is 0; None
    when it names none.

    Gemini lists the quotas a request ran into in a ``google.rpc.QuotaFailure`` detail, each
    violation with a ``quotaId`` such as ``GenerateRequestsPerDayPerProjectPerModel-FreeTier``
    (per-minute ones read ``...PerMinute...``); older Google endpoints name it as the
    ``quota_limit`` of a ``google.rpc.ErrorInfo``'s metadata. A per-day quota among them means the
    day's requests are spent; a per-minute one alone is a rate limit. A limit of 0 (the violation's
    ``quotaValue`` "0", or, where it has none, "limit: 0" in the message, as Gemini answers for a
    model its free tier does not offer) is no spent quota: no reset lifts it.
    """
    for detail in _google_details(body):
        violations = detail.get("violations")
        found = (
            [(v.get("quotaId"), v.get("quotaValue")) for v in violations if isinstance(v, dict)]
            if isinstance(violations, list)
            else []
        )
        metadata = detail.get("metadata")
        if isinstance(metadata, dict):
            found.append((metadata.get("quota_limit"), metadata.get("quota_limit_value")))
        for quota, value in found:
            if isinstance(quota, str) and "PerDay" in quota:
                # the quota's own value where the body gives it: the message lists every quota hit
                zero = str(value) == "0" if value is not None else bool(_ZERO_LIMIT.search(_error_message(body)))
                return quota, zero
    return _embedded_daily_quota(_error_texts(body))


def _error_texts(body: Any) -> str:
    """The texts of an error body in which a gateway passes on the upstream provider's own body:
    the ``message`` and OpenRouter's ``metadata.raw``, joined by newlines ("" when none)."""
    error = _error_object(body)
    metadata = error.get("metadata")
    texts = [error.get("message"), metadata.get("raw") if isinstance(metadata, dict) else None]
    return "\n".join(t for t in texts if isinstance(t, str))


def _embedded_daily_quota(text: str) -> tuple[str, bool] | None:
    """:func:`_daily_quota` for Gemini's body passed on as text inside a gateway's own error: the
    first per-day ``quotaId`` in ``text`` and whether that violation's ``quotaValue`` (or, where it
    has none, "limit: 0" in the text) says 0; None when the text names no per-day quota.

    LiteLLM's proxy writes the repr of the upstream body's bytes into its message
    ("litellm.RateLimitError: VertexAIException - b'{" and then the body with its newlines
    escaped), other gateways the JSON text itself, in the message or in ``metadata.raw``
    (OpenRouter): no one parser reads all of them, so the quota's fields are found by name,
    escaped quotes allowed for.
    """
    found = _EMBEDDED_QUOTA_ID.search(text)
    if found is None:
        return None
    # the violation's own value lies before the next violation's id
    following = _EMBEDDED_ANY_QUOTA_ID.search(text, found.end())
    value = _EMBEDDED_QUOTA_VALUE.search(text, found.end(), following.start() if following else len(text))
    zero = value.group(1) == "0" if value is not None else bool(_ZERO_LIMIT.search(text))
    return found.group(1), zero


# A Google quota violation's fields in a body passed on as text (:func:`_embedded_daily_quota`)
_EMBEDDED_QUOTA_ID = re.compile(r'quotaId\\*"\s*:\s*\\*"([\w.-]*PerDay[\w.-]*)')
_EMBEDDED_ANY_QUOTA_ID = re.compile(r'quotaId\\*"\s*:')
_EMBEDDED_QUOTA_VALUE = re.compile(r'quotaValue\\*"\s*:\s*\\*"(\d+)')
# Gemini's message for a quota the tier does not have: "... free_tier_requests, limit: 0, model: ..."
_ZERO_LIMIT = re.compile(r"\blimit: 0(?![\d.])")
# OpenRouter's daily limits on `:free` models: "free-models-per-day", "free-models-per-day-high-balance"
_OPENROUTER_DAILY = re.compile(r"free-models-per-day[\w-]*")


def _error_message(body: Any) -> str:
    """The ``message`` of an error body (:func:`_error_object`), "" when it has none."""
    message = _error_object(body).get("message")
    return message if isinstance(message, str) else ""


def _openrouter_daily_limit(body: Any) -> tuple[str, str | None] | None:
    """OpenRouter's daily limit on free models, when an HTTP 429 says it is spent: its name and,
    when the body says, when it resets (UTC); None for any other body.

    OpenRouter allows 50 requests a day to ``:free`` models (1000 with 10 credits bought) and
    answers the next with ``{"error": {"message": "Rate limit exceeded: free-models-per-day. Add 10
    credits to unlock 1000 free model requests per day", "code": 429, "metadata": {"headers":
    {"X-RateLimit-Limit": "50", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset":
    "1761609600000"}}}}`` (the reset in milliseconds since the epoch; "free-models-per-day-high-balance"
    for the larger allowance).
    """
    found = _OPENROUTER_DAILY.search(_error_message(body))
    if found is None:
        return None
    metadata = _error_object(body).get("metadata")
    headers = metadata.get("headers") if isinstance(metadata, dict) else None
    reset = None
    if isinstance(headers, dict):
        try:
            ms = float(headers.get("X-RateLimit-Reset"))
            reset = datetime.datetime.fromtimestamp(ms / 1000, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        except (TypeError, ValueError, OverflowError, OSError):
            reset = None
    return found.group(0).rstrip("-"), reset


def _role(message: Any) -> Any:
    return message.get("role") if isinstance(message, dict) else None


def _check_system_role(name: str, system_role: Any) -> None:
    """Refuse a ``system_role`` that is not one of :data:`SYSTEM_ROLES`, naming the backbone."""
    if system_role not in SYSTEM_ROLES:
        raise ConfigError(f"backbone {name!r}: system_role must be system, developer or user, got {system_role!r}")


def _send_system_as(messages: list[dict[str, Any]], system_role: str) -> list[dict[str, Any]]:
    """``messages`` with their system messages sent as ``system_role`` says (the one place both
    backbone kinds transform them): ``system`` as they are, ``developer`` as OpenAI's developer role,
    ``user`` merged into the next user message (:func:`_system_into_user`). A conversation without
    a system message is returned as it is (the same list)."""
    if system_role == "system" or not any(_role(m) == "system" for m in messages):
        return messages
    if system_role == "developer":
        return [{**m, "role": "developer"} if _role(m) == "system" else m for m in messages]
    return _system_into_user(messages)


def _system_into_user(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` without system messages: their text opens the next user message, followed by a
    blank line, as Gemma 3's chat template merges a leading system message itself
    (``first_user_prefix``); a system message with no user message after it is sent as a user
    message of its own.

    A user message given as content parts gets the system text and the blank line at the start of
    its first text part, not as a text part of its own: Gemma 3's template trims every part and
    joins them with nothing between, so a separate part would lose the blank line
    ("Answer with a number.Ava has ..."). Only a message with no text part gets a new one, first."""
    out: list[dict[str, Any]] = []
    pending: list[str] = []
    for m in messages:
        if _role(m) == "system":
            try:
                text = content_text(m.get("content"), non_text="skip", join=PROMPT_PARTS_JOIN)
            except (TypeError, ValueError):
                text = str(m.get("content"))
            if text:
                pending.append(text)
            continue
        if pending and _role(m) == "user":
            system, content = "\n\n".join(pending), m.get("content")
            if isinstance(content, list):
                content = _prefix_first_text_part(content, system)
            else:
                content = f"{system}\n\n{content}" if content else system
            m = {**m, "content": content}
            pending = []
        out.append(m)
    if pending:
        out.append({"role": "user", "content": "\n\n".join(pending)})
    return out


def _prefix_first_text_part(parts: list[Any], system: str) -> list[Any]:
    """Content parts with ``system`` and a blank line before the text of the first text part (a
    new text part at the start when there is none)."""
    for i, part in enumerate(parts):
        if isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str):
            return [*parts[:i], {**part, "text": f"{system}\n\n{part['text']}"}, *parts[i + 1 :]]
    return [{"type": "text", "text": system}, *parts]


# OpenAI's `param` for a rejected message role, e.g. "messages[0].role"
_ROLE_PARAM = re.compile(r"messages\[(\d+)\]\.role")


def _system_role_refusal(exc: Any, messages: list[dict[str, Any]]) -> str | None:
    """Why an HTTP error refuses the request for holding a ``system`` (or ``developer``) message,
    None when it does not.

    OpenAI's o1-mini and o1-preview answer HTTP 400 ``unsupported_value`` with ``param``
    ``messages[0].role`` (the index of the message). A chat template raises "System role not
    supported" (Gemma 1 and 2's), or, when it takes only alternating user and assistant turns
    (Mixtral-8x7B-Instruct-v0.1's), "Conversation roles must alternate
    user/assistant/user/assistant/..." for a conversation that holds a system message: vLLM answers
    the template's exception with HTTP 400, TGI with HTTP 422 (``template_error``), SGLang with
    HTTP 500 ("Internal server error: ..."). A template error is read as the system message's only
    for a request that holds one.
    """
    text = _status_detail(exc).lower()  # the body too where the client quoted no `error.message` (TGI)
    has_system = any(_role(m) in ("system", "developer") for m in messages)
    if "system role not supported" in text:
        return "every request would fail the same way" if has_system else None
    if "roles must alternate" in text:
        return (
            "the chat template takes only alternating user and assistant turns, and the system message this "
            "request holds is the likely cause; every request holding one would fail the same way"
            if has_system
            else None
        )
    if getattr(exc, "code", None) not in OpenAIBackbone.CONFIG_ERROR_CODES:
        return None
    found = _ROLE_PARAM.fullmatch(str(getattr(exc, "param", None) or "")) or _ROLE_PARAM.search(text)
    if found is None:
        return None
    index = int(found.group(1))
    if index < len(messages) and _role(messages[index]) in ("system", "developer"):
        return "every request would fail the same way"
    return None


def _retry_delay(body: Any) -> float | None:
    """The ``retryDelay`` of a ``google.rpc.RetryInfo`` detail in an error body, in seconds (also
    in Google's body passed on by a gateway as text, :func:`_error_texts`, or that text's "Please
    retry in ...s.").

    Gemini's OpenAI-compatible endpoint sends its 429 without a ``retry-after`` header and says how
    long to wait only in the body, as a protobuf duration (``"37s"``, ``"34.4s"``), in
    ``error.details`` (see :func:`_google_details` for the body's shapes).
    """
    delays = [d.get("retryDelay") for d in _google_details(body)]
    # a gateway that passes Google's body on as text (:func:`_embedded_daily_quota`): its RetryInfo,
    # or the "Please retry in 29.019961092s." Gemini writes into the message
    text = _error_texts(body)
    delays += [m.group(1) + "s" for m in _EMBEDDED_RETRY_DELAY.finditer(text)]
    delays += [m.group(1) + "s" for m in _RETRY_IN.finditer(text)]
    for delay in delays:
        if isinstance(delay, str) and delay.endswith("s"):
            try:
                seconds = float(delay[:-1])
            except ValueError:
                continue
            if math.isfinite(seconds) and seconds >= 0:
                return seconds
    return None


_EMBEDDED_RETRY_DELAY = re.compile(r'retryDelay\\*"\s*:\s*\\*"(\d+(?:\.\d+)?)s')
_RETRY_IN = re.compile(r"Please retry in (\d+(?:\.\d+)?)s\b")


def _retry_after_header(headers: Any) -> float | None:
    """Seconds a ``retry-after-ms`` or ``retry-after`` header asks to wait, None without one."""
    value = headers.get("retry-after-ms")
    if value is not None:
        try:
            ms = float(value)
        except ValueError:
            pass
        else:
            if math.isfinite(ms) and ms >= 0:
                return ms / 1000.0
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        if when is None:
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=datetime.timezone.utc)
        seconds = (when - datetime.datetime.now(datetime.timezone.utc)).total_seconds()
    if not math.isfinite(seconds):
        return None
    return max(seconds, 0.0)


def _tool_calls(calls: Any) -> list[dict[str, Any]] | None:
    """The client's ``message.tool_calls`` as plain OpenAI-format dicts (``None`` when there are none).

    Arguments stay the JSON string the server sent (an object, as TGI sends, becomes that string):
    the world parses it, and a string that is not JSON becomes the world's error observation rather
    than a crash here.
    """
    if not calls:
        return None
    out = []
    for call in calls:
        fn = call.function
        out.append(
            {
                # some servers send no id; the tool message still needs one to answer
                "id": getattr(call, "id", None) or f"call_{len(out)}",
                "type": "function",
                "function": {"name": fn.name, "arguments": _arguments_json(fn.arguments)},
            }
        )
    return out


def _arguments_json(arguments: Any) -> str:
    """A tool call's ``arguments`` as the JSON string OpenAI sends: TGI's Messages API (and
    llama.cpp's server for a while) send the object itself, which the next request, holding the
    call in its history, must send back as a string; missing arguments are ``{}``."""
    if arguments is None:
        return "{}"
    # ensure_ascii=False: the model reads "Zürich" back, as it wrote it, not "Z\\u00fcrich"
    return arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)


@dataclass
class BackboneSpec:
    """Configuration of one pool member (what a YAML ``backbones:`` list holds).

    Args:
        name: the name workflow nodes use.
        model: local path / hub id / ``embedded:student`` for ``kind: hf``; the server's model name
            for ``kind: openai``.
        kind: ``hf`` (local causal LM) or ``openai`` (OpenAI-compatible HTTP endpoint).
        input_price: cost per one million prompt tokens (required).
        output_price: cost per one million completion tokens (required).
        cached_input_price: cost per one million prompt tokens the server reports as served from
            its prompt cache (``openai``; e.g. 0.075 for gpt-4o-mini at ``input_price: 0.15``).
            None (default): priced like any prompt token, at ``input_price``.
        base_url: endpoint base URL (``openai`` only), e.g. ``https://api.openai.com/v1``.
        api_key_env: environment variable with the API key (``openai`` only; None sends no key).
        timeout_s: per-request timeout (``openai``).
        max_retries: retries on timeouts, 429 and 5xx (``openai``).
        backoff_s: first retry delay, doubled each retry; a longer ``retry-after`` the server sends
            is waited instead, capped (``openai``).
        max_concurrency: most simultaneous requests (``openai``).
        send_temperature: send ``temperature`` (``openai``; False for o1-style models that reject it).
        send_seed: send ``seed`` (``openai``).
        max_tokens_param: ``max_tokens`` or ``max_completion_tokens`` (``openai``; o1-style models
            want the latter).
        max_consecutive_failures: failed calls in a row that stop the run (``openai``).
        system_role: ``system`` (default), ``developer`` or ``user``: how system messages are sent,
            for both kinds (``openai``: to the endpoint; ``hf``: to the local model's chat template).
            ``user`` puts the system text, and a blank line, at the start of the next user message,
            as Gemma 3's chat template does itself: for o1-mini and o1-preview (which take neither
            ``system`` nor ``developer``) and for chat templates that raise on a system message
            (Gemma 1 and 2's "System role not supported", Mixtral-8x7B-Instruct-v0.1's "Conversation
            roles must alternate user/assistant/user/assistant/..."). ``developer`` sends OpenAI's
            developer role (o1 from 2024-12-17, o3, o4-mini).
        alphanumeric_ids: the served model takes only nine-character alphanumeric call ids
            (``openai``; ``true`` for a Mistral model on vLLM): other ids in a history are sent
            renamed (see :class:`OpenAIBackbone`). A local (``hf``) model's template is probed.
        dtype: weight dtype (``hf``).
        device: device (``hf``; None keeps CPU).
    """

    name: str
    model: str
    kind: Literal["hf", "openai"] = "hf"
    input_price: float | None = None
    output_price: float | None = None
    cached_input_price: float | None = None
    base_url: str | None = None
    api_key_env: str | None = None
    timeout_s: float = 60.0
    max_retries: int = 3
    backoff_s: float = 1.0
    max_concurrency: int = 4
    send_temperature: bool = True
    send_seed: bool = True
    max_tokens_param: Literal["max_tokens", "max_completion_tokens"] = "max_tokens"
    max_consecutive_failures: int = 16
    system_role: Literal["system", "developer", "user"] = "system"
    alphanumeric_ids: bool | None = None
    dtype: str = "float32"
    device: str | None = None


def build_backbone(spec: BackboneSpec | dict[str, Any]) -> Backbone:
    """Instantiate the backbone a :class:`BackboneSpec` (or its dict form) describes."""
    if isinstance(spec, dict):
        try:
            spec = BackboneSpec(**spec)
        except TypeError as exc:
            raise ConfigError(f"bad backbone spec {spec}: {exc}") from None
    if spec.kind == "hf":
        return LocalHFBackbone(
            spec.name,
            spec.model,
            spec.input_price,
            spec.output_price,
            dtype=spec.dtype,
            device=spec.device,
            cached_input_price=spec.cached_input_price,
            system_role=spec.system_role,
        )
    if spec.kind == "openai":
        if not spec.base_url:
            raise ConfigError(f"backbone {spec.name!r}: kind openai needs base_url")
        return OpenAIBackbone(
            spec.name,
            spec.model,
            spec.base_url,
            spec.input_price,
            spec.output_price,
            api_key_env=spec.api_key_env,
            timeout_s=spec.timeout_s,
            max_retries=spec.max_retries,
            backoff_s=spec.backoff_s,
            max_concurrency=spec.max_concurrency,
            send_temperature=spec.send_temperature,
            send_seed=spec.send_seed,
            max_tokens_param=spec.max_tokens_param,
            max_consecutive_failures=spec.max_consecutive_failures,
            cached_input_price=spec.cached_input_price,
            system_role=spec.system_role,
            alphanumeric_ids=spec.alphanumeric_ids,
        )
    raise ConfigError(f"backbone {spec.name!r}: unknown kind {spec.kind!r}; expected hf or openai")


@dataclass
class _Tally:
    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0


def _call_row(line: str) -> tuple[tuple[str, str, str, int], int, int, int, Completion | None, str | None]:
    row = json.loads(line)
    key = (str(row["backbone"]), str(row["role"]), str(row["workflow"]), int(row["generation"]))
    # logs written before cached tokens were booked have no such field: those calls had none
    tokens = int(row["input_tokens"]), int(row["output_tokens"]), int(row.get("cached_tokens", 0))
    answer, request = row.get("answer"), row.get("request")
    # logs written before answers were kept have none: those calls are paid again if repeated
    if answer is None and request is None:
        return key, *tokens, None, None
    calls = answer.get("tool_calls") if isinstance(answer, dict) else None
    if (
        not isinstance(request, str)
        or not isinstance(answer, dict)
        or not isinstance(answer.get("text"), str)
        or not isinstance(answer.get("truncated", False), bool)
        or not (calls is None or (isinstance(calls, list) and all(_is_tool_call(c) for c in calls)))
    ):
        # an answer served as it stands: a malformed one would fail later, far from its line
        raise ValueError("its request/answer fields are not a request digest and an answer")
    if calls is not None:
        # a log written before object arguments were turned into strings (TGI) holds the objects:
        # a replayed call must send the string back, as a live one does now
        calls = [
            {**c, "function": {**c["function"], "arguments": _arguments_json(c["function"].get("arguments"))}}
            for c in calls
        ]
    recorded = Completion(
        answer["text"], *tokens[:2], tool_calls=calls, truncated=answer.get("truncated", False), cached_tokens=tokens[2]
    )
    return key, *tokens, recorded, request


def _is_tool_call(call: Any) -> bool:
    function = call.get("function") if isinstance(call, dict) else None
    return isinstance(function, dict) and isinstance(function.get("name"), str)


def request_key(request: Request, backbone: dict[str, Any] | None = None, sent: dict[str, Any] | None = None) -> str:
    """A digest of what a request sends (messages, limits, sampling, tools) and of the backbone
    that answers it (``backbone``: its :meth:`Backbone.describe`, so a backbone switched to another
    model or URL is asked again): a restart that sends the same request is served the answer the
    log holds.

    ``sent`` (:meth:`Backbone.wire_fields`) holds the fields in which what the backbone sends
    differs from the request: its system messages moved by ``system_role``, ``temperature`` or
    ``seed`` left out (``None``), the completion limit sent as ``max_completion_tokens``. They
    replace or join the request's own, so a restart after such an option changed is not served an
    answer to another request; with the default options ``sent`` is empty and the digest is the one
    logs written before it existed hold.
    """
    payload = {
        "backbone": backbone,
        "messages": request.messages,
        "max_tokens": request.max_tokens,
        "temperature": request.temperature,
        "seed": request.seed,
        "tools": request.tools,
        **(sent or {}),
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:32]


def _prices(value: Sequence[float], cached_default: float | None = None) -> tuple[float, float, float]:
    """``(input, output, cached input)`` prices from a sequence of three, or of two (saved before
    cached prices existed): then the cached price is ``cached_default``, or else the input price."""
    pin, pout, *cached = (float(v) for v in value)
    return (pin, pout, cached[0] if cached else pin if cached_default is None else cached_default)


class Ledger:
    """Thread-safe account of every model call's tokens and cost.

    Calls are tallied per ``(backbone, role, workflow, generation)``; costs are computed from the
    integer token tallies and the backbone's price, so every aggregate (per workflow, per
    generation, per backbone, per role, total) is a sum over the same integer counts.

    Args:
        prices: ``{backbone: (input_price, output_price[, cached_input_price])}`` per million
            tokens (no cached price: the input price); backbones added to a pool register themselves.
    """

    def __init__(self, prices: dict[str, Sequence[float]] | None = None) -> None:
        self.prices: dict[str, tuple[float, float, float]] = {k: _prices(v) for k, v in (prices or {}).items()}
        self._tallies: dict[tuple[str, str, str, int], _Tally] = defaultdict(_Tally)
        self._lock = threading.Lock()
        self.call_log: Path | None = None
        # Answers the call log holds, by (backbone, role, workflow, generation, request key), each
        # served once (take_answer): the calls of an evaluation a crash cut short, paid already.
        self._answers: dict[tuple[str, str, str, int, str], deque[Completion]] = defaultdict(deque)

    def log_calls(self, path: str | Path) -> None:
        """Append every call from now on to ``path`` (JSON Lines); :meth:`replay_log` reads it back.

        The search state is saved between generations, but the calls of a generation a crash cut
        short are paid all the same (and their traces are reused on restart): the log keeps them,
        and the held-out calls after the last save, in the ledger and the budget.
        """
        self.call_log = Path(path)
        self.call_log.parent.mkdir(parents=True, exist_ok=True)

    def replay_log(self, answers_from_generation: int = 0) -> int:
        """Replace the tallies with every call in the log (a torn last line is dropped).

        Args:
            answers_from_generation: keep the logged answers of this generation and later only (those
                a restart may send again: the generations after its saved state); earlier ones are
                counted, not held in memory.

        Returns:
            The number of calls read back (0 when there is no log).

        Raises:
            ConfigError: a line that is not a call record, naming file and line.
        """
        path = self.call_log
        if path is None or not path.is_file():
            return 0
        rows = []
        for lineno, row in read_appended(path, _call_row, "call record"):
            if isinstance(row, Exception):
                raise ConfigError(f"{path}:{lineno}: not a call record ({row})")
            rows.append(row)
        with self._lock:
            self._tallies = defaultdict(_Tally)
            self._answers = defaultdict(deque)
            for key, input_tokens, output_tokens, cached_tokens, answer, request in rows:
                t = self._tallies[key]
                t.calls += 1
                t.input_tokens += input_tokens
                t.output_tokens += output_tokens
                t.cached_tokens += cached_tokens
                if answer is not None and key[3] >= answers_from_generation:
                    self._answers[(*key, request)].append(answer)
        return len(rows)

    def take_answer(self, backbone: str, role: str, workflow: str, generation: int, request: str) -> Completion | None:
        """An answer the call log holds for this request of this workflow and generation, served
        once (a request sent twice was paid twice), or ``None``. Only the same workflow's same
        call is served: another workflow sending the same text pays for its own answer, as it
        would have without the restart."""
        with self._lock:
            queue = self._answers.get((backbone, role, workflow, int(generation), request))
            return dataclasses.replace(queue.popleft(), replayed=True) if queue else None

    def calls(self) -> int:
        """Calls recorded so far."""
        with self._lock:
            return sum(t.calls for t in self._tallies.values())

    def register(self, backbone: Backbone) -> None:
        """Record a backbone's prices (a re-registration must not change them silently)."""
        price = backbone.prices
        if self.prices.get(backbone.name, price) != price:
            raise ConfigError(
                f"backbone {backbone.name!r} re-registered with prices {price}, was {self.prices[backbone.name]}"
            )
        self.prices[backbone.name] = price

    def record(
        self,
        backbone: str,
        input_tokens: int,
        output_tokens: int,
        *,
        role: str = "workflow",
        workflow: str = "",
        generation: int = 0,
        cached_tokens: int = 0,
        request: str | None = None,
        answer: Completion | None = None,
    ) -> float:
        """Add one call; returns its cost. ``cached_tokens``: the share of ``input_tokens`` the
        server served from its prompt cache (priced at the backbone's cached input price).
        ``request`` (:func:`request_key`) and its ``answer`` go to the call log with the call, so a
        restart is served that answer instead of paying for it again."""
        if backbone not in self.prices:
            raise ConfigError(f"ledger has no price for backbone {backbone!r}")
        with self._lock:
            t = self._tallies[(backbone, role, workflow, int(generation))]
            t.calls += 1
            t.input_tokens += int(input_tokens)
            t.output_tokens += int(output_tokens)
            t.cached_tokens += int(cached_tokens)
            if self.call_log is not None:
                row = {
                    "backbone": backbone,
                    "role": role,
                    "workflow": workflow,
                    "generation": int(generation),
                    "input_tokens": int(input_tokens),
                    "output_tokens": int(output_tokens),
                    "cached_tokens": int(cached_tokens),
                }
                if request is not None and answer is not None and answer.error is None:
                    row["request"] = request
                    row["answer"] = {
                        "text": answer.text,
                        "tool_calls": answer.tool_calls,
                        "truncated": answer.truncated,
                    }
                with self.call_log.open("a") as f:
                    f.write(json.dumps(row) + "\n")
        return _price(self.prices[backbone], input_tokens, output_tokens, cached_tokens)

    def _cost(self, backbone: str, t: _Tally) -> float:
        return _price(self.prices[backbone], t.input_tokens, t.output_tokens, t.cached_tokens)

    def summary(self, by: str | Sequence[str] = ()) -> dict[Any, dict[str, float]]:
        """Totals grouped by any of ``backbone``, ``role``, ``workflow``, ``generation``.

        Returns ``{key: {"calls", "input_tokens", "output_tokens", "cached_tokens", "cost"}}``
        (``cached_tokens`` is a share of ``input_tokens``); with ``by=()`` the single key is
        ``"total"``.
        """
        fields = ("backbone", "role", "workflow", "generation")
        by = (by,) if isinstance(by, str) else tuple(by)
        for b in by:
            if b not in fields:
                raise ValueError(f"cannot group the ledger by {b!r}; choose from {fields}")
        out: dict[Any, dict[str, float]] = {}
        with self._lock:
            items = list(self._tallies.items())
        costs: dict[Any, list[float]] = defaultdict(list)
        for key, t in items:
            named = dict(zip(fields, key))
            group = tuple(named[b] for b in by) if by else "total"
            if isinstance(group, tuple) and len(group) == 1:
                group = group[0]
            agg = out.setdefault(
                group, {"calls": 0, "input_tokens": 0, "output_tokens": 0, "cached_tokens": 0, "cost": 0.0}
            )
            agg["calls"] += t.calls
            agg["input_tokens"] += t.input_tokens
            agg["output_tokens"] += t.output_tokens
            agg["cached_tokens"] += t.cached_tokens
            costs[group].append(self._cost(key[0], t))
        for group, values in costs.items():
            out[group]["cost"] = math.fsum(values)
        return out

    def total_cost(self) -> float:
        """Cost of every call so far."""
        return self.summary().get("total", {"cost": 0.0})["cost"]

    def state_dict(self) -> dict[str, Any]:
        """Plain data for checkpoints and ``ledger.json``."""
        with self._lock:
            rows = [
                {
                    "backbone": k[0],
                    "role": k[1],
                    "workflow": k[2],
                    "generation": k[3],
                    "calls": t.calls,
                    "input_tokens": t.input_tokens,
                    "output_tokens": t.output_tokens,
                    "cached_tokens": t.cached_tokens,
                    "cost": self._cost(k[0], t),
                }
                for k, t in sorted(self._tallies.items())
            ]
        return {"prices": {k: list(v) for k, v in self.prices.items()}, "rows": rows}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` output (tallies replace the current ones; a state saved before
        cached tokens were booked has none)."""
        with self._lock:
            for name, value in state.get("prices", {}).items():
                registered = self.prices.get(name)
                # an older state knew no cached price: the configured one prices the calls to come
                self.prices[name] = _prices(value, registered[2] if registered else None)
            self._tallies = defaultdict(_Tally)
            for r in state.get("rows", []):
                self._tallies[(r["backbone"], r["role"], r["workflow"], int(r["generation"]))] = _Tally(
                    r["calls"], r["input_tokens"], r["output_tokens"], r.get("cached_tokens", 0)
                )


class BackbonePool:
    """Named backbones plus the ledger every call is recorded in.

    Args:
        backbones: the pool members (names must be unique).
        ledger: where calls are recorded (a new one by default).
    """

    def __init__(self, backbones: Sequence[Backbone] = (), ledger: Ledger | None = None) -> None:
        self.ledger = ledger or Ledger()
        self.backbones: dict[str, Backbone] = {}
        for b in backbones:
            self.add(b)

    @classmethod
    def from_specs(cls, specs: Sequence[BackboneSpec | dict[str, Any]], ledger: Ledger | None = None) -> BackbonePool:
        """Build every backbone of a config's ``backbones:`` list."""
        if not specs:
            raise ConfigError("the backbone pool is empty; configure at least one backbone")
        return cls([build_backbone(s) for s in specs], ledger)

    def add(self, backbone: Backbone, replace: bool = False) -> None:
        """Add a backbone; ``replace`` allows swapping one of the same name (e.g. the trained model)."""
        if backbone.name in self.backbones and not replace:
            raise ConfigError(f"duplicate backbone name {backbone.name!r} in the pool")
        self.ledger.register(backbone)
        self.backbones[backbone.name] = backbone

    @property
    def names(self) -> list[str]:
        """Backbone names in insertion order."""
        return list(self.backbones)

    def get(self, name: str) -> Backbone:
        """The backbone called ``name``."""
        try:
            return self.backbones[name]
        except KeyError:
            raise ConfigError(f"unknown backbone {name!r}; the pool has {self.names}") from None

    def complete(
        self, name: str, requests: Sequence[Request], *, role: str = "workflow", workflow: str = "", generation: int = 0
    ) -> list[Completion]:
        """Run ``requests`` on backbone ``name`` and book every call in the ledger as it is answered.

        A request whose answer the call log holds for this workflow and generation (sent before a
        crash, by an evaluation the crash cut short) is served that answer, with its tokens, and
        not booked again: the log has booked it."""
        backbone = self.get(name)
        described = backbone.describe()
        # keyed on what the backbone sends (wire_fields), so a resumed run whose system_role changed
        # is not served the answer to a request that was sent otherwise
        keys = [
            request_key(r, described, backbone.wire_fields(r)) if backbone.replays_logged_answers else None
            for r in requests
        ]
        outs: list[Completion | None] = [
            self.ledger.take_answer(name, role, workflow, generation, k) if k else None for k in keys
        ]
        todo = [i for i, c in enumerate(outs) if c is None]
        key_of = {id(requests[i]): keys[i] for i in todo}

        def book(request: Request, c: Completion) -> None:
            if c.error is not None and not (c.input_tokens or c.output_tokens):
                return  # a call that failed before any tokens were billed
            self.ledger.record(
                name,
                c.input_tokens,
                c.output_tokens,
                role=role,
                workflow=workflow,
                generation=generation,
                cached_tokens=c.cached_tokens,
                request=key_of.get(id(request)),
                answer=c,
            )

        # each answer is booked (and logged) as it arrives: one a batch's error or a kill cuts
        # short was paid all the same
        for i, c in zip(todo, backbone.complete([requests[i] for i in todo], on_answer=book)):
            outs[i] = c
        return outs

    def describe(self) -> list[dict[str, Any]]:
        """Every member's :meth:`Backbone.describe`."""
        return [b.describe() for b in self.backbones.values()]
