"""Batched sampling with Hugging Face ``generate`` (KV cache, left padding, EOS masking).

This is the library's one generation path: evaluation, RL rollouts, the rollout command and the
HFlow local backbones all call :class:`HFGenerationEngine`.
"""

from __future__ import annotations

import copy
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from lightning_agents.template_clock import render_chat_template

logger = logging.getLogger(__name__)

__all__ = [
    "GenerationOutput",
    "HFGenerationEngine",
    "MARKED_STYLES",
    "SamplingConfig",
    "decode_completions",
    "marked_style",
    "empty_generation_output",
    "one_call_per_message",
    "template_arguments",
    "template_call_ids",
    "template_messages",
    "text_content",
]


@dataclass
class SamplingConfig:
    """How completions are sampled.

    Args:
        max_new_tokens: completion length limit; completions that reach it without EOS are
            reported as truncated.
        temperature: softmax temperature (ignored when ``do_sample`` is false).
        top_p: nucleus sampling mass.
        top_k: keep only the k most likely tokens (0 disables).
        do_sample: sample; ``False`` is greedy decoding.
    """

    max_new_tokens: int = 64
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    do_sample: bool = True


@dataclass
class GenerationOutput:
    """The result of one batched generation call; the G samples of a prompt are contiguous rows.

    Attributes:
        prompt_ids: ``[N*G, P]`` left-padded prompt token ids (each prompt repeated G times).
        prompt_mask: ``[N*G, P]`` 1 on real prompt tokens.
        completion_ids: ``[N*G, C]`` sampled tokens, padded after the stop token (the EOS or
            another end-of-turn id, see :func:`stop_token_ids`) with the pad id.
        completion_mask: ``[N*G, C]`` 1 up to and including the first stop token.
        logprobs: ``[N*G, C]`` log-probability of each sampled token under the sampling
            distribution (temperature applied, before top-p/top-k truncation), 0 where masked.
        texts: decoded completions (special tokens dropped).
        truncated: ``[N*G]`` bool, the completion did not end with a stop token (it hit
            ``max_new_tokens``, or a server aborted it).
        entropies: ``[N*G, C]`` entropy of the sampling distribution at each step (0 where
            masked); RL token selection uses it without a second forward pass.
        loss_mask: ``[N*G, C]`` 1 on the tokens the policy produced (assistant turns); ``None``
            means every real completion token. Multi-turn rollouts set it to leave tool outputs
            and user turns, which sit inside the completion, out of the loss.
    """

    prompt_ids: torch.Tensor
    prompt_mask: torch.Tensor
    completion_ids: torch.Tensor
    completion_mask: torch.Tensor
    logprobs: torch.Tensor
    texts: list[str]
    truncated: torch.Tensor
    entropies: torch.Tensor | None = None
    loss_mask: torch.Tensor | None = None

    @property
    def action_mask(self) -> torch.Tensor:
        """``[N*G, C]`` 1 on the policy's own tokens: ``loss_mask`` or, single-turn, ``completion_mask``."""
        return self.completion_mask if self.loss_mask is None else self.loss_mask

    @property
    def num_completion_tokens(self) -> int:
        """Number of real (unmasked) completion tokens."""
        return int(self.completion_mask.sum())


def empty_generation_output(with_entropies: bool) -> GenerationOutput:
    """What every engine's ``generate([])`` returns: zero rows, each tensor of the rank and dtype a
    call with prompts returns (completion tensors keep the one column those always have), so
    callers that index or count rows need no special case (concatenating with other outputs needs
    padding to a common width, as between any two outputs).

    Args:
        with_entropies: the engine reports entropies (HF) rather than ``None`` (vLLM).
    """
    completion = torch.zeros((0, 1), dtype=torch.long)
    return GenerationOutput(
        prompt_ids=torch.zeros((0, 0), dtype=torch.long),
        prompt_mask=torch.zeros((0, 0), dtype=torch.long),
        completion_ids=completion,
        completion_mask=completion.clone(),
        logprobs=torch.zeros((0, 1), dtype=torch.float32),
        texts=[],
        truncated=torch.zeros(0, dtype=torch.bool),
        entropies=torch.zeros((0, 1), dtype=torch.float32) if with_entropies else None,
    )


def _transformers_would_sync(model) -> bool:
    """Whether transformers' ``generate(synced_gpus=None)`` turns synced generation on: a ZeRO-3
    or FSDP-managed model with more than one process. A process that returned early there would
    leave the others waiting in their forwards, or pair its next collective with theirs."""
    from lightning_agents.rollout.sharding import _distributed_world

    if _distributed_world() <= 1:
        return False
    from transformers.integrations.deepspeed import is_deepspeed_zero3_enabled
    from transformers.integrations.fsdp import is_fsdp_managed_module

    return bool(is_deepspeed_zero3_enabled() or is_fsdp_managed_module(model))


def _is_token_ids(prompt) -> bool:
    return isinstance(prompt, (list, tuple)) and len(prompt) > 0 and isinstance(prompt[0], int)


#: generation_config fields that switch on a logits processor, and the value that leaves it off.
_PROCESSOR_FIELDS: dict[str, Any] = {
    "repetition_penalty": 1.0,
    "encoder_repetition_penalty": 1.0,
    "no_repeat_ngram_size": 0,
    "encoder_no_repeat_ngram_size": 0,
    "min_length": 0,
    "min_new_tokens": None,
    "bad_words_ids": None,
    "suppress_tokens": None,
    "begin_suppress_tokens": None,
    "sequence_bias": None,
    "exponential_decay_length_penalty": None,
    "forced_bos_token_id": None,
    "forced_eos_token_id": None,
    "renormalize_logits": False,
    "epsilon_cutoff": 0.0,
    "eta_cutoff": 0.0,
    "typical_p": 1.0,
    "min_p": None,
}


def _without_processors(config: Any) -> Any:
    """A copy of a model's generation config with every logits processor off (passed whole to
    ``generate``, so a field left at None is None, not the checkpoint's value)."""
    config = copy.deepcopy(config)
    for field, value in _PROCESSOR_FIELDS.items():
        if hasattr(config, field):
            setattr(config, field, value)
    return config


class _ChosenTokenStats:
    """A ``generate`` logits processor that keeps, per step, only the sampled token's log-prob and
    the entropy of the sampling distribution: ``[rows]`` floats per step instead of the
    ``[rows, vocab]`` float32 copy that ``output_logits=True`` would keep for every step.

    Processors run before the token is drawn, so step ``t``'s log-softmax is held until step
    ``t + 1`` shows which token was drawn (the last column of ``input_ids``); :meth:`finish` resolves
    the final step from the returned sequences. Processors in ``logits_processor`` run before the
    temperature / top-p / top-k warpers, so the distribution recorded is the raw logits over the
    temperature: what a later forward pass of the same model computes.
    """

    def __init__(self, temperature: float) -> None:
        self.temperature = temperature
        self.logprobs: list[torch.Tensor] = []
        self.entropies: list[torch.Tensor] = []
        self._pending: torch.Tensor | None = None

    def _resolve(self, chosen: torch.Tensor) -> None:
        self.logprobs.append(self._pending.gather(1, chosen[:, None]).squeeze(1))
        self._pending = None

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if self._pending is not None:
            self._resolve(input_ids[:, -1])
        step = torch.log_softmax(scores.float() / self.temperature, dim=-1)
        self.entropies.append(-(step.exp() * step).sum(dim=-1))
        self._pending = step
        return scores

    def finish(self, completion: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(logprobs, entropies)``, each ``[rows, steps]``, given the generated tokens."""
        if self._pending is not None:
            self._resolve(completion[:, len(self.logprobs)])
        rows = completion.shape[0]
        if not self.logprobs:
            empty = torch.zeros((rows, 0), device=completion.device)
            return empty, empty
        return torch.stack(self.logprobs, dim=1), torch.stack(self.entropies, dim=1)


class _SeededSampler:
    """A ``generate`` logits processor that draws each prompt's next tokens from that prompt's own
    ``torch.Generator`` and returns scores that leave only the drawn token (``generate`` then runs
    greedily, so it picks exactly that token).

    ``generate`` itself samples all rows from the global generator, so a prompt's samples would
    depend on every draw made before (earlier batches, the other prompts of the batch). Here the G
    rows of prompt ``i`` draw from a generator seeded with ``seeds[i]`` alone. Temperature, top-k
    and top-p are transformers' own warpers, applied as ``generate`` applies them when it samples.
    """

    def __init__(self, seeds: Sequence[int], num_samples: int, sampling: SamplingConfig, device) -> None:
        from transformers import (
            TemperatureLogitsWarper,
            TopKLogitsWarper,
            TopPLogitsWarper,
        )

        self.num_samples = num_samples
        self.warpers = [TemperatureLogitsWarper(float(sampling.temperature))]
        if sampling.top_k:
            self.warpers.append(TopKLogitsWarper(sampling.top_k))
        if sampling.top_p < 1.0:
            self.warpers.append(TopPLogitsWarper(sampling.top_p))
        self.generators = [torch.Generator(device=device).manual_seed(int(s)) for s in seeds]

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        for warp in self.warpers:
            scores = warp(input_ids, scores)
        probs = torch.softmax(scores.float(), dim=-1)
        g = self.num_samples
        chosen = torch.cat(
            [torch.multinomial(probs[i * g : (i + 1) * g], 1, generator=gen) for i, gen in enumerate(self.generators)]
        )
        only = torch.full_like(scores, -math.inf)
        return only.scatter_(1, chosen, 0.0)


def stop_token_ids(tokenizer, generation_config: Any = None) -> list[int]:
    """The token ids that end a model turn: the tokenizer's EOS first, then the others the model's
    generation config lists, then those the chat template closes assistant turns with.

    Chat models often end a turn with a token other than the tokenizer's EOS and list it only in
    ``generation_config.json``: Gemma's ``<end_of_turn>`` (EOS ``<eos>``), Phi-3.5's ``<|end|>``
    (EOS ``<|endoftext|>``), Llama 3.1's ``<|eom_id|>`` after a tool call. ``transformers`` and
    vLLM stop at all of them; sampling that stopped at the EOS alone ran every such turn on to
    ``max_new_tokens`` and marked it truncated. A base model fine-tuned on a chat template lists
    neither (Qwen2.5's base stops at ``<|endoftext|>`` only, its ChatML turns end with
    ``<|im_end|>``), so the template's own end tokens are added
    (:func:`~lightning_agents.datamodules.conversations.turn_end_token_ids`).

    The tokenizer's EOS is left out where the chat template also writes it inside a turn
    (:attr:`~lightning_agents.datamodules.conversations.TemplateLayout.ends_inside_turn`) and the
    generation config does not list it: Solar-Open's template closes the reasoning with ``<|end|>``
    and answers in the same turn, so a tokenizer whose EOS is ``<|end|>`` stopped every reasoning
    turn after its thought. An EOS the template never writes inside a turn (``<|endoftext|>``, the
    real Solar-Open tokenizer's) still stops generation, as does every id the generation config lists.

    Args:
        tokenizer: the model's tokenizer.
        generation_config: the model's ``GenerationConfig`` (or ``None``).
    """
    from lightning_agents.datamodules.conversations import turn_end_token_ids

    ids: list[int] = []
    extra = getattr(generation_config, "eos_token_id", None)
    extra = [extra] if isinstance(extra, int) else list(extra or [])
    layout = _probed_layout(tokenizer)
    inside = layout.ends_inside_turn if layout is not None else ()
    eos = tokenizer.eos_token_id
    if eos not in extra and isinstance(eos, int) and tokenizer.decode([eos]) in inside:
        eos = None
    for token in [eos, *extra, *turn_end_token_ids(tokenizer)]:
        if isinstance(token, int) and token not in ids:
            ids.append(token)
    answer_end = None if layout is None else layout.final_end_of_turn or layout.final_end_appended or layout.end_of_turn
    if not extra and answer_end in inside:
        _warn_no_answer_stop(tokenizer, answer_end, [tokenizer.decode([i]) for i in ids])
    return ids


#: Tool-call styles whose reasoning and call delimiters are special tokens that a decode without
#: them drops (Solar-Open's ``<|think|>RSN<|end|><|begin|>assistant<|content|>ANS`` came out as
#: ``RSNassistantANS``, its calls as ``IDname{args}``; Gemma 4's ``<|channel>thought\nRSN<channel|>ANS``
#: as ``thought\nRSNANS``, its calls as ``call:name{k:v}``; gpt-oss's harmony channels as
#: ``analysisRSNassistantfinalANS``; a Mistral reasoning template's ``[THINK]RSN[/THINK]ANS``, its
#: ``mistral_think``, as ``RSNANS``; any Mistral template's ``[TOOL_CALLS]``, ``[ARGS]`` and
#: ``[CALL_ID]``, its ``mistral``: a call after text and a botched call were read as the answer):
#: the engines decode their replies with them.
MARKED_STYLES = frozenset({"solar_open", "gemma4", "harmony", "mistral", "mistral_think", "apertus"})
# The tokens that end a marked style's turn (Solar-Open's generation config stops at <|flush|> and
# <|calls|>, besides <|endoftext|>; its template closes a turn with <|end|>): never content, also
# where the engine's stop list lacks them (a hub id's, read without the generation config, while
# vLLM itself stops at the config's ids).
_MARKED_ENDS = {
    "solar_open": ("<|endoftext|>", "<|end|>", "<|flush|>", "<|calls|>"),
    "gemma4": ("<turn|>", "<eos>"),
    # harmony's <|end|> closes a message inside a reply: last only where the reply was cut
    "harmony": ("<|return|>", "<|call|>", "<|end|>"),
    "mistral": ("</s>",),
    "mistral_think": ("</s>",),
    # Apertus's generation config stops at <|tools_suffix|> too: a call's suffix is the stop, not content
    "apertus": ("<|assistant_end|>", "</s>"),
}
# Mistral's reasoning opener: a control token of mistral-common's tekken (SpecialTokens.begin_think),
# special in a converted tokenizer; the Mistral templates that render it are reasoning ones.
_MISTRAL_THINK = "[THINK]"


def decode_completions(tokenizer, completion: torch.Tensor, mask: torch.Tensor, stop_ids: Sequence[int]) -> list[str]:
    """The texts of sampled completions, as every engine hands them over.

    Without special tokens (``skip_special_tokens=True``), except for a chat template whose
    delimiters are special tokens (:data:`MARKED_STYLES`): a reply is then decoded with them (a
    Mistral one with its call and reasoning markers only, :data:`_MISTRAL_MARKERS`), less the stop,
    EOS or end-of-turn token it ended with, so its reasoning and its calls can be read
    (:func:`~lightning_agents.rollout.tool_calls.split_reasoning`,
    :func:`~lightning_agents.tasks.strip_reasoning`, the style's call parser).

    Args:
        tokenizer: the model's tokenizer (its chat template names the style).
        completion: ``[N, L]`` sampled ids, padded after each row's end.
        mask: ``[N, L]`` 1 over each row's sampled ids.
        stop_ids: the ids that end a turn (:func:`stop_token_ids`).
    """
    style = marked_style(tokenizer)
    if style is None:
        return tokenizer.batch_decode(completion, skip_special_tokens=True)
    ends = {*stop_ids, tokenizer.eos_token_id, *tokenizer.convert_tokens_to_ids(list(_MARKED_ENDS[style]))}
    ends.discard(tokenizer.unk_token_id)
    # Mistral's tokenizers hold a thousand control tokens ([INST], <unk>, [IMG], <SPECIAL_20>, ...): only
    # the call and reasoning markers are handed over, the others dropped as before (vLLM's chat server
    # with no tools in the request keeps none of them either)
    markers = _MISTRAL_MARKERS.get(style)
    # a marker the tokenizer lacks (Nemo's has no [ARGS]) converts to <unk>, which is no marker
    marker_ids = set(tokenizer.convert_tokens_to_ids(list(markers or ()))) - {tokenizer.unk_token_id}
    drop = _special_ids(tokenizer) - marker_ids if markers else set()
    texts = []
    for row, keep in zip(completion.tolist(), mask.bool().tolist()):
        ids = [token for token, kept in zip(row, keep) if kept]
        while ids and ids[-1] in ends:  # `<|end|><|flush|>` would have left `<|end|>` in the answer
            ids = ids[:-1]
        texts.append(tokenizer.decode([t for t in ids if t not in drop], skip_special_tokens=False))
    return texts


def _special_ids(tokenizer) -> set[int]:
    """Every id a decode without special tokens drops: the named ones and the added tokens marked
    special (a converted tekken tokenizer names four, and marks its thousand control tokens)."""
    added = getattr(tokenizer, "added_tokens_decoder", {}) or {}
    return set(tokenizer.all_special_ids) | {i for i, token in added.items() if getattr(token, "special", False)}


#: The special tokens a Mistral reply is handed over with: its call markers, and a reasoning
#: template's [THINK] block.
_MISTRAL_MARKERS = {
    "mistral": ("[TOOL_CALLS]", "[ARGS]", "[CALL_ID]"),
    "mistral_think": ("[TOOL_CALLS]", "[ARGS]", "[CALL_ID]", "[THINK]", "[/THINK]"),
    # Apertus's call markers only (vLLM's apertus parser has the server keep special tokens for them);
    # its <|inner_prefix|> reasoning markers are dropped as before, which no reader here splits on
    "apertus": ("<|tools_prefix|>", "<|tools_suffix|>"),
}


def marked_style(tokenizer) -> str | None:
    """The tokenizer's tool-call style when it is one of :data:`MARKED_STYLES` (its replies are
    decoded with their special tokens, :func:`decode_completions`), else ``None``."""
    from lightning_agents.rollout.tool_calls import tool_call_style

    layout = _probed_layout(tokenizer)
    style = tool_call_style(layout.tool_call_opener) if layout is not None else None
    if style == "mistral" and _MISTRAL_THINK in tokenizer.chat_template and _is_special(tokenizer, _MISTRAL_THINK):
        style = "mistral_think"
    return style if style in MARKED_STYLES else None


def _is_special(tokenizer, token: str) -> bool:
    """Whether ``token`` is one special token of the tokenizer's, which a decode without special
    tokens drops."""
    return any(added.content == token and added.special for added in tokenizer.added_tokens_decoder.values())


def _probed_layout(tokenizer):
    """The chat template's :class:`~lightning_agents.datamodules.conversations.TemplateLayout`, or
    ``None`` without a template or where it cannot be probed (``turn_end_token_ids`` warns then)."""
    from lightning_agents.datamodules.conversations import template_layout

    if not getattr(tokenizer, "chat_template", None):
        return None
    try:
        return template_layout(tokenizer)
    except Exception:  # noqa: BLE001 - a template the probe cannot read stops at the EOS and the config's ids
        return None


def _warn_no_answer_stop(tokenizer, answer_end: str, stops: list[str]) -> None:
    """Once per chat template, answer token and stop list: the token that closes an answer is also
    written inside a turn, so it is no stop token, and only the model's generation config can name
    the one that ends an answer (Solar-Open's ``<|flush|>``, which its template never writes). The
    key is the whole template: two templates that share their first lines (a variant of a model's
    template) are two templates, and two tokenizers with another EOS stop at other tokens."""
    key = (str(tokenizer.chat_template), answer_end, tuple(stops))
    if key in _NO_ANSWER_STOP:
        return
    _NO_ANSWER_STOP.add(key)
    logger.warning(
        "the chat template closes an answer with %s, which it also writes inside a turn, so that token cannot "
        "stop generation, and no generation config names the token that ends the model's answers (none was "
        "given, or its eos_token_id is empty): generation stops only at %s, and an answer that writes none of "
        "them runs to max_new_tokens (truncated)",
        answer_end,
        stops or "no token",
    )


_NO_ANSWER_STOP: set[tuple[str, str, tuple[str, ...]]] = set()


def turn_end_id(tokenizer, stop_ids: Sequence[int], chat_template_kwargs: dict[str, Any] | None = None) -> int:
    """The stop token the chat template closes an assistant turn with (what a text answer
    written into a conversation must end with); the tokenizer's EOS when the template shows none.

    ChatML and Llama templates close a turn with the EOS itself; Phi-3.5 with ``<|end|>``, Gemma
    with ``<end_of_turn>``, which their generation configs list beside the EOS.

    Args:
        tokenizer: the model's tokenizer (with its chat template).
        stop_ids: the ids that end a turn (:func:`stop_token_ids`).
        chat_template_kwargs: extra ``apply_chat_template`` arguments.
    """
    eos = tokenizer.eos_token_id
    if len(stop_ids) < 2 or getattr(tokenizer, "chat_template", None) is None:
        return eos
    marker = "Lightning-agents turn-end probe"
    conversation = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": marker}]
    text = render_chat_template(
        tokenizer, conversation, tokenize=False, add_generation_prompt=False, **dict(chat_template_kwargs or {})
    )
    after = text[text.find(marker) + len(marker) :] if marker in text else ""
    found = [(after.find(tokenizer.decode([i])), i) for i in stop_ids]
    found = [(at, i) for at, i in found if at >= 0]
    return min(found)[1] if found else eos


def template_arguments(tokenizer, messages: list[dict]) -> list[dict]:
    """``messages`` with their tool-call arguments in the form the chat template renders as the
    model writes them: a dict, unless the template concatenates them as JSON strings.

    Episodes keep OpenAI-format calls (arguments as a JSON string); Qwen2.5's and Llama 3.1/3.2's
    templates ``tojson`` them whole, so every later turn showed the model its own earlier calls as
    ``"arguments": "{\\"expression\\": ...}"``, a format it never wrote.
    """
    if not any(m.get("tool_calls") for m in messages):
        return messages
    from lightning_agents.datamodules.conversations import _with_string_arguments, template_layout
    from lightning_agents.json_text import JSONTextError, loads_json

    try:
        as_strings = template_layout(tokenizer).string_arguments
    except Exception:  # noqa: BLE001 - a template that cannot be probed renders the messages as given
        return messages
    if as_strings:
        return _with_string_arguments(messages)
    out = []
    for message in messages:
        if message.get("tool_calls"):
            calls = []
            for call in message["tool_calls"]:
                fn = call.get("function")
                arguments = fn.get("arguments") if isinstance(fn, dict) else None
                if isinstance(arguments, str):
                    try:
                        parsed = loads_json(arguments)
                    except JSONTextError:
                        parsed = None
                    if isinstance(parsed, dict):
                        call = {**call, "function": {**fn, "arguments": parsed}}
                calls.append(call)
            message = {**message, "tool_calls": calls}
        out.append(message)
    return out


#: Message keys holding the turn's reasoning: a split turn keeps them on its first message only.
_REASONING_KEYS = ("reasoning_content", "reasoning", "thinking")


def one_call_per_message(messages: list[dict], limit: int | None) -> list[dict]:
    """``messages`` with every assistant message holding more than ``limit`` tool calls rendered as
    consecutive one-call assistant messages, each followed by its own result.

    A conversation may hold a message with several calls written by another model (an HFlow
    ``verify`` node on a Llama 3.1 backbone continuing an ``agent`` node's episode from a Qwen
    backbone); Llama 3.1/3.2's templates raise on it ("only supports single tool-calls at once"),
    which stopped the whole run. Split, the template renders every call and every result in order.
    Results go with their calls by ``tool_call_id``; when the calls' ids are missing or repeated, or
    no result carries one (a history imported from elsewhere), the k-th tool message goes with the
    k-th call, since matching by id would put every result after the first call. Tool messages that
    answer none of the calls (a malformed-call observation) stay after the last. The turn's text
    and reasoning stay on its first message, where the model wrote them.

    Args:
        messages: OpenAI-format messages (not modified).
        limit: tool calls the template renders per assistant message (``None``: any number).
    """
    if limit is None or not any(len(m.get("tool_calls") or ()) > limit for m in messages):
        return messages
    out: list[dict] = []
    i = 0
    while i < len(messages):
        message = messages[i]
        calls = message.get("tool_calls") or []
        if message.get("role") != "assistant" or len(calls) <= limit:
            out.append(message)
            i += 1
            continue
        end = i + 1
        while end < len(messages) and messages[end].get("role") == "tool":
            end += 1
        results = messages[i + 1 : end]
        call_ids = [c.get("id") for c in calls]
        by_position = (
            not all(call_ids) or len(set(call_ids)) < len(call_ids) or not any(r.get("tool_call_id") for r in results)
        )
        answered: set[int] = set()
        for start in range(0, len(calls), limit):
            group = calls[start : start + limit]
            split = {**message, "tool_calls": group}
            if start:
                split["content"] = ""
                for key in _REASONING_KEYS:
                    split.pop(key, None)
            out.append(split)
            if by_position:
                mine = [k for k in range(start, start + len(group)) if k < len(results)]
            else:
                ids = {c.get("id") for c in group}
                mine = [k for k, r in enumerate(results) if k not in answered and r.get("tool_call_id") in ids]
            for k in mine:
                answered.add(k)
                out.append(results[k])
        out.extend(r for k, r in enumerate(results) if k not in answered)
        i = end
    return out


def text_content(message: dict, index: int | None = None, tokenizer=None) -> dict:
    """``message`` with OpenAI list-form content (``[{"type": "text", "text": ...}, ...]``) joined
    into one string as ``tokenizer``'s chat template is given it on vLLM's server and in SFT
    (:func:`~lightning_agents.content_parts.prompt_content`: a newline for tool results and
    "string"-format templates, the template's own join for one that loops over the parts;
    without ``tokenizer``, a newline); other messages as they are.

    Chat templates take a tool result's content as a string: on list content most print the
    Python list (Llama 3.1, Qwen2.5, Mistral), Qwen3 renders nothing, and DeepSeek, SmolLM2 and
    Functionary raise.

    Raises:
        LightningAgentsError: a part is not text (an image in a tool result cannot be rendered as text).
    """
    from lightning_agents.content_parts import (
        PROMPT_PARTS_JOIN,
        TEXT_PARTS_KEY,
        ContentPartError,
        content_text,
        prompt_content,
    )

    content = message.get("content")
    if not isinstance(content, list) and TEXT_PARTS_KEY not in message:
        return message
    try:
        if tokenizer is None:
            message = {k: v for k, v in message.items() if k != TEXT_PARTS_KEY}
            return {**message, "content": content_text(content, join=PROMPT_PARTS_JOIN)}
        return prompt_content(tokenizer, message)
    except ContentPartError as exc:
        from lightning_agents.errors import LightningAgentsError

        where = "" if index is None else f" {index}"
        raise LightningAgentsError(
            f"message{where} ({message.get('role')!r}, tool_call_id {message.get('tool_call_id')!r}) has a "
            f"content part of type {exc.kind!r}; only 'text' parts can be rendered into the chat template"
        ) from None


def template_messages(tokenizer, messages: list[dict], calls_per_turn: int | None = None) -> list[dict]:
    """``messages`` as a chat template renders them: tool-call arguments in the template's form
    (:func:`template_arguments`), content given as lists of text parts (a tool result's, a user
    turn's) joined into one string as vLLM's server and SFT join it for this template
    (:func:`text_content`), call ids the template
    refuses renamed (:func:`template_call_ids`) and, for a template that renders
    ``calls_per_turn`` calls per assistant message, longer call lists split
    (:func:`one_call_per_message`).

    Every text path (:meth:`HFGenerationEngine.render`) and the RL glue
    (:func:`~lightning_agents.rollout.agent_loop.continuation_text`) renders through this one rule,
    so both sides of a turn boundary see the same conversation.
    """
    # Every role's parts, as SFT joins them (a user turn in parts made DeepSeek's template raise).
    messages = [text_content(m, i, tokenizer) for i, m in enumerate(messages)]
    messages = template_call_ids(tokenizer, messages)
    return one_call_per_message(template_arguments(tokenizer, messages), calls_per_turn)


def template_call_ids(tokenizer, messages: list[dict]) -> list[dict]:
    """``messages`` with every call id that a chat template taking only nine-character
    alphanumeric ids refuses (:func:`~lightning_agents.rollout.agent_turn.model_needs_alphanumeric_ids`)
    replaced, in its call and in the results answering it, by the rule SFT and HFlow endpoints
    use too (:func:`~lightning_agents.rollout.tool_calls.nine_character_call_ids`); other
    conversations, and those on other templates, as they are.

    An HFlow episode written by one backbone (``call_0_0``, a hermes-style id) and continued by a
    Mistral one (a ``verify`` node) made Mistral's template raise "Tool call IDs should be
    alphanumeric strings with length 9!" on the history, stopping the run; the rollout rewrites
    only the ids its own episode's model writes (``AgentEpisode.alphanumeric_ids``).
    """
    from lightning_agents.rollout.tool_calls import nine_character_call_ids

    renamed = nine_character_call_ids(messages)
    if renamed is messages:
        return messages
    from lightning_agents.rollout.agent_turn import model_needs_alphanumeric_ids

    return renamed if model_needs_alphanumeric_ids(tokenizer) is True else messages


class HFGenerationEngine:
    """Generates completions with a Hugging Face causal LM.

    Args:
        model: a ``transformers`` causal LM (any device and dtype).
        tokenizer: its tokenizer; must have a chat template when prompts are message lists.
        chat_template_kwargs: extra keyword arguments for ``apply_chat_template`` (e.g. ``tools``).
    """

    def __init__(self, model, tokenizer, chat_template_kwargs: dict[str, Any] | None = None) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        self.stop_ids = stop_token_ids(tokenizer, getattr(model, "generation_config", None))
        # (template probed, answer): keyed by the template, which datamodules/chat.py and
        # export.py set on the tokenizer after it is loaded
        self._calls_per_turn: tuple[Any, int | None] | None = None

    @property
    def calls_per_turn(self) -> int | None:
        """Tool calls the chat template renders per assistant message (1 for Llama 3.1/3.2,
        ``None``: any number); probed once per template
        (:func:`~lightning_agents.rollout.agent_turn.model_calls_per_turn`)."""
        template = getattr(self.tokenizer, "chat_template", None)
        cached = self._calls_per_turn
        if cached is None or cached[0] != template:
            from lightning_agents.rollout.agent_turn import model_calls_per_turn

            cached = self._calls_per_turn = (template, model_calls_per_turn(self.tokenizer, self.chat_template_kwargs))
        return cached[1]

    def render(self, prompt: str | Sequence[dict], tools: list[dict] | None = None) -> str:
        """The prompt text: a string is used as is, messages go through the chat template
        (:func:`template_messages`: arguments in the template's form, an earlier message with more
        calls than the template renders per message split into one-call messages)."""
        if isinstance(prompt, str):
            return prompt
        kwargs = dict(self.chat_template_kwargs)
        if tools is not None:
            kwargs["tools"] = tools
        prompt = list(prompt)
        # probe the template only when a message could need it (the probe renders twice)
        several = any(len(m.get("tool_calls") or ()) > 1 for m in prompt)
        messages = template_messages(self.tokenizer, prompt, self.calls_per_turn if several else None)
        return render_chat_template(self.tokenizer, messages, tokenize=False, add_generation_prompt=True, **kwargs)

    def encode_prompts(self, prompts: Sequence[str | Sequence[dict] | Sequence[int]], tools: list[dict] | None = None):
        """Left-padded ``(input_ids, attention_mask)`` of the rendered prompts.

        A prompt given as a list of token ids is used as is: multi-turn rollouts continue from the
        exact tokens sampled so far rather than from a re-rendered, re-tokenised conversation.
        No prompts give ``[0, 0]`` tensors.
        """
        ids = [
            list(p)
            if _is_token_ids(p)
            else self.tokenizer(self.render(p, tools), add_special_tokens=False)["input_ids"]
            for p in prompts
        ]
        width = max((len(x) for x in ids), default=0)
        pad = self.tokenizer.pad_token_id
        input_ids = torch.full((len(ids), width), pad, dtype=torch.long)
        mask = torch.zeros((len(ids), width), dtype=torch.long)
        for row, x in enumerate(ids):
            if x:
                input_ids[row, width - len(x) :] = torch.tensor(x)
                mask[row, width - len(x) :] = 1
        return input_ids, mask

    @torch.no_grad()
    def generate(
        self,
        prompts: Sequence[str | Sequence[dict]],
        num_samples: int = 1,
        sampling: SamplingConfig | None = None,
        tools: list[dict] | None = None,
        seeds: Sequence[int] | None = None,
        synced_gpus: bool | None = None,
    ) -> GenerationOutput:
        """Sample ``num_samples`` completions for every prompt.

        An empty ``prompts`` returns :func:`empty_generation_output` (zero rows, no model call),
        as the vLLM engines do; not with ``synced_gpus=True``, where this process must join the
        other processes' forward passes (refused, rather than leaving them waiting for it).

        Args:
            prompts: prompt strings or OpenAI-format message lists.
            num_samples: completions per prompt (G); they are contiguous in the output rows.
            sampling: sampling settings; defaults to :class:`SamplingConfig`.
            tools: tool schemas rendered into message-list prompts.
            seeds: one seed per prompt: the prompt's samples are drawn from a generator seeded
                with it, independently of the global random state and of the other prompts
                (``None``: ``generate``'s own sampling from the global generator).
            synced_gpus: keep stepping until every process has finished (needed when the model's
                parameters are sharded across processes, so that all of them run the same
                forwards); ``None`` lets transformers decide.
        """
        sampling = sampling or SamplingConfig()
        if seeds is not None and len(seeds) != len(prompts):
            raise ValueError(f"generate() got {len(seeds)} seeds for {len(prompts)} prompts")
        if not prompts:
            if synced_gpus or (synced_gpus is None and _transformers_would_sync(self.model)):
                raise ValueError(
                    "generate(prompts=[]) with synced generation (synced_gpus=True, or a ZeRO-3 / FSDP model "
                    "over several processes): a process with no prompts cannot take part in the other "
                    "processes' generation; give every process at least one prompt"
                )
            return empty_generation_output(with_entropies=True)
        device = next(self.model.parameters()).device
        input_ids, attention_mask = self.encode_prompts(prompts, tools)
        input_ids = input_ids.repeat_interleave(num_samples, dim=0).to(device)
        attention_mask = attention_mask.repeat_interleave(num_samples, dim=0).to(device)
        pad = self.tokenizer.pad_token_id
        temperature = sampling.temperature if sampling.do_sample and sampling.temperature > 0 else 1.0
        stats = _ChosenTokenStats(temperature)
        gen_kwargs: dict[str, Any] = {
            "max_new_tokens": sampling.max_new_tokens,
            "do_sample": sampling.do_sample,
            "eos_token_id": list(self.stop_ids),
            "pad_token_id": pad,
            "logits_processor": [stats],
            "return_dict_in_generate": True,
            "use_cache": True,
        }
        if synced_gpus is not None:
            gen_kwargs["synced_gpus"] = synced_gpus
        if sampling.do_sample and seeds is not None:
            gen_kwargs["logits_processor"].append(_SeededSampler(seeds, num_samples, sampling, device))
            # The processor has drawn the token; generate only takes it (argmax of a one-hot).
            gen_kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        elif sampling.do_sample:
            gen_kwargs.update(temperature=sampling.temperature, top_p=sampling.top_p, top_k=sampling.top_k)
        else:
            # Greedy decoding: clear sampling defaults a checkpoint's generation_config may carry.
            gen_kwargs.update(temperature=None, top_p=None, top_k=None)
        was_training = self.model.training
        self.model.eval()
        try:
            # A checkpoint's generation_config may add processors (Qwen2.5-Instruct ships
            # repetition_penalty 1.05): generate would apply them, the trainer's forward does not,
            # so the recorded log-probs (RSTG's log pi_S, the importance weights) would be another
            # distribution's. Samples come from the model's own distribution and SamplingConfig only.
            config = _without_processors(self.model.generation_config)
            extra = {k: gen_kwargs.pop(k) for k in ("logits_processor", "synced_gpus") if k in gen_kwargs}
            config.update(**gen_kwargs)
            out = self.model.generate(
                input_ids=input_ids, attention_mask=attention_mask, generation_config=config, **extra
            )
        finally:
            self.model.train(was_training)
        completion = out.sequences[:, input_ids.shape[1] :]
        step_logprobs, step_entropies = stats.finish(completion)
        num_rows, length = completion.shape
        if length == 0:
            completion = torch.full((num_rows, 1), pad, dtype=torch.long, device=device)
            length = 1
        is_eos = torch.isin(completion, torch.tensor(self.stop_ids, device=completion.device))
        # Real tokens run up to and including the first stop token.
        after_eos = (is_eos.long().cumsum(dim=1) - is_eos.long()) > 0
        completion_mask = (~after_eos).long()
        completion = completion.masked_fill(completion_mask == 0, pad)
        logprobs = torch.zeros((num_rows, length), dtype=torch.float32, device=device)
        entropies = torch.zeros((num_rows, length), dtype=torch.float32, device=device)
        steps = step_logprobs.shape[1]
        logprobs[:, :steps] = step_logprobs
        entropies[:, :steps] = step_entropies
        logprobs = logprobs * completion_mask
        entropies = entropies * completion_mask
        truncated = ~is_eos.any(dim=1)
        texts = decode_completions(self.tokenizer, completion, completion_mask, self.stop_ids)
        return GenerationOutput(
            prompt_ids=input_ids.cpu(),
            prompt_mask=attention_mask.cpu(),
            completion_ids=completion.cpu(),
            completion_mask=completion_mask.cpu(),
            logprobs=logprobs.cpu(),
            texts=texts,
            truncated=truncated.cpu(),
            entropies=entropies.cpu(),
        )
