"""RSTG with an episode laid out in one row per user turn (``model.rl_rows``, session 49).

The group statistics and advantages are the episodes' (G per problem, as always) and every row gets its
episode's; the guidance masks find a group's rows by a row -> group index; a row beyond the context
takes its whole episode out; an episode's rows count as one sequence of the loss, so the loss of the
rows is the one stream's of the same tokens. Single-user-turn episodes are laid out as before, bit for
bit. Before session 49 RSTG had no ``rl_rows`` and ``F.aggregate``, ``F.soft_or_scores`` and
``F.select_top_fraction`` knew only blocks of G contiguous rows.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from lightning_agents.modules import rstg_loss as F
from lightning_agents.modules.rstg import RSTGModule
from lightning_agents.tasks import CalculatorTask

G = 2
TASK_PATH = "tests.modules.test_rstg_rl_rows._AsksTwice"


class _AsksTwice(CalculatorTask):
    """The calculator with the user's two further turns after each answer."""

    def next_user_turn(self, messages, world, problem):
        asked = sum(m["role"] == "user" for m in messages)
        return [{"role": "user", "content": "And doubled?"}] if asked < 3 else None


def _module(tmp_path, **kw) -> RSTGModule:
    args = dict(
        num_generations=G,
        max_new_tokens=24,
        max_turns=6,
        teacher_k=2,
        micro_batch_size=4,
        temperature=0.9,
        teacher_cache=str(tmp_path / "cache.jsonl"),
        sampling_seed=0,
        sample_weight="none",
        teacher_sft=False,
    )
    args.update(kw)
    module = RSTGModule(**args)
    module.configure_model()
    return module


def _records(task, n):
    return [{**task.prompt_record(p), "task": TASK_PATH} for p in task.problems[:n]]


def _with_task(module, task):
    module._tasks[TASK_PATH] = task
    return module


def test_rows_share_their_episodes_reward_and_group_advantage(tmp_path):
    task = _AsksTwice(split="val", n=3)
    module = _with_task(_module(tmp_path, guidance=False, teacher=None, rl_rows="per_user_turn"), task)
    rollout = module.collect(_records(task, 3))
    ep, episodes = rollout.info["row_episode"], rollout.info["episode_rewards"]
    assert len(episodes) == 3 * G and len(ep) > len(episodes), "no episode reached a second user turn"
    assert ep.tolist() == sorted(ep.tolist()) and set(ep.tolist()) == set(range(3 * G))
    # the rewards are the episodes', each row carries its episode's
    assert torch.equal(rollout.rewards, episodes[ep])
    adv = F.group_advantages(episodes, G, "group")
    trained = rollout.loss_mask.bool()
    for r, e in enumerate(ep.tolist()):
        assert torch.all(rollout.token_adv[r][trained[r]] == adv[e]), r
    # the loss counts episodes, each over its tokens in all its rows
    tokens = torch.zeros(len(episodes)).index_add_(0, ep, rollout.loss_mask.sum(dim=1).float())
    assert torch.equal(rollout.info["sequence_tokens"].float(), tokens[ep])


def test_a_row_beyond_the_context_takes_its_whole_episode_out(tmp_path, monkeypatch):
    task = _AsksTwice(split="val", n=2)
    module = _with_task(_module(tmp_path, guidance=False, teacher=None, rl_rows="per_user_turn"), task)
    seen = {}

    def last_row_of_a_long_episode(out, records, row_episode=None):
        ep = row_episode.tolist()
        seen["episode"] = e = next(e for e in ep if ep.count(e) > 1)
        over = torch.zeros(len(ep), dtype=torch.bool)
        over[max(r for r, x in enumerate(ep) if x == e)] = True
        return over

    monkeypatch.setattr(module, "beyond_context", last_row_of_a_long_episode)
    rollout = module.collect(_records(task, 2))
    ep = rollout.info["row_episode"]
    rows = ep == seen["episode"]
    assert int(rows.sum()) > 1
    assert all(math.isnan(x) for x in rollout.rewards[rows].tolist())
    assert not any(math.isnan(x) for x in rollout.rewards[~rows].tolist())
    assert float(rollout.loss_mask[rows].sum()) == 0.0 and float(rollout.loss_mask[~rows].sum()) > 0
    assert math.isnan(float(rollout.info["episode_rewards"][seen["episode"]]))


def test_the_warning_of_a_row_beyond_the_context_names_its_episodes_record(tmp_path):
    module = _module(tmp_path, guidance=False, teacher=None, context_length=10)
    out = SimpleNamespace(
        prompt_mask=torch.ones(5, 4, dtype=torch.long),
        completion_mask=torch.tensor([[1] * 4 + [0] * 4] * 4 + [[1] * 8]),
    )
    records = [{"id": "first"}, {"id": "second"}]
    # rows 0-1 episode 0, 2 episode 1 (problem "first"), 3 episode 2, 4 episode 3 (problem "second")
    with pytest.warns(UserWarning, match=r"records \['second'\]"):
        over = module.beyond_context(out, records, torch.tensor([0, 0, 1, 2, 3]))
    assert over.tolist() == [False, False, False, False, True]


def _guided(module, out, rewards, records, row_episode=None):
    token_adv, info = module.compute_token_advantages(out, rewards, records, row_episode)
    return token_adv, info.get("selected"), info["opd_rows"]


def test_single_user_turn_episodes_keep_todays_advantages_and_guidance(tmp_path):
    """The calculator (one user turn): every setting lays out the same rows, sampled alike, with the
    same advantages and guided tokens; an identity row index changes nothing in the guidance."""
    records = [
        {**r, "reference": "-12345"}  # nobody is right: every group negative, so guidance runs
        for r in (CalculatorTask(split="val", n=2).prompt_record(p) for p in CalculatorTask(split="val", n=2).problems)
    ]
    rollouts = {}
    for rows in ("stream", "per_user_turn", "auto"):
        module = _module(tmp_path / rows, rl_rows=rows, token_fraction=0.3)
        rollouts[rows] = (module, module.collect(records))
    _, base = rollouts["stream"]
    assert "row_episode" not in base.info and bool(base.info["opd_rows"].any())
    for rows in ("per_user_turn", "auto"):
        _, other = rollouts[rows]
        assert "row_episode" not in other.info
        assert torch.equal(other.out.completion_ids, base.out.completion_ids)
        assert torch.equal(other.token_adv, base.token_adv), rows
        assert torch.equal(other.loss_mask, base.loss_mask)
    module, rollout = rollouts["stream"]
    rewards = torch.zeros(len(rollout.rewards))
    plain = _guided(module, rollout.out, rewards, records)
    indexed = _guided(module, rollout.out, rewards, records, torch.arange(len(rewards)))
    for a, b in zip(plain, indexed):
        assert torch.equal(a, b)


def _split(x: torch.Tensor, at: list[int]) -> torch.Tensor:
    """Each row of ``x`` ([E, T]) as two rows, cut at ``at[e]`` (the second right-aligned to column 0)."""
    rows = []
    for e, cut in enumerate(at):
        first, second = torch.zeros_like(x[e]), torch.zeros_like(x[e])
        first[:cut] = x[e, :cut]
        second[: x.shape[1] - cut] = x[e, cut:]
        rows += [first, second]
    return torch.stack(rows)


def _joined(x: torch.Tensor, at: list[int]) -> torch.Tensor:
    """:func:`_split`'s rows back as one row per episode."""
    t = x.shape[1]
    return torch.stack([torch.cat([x[2 * e, :cut], x[2 * e + 1, : t - cut]]) for e, cut in enumerate(at)])


def test_guidance_on_rows_selects_the_tokens_it_selects_on_the_episodes_streams():
    torch.manual_seed(0)
    episodes, width = 2 * G, 10
    entropy, a_opd = torch.rand(episodes, width), torch.randn(episodes, width)
    mask = (torch.rand(episodes, width) > 0.2).float()
    at = [3, 7, 5, 2]
    groups = torch.tensor([True, True])
    scores = F.soft_or_scores(entropy, a_opd, mask, G)
    chosen = F.select_top_fraction(scores, mask, G, 0.3, groups=groups)
    row_group = torch.arange(episodes).repeat_interleave(2) // G
    split = [_split(x, at) for x in (entropy, a_opd, mask)]
    row_scores = F.soft_or_scores(*split, G, row_group=row_group)
    row_chosen = F.select_top_fraction(row_scores, split[2], G, 0.3, groups=groups, row_group=row_group)
    assert torch.equal(_joined(row_scores, at), scores)
    assert torch.equal(_joined(row_chosen, at), chosen)
    with pytest.raises(ValueError, match="row_group names 3 rows, the tensors have 8"):
        F.soft_or_scores(*split, G, row_group=row_group[:3])


@pytest.mark.parametrize("mode", F.AGGREGATIONS)
def test_an_episodes_rows_weigh_in_the_loss_as_its_one_stream_did(mode):
    """The chosen weighting: an episode's rows are one sequence. ``sequence_mean`` divides each row's
    summed loss by its episode's tokens over all its rows and by the number of episodes, so an episode
    with more user turns weighs no more than one with fewer, as its stream did; ``token_mean`` and
    ``constant`` sum tokens, which a split does not change."""
    torch.manual_seed(1)
    per_token = torch.randn(3, 12)
    mask = torch.ones(3, 12)
    mask[0, 9:] = 0
    mask[2, 5:] = 0
    at = [4, 6, 2]
    whole = F.aggregate(per_token, mask, mode, num_sequences=3, num_tokens=float(mask.sum()), max_length=12)
    rows_mask = _split(mask, at)
    shared = mask.sum(dim=1).repeat_interleave(2)
    rows = F.aggregate(
        _split(per_token, at),
        rows_mask,
        mode,
        num_sequences=3,
        num_tokens=float(mask.sum()),
        max_length=12,
        sequence_tokens=shared,
    )
    torch.testing.assert_close(rows, whole)
    if mode == "sequence_mean":  # each row as a sequence of its own would weigh episodes by their rows
        alone = F.aggregate(_split(per_token, at), rows_mask, mode, num_sequences=6)
        assert not torch.isclose(alone, whole)


def test_rows_train_one_optimizer_step(tmp_path):
    task = _AsksTwice(split="val", n=2)
    module = _with_task(_module(tmp_path, guidance=False, teacher=None, rl_rows="per_user_turn", lr=1e-3), task)
    opt = torch.optim.SGD(module.model.parameters(), lr=0.1)
    module.optimizers = lambda: SimpleNamespace(step=opt.step, zero_grad=opt.zero_grad, optimizer=opt)
    module.lr_schedulers = lambda: None
    module.manual_backward = lambda loss: loss.backward()
    module.clip_gradients = lambda *a, **k: None
    rollout = module.collect(_records(task, 2))
    before = [p.detach().clone() for p in module.model.parameters()]
    metrics = module.learn([rollout])
    metrics.update(module._rollout_metrics([rollout]))
    assert math.isfinite(metrics["train/loss"])
    verified = rollout.info["episode_rewards"][~torch.isnan(rollout.info["episode_rewards"])]
    assert metrics["train/reward_mean"] == pytest.approx(float(verified.mean()))  # per episode, not per row
    if float(rollout.token_adv.abs().sum()) > 0:
        assert any(not torch.equal(a, p) for a, p in zip(before, module.model.parameters()))


def test_the_teacher_key_names_the_row_layout_only_where_it_takes_effect(tmp_path):
    task = _AsksTwice(split="val", n=1)
    (record,) = _records(task, 1)
    keys = {rows: _module(tmp_path / rows, rl_rows=rows).teacher_key(record) for rows in ("stream", "auto")}
    # ChatML writes no text with the newest user message only: auto keeps the stream's key
    assert keys["auto"] == keys["stream"]
    assert _module(tmp_path / "p", rl_rows="per_user_turn").teacher_key(record) != keys["stream"]
    with pytest.raises(Exception, match=r"model.rl_rows must be one of \['stream', 'per_user_turn', 'auto'\]"):
        RSTGModule(rl_rows="turns")


class _AlwaysRight(_AsksTwice):
    def verify_episode(self, messages, world, problem):
        return 1.0


def test_the_teachers_episode_is_an_sft_target_row_by_row(tmp_path):
    """The shortest successful teacher episode is its rows: each trains the teacher's turns in the
    served request of its user turn."""
    task = _AlwaysRight(split="val", n=2)
    module = _with_task(
        # the embedded student as the teacher: the embedded teacher's calls do not parse in this task
        _module(tmp_path, teacher="embedded:student", rl_rows="per_user_turn", teacher_sft=True, max_new_tokens=48),
        task,
    )
    records = _records(task, 2)
    answers = [e["answer"] for e in module.teacher_info(records)]
    laid = [a for a in answers if a and "rows" in a]
    assert laid, answers
    tok = module.tokenizer
    for answer in laid:
        users = [m for m in answer["messages"] if m["role"] == "user"]
        assert len(answer["rows"]) == len(users) > 1
        examples = module._sft_rows([records[0]["prompt"]], [answer])
        assert [(p, a, k) for p, a, k in examples] == [(r["prompt_ids"], r["ids"], r["mask"]) for r in answer["rows"]]
        for row in answer["rows"][1:]:
            assert tok.decode(row["prompt_ids"]).endswith("And doubled?<|im_end|>\n<|im_start|>assistant\n")
            assert any(row["mask"])
