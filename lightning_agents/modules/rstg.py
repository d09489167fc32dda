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

from pathlib import Path
from typing import Any, Literal

import lightning as L
import torch
from torchmetrics import MeanMetric

from lightning_agents.models import DType, load_model_and_tokenizer
from lightning_agents.modules import rstg_loss as F
from lightning_agents.modules.rstg_cache import TeacherCache, teacher_cache_key
from lightning_agents.rewards.registry import RewardScorer
from lightning_agents.rollout.hf_engine import HFGenerationEngine, SamplingConfig

__all__ = ["RSTGModule", "check_same_vocabulary"]


def check_same_vocabulary(student_tokenizer, teacher_tokenizer, teacher_name: str = "teacher") -> None:
    """Raise ``ValueError`` unless both tokenizers map every token to the same id.

    Token-level distillation compares ``log pi_T(y_t)`` with ``log pi_S(y_t)`` for the same token
    id, which is meaningless across vocabularies.
    """
    sv, tv = student_tokenizer.get_vocab(), teacher_tokenizer.get_vocab()
    if sv == tv:
        return
    missing = sorted(set(sv) - set(tv))[:5]
    moved = sorted(t for t in set(sv) & set(tv) if sv[t] != tv[t])[:5]
    raise ValueError(
        f"teacher {teacher_name!r} has a different vocabulary from the student ({len(tv)} vs {len(sv)} tokens; "
        f"student tokens missing in the teacher: {missing}; tokens with different ids: {moved}). "
        "RSTG distils token by token, so the teacher must share the student's tokenizer "
        "(e.g. two sizes of the same model family)."
    )


def _position_ids(attention_mask: torch.Tensor) -> torch.Tensor:
    # Left-padded rows: positions must count real tokens only, as generate() did while sampling.
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)


def completion_logprobs(model, prompt_ids, prompt_mask, completion_ids, completion_mask,
                        temperature: float = 1.0, with_entropy: bool = False):
    """Log-probs (and optionally entropies) of ``completion_ids`` under ``model`` for one micro-batch.

    Only the ``T + 1`` logit rows that predict completion tokens are materialised
    (``logits_to_keep``), never the prompt's.
    """
    ids = torch.cat([prompt_ids, completion_ids], dim=1)
    mask = torch.cat([prompt_mask, completion_mask], dim=1)
    t = completion_ids.shape[1]
    out = model(input_ids=ids, attention_mask=mask, position_ids=_position_ids(mask), use_cache=False,
                logits_to_keep=t + 1)
    logits = out.logits[:, -(t + 1):-1].float() / temperature
    logp_all = torch.log_softmax(logits, dim=-1)
    logp = logp_all.gather(-1, completion_ids.unsqueeze(-1)).squeeze(-1)
    entropy = -(logp_all.exp() * logp_all).sum(-1) if with_entropy else None
    return logp, entropy


class RSTGModule(L.LightningModule):
    """On-policy RL with verifiable rewards (GRPO) plus selective teacher guidance (RSTG).

    Per step: sample ``num_generations`` completions per prompt, score them, compute group
    advantages, find zero-variance groups, run the teacher only where guidance applies, build the
    hybrid advantages, select tokens, and optimise the clipped surrogate (plus teacher SFT).
    Optimisation is manual: each micro-batch is forwarded, its loss back-propagated and its
    activations freed before the next, so no more than one micro-batch of full-vocabulary logits
    exists at a time. The LightningCLI ``optimizer:`` section overrides the default AdamW.

    Args:
        model: student policy (path, hub id or ``embedded:student``).
        teacher: frozen teacher with the student's tokenizer (``None`` only when guidance is off).
        reference: frozen reference model for the KL penalty (used when ``beta_kl > 0``;
            defaults to a copy of the initial student).
        dtype: weight dtype for all models.
        guidance: enable teacher guidance; ``False`` is exactly GRPO.
        distill_scope: ``negative`` (only all-wrong zero-variance groups, RSTG) or ``all``
            (every prompt, naive OPD).
        token_selection: ``soft_or`` (top ``token_fraction`` of each group by the soft-OR of
            entropy and ``|A_opd|``) or ``all`` (every completion token).
        token_fraction: fraction of a group's tokens that get the distillation term.
        sample_weight: ``teacher_pass_rate`` (the teacher's mean@k on the prompt) or ``none`` (1).
        teacher_sft: add NLL on the shortest correct teacher answer for negative groups.
        teacher_k: teacher samples per prompt for its pass rate (mean@k).
        teacher_cache: JSONL file caching teacher pass rates and answers (default:
            ``<default_root_dir>/rstg_teacher_cache.jsonl``).
        beta_start: initial guidance weight beta_t.
        beta_slope: beta change per optimisation step (negative anneals).
        beta_floor: lower bound of beta_t.
        num_generations: G, samples per prompt.
        max_new_tokens: completion length limit.
        temperature: sampling temperature (the policy ratio uses the same temperature).
        top_p: nucleus sampling mass.
        eps_low: lower clip range of the surrogate.
        eps_high: upper clip range (clip-higher when larger than ``eps_low``).
        beta_kl: weight of the k3 KL penalty to the reference (0 disables and loads no reference).
        loss_aggregation: ``sequence_mean`` (GRPO), ``token_mean`` (DAPO) or ``constant`` (Dr. GRPO).
        advantage_scale: ``group``, ``batch`` or ``none`` std scaling of GRPO advantages.
        success_threshold: reward at or above which a sample counts as correct.
        mask_truncated: drop completions that hit ``max_new_tokens`` from the policy loss.
        micro_batch_size: rows per forward pass.
        verifier: default reward function (class path or ``{class_path, init_args}``); records
            may name their own.
        reward_workers: threads scoring completions in parallel.
        lr: AdamW learning rate (unless the config has an ``optimizer:`` section).
        weight_decay: AdamW weight decay.
        max_grad_norm: gradient-norm clip (0 disables).
        log_samples_every_n_steps: write sample completions to TensorBoard as text every N steps
            (0 disables).
        val_max_new_tokens: completion limit for validation (default ``max_new_tokens``).
        gradient_checkpointing: recompute student activations in backward.
        trust_remote_code: allow model repositories with custom code.
    """

    def __init__(
        self,
        model: str = "embedded:student",
        teacher: str | None = "embedded:teacher",
        reference: str | None = None,
        dtype: DType = "float32",
        guidance: bool = True,
        distill_scope: Literal["negative", "all"] = "negative",
        token_selection: Literal["soft_or", "all"] = "soft_or",
        token_fraction: float = 0.2,
        sample_weight: Literal["teacher_pass_rate", "none"] = "teacher_pass_rate",
        teacher_sft: bool = True,
        teacher_k: int = 8,
        teacher_cache: str | None = None,
        beta_start: float = 5e-3,
        beta_slope: float = -5e-5,
        beta_floor: float = 1e-3,
        num_generations: int = 8,
        max_new_tokens: int = 64,
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
    ) -> None:
        super().__init__()
        if distill_scope not in ("negative", "all"):
            raise ValueError(f"distill_scope must be 'negative' or 'all', got {distill_scope!r}")
        if token_selection not in ("soft_or", "all"):
            raise ValueError(f"token_selection must be 'soft_or' or 'all', got {token_selection!r}")
        if sample_weight not in ("teacher_pass_rate", "none"):
            raise ValueError(f"sample_weight must be 'teacher_pass_rate' or 'none', got {sample_weight!r}")
        if loss_aggregation not in F.AGGREGATIONS:
            raise ValueError(f"loss_aggregation must be one of {F.AGGREGATIONS}, got {loss_aggregation!r}")
        if num_generations < 2:
            raise ValueError("num_generations must be >= 2: group advantages need at least two samples")
        if guidance and teacher is None:
            raise ValueError("guidance=True needs a `teacher`; set guidance: false for plain GRPO")
        if micro_batch_size < 1 or temperature <= 0:
            raise ValueError("micro_batch_size must be >= 1 and temperature > 0")
        self.save_hyperparameters()
        self.automatic_optimization = False
        # Frozen teacher/reference weights are not saved in checkpoints (they reload from their ids).
        self.strict_loading = False
        self.model, self.tokenizer = load_model_and_tokenizer(
            model, dtype=dtype, gradient_checkpointing=gradient_checkpointing, trust_remote_code=trust_remote_code)
        self.teacher = None
        if guidance:
            self.teacher, teacher_tok = load_model_and_tokenizer(teacher, dtype=dtype, trust_remote_code=trust_remote_code)
            check_same_vocabulary(self.tokenizer, teacher_tok, teacher)
            self.teacher.requires_grad_(False).eval()
        self.ref_model = None
        if beta_kl > 0:
            self.ref_model, _ = load_model_and_tokenizer(reference or model, dtype=dtype, trust_remote_code=trust_remote_code)
            self.ref_model.requires_grad_(False).eval()
        self.engine = HFGenerationEngine(self.model, self.tokenizer)
        self.scorer = RewardScorer(verifier, max_workers=reward_workers)
        self._cache: TeacherCache | None = None
        self.val_accuracy = MeanMetric()

    # ----------------------------------------------------------------------------- helpers
    @property
    def sampling(self) -> SamplingConfig:
        """Sampling settings of training rollouts."""
        hp = self.hparams
        return SamplingConfig(max_new_tokens=hp.max_new_tokens, temperature=hp.temperature, top_p=hp.top_p)

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

    def teacher_info(self, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Teacher pass rate (mean@k) and shortest correct answer per record, from the cache or
        computed now (k teacher samples each, verified) and cached."""
        hp = self.hparams
        keys = [teacher_cache_key(hp.teacher, r["prompt"], hp.teacher_k, hp.max_new_tokens) for r in records]
        missing = [i for i, k in enumerate(keys) if k not in self.teacher_cache]
        if missing:
            engine = HFGenerationEngine(self.teacher, self.tokenizer)
            out = engine.generate([records[i]["prompt"] for i in missing], num_samples=hp.teacher_k, sampling=self.sampling)
            refs = [records[i]["reference"] for i in missing for _ in range(hp.teacher_k)]
            specs = [records[i].get("verifier") for i in missing for _ in range(hp.teacher_k)]
            scores = self.scorer.score(out.texts, refs, specs).rewards
            for j, i in enumerate(missing):
                rows = range(j * hp.teacher_k, (j + 1) * hp.teacher_k)
                correct = [out.texts[r] for r in rows if scores[r] >= hp.success_threshold and not bool(out.truncated[r])]
                rate = sum(scores[r] >= hp.success_threshold for r in rows) / hp.teacher_k
                self.teacher_cache.put(keys[i], rate, min(correct, key=len) if correct else None, hp.teacher_k)
        return [self.teacher_cache.get(k) for k in keys]

    @torch.no_grad()
    def _frozen_logprobs(self, model, out, rows: torch.Tensor) -> torch.Tensor:
        """Log-probs of the sampled tokens under a frozen model, for ``rows`` only, micro-batched."""
        result = torch.zeros_like(out.logprobs)
        index = rows.nonzero().flatten()
        mb = self.hparams.micro_batch_size
        for start in range(0, len(index), mb):
            idx = index[start:start + mb]
            logp, _ = completion_logprobs(
                model, out.prompt_ids[idx].to(self.device), out.prompt_mask[idx].to(self.device),
                out.completion_ids[idx].to(self.device), out.completion_mask[idx].to(self.device),
                self.hparams.temperature)
            result[idx] = logp.float().cpu()
        return result * out.completion_mask

    def _sft_loss_and_backward(self, prompts: list, answers: list[str], weight: float) -> float:
        """Teacher-SFT NLL (mean over answer tokens) times ``weight``; back-propagated here."""
        eos = self.tokenizer.eos_token_id
        rows = []
        for prompt, answer in zip(prompts, answers):
            p = self.tokenizer(self.engine.render(prompt), add_special_tokens=False)["input_ids"]
            a = self.tokenizer(answer, add_special_tokens=False)["input_ids"] + [eos]
            rows.append((p, a))
        total_tokens = sum(len(a) for _, a in rows)
        pad = self.tokenizer.pad_token_id
        value = 0.0
        mb = self.hparams.micro_batch_size
        for start in range(0, len(rows), mb):
            chunk = rows[start:start + mb]
            width = max(len(p) + len(a) for p, a in chunk)
            ids = torch.full((len(chunk), width), pad, dtype=torch.long)
            labels = torch.full((len(chunk), width), -100, dtype=torch.long)
            mask = torch.zeros((len(chunk), width), dtype=torch.long)
            for r, (p, a) in enumerate(chunk):
                seq = p + a
                ids[r, :len(seq)] = torch.tensor(seq)
                labels[r, len(p):len(seq)] = torch.tensor(a)
                mask[r, :len(seq)] = 1
            ids, labels, mask = ids.to(self.device), labels.to(self.device), mask.to(self.device)
            logits = self.model(input_ids=ids, attention_mask=mask, use_cache=False).logits[:, :-1].float()
            nll = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1),
                                                    ignore_index=-100, reduction="sum")
            loss = weight * nll / total_tokens
            self.manual_backward(loss)
            value += float(nll.detach()) / total_tokens
        return value

    # ----------------------------------------------------------------------------- training
    def compute_token_advantages(self, out, rewards: torch.Tensor, records: list[dict[str, Any]]):
        """GRPO advantages, plus the guidance term where it applies; returns ``(adv [B, T], info)``."""
        hp = self.hparams
        g = hp.num_generations
        mask = out.completion_mask.float()
        stats = F.group_stats(rewards, g, hp.success_threshold)
        adv = F.group_advantages(rewards, g, hp.advantage_scale)
        token_adv = adv[:, None].expand_as(mask).clone() * mask
        info: dict[str, Any] = {"stats": stats, "distilled_tokens": 0.0, "opd_rows": torch.zeros(len(rewards), dtype=torch.bool)}
        if not hp.guidance:
            return token_adv, info
        groups = stats.negative if hp.distill_scope == "negative" else torch.ones_like(stats.negative)
        rows = stats.rows(groups, g)
        info["opd_rows"] = rows
        if not rows.any():
            return token_adv, info
        beta = self.beta()
        teacher_logp = self._frozen_logprobs(self.teacher, out, rows)
        row_mask = mask * rows[:, None]
        a_opd = F.opd_advantages(teacher_logp, out.logprobs, row_mask)
        if hp.token_selection == "soft_or":
            entropy = out.entropies if out.entropies is not None else torch.zeros_like(mask)
            scores = F.soft_or_scores(entropy, a_opd, row_mask, g)
            selected = F.select_top_fraction(scores, row_mask, g, hp.token_fraction, groups=groups)
        else:
            selected = row_mask.bool()
        weights = torch.ones(len(rewards))
        prompt_idx = [i for i in range(len(records)) if bool(groups[i])]
        if hp.sample_weight == "teacher_pass_rate" or hp.teacher_sft:
            teacher = dict(zip(prompt_idx, self.teacher_info([records[i] for i in prompt_idx])))
            info["teacher"] = teacher
            if hp.sample_weight == "teacher_pass_rate":
                for i, entry in teacher.items():
                    weights[i * g:(i + 1) * g] = entry["pass_rate"]
        token_adv = token_adv + beta * weights[:, None] * a_opd * selected
        sel_mask = selected.float()
        info.update(
            beta=beta, selected=selected, a_opd=a_opd, weights=weights,
            distilled_tokens=float(sel_mask.sum()) / max(float(mask.sum()), 1.0),
            opd_adv_mean=float((a_opd * row_mask).sum() / row_mask.sum().clamp(min=1)),
            opd_adv_pos_frac=float(((a_opd > 0).float() * row_mask).sum() / row_mask.sum().clamp(min=1)),
            teacher_kl=float((-a_opd * row_mask).sum() / row_mask.sum().clamp(min=1)),
        )
        return token_adv, info

    def training_step(self, batch: list[dict[str, Any]], batch_idx: int) -> torch.Tensor:
        hp = self.hparams
        opt = self.optimizers()
        g = hp.num_generations
        out = self.engine.generate([r["prompt"] for r in batch], num_samples=g, sampling=self.sampling)
        refs = [r["reference"] for r in batch for _ in range(g)]
        specs = [r.get("verifier") for r in batch for _ in range(g)]
        scored = self.scorer.score(out.texts, refs, specs)
        rewards = torch.tensor(scored.rewards, dtype=torch.float32)
        token_adv, info = self.compute_token_advantages(out, rewards, batch)
        mask = out.completion_mask.float()
        if hp.mask_truncated:
            mask = mask * (~out.truncated).float()[:, None]
        ref_logp = self._frozen_logprobs(self.ref_model, out, torch.ones(len(rewards), dtype=torch.bool)) if self.ref_model is not None else None
        n_rows, n_tokens = len(rewards), float(mask.sum())
        loss_total, clip_low, clip_high, kl_total, ent_total = 0.0, 0.0, 0.0, 0.0, 0.0
        for start in range(0, n_rows, hp.micro_batch_size):
            sl = slice(start, start + hp.micro_batch_size)
            m = mask[sl].to(self.device)
            logp, entropy = completion_logprobs(
                self.model, out.prompt_ids[sl].to(self.device), out.prompt_mask[sl].to(self.device),
                out.completion_ids[sl].to(self.device), out.completion_mask[sl].to(self.device), hp.temperature,
                with_entropy=False)
            per_tok, cl, ch = F.clipped_surrogate(logp, out.logprobs[sl].to(self.device), token_adv[sl].to(self.device),
                                                  hp.eps_low, hp.eps_high)
            if ref_logp is not None:
                kl = F.kl_to_reference(logp, ref_logp[sl].to(self.device))
                per_tok = per_tok + hp.beta_kl * kl
                kl_total += float((kl.detach() * m).sum())
            loss = F.aggregate(per_tok, m, hp.loss_aggregation, num_sequences=n_rows, num_tokens=n_tokens,
                               max_length=hp.max_new_tokens)
            self.manual_backward(loss)
            loss_total += float(loss.detach())
            clip_low += float((cl.float() * m).sum())
            clip_high += float((ch.float() * m).sum())
        sft_loss = 0.0
        teacher = info.get("teacher") or {}
        if hp.guidance and hp.teacher_sft and teacher:
            neg = info["stats"].negative
            pairs = [(batch[i]["prompt"], e["answer"]) for i, e in teacher.items() if e["answer"] and bool(neg[i])]
            if pairs:
                sft_loss = self._sft_loss_and_backward([p for p, _ in pairs], [a for _, a in pairs], info["beta"])
        if hp.max_grad_norm > 0:
            self.clip_gradients(opt, gradient_clip_val=hp.max_grad_norm, gradient_clip_algorithm="norm")
        opt.step()
        opt.zero_grad(set_to_none=True)
        sched = self.lr_schedulers()
        if sched is not None:
            sched.step()
        stats = info["stats"]
        denom = max(n_tokens, 1.0)
        metrics = {
            "train/loss": loss_total + (info.get("beta", 0.0) * sft_loss),
            "train/policy_loss": loss_total,
            "train/reward_mean": float(rewards.mean()),
            "train/reward_std": float(rewards.std()) if len(rewards) > 1 else 0.0,
            "train/frac_positive_zero_var": float(stats.positive.float().mean()),
            "train/frac_negative_zero_var": float(stats.negative.float().mean()),
            "train/frac_tokens_distilled": info["distilled_tokens"],
            "train/entropy": float((out.entropies * out.completion_mask).sum() / max(out.num_completion_tokens, 1)) if out.entropies is not None else 0.0,
            "train/clip_low_frac": clip_low / denom,
            "train/clip_high_frac": clip_high / denom,
            "train/completion_length": float(out.completion_mask.sum(1).float().mean()),
            "train/truncated_frac": float(out.truncated.float().mean()),
            "train/verifier_errors": float(scored.num_errors),
            "train/sft_loss": sft_loss,
            "train/beta": info.get("beta", self.beta() if hp.guidance else 0.0),
        }
        if "opd_adv_mean" in info:
            metrics.update({"train/opd_adv_mean": info["opd_adv_mean"], "train/opd_adv_pos_frac": info["opd_adv_pos_frac"],
                            "train/teacher_kl": info["teacher_kl"]})
        if ref_logp is not None:
            metrics["train/kl_ref"] = kl_total / denom
        self.log_dict(metrics, on_step=True, on_epoch=False, prog_bar=False, batch_size=len(batch))
        self.log("reward", metrics["train/reward_mean"], prog_bar=True, batch_size=len(batch), logger=False)
        self._log_samples(batch, out.texts, scored.rewards)
        return torch.tensor(metrics["train/loss"])

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
            lines.append(f"**prompt** {question}\n\n**reference** {rec['reference'][-200:]}")
            for j in range(min(g, 2)):
                lines.append(f"- reward {rewards[i * g + j]:.2f}: `{texts[i * g + j][:400]}`")
        experiment.add_text("train/samples", "\n\n".join(lines), global_step=self.global_step)

    # ----------------------------------------------------------------------------- evaluation
    def _greedy_accuracy(self, batch: list[dict[str, Any]]) -> list[float]:
        hp = self.hparams
        sampling = SamplingConfig(max_new_tokens=hp.val_max_new_tokens or hp.max_new_tokens, do_sample=False)
        out = self.engine.generate([r["prompt"] for r in batch], num_samples=1, sampling=sampling)
        return self.scorer.score(out.texts, [r["reference"] for r in batch], [r.get("verifier") for r in batch]).rewards

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

    def configure_optimizers(self) -> Any:
        """AdamW over the student's parameters."""
        params = [p for p in self.model.parameters() if p.requires_grad]
        return torch.optim.AdamW(params, lr=self.hparams.lr, weight_decay=self.hparams.weight_decay)
