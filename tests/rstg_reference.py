"""An independent reference for RSTG, written from its definition (DESIGN.md, "RSTG"), not from
``rstg_loss.py``, used by ``tests/modules/test_rstg_reference.py`` (embedded models, float64) and
``tests/test_real_model_rstg.py`` (SmolLM2-135M-Instruct).

The reference forwards every sample alone, without padding, through the plain transformers model at
the sampling temperature, and spells out the definition with Python loops: GRPO advantages per group
(unbiased std + 1e-4, unverifiable samples left out), guidance only on all-wrong zero-variance
groups, ``A_opd = log pi_T - log pi_S`` on the sampled tokens, the soft-OR of min-max normalised
entropy and ``|A_opd|`` (with the divergence floor), the top ``ceil(fraction * n)`` tokens of each
group, the teacher's pass rate as weight, the k3 KL to the reference, truncated importance weights,
the loss aggregation, and ``beta`` times the mean NLL of the teacher's answer plus the turn end on
negative groups. :func:`compare` runs the module's own ``collect`` + ``learn`` on the same batch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from lightning_agents.rewards.registry import ScoreResult

# Group 0 all wrong, 1 mixed, 2 all right, 3 all wrong with one sample that could not be verified.
REWARDS = [0, 0, 0, 0, 1, 0, 0, 1, 1, 1, 1, 1, 0, math.nan, 0, 0]
PASS_RATES = [0.5, 0.25, 1.0, 0.75]
G = 4
#: RSTGModule settings both reference tests use (guidance at a fixed beta, a KL term, no clipping of
#: the gradient, a sampling temperature that is not 1).
MODULE_SETTINGS = dict(
    num_generations=G,
    temperature=0.7,
    sampling_seed=0,
    beta_start=0.5,
    beta_floor=0.5,
    beta_kl=0.05,
    max_grad_norm=0.0,
)


@dataclass
class Comparison:
    """How far the module is from the reference on one batch."""

    negative_module: list[bool]
    negative_reference: list[bool]
    max_advantage_diff: float
    same_selection: bool
    selected: int
    gradient_rel_diff: float
    gradient_norm: float


def module_step(module, records, answers):
    """Pre-fill the teacher cache, force ``REWARDS``, run ``collect`` and ``learn``; returns the
    rollout and the gradient ``learn`` stepped with (by name)."""
    for rec, rate, answer in zip(records, PASS_RATES, answers):
        module.teacher_cache.put(module.teacher_key(rec), rate, answer, 4)
    module.scorer.score = lambda texts, refs, specs: ScoreResult(list(REWARDS), 1)
    rollout = module.collect(records)
    grads: dict[str, torch.Tensor] = {}

    class _Snapshot:
        def step(self):
            grads.update({n: p.grad.clone() for n, p in module.model.named_parameters() if p.grad is not None})

        def zero_grad(self, set_to_none=True):
            module.model.zero_grad(set_to_none=True)

    module.optimizers = lambda: _Snapshot()
    module.manual_backward = lambda loss: loss.backward()
    module.learn([rollout])
    return rollout, grads


def _dist(model, prompt, completion, temperature, grad=False):
    """Log-prob of each sampled token and the entropy of its distribution, at the sampling temperature."""
    with torch.set_grad_enabled(grad):
        logits = model(torch.tensor([prompt + completion])).logits[0, len(prompt) - 1 : -1]
        logp = torch.log_softmax(logits.double() / temperature, -1)
        return logp[torch.arange(len(completion)), torch.tensor(completion)], -(logp.exp() * logp).sum(-1)


def _advantages(hp, out, student, teacher, rows):
    adv, selected, negative = [], [], []
    beta = max(hp.beta_floor, hp.beta_start)
    for g in range(len(REWARDS) // G):
        rewards = REWARDS[g * G : (g + 1) * G]
        verified = [r for r in rewards if not math.isnan(r)]
        mean = sum(verified) / len(verified)
        std = math.sqrt(sum((r - mean) ** 2 for r in verified) / (len(verified) - 1))
        group_adv = [
            torch.full(
                (len(rows[g * G + j][1]),), 0.0 if math.isnan(r) else (r - mean) / (std + 1e-4), dtype=torch.float64
            )
            for j, r in enumerate(rewards)
        ]
        group_sel = [torch.zeros(len(rows[g * G + j][1]), dtype=torch.bool) for j in range(G)]
        negative.append(len(verified) >= 2 and all(r < 1 for r in verified))
        if negative[-1]:
            idx = [g * G + j for j, r in enumerate(rewards) if not math.isnan(r)]
            sampler = {i: out.logprobs[i, : len(rows[i][1])].double() for i in idx}
            a_opd = {i: _dist(teacher, *rows[i], hp.temperature)[0] - sampler[i] for i in idx}
            ent = {i: _dist(student, *rows[i], hp.temperature)[1] for i in idx}
            h_all = torch.cat(list(ent.values()))
            d_all = torch.cat([a.abs() for a in a_opd.values()])
            score = []
            for i in idx:
                h = (ent[i] - h_all.min()) / (h_all.max() - h_all.min())
                d = (a_opd[i].abs() - d_all.min()) / max(float(d_all.max() - d_all.min()), hp.divergence_floor)
                score += [(float(s), i, t) for t, s in enumerate(h + d - h * d)]
            for _, i, t in sorted(score, reverse=True)[: math.ceil(hp.token_fraction * len(score))]:
                group_sel[i - g * G][t] = True
            for i in idx:
                group_adv[i - g * G] += beta * PASS_RATES[g] * a_opd[i] * group_sel[i - g * G]
        adv += group_adv
        selected += group_sel
    return adv, selected, negative


def _loss(hp, out, student, ref_model, rows, adv):
    n_trained = sum(len(c) for (_, c), r in zip(rows, REWARDS) if not math.isnan(r))
    loss = 0.0
    for i, (prompt, completion) in enumerate(rows):
        if math.isnan(REWARDS[i]):
            continue
        logp, _ = _dist(student, prompt, completion, hp.temperature, grad=True)
        ratio = torch.exp(logp - logp.detach())  # one update per batch: the old policy is this one
        surrogate = -torch.min(ratio * adv[i], ratio.clamp(1 - hp.eps_low, 1 + hp.eps_high) * adv[i])
        sampler = out.logprobs[i, : len(completion)].double()
        weight = torch.exp(logp.detach() - sampler).clamp(max=hp.importance_sampling_cap)
        ref_logp, _ = _dist(ref_model, prompt, completion, hp.temperature)
        k3 = torch.exp(ref_logp - logp) - (ref_logp - logp) - 1
        per_token = surrogate * weight + hp.beta_kl * k3
        # GRPO: mean per sequence, then over all sequences (unverified ones count, with no tokens);
        # DAPO: over the step's trained tokens; Dr. GRPO: over sequences x max_new_tokens.
        if hp.loss_aggregation == "sequence_mean":
            loss = loss + per_token.sum() / len(completion) / len(REWARDS)
        elif hp.loss_aggregation == "token_mean":
            loss = loss + per_token.sum() / n_trained
        else:
            loss = loss + per_token.sum() / (len(REWARDS) * hp.max_new_tokens)
    return loss


def _sft(hp, tok, student, records, answers, negative):
    turn_end = tok.convert_tokens_to_ids("<|im_end|>") if "<|im_end|>" in tok.get_vocab() else tok.eos_token_id
    nll, n_answer = 0.0, 0
    for g, is_negative in enumerate(negative):
        if not is_negative:
            continue
        text = tok.apply_chat_template(records[g]["prompt"], tokenize=False, add_generation_prompt=True)
        prompt = tok(text, add_special_tokens=False)["input_ids"]
        answer = tok(answers[g], add_special_tokens=False)["input_ids"] + [turn_end]
        logits = student(torch.tensor([prompt + answer])).logits[0, len(prompt) - 1 : -1].double()
        nll = nll + torch.nn.functional.cross_entropy(logits, torch.tensor(answer), reduction="sum")
        n_answer += len(answer)
    return max(hp.beta_floor, hp.beta_start) * nll / n_answer


def compare(module, student, records, answers) -> Comparison:
    """Run the module on ``records`` with forced ``REWARDS`` and compare with the reference;
    ``student`` is a fresh copy of the initial student (trainable, same dtype as the module's)."""
    rollout, grads = module_step(module, records, answers)
    hp, out, tok = module.hparams, rollout.out, module.tokenizer
    rows = [
        (
            out.prompt_ids[i][out.prompt_mask[i].bool()].tolist(),
            out.completion_ids[i][out.completion_mask[i].bool()].tolist(),
        )
        for i in range(len(REWARDS))
    ]
    rendered = tok.apply_chat_template(records[0]["prompt"], tokenize=False, add_generation_prompt=True)
    assert rows[0][0] == tok(rendered, add_special_tokens=False)["input_ids"], "prompt is not the chat template's"
    adv, selected, negative = _advantages(hp, out, student, module.teacher, rows)
    diff = max(float((rollout.token_adv[i, : len(a)].double() - a).abs().max()) for i, a in enumerate(adv))
    same = all(torch.equal(rollout.info["selected"][i, : len(s)], s) for i, s in enumerate(selected))
    loss = _loss(hp, out, student, module.ref_model, rows, adv) + _sft(hp, tok, student, records, answers, negative)
    loss.backward()
    reference = {n: p.grad for n, p in student.named_parameters() if p.grad is not None}
    assert grads.keys() == reference.keys()
    num = sum(float((grads[n].double() - reference[n].double()).pow(2).sum()) for n in grads)
    den = sum(float(reference[n].double().pow(2).sum()) for n in grads)
    return Comparison(
        rollout.info["stats"].negative.tolist(),
        negative,
        diff,
        same,
        sum(int(s.sum()) for s in selected),
        math.sqrt(num / den),
        math.sqrt(den),
    )
