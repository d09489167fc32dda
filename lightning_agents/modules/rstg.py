"""``RSTGModule``: GRPO with selective teacher guidance (RSTG), as one LightningModule.

GRPO alone, GRPO + naive on-policy distillation and full RSTG are this module with switches:

============  ===========  ==============  ================  ===============  ===========
recipe        ``guidance``  ``distill_scope`` ``token_selection`` ``sample_weight`` ``teacher_sft``
============  ===========  ==============  ================  ===============  ===========
GRPO          False        --              --                --               --
naive OPD     True         all             all               none             False
RSTG          True         negative        soft_or           teacher_pass_rate True
============  ===========  ==============  ================  ===============  ===========

The tensor math lives in :mod:`lightning_agents.modules.rstg_loss`; this class only samples,
scores, runs forwards micro-batch by micro-batch and logs.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import os
import re
import warnings
from contextlib import nullcontext
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

import lightning as L
import torch
from lightning.pytorch.utilities import rank_zero_warn
from torchmetrics import MeanMetric

from lightning_agents import _lightning_compat as compat
from lightning_agents.adapters import (
    AdapterConfig,
    BaseModelView,
    apply_adapters,
    as_adapter_config,
    check_adapter_checkpoint,
    check_adapter_device,
    fit_optimizer_states,
    has_adapters,
    keep_trainable_state,
)
from lightning_agents.errors import LightningAgentsError
from lightning_agents.models import DTYPES, DType, context_length, load_model_and_tokenizer
from lightning_agents.modules import rstg_loss as F
from lightning_agents.modules.callback_checks import check_callbacks
from lightning_agents.modules.precision_checks import check_adamw_weights
from lightning_agents.modules.rstg_cache import (
    TeacherCache,
    model_fingerprint,
    teacher_cache_key,
)
from lightning_agents.resume import RNGResume, loadable_hparams
from lightning_agents.rewards.registry import RewardScorer
from lightning_agents.rollout.agent_loop import RL_ROWS
from lightning_agents.rollout.hf_engine import (
    GenerationOutput,
    HFGenerationEngine,
    SamplingConfig,
    marked_style,
    turn_end_id,
)
from lightning_agents.rollout.seeding import derive_seed, prompt_identity, run_seed
from lightning_agents.rollout.sharding import fsdp_wrapped, gathered_for_generation, sharding_kind

__all__ = [
    "RSTGModule",
    "RSTGSettingError",
    "Rollout",
    "check_same_vocabulary",
    "completion_logprobs",
    "disable_dropout",
    "episode_verifier",
]


# Checkpoint entry of the sampling seed, so that a resumed run samples as the run it resumes.
SAMPLING_SEED_KEY = "lightning_agents_sampling_seed"
# The plateau schedulers' monitored values when the checkpoint was written.
PLATEAU_METRICS_KEY = "lightning_agents_plateau_metrics"


log = logging.getLogger(__name__)

_SHARDED_EPISODES = (
    "multi-turn episodes (records of a task with tools) with a policy sharded across processes (FSDP/ZeRO-3) "
    "are not supported: ranks would run different numbers of generate calls; use DDP or model.engine=vllm"
)


@functools.cache
def _class_at(path: str) -> type | None:
    """The class (or the type of the object) a verifier path names
    (:func:`~lightning_agents.rewards.registry.verifier_target`); ``None`` when it cannot be
    imported, which the reward scorer reports with its own context."""
    from lightning_agents.rewards.registry import verifier_target

    try:
        obj = verifier_target(path)
    except ValueError:
        return None
    return obj if isinstance(obj, type) else type(obj)


def episode_verifier(spec: Any) -> str | None:
    """The class path of verifier ``spec`` (a class path, ``{class_path, init_args}`` or a callable)
    when it scores whole agent episodes (its class says ``scores_episodes = True``: the tau-bench,
    tau2 and BFCL verifiers of ``curate``'s RL records), else ``None``."""
    if isinstance(spec, dict):
        spec = spec.get("class_path")
    if spec is None:
        return None
    cls = _class_at(spec) if isinstance(spec, str) else type(spec)
    if cls is None or not getattr(cls, "scores_episodes", False):
        return None
    return f"{cls.__module__}.{cls.__qualname__}"


def _datamodule_records(datamodule: Any) -> list[tuple[str, list[dict[str, Any]]]]:
    """The prompt records a datamodule has read, each list with where it came from: the splits of
    a :class:`~lightning_agents.datamodules.prompts.PromptDataModule` (``records``) and the RL
    records of a ``TopoCurateDataModule`` in ``rl`` mode."""
    out = []
    records = getattr(datamodule, "records", None)
    if isinstance(records, dict):
        hparams = getattr(datamodule, "hparams", {})
        out += [(f"data.{which} ({hparams.get(which)})", rows) for which, rows in records.items()]
    datasets = getattr(datamodule, "datasets", None)
    if (
        getattr(datamodule, "mode", None) == "rl"
        and isinstance(datasets, dict)
        and isinstance(datasets.get("fit"), list)
    ):
        out.append((f"the TopoCurate RL records of {getattr(datamodule, 'rollout_paths', '?')}", datasets["fit"]))
    return out


def _turns_needed(record: dict[str, Any]) -> int:
    """The fewest model turns that can finish a multi-turn record: one per user turn, plus one for
    each turn whose ground truth makes calls (the answer follows them); 0 for other records."""
    turns = record.get("user_turns")
    if not isinstance(turns, list):
        return 0
    try:
        truth = json.loads(record.get("reference") or "{}").get("ground_truth")
    except (ValueError, AttributeError):
        truth = None
    with_calls = sum(1 for turn in truth if turn) if isinstance(truth, list) else 0
    return len(turns) + with_calls


class RSTGSettingError(LightningAgentsError, ValueError):
    """An RSTGModule setting that cannot work (named in the message)."""


def check_same_vocabulary(student_tokenizer, teacher_tokenizer, teacher_name: str = "teacher") -> None:
    """Raise ``ValueError`` unless both tokenizers map every token to the same id.

    Token-level distillation compares ``log pi_T(y_t)`` with ``log pi_S(y_t)`` for the same token
    id, which is meaningless across vocabularies.
    """
    sv, tv = student_tokenizer.get_vocab(), teacher_tokenizer.get_vocab()
    if sv == tv:
        return
    missing = sorted(set(sv) - set(tv))[:5]
    extra = sorted(set(tv) - set(sv))[:5]
    moved = sorted(t for t in set(sv) & set(tv) if sv[t] != tv[t])[:5]
    raise RSTGSettingError(
        f"teacher {teacher_name!r} has a different vocabulary from the student ({len(tv)} vs {len(sv)} tokens; "
        f"student tokens missing in the teacher: {missing}; teacher tokens missing in the student: {extra}; "
        f"tokens with different ids: {moved}). "
        "RSTG distils token by token, so the teacher must share the student's tokenizer "
        "(e.g. two sizes of the same model family)."
    )


def _position_ids(attention_mask: torch.Tensor) -> torch.Tensor:
    # Left-padded rows: positions must count real tokens only, as generate() did while sampling.
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)


def completion_logprobs(
    model,
    prompt_ids,
    prompt_mask,
    completion_ids,
    completion_mask,
    temperature: float = 1.0,
    with_entropy: bool = False,
):
    """Log-probs (and optionally entropies) of ``completion_ids`` under ``model`` for one micro-batch.

    Only the ``T + 1`` logit rows that predict completion tokens are materialised
    (``logits_to_keep``), never the prompt's.
    """
    ids = torch.cat([prompt_ids, completion_ids], dim=1)
    mask = torch.cat([prompt_mask, completion_mask], dim=1)
    t = completion_ids.shape[1]
    out = model(
        input_ids=ids, attention_mask=mask, position_ids=_position_ids(mask), use_cache=False, logits_to_keep=t + 1
    )
    logits = out.logits[:, -(t + 1) : -1]
    # Half-precision logits are upcast for the softmax; float64 stays float64 (exactness tests).
    logits = logits.to(torch.promote_types(logits.dtype, torch.float32)) / temperature
    logp_all = torch.log_softmax(logits, dim=-1)
    logp = logp_all.gather(-1, completion_ids.unsqueeze(-1)).squeeze(-1)
    entropy = -(logp_all.exp() * logp_all).sum(-1) if with_entropy else None
    return logp, entropy


def _episodes_truncated(rollout: Rollout) -> torch.Tensor:
    """``[episodes]`` whether each episode of ``rollout`` ended unanswered: any of its rows truncated.

    An episode laid out in several rows (``model.rl_rows``) counts once. ``run_agent_rl`` marks every
    row of an unanswered episode, and a cut at ``max_new_tokens`` ends the episode, so "any row",
    "the last row" and "every row" agree there; "any" also holds for a layout that marked only the row
    it was cut in."""
    cut = rollout.out.truncated.bool()
    ep = rollout.info.get("row_episode")
    if ep is None:
        return cut
    episodes = len(rollout.info["episode_rewards"])
    return torch.zeros(episodes, dtype=torch.long).index_add_(0, ep, cut.long()) > 0


def _frac_tokens_distilled(rollouts: list[Rollout]) -> float:
    """The step's tokens given a distillation advantage over its eligible tokens: the policy loss's
    (completion tokens of verified rows, less truncated rows' under ``mask_truncated``), all rows,
    guided or not; 0 where there are none. A token selected on a row of teacher weight 0 (pass rate
    0 or unknown under ``sample_weight: teacher_pass_rate``), or at ``beta`` 0, is not distilled."""
    eligible = sum(r.info.get("eligible_tokens", 0.0) for r in rollouts)
    return sum(r.info["distilled_tokens"] for r in rollouts) / eligible if eligible else 0.0


def _guided_episodes_mean(values: torch.Tensor, rows: torch.Tensor, ep: torch.Tensor) -> float:
    """Mean of ``values`` (``[B]`` per row, the same on every row of an episode) over the episodes with
    a guided row (``rows``), each episode once however many rows it was laid out in."""
    per_episode = torch.zeros(int(ep.max()) + 1, dtype=values.dtype).scatter_(0, ep, values)
    return float(per_episode[ep[rows].unique()].mean())


@dataclass
class Rollout:
    """One generation batch, scored and with its per-token advantages, waiting for the update.

    Attributes:
        records: the prompt records of the batch.
        out: the sampler's output (token ids, masks, sampling log-probs).
        rewards: ``[B]`` rewards, NaN where the verifier could not decide.
        token_adv: ``[B, T]`` per-token advantages.
        loss_mask: ``[B, T]`` tokens in the policy loss (the policy's own tokens of verified rows).
        ref_logprobs: ``[B, T]`` reference log-probs (KL penalty) or ``None``.
        info: guidance details (groups, teacher entries, selected tokens) and statistics.
    """

    records: list[dict[str, Any]]
    out: GenerationOutput
    rewards: torch.Tensor
    token_adv: torch.Tensor
    loss_mask: torch.Tensor
    ref_logprobs: torch.Tensor | None
    info: dict[str, Any]


#: ``VLLMServerEngine`` arguments RSTG sets as ``vllm_server_<name>`` (``None``: the engine's default).
_SERVER_ENGINE_ARGS = ("model", "timeout", "reload_timeout", "max_concurrency", "max_retries")
#: RSTG settings that only the vLLM server sampler reads.
SERVER_SETTINGS = (*(f"vllm_server_{name}" for name in _SERVER_ENGINE_ARGS), "vllm_server_api_key_env")
#: Where the server's API key is read from when ``vllm_server_api_key_env`` is not set: the
#: variable ``vllm serve`` itself reads its ``--api-key`` from, so one export serves both ends.
DEFAULT_API_KEY_ENV = "VLLM_API_KEY"


def server_api_key(env: str | None, required: bool = True) -> str:
    """The vLLM server's API key from the environment variable ``env`` (``vllm_server_api_key_env``).

    ``None`` reads :data:`DEFAULT_API_KEY_ENV` and, when it is unset, sends the placeholder
    ``"EMPTY"`` (a server started without a key ignores it). A variable named explicitly must be
    set when ``required`` (training: the user said the server wants a key, and a missing one would
    only surface as a 401 once every model had loaded); otherwise (a checkpoint loaded to export or
    generate, which never asks the server) its absence is ``"EMPTY"``.
    """
    if env is None:
        return os.environ.get(DEFAULT_API_KEY_ENV) or "EMPTY"
    key = os.environ.get(env)
    if not key and not required:
        return "EMPTY"
    if not key:
        raise RSTGSettingError(
            f"model.vllm_server_api_key_env names the environment variable {env}, which is not set here; "
            f"export {env}=<the server's API key> (or leave the setting out for a server without a key)"
        )
    return key


class RSTGModule(L.LightningModule):
    """On-policy RL with verifiable rewards (GRPO) plus selective teacher guidance (RSTG).

    Records whose ``task`` has tools (e.g. the calculator, the agent world or BFCL's API classes,
    with BFCL's later user turns delivered in the episode) are run as
    multi-turn episodes (:func:`~lightning_agents.rollout.agent_loop.run_agent_rl`): the policy
    loss, the teacher's log-probs and the token selection cover only the tokens the student
    sampled, in their full context; tool outputs are masked out; the episode reward comes from the
    task's final-state check; teacher SFT trains on the teacher's own successful episode. Other
    records get one sampled text per prompt, so records whose verifier scores a whole episode
    (``curate``'s tau-bench and tau2 records, and its BFCL records scored by call match, which name
    no such task) are refused at setup: no text could be scored (see :meth:`check_one_shot_records`).

    Per generation batch: sample ``num_generations`` completions per prompt, score them, compute
    group advantages, find zero-variance groups, run the teacher only where guidance applies, build
    the hybrid advantages and select tokens. After ``generation_batches_per_step`` such batches the
    clipped surrogate (plus teacher SFT) is optimised in one optimizer step. Optimisation is manual:
    each micro-batch is forwarded, its loss back-propagated and its activations freed before the
    next. Under DDP every rank runs the same collectives whatever its data: one all-reduce of the
    loss normalisers, and exactly one gradient-synchronising backward (the last micro-batch), all
    others under ``no_sync``. With a student sharded over the ranks (FSDP, FSDP2, ZeRO-3), where
    every forward is a collective, sampling runs on gathered parameters until all ranks are done
    (:meth:`student_generation`) and the teacher-SFT passes are padded to the ranks' maximum.
    The LightningCLI ``optimizer:`` section overrides the default AdamW.

    Args:
        model: student policy (path, hub id or ``embedded:student``).
        teacher: frozen teacher with the student's tokenizer (``None`` only when guidance is off).
        reference: frozen reference model for the KL penalty (used when ``beta_kl > 0``;
            defaults to a copy of the initial student).
        dtype: weight dtype of the student (and the reference). Keep ``float32`` with
            ``precision: bf16-mixed`` for real runs: in pure bf16 an AdamW step of ~1e-6 is below the
            resolution of typical weights and is lost.
        teacher_dtype: weight dtype of the frozen teacher (default ``dtype``; ``bfloat16`` halves
            its memory). A vLLM sampler runs in this dtype too when the student is float32.
        engine: sampler: ``hf`` (transformers ``generate`` on the student itself) or ``vllm``.
        vllm_mode: ``colocate`` (a ``vllm.LLM`` in this process, weights loaded from the student
            before every optimizer step's first generation) or ``server`` (an OpenAI-compatible
            ``vllm serve`` at ``vllm_server_url``).
        vllm_gpu_memory_utilization: GPU memory fraction a colocated vLLM may take.
        vllm_sleep_mode: let a colocated vLLM free its memory between generations.
        vllm_max_model_len: vLLM context limit (``None``: the model's).
        vllm_server_url: the server's OpenAI API root (``server`` mode).
        vllm_weights_dir: directory the server loads its weights from; the student's weights are
            written there before every optimizer step (``None``: the server's weights stay fixed).
        vllm_server_model: the served model's name (``None``: the only one the server lists).
        vllm_server_timeout: seconds one request (a prompt's G samples) may take, per try
            (``None``: 600). Raise it for a slow server or long completions.
        vllm_server_reload_timeout: seconds a weight reload may take (``None``: 600); needs
            ``vllm_weights_dir``.
        vllm_server_max_concurrency: prompts in flight at once (``None``: 64).
        vllm_server_max_retries: retries of a request that timed out, lost its connection or got
            408/429/5xx (``None``: 2).
        vllm_server_api_key_env: name of the environment variable holding the server's API key
            (the key itself is never a setting: it would be saved in every checkpoint and
            ``hparams.yaml``). ``None`` reads ``VLLM_API_KEY`` (what ``vllm serve`` reads its
            ``--api-key`` from) and sends no key when it is unset; a variable named here must be set.
        importance_sampling: ``truncated`` weights every token's loss by
            ``min(pi_train / pi_sampler, importance_sampling_cap)``, correcting for the gap between
            sampler and trainer log-probs (as TRL does by default); ``none`` leaves it uncorrected.
            The gap is logged either way (``train/sampler_logprob_gap``).
        importance_sampling_cap: upper truncation of the importance weights.
        chat_template_kwargs: extra ``apply_chat_template`` arguments, e.g.
            ``{enable_thinking: false}`` for Qwen3.
        guidance: enable teacher guidance; ``False`` is exactly GRPO.
        distill_scope: ``negative`` (only all-wrong zero-variance groups, RSTG) or ``all``
            (every prompt, naive OPD).
        token_selection: ``soft_or`` (top ``token_fraction`` of each group by the soft-OR of
            entropy and ``|A_opd|``) or ``all`` (every completion token).
        token_fraction: fraction of a group's tokens that get the distillation term.
        divergence_floor: smallest spread (nats) of ``|A_opd|`` within a group that the soft-OR
            stretches to the full [0, 1]. Below it the divergence half counts in proportion
            (``spread / divergence_floor``), so a teacher that equals or barely differs from the
            student (float32 noise of ~1e-5 nats) does not pick tokens and the entropy does.
            Spreads above it are min-max normalised as before; 0 restores plain min-max. A
            bfloat16 teacher close to the student carries up to ~0.5 nats of rounding noise:
            raise it to ~0.5-1 there.
        sample_weight: ``teacher_pass_rate`` (the teacher's mean@k on the prompt) or ``none`` (1).
        teacher_sft: add NLL on the shortest correct teacher answer for guided groups.
        teacher_k: teacher samples per prompt for its pass rate (mean@k).
        teacher_cache: JSONL file caching teacher pass rates and answers (default:
            ``<default_root_dir>/rstg_teacher_cache.jsonl``); fill it ahead of training with
            ``lightning-agents teacher_cache --config ...``.
        beta_start: initial guidance weight beta_t.
        beta_slope: beta change per optimisation step (negative anneals).
        beta_floor: lower bound of beta_t.
        num_generations: G, samples per prompt.
        generation_batches_per_step: generation batches (dataloader batches) whose losses are
            accumulated into one optimizer step.
        max_turns: model turns per episode when the records' task has tools (multi-turn RL).
        max_tool_calls: tool calls executed per episode; later calls get an error observation.
        rl_rows: how an episode with several user turns (BFCL's, a user simulator's) is laid out for
            training: ``stream`` (one growing token stream), ``per_user_turn`` (a row per user turn,
            prompted with the served request, :func:`~lightning_agents.rollout.agent_loop.run_agent_rl`)
            or ``auto`` (a new row at a user's turn where the chat template writes text with the newest
            user message only, Mistral Nemo's and v0.3's system prompt, so that the stream grows by a
            copy per user turn, once the row would be longer than 1.5 times the served request,
            ``agent_loop.AUTO_ROW_GROWTH``; every other template keeps the stream, bit for bit). Group statistics and
            advantages are the episodes'; each row gets its episode's, and an episode's rows count as
            one sequence in the loss (``sequence_mean`` divides by the episode's tokens over all its
            rows), so a row layout weighs an episode as its one stream did.
        max_new_tokens: completion length limit (per model turn for tool-using tasks).
        context_length: the student's context (prompt plus completion, in tokens); longer samples
            get no reward (:meth:`beyond_context`). ``None`` derives it from the model config
            (``max_position_embeddings`` and RoPE scaling), which some configs state ambiguously:
            Gemma 3 lists its extended length under ``linear`` scaling, which the derivation
            multiplies by the factor again. Set it to the length the model was trained for.
        temperature: sampling temperature (the policy ratio uses the same temperature).
        top_p: nucleus sampling mass.
        eps_low: lower clip range of the surrogate.
        eps_high: upper clip range (clip-higher when larger than ``eps_low``).
        beta_kl: weight of the k3 KL penalty to the reference (0 disables and loads no reference).
        loss_aggregation: ``sequence_mean`` (GRPO), ``token_mean`` (DAPO, normalised by the token
            count of the whole optimizer step over all ranks) or ``constant`` (Dr. GRPO).
        advantage_scale: ``group``, ``batch`` or ``none`` std scaling of GRPO advantages.
        success_threshold: reward at or above which a sample counts as correct.
        mask_truncated: drop completions that hit ``max_new_tokens`` from the policy loss (and from
            the choice of distilled tokens, which only picks tokens that train).
        micro_batch_size: rows per forward pass.
        verifier: default reward function (class path or ``{class_path, init_args}``); records
            may name their own. A NaN reward means "could not verify": such samples are left out
            of group statistics, guidance and the loss, and counted (``train/unverified_frac``).
        reward_workers: threads scoring completions in parallel.
        lr: AdamW learning rate (unless the config has an ``optimizer:`` section).
        weight_decay: AdamW weight decay.
        max_grad_norm: gradient-norm clip (0 disables).
        log_samples_every_n_steps: write sample completions to TensorBoard as text every N steps
            (0 disables).
        val_max_new_tokens: completion limit for validation (default ``max_new_tokens``).
        gradient_checkpointing: recompute student activations in backward (the student is put in
            train mode for the loss passes, so this takes effect; dropout is switched off so the
            trainer's log-probs match the sampler's).
        trust_remote_code: allow model repositories with custom code.
        sampling_seed: seed of all sampling (``None``: the ``seed_everything`` seed, else 0). The
            student's samples of a prompt come from a generator seeded with ``(sampling_seed,
            optimizer step, generation batch, prompt)``, the teacher's from ``(sampling_seed,
            teacher cache key)``; sampling then does not depend on what was sampled before, so a
            resumed run, a teacher-cache hit or miss, and the data order of other DDP ranks do not
            change anyone's samples. A resumed run keeps the seed of its checkpoint.
        adapter: LoRA/QLoRA adapters (``peft``) on the student; only they train and are
            checkpointed. With ``beta_kl > 0`` and no ``reference``, the reference policy is the
            base model with the adapters disabled (no second copy). LoRA dropout is switched off
            like all dropout here. Needs ``engine: hf``; ``qlora`` is refused (the student loads
            unquantized).
    """

    def __init__(
        self,
        model: str = "embedded:student",
        teacher: str | None = "embedded:teacher",
        reference: str | None = None,
        dtype: DType = "float32",
        teacher_dtype: DType | None = None,
        engine: Literal["hf", "vllm"] = "hf",
        vllm_mode: Literal["colocate", "server"] = "colocate",
        vllm_gpu_memory_utilization: float = 0.3,
        vllm_sleep_mode: bool = True,
        vllm_max_model_len: int | None = None,
        vllm_server_url: str = "http://localhost:8000/v1",
        vllm_weights_dir: str | None = None,
        vllm_server_model: str | None = None,
        vllm_server_timeout: float | None = None,
        vllm_server_reload_timeout: float | None = None,
        vllm_server_max_concurrency: int | None = None,
        vllm_server_max_retries: int | None = None,
        vllm_server_api_key_env: str | None = None,
        importance_sampling: Literal["truncated", "none"] = "truncated",
        importance_sampling_cap: float = 2.0,
        chat_template_kwargs: dict[str, Any] | None = None,
        guidance: bool = True,
        distill_scope: Literal["negative", "all"] = "negative",
        token_selection: Literal["soft_or", "all"] = "soft_or",
        token_fraction: float = 0.2,
        divergence_floor: float = F.DIVERGENCE_FLOOR,
        sample_weight: Literal["teacher_pass_rate", "none"] = "teacher_pass_rate",
        teacher_sft: bool = True,
        teacher_k: int = 8,
        teacher_cache: str | None = None,
        beta_start: float = 5e-3,
        beta_slope: float = -5e-5,
        beta_floor: float = 1e-3,
        num_generations: int = 8,
        generation_batches_per_step: int = 1,
        max_turns: int = 4,
        max_tool_calls: int = 8,
        rl_rows: Literal["stream", "per_user_turn", "auto"] = "auto",
        max_new_tokens: int = 64,
        context_length: int | None = None,
        temperature: float = 1.0,
        top_p: float = 1.0,
        eps_low: float = 0.2,
        eps_high: float = 0.2,
        beta_kl: float = 0.0,
        loss_aggregation: Literal["sequence_mean", "token_mean", "constant"] = "sequence_mean",
        advantage_scale: Literal["group", "batch", "none"] = "group",
        success_threshold: float = 1.0,
        mask_truncated: bool = False,
        micro_batch_size: int = 16,
        verifier: str | dict[str, Any] = "lightning_agents.rewards.ArithmeticVerifier",
        reward_workers: int = 8,
        lr: float = 1e-5,
        weight_decay: float = 0.0,
        max_grad_norm: float = 1.0,
        log_samples_every_n_steps: int = 50,
        val_max_new_tokens: int | None = None,
        gradient_checkpointing: bool = False,
        trust_remote_code: bool = False,
        sampling_seed: int | None = None,
        adapter: AdapterConfig | None = None,
    ) -> None:
        super().__init__()
        choices = {
            "distill_scope": ("negative", "all"),
            "token_selection": ("soft_or", "all"),
            "sample_weight": ("teacher_pass_rate", "none"),
            "loss_aggregation": F.AGGREGATIONS,
            "engine": ("hf", "vllm"),
            "vllm_mode": ("colocate", "server"),
            "importance_sampling": ("truncated", "none"),
            "advantage_scale": ("group", "batch", "none"),
            "rl_rows": RL_ROWS,
        }
        given = locals()
        for name, allowed in choices.items():
            if given[name] not in allowed:
                raise RSTGSettingError(f"model.{name} must be one of {list(allowed)}, got {given[name]!r}")
        if num_generations < 2:
            raise RSTGSettingError("model.num_generations must be >= 2: group advantages need at least two samples")
        if guidance and teacher is None:
            raise RSTGSettingError("model.guidance=true needs a `teacher`; set guidance: false for plain GRPO")
        bounds = (
            ("micro_batch_size", micro_batch_size >= 1, ">= 1"),
            ("generation_batches_per_step", generation_batches_per_step >= 1, ">= 1"),
            ("temperature", temperature > 0, "> 0"),
            ("top_p", 0 < top_p <= 1, "in (0, 1]"),
            ("max_new_tokens", max_new_tokens >= 1, ">= 1"),
            ("teacher_k", teacher_k >= 1, ">= 1"),
            ("max_turns", max_turns >= 1, ">= 1"),
            ("max_tool_calls", max_tool_calls >= 0, ">= 0"),
            ("reward_workers", reward_workers >= 1, ">= 1"),
            ("eps_low", eps_low >= 0, ">= 0"),
            ("eps_high", eps_high >= 0, ">= 0"),
            ("beta_start", beta_start >= 0, ">= 0"),
            ("beta_floor", beta_floor >= 0, ">= 0"),
            ("beta_kl", beta_kl >= 0, ">= 0"),
            ("divergence_floor", divergence_floor >= 0, ">= 0"),
            ("lr", lr >= 0, ">= 0"),
            ("context_length", context_length is None or context_length >= 1, ">= 1 (or null)"),
            ("vllm_server_timeout", vllm_server_timeout is None or vllm_server_timeout > 0, "> 0 (or null)"),
            (
                "vllm_server_reload_timeout",
                vllm_server_reload_timeout is None or vllm_server_reload_timeout > 0,
                "> 0 (or null)",
            ),
            (
                "vllm_server_max_concurrency",
                vllm_server_max_concurrency is None or vllm_server_max_concurrency >= 1,
                ">= 1 (or null)",
            ),
            (
                "vllm_server_max_retries",
                vllm_server_max_retries is None or vllm_server_max_retries >= 0,
                ">= 0 (or null)",
            ),
            ("vllm_server_model", vllm_server_model is None or bool(vllm_server_model.strip()), "a name (or null)"),
            (
                "vllm_server_api_key_env",
                # a name, never a key pasted in by mistake (it would be saved in every checkpoint)
                vllm_server_api_key_env is None
                or re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", vllm_server_api_key_env) is not None,
                "an environment variable name such as MY_VLLM_KEY (or null)",
            ),
        )
        for name, ok, rule in bounds:
            if not ok:
                # not echoed for the key's variable: a key pasted there instead of a name stays off the logs
                shown = "a value that is not one" if name == "vllm_server_api_key_env" else repr(given[name])
                raise RSTGSettingError(f"model.{name} must be {rule}, got {shown}")
        server_only = [name for name in SERVER_SETTINGS if given[name] is not None]
        if server_only and (engine, vllm_mode) != ("vllm", "server"):
            # Left unused they would look applied: a timeout raised for a slow server while the run
            # samples in-process.
            raise RSTGSettingError(
                f"model.{server_only[0]} applies to the vLLM server sampler only (model.engine=vllm, "
                f"model.vllm_mode=server), got engine={engine!r}, vllm_mode={vllm_mode!r}; remove it"
            )
        if vllm_server_reload_timeout is not None and vllm_weights_dir is None:
            raise RSTGSettingError(
                "model.vllm_server_reload_timeout needs model.vllm_weights_dir: without it the server's weights "
                "are never reloaded"
            )
        if importance_sampling_cap <= 0:
            raise RSTGSettingError(f"model.importance_sampling_cap must be > 0, got {importance_sampling_cap}")
        adapter = as_adapter_config(adapter)
        if adapter is not None and adapter.qlora:
            # Refused here, before any model loads: the adapters' own check would only fire in
            # configure_model, on the GPU, with advice ("load it quantized") RSTG has no setting for.
            raise RSTGSettingError(
                "model.adapter.qlora: RSTGModule loads its student unquantized (it has no quantization setting), "
                "so QLoRA is not available here; use LoRA (adapter.qlora: false), or QLoRA with SFTModule"
            )
        check_adapter_device(adapter)
        if adapter is not None and engine != "hf":
            raise RSTGSettingError(
                "model.adapter needs model.engine=hf: the vLLM samplers are given full weights, not LoRA adapters"
            )
        self.save_hyperparameters()
        loadable_hparams(self)  # a Path argument made every checkpoint unloadable
        # Plain values in the checkpoint: it then loads with torch.load(weights_only=True).
        self.hparams["adapter"] = None if adapter is None else asdict(adapter)
        self.adapter = adapter
        self.rng_resume = RNGResume()
        self._loading_checkpoint = False
        self._sampling_seed: int | None = None
        self._resumed_plateau_metrics: dict[str, float] = {}
        self.automatic_optimization = False
        # Frozen teacher/reference weights are not saved in checkpoints (they reload from their ids).
        self.strict_loading = False
        # Models are built in configure_model (idempotent), so that strategies can shard or wrap
        # them and adapters can be attached on top of the loaded student.
        self.model = None
        self.tokenizer = None
        self.teacher = None
        self.ref_model = None
        self.engine = None
        self.scorer = RewardScorer(verifier, max_workers=reward_workers)
        self._cache: TeacherCache | None = None
        self._pending: list[Rollout] = []
        self._tasks: dict[str, Any] = {}
        self._synced_step = -1
        # teacher generate calls this rank joined the others for (_join_teacher_sampling); teacher_info checks them
        self._joined_teacher_calls: int | None = None
        self.val_accuracy = MeanMetric()

    # ----------------------------------------------------------------------------- models
    def configure_model(self) -> None:
        """Load the student, the teacher, the reference model and the sampler (once; later calls do nothing)."""
        if self.model is not None:
            return
        hp = self.hparams
        if hp.engine == "vllm" and hp.vllm_mode == "server" and self._training_run():
            server_api_key(hp.vllm_server_api_key_env)  # a missing key is named before any model loads
        self.model, self.tokenizer = self._load_student()
        if self.adapter is not None:
            self.model = apply_adapters(self.model, self.adapter, gradient_checkpointing=hp.gradient_checkpointing)
        disable_dropout(self.model)
        self.model.train()
        if hp.guidance:
            self.teacher = self._load_frozen(hp.teacher, hp.teacher_dtype or hp.dtype)
        if hp.beta_kl > 0:
            if self.adapter is not None and hp.reference is None:
                self.ref_model = BaseModelView(self.model)
            else:
                self.ref_model = self._load_frozen(hp.reference or hp.model)
        self.engine = self._build_engine()

    def load_state_dict(self, state_dict: Any, *args: Any, **kwargs: Any) -> Any:
        """Load weights, building the models first when ``state_dict`` holds the student's.

        The student exists only after :meth:`configure_model`. ``ddp_spawn`` trains in worker
        processes and then loads their weights into the main process's module non-strictly; the
        student's keys, finding nothing to go to, were dropped without a word.
        """
        if self.model is None and any(k.startswith("model.") for k in state_dict):
            self.configure_model()
        if self._loading_checkpoint and self.model is not None and has_adapters(self.model):
            # A checkpoint loads non-strictly (the frozen base is not saved): adapters of other
            # settings than the checkpoint's would load nothing, without a word. Only a checkpoint
            # (marked by on_load_checkpoint): a user's own partial non-strict load is theirs.
            check_adapter_checkpoint(self.model, state_dict, "model.")
        self._loading_checkpoint = False
        return super().load_state_dict(state_dict, *args, **kwargs)

    def _load_student(self):
        hp = self.hparams
        return load_model_and_tokenizer(
            hp.model,
            dtype=hp.dtype,
            gradient_checkpointing=hp.gradient_checkpointing,
            trust_remote_code=hp.trust_remote_code,
        )

    def _load_frozen(self, name: str, dtype: str | None = None):
        hp = self.hparams
        model, tokenizer = load_model_and_tokenizer(
            name, dtype=dtype or hp.dtype, trust_remote_code=hp.trust_remote_code
        )
        check_same_vocabulary(self.tokenizer, tokenizer, name)
        own, student = getattr(tokenizer, "chat_template", None), getattr(self.tokenizer, "chat_template", None)
        if own and student and own != student:
            # Token-level distillation scores the student's own tokens, so the teacher reads the
            # prompts as the student renders them; a teacher tuned on another format says so here.
            log.warning(
                "%s has its own chat template, which differs from the student's: RSTG prompts the teacher with the "
                "student's (its samples, pass rates and log-probs are on the student's rendering)",
                name,
            )
        return model.requires_grad_(False).eval()

    def _training_run(self) -> bool:
        """Attached to a Trainer: a checkpoint loaded to export or generate (no Trainer) never asks
        the sampling server, so it must not need the server's API key."""
        return getattr(self, "_trainer", None) is not None

    def _build_engine(self):
        hp = self.hparams
        kwargs = dict(chat_template_kwargs=hp.chat_template_kwargs)
        if hp.engine == "hf":
            return HFGenerationEngine(self.model, self.tokenizer, **kwargs)
        from lightning_agents.rollout.vllm_engine import (
            VLLMGenerationEngine,
            VLLMServerEngine,
        )

        if hp.vllm_mode == "server":
            given = {name: hp[f"vllm_server_{name}"] for name in _SERVER_ENGINE_ARGS}
            settings = {name: value for name, value in given.items() if value is not None}
            return VLLMServerEngine(
                hp.vllm_server_url,
                self.tokenizer,
                weights_dir=hp.vllm_weights_dir,
                api_key=server_api_key(hp.vllm_server_api_key_env, required=self._training_run()),
                **settings,
                **kwargs,
            )
        return VLLMGenerationEngine(
            hp.model,
            self.tokenizer,
            gpu_memory_utilization=hp.vllm_gpu_memory_utilization,
            dtype=_sampler_dtype(hp.dtype, hp.teacher_dtype),
            sleep_mode=hp.vllm_sleep_mode,
            max_model_len=hp.vllm_max_model_len,
            **kwargs,
        )

    def student_generation(self):
        """Context for sampling from the student with the HF engine; yields ``synced_gpus``.

        Under FSDP, FSDP2 or DeepSpeed ZeRO-3 the student's parameters are gathered as
        :func:`~lightning_agents.rollout.sharding.gathered_for_generation` describes and every
        process keeps stepping until all have finished; otherwise it does nothing. The vLLM
        engines hold their own full copy and never need it.
        """
        if not isinstance(self.engine, HFGenerationEngine):
            return nullcontext(None)
        root = self._trainer.model if self._trainer is not None else None
        return gathered_for_generation(self.model, root)

    def sync_sampler_weights(self) -> None:
        """Give the sampler the student's current weights, once per optimizer step (vLLM only)."""
        sync = getattr(self.engine, "sync_weights", None)
        if sync is None or self._synced_step == self.global_step:
            return
        sync(self.model.state_dict().items())
        self._synced_step = self.global_step

    # ----------------------------------------------------------------------------- tasks with tools
    def setup(self, stage: str) -> None:
        """Check the datamodule's prompt records before any model is loaded (see
        :meth:`check_one_shot_records`)."""
        datamodule = getattr(self._trainer, "datamodule", None) if self._trainer is not None else None
        for where, records in _datamodule_records(datamodule):
            self.check_one_task(records, where)
            self.check_one_shot_records(records, where)
            self.check_turn_budget(records, where)

    def check_turn_budget(self, records: list[dict[str, Any]], where: str) -> None:
        """Refuse multi-turn records (``user_turns``, BFCL's) that ``max_turns`` cannot finish: a user
        turn whose ground truth makes calls needs two model turns (the calls, then the answer), one
        without needs one, and an unfinished episode scores 0, so with the default 4 every BFCL
        reward was 0 and nothing said why.

        Raises:
            RSTGSettingError: naming ``where``, the record and ``model.max_turns``.
        """
        for index, record in enumerate(records, start=1):
            needed = _turns_needed(record)
            if needed <= self.hparams.max_turns or self.agent_task([record]) is None:
                continue
            raise RSTGSettingError(
                f"{where}, record {index} (id {record.get('id')!r}) needs at least {needed} model turns (its "
                f"{len(record['user_turns'])} user turns, each answered, after the calls its ground truth makes), but "
                f"model.max_turns is {self.hparams.max_turns}: no episode could finish and every reward would be 0. "
                "BFCL's base tasks take a median of 8 model turns and 5.5 tool calls, at most 14 and 10, replaying "
                "their ground truth: set model.max_turns to about 24 and model.max_tool_calls to about 32."
            )

    def check_one_shot_records(self, records: list[dict[str, Any]], where: str) -> None:
        """Refuse records whose verifier scores a whole agent episode but that name no task with tools.

        Such a record (what ``lightning-agents curate`` writes for tau-bench, tau2 and BFCL scored by
        call match; BFCL records scored with ``bfcl_verifier=execution`` name
        :class:`~lightning_agents.tasks.bfcl_world.BFCLWorldTask` and run as episodes) would be
        sampled as one text: the policy is offered no tools, sees no tool result and no later user
        turn, and the verifier reads a completion only as JSON messages or actions, so sampled text
        gets NaN rewards (``train/unverified_frac`` 1, a zero loss) and the run learns nothing
        while its logged ``train/reward_mean`` reads 0.

        Raises:
            RSTGSettingError: naming ``where``, the record, its verifier and what to do instead.
        """
        for index, record in enumerate(records, start=1):
            path = episode_verifier(record.get("verifier") or self.hparams.verifier)
            if path is None or self.agent_task([record]) is not None:
                continue
            raise RSTGSettingError(
                f"{where}, record {index} (id {record.get('id')!r}): its verifier {path} scores a whole agent "
                "episode (tool calls with their results, across the user's turns), but the record names no task "
                "with tools to run one in. RSTG would sample one text per prompt, with no tools offered, no tool "
                "results and no user to answer, and the verifier reads a completion only as JSON messages or "
                "actions, so the samples get NaN rewards (train/unverified_frac 1, no gradient). The tau-bench and "
                "tau2 records of `lightning-agents curate` need the benchmark's environment and user simulator, "
                "which RSTG does not have: train on curate's sft.jsonl instead, or give the records a verifier "
                "that scores one completion (data.force_verifier). BFCL records run as episodes in BFCL's own "
                "classes when curated with --bfcl_verifier execution (they then name the task "
                "lightning_agents.tasks.bfcl_world.BFCLWorldTask; needs `pip install --no-deps bfcl-eval`)."
            )

    def agent_task(self, records: list[dict[str, Any]]):
        """The task of ``records`` when it has tools (multi-turn episodes), else ``None``: records of
        tasks without tools and records naming none are all one-shot prompts, and may share a batch.

        Raises:
            RSTGSettingError: records of a task with tools share the batch with records of another
                task or of none (one sampling call cannot run both episodes and one-shot answers).
        """
        tasks = self._tool_tasks(records)
        tooled = [task for task in tasks.values() if task is not None]
        if tooled and len(tasks) > 1:
            raise _mixed_tasks(records, tasks, "a batch")
        return tooled[0] if tooled else None

    def check_one_task(self, records: list[dict[str, Any]], where: str) -> None:
        """Refuse ``records`` (a data file's) that mix a task with tools with other records.

        Such a file gave the ranks batches of different kinds: :meth:`agent_task` raised on a rank whose
        batch mixed them while the others waited in a collective (a hang). Every rank reads the same
        records at :meth:`setup`, so every rank refuses them there together.

        Raises:
            RSTGSettingError: naming ``where`` and the first record of each task.
        """
        tasks = self._tool_tasks(records)
        if len(tasks) > 1 and any(task is not None for task in tasks.values()):
            raise _mixed_tasks(records, tasks, where)

    def _tool_tasks(self, records: list[dict[str, Any]]) -> dict[str | None, Any]:
        """Each ``task`` class path ``records`` name (``None``: none) -> its task where it has tools,
        else ``None`` (each built once)."""
        tasks: dict[str | None, Any] = {}
        for path in {r.get("task") for r in records}:
            if path is not None and path not in self._tasks:
                self._tasks[path] = self._task_of_records(path)
            task = None if path is None else self._tasks[path]
            tasks[path] = task if task is not None and task.tools else None
        return tasks

    def _agree_on_batch(self, records: list[dict[str, Any]], synced_gpus: bool | None, where: str) -> None:
        """Make every rank refuse, or none, what :meth:`_sample` would refuse for ``records``: a batch
        that mixes a task with tools with other records, records that need episodes but name no task
        with tools (:meth:`check_one_shot_records`), or episodes under a sharded policy
        (``synced_gpus``). Every rank calls it at the same point, before its sampling collectives: a
        rank that raised alone left the others waiting in their next collective (a hang).

        Raises:
            RSTGSettingError: on every rank where any rank's batch is refused (the refused rank's own
                error, of any type, on that rank).
        """
        error, episodes = self._refusal(records, where)
        if self._world_size() > 1:
            refused, with_tools = self._global_counts([float(error is not None), float(episodes)])
        else:
            refused, with_tools = float(error is not None), float(episodes)
        if error is not None:
            raise error
        if refused:
            raise RSTGSettingError(
                f"{int(refused)} other rank(s) refused their part of {where} (their error names the records); "
                "this rank stops with them rather than wait for them in a collective"
            )
        if synced_gpus and with_tools:
            raise RSTGSettingError(_SHARDED_EPISODES)

    def _refusal(self, records: list[dict[str, Any]], where: str) -> tuple[Exception | None, bool]:
        """``(error, episodes)``: what :meth:`_sample` would raise for ``records`` (``None``: nothing), and
        whether they are episodes of a task with tools. Any error counts, not only ``RSTGSettingError``:
        a task that cannot be built (``TaskSpecError``) raised on one rank too, before the collective that
        the other ranks then waited in."""
        try:
            self.check_one_task(records, where)
            episodes = self.agent_task(records) is not None
            if not episodes:
                self.check_one_shot_records(records, where)
        except Exception as exc:  # noqa: BLE001 - re-raised by the caller once every rank knows
            return exc, False
        return None, episodes

    def _task_of_records(self, path: str):
        """The task a record's class path names: the datamodule's own (it carries the constructor
        arguments, such as a data path, which records do not), else one built from the class path
        when the class declares tools; ``None`` for a class without tools (no episodes to run)."""
        from lightning_agents.tasks import load_task
        from lightning_agents.tasks.base import class_path
        from lightning_agents.tasks.registry import task_class

        trainer = getattr(self, "_trainer", None)
        own = getattr(getattr(trainer, "datamodule", None), "task", None)
        if own is not None and class_path(own) == path:
            return own
        if not task_class(path).tools:
            return None  # e.g. GSM8KTask, which cannot be built without its data path
        return load_task(path)

    def _sample(
        self,
        engine,
        records: list[dict[str, Any]],
        num_samples: int,
        sampling: SamplingConfig,
        seeds: list[int] | None = None,
        synced_gpus: bool | None = None,
    ):
        """``(GenerationOutput, rewards list, ScoreResult)`` for ``records``: one completion per sample
        scored by the verifier, or, for a task with tools, one multi-turn episode per sample.
        ``seeds``: one per record (see ``sampling_seed``); ``None`` for greedy decoding.
        ``synced_gpus``: the policy is sharded across processes (see :meth:`student_generation`);
        ``False`` is passed on too (an FSDP wrapper that shards nothing, which transformers would sync)."""
        from lightning_agents.rewards.registry import ScoreResult

        task = self.agent_task(records)
        seeded: dict[str, Any] = {} if seeds is None else {"seeds": seeds}
        if synced_gpus and task is not None:
            raise RSTGSettingError(_SHARDED_EPISODES)
        if synced_gpus is not None:
            seeded["synced_gpus"] = synced_gpus
        if task is None:
            # Batches of any datamodule (also validation and the teacher cache) get the setup check.
            self.check_one_shot_records(records, "a batch of prompt records")
            out = engine.generate([r["prompt"] for r in records], num_samples=num_samples, sampling=sampling, **seeded)
            refs = [r["reference"] for r in records for _ in range(num_samples)]
            specs = [r.get("verifier") for r in records for _ in range(num_samples)]
            scored = self.scorer.score(out.texts, refs, specs)
            return out, scored.rewards, scored, None
        from lightning_agents.rollout.agent_loop import run_agent_rl

        hp = self.hparams
        batch = run_agent_rl(
            engine,
            task,
            records,
            num_samples,
            sampling,
            max_turns=hp.max_turns,
            max_tool_calls=hp.max_tool_calls,
            batch_size=max(len(records) * num_samples, 1),
            rows=hp.rl_rows,
            **seeded,
        )
        errors = sum(math.isnan(r) for r in batch.rewards)
        return batch.out, batch.rewards, ScoreResult(list(batch.rewards), errors), batch

    # ----------------------------------------------------------------------------- helpers
    @property
    def sampling(self) -> SamplingConfig:
        """Sampling settings of training rollouts."""
        hp = self.hparams
        return SamplingConfig(max_new_tokens=hp.max_new_tokens, temperature=hp.temperature, top_p=hp.top_p)

    @property
    def effective_sampling_seed(self) -> int:
        """The seed all sampling derives from (``sampling_seed``, else ``seed_everything``'s, else 0; a
        resumed run's comes from its checkpoint)."""
        if self._sampling_seed is None:
            self._sampling_seed = run_seed(self.hparams.sampling_seed)
        return self._sampling_seed

    def policy_seeds(self, records: list[dict[str, Any]]) -> list[int]:
        """One seed per record for the student's samples in this generation batch: from the run's
        seed, the optimizer step, the generation batch within the step and the prompt itself (a
        prompt repeated within the batch gets a new seed per repetition), never from a position
        that depends on other ranks or on earlier draws."""
        seen: dict[str, int] = {}
        seeds = []
        for r in records:
            ident = prompt_identity(r)
            seen[ident] = seen.get(ident, -1) + 1
            seeds.append(
                derive_seed(
                    self.effective_sampling_seed, "policy", self.global_step, len(self._pending), ident, seen[ident]
                )
            )
        return seeds

    @property
    def teacher_cache(self) -> TeacherCache:
        """The on-disk cache of teacher pass rates and answers."""
        if self._cache is None:
            path = self.hparams.teacher_cache
            if path is None:
                root = self.trainer.default_root_dir if self._trainer is not None else "."
                path = str(Path(root) / "rstg_teacher_cache.jsonl")
            self._cache = TeacherCache(path)
        return self._cache

    def beta(self) -> float:
        """Guidance weight beta_t at the current step."""
        hp = self.hparams
        return F.beta_schedule(self.global_step, hp.beta_start, hp.beta_slope, hp.beta_floor)

    def teacher_key(self, record: dict[str, Any]) -> str:
        """Cache key of the teacher's statistics for ``record``: every setting that changes the
        teacher's samples or how they are scored."""
        hp = self.hparams
        return teacher_cache_key(
            hp.teacher,
            record["prompt"],
            {
                "k": hp.teacher_k,
                "max_new_tokens": hp.max_new_tokens,
                "temperature": hp.temperature,
                "top_p": hp.top_p,
                # the teacher's own weights' dtype decides its samples (the student's does not)
                "dtype": hp.teacher_dtype or hp.dtype,
                # prompts are rendered with the student's template, so it decides what the teacher saw
                "chat_template": getattr(self.tokenizer, "chat_template", None),
                "chat_template_kwargs": hp.chat_template_kwargs,
                "tools": record.get("tools"),
                "reference": record.get("reference"),
                "verifier": record.get("verifier") or hp.verifier,
                "success_threshold": hp.success_threshold,
                "teacher_files": model_fingerprint(hp.teacher),
                "task": record.get("task"),
                "max_turns": hp.max_turns,
                "max_tool_calls": hp.max_tool_calls,
                # a user's later turn sampled after the served request, the answer in rows: keys of
                # records laid out in one stream stay as they were
                **({"rl_rows": self.hparams.rl_rows} if self._rows_per_user_turn(record) else {}),
                # The teacher's samples are a function of the key and this seed: a cached entry is
                # exactly what computing it again would give.
                "seed": self.effective_sampling_seed,
                # Solar-Open replies are read with their marker tokens since 11f8ab1: entries cached before
                # scored the reasoning and stored glued answer text (only such templates' keys change)
                **({"decode": "marked"} if marked_style(self.tokenizer) else {}),
            },
        )

    def _rows_per_user_turn(self, record: dict[str, Any]) -> bool:
        """Whether ``record``'s episodes may take a row per user turn (``rl_rows``): ``per_user_turn``,
        or ``auto`` on a template that writes text with the newest user message only (one probe render
        per template, system prompt and tools). A record of no task never has a later user turn."""
        rows = self.hparams.rl_rows
        if rows == "stream" or not record.get("task") or not isinstance(record.get("prompt"), list):
            return False
        if rows == "per_user_turn":
            return True
        from lightning_agents.rollout.agent_loop import user_turn_opens_row

        return user_turn_opens_row(
            self.tokenizer, self.hparams.chat_template_kwargs or {}, record["prompt"], record.get("tools")
        )

    def teacher_info(self, records: list[dict[str, Any]], batch_size: int | None = None) -> list[dict[str, Any]]:
        """Teacher pass rate (mean@k over verified samples) and shortest correct answer per record,
        from the cache or computed now (k teacher samples each, verified) and cached.

        A sample counts as correct only when verified at or above ``success_threshold`` and not
        truncated, the same rule that makes it eligible as the SFT target. Unverifiable samples
        (NaN) are left out of the rate; with none verified the rate is ``None`` (weight 0).

        The misses are sampled in chunks of ``batch_size`` prompts, one ``generate`` call each
        (:meth:`_teacher_chunks`; all of them in one call with ``batch_size`` ``None``, as training
        asks). Under a teacher sharded across processes every rank must first call
        :meth:`_join_teacher_sampling` with the same records and ``batch_size`` (training and
        :meth:`precompute_teacher` do), which pads the ranks to the same number of calls.

        Raises:
            RuntimeError: the teacher is sharded across processes and this rank did not join for
                exactly these calls (the other ranks would wait in, or miss, a ``generate``).
        """
        keys = [self.teacher_key(r) for r in records]
        missing = [i for i, k in enumerate(keys) if k not in self.teacher_cache]
        chunks = self._teacher_chunks(missing, batch_size)
        joined, self._joined_teacher_calls = self._joined_teacher_calls, None
        # also where this rank has nothing to sample but joined for calls: the other ranks wait in them
        if (chunks or joined) and self._sharded(self.teacher) and joined != len(chunks):
            raise RuntimeError(
                f"teacher_info would make {len(chunks)} generate call(s) on a teacher sharded across "
                f"processes, but this rank joined the other ranks for {joined}: call "
                "_join_teacher_sampling(records, idle_record, batch_size) on every rank first, with the "
                "same records and batch_size (or fill the cache with precompute_teacher, which does)"
            )
        if chunks:
            engine = self._teacher_engine()
            for chunk in chunks:
                self._sample_teacher_chunk(engine, records, keys, chunk)
        return [self.teacher_cache.get(k) for k in keys]

    @staticmethod
    def _teacher_chunks(missing: list[int], batch_size: int | None) -> list[list[int]]:
        """The teacher ``generate`` calls that sample ``missing`` (record indexes), ``batch_size`` prompts
        each (all in one with ``None``): the one count both :meth:`teacher_info` and
        :meth:`_join_teacher_sampling` go by."""
        step = batch_size or max(len(missing), 1)
        return [missing[start : start + step] for start in range(0, len(missing), step)]

    def _sample_teacher_chunk(self, engine, records: list[dict[str, Any]], keys: list[str], chunk: list[int]) -> None:
        """Sample ``teacher_k`` answers (one-shot) or episodes (a task with tools) for ``records[i]``,
        ``i`` in ``chunk``, in one teacher ``generate`` call (episodes: one per turn), and cache each
        prompt's pass rate and shortest correct answer under ``keys[i]``."""
        hp = self.hparams
        seeds = [derive_seed(self.effective_sampling_seed, "teacher", keys[i]) for i in chunk]
        with self.teacher_generation() as synced:
            out, scores, _, agent = self._sample(
                engine, [records[i] for i in chunk], hp.teacher_k, self.sampling, seeds, synced_gpus=synced
            )
        rows_of = _rows_of_episodes(len(scores), agent)
        # an episode's length is its tokens over all its rows (the shortest success is the target)
        tokens = [sum(int(out.completion_mask[r].sum()) for r in rows) for rows in rows_of]
        for j, i in enumerate(chunk):
            episodes = range(j * hp.teacher_k, (j + 1) * hp.teacher_k)
            verified = [e for e in episodes if not math.isnan(scores[e])]
            correct = [
                e for e in verified if scores[e] >= hp.success_threshold and not bool(out.truncated[rows_of[e][0]])
            ]
            rate = len(correct) / len(verified) if verified else None
            if agent is None:
                answer = min((out.texts[e] for e in correct), key=len) if correct else None
            else:
                best = min(correct, key=lambda e: tokens[e]) if correct else None
                answer = None if best is None else _episode_answer(out, agent.rollouts[best]["traj"], rows_of[best])
            self.teacher_cache.put(keys[i], rate, answer, hp.teacher_k, verified=len(verified))

    def _teacher_engine(self) -> HFGenerationEngine:
        """An HF engine sampling from the teacher (built per use: it holds no state of its own)."""
        return HFGenerationEngine(self.teacher, self.tokenizer, chat_template_kwargs=self.hparams.chat_template_kwargs)

    def teacher_generation(self):
        """Context for sampling from the teacher; yields ``synced_gpus``, as :meth:`student_generation`
        does for the student: where the teacher is sharded across processes (FSDP, FSDP2, ZeRO-3) its
        parameters are gathered as needed and every process keeps stepping until all have finished."""
        root = self._trainer.model if self._trainer is not None else None
        return gathered_for_generation(self.teacher, root)

    def _join_teacher_sampling(
        self, records: list[dict[str, Any]], idle_record: dict[str, Any] | None, batch_size: int | None = None
    ) -> None:
        """Every rank calls this at the same point, with the same ``batch_size``, before
        :meth:`teacher_info` for ``records`` (training: its all-failed prompts that ask for teacher
        statistics, none on a rank without such a group; :meth:`precompute_teacher`: its uncached ones).

        Under a teacher sharded across processes each forward of its ``generate`` is a collective, but
        only ranks with cache misses among ``records`` sample, in as many calls as their misses take
        (:meth:`_teacher_chunks`): every rank then runs as many calls as the rank with the most, a rank
        with fewer making the missing ones here on ``idle_record``'s prompt (one sample, dropped; a
        one-token prompt without a record), and ``synced_gpus`` keeps the ranks stepping until the
        longest answer of each call ends. One all-reduce where no rank misses, two where some rank does;
        nothing where the teacher is not sharded.

        Raises:
            RSTGSettingError: some rank misses the teacher cache (``model.teacher_cache``) for records of
                a task with tools: ranks would run different numbers of ``generate`` calls (episodes);
                or some rank's misses are records :meth:`_sample` refuses (this rank's own error where
                they are its own).
        """
        # stored only once the join is made: a refused or failed one leaves nothing for teacher_info to spend
        self._joined_teacher_calls = None
        if not self._sharded(self.teacher):
            return
        missing = [i for i, r in enumerate(records) if self.teacher_key(r) not in self.teacher_cache]
        # 3: _sample would refuse this rank's misses (precompute_teacher's records reach no other check);
        # raised after this all-reduce, not in teacher_info, where the others waited in the sharded
        # generate. 2: it misses for records of a task with tools. Reduced with the misses themselves, so
        # every rank refuses, or none, whatever its own records are.
        error, tools = self._refusal([records[i] for i in missing], "the uncached teacher records")
        most = self._global_max(3.0 if error is not None else 2.0 if tools else float(bool(missing)))
        if error is not None:
            raise error
        if most >= 3:
            raise RSTGSettingError(
                "another rank refused its uncached teacher records (its error names them); this rank stops "
                "with it rather than wait for it in the sharded teacher's generate"
            )
        own = len(self._teacher_chunks(missing, batch_size))
        if not most:
            self._joined_teacher_calls = own
            return
        if most >= 2:
            raise RSTGSettingError(
                "the teacher is sharded across processes and a rank's prompts miss the teacher cache "
                f"({self.teacher_cache.path}), for records of a task with tools: the teacher's episodes "
                "would run different numbers of sharded generate calls per rank (a hang); fill the cache "
                "ahead with `lightning-agents teacher_cache` in one process (model.teacher_cache), or keep "
                "the teacher out of the sharding"
            )
        # reduced whatever this rank's batch_size: a rank whose batch_size differs still makes as many
        # all-reduces as the others (the count pairs with theirs, not with their first generate)
        calls = int(self._global_max(float(own)))
        prompt = idle_record["prompt"] if idle_record is not None else [self.tokenizer.eos_token_id or 0]
        seeds = [derive_seed(self.effective_sampling_seed, "teacher-idle", self.global_step)]
        for _ in range(own, calls):
            with self.teacher_generation() as synced:
                self._teacher_engine().generate(
                    [prompt], num_samples=1, sampling=self.sampling, seeds=seeds, synced_gpus=synced
                )
        self._joined_teacher_calls = own

    @torch.no_grad()
    def _frozen_logprobs(self, model, out, rows: torch.Tensor, with_entropy: bool = False, every_rank: bool = False):
        """Log-probs (and entropies) of the sampled tokens under ``model``, for ``rows`` only, micro-batched.

        ``every_rank``: every rank makes this call at the same point (the reference pass; the teacher's
        and the student's entropy pass, which a rank without guided rows makes with no ``rows``,
        :meth:`_idle_guidance_passes`). Where ``model`` is sharded across processes, each forward is a
        collective, so a rank then runs as many passes as the rank with the most (rows laid out per
        user turn, and guided rows, differ per rank), the missing ones on its first row (sliced once),
        their result dropped."""
        result = torch.zeros(out.completion_ids.shape, dtype=torch.float64 if self._is_fp64() else torch.float32)
        entropy = torch.zeros_like(result) if with_entropy else None
        index = rows.nonzero().flatten()
        mb = self.hparams.micro_batch_size
        passes = -(-len(index) // mb)
        idle = int(self._global_max(passes)) - passes if every_rank and self._sharded(model) else 0
        was_training = model.training
        model.eval()
        try:
            if idle:
                row = (out.prompt_ids, out.prompt_mask, out.completion_ids, out.completion_mask)
                first = [t[:1].to(self.device) for t in row]
                for _ in range(idle):
                    completion_logprobs(model, *first, self.hparams.temperature)
            for start in range(0, len(index), mb):
                idx = index[start : start + mb]
                logp, ent = completion_logprobs(
                    model,
                    out.prompt_ids[idx].to(self.device),
                    out.prompt_mask[idx].to(self.device),
                    out.completion_ids[idx].to(self.device),
                    out.completion_mask[idx].to(self.device),
                    self.hparams.temperature,
                    with_entropy=with_entropy,
                )
                result[idx] = logp.to(result.dtype).cpu()
                if with_entropy:
                    entropy[idx] = ent.to(result.dtype).cpu()
        finally:
            model.train(was_training)
        mask = out.action_mask.to(result.dtype)
        return (result * mask, entropy * mask) if with_entropy else result * mask

    def _idle_guidance_passes(self, out) -> None:
        """On a rank with no guided row, the sharded passes :meth:`compute_token_advantages` makes on
        the ranks with some: the teacher's, and the student's entropy pass where the sampler gave no
        entropies (vLLM, ``soft_or``). Each forward of a sharded model is a collective, so a rank that
        skipped them left the others waiting (a hang); it runs as many as the rank with the most, on
        its first row, their results dropped (:meth:`_frozen_logprobs`, ``every_rank``). Nothing where
        no model is sharded."""
        if self._world_size() == 1:
            return
        none = torch.zeros(len(out.truncated), dtype=torch.bool)
        self._frozen_logprobs(self.teacher, out, none, every_rank=True)
        if self.hparams.token_selection == "soft_or" and out.entropies is None:
            self._frozen_logprobs(self.model, out, none, with_entropy=True, every_rank=True)

    def _is_fp64(self) -> bool:
        return next(self.model.parameters()).dtype == torch.float64

    def _sft_rows(self, prompts: list, answers: list) -> list[tuple[list[int], list[int], list[int]]]:
        """``(prompt ids, answer ids, answer loss mask)`` of each teacher SFT example: a text answer
        plus the token the chat template ends a turn with (all trained), or a teacher episode's
        token stream (only its own turns trained)."""
        stops = getattr(self.engine, "stop_ids", [self.tokenizer.eos_token_id])
        eos = turn_end_id(self.tokenizer, stops, self.hparams.chat_template_kwargs)
        rows = []
        for prompt, answer in zip(prompts, answers):
            if isinstance(answer, dict):
                # a teacher episode laid out per user turn trains each of its rows in its own context
                for row in answer.get("rows") or [answer]:
                    rows.append((list(row["prompt_ids"]), list(row["ids"]), list(row["mask"])))
                continue
            p = self.tokenizer(self.engine.render(prompt), add_special_tokens=False)["input_ids"]
            a = self.tokenizer(answer, add_special_tokens=False)["input_ids"] + [eos]
            rows.append((p, a, [1] * len(a)))
        return rows

    def _sft_nll(self, chunk: list[tuple[list[int], list[int], list[int]]]) -> torch.Tensor:
        """Summed NLL of the trained answer tokens of ``chunk`` (one forward pass, with grad)."""
        pad = self.tokenizer.pad_token_id
        width = max(len(p) + len(a) for p, a, _ in chunk)
        ids = torch.full((len(chunk), width), pad, dtype=torch.long)
        labels = torch.full((len(chunk), width), -100, dtype=torch.long)
        mask = torch.zeros((len(chunk), width), dtype=torch.long)
        for r, (p, a, keep) in enumerate(chunk):
            seq = p + a
            ids[r, : len(seq)] = torch.tensor(seq)
            labels[r, len(p) : len(seq)] = torch.where(torch.tensor(keep).bool(), torch.tensor(a), torch.tensor(-100))
            mask[r, : len(seq)] = 1
        ids, labels, mask = ids.to(self.device), labels.to(self.device), mask.to(self.device)
        logits = self.model(input_ids=ids, attention_mask=mask, use_cache=False).logits[:, :-1]
        logits = logits.to(torch.promote_types(logits.dtype, torch.float32))
        return torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1), ignore_index=-100, reduction="sum"
        )

    # ----------------------------------------------------------------------------- advantages
    def compute_token_advantages(
        self, out, rewards: torch.Tensor, records: list[dict[str, Any]], row_episode: torch.Tensor | None = None
    ):
        """GRPO advantages, plus the guidance term where it applies; returns ``(adv [B, T], info)``.

        NaN rewards (could not verify) are left out of the group statistics and get no guidance.
        ``rewards`` are the episodes'; ``row_episode`` (``[B]``) names the episode of each row of
        ``out`` where an episode takes several rows (``rl_rows``): the group statistics and advantages
        are computed on the episodes, G per problem as always, and every row gets its episode's.
        ``None``: row ``i`` is episode ``i``.
        """
        hp = self.hparams
        g = hp.num_generations
        ep = torch.arange(len(rewards)) if row_episode is None else row_episode
        # the guidance masks' group of each row; None keeps the blocks of g contiguous rows
        row_group = None if row_episode is None else row_episode // g
        verified = (~torch.isnan(rewards))[ep]
        mask = out.action_mask.float() * verified[:, None]
        if hp.mask_truncated:
            # Tokens the policy loss drops cannot be distilled: choosing the top `token_fraction`
            # among them spent the guided-token budget on tokens that train nothing (every one of
            # them when all of a negative group's samples were truncated).
            mask = mask * (~out.truncated).to(mask.dtype)[:, None]
        stats = F.group_stats(rewards, g, hp.success_threshold)
        adv = F.group_advantages(rewards, g, hp.advantage_scale)[ep]
        token_adv = adv[:, None].expand_as(mask).clone() * mask
        info: dict[str, Any] = {
            "stats": stats,
            # token counts: the step's train/frac_tokens_distilled is its distilled over its eligible tokens
            "distilled_tokens": 0.0,
            "eligible_tokens": float(mask.sum()),
            "opd_rows": torch.zeros(len(ep), dtype=torch.bool),
            "sft_pairs": [],
        }
        if not hp.guidance:
            return token_adv, info
        groups = stats.negative if hp.distill_scope == "negative" else torch.ones_like(stats.negative)
        if hp.distill_scope == "all":
            # Naive OPD on every prompt, but never on a group with nothing verified.
            groups = groups & (stats.unverified < g)
        # Rows with no token to distill (all truncated under mask_truncated) get no teacher forward:
        # it cost a pass over them and logged teacher_kl 0 over zero tokens, halving the step's mean
        in_group = stats.rows(groups, g) if row_group is None else groups[row_group]
        rows = in_group & verified & (mask.sum(dim=1) > 0)
        info["opd_rows"] = rows
        asks = bool(rows.any()) or (hp.teacher_sft and bool(groups.any()))
        prompt_idx = [i for i in range(len(records)) if asks and bool(groups[i])]
        if hp.sample_weight == "teacher_pass_rate" or hp.teacher_sft:
            # on every rank, before the early returns: a sharded teacher's sampling is a collective
            self._join_teacher_sampling([records[i] for i in prompt_idx], records[0])
        if not asks:
            self._idle_guidance_passes(out)
            return token_adv, info
        weights = torch.ones(len(ep), dtype=token_adv.dtype)
        if hp.sample_weight == "teacher_pass_rate" or hp.teacher_sft:
            teacher = dict(zip(prompt_idx, self.teacher_info([records[i] for i in prompt_idx])))
            info["teacher"] = teacher
            if hp.sample_weight == "teacher_pass_rate":
                for i, entry in teacher.items():
                    weights[(ep // g) == i] = entry["pass_rate"] or 0.0
            if hp.teacher_sft:
                # SFT targets only where the student failed every sample, whatever the OPD scope
                # (also where none of the student's tokens could be distilled).
                info["sft_pairs"] = [
                    (records[i]["prompt"], e["answer"])
                    for i, e in teacher.items()
                    if e["answer"] and bool(stats.negative[i])
                ]
        if not rows.any():
            self._idle_guidance_passes(out)
            return token_adv, info
        beta = self.beta()
        teacher_logp = self._frozen_logprobs(self.teacher, out, rows, every_rank=True)
        weights = weights.to(teacher_logp.dtype)
        # A token whose sampler log-prob is unknown (NaN) gets no distillation advantage: taking
        # it as 0 (probability 1) would push that token down by the teacher's log-prob alone.
        row_mask = mask * rows[:, None] * ~torch.isnan(out.logprobs)
        student_logp = torch.nan_to_num(out.logprobs.to(teacher_logp.dtype), nan=0.0)
        a_opd = F.opd_advantages(teacher_logp, student_logp, row_mask)
        entropy = out.entropies
        if hp.token_selection == "soft_or":
            if entropy is None:
                # The sampler (vLLM) returns no entropies: one no-grad student pass on the guided rows.
                _, entropy = self._frozen_logprobs(self.model, out, rows, with_entropy=True, every_rank=True)
            scores = F.soft_or_scores(entropy, a_opd, row_mask, g, hp.divergence_floor, row_group=row_group)
            selected = F.select_top_fraction(scores, row_mask, g, hp.token_fraction, groups=groups, row_group=row_group)
        else:
            selected = row_mask.bool()
        token_adv = token_adv + beta * weights[:, None] * a_opd * selected
        info.update(
            beta=beta,
            selected=selected,
            a_opd=a_opd,
            weights=weights,
            # a selected token of a row weighted 0 (teacher pass rate 0 or None) gains no advantage
            distilled_tokens=float((selected & (beta * weights[:, None] != 0)).sum()),
        )
        if bool(row_mask.any()):
            # measured over the guided tokens; none (every sampler log-prob unknown): not logged
            info.update(
                opd_adv_mean=float((a_opd * row_mask).sum() / row_mask.sum()),
                opd_adv_pos_frac=float(((a_opd > 0).float() * row_mask).sum() / row_mask.sum()),
                teacher_kl=float((-a_opd * row_mask).sum() / row_mask.sum()),
                teacher_weight_mean=_guided_episodes_mean(weights, rows, ep),
                # what the step's metrics weigh this generation batch's means by (_rollout_metrics)
                guided_tokens=float(row_mask.sum()),
                guided_episodes=float(ep[rows].unique().numel()),
            )
        return token_adv, info

    # ----------------------------------------------------------------------------- training
    def collect(self, batch: list[dict[str, Any]]) -> Rollout:
        """Sample, score and compute advantages for one generation batch (no gradient)."""
        hp = self.hparams
        g = hp.num_generations
        self.sync_sampler_weights()
        with self.student_generation() as synced:
            self._agree_on_batch(batch, synced, "a training batch")
            out, reward_list, scored, agent = self._sample(
                self.engine, batch, g, self.sampling, self.policy_seeds(batch), synced_gpus=synced
            )
        episodes = torch.tensor(reward_list, dtype=torch.float64 if self._is_fp64() else torch.float32)
        laid = getattr(agent, "row_episode", None)
        row_episode = None if laid is None or laid == list(range(len(episodes))) else torch.tensor(laid)
        ep = torch.arange(len(episodes)) if row_episode is None else row_episode
        # one row beyond the context leaves its whole episode without a reward
        episodes[ep[self.beyond_context(out, batch, row_episode)].unique()] = math.nan
        token_adv, info = self.compute_token_advantages(out, episodes, batch, row_episode)
        rewards = episodes[ep]  # per row: the loss mask, the micro-batches and the samples read rows
        loss_mask = out.action_mask.to(token_adv.dtype) * (~torch.isnan(rewards)).to(token_adv.dtype)[:, None]
        if hp.mask_truncated:
            loss_mask = loss_mask * (~out.truncated).to(loss_mask.dtype)[:, None]
        ref_logp = None
        if self.ref_model is not None:
            every = torch.ones(len(rewards), dtype=torch.bool)
            ref_logp = self._frozen_logprobs(self.ref_model, out, every, every_rank=True)
        info["scored"] = scored
        if row_episode is not None:
            # an episode's rows are one sequence of the loss (model.rl_rows): they share its token count
            tokens = torch.zeros(len(episodes), dtype=loss_mask.dtype).index_add_(0, ep, loss_mask.sum(dim=1))
            info.update(row_episode=row_episode, episode_rewards=episodes, sequence_tokens=tokens[ep])
        return Rollout(batch, out, rewards, token_adv, loss_mask, ref_logp, info)

    def beyond_context(
        self, out, records: list[dict[str, Any]], row_episode: torch.Tensor | None = None
    ) -> torch.Tensor:
        """``[B]`` rows whose prompt plus completion is longer than the student's context
        (``context_length`` when set, else derived from the config's ``max_position_embeddings``
        and RoPE scaling), warned about with the records' ids.

        ``generate`` does not stop there (RoPE models run on, transformers only warns), so such a
        row was scored, usually 0, and trained on positions the model never learned; a group of
        them became a negative group and got teacher guidance and SFT on a prompt the model cannot
        read. They are "no reward" (NaN) instead: out of the group statistics, guidance and loss.
        ``row_episode`` (``[B]``, episodes in several rows) names each row's episode, whose record is
        the one warned about; :meth:`collect` takes every row of such an episode out.
        """
        given = self.hparams.context_length
        if given is not None:
            context = (int(given), "model.context_length")
        else:
            context = context_length(getattr(self.model, "config", None))
        lengths = out.prompt_mask.sum(dim=1) + out.completion_mask.sum(dim=1)
        if context is None:
            return torch.zeros(len(lengths), dtype=torch.bool)
        limit, how = context
        over = lengths > limit
        if over.any():
            g = self.hparams.num_generations
            episode = torch.arange(len(over)) if row_episode is None else row_episode
            problems = {int(episode[i]) // g for i in over.nonzero().flatten()}
            ids = sorted({str(records[p].get("id", p)) for p in problems})
            # Every rank warns: each has its own prompts.
            warnings.warn(
                f"RSTG: {int(over.sum())} of {len(over)} samples are longer than the student's context "
                f"({int(lengths.max())} > {limit} tokens, {how}; records {ids[:5]}): they get no "
                "reward, guidance or loss (counted in train/unverified_frac). Shorten the prompts or lower "
                "model.max_new_tokens.",
                stacklevel=2,
            )
        return over

    def _global_counts(self, local: list[float]) -> list[float]:
        """Sum ``local`` over all ranks (one all-reduce, run by every rank every optimizer step)."""
        t = torch.tensor(local, dtype=torch.float64, device=self._collective_device())
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            torch.distributed.all_reduce(t)
        return t.tolist()

    def _global_max(self, local: float) -> float:
        """``local``'s maximum over all ranks."""
        t = torch.tensor([float(local)], dtype=torch.float64, device=self._collective_device())
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            torch.distributed.all_reduce(t, op=torch.distributed.ReduceOp.MAX)
        return float(t[0])

    def _collective_device(self) -> torch.device:
        """Where :meth:`_global_counts` and :meth:`_global_max` put their tensor: this module's device
        where the process group's backend takes it (under a Trainer, the strategy's), else the teacher's
        or the student's parameter device, else the current CUDA device for a backend of CUDA tensors.

        Outside a Trainer (:meth:`precompute_teacher` from user code, every rank) the module stays on
        the CPU, and NCCL refuses a CPU tensor on every rank ("No backend type associated with device
        type cpu") while the teacher was sharded on the GPUs.
        """
        device = self.device
        if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
            return device
        takes = _backend_device_types()
        if takes is None or device.type in takes:
            return device
        for model in (self.teacher, self.model):
            param = next(model.parameters(), None) if model is not None else None
            if param is not None and param.device.type in takes:
                return param.device
        if "cuda" in takes and torch.cuda.is_available():
            return torch.device("cuda", torch.cuda.current_device())
        return torch.device("cpu") if "cpu" in takes else device

    def _policy_sharded(self) -> bool:
        """Each forward or backward of the student is a collective across processes, so every rank must
        run as many of its loss passes (:meth:`learn`): its parameters are sharded (FSDP, FSDP2,
        ZeRO-3), or an FSDP wrapper that splits none (``NO_SHARD``, HSDP replicate-only) still
        all-reduces the gradients in every backward (``no_sync`` is entered for a DDP wrapper only)."""
        if self._sharded(self.model):
            return True
        root = self._trainer.model if self._trainer is not None else None
        return self._world_size() > 1 and fsdp_wrapped(self.model, root)

    def _sharded(self, model) -> bool:
        """``model``'s parameters are sharded over several processes (a reference that is the student's
        base under its adapters, :class:`BaseModelView`, is sharded as the student is)."""
        root = self._trainer.model if self._trainer is not None else None
        model = model.model if isinstance(model, BaseModelView) else model
        return self._world_size() > 1 and sharding_kind(model, root) != "none"

    @staticmethod
    def _idle_sft_chunk(rollout: Rollout) -> list[tuple[list[int], list[int], list[int]]]:
        """A one-row teacher-SFT chunk whose loss is 0: a rollout's prompt and first completion
        token, with that token left out of the loss."""
        out = rollout.out
        prompt = out.prompt_ids[0][out.prompt_mask[0].bool()].tolist()
        return [(prompt, out.completion_ids[0, :1].tolist(), [0])]

    def _world_size(self) -> int:
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            return torch.distributed.get_world_size()
        return 1

    def _no_sync(self, last: bool):
        """``no_sync`` of the DDP wrapper for every backward but the last of an optimizer step."""
        wrapper = self._trainer.model if self._trainer is not None else None
        if not last and isinstance(wrapper, torch.nn.parallel.DistributedDataParallel):
            return wrapper.no_sync()
        return nullcontext()

    def learn(self, rollouts: list[Rollout]) -> dict[str, float]:
        """One optimizer step on the accumulated ``rollouts``; returns the step's metrics.

        Every rank runs: one all-reduce of the loss normalisers, then its backward passes with
        gradient synchronisation only on the last one (a policy micro-batch, which every rank has),
        then the optimizer step. The teacher-SFT passes, whose number depends on the data, all run
        under ``no_sync``, so a rank with no negative group takes part in the same collectives.
        """
        hp = self.hparams
        opt = self.optimizers()
        self.model.train()
        world = self._world_size()
        sft_rows = []
        for r in rollouts:
            pairs = r.info.get("sft_pairs") or []
            if pairs:
                sft_rows.extend(self._sft_rows([p for p, _ in pairs], [a for _, a in pairs]))
        local_tokens = sum(float(r.loss_mask.sum()) for r in rollouts)
        # an episode laid out in several rows (model.rl_rows) is one sequence
        local_seqs = sum(float(len(r.info.get("episode_rewards", r.rewards))) for r in rollouts)
        tokens, seqs, sft_tokens = self._global_counts(
            [local_tokens, local_seqs, float(sum(sum(k) for _, _, k in sft_rows))]
        )
        # DDP averages gradients over ranks; normalisers are the global counts over the world size,
        # so the averaged gradient is that of the loss over the whole global batch.
        n_tokens, n_seqs, n_sft = tokens / world, seqs / world, sft_tokens / world
        beta = self.beta() if hp.guidance else 0.0
        mb = hp.micro_batch_size
        policy_chunks = [(r, slice(s, s + mb)) for r in rollouts for s in range(0, len(r.rewards), mb)]
        sft_chunks: list[Any] = [sft_rows[s : s + mb] for s in range(0, len(sft_rows), mb)]
        if self._policy_sharded():
            # Each forward and backward of a sharded policy is a collective: every rank runs as many
            # teacher-SFT passes as the rank with the most, the missing ones on a row that trains
            # nothing (loss 0, all labels ignored).
            most = int(self._global_max(len(sft_chunks)))
            sft_chunks += [None] * (most - len(sft_chunks))
            # Likewise the policy passes: with one row per user turn (model.rl_rows) the ranks' rollouts
            # hold different numbers of rows; the missing passes run on a row with its loss masked out.
            most = int(self._global_max(len(policy_chunks)))
            policy_chunks += [(rollouts[0], None)] * (most - len(policy_chunks))
        sums = dict(
            loss=0.0, sft=0.0, clip_low=0.0, clip_high=0.0, kl=0.0, gap=0.0, gap_abs=0.0, is_w=0.0, is_clipped=0.0
        )
        for chunk in sft_chunks:
            with self._no_sync(last=False):
                nll = self._sft_nll(chunk if chunk is not None else self._idle_sft_chunk(rollouts[0]))
                self.manual_backward(beta * nll / max(n_sft, 1.0))
            sums["sft"] += float(nll.detach()) / max(n_sft, 1.0)
        for j, (r, sl) in enumerate(policy_chunks):
            with self._no_sync(last=j == len(policy_chunks) - 1):
                sums_mb = self._policy_backward(r, sl, n_tokens, n_seqs)
            for k, v in sums_mb.items():
                sums[k] += v
        if hp.max_grad_norm > 0:
            self.clip_gradients(opt, gradient_clip_val=hp.max_grad_norm, gradient_clip_algorithm="norm")
        opt.step()
        opt.zero_grad(set_to_none=True)
        self._step_schedulers("step")
        denom = max(local_tokens, 1.0)
        return {
            "train/policy_loss": sums["loss"],
            "train/sft_loss": sums["sft"],
            "train/loss": sums["loss"] + beta * sums["sft"],
            "train/clip_low_frac": sums["clip_low"] / denom,
            "train/clip_high_frac": sums["clip_high"] / denom,
            "train/sampler_logprob_gap": sums["gap"] / denom,
            "train/sampler_logprob_gap_abs": sums["gap_abs"] / denom,
            "train/importance_weight_mean": sums["is_w"] / denom,
            "train/importance_weight_truncated_frac": sums["is_clipped"] / denom,
            **({"train/kl_ref": sums["kl"] / denom} if self.ref_model is not None else {}),
        }

    def _policy_backward(self, r: Rollout, sl: slice | None, n_tokens: float, n_seqs: float) -> dict[str, float]:
        """One policy micro-batch's forward and backward; ``sl`` ``None``: an idle pass (a sharded
        policy's collectives) on ``r``'s first row with every token masked out, so it adds nothing."""
        hp = self.hparams
        out = r.out
        idle = sl is None
        sl = slice(0, 1) if idle else sl
        m = r.loss_mask[sl].to(self.device)
        if idle:
            m = torch.zeros_like(m)
        logp, _ = completion_logprobs(
            self.model,
            out.prompt_ids[sl].to(self.device),
            out.prompt_mask[sl].to(self.device),
            out.completion_ids[sl].to(self.device),
            out.completion_mask[sl].to(self.device),
            hp.temperature,
        )
        sampler = out.logprobs[sl].to(self.device, logp.dtype)
        # A sampler log-prob it did not report (NaN) is taken as the trainer's: ratio 1.
        sampler = torch.where(torch.isnan(sampler), logp.detach(), sampler)
        # One update per generation batch: the policy that sampled is the one being trained, so the
        # PPO ratio's "old" policy is the trainer's own detached log-probs (ratio 1, gradient
        # A * grad log pi); the sampler's log-probs enter only through the importance weights.
        per_tok, cl, ch = F.clipped_surrogate(
            logp, logp.detach(), r.token_adv[sl].to(self.device, logp.dtype), hp.eps_low, hp.eps_high
        )
        diff = (logp.detach() - sampler) * m
        is_w = F.truncated_importance_weights(logp, sampler, hp.importance_sampling_cap)
        if hp.importance_sampling == "truncated":
            per_tok = per_tok * is_w
        kl_sum = 0.0
        if r.ref_logprobs is not None:
            kl = F.kl_to_reference(logp, r.ref_logprobs[sl].to(self.device, logp.dtype))
            per_tok = per_tok + hp.beta_kl * kl
            kl_sum = float((kl.detach() * m).sum())
        shared = r.info.get("sequence_tokens")
        loss = F.aggregate(
            per_tok,
            m,
            hp.loss_aggregation,
            num_sequences=n_seqs,
            num_tokens=n_tokens,
            max_length=hp.max_new_tokens,
            sequence_tokens=None if shared is None else shared[sl].to(self.device),
        )
        self.manual_backward(loss)
        raw = torch.exp(logp.detach() - sampler)
        return dict(
            loss=float(loss.detach()),
            clip_low=float((cl.float() * m).sum()),
            clip_high=float((ch.float() * m).sum()),
            kl=kl_sum,
            gap=float(diff.sum()),
            gap_abs=float(diff.abs().sum()),
            is_w=float((is_w * m).sum()),
            is_clipped=float(((raw > hp.importance_sampling_cap).float() * m).sum()),
        )

    def on_train_start(self) -> None:
        check_callbacks(self.trainer, "RSTGModule")
        # from_pretrained leaves the student in eval mode, where transformers skips gradient
        # checkpointing; the loss passes need train mode (dropout is already off).
        self.model.train()
        for frozen in (self.teacher, self.ref_model):
            if frozen is not None:
                frozen.eval()
        wanted = self.hparams.teacher_dtype
        if self.teacher is not None and wanted is not None:
            have = next(self.teacher.parameters()).dtype
            if have != DTYPES[wanted]:
                # A `*-true` precision casts the whole module, the teacher included.
                log.warning(
                    "teacher_dtype %s is not in effect: the teacher's weights are %s (precision %s casts every "
                    "weight of the module); use precision: bf16-mixed with dtype: float32 to choose the teacher's",
                    wanted,
                    have,
                    self.trainer.precision,
                )

    def training_step(self, batch: list[dict[str, Any]], batch_idx: int) -> torch.Tensor | None:
        hp = self.hparams
        rollout = self.collect(batch)
        self._pending.append(rollout)
        if len(self._pending) < hp.generation_batches_per_step:
            return None
        rollouts, self._pending = self._pending, []
        metrics = self.learn(rollouts)
        metrics.update(self._rollout_metrics(rollouts))
        n = sum(len(r.records) for r in rollouts)
        # For callbacks (monitor=...) through self.log; to the loggers directly, one row every
        # log_every_n_steps updates: through Lightning, every batch between updates repeated the
        # last update's row, and the filter counted batches.
        self.log_dict(metrics, on_step=True, on_epoch=False, prog_bar=False, batch_size=n, logger=False)
        self.log("reward", metrics["train/reward_mean"], prog_bar=True, batch_size=n, logger=False)
        trainer = self._trainer
        if trainer is not None and self.global_step % max(trainer.log_every_n_steps, 1) == 0:
            # The step Lightning gives a row of this batch (its validation and LearningRateMonitor
            # rows count batches too): with several generation batches per update, the update
            # count put training rows on another axis and sent loggers steps that went backwards.
            step = compat.logger_step(trainer)
            for logger in self.loggers:
                logger.log_metrics(metrics, step=step)
        last = rollouts[-1]
        texts, rewards = last.out.texts, last.rewards.tolist()
        if "row_episode" in last.info:  # an episode's last row: its last user turn's answer
            ends = {int(e): r for r, e in enumerate(last.info["row_episode"])}
            texts, rewards = [texts[ends[e]] for e in sorted(ends)], last.info["episode_rewards"].tolist()
        self._log_samples(last.records, texts, rewards)
        return torch.tensor(metrics["train/loss"])

    def _rollout_metrics(self, rollouts: list[Rollout]) -> dict[str, float]:
        """Statistics of the generation batches of one optimizer step."""
        hp = self.hparams
        rewards = torch.cat([r.info.get("episode_rewards", r.rewards) for r in rollouts]).float()
        verified = rewards[~torch.isnan(rewards)]
        stats = [r.info["stats"] for r in rollouts]
        pos = torch.cat([s.positive for s in stats]).float()
        neg = torch.cat([s.negative for s in stats]).float()
        ent_sum, ent_n = 0.0, 0.0
        for r in rollouts:
            if r.out.entropies is not None:
                ent_sum += float((r.out.entropies * r.out.action_mask).sum())
                ent_n += float(r.out.action_mask.sum())
        guided = [r.info for r in rollouts if "opd_adv_mean" in r.info]
        scored = [r.info["scored"] for r in rollouts]
        metrics = {
            # nan, not 0, when nothing was verified: a 0 read as "the policy is wrong" where the
            # verifier could score none of the samples (unverified_frac says how many)
            "train/reward_mean": float(verified.mean()) if verified.numel() else float("nan"),
            "train/reward_std": float(verified.std()) if verified.numel() > 1 else 0.0,
            "train/frac_positive_zero_var": float(pos.mean()),
            "train/frac_negative_zero_var": float(neg.mean()),
            # over the step's tokens, each counted once: a mean of per-rollout fractions weighed a
            # rollout of short completions as much as one of long ones
            "train/frac_tokens_distilled": _frac_tokens_distilled(rollouts),
            # nan, not 0, where the sampler reports no entropies (vLLM): a 0 read as a deterministic policy
            "train/entropy": ent_sum / ent_n if ent_n else float("nan"),
            "train/completion_length": float(
                sum(float(r.out.action_mask.sum()) for r in rollouts) / max(len(rewards), 1)
            ),
            "train/truncated_frac": float(torch.cat([_episodes_truncated(r) for r in rollouts]).float().mean()),
            "train/unverified_frac": float(torch.isnan(rewards).float().mean()),
            "train/verifier_errors": float(sum(s.num_errors for s in scored)),
            "train/beta": self.beta() if hp.guidance else 0.0,
        }
        for s in scored:
            for reason, count in (getattr(s, "reasons", None) or {}).items():
                key = f"train/reason_{reason}"
                metrics[key] = metrics.get(key, 0.0) + float(count)
        if guided:
            # over the step's guided tokens and episodes, each counted once: a mean of the generation
            # batches' means weighed a batch with one guided episode as much as one with eight
            for key, count in (
                ("opd_adv_mean", "guided_tokens"),
                ("opd_adv_pos_frac", "guided_tokens"),
                ("teacher_kl", "guided_tokens"),
                ("teacher_weight_mean", "guided_episodes"),
            ):
                total = sum(i[count] for i in guided)
                metrics[f"train/{key}"] = sum(i[key] * i[count] for i in guided) / total
        return metrics

    def _log_samples(self, batch, texts: list[str], rewards: list[float]) -> None:
        every = self.hparams.log_samples_every_n_steps
        if not every or (self.global_step - 1) % every != 0 or self.logger is None:
            return
        experiment = getattr(self.logger, "experiment", None)
        if not hasattr(experiment, "add_text"):
            return
        g = self.hparams.num_generations
        lines = []
        for i, rec in enumerate(batch[:4]):
            question = rec["prompt"][-1].get("content", "")
            lines.append(f"**prompt** {question}\n\n**reference** {str(rec['reference'])[-200:]}")
            for j in range(min(g, 2)):
                lines.append(f"- reward {rewards[i * g + j]:.2f}: `{texts[i * g + j][:400]}`")
        experiment.add_text("train/samples", "\n\n".join(lines), global_step=self.global_step)

    # ----------------------------------------------------------------------------- teacher pre-generation
    def precompute_teacher(self, records: list[dict[str, Any]], batch_size: int = 16, progress=None) -> dict[str, int]:
        """Fill the teacher cache for ``records`` ahead of training (``lightning-agents teacher_cache``),
        ``batch_size`` prompts per teacher ``generate`` call.

        Under a teacher sharded across processes every rank must call this, with its own records (none
        is fine) and the same ``batch_size``: the ranks join each other's calls
        (:meth:`_join_teacher_sampling`); records of a task with tools are refused there.

        Returns ``{"records", "computed", "cached"}``: records given, distinct prompts sampled now, the
        rest (found in the cache, or repeats).
        """
        if batch_size < 1:
            raise RSTGSettingError(
                f"teacher_cache's batch_size (prompts per teacher generate call) must be >= 1, got {batch_size}"
            )
        self.configure_model()
        if self.teacher is None:
            raise RSTGSettingError("teacher statistics need guidance: true and a teacher")
        # a prompt repeated in the data is sampled once: the count joined below is of distinct prompts
        pending = {k: r for r in records if (k := self.teacher_key(r)) not in self.teacher_cache}
        todo, keys = list(pending.values()), list(pending)
        self._join_teacher_sampling(todo, records[0] if records else None, batch_size)
        self._joined_teacher_calls = None  # spent here, not by teacher_info
        engine = self._teacher_engine() if todo else None
        done = 0
        for chunk in self._teacher_chunks(list(range(len(todo))), batch_size):
            self._sample_teacher_chunk(engine, todo, keys, chunk)
            done += len(chunk)
            if progress is not None:
                progress(done, len(todo))
        return {"records": len(records), "computed": len(todo), "cached": len(records) - len(todo)}

    # ----------------------------------------------------------------------------- evaluation
    def _greedy_accuracy(self, batch: list[dict[str, Any]]) -> list[float]:
        hp = self.hparams
        self.sync_sampler_weights()
        sampling = SamplingConfig(max_new_tokens=hp.val_max_new_tokens or hp.max_new_tokens, do_sample=False)
        with self.student_generation() as synced:
            self._agree_on_batch(batch, synced, "an evaluation batch")
            _, scores, _, _ = self._sample(self.engine, batch, 1, sampling, synced_gpus=synced)
        # An unverifiable answer is not a correct one.
        return [0.0 if math.isnan(s) else s for s in scores]

    def validation_step(self, batch: list[dict[str, Any]], batch_idx: int) -> None:
        scores = self._greedy_accuracy(batch)
        self.val_accuracy.update(torch.tensor(scores, device=self.device))
        self.log("val/accuracy", self.val_accuracy, prog_bar=True, batch_size=len(batch))

    def test_step(self, batch: list[dict[str, Any]], batch_idx: int) -> None:
        scores = self._greedy_accuracy(batch)
        self.log("test/accuracy", float(sum(scores) / len(scores)), batch_size=len(batch), sync_dist=True)

    # ----------------------------------------------------------------------------- plumbing
    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        state = checkpoint.get("state_dict", {})
        for key in [k for k in state if k.startswith(("teacher.", "ref_model."))]:
            del state[key]
        if has_adapters(self.model):
            keep_trainable_state(self.model, state, prefix="model.")
        self.rng_resume.save(checkpoint, self.global_rank, self._trainer)
        checkpoint[SAMPLING_SEED_KEY] = self.effective_sampling_seed
        # Checkpoints hold no logged metrics, yet the epoch a resume restores can still have its
        # plateau step to take (a checkpoint saved at validation end precedes on_train_epoch_end).
        plateau = {}
        for config in self._plateau_configs():
            monitor = self._plateau_monitor(config)
            value = self._monitored_value(monitor)
            if value is not None:
                plateau[monitor] = value
        if plateau:
            checkpoint[PLATEAU_METRICS_KEY] = plateau

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self.rng_resume.load(checkpoint, self.global_rank)
        self._loading_checkpoint = True  # Lightning loads its state_dict next (load_state_dict)
        if self.model is not None and has_adapters(self.model):
            # A run from before all-linear left a multimodal model's towers out: their untrained
            # adapters leave its optimizer state as they leave its weights (check_adapter_checkpoint).
            fit_optimizer_states(self.model, checkpoint, "model.")
        if SAMPLING_SEED_KEY in checkpoint:
            self._sampling_seed = int(checkpoint[SAMPLING_SEED_KEY])
        self._resumed_plateau_metrics = {k: float(v) for k, v in checkpoint.get(PLATEAU_METRICS_KEY, {}).items()}

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
        # Sampling has its own seeds; anything else random (a user's verifier, a custom sampler)
        # continues the saved global streams.
        self.rng_resume.restore_pending(self._trainer)

    def _plateau_configs(self) -> list[Any]:
        trainer = self._trainer
        configs = trainer.lr_scheduler_configs if trainer is not None else []
        return [c for c in configs if isinstance(c.scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau)]

    @staticmethod
    def _plateau_monitor(config: Any) -> str | None:
        # Lightning drops `monitor` from the config of a manually optimised module; the CLI's
        # ReduceLROnPlateau keeps it on the scheduler.
        return config.monitor or getattr(config.scheduler, "monitor", None)

    def _restarting(self) -> bool:
        fit_loop = getattr(self._trainer, "fit_loop", None)
        return bool(getattr(fit_loop, "restarting", False))

    def _monitored_value(self, monitor: str | None) -> float | None:
        """``monitor``'s latest value: logged in this run, else, while the fit loop restarts, the
        one the checkpoint saved (what the run that wrote it would have stepped with)."""
        if not monitor:
            return None
        value = self._trainer.callback_metrics.get(monitor)
        if value is None and self._restarting():
            value = self._resumed_plateau_metrics.get(monitor)
        return self._rank_mean(None if value is None else float(value))

    def _rank_mean(self, local: float | None) -> float | None:
        """``local`` averaged over the ranks, ``None`` everywhere if a rank has none.

        The ``train/*`` metrics are each rank's own (its prompts' rewards): a plateau scheduler
        that stepped with them lowered the learning rate on some ranks only, and the DDP replicas
        drifted apart without an error. Every rank steps its schedulers at the same points, so all
        join this all-reduce; a NaN (nothing verified on a rank) is left out of the mean.
        """
        if self._world_size() <= 1:
            return local
        finite = local is not None and math.isfinite(local)
        present, counted, total = self._global_counts(
            [float(local is not None), float(finite), local if finite else 0.0]
        )
        if present < self._world_size():
            return None
        return total / counted if counted else float("nan")

    def _step_schedulers(self, interval: str) -> None:
        """Step the learning-rate schedulers whose config says ``interval`` (``step``: after every
        ``frequency``-th optimizer update; ``epoch``: after every ``frequency``-th epoch), as
        Lightning does for automatically optimised modules; a ``ReduceLROnPlateau`` gets its
        ``monitor`` metric."""
        trainer = self._trainer
        for config in trainer.lr_scheduler_configs if trainer is not None else []:
            if config.interval != interval:
                continue
            count = self.global_step if interval == "step" else self.current_epoch + 1
            if count % max(config.frequency, 1):
                continue
            if isinstance(config.scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau):
                monitor = self._plateau_monitor(config)
                value = self._monitored_value(monitor)
                if value is None:
                    if self._restarting():
                        # As Lightning's loop: a checkpoint without the value (written before
                        # RSTG saved it) cannot tell what the plateau step would have seen.
                        continue
                    if getattr(config, "strict", True):
                        raise LightningAgentsError(
                            f"lr_scheduler: ReduceLROnPlateau monitors {monitor!r}, which RSTG has not logged by "
                            f"this {interval}; it logs {sorted(trainer.callback_metrics)} (val/accuracy after "
                            "validation)"
                        )
                    rank_zero_warn(
                        f"ReduceLROnPlateau monitors {monitor!r}, which RSTG has not logged by this {interval}; "
                        "strict is False, so the learning rate is not updated",
                        category=RuntimeWarning,
                    )
                    continue
                config.scheduler.step(value)
            else:
                config.scheduler.step()

    def on_train_epoch_end(self) -> None:
        self._step_schedulers("epoch")

    def configure_optimizers(self) -> Any:
        """AdamW over the student's parameters."""
        self.configure_model()
        params = [p for p in self.model.parameters() if p.requires_grad]
        check_adamw_weights(params, self._trainer, "RSTGModule")
        return torch.optim.AdamW(params, lr=self.hparams.lr, weight_decay=self.hparams.weight_decay)


def _sampler_dtype(dtype: str, teacher_dtype: str | None) -> str:
    # fp32 master weights train; the sampler runs in half precision (the gap is logged and corrected).
    if dtype in ("float32", "fp32"):
        return teacher_dtype if teacher_dtype not in (None, "float32", "fp32") else "bfloat16"
    return dtype


def _episode_answer(out: GenerationOutput, messages: list[dict[str, Any]], rows: list[int]) -> dict[str, Any]:
    """A teacher episode as an SFT target: its token stream and which tokens the teacher produced; an
    episode laid out in several rows (one per user turn) gives each row's under ``rows``."""
    laid = []
    for row in rows:
        n = int(out.completion_mask[row].sum())
        laid.append(
            {
                "prompt_ids": out.prompt_ids[row][out.prompt_mask[row].bool()].tolist(),
                "ids": out.completion_ids[row, :n].tolist(),
                "mask": out.loss_mask[row, :n].tolist() if out.loss_mask is not None else [1] * n,
            }
        )
    return {"messages": messages, **laid[0]} if len(laid) == 1 else {"messages": messages, "rows": laid}


def _rows_of_episodes(episodes: int, agent) -> list[list[int]]:
    """The rows of ``out`` that lay out each episode (an ``AgentBatch``'s ``row_episode``; without
    one, or with no agent batch, row ``e`` is episode ``e``)."""
    row_episode = getattr(agent, "row_episode", None)
    if row_episode is None:
        return [[e] for e in range(episodes)]
    rows: list[list[int]] = [[] for _ in range(episodes)]
    for r, e in enumerate(row_episode):
        rows[e].append(r)
    return rows


def _mixed_tasks(records: list[dict[str, Any]], tasks: dict[str | None, Any], where: str) -> RSTGSettingError:
    """The error for ``records`` (of ``where``) that mix a task with tools (``tasks``' values not
    ``None``) with other records: each task named, with its first record's number and id."""
    first: dict[str | None, tuple[int, Any]] = {}
    for index, record in enumerate(records, start=1):
        first.setdefault(record.get("task"), (index, record.get("id")))
    named = ", ".join(f"{path or 'no task'} (first: record {i}, id {rid!r})" for path, (i, rid) in first.items())
    tooled = ", ".join(str(path) for path, task in tasks.items() if task is not None)
    return RSTGSettingError(
        f"{where} mixes records of {named}: episodes of a task with tools ({tooled}) cannot share a batch "
        "with other records, and a data file that mixes them gives the ranks batches of different kinds; "
        "use one task with tools per run (a data file of its records only)"
    )


def _backend_device_types() -> set[str] | None:
    """The device types the default process group's backend takes tensors on (``nccl``: cuda only;
    ``cpu:gloo,cuda:nccl``: both); ``None`` for a backend torch does not describe."""
    backend = str(torch.distributed.get_backend())
    if ":" in backend:
        return {part.split(":", 1)[0] for part in backend.split(",")}
    types = getattr(torch.distributed.Backend, "backend_capability", {}).get(backend.lower())
    return None if types is None else set(types)


def disable_dropout(model: torch.nn.Module) -> None:
    """Set every dropout probability of ``model`` to 0, so that train mode (needed for gradient
    checkpointing) computes the same log-probs as the sampler's eval mode."""
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
    config = getattr(model, "config", None)
    for name in ("attention_dropout", "hidden_dropout", "dropout", "resid_pdrop", "embd_pdrop", "attn_pdrop"):
        if config is not None and isinstance(getattr(config, name, None), float):
            setattr(config, name, 0.0)
