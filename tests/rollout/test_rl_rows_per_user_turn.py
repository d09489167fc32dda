"""One RL row per user turn (``run_agent_rl(rows=...)``, RSTG's ``model.rl_rows``).

Mistral Nemo's and v0.3's templates write the system prompt (v0.3 also its call instructions) in front
of the newest user message only, so one growing token stream holds a copy per user turn where a served
request shows one (35,125 tokens against 4,549 served on a replayed 25-turn tau-bench episode with the
real Nemo tokenizer). With ``per_user_turn`` (``auto`` on those templates) a user's new turn opens a
new row whose prompt is the served request, and the episode's rows share its reward. Before session 49
``run_agent_rl`` took no ``rows`` and always glued the user's turn into the one stream.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest
import torch
from chat_template_helpers import CALCULATOR, OURS, tokenizer_with_template
from test_glue_leftovers import _StopsAtTheFirstStopToken
from test_notice_role_all_templates import PATHS, _as_written, _botched, _DecodedEngine, _spec

from lightning_agents.models import load_model_and_tokenizer, load_tokenizer
from lightning_agents.rollout import SamplingConfig, agent_loop
from lightning_agents.rollout.agent_loop import run_agent_rl
from lightning_agents.rollout.hf_engine import HFGenerationEngine, marked_style, stop_token_ids
from lightning_agents.tasks import CalculatorTask
from lightning_agents.template_clock import render_chat_template

NEMO, V03 = OURS / "mistral_nemo_2407.jinja", OURS / "vllm_mistral_v03_parallel.jinja"
POLICY = "Policy: " + "check each step twice. " * 8
USER_TURNS = 3
CALL_ID = "abcDEF123"
TAU_AIRLINE = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "tau_bench" / "gpt-4o-airline.json"


class _Policy(CalculatorTask):
    """A system prompt, the calculator, and ``USER_TURNS`` user turns in all (a chat task with a policy)."""

    system = POLICY

    def prompt(self, problem):
        return [{"role": "system", "content": self.system}, *super().prompt(problem)]

    def next_user_turn(self, messages, world, problem):
        asked = sum(m["role"] == "user" for m in messages)
        return [{"role": "user", "content": f"And question {asked + 1}?"}] if asked < USER_TURNS else None


class _PolicyNoTools(_Policy):
    tools = None

    def environment(self, problem):
        return None


class _Served:
    """A scripted sampler (the replies cycle) that renders prompts as a served request does
    (:meth:`HFGenerationEngine.render`) and records the prompt of every turn."""

    def __init__(self, tok, replies, stops):
        super().__init__(tok, replies, stops)
        self.served = HFGenerationEngine(None, tok)
        self.prompts: list[list[int]] = []

    def render(self, messages, tools=None):
        return self.served.render(messages, tools)

    def _next_reply(self):
        at = self.turn % len(self.replies)
        # each call with an id of its own, as the model writes them (Mistral's are 9 alphanumerics)
        reply = self.replies[at].replace(CALL_ID, f"{CALL_ID[:6]}{self.turn:03d}")
        return reply, self.tokenizer.convert_tokens_to_ids(self.stops[at])

    def generate(self, prompts, num_samples=1, sampling=None, tools=None, seeds=None):
        self.prompts.append(list(prompts[0]))
        return super().generate(prompts, num_samples, sampling, tools, seeds)


class _ServedTokens(_Served, _StopsAtTheFirstStopToken):
    pass


class _ServedDecoded(_Served, _DecodedEngine):
    pass


@pytest.fixture(scope="module")
def base():
    return load_tokenizer("embedded:student")


def _template(base, path):
    eos, bos, pattern = _spec(path)
    return tokenizer_with_template(base, path.read_text(), bos, eos, pattern)


def _as_sampled(tok, message, stops):
    """A reply as the template writes it after its generation prompt, and the stop token after it. On
    Mistral's templates that is what follows the last ``[/INST]``: v0.3 writes its instructions with the
    newest user message only, so the prompt and the rendered reply differ before it."""
    user = [{"role": "user", "content": "What is 17*23?"}]
    full = render_chat_template(tok, [*user, message], tools=[CALCULATOR], tokenize=False)
    if "[/INST]" not in full:
        return _as_written(tok, message, stops)
    rest = full[full.rindex("[/INST]") + len("[/INST]") :]
    hits = sorted((rest.find(t), t) for t in map(tok.convert_ids_to_tokens, stops) if t and t in rest)
    return rest[: hits[0][0]], hits[0][1]


def _replies(tok, calls: bool):
    """The template's own call (when ``calls``) and answer, each with the stop token after it."""
    stops = stop_token_ids(tok)
    script = []
    if calls:
        call = {
            "id": CALL_ID,
            "type": "function",
            "function": {"name": "calculator", "arguments": {"expression": "17*23"}},
        }
        script.append(_as_sampled(tok, {"role": "assistant", "content": "", "tool_calls": [call]}, stops))
    script.append(_as_sampled(tok, {"role": "assistant", "content": "The answer is 391."}, stops))
    fixed = []
    for text, end in script:
        end = end if tok.convert_tokens_to_ids(end) in stops else tok.convert_ids_to_tokens(stops[0])
        fixed.append((text + end, end))
    return fixed, stops


def _run(tok, task, rows, calls=True, num_samples=1, max_turns=12):
    script, stops = _replies(tok, calls)
    engine = (_ServedDecoded if marked_style(tok) else _ServedTokens)(tok, script, stops)
    batch = run_agent_rl(
        engine, task, task.problems, num_samples=num_samples, sampling=SamplingConfig(), max_turns=max_turns, rows=rows
    )
    return engine, batch


def _served_ids(tok, engine, messages, tools):
    return tok(engine.render(messages, tools), add_special_tokens=False)["input_ids"]


def _one_span_more(longer: str, shorter: str) -> str:
    """The one span ``longer`` holds that ``shorter`` lacks (asserted: nothing else differs)."""
    start = len(os.path.commonprefix([longer, shorter]))
    end = len(os.path.commonprefix([longer[start:][::-1], shorter[start:][::-1]]))
    assert start + end == len(shorter), (longer[start : start + 80], shorter[start : start + 80])
    return longer[start : len(longer) - end]


def _row(out, r):
    """(prompt ids, completion ids, loss mask) of row ``r`` without padding."""
    p = out.prompt_ids[r][out.prompt_mask[r].bool()].tolist()
    n = int(out.completion_mask[r].sum())
    return p, out.completion_ids[r, :n].tolist(), out.loss_mask[r, :n].tolist()


@pytest.mark.parametrize("path", [NEMO, V03], ids=lambda p: p.name)
@pytest.mark.parametrize("calls", [True, False], ids=["calls", "no-tools"])
def test_every_turn_is_sampled_in_the_served_request_and_each_row_opens_with_one(base, path, calls):
    tok = _template(base, path)
    task = (_Policy if calls else _PolicyNoTools)(split="val", n=1)
    engine, batch = _run(tok, task, "per_user_turn", calls)
    rollout, out = batch.rollouts[0], batch.out
    traj, tools = rollout["traj"], rollout["tools"] if calls else None
    assert rollout["info"]["finished"] and sum(m["role"] == "user" for m in traj) == USER_TURNS
    # the first model turn of every user turn is sampled after exactly the tokens a served request shows;
    # after a tool result the template writes the system prompt nowhere (only while a user message is
    # last), and the row keeps it where the turn's first call was sampled after it
    turns = [j for j, m in enumerate(traj) if m["role"] == "assistant"]
    assert len(engine.prompts) == len(turns)
    for prompt, j in zip(engine.prompts, turns):
        served = _served_ids(tok, engine, traj[:j], tools)
        if traj[j - 1]["role"] == "user":
            assert prompt == served, (path.name, j)
        else:
            assert POLICY.strip() in _one_span_more(tok.decode(prompt), tok.decode(served)), (path.name, j)
    # one row per user turn, each prompted with its served request and holding its own sampled turns
    assert batch.row_episode == [0] * USER_TURNS and len(batch.rewards) == len(batch.rollouts) == 1
    users = [j for j, m in enumerate(traj) if m["role"] == "user"]
    per_row = len(engine.sampled) // USER_TURNS
    for r, j in enumerate(users):
        prompt, ids, mask = _row(out, r)
        assert prompt == _served_ids(tok, engine, traj[: j + 1], tools)
        sampled = engine.sampled[r * per_row : (r + 1) * per_row]
        assert [t for t, m in zip(ids, mask) if m] == [t for turn in sampled for t in turn]
        assert ids[-len(sampled[-1]) :] == sampled[-1]  # a row ends with its user turn's answer
    # no row is longer than the longest served request: the stream held a system prompt per user turn
    longest = max(int(out.prompt_mask[r].sum() + out.completion_mask[r].sum()) for r in range(USER_TURNS))
    assert longest == len(engine.prompts[-1]) + len(engine.sampled[-1])
    _, stream = _run(tok, task, "stream", calls)
    grown = int(stream.out.prompt_mask[0].sum() + stream.out.completion_mask[0].sum())
    assert grown - longest >= (USER_TURNS - 1) * len(tok.encode(POLICY, add_special_tokens=False)) * 0.9


class _LongPolicy(_Policy):
    """A system prompt longer than the conversation: glued on at a user's turn it would make the row
    more than ``AUTO_ROW_GROWTH`` times the served request (a policy document's shape)."""

    system = POLICY * 12


class _ShortPolicyNoTools(_PolicyNoTools):
    """A short system prompt, no tools, and user turns long beside what the template writes with the
    newest user message only (its own text included), as a chat with a short policy grows."""

    system = "Be brief."

    def next_user_turn(self, messages, world, problem):
        turn = super().next_user_turn(messages, world, problem)
        return [{**m, "content": m["content"] + " Consider this detail carefully." * 100} for m in turn or []] or None


def _length(out, r):
    return int(out.prompt_mask[r].sum() + out.completion_mask[r].sum())


@pytest.mark.parametrize("path", [NEMO, V03], ids=lambda p: p.name)
def test_auto_takes_a_row_per_user_turn_where_a_long_system_prompt_written_last_would_outgrow_the_request(
    base, path, monkeypatch
):
    monkeypatch.setattr(agent_loop, "_GROWS", {})
    tok = _template(base, path)
    _, auto = _run(tok, _LongPolicy(split="val", n=1), "auto")
    _, per_turn = _run(tok, _LongPolicy(split="val", n=1), "per_user_turn")
    assert auto.row_episode == per_turn.row_episode == [0] * USER_TURNS
    assert torch.equal(auto.out.prompt_ids, per_turn.out.prompt_ids)
    assert torch.equal(auto.out.completion_ids, per_turn.out.completion_ids)


@pytest.mark.parametrize("path", [NEMO, V03], ids=lambda p: p.name)
def test_auto_keeps_a_short_system_prompt_written_last_in_the_one_stream(base, path, monkeypatch, caplog):
    """A row per user turn would cost the whole conversation again as each row's prompt, for a few
    tokens the stream adds per user turn: ``auto`` keeps the stream while it stays within
    ``AUTO_ROW_GROWTH`` times the served request, and the ratio is what decides. The growth warning
    is the stream's only: ``auto`` bounds the growth itself."""
    monkeypatch.setattr(agent_loop, "_GROWS", {})
    monkeypatch.setattr(agent_loop, "_GROWTH_MEASURED", set())
    tok = _template(base, path)
    with caplog.at_level(logging.WARNING, logger=agent_loop.__name__):
        engine, auto = _run(tok, _ShortPolicyNoTools(split="val", n=1), "auto", calls=False)
        assert "beyond a served request" not in caplog.text
        _, stream = _run(tok, _ShortPolicyNoTools(split="val", n=1), "stream", calls=False)
        assert "beyond a served request" in caplog.text
    assert auto.row_episode == [0]
    for name in ("prompt_ids", "completion_ids", "loss_mask", "logprobs"):
        assert torch.equal(getattr(auto.out, name), getattr(stream.out, name)), name
    traj = auto.rollouts[0]["traj"]
    served = len(_served_ids(tok, engine, traj[:-1], None)) + len(engine.sampled[-1])  # the last answer's
    assert served < _length(stream.out, 0) <= agent_loop.AUTO_ROW_GROWTH * served  # it grew, within the bound
    monkeypatch.setattr(agent_loop, "AUTO_ROW_GROWTH", 1.0)  # any growth at all: a row per user turn
    _, strict = _run(tok, _ShortPolicyNoTools(split="val", n=1), "auto", calls=False)
    _, per_turn = _run(tok, _ShortPolicyNoTools(split="val", n=1), "per_user_turn", calls=False)
    assert strict.row_episode == per_turn.row_episode == [0] * USER_TURNS
    assert torch.equal(strict.out.prompt_ids, per_turn.out.prompt_ids)


@pytest.mark.parametrize("path", PATHS, ids=[p.name for p in PATHS])
def test_auto_keeps_every_template_that_does_not_grow_on_its_one_stream(base, path, monkeypatch):
    """The sweep of every real template: ``auto`` lays out one row per episode, bit for bit the stream's,
    except on Nemo and v0.3, which write the system prompt with the newest user message only."""
    monkeypatch.setattr(agent_loop, "_GROWS", {})
    tok = _template(base, path)
    task = _PolicyNoTools(split="val", n=1)  # every template renders a system prompt and user turns
    try:
        _, stream = _run(tok, task, "stream", calls=False)
    except Exception as error:  # noqa: BLE001 - a template the stream itself refuses: nothing for auto to keep
        pytest.skip(f"{path.name}: the stream is refused ({str(error)[:80]})")
    _, auto = _run(tok, task, "auto", calls=False)
    if path in (NEMO, V03):
        assert auto.row_episode == [0] * USER_TURNS
        return
    assert auto.row_episode == [0]
    for name in ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask", "loss_mask", "logprobs"):
        assert torch.equal(getattr(auto.out, name), getattr(stream.out, name)), name


@pytest.mark.parametrize("path", [NEMO, V03], ids=lambda p: p.name)
def test_a_malformed_calls_user_notice_opens_a_row_in_the_served_request(base, path):
    """With a system prompt and tools, Nemo and v0.3 move both the tool list and the system prompt in
    front of a malformed call's user notice, and the one stream refused the glue ("renders earlier
    turns differently"), stopping the batch. Per user turn the notice opens a row like a user's turn."""
    tok = _template(base, path)
    stops = stop_token_ids(tok)
    bad, end = _botched(tok, "mistral", stops)
    answer = _replies(tok, calls=False)[0][0]
    engine = (_ServedDecoded if marked_style(tok) else _ServedTokens)(tok, [(bad + end, end), answer], stops)
    task = _Policy(split="val", n=1)
    batch = run_agent_rl(
        engine, task, task.problems, num_samples=1, sampling=SamplingConfig(), max_turns=8, rows="per_user_turn"
    )
    rollout = batch.rollouts[0]
    traj, tools = rollout["traj"], rollout["tools"]
    assert rollout["info"]["malformed_calls"] == USER_TURNS and rollout["info"]["finished"]
    assert batch.row_episode == [0] * 2 * USER_TURNS  # a row per notice and per user turn
    turns = [j for j, m in enumerate(traj) if m["role"] == "assistant"]
    for prompt, j in zip(engine.prompts, turns):
        assert prompt == _served_ids(tok, engine, traj[:j], tools), (path.name, j)


def test_the_rows_of_an_episode_share_its_reward_and_its_truncation(base):
    tok = _template(base, NEMO)
    task = _Policy(split="val", n=2)
    _, batch = _run(tok, task, "per_user_turn", num_samples=2)
    assert batch.row_episode == [e for e in range(4) for _ in range(USER_TURNS)]
    assert len(batch.rewards) == len(batch.rollouts) == 4
    assert [r["task_id"] for r in batch.rollouts] == [p["id"] for p in task.problems for _ in range(2)]
    truncated = batch.out.truncated.tolist()
    for r, e in enumerate(batch.row_episode):
        assert truncated[r] == (not batch.rollouts[e]["info"]["finished"])


def test_an_unknown_row_layout_is_refused_with_the_choices(base):
    task = _Policy(split="val", n=1)
    with pytest.raises(ValueError, match=r"rows must be one of \['stream', 'per_user_turn', 'auto'\], got 'turn'"):
        _run(_template(base, NEMO), task, "turn")


class _AsksTwice(CalculatorTask):
    def next_user_turn(self, messages, world, problem):
        asked = sum(m["role"] == "user" for m in messages)
        return [{"role": "user", "content": "And doubled?"}] if asked < 3 else None


def test_the_trainer_reproduces_the_sampler_log_probs_on_every_row():
    """The embedded student samples for real; each row, scored alone from its own served prompt, gives
    the sampler's log-probs back (ratio 1 on every sampled token)."""
    from lightning_agents.modules.rstg import completion_logprobs

    model, tok = load_model_and_tokenizer("embedded:student")
    engine = HFGenerationEngine(model.eval(), tok)
    task = _AsksTwice(split="val", n=3)
    torch.manual_seed(0)
    batch = run_agent_rl(
        engine,
        task,
        task.problems,
        num_samples=2,
        sampling=SamplingConfig(max_new_tokens=24, temperature=0.9),
        max_turns=6,
        rows="per_user_turn",
    )
    out = batch.out
    assert len(batch.row_episode) > len(batch.rollouts), "no episode reached a second user turn"
    with torch.no_grad():
        logp, _ = completion_logprobs(
            model, out.prompt_ids, out.prompt_mask, out.completion_ids, out.completion_mask, temperature=0.9
        )
    m = out.loss_mask.bool()
    assert bool(m.any(dim=1).all())  # every row trains the turn it holds
    ratio = torch.exp(logp[m] - out.logprobs[m])
    assert float((ratio - 1).abs().max()) < 1e-3
    # a later row's prompt is its served request: the user's turns so far, each as the template writes it
    for r, e in enumerate(batch.row_episode):
        if r and batch.row_episode[r - 1] == e:
            prompt = tok.decode(out.prompt_ids[r][out.prompt_mask[r].bool()])
            assert prompt.endswith("And doubled?<|im_end|>\n<|im_start|>assistant\n")


@pytest.mark.skipif(not TAU_AIRLINE.is_file(), reason="needs ../shared/data/tau_bench")
def test_a_replayed_tau_bench_airline_episode_keeps_every_row_within_its_served_request(base):
    """The airline policy (6,155 characters) as Nemo's system prompt and the user's turns of the longest
    replayed episode: per user turn, no row is longer than the served request of its last turn, where the
    single stream holds the policy once per user turn."""
    episodes = json.loads(TAU_AIRLINE.read_text())
    traj = max((e["traj"] for e in episodes), key=lambda t: sum(m["role"] == "user" for m in t))
    policy = traj[0]["content"]
    said = [m["content"] for m in traj if m["role"] == "user" and isinstance(m.get("content"), str)]

    class _Replay(_PolicyNoTools):
        system = policy

        def prompt(self, problem):
            return [{"role": "system", "content": policy}, {"role": "user", "content": said[0]}]

        def next_user_turn(self, messages, world, problem):
            asked = sum(m["role"] == "user" for m in messages)
            return [{"role": "user", "content": said[asked]}] if asked < len(said) else None

    tok = _template(base, NEMO)
    engine, batch = _run(tok, _Replay(split="val", n=1), "per_user_turn", calls=False, max_turns=len(said))
    out, traj_out = batch.out, batch.rollouts[0]["traj"]
    assert batch.row_episode == [0] * len(said)
    lengths = [int(out.prompt_mask[r].sum() + out.completion_mask[r].sum()) for r in range(len(said))]
    served_last = len(_served_ids(tok, engine, traj_out[:-1], None)) + len(engine.sampled[-1])
    assert max(lengths) == served_last
    _, stream = _run(tok, _Replay(split="val", n=1), "stream", calls=False, max_turns=len(said))
    grown = int(stream.out.prompt_mask[0].sum() + stream.out.completion_mask[0].sum())
    assert grown > 2 * served_last, (grown, served_last)
