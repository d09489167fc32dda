"""A multi-turn tool-use agent loop over any task with tools.

The loop runs any model behind :class:`~lightning_agents.rollout.hf_engine.HFGenerationEngine`:
the model answers, every ``<tool_call>`` it emits is executed by the episode's world (a fresh one
from :meth:`~lightning_agents.tasks.Task.environment` per episode) and returned as a tool message,
and the model continues until it answers without a call or runs out of turns. All open
conversations advance together, one batched ``generate`` per turn. The rollouts come out in the
OpenAI/tau-bench format (``{task_id, trial, reward, info, traj}``) that TopoCurate reads; the task
scores each finished episode (:meth:`~lightning_agents.tasks.Task.verify_episode`).
"""

from __future__ import annotations

import contextvars
import json
import logging
import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from difflib import SequenceMatcher
from os.path import commonprefix
from typing import Any

from lightning_agents.errors import LightningAgentsError
from lightning_agents.rollout.agent_turn import (
    AgentEpisode,
    ModelReply,
    TurnStep,
    agent_turn,
    apply_reply,
    check_renders_tool_results,
    model_call_format,
    model_calls_per_turn,
    model_needs_alphanumeric_ids,
    model_notice_role,
    model_tool_call_style,
    moved_text,
    next_user_turn,
    offered_tools,
    score_episode,
    start_episode,
)
from lightning_agents.rollout.hf_engine import (
    GenerationOutput,
    HFGenerationEngine,
    SamplingConfig,
    template_messages,
    text_content,
)
from lightning_agents.tasks import (
    CalculatorTask,
    CalculatorWorld,
    Task,
    ToolWorld,
    class_path,
)
from lightning_agents.template_clock import render_chat_template

logger = logging.getLogger(__name__)

__all__ = [
    "RL_ROWS",
    "AgentBatch",
    "AgentEpisode",
    "CalculatorWorld",
    "ModelReply",
    "ToolWorld",
    "TurnStep",
    "agent_turn",
    "continuation_text",
    "problem_record_verifier",
    "run_agent_loop",
    "run_agent_rl",
    "user_turn_opens_row",
]


def _chunks(items: Sequence[int], size: int) -> Iterable[Sequence[int]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def run_agent_loop(
    engine: HFGenerationEngine,
    tasks: Sequence[dict[str, Any]],
    trials: int = 4,
    task: Task | None = None,
    sampling: SamplingConfig | None = None,
    max_turns: int = 3,
    batch_size: int = 64,
    progress: Callable[[int], None] | None = None,
    max_tool_calls: int | None = None,
) -> list[dict[str, Any]]:
    """Run ``trials`` independent multi-turn episodes per problem and score each.

    Every turn is :func:`~lightning_agents.rollout.agent_turn.agent_turn`: malformed calls and
    tool errors are observations, a reply cut at ``sampling.max_new_tokens`` ends its episode
    unanswered (reward 0).

    Args:
        engine: the model to run.
        tasks: the problems (``id``, ``question``, ``reference`` -- or ``answer`` -- and whatever
            the task's world needs), e.g. ``task.get_problems("train", n=64)``.
        trials: episodes per problem (K).
        task: the task: its prompt, tools, world per episode and episode verifier (default: the
            embedded :class:`~lightning_agents.tasks.CalculatorTask`).
        sampling: sampling settings of every model turn (sample, so trials differ).
        max_turns: model turns per episode; an episode still calling tools after the last turn
            ends unanswered and scores 0.
        batch_size: conversations per ``generate`` call.
        progress: called with the number of model turns generated after each batch.
        max_tool_calls: tool calls executed per episode (``None``: no limit).

    Each episode is offered its world's tools (a BFCL record's own), else the task's.

    Returns:
        Rollouts ``{task_id, trial, reward, info, tools, traj}``; ``traj`` is the OpenAI-format
        conversation, ``tools`` the schemas offered, ``info`` holds ``question``, ``reference``,
        ``verifier`` (the one the problem's RL record names: :func:`problem_record_verifier`),
        ``task`` (class path), ``turns``, ``finished``, ``tool_errors``, the problem's
        ``environment`` if it has one and, for stateful worlds, the final ``state`` and the
        ``problem``. A world with a ``state_hash()`` (BFCL's) also gives ``states``: per user turn,
        ``[index of the turn's last message, "<turn>:<hash>"]``, the keys the BFCL reader gives a
        result file's ``state_info`` snapshots, on which TopoCurate merges trials.
    """
    if trials < 1 or max_turns < 1:
        raise ValueError(f"trials and max_turns must be at least 1, got {trials} and {max_turns}")
    task = task or CalculatorTask()
    sampling = sampling or SamplingConfig()
    style = model_tool_call_style(getattr(engine, "tokenizer", None))
    per_turn = model_calls_per_turn(getattr(engine, "tokenizer", None), getattr(engine, "chat_template_kwargs", None))
    # Mistral's templates raise on the call_{turn}_{i} ids of other styles (vLLM's v0.3 template reads as hermes)
    nine = model_needs_alphanumeric_ids(
        getattr(engine, "tokenizer", None), getattr(engine, "chat_template_kwargs", None)
    )
    # Gemma 4's template shows no tool message after a turn without calls: a malformed call's notice
    notice_role = model_notice_role(getattr(engine, "tokenizer", None), getattr(engine, "chat_template_kwargs", None))
    # Small 3.2's calls are [TOOL_CALLS]NAME[ARGS]{...}: the notice names that form, not v3's
    call_format = model_call_format(getattr(engine, "tokenizer", None), getattr(engine, "chat_template_kwargs", None))
    episodes = []
    for problem in tasks:
        if "reference" not in problem:
            problem = {**problem, "reference": problem.get("answer")}
        for k in range(trials):
            episodes.append(
                start_episode(
                    task,
                    problem,
                    trial=k,
                    max_tool_calls=max_tool_calls,
                    tool_call_style=style,
                    calls_per_turn=per_turn,
                    alphanumeric_ids=nine,
                    notice_role=notice_role,
                    call_format=call_format,
                )
            )

    # Per conversation, its tools and the key of that tool set (worlds build equal lists of their own).
    tools_of: dict[int, list[dict[str, Any]]] = {}
    key_of: dict[int, str] = {}
    for e in episodes:
        tools_of[id(e.messages)] = offered = offered_tools(e, task.tools)
        key_of[id(e.messages)] = json.dumps(offered, sort_keys=True)
    if any(tools_of.values()):
        # before any sampling: a template without a tool role would hide every result from the model
        check_renders_tool_results(getattr(engine, "tokenizer", None), getattr(engine, "chat_template_kwargs", None))

    def generate(conversations, tools):
        # One generate call per distinct tool set in the batch: each episode sees its world's tools.
        groups: dict[str, list[int]] = {}
        for i, conversation in enumerate(conversations):
            groups.setdefault(key_of[id(conversation)], []).append(i)
        replies: list[ModelReply | None] = [None] * len(conversations)
        for rows in groups.values():
            offered = tools_of[id(conversations[rows[0]])]
            out = engine.generate(
                [conversations[i] for i in rows], num_samples=1, sampling=sampling, tools=offered or None
            )
            # A scripted engine may not report truncation; then no reply counts as cut.
            cut = getattr(out, "truncated", None)
            for j, (i, text) in enumerate(zip(rows, out.texts)):
                replies[i] = ModelReply(text, truncated=bool(cut[j]) if cut is not None else False)
        return replies

    for _ in range(max_turns):
        if all(e.finished for e in episodes):
            break
        for step in agent_turn(episodes, generate, task.tools, batch_size=batch_size, progress=progress):
            if step.finished:
                _record_state(step.episode)
                if next_user_turn(task, step.episode):  # a task whose user speaks again (BFCL) reopens it
                    step.episode.extra["turn"] = step.episode.extra.get("turn", 1) + 1
    rollouts = []
    verifiers: dict[int, str | dict[str, Any]] = {}  # per problem: its trials share the problem object
    for episode in episodes:
        problem, world = episode.problem, episode.world
        if id(problem) not in verifiers:
            verifiers[id(problem)] = problem_record_verifier(task, problem)
        info = {
            "question": problem["question"],
            "reference": problem["reference"],
            "verifier": verifiers[id(problem)],
            "task": class_path(task),
            "turns": episode.turns,
            "finished": episode.answered,
            "tool_errors": episode.errors,
        }
        if "environment" in problem:
            info["environment"] = problem["environment"]  # curate's RL record rebuilds the world from it
        if not episode.finished:
            _record_state(episode)  # out of turns mid-turn: BFCL logs the state after such a turn too
        if "states" in episode.extra:
            info["states"] = episode.extra["states"]
        state = world.state() if world is not None else None
        if state is not None:
            # A stateful world's episode is checked against its problem, so the problem travels
            # with the rollout (TopoCurate's RL records carry it on).
            info["state"] = state
            info["problem"] = problem
        rollouts.append(
            {
                "task_id": problem["id"],
                "trial": episode.trial,
                "reward": score_episode(task, episode),
                "info": info,
                "tools": tools_of[id(episode.messages)],
                "traj": episode.messages,
            }
        )
    return rollouts


def problem_record_verifier(task: Task, problem: dict[str, Any]) -> str | dict[str, Any]:
    """The verifier ``problem``'s RL record names (:meth:`~lightning_agents.tasks.Task.prompt_record`),
    which a rollout of the problem carries as ``info["verifier"]`` and ``curate`` copies into the RL
    record it builds from the rollout.

    It is the task's verifier for that problem, not :meth:`~lightning_agents.tasks.Task.verifier_spec`
    (the task's verifier for no problem in particular): a HumanEval problem's names its entry point,
    stub and time limit (:meth:`~lightning_agents.tasks.HumanEvalTask.verifier_spec_for`), so the RL
    record scores a body-only answer as the rollout's reward (``task.verify``) did; a MATH problem's
    says whether list answers pair in order. Before session 42 rollouts carried the task-level spec,
    and a curated HumanEval record scored a right body 0 where its rollout had scored 1.
    """
    return task.prompt_record(problem)["verifier"]


def _record_state(episode: AgentEpisode) -> None:
    """Note the state the episode's world is in after its latest user turn, keyed with that turn as
    the BFCL reader keys a result file's snapshots (a later turn in an unchanged state is a later
    situation). Worlds without ``state_hash()`` record nothing."""
    state_hash = getattr(episode.world, "state_hash", None)
    if state_hash is None or not episode.messages:
        return
    turn = episode.extra.get("turn", 1)  # user turns delivered (a turn may hold several messages)
    states = episode.extra.setdefault("states", [])
    at = len(episode.messages) - 1
    if not states or states[-1][0] != at:
        states.append([at, f"{turn}:{state_hash()}"])


# ----------------------------------------------------------------------------- agent rollouts for RL
@dataclass
class AgentBatch:
    """Multi-turn episodes laid out for RL: one row per episode (the G episodes of a problem
    contiguous), with the initial prompt as ``out.prompt_ids`` and every later token, the model's
    turns and the environment's answers alike, in ``out.completion_ids``. With one row per user turn
    (:data:`RL_ROWS`) an episode's rows follow each other, each with the served request of its user
    turn as its prompt.

    Attributes:
        out: token ids, masks and the sampler's log-probs; ``out.loss_mask`` is 1 only on tokens the
            policy sampled (tool outputs, user turns and chat-template glue are 0, and have log-prob 0).
            ``out.truncated`` is the episode's: every row of an episode that ended unanswered.
        rewards: ``[episodes]`` episode rewards from :meth:`~lightning_agents.tasks.Task.verify_episode`;
            NaN where the task could not verify (a ``VerifierError``).
        rollouts: the episodes in the rollout format of :func:`run_agent_loop` (plus ``tool_calls``
            and ``malformed_calls`` counts in ``info``), one per episode.
        row_episode: ``[rows]`` the episode (index into ``rewards`` and ``rollouts``) of each row of
            ``out``, ascending; ``None``: row ``i`` is episode ``i``.
    """

    out: GenerationOutput
    rewards: list[float]
    rollouts: list[dict[str, Any]]
    row_episode: list[int] | None = None


#: How :func:`run_agent_rl` lays an episode out in rows: ``stream`` (one growing token stream per
#: episode), ``per_user_turn`` (a row per user turn, each prompted with its served request) or
#: ``auto`` (a new row at a user's turn only where the chat template writes text with the newest user
#: message only, :func:`_grows_per_user_turn`: Mistral Nemo's and v0.3's system prompt and
#: instructions, and the row would outgrow the served request :data:`AUTO_ROW_GROWTH` times).
RL_ROWS = ("stream", "per_user_turn", "auto")


def continuation_text(
    tokenizer,
    messages: list[dict[str, Any]],
    new: list[dict[str, Any]],
    tools,
    chat_template_kwargs: dict[str, Any] | None = None,
    end_tokens: Sequence[str] | None = None,
    sampled_end: str | None = None,
) -> str:
    """The text the chat template puts after the assistant's final end-of-turn token of
    ``messages`` when ``new`` messages (tool results, a user turn) follow and the assistant is
    prompted again.

    The sampled assistant tokens stay as they were sampled; only this glue is tokenised, so the
    context of the next turn is exactly the tokens the trainer will score.

    Args:
        end_tokens: the texts of the tokens that end a turn (default: the tokenizer's EOS); a
            template that ends turns with another token (Gemma's ``<end_of_turn>``, Phi-3.5's
            ``<|end|>``) needs it listed, or the glue would repeat what follows it.
        sampled_end: the text of the stop token the last assistant turn was sampled up to, if it
            stopped at one. A template that closes the turn with nothing and opens the next message
            with that token (GLM-4.6's ``<|observation|>`` before a tool result, ``<|user|>`` before a
            user turn, both stop tokens of the model) gets it left out of the glue: the model wrote it.
    """
    kwargs = dict(chat_template_kwargs or {})
    if tools:
        kwargs["tools"] = tools
    # Both sides through the rule the text path renders with (HFGenerationEngine.render): Qwen3-Coder,
    # GLM-4.6 and MiniMax-M2 iterate arguments as a mapping and raised on the episode's JSON strings.
    whole = list(messages) + list(new)
    several = any(len(m.get("tool_calls") or ()) > 1 for m in whole)
    limit = model_calls_per_turn(tokenizer, chat_template_kwargs) if several else None
    last = messages[-1] if messages and messages[-1].get("role") == "assistant" else {}
    last_calls = len(last.get("tool_calls") or ())
    if limit is not None and last_calls > limit and new:
        # Split, the head ends with the turn's last call and the whole conversation with that
        # call's result, so no glue lies after the head; apply_reply stores calls[:limit].
        raise LightningAgentsError(
            f"the last assistant message holds {last_calls} tool calls, but the chat template renders "
            f"{limit} per assistant message, so the new messages cannot follow that turn as sampled; "
            f"keep only the first {limit} call(s) in the message (apply_reply does) and answer the rest "
            "as observations"
        )
    rendered = template_messages(tokenizer, whole, limit)
    before = _render(tokenizer, list(messages), limit, kwargs, prompt=False)
    after = render_chat_template(tokenizer, rendered, tokenize=False, add_generation_prompt=True, **kwargs)
    ends = [t for t in (end_tokens or [tokenizer.eos_token]) if t]
    swapped = _final_closer_cut(tokenizer, before, after, sampled_end)
    # The history without its reasoning, rendered once: gpt-oss drops the last answer's analysis and
    # swaps its closer once a message follows, read before the end-token count below, which an end
    # token inside a new message's text misleads (the malformed-call notice quotes `<|call|>`) and which
    # takes the stored analysis for history; the last resort below reads it too.
    plain, plain_error = None, None
    if swapped is None and _ends_with_final_closer(tokenizer, before):
        try:
            plain = _history_without_reasoning(tokenizer, messages, limit, kwargs)
        except Exception as exc:  # noqa: BLE001 - a template that needs the reasoning: the paths below first
            plain_error = exc
        if plain is not None:
            swapped = _final_closer_cut(tokenizer, plain, after, sampled_end)
    if swapped is not None:
        _check_shown(new, after[swapped:], tokenizer)
        return after[swapped:]
    for end in ends:
        # Phi-3.5 closes a conversation rendered without a generation prompt with an EOS after
        # the last turn's own end token; a continued conversation has none there.
        if not after.startswith(before) and before.endswith(end) and after.startswith(before[: -len(end)]):
            before = before[: -len(end)]
    marks = _turn_ends(before, ends)
    opened = _open_tail(tokenizer, before, marks, messages, limit, kwargs)
    if after.startswith(before):
        cut = _appended_cut(before, after, marks, opened, sampled_end)
        if not opened and cut <= len(before):
            cut = min(cut, _call_turn_end(tokenizer, before, marks, messages, limit, kwargs))
        glue = _warn_own_text_again(tokenizer, after[cut:], new, messages)
        _check_shown(new, glue, tokenizer)
        if any(m.get("role") == "user" for m in new):
            # Nemo with a system prompt and no tools: appended, and the prompt again in every glue
            _warn_growth(tokenizer, after, _shown_texts(new, tokenizer), (rendered, kwargs))
        return glue
    # Qwen3 renders the last assistant turn with an empty think block only while it is last, and
    # drops the reasoning of every assistant turn before the latest user message, so the
    # continuation is not an extension of the text. The glue is still well defined: what follows
    # the same number of end-of-turn tokens, provided every earlier turn renders the same apart
    # from its reasoning and the new messages all lie after the cut. (The token stream keeps the
    # reasoning as sampled: it is what the sampler saw, so the trainer scores the same context.)
    turns = len(marks)
    later = _turn_ends(after, ends) if turns else []
    # GLM-4.6 closes no turn: its last end token lies before the last turn, and the one after that
    # turn opens the new message (a user's follow-up after an answer whose reasoning it drops)
    k = turns + 1 if opened else turns
    if turns and len(later) >= k:
        cut, earlier = later[k - 1], (later[k - 2] if k > 1 else 0)
        earlier_before = marks[k - 2] if k > 1 else 0
        if k > turns:
            token = max((e for e in ends if after.startswith(e, cut - len(e))), key=len)
            if token != sampled_end:
                cut -= len(token)  # the template's opener, which the model did not sample
        shown = _shown_texts(new, tokenizer)
        same_history = _REASONING.sub("", after[:earlier]) == _REASONING.sub("", before[:earlier_before])
        if same_history:
            # a new message's text (raw, or JSON-escaped as Command R7B and ToolACE write results)
            # must appear after the cut, and not already in the assistant's last turn
            _check_shown(new, after[cut:], tokenizer)
            if not _new_text_in_last_turn(tokenizer, messages, new, after[earlier:cut], k, ends, (limit, kwargs)):
                # the moved list lies after `earlier` here (a notice after the first reply, a third user turn)
                span = moved_text(before, after[:cut])
                glue = _glue_less_moved_text(tokenizer, span, after, cut, shown, (rendered, kwargs))
                return _warn_own_text_again(tokenizer, glue, new, messages)
            raise LightningAgentsError(
                "the chat template renders a new message's text inside the assistant's last turn, so "
                "the glue after that turn cannot be told apart; use a template that appends messages"
            )
    glue = _glue_after_moved_text(
        tokenizer, before, after, marks, ends, _shown_texts(new, tokenizer), (rendered, kwargs)
    )
    if glue is not None:
        _check_shown(new, glue, tokenizer)
        return _warn_own_text_again(tokenizer, glue, new, messages)
    if plain_error is not None:
        raise plain_error
    if plain is None:  # not rendered above: the history does not end with a final closer
        plain = _history_without_reasoning(tokenizer, messages, limit, kwargs)
    glue = _glue_without_reasoning(tokenizer, messages, plain, after, ends, limit, kwargs, sampled_end)
    if glue is not None:
        _check_shown(new, glue, tokenizer)
        return _warn_own_text_again(tokenizer, glue, new, messages)
    glue = _glue_without_call_ids(
        tokenizer, messages, new, tools, chat_template_kwargs, end_tokens, sampled_end, (after, limit, kwargs)
    )
    if glue is not None:
        return glue
    raise LightningAgentsError(
        "the chat template renders earlier turns differently once new messages follow (other than by "
        "dropping their reasoning or closing the last answer with its end-of-turn token instead of its "
        f"final one: the history renders as {_first_difference(before, after)}), so multi-turn token streams "
        "cannot be extended; use a template that appends messages"
    )


def _new_text_in_last_turn(
    tokenizer,
    messages: list[dict[str, Any]],
    new: list[dict[str, Any]],
    span: str,
    k: int,
    ends: list[str],
    whole: tuple[int | None, dict],
) -> bool:
    """Whether the chat template renders a new message's text inside the assistant's last turn,
    ``span``: the rendering with ``new`` between its ``k - 1``-th and ``k``-th end tokens (``whole``:
    the calls per turn and the template's arguments). The glue cut after that turn would then hold
    only part of the new messages, and the rest would be taken for the assistant's.

    A new text found in ``span`` may be an earlier message's: Apriel-1.6's tool results close with no
    end token (Command R7B's with none of the tokens a student with another EOS stops at), so the span
    opens with the result before the last call turn, and a retried call gets the same text back. There the conversation is rendered once more with
    the new texts swapped for marks no message holds, and the same span of it must hold none of them
    while the rest of it holds them all (else the new messages' place cannot be told: refused)."""
    shown = _shown_texts(new, tokenizer)
    if not any(_rendered_in(c, span) for c in shown):
        return False
    limit, kwargs = whole
    marked, marks = [], []
    for message in new:
        text = text_content(message, tokenizer=tokenizer).get("content")
        if isinstance(text, str) and text.strip():
            marks.append(_NEW_TEXT_MARK.format(len(marks)))
            message = {**message, "content": marks[-1]}
        marked.append(message)
    try:
        probe = _render(tokenizer, [*messages, *marked], limit, kwargs, prompt=True)
    except Exception:  # noqa: BLE001 - a template that reads the texts (JSON results): the refusal stands
        return True
    later = _turn_ends(probe, ends)
    if len(later) < k:
        return True
    cut, earlier = later[k - 1], (later[k - 2] if k > 1 else 0)
    return any(m in probe[earlier:cut] for m in marks) or not all(m in probe[cut:] for m in marks)


#: The text the ``i``-th new message is given to find where the template writes it
#: (:func:`_new_text_in_last_turn`); no mark is a part of another's.
_NEW_TEXT_MARK = "LightningAgentsNewText{}Mark"


def _glue_after_moved_text(
    tokenizer, before: str, after: str, marks: list[int], ends: list[str], shown: list[str], whole: tuple
) -> str | None:
    """The glue where the template moves text of an earlier message in front of the new user message,
    or ``None``: Mistral Nemo's, v0.3's and Small 3.2's templates write the tool list before the last
    user message only, so a user's next turn (or a malformed call's notice given as a user message)
    takes it from the message before. ``after`` must render the history as ``before`` did, its last
    turn closed with the same end token, less one span (:func:`~lightning_agents.rollout.agent_turn.moved_text`)
    that the glue, what the template writes for the new messages, holds again in front of them.

    The glue is what the template writes less that span (:func:`_glue_less_moved_text`): the token
    stream keeps the list once, where the earlier turns were sampled (what the sampler saw, as Qwen3's
    dropped reasoning stays), and grows by the new messages only."""
    if not marks or marks[-1] != len(before):  # a last turn left open (GLM) is read elsewhere
        return None
    later = _turn_ends(after, ends)
    if len(later) < len(marks):
        return None
    cut = later[len(marks) - 1]
    span = moved_text(before, after[:cut])
    if span is None or not span.strip() or span not in after[cut:]:
        return None
    glue = _glue_less_moved_text(tokenizer, span, after, cut, shown, whole)
    # a span that only a new message's text holds again is no text the template moved (blank new
    # messages: nothing tells where they start, and the glue keeps the span, as the template writes it)
    return None if glue == after[cut:] and shown else glue


def _glue_without_call_ids(
    tokenizer,
    messages: list[dict[str, Any]],
    new: list[dict[str, Any]],
    tools,
    chat_template_kwargs: dict[str, Any] | None,
    end_tokens: Sequence[str] | None,
    sampled_end: str | None,
    whole: tuple[str, int | None, dict],
) -> str | None:
    """The glue where the template writes the ids of earlier turns' calls but not of the last turn's,
    or ``None``: Apriel-1.6 renders ``, "id": ...`` inside each call of a turn that a message follows
    and none in the last one, the turn the model writes (its format, ``{"name": ..., "arguments":
    ...}``, has no id), so the call turn it sampled renders differently once its result follows.

    The glue is :func:`continuation_text` of the history without the last turn's call ids, and it must also end
    ``after``, the conversation rendered with them (``whole``: that text, the calls per turn and the
    template's arguments), which must differ from the rendering without them only by spans that
    hold an id (:func:`_only_ids_added`): it is then exactly what the template writes for the new
    messages (a template that finds a result's call by its id renders the result differently without
    it, and one that writes other text, a closer, for a call with an id, would lose that text from
    the stream: both are refused). The token stream keeps each call as sampled, without the id a served
    request re-renders into it (what the sampler saw, as with Qwen3's dropped reasoning)."""
    after, limit, kwargs = whole
    # the last turn's only: an earlier call turn shows its ids before and after alike (Apriel's), so
    # the two renderings differ in the last turn alone, which keeps the comparison below short
    bare = [*messages[:-1], *_without_call_ids(messages[-1:])]
    if bare == messages:
        return None
    try:
        glue = continuation_text(tokenizer, bare, new, tools, chat_template_kwargs, end_tokens, sampled_end)
        plain = _render(tokenizer, [*bare, *new], limit, kwargs, prompt=True)
    except Exception:  # noqa: BLE001 - a template that needs the ids (Mistral's raise): the refusal stands
        return None
    if not (after.endswith(glue) and plain.endswith(glue)):
        return None
    calls = messages[-1].get("tool_calls") or ()
    ids = [c["id"] for c in calls if isinstance(c, dict) and isinstance(c.get("id"), str)]
    if not _only_ids_added(plain[: len(plain) - len(glue)], after[: len(after) - len(glue)], ids):
        return None
    _warn_once(
        _CALL_IDS_ADDED,
        tokenizer,
        "the chat template writes call ids into earlier assistant turns and none into the last one (Apriel-1.6's "
        "'\"id\"' in <tool_calls>), so a call turn renders differently once its result follows: the RL token "
        "stream keeps each call as the model sampled it, without the id a served request re-renders into it",
    )
    return glue


def _only_ids_added(plain: str, full: str, ids: list[str]) -> bool:
    """Whether ``full`` is ``plain`` with spans added that each hold one of ``ids`` (Apriel's
    ``, "id": "call_0_0"``), compared where the two differ (between their common prefix and suffix)."""
    start = len(commonprefix([plain, full]))
    end = len(commonprefix([plain[start:][::-1], full[start:][::-1]]))
    a, b = plain[start : len(plain) - end], full[start : len(full) - end]
    # an added span may come back in pieces around a character the ids' text shares (a quote)
    spans, last = [], None
    for tag, _a1, _a2, j1, j2 in SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag != "equal":
            if tag != "insert":
                return False
            if last is not None and j1 - last[1] <= 2:
                last = (last[0], j2)
                spans[-1] = last
            else:
                last = (j1, j2)
                spans.append(last)
    return all(any(i in b[j1:j2] for i in ids) for j1, j2 in spans)


def _without_call_ids(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Copies of ``messages`` whose assistant tool calls have no ``id`` key (tool results keep theirs)."""
    bare = []
    for message in messages:
        calls = message.get("tool_calls") if message.get("role") == "assistant" else None
        if calls and any(isinstance(c, dict) and "id" in c for c in calls):
            stripped = [{k: v for k, v in c.items() if k != "id"} if isinstance(c, dict) else c for c in calls]
            message = {**message, "tool_calls": stripped}
        bare.append(message)
    return bare


#: Chat templates warned about once for writing the call ids of earlier turns only (Apriel-1.6).
_CALL_IDS_ADDED: set[str] = set()


def _warn_once(seen: set[str], tokenizer, message: str, *args: Any) -> None:
    """``logger.warning(message, *args)`` once per chat template of ``tokenizer`` among those in ``seen``."""
    key = str(getattr(tokenizer, "chat_template", ""))
    if key not in seen:
        seen.add(key)
        logger.warning(message, *args)


def _render(tokenizer, messages: list[dict[str, Any]], limit: int | None, kwargs: dict, prompt: bool) -> str:
    """``messages`` rendered by the chat template as text, as the template is given them
    (:func:`template_messages`, ``limit`` calls per turn), with the generation prompt when ``prompt``."""
    return render_chat_template(
        tokenizer, template_messages(tokenizer, messages, limit), tokenize=False, add_generation_prompt=prompt, **kwargs
    )


def _shown_texts(new: list[dict[str, Any]], tokenizer) -> list[str]:
    """The new messages' texts, stripped, that are not blank."""
    texts = [text_content(m, tokenizer=tokenizer).get("content") for m in new]
    return [t.strip() for t in texts if isinstance(t, str) and t.strip()]


def _less_moved_text(glue: str, span: str | None, shown: list[str]) -> str:
    """``glue`` less ``span``, the one span of the history that the history rendered before the new
    messages leaves out (:func:`~lightning_agents.rollout.agent_turn.moved_text`), where the glue
    writes it again in front of the new messages (Mistral's tool list): the token stream holds it
    once, where it was sampled, and grows by the new messages only. ``shown`` are the new messages'
    texts (:func:`_shown_texts`): where all are blank the glue is kept whole."""
    if not shown or not span or not span.strip() or span not in glue:
        return glue
    # in front of every new message: a span only a new message quotes is no text the template moved,
    # nor one the generation prompt writes after them (a last turn's empty think block)
    at = glue.find(span)
    rest = glue[at + len(span) :]
    return glue[:at] + rest if all(text in rest for text in shown) else glue


def _glue_less_moved_text(
    tokenizer, span: str | None, after: str, cut: int, shown: list[str], whole: tuple[list[dict[str, Any]], dict]
) -> str:
    """:func:`_less_moved_text`, with a warning once per chat template where it takes a span out, and
    once per template and system prompt where the template also writes text with the newest user
    message only (:func:`_written_while_last`), which the token stream keeps at every user message.
    ``span`` is what the history rendered before the new messages (``after[:cut]``) leaves out
    (:func:`~lightning_agents.rollout.agent_turn.moved_text`, ``None`` where no one span is), ``whole``
    the conversation with the new messages, as rendered, and the template's arguments."""
    glue = _less_moved_text(after[cut:], span, shown)
    if glue == after[cut:]:
        return glue
    _warn_once(
        _MOVED_TEXT,
        tokenizer,
        "the chat template moves text of an earlier message in front of a new user message (%r, Mistral's "
        "tool list): the RL token stream keeps it once, where the earlier turns were sampled, and not again "
        "before each new user message (a served request shows it once, before the last)",
        span[:60],
    )
    _warn_growth(tokenizer, after, shown, whole)
    return glue


#: True while :func:`run_agent_rl` glues a user's turn under ``rows="auto"``, which bounds the growth
#: itself (:data:`AUTO_ROW_GROWTH`): :func:`_warn_growth` then stays silent, and measures nothing, so
#: a later stream in the process still warns.
_GROWTH_BOUNDED: contextvars.ContextVar[bool] = contextvars.ContextVar("growth_bounded", default=False)


def _warn_growth(tokenizer, after: str, shown: list[str], whole: tuple[list[dict[str, Any]], dict]) -> None:
    """A warning where the template writes text with the newest user message only
    (:func:`_written_while_last`: Nemo's and v0.3's system prompt), which the token stream keeps at
    every user message. Warned once per template and system prompt; the growth comes from the one
    measured-growth cache (:func:`_measured_growth`) that ``rows="auto"`` reads too, so a template pays
    one measure per system prompt, tools and arguments, not one per turn. ``after`` is the conversation
    with the new messages as rendered with the generation prompt, ``shown`` the new messages' texts
    (:func:`_shown_texts`), ``whole`` the conversation with the new messages, as rendered, and the
    template's arguments (the tools among them)."""
    rendered, kwargs = whole
    system = rendered[0].get("content") if rendered and rendered[0].get("role") == "system" else None
    warned = (str(getattr(tokenizer, "chat_template", "")), str(system))
    if warned in _GROWTH_MEASURED or not shown or _GROWTH_BOUNDED.get():
        return
    grown = _measured_growth(tokenizer, rendered[0] if rendered else None, kwargs, shown[-1], lambda: (rendered, after))
    if grown is None:  # not measured: the next user turn measures again
        return
    _GROWTH_MEASURED.add(warned)
    if grown[0] > 0:
        logger.warning(
            "the chat template writes about %d tokens with the newest user message only (%r: Mistral Nemo's "
            "and v0.3's system prompt, v0.3's call instructions), which the RL token stream keeps at every "
            "user message, so the stream grows by about %d tokens per user turn beyond a served request and "
            "a long multi-turn episode (tau-bench) can outgrow the context; %s (docs/rstg.md)",
            grown[0],
            grown[1][:60],
            grown[0],
            _growth_advice(tokenizer, system, grown),
        )


def _growth_advice(tokenizer, system: Any, grown: tuple[int, str]) -> str:
    """What shortens the growth :func:`_written_while_last` measured (``grown``: tokens per user turn
    and the text written with the newest user message only), for the growth warning. Dropping the
    system prompt helps only by the system prompt's own tokens: on Nemo that is all of it, on v0.3
    part or none, as its template writes its call instructions there with or without a system prompt
    and tools; only another template saves the rest."""
    tokens, text = grown
    prompt = system.strip() if isinstance(system, str) else ""
    fix = (
        "lay the episode out in one row per user turn (RSTG's model.rl_rows: per_user_turn, or auto, its "
        "default, once the stream would outgrow the served request 1.5 times; run_agent_rl(rows=...)), or "
        "use Mistral Small 3.2's template (it writes its system prompt once, first)"
    )
    if prompt and prompt in text:
        own = tokens - len(tokenizer.encode(prompt, add_special_tokens=False))
        if own <= _SEPARATOR_TOKENS:
            return f"{fix} or no system prompt (its text in the first user message instead)"
        return (
            f"{fix}; no system prompt saves only its own ~{tokens - own} of them, the other ~{own} are the "
            "template's own text (v0.3's call instructions)"
        )
    return (
        f"{fix}; no system prompt does not help, this is the template's own text (v0.3's call instructions, "
        "written with or without a system prompt and tools)"
    )


class _GrowthUnmeasured(Exception):
    """:func:`_written_while_last` could not measure the growth; the message says why."""


def _written_while_last(
    tokenizer, rendered: list[dict[str, Any]], kwargs: dict, after: str, text: str
) -> tuple[int, str]:
    """How many tokens more the template writes for the conversation ``rendered`` (``after``, rendered
    with the generation prompt), up to the end of ``text`` (its last message's), while that message
    ends the conversation than once an assistant turn follows it, and where that text starts: what
    it writes with the last user message only (Nemo's and v0.3's system prompt), which the token
    stream keeps at every user message where a served request shows it once. The generation prompt,
    after ``text``, is left out: a longer one than the assistant turn's opener (Apriel's "Here are my
    reasoning steps:") is written once per turn, as served.

    Raises:
        _GrowthUnmeasured: the probe (an assistant turn after the conversation) does not render, or
            does not render ``text`` as ``after`` does.
    """
    probe = [*rendered, {"role": "assistant", "content": _GROWTH_PROBE}]
    try:
        later = render_chat_template(tokenizer, probe, tokenize=False, add_generation_prompt=False, **kwargs)
    except Exception as exc:  # noqa: BLE001 - only the growth measure needs the probe
        raise _GrowthUnmeasured(f"the conversation with an assistant turn after it does not render: {exc}") from exc
    at = later.find(_GROWTH_PROBE)
    if at < 0:
        raise _GrowthUnmeasured("the template does not render an assistant turn after the conversation")
    last, earlier = after, later[:at]
    ends = [t.rfind(text) for t in (last, earlier)]
    if min(ends) < 0:
        raise _GrowthUnmeasured("the template does not render the last message's text as given")
    last, earlier = last[: ends[0] + len(text)], earlier[: ends[1] + len(text)]
    tokens = len(tokenizer.encode(last, add_special_tokens=False)) - len(
        tokenizer.encode(earlier, add_special_tokens=False)
    )
    return max(tokens, 0), last[len(commonprefix([last, earlier])) :]


def _growth_key(tokenizer, first: dict[str, Any] | None, kwargs: dict[str, Any]) -> tuple[str, str, str, str]:
    """The key of :data:`_GROWS`: the chat template, the system prompt (``first``, the conversation's
    first message as rendered, :func:`text_content`), the tools and the other template arguments
    (``kwargs``, the tools among them)."""
    system = first.get("content") if first and first.get("role") == "system" else None
    rest = {k: v for k, v in kwargs.items() if k != "tools"}
    return (
        str(getattr(tokenizer, "chat_template", "")),
        str(system),
        json.dumps(kwargs.get("tools"), sort_keys=True, default=str),
        json.dumps(rest, sort_keys=True, default=str),
    )


def _measured_growth(
    tokenizer,
    first: dict[str, Any] | None,
    kwargs: dict[str, Any],
    text: str,
    conversation: Callable[[], tuple[list[dict[str, Any]], str]],
) -> tuple[int, str] | None:
    """The growth per user turn :func:`_written_while_last` measures (tokens, and the text written with
    the newest user message only), once per template, system prompt, tools and template arguments
    (:func:`_growth_key`; ``first`` the conversation's first message as rendered, ``kwargs`` the
    template's arguments with the tools): the growth warning and ``rows="auto"`` read the same cache.
    ``conversation`` gives the conversation as rendered and its render with the generation prompt,
    called only when the key is not measured yet; ``text`` is its last message's text.

    ``None`` where it cannot be measured (the template refuses the conversation or the probe): that is
    no verdict, so it is not cached and the next user turn measures again; the reason is logged once
    per key."""
    key = _growth_key(tokenizer, first, kwargs)
    if key in _GROWS:
        return _GROWS[key]
    try:
        rendered, after = conversation()
        grown = _written_while_last(tokenizer, rendered, kwargs, after, text)
    except Exception as exc:  # noqa: BLE001 - a conversation the template refuses: the stream's glue says why
        if key not in _GROWTH_UNMEASURED:
            _GROWTH_UNMEASURED.add(key)
            logger.info(
                "could not measure whether the chat template writes text with the newest user message only "
                "(%s); measured again at the next user turn",
                str(exc)[:200],
            )
        return None
    _GROWS[key] = grown
    return grown


_MOVED_TEXT: set[str] = set()
#: (chat template, system prompt) pairs whose growth per user turn the warning reported on (once each).
_GROWTH_MEASURED: set[tuple[str, str]] = set()
_GROWTH_PROBE = "Answer probed for what the template writes while a user message is last."
#: Tokens of growth a system prompt's own text leaves unexplained that are still only the separators
#: around it (Nemo's "\n\n" before the user's text), not text of the template's own.
_SEPARATOR_TOKENS = 16


def _appended_cut(before: str, after: str, marks: list[int], opened: bool, sampled_end: str | None) -> int:
    """Where the glue starts in ``after``, which extends ``before`` (the history as rendered).

    After the last end token only where it closes the last turn (ChatML's ``"<|im_end|>\n"``): a
    template that closes the turn with none of them (GLM-4.6 after a call) has the last one before
    the sampled turn, and the glue repeated the user's message and the call; so did a test sampler
    that wrote Solar-Open's ``<|end|>`` after ``<|calls|>``."""
    cut = len(before) if opened else (marks[-1] if marks else len(before))
    if cut == len(before) and sampled_end:
        # The model's stop token opens the next message here; Apriel-1.6 writes a newline
        # before it ("\n<|end|>\n"), which the model did not sample either.
        token_at = _BLANK.match(after, cut).end()
        if after.startswith(sampled_end, token_at):
            cut = token_at + len(sampled_end)
    return cut


def _call_turn_end(
    tokenizer, before: str, marks: list[int], messages: list[dict[str, Any]], limit: int | None, kwargs: dict
) -> int:
    """Where a last assistant turn of tool calls and no text ends in ``before``: at the first end
    token after its last call's name, where the model stopped. What the template writes after that
    token is glue: DeepSeek-R1-Distill-Qwen's template renders a call message's empty text as a
    message of its own after the calls (``<｜Assistant｜><｜end▁of▁sentence｜>``), which the glue left
    out, starting after its end token. ``len(before)`` where the turn has text or no calls."""
    last = messages[-1] if messages and messages[-1].get("role") == "assistant" else {}
    calls = last.get("tool_calls") or ()
    content = last.get("content")
    if not calls or (isinstance(content, str) and content.strip()):
        return len(before)
    try:  # the turn starts where the prompt it was sampled after ends (the tool list holds the name too)
        prompt = _render(tokenizer, list(messages[:-1]), limit, kwargs, prompt=True)
    except Exception:  # noqa: BLE001 - a template may refuse a history that ends without the turn
        return len(before)
    start = len(commonprefix([prompt, before]))
    name = str((calls[-1].get("function") or {}).get("name") or "")
    at = before.find(name, start) if name else -1  # Kimi-K2 writes the call's id, not its name: no cut
    return next((m for m in marks if m > at), len(before)) if at >= 0 else len(before)


def _warn_own_text_again(tokenizer, glue: str, new: list[dict[str, Any]], messages: list[dict[str, Any]]) -> str:
    """``glue`` as it is, with a warning (once per chat template) where it holds the last assistant
    turn's own text again after the new messages: Gemma 4's template writes a message's text after
    its calls' responses, in the same turn, so a model that wrote its text before its call has the
    text twice in the token stream: where it was sampled, and again after the results. The second
    is what follows the call in every served request (a chat request re-renders the history so, and
    a served model sees the text only there), and the trained stream is the sampled tokens plus the
    template's rendering of what follows them, so the glue keeps it (cutting it trained the model's
    next turn in a context no served request has)."""
    last = messages[-1] if messages and messages[-1].get("role") == "assistant" else {}
    content = last.get("content")
    text = _REASONING.sub("", content).strip() if isinstance(content, str) else ""
    if not last.get("tool_calls") or not text or not new:  # DeepSeek-V3.2's content may be a lone </think>
        return glue
    tail = text_content(new[-1], tokenizer=tokenizer).get("content")
    tail = tail.strip() if isinstance(tail, str) else ""
    shown_at = glue.rfind(tail) if tail else -1
    at = glue.find(text, shown_at + len(tail)) if shown_at >= 0 else -1
    if at >= 0:
        _warn_once(
            _TEXT_AFTER_RESULTS,
            tokenizer,
            "the chat template writes an assistant turn's text after its tool calls' results (Gemma 4), so a turn "
            "that wrote text before its call has that text twice in the token stream: where the model sampled it, "
            "and again after the results, where the template re-renders it (%r) as every served request does (a "
            "served model sees it only there)",
            glue[at:][:60],
        )
    return glue


_TEXT_AFTER_RESULTS: set[str] = set()


def _glue_without_reasoning(
    tokenizer,
    messages: list[dict[str, Any]],
    history: str | None,
    after: str,
    ends: list[str],
    limit: int | None,
    kwargs: dict,
    sampled_end: str | None,
) -> str | None:
    """The glue where the template drops the reasoning of the turns before a new user message by a
    rule of its own (Solar-Open writes an assistant's ``<|think|>`` message only after the last
    user message; gpt-oss drops the ``analysis`` channel of earlier turns), or ``None``.

    ``history`` is the history rendered with no reasoning (no ``reasoning_content``, ``reasoning`` or
    ``thinking`` key; :func:`_history_without_reasoning`, ``None`` where no message holds one); where
    ``after`` extends that rendering, the glue is what follows it there,
    exactly what the template writes for the new messages. The token stream keeps each turn as it
    was sampled, reasoning included (what the sampler saw, as with Qwen3's dropped ``<think>``).
    gpt-oss also closes its last answer with ``<|return|>`` (harmony's stop token) and renders it
    ``<|end|>`` once a message follows: the sampled ``<|return|>`` stands where the template writes
    ``<|end|>``, and the glue starts after it (a glue ``<|end|>`` after the sampled ``<|return|>``
    would be a second closer no rendering has); a turn that did not stop at ``<|return|>`` gets the
    template's ``<|end|>`` in its glue (that case :func:`continuation_text` reads first, from the
    same ``history``)."""
    if history is None:
        return None
    if not after.startswith(history):
        return None
    marks = _turn_ends(history, ends)
    opened = _open_tail(tokenizer, history, marks, _without_reasoning(messages, tokenizer), limit, kwargs)
    return after[_appended_cut(history, after, marks, opened, sampled_end) :]


def _history_without_reasoning(
    tokenizer, messages: list[dict[str, Any]], limit: int | None, kwargs: dict
) -> str | None:
    """``messages`` rendered without their reasoning (:func:`_without_reasoning`; no generation
    prompt), or ``None`` where none of them holds any."""
    plain = _without_reasoning(messages, tokenizer)
    if plain == messages:
        return None
    return _render(tokenizer, plain, limit, kwargs, prompt=False)


def _without_reasoning(messages: list[dict[str, Any]], tokenizer=None) -> list[dict[str, Any]]:
    """Copies of ``messages`` without their reasoning keys (``_REASONING_KEYS``) and, where the chat
    template of ``tokenizer`` splits an answer at Apriel's ``[BEGIN FINAL RESPONSE]``, an assistant
    text without what comes before that marker."""
    marked = tokenizer is not None and _FINAL_RESPONSE in str(getattr(tokenizer, "chat_template", "") or "")
    plain = [{k: v for k, v in m.items() if k not in _REASONING_KEYS} for m in messages]
    for message in plain:
        content = message.get("content")
        if marked and message.get("role") == "assistant" and isinstance(content, str) and _FINAL_RESPONSE in content:
            # as the template renders a turn that a message follows: `split(marker)[-1] | trim`
            message["content"] = content.split(_FINAL_RESPONSE)[-1].strip()
    return plain


#: Apriel-1.6's mark between a reply's reasoning and its response, in the reply's text: its template
#: renders a turn that a message follows from after the mark only (the reasoning dropped, as Qwen3 does).
_FINAL_RESPONSE = "[BEGIN FINAL RESPONSE]"


def _ends_with_final_closer(tokenizer, history: str) -> bool:
    """Whether ``history`` ends with the template's own closer of a conversation's last answer
    (gpt-oss's ``<|return|>``), the only history :func:`_final_closer_cut` reads."""
    from lightning_agents.datamodules.conversations import template_layout

    try:
        layout = template_layout(tokenizer)
    except Exception:  # noqa: BLE001 - a template the probe cannot read has no known final closer
        return False
    final, closer = layout.final_end_of_turn, layout.end_of_turn
    return bool(final and closer and final != closer and history.endswith(final))


def _final_closer_cut(tokenizer, history: str, after: str, sampled_end: str | None) -> int | None:
    """Where the glue starts when the template closes the last answer with its final token and
    re-renders it with its end-of-turn token once a message follows (gpt-oss: ``<|return|>``, then
    ``<|end|>``), or ``None`` for a template that does not. After the template's ``<|end|>`` when the
    model sampled ``<|return|>``: that token stands where the template writes ``<|end|>``, and a glue
    ``<|end|>`` after it would be a second closer no rendering has. Otherwise (a turn that stopped at
    no such token) the glue holds the template's ``<|end|>``."""
    from lightning_agents.datamodules.conversations import template_layout

    try:
        layout = template_layout(tokenizer)
    except Exception:  # noqa: BLE001 - a template the probe cannot read has no known final closer
        return None
    final, closer = layout.final_end_of_turn, layout.end_of_turn
    if not final or not closer or final == closer or not history.endswith(final):
        return None
    head = history[: -len(final)]
    if after.startswith(history) or not after.startswith(head + closer):
        return None
    return len(head) + (len(closer) if sampled_end == final else 0)


#: The message keys templates read an assistant turn's reasoning from (Qwen3, GLM; Solar-Open; gpt-oss).
_REASONING_KEYS = ("reasoning_content", "reasoning", "thinking")


def _first_difference(before: str, after: str) -> str:
    """The first place the history renders differently once new messages follow, for the refusal."""
    at = len(commonprefix([before, after]))
    return f"{after[max(0, at - 40) : at + 40]!r} where it was {before[max(0, at - 40) : at + 40]!r}"


def _open_tail(
    tokenizer, before: str, marks: list[int], messages: list[dict[str, Any]], limit: int | None, kwargs: dict
) -> bool:
    """Whether the last assistant turn of ``before`` lies after its last end token, the template
    closing that turn with none of them (GLM-4.6/4.7 after a call or an answer), so the glue must
    not start at that token: it would repeat the turn and what came before it.

    Decided from the template itself: the prompt the turn was sampled after is the history without
    it plus the generation prompt, and the turn is open when the last end token lies inside what
    that prompt and ``before`` share. Looking for the turn's text in the rendering missed GLM's
    reasoning, which the template re-renders stripped of its outer newlines. Where that prompt
    cannot be rendered, the text is looked for (:func:`_open_tail_probe`)."""
    if not marks or not before[marks[-1] :].strip():
        return False
    if len(messages) > 1 and messages[-1].get("role") == "assistant":
        try:
            prompt = _render(tokenizer, list(messages[:-1]), limit, kwargs, prompt=True)
        except Exception:  # noqa: BLE001 - a template may refuse a history that ends without the turn
            prompt = None
        if isinstance(prompt, str):
            return marks[-1] <= len(commonprefix([prompt, before]))
    return _open_tail_probe(before, marks, messages)


def _open_tail_probe(before: str, marks: list[int], messages: list[dict[str, Any]]) -> bool:
    """The fallback of :func:`_open_tail` where the prompt before the last turn cannot be rendered:
    the turn is open when the text after the last end token holds the turn's text, or its first
    call's name where the turn has one (raw text, so a template that reformats it is missed)."""
    tail = before[marks[-1] :]
    last = messages[-1] if messages and messages[-1].get("role") == "assistant" else {}
    content = last.get("content")
    calls = last.get("tool_calls") or ()
    probe = content.strip() if isinstance(content, str) else ""
    if not probe and calls:
        probe = str((calls[0].get("function") or {}).get("name") or "")
    return not probe or probe in tail


#: A reasoning block and the blank lines after it (Qwen3 drops it from turns before the latest query),
#: or the lone ``</think>`` GLM-4.7 leaves of an earlier turn's reasoning.
_REASONING = re.compile(r"(?:<think>.*?)?</think>\s*", re.DOTALL)
#: The whitespace a template writes before the next message's opener (skipped to find a sampled stop token).
_BLANK = re.compile(r"\s*")


def _check_shown(new: list[dict[str, Any]], glue: str, tokenizer=None) -> None:
    """Refuse glue that leaves out a new message's text: Phi-3.5's template renders no ``tool``
    messages, so every tool result vanished from the token stream and the model was trained on
    turns that never saw what its calls returned."""
    for message in new:
        # list-form text parts: joined as this template is given them, so as rendered
        content = text_content(message, tokenizer=tokenizer).get("content")
        if not isinstance(content, str) or not content.strip():
            continue
        text = content.strip()
        if not _rendered_in(text, glue):
            raise LightningAgentsError(
                f"the chat template does not render {message.get('role')!r} messages (it left out "
                f"{text[:60]!r}), so the model would continue without seeing them; use a template "
                "that renders tool results (multi-turn tool use needs one)"
            )


def _rendered_in(text: str, rendered: str) -> bool:
    """``text`` appears in ``rendered`` as is or JSON-escaped: Llama 3.1 writes a tool result
    through ``tojson``, Command R7B and ToolACE inside a JSON document, so quotes and newlines
    come out escaped."""
    escaped = (json.dumps(text)[1:-1], json.dumps(text, ensure_ascii=False)[1:-1])
    return text in rendered or any(e in rendered for e in escaped)


def _turn_ends(text: str, end_tokens: Sequence[str]) -> list[int]:
    """Positions just after each end-of-turn token in ``text``, in order."""
    return sorted({at + len(end) for end in end_tokens for at in _occurrences(text, end)})


def _occurrences(text: str, needle: str) -> list[int]:
    found, at = [], text.find(needle)
    while at >= 0:
        found.append(at)
        at = text.find(needle, at + len(needle))
    return found


def run_agent_rl(
    engine,
    task: Task,
    problems: Sequence[dict[str, Any]],
    num_samples: int,
    sampling: SamplingConfig,
    max_turns: int = 4,
    max_tool_calls: int = 8,
    batch_size: int = 64,
    seeds: Sequence[int] | None = None,
    rows: str = "stream",
    synced_gpus: bool | None = None,
) -> AgentBatch:
    """Run ``num_samples`` episodes per problem with per-token bookkeeping for RL.

    Every model turn is generated from the episode's exact token stream so far; the sampled tokens
    (with their sampling log-probs and entropies) are appended with loss mask 1, the environment's
    reply rendered by the chat template with loss mask 0. Limits and faults are observations:
    a call beyond ``max_tool_calls`` gets ``error: tool-call limit reached`` instead of running, a
    ``<tool_call>`` block that does not parse gets ``error: malformed tool call``, a tool's own
    error is its observation; an episode still calling tools after ``max_turns`` ends unfinished
    (reward 0), as does one whose turn was cut at ``max_new_tokens``.

    Args:
        engine: the sampler (:class:`HFGenerationEngine` or a vLLM engine); it must accept token-id prompts.
        task: a task with tools (:meth:`~lightning_agents.tasks.Task.environment`).
        problems: the problems (``id``, ``reference`` and what the world needs); a problem may carry
            its initial ``prompt`` messages, otherwise ``task.prompt(problem)`` is used. A rollout's
            ``info["verifier"]`` is the one the problem (an RL record) names, else
            :func:`problem_record_verifier`'s (for an RL record with ``prompt`` messages whose
            task's prompt needs a field it lacks, such as ``question``, the task-level
            :meth:`~lightning_agents.tasks.Task.verifier_spec`).
        num_samples: episodes per problem (G).
        sampling: sampling settings of every model turn.
        max_turns: model turns per episode.
        max_tool_calls: tool calls executed per episode.
        batch_size: episodes per ``generate`` call.
        seeds: one seed per problem: every model turn of episode ``k`` of that problem is sampled
            from a generator seeded with ``(seed, k, turn)``, so an episode does not depend on
            the other episodes, their batching or the global random state (``None``: the engine's
            own sampling).
        rows: :data:`RL_ROWS`. ``stream`` glues a user's next turn (BFCL's, a user simulator's)
            into the episode's one token stream. ``per_user_turn`` ends the episode's row there and
            opens a new one whose prompt is the served request (``engine.render`` of the whole
            conversation), so every user turn is sampled in the context a served request shows; the
            rows share the episode's reward. A malformed call's notice given as a user message
            (:func:`~lightning_agents.rollout.agent_turn.model_notice_role`) opens a row too.
            ``auto`` does that only where the template writes text with the newest user message only
            (:func:`_grows_per_user_turn`: the single stream keeps a copy per user turn, Nemo, v0.3)
            and the row, glued on, would be longer than :data:`AUTO_ROW_GROWTH` times the served
            request (a short system prompt stays in the stream, which costs far less than a prompt
            per row), or where the stream cannot take the user message at all.
        synced_gpus: passed to every ``generate`` call (HF engine) where not ``None``: ``False``
            keeps transformers from syncing the calls of a model under an FSDP wrapper that shards
            nothing (episodes make a data-dependent number of them per process).
    """
    from lightning_agents.errors import VerifierError
    from lightning_agents.rollout.seeding import derive_seed

    if seeds is not None and len(seeds) != len(problems):
        raise ValueError(f"run_agent_rl() got {len(seeds)} seeds for {len(problems)} problems")
    if rows not in RL_ROWS:
        raise ValueError(f"run_agent_rl() rows must be one of {list(RL_ROWS)}, got {rows!r}")

    if max_turns < 1 or max_tool_calls < 0 or num_samples < 1:
        raise ValueError(
            f"max_turns and num_samples must be >= 1 and max_tool_calls >= 0, got "
            f"{max_turns}, {num_samples}, {max_tool_calls}"
        )
    tok = engine.tokenizer
    template_kwargs = getattr(engine, "chat_template_kwargs", None) or {}
    style = model_tool_call_style(tok)
    per_turn = model_calls_per_turn(tok, template_kwargs)
    nine = model_needs_alphanumeric_ids(tok, template_kwargs)
    # the role of a malformed call's notice the template renders in order (a user message on Gemma 4)
    notice_role = model_notice_role(tok, template_kwargs)
    call_format = model_call_format(tok, template_kwargs)
    episodes: list[AgentEpisode] = []
    for index, problem in enumerate(problems):
        # An RL record's `prompt` is its messages; a task's own problem may keep its source row's
        # `prompt` string (HumanEval's stub), which is no conversation: the task builds that one.
        given = problem.get("prompt")
        messages = list(given) if isinstance(given, list) and given else task.prompt(problem)
        prompt_ids = None
        for k in range(num_samples):
            e = start_episode(
                task,
                problem,
                trial=k,
                messages=messages,
                max_tool_calls=max_tool_calls,
                tool_call_style=style,
                calls_per_turn=per_turn,
                alphanumeric_ids=nine,
                notice_role=notice_role,
                call_format=call_format,
            )
            # The tools the episode's world offers (a BFCL record's own), else the task's.
            tools = offered_tools(e, task.tools) or None
            if prompt_ids is None:
                prompt_ids = tok(engine.render(messages, tools), add_special_tokens=False)["input_ids"]
            # Token bookkeeping of the episode: the exact stream the trainer will score.
            e.extra.update(
                seed=None if seeds is None else seeds[index],
                prompt_ids=prompt_ids,
                tools=tools,
                ids=[],
                mask=[],
                logp=[],
                ent=[],
                rows=[],  # the rows closed at a user's turn (per user turn); the open one is the keys above
            )
            episodes.append(e)
    if any(e.extra["tools"] for e in episodes):
        # before any sampling: a template without a tool role would hide every result from the model
        check_renders_tool_results(tok, template_kwargs)
    # The turn ends the sampler stops at, as text for the glue between turns.
    stop_ids = list(getattr(engine, "stop_ids", [tok.eos_token_id]))
    end_tokens = [tok.decode([i]) for i in stop_ids]
    # a sampler that reports no entropies (vLLM) lays out none: RSTG then scores them itself (soft_or)
    # rather than read the zeros filled in below as the student's entropy
    entropies = True
    for turn in range(max_turns):
        active = [i for i, e in enumerate(episodes) if not e.finished]
        if not active:
            break
        for chunk in _chunks(active, batch_size):
            seeded = {}
            if seeds is not None:
                seeded["seeds"] = [derive_seed(episodes[i].extra["seed"], episodes[i].trial, turn) for i in chunk]
            if synced_gpus is not None:
                seeded["synced_gpus"] = synced_gpus
            out = engine.generate(
                [episodes[i].extra["prompt_ids"] + episodes[i].extra["ids"] for i in chunk],
                num_samples=1,
                sampling=sampling,
                **seeded,
            )
            entropies = entropies and out.entropies is not None
            for row, i in enumerate(chunk):
                e = episodes[i]
                x = e.extra
                n = int(out.completion_mask[row].sum())
                sampled = out.completion_ids[row, :n].tolist()
                x["ids"] += sampled
                x["mask"] += [1] * n
                x["logp"] += out.logprobs[row, :n].tolist()
                x["ent"] += out.entropies[row, :n].tolist() if out.entropies is not None else [0.0] * n
                # Cut at max_new_tokens: no complete turn to act on; the episode ends unanswered.
                cut = bool(out.truncated[row]) or not sampled
                # the engines hand a Solar-Open reply over with its marker tokens (decode_completions)
                step = apply_reply(e, ModelReply(out.texts[row], truncated=cut))
                # After an answer, the user's next turn when the task has one (BFCL), as the glue.
                answered = step.finished  # read before next_user_turn reopens the episode
                new = next_user_turn(task, e) if answered else step.replies
                if not new:
                    continue
                # a malformed call's notice given as a user message (Mistral's) takes the system prompt in
                # front of it as a user's turn does: a new row, where the one stream refused a second move
                said = answered or any(m.get("role") == "user" for m in new)
                if said and rows == "per_user_turn":
                    _open_row(tok, engine, e)
                    continue
                # the stop token the turn ended with, which may also open the next message (GLM-4.6)
                stopped = tok.decode([sampled[-1]]) if sampled and sampled[-1] in stop_ids else None
                bounded = _GROWTH_BOUNDED.set(rows == "auto")  # auto opens a row on growth: no warning
                try:
                    glue = continuation_text(
                        tok,
                        e.messages[: len(e.messages) - len(new)],
                        new,
                        x["tools"],
                        template_kwargs,
                        end_tokens,
                        stopped,
                    )
                except LightningAgentsError as error:
                    if not said:
                        raise
                    _unglued_user_turn(rows, tok, error)  # auto: the served request takes it, in a row
                    _open_row(tok, engine, e)
                    continue
                finally:
                    _GROWTH_BOUNDED.reset(bounded)
                glue_ids = tok(glue, add_special_tokens=False)["input_ids"]
                if said and rows == "auto":
                    served = _outgrown_row(tok, engine, template_kwargs, e, len(glue_ids))
                    if served is not None:
                        _open_row(tok, engine, e, served)
                        continue
                x["ids"] += glue_ids
                x["mask"] += [0] * len(glue_ids)
                x["logp"] += [0.0] * len(glue_ids)
                x["ent"] += [0.0] * len(glue_ids)
    rewards, rollouts = [], []
    # The verifier each rollout carries, which curate copies into the RL record it builds: the
    # problem's own, as run_agent_loop's rollouts carry (before session 43 the task-level spec, so a
    # record curated from a HumanEval rollout scored a right body-only answer 0, its rollout 1).
    # An RL record that names a `verifier` keeps it: its task built it from the whole problem, and
    # building it again from the record could be wrong or fail (no `question`: MATH's order rule
    # reads it, a calculator problem's prompt needs it). One naming none (`verifier: null`, as
    # read_prompt_records sets it) gets its problem's, as task.verify scored the rollout (a HumanEval
    # record keeps its entry_point and prompt_text): before session 43 the task-level spec, so such
    # a record rolled out at reward 1 and curated to a record scoring the same body 0. Only where
    # the task cannot build the record's prompt (a field RL records leave out, like `question`)
    # does it get the task-level spec.
    verifiers: dict[int, str | dict[str, Any]] = {}  # per problem: its episodes share the problem object
    for e in episodes:
        problem, world = e.problem, e.world
        if id(problem) not in verifiers:
            spec = problem.get("verifier")
            if not spec:
                try:
                    spec = problem_record_verifier(task, problem)
                except KeyError:
                    if not isinstance(problem.get("prompt"), list):
                        raise  # a task's own problem: its record must build
                    spec = task.verifier_spec()
            verifiers[id(problem)] = spec
        try:
            reward = score_episode(task, e)
        except VerifierError:
            reward = math.nan
        rewards.append(reward)
        info = {
            "question": problem.get("question"),
            "reference": problem.get("reference"),
            "verifier": verifiers[id(problem)],
            "task": class_path(task),
            "turns": e.turns,
            "finished": e.answered,
            "tool_errors": e.errors,
            "tool_calls": e.calls,
            "malformed_calls": e.malformed,
        }
        if world is not None and world.state() is not None:
            info["state"] = world.state()
        rollouts.append(
            {
                "task_id": problem["id"],
                "trial": e.trial,
                "reward": reward,
                "info": info,
                "tools": e.extra["tools"] or task.tools,
                "traj": e.messages,
            }
        )
    laid, row_episode = [], []
    for index, e in enumerate(episodes):
        # a row opened by the user's last turn when max_turns ran out holds no sampled token: it would
        # only cost the trainer a pass over its served prompt (and count towards the context check)
        last = [e.extra] if e.extra["ids"] or not e.extra["rows"] else []
        for row in [*e.extra["rows"], *last]:
            laid.append({**row, "answered": e.answered})  # an unanswered episode truncates all its rows
            row_episode.append(index)
    return AgentBatch(_layout(tok, laid, entropies), rewards, rollouts, row_episode)


#: The keys of an RL row: its prompt, its completion tokens, loss mask, log-probs and entropies.
_ROW_KEYS = ("prompt_ids", "ids", "mask", "logp", "ent")


def _open_row(tok, engine, episode: AgentEpisode, served: list[int] | None = None) -> None:
    """Close the episode's current row at a user's new turn and open the next one, prompted with the
    served request (``served``, else :func:`_served_ids`): the system prompt and v0.3's instructions
    in front of the newest user message only, as the template puts them."""
    x = episode.extra
    x["rows"].append({k: x[k] for k in _ROW_KEYS})
    served = _served_ids(tok, engine, episode) if served is None else served
    x.update(prompt_ids=served, ids=[], mask=[], logp=[], ent=[])


def _served_ids(tok, engine, episode: AgentEpisode) -> list[int]:
    """The served request of the episode's conversation so far: ``engine.render``, tokenized."""
    return tok(engine.render(episode.messages, episode.extra["tools"]), add_special_tokens=False)["input_ids"]


#: ``auto`` opens a row once the row, glued on, would be longer than this many times the served
#: request. A short system prompt written per user turn adds little, while a row per user turn costs
#: the whole conversation again as each row's prompt (12x the stream's tokens on a 30-turn tau-bench
#: replay with a 22-token system prompt); a long policy doubles the stream at the second user turn.
AUTO_ROW_GROWTH = 1.5


def _outgrown_row(tok, engine, kwargs: dict[str, Any], episode: AgentEpisode, glued: int) -> list[int] | None:
    """Under ``auto``: the served request to open a row with, where the template writes text with the
    newest user message only (:func:`_grows_per_user_turn`) and the current row with ``glued`` more
    tokens would exceed :data:`AUTO_ROW_GROWTH` times that request; else ``None`` (glue it on)."""
    x = episode.extra
    if not _grows_per_user_turn(tok, kwargs, episode.messages, x["tools"]):
        return None
    served = _served_ids(tok, engine, episode)
    return served if len(x["prompt_ids"]) + len(x["ids"]) + glued > AUTO_ROW_GROWTH * len(served) else None


def _unglued_user_turn(rows: str, tok, error: LightningAgentsError) -> None:
    """A user message (a user's turn, a malformed call's notice given as one) the one token stream
    cannot take (``error``): Mistral's templates write the tool list in front of every user message
    equal to the last one (``message == user_messages[-1]``), so a notice or user text repeated after
    another user message moves the list in two places. ``stream`` stops the batch, naming the setting
    that takes it; ``auto`` opens a row with the served request, warned once per template."""
    if rows == "stream":
        raise LightningAgentsError(
            f"{error}; this happened at a user message (a user's turn or a malformed call's notice): lay "
            "the episode out in one row per user turn, whose prompt is the served request (RSTG's "
            "model.rl_rows: per_user_turn or auto, run_agent_rl(rows='auto'))"
        ) from error
    template = str(getattr(tok, "chat_template", ""))
    if template not in _UNGLUED:
        _UNGLUED.add(template)
        logger.warning(
            "rl_rows auto: a user message the one token stream cannot take opens a row with the served request (%s)",
            str(error)[:200],
        )


#: Chat templates whose unglued user message was warned about (``auto``).
_UNGLUED: set[str] = set()


def _grows_per_user_turn(tok, kwargs: dict[str, Any], messages: list[dict[str, Any]], tools) -> bool:
    """Whether the chat template writes text with the newest user message only (Nemo's and v0.3's
    system prompt, v0.3's call instructions: :func:`_written_while_last` measures more than 0 tokens),
    so that one token stream holds that text once per user turn where a served request shows it once.
    ``messages`` ends with the user's new turn. Measured once per template, system prompt, tools and
    template arguments (:func:`_measured_growth`, the cache the growth warning reads), never once per
    turn; a turn where it cannot be measured (a blank user text, a conversation the template refuses)
    stays in the stream, and a later one measures again."""
    shown = _shown_texts(messages[-1:], tok)
    if not shown:
        return False
    args = {**kwargs, **({"tools": tools} if tools else {})}

    def conversation() -> tuple[list[dict[str, Any]], str]:
        several = any(len(m.get("tool_calls") or ()) > 1 for m in messages)
        rendered = template_messages(tok, messages, model_calls_per_turn(tok, kwargs) if several else None)
        return rendered, render_chat_template(tok, rendered, tokenize=False, add_generation_prompt=True, **args)

    first = text_content(messages[0], 0, tok) if messages else None
    grown = _measured_growth(tok, first, args, shown[-1], conversation)
    return grown is not None and grown[0] > 0


def user_turn_opens_row(
    tokenizer, chat_template_kwargs: dict[str, Any] | None, messages: list[dict[str, Any]], tools=None
) -> bool:
    """Whether ``rows="auto"`` (:data:`RL_ROWS`) gives a user's later turn after the conversation
    ``messages`` (a record's prompt) a row of its own: probed with an answer and a user turn after it
    (:func:`_grows_per_user_turn`, measured once per template, system prompt, tools and arguments)."""
    probe = [
        *messages,
        {"role": "assistant", "content": "Answer probed for the row layout."},
        {"role": "user", "content": "A later user turn probed for the row layout."},
    ]
    return _grows_per_user_turn(tokenizer, dict(chat_template_kwargs or {}), probe, tools or None)


#: (chat template, system prompt, tools, template arguments) -> the growth per user turn measured
#: (:func:`_measured_growth`): tokens, and the text written with the newest user message only.
_GROWS: dict[tuple[str, str, str, str], tuple[int, str]] = {}
#: :data:`_GROWS` keys whose growth could not be measured, the reason logged once each.
_GROWTH_UNMEASURED: set[tuple[str, str, str, str]] = set()


def _layout(tok, episodes, entropies: bool = True) -> GenerationOutput:
    """One left-padded prompt and right-padded completion per entry of ``episodes`` (the rows, each
    with :data:`_ROW_KEYS` and ``answered``); ``entropies`` ``False``: the sampler reported none, and
    the output's ``entropies`` is ``None``, as the sampler's own."""
    import torch

    pad = tok.pad_token_id
    rows = len(episodes)
    p_width = max(len(e["prompt_ids"]) for e in episodes)
    c_width = max(1, max(len(e["ids"]) for e in episodes))
    prompt_ids = torch.full((rows, p_width), pad, dtype=torch.long)
    prompt_mask = torch.zeros((rows, p_width), dtype=torch.long)
    ids = torch.full((rows, c_width), pad, dtype=torch.long)
    mask = torch.zeros((rows, c_width), dtype=torch.long)
    loss_mask = torch.zeros((rows, c_width), dtype=torch.long)
    logp = torch.zeros((rows, c_width), dtype=torch.float32)
    ent = torch.zeros((rows, c_width), dtype=torch.float32)
    for r, e in enumerate(episodes):
        p, n = e["prompt_ids"], len(e["ids"])
        prompt_ids[r, p_width - len(p) :] = torch.tensor(p)
        prompt_mask[r, p_width - len(p) :] = 1
        if n:
            ids[r, :n] = torch.tensor(e["ids"])
            mask[r, :n] = 1
            loss_mask[r, :n] = torch.tensor(e["mask"])
            logp[r, :n] = torch.tensor(e["logp"])
            ent[r, :n] = torch.tensor(e["ent"])
    texts = [tok.decode(e["ids"], skip_special_tokens=False) for e in episodes]
    truncated = torch.tensor([not e["answered"] for e in episodes])
    return GenerationOutput(
        prompt_ids=prompt_ids,
        prompt_mask=prompt_mask,
        completion_ids=ids,
        completion_mask=mask,
        logprobs=logp * loss_mask,
        texts=texts,
        truncated=truncated,
        entropies=ent * loss_mask if entropies else None,
        loss_mask=loss_mask,
    )
