"""One turn of a tool-using agent: the single implementation every multi-turn caller shares.

A turn takes the model's reply to an episode's conversation, parses its tool calls, runs them in the
episode's world and appends the assistant message and the tool observations. Faults never raise:
a ``<tool_call>`` block that does not parse gets ``error: malformed tool call``, a call beyond the
episode's tool-call limit gets ``error: tool-call limit (N) reached``, a tool's own failure is its
observation, and a reply cut at the length limit (or a model call that failed for good) ends the
episode unanswered. :func:`run_agent_loop`, :func:`run_agent_rl` (both in
:mod:`lightning_agents.rollout.agent_loop`) and HFlow's ``agent`` operator all advance episodes with
:func:`agent_turn` / :func:`apply_reply`, so a rollout and a workflow of the same model take the
same steps.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from os.path import commonprefix
from typing import Any

from lightning_agents.errors import LightningAgentsError
from lightning_agents.rollout.tool_calls import (
    MISTRAL_ARGS_CALL_FORMAT,
    alphanumeric_call_id,
    harmony_written_order,
    is_nine_character_id,
    is_notice,
    malformed_call,
    malformed_call_observation,
    parse_tool_calls,
    split_reasoning,
    tool_call_style,
)
from lightning_agents.tasks import Task, ToolWorld
from lightning_agents.template_clock import render_chat_template

logger = logging.getLogger(__name__)

__all__ = [
    "TOOL_CALL_LIMIT",
    "TOOL_CALL_LIMIT_NOTE",
    "TOOL_CALLS_PER_TURN",
    "AgentEpisode",
    "ModelReply",
    "TurnStep",
    "agent_turn",
    "apply_reply",
    "call_text",
    "check_renders_tool_results",
    "is_notice",
    "model_call_format",
    "model_calls_per_turn",
    "model_needs_alphanumeric_ids",
    "model_notice_role",
    "model_renders_tool_results",
    "model_tool_call_style",
    "moved_text",
    "next_user_turn",
    "offered_tools",
    "reply_message",
    "score_episode",
    "start_episode",
]


@dataclass
class ModelReply:
    """One model turn as a generator returned it.

    Args:
        text: the reply text; its ``<tool_call>`` blocks are parsed unless ``tool_calls`` is given.
        tool_calls: calls the server already parsed (OpenAI format, e.g. from ``message.tool_calls``);
            ``None`` parses them from ``text``.
        truncated: the reply hit the length limit without finishing.
        error: why the model call failed for good (``None``: it succeeded).
    """

    text: str
    tool_calls: list[dict[str, Any]] | None = None
    truncated: bool = False
    error: str | None = None


#: The observation of a call past ``max_tool_calls``, which was not run (a world's reward replays
#: only the calls it ran, see :mod:`lightning_agents.tasks.bfcl_world`), and the pattern that reads it.
TOOL_CALL_LIMIT = "error: tool-call limit ({limit}) reached; answer now"
TOOL_CALL_LIMIT_NOTE = re.compile(r"error: tool-call limit \(\d+\) reached; answer now")
#: The observation of a call beyond the ones a chat template can show in one turn (Llama 3.1/3.2
#: render one call per assistant message and raise on more), which was not run. ``{call}`` names it
#: (``calculator({"expression": "2+2"})``): on the text path the call is in no rendered message, so
#: the model could not tell which one to make again.
TOOL_CALLS_PER_TURN = "error: only {limit} tool call(s) per turn; {call} was not run, call it again"


def call_text(call: dict[str, Any]) -> str:
    """A tool call as ``name(arguments JSON)``, the way an observation names it."""
    fn = call.get("function") or {}
    arguments = fn.get("arguments")
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments if arguments is not None else {}, ensure_ascii=False)
    return f"{fn.get('name')}({arguments})"


@dataclass
class AgentEpisode:
    """The state of one episode: its conversation, its world and its counters.

    Args:
        problem: the task problem being solved.
        messages: the OpenAI-format conversation so far (mutated in place by every turn).
        world: the episode's own world (``None``: a task without tools; the first reply ends it).
        trial: index of the episode among those of the same problem.
        max_tool_calls: tool calls executed in this episode (``None``: no limit); later calls get
            an error observation instead of running.
        tool_call_style: how the model writes tool calls (its chat template's format; see
            :func:`~lightning_agents.rollout.tool_calls.parse_tool_calls`).
        calls_per_turn: tool calls the model's chat template can render in one assistant message
            (:func:`model_calls_per_turn`; ``None``: any number). Calls beyond it get
            :data:`TOOL_CALLS_PER_TURN` instead of running and stay out of the assistant message.
        alphanumeric_ids: the chat template takes only nine-character alphanumeric call ids
            (:func:`model_needs_alphanumeric_ids`): ids the rollout writes take that form. ``None``:
            as the tool-call style writes them (``mistral``'s are of that form).
        notice_role: the role of the message that answers a malformed call in a turn that shows no
            call (:func:`model_notice_role`): ``"tool"``, or ``"user"`` where the chat template
            renders no such tool message or refuses the role order it makes (Gemma 4, Ministral-3
            Reasoning, Mistral Nemo, v0.3 and Small 3.2).
        call_format: how the malformed call's notice tells the model to write a call, where its chat
            template writes them in a form of its own within the style (:func:`model_call_format`:
            Mistral Small 3.2's ``[TOOL_CALLS]NAME[ARGS]{...}``); ``None``: the style's own.
    """

    problem: dict[str, Any]
    messages: list[dict[str, Any]]
    world: ToolWorld | None = None
    trial: int = 0
    max_tool_calls: int | None = None
    tool_call_style: str = "hermes"
    calls_per_turn: int | None = None
    alphanumeric_ids: bool | None = None
    notice_role: str = "tool"
    call_format: str | None = None
    #: model turns taken
    turns: int = 0
    #: tool calls executed (limit refusals and malformed blocks do not count)
    calls: int = 0
    #: error observations (tool errors, malformed calls, limit refusals)
    errors: int = 0
    #: malformed tool calls
    malformed: int = 0
    #: the episode has ended (a reply without calls, a cut reply, or a failed call)
    finished: bool = False
    #: it ended without a complete reply (cut at the length limit, or the model call failed)
    truncated: bool = False
    #: why the last model call failed, if it did
    error: str | None = None
    #: free per-caller data (token bookkeeping of RL rollouts)
    extra: dict[str, Any] = field(default_factory=dict)
    #: a call turn's text before its calls that its message does not hold as content, by the turn's
    #: index in ``messages``: gpt-oss's preamble, folded into ``thinking`` (the template refuses a call
    #: message with both), which transcripts show as the agent's words (HFlow's ``episode_transcript``)
    preambles: dict[int, str] = field(default_factory=dict)

    @property
    def answered(self) -> bool:
        """The episode ended with a complete reply that calls no tool (it can be scored)."""
        return self.finished and not self.truncated

    def reopen(self) -> None:
        """Let the episode take more turns (a follow-up user message was appended)."""
        self.finished, self.truncated, self.error = False, False, None


@dataclass
class TurnStep:
    """What one turn did to one episode.

    Args:
        episode: the episode (already updated).
        text: the model's raw reply.
        assistant: the assistant message appended.
        replies: the tool messages appended after it (empty when the turn ended the episode); a
            malformed call's notice may be a ``user`` message (:func:`model_notice_role`).
        malformed: the reply held a ``<tool_call>`` block that did not parse.
    """

    episode: AgentEpisode
    text: str
    assistant: dict[str, Any]
    replies: list[dict[str, Any]]
    malformed: bool = False

    @property
    def finished(self) -> bool:
        """The turn ended the episode."""
        return self.episode.finished


def start_episode(
    task: Task,
    problem: dict[str, Any],
    trial: int = 0,
    messages: list[dict[str, Any]] | None = None,
    max_tool_calls: int | None = None,
    tool_call_style: str = "hermes",
    calls_per_turn: int | None = None,
    alphanumeric_ids: bool | None = None,
    notice_role: str = "tool",
    call_format: str | None = None,
) -> AgentEpisode:
    """A new episode of ``problem``: a fresh world from the task and the task's prompt.

    Args:
        task: the task (:meth:`~lightning_agents.tasks.Task.prompt` and
            :meth:`~lightning_agents.tasks.Task.environment`).
        problem: the problem.
        trial: the episode's index among those of the problem.
        messages: the opening messages (default ``task.prompt(problem)``); copied.
        max_tool_calls: tool calls executed per episode (``None``: no limit).
        tool_call_style: how the model writes tool calls (:func:`model_tool_call_style` of its tokenizer).
        calls_per_turn: tool calls its chat template renders per assistant message
            (:func:`model_calls_per_turn`; ``None``: any number).
        alphanumeric_ids: its chat template takes only nine-character alphanumeric call ids
            (:func:`model_needs_alphanumeric_ids`; ``None``: as the tool-call style writes them).
        notice_role: the role of a malformed call's notice in a turn without calls
            (:func:`model_notice_role`).
        call_format: how a malformed call's notice says calls are written (:func:`model_call_format`;
            ``None``: the tool-call style's own form).
    """
    if max_tool_calls is not None and max_tool_calls < 0:
        raise LightningAgentsError(f"max_tool_calls must be >= 0 or None, got {max_tool_calls}")
    if notice_role not in _NOTICE_ROLES:
        raise LightningAgentsError(f"notice_role must be one of {list(_NOTICE_ROLES)}, got {notice_role!r}")
    opening = task.prompt(problem) if messages is None else messages
    return AgentEpisode(
        problem=problem,
        messages=[dict(m) for m in opening],
        world=task.environment(problem),
        trial=trial,
        max_tool_calls=max_tool_calls,
        tool_call_style=tool_call_style,
        calls_per_turn=calls_per_turn,
        alphanumeric_ids=alphanumeric_ids,
        notice_role=notice_role,
        call_format=call_format,
    )


def model_calls_per_turn(tokenizer: Any, chat_template_kwargs: dict[str, Any] | None = None) -> int | None:
    """1 when the model's chat template renders one tool call per assistant message and refuses
    more (Llama 3.1/3.2 raise "This model only supports single tool-calls at once!"), else ``None``
    (any number, or a template that cannot be probed).

    A reply with two calls was appended as it came, so rendering the next turn raised and the whole
    rollout batch stopped on one sample's reply.
    """
    if tokenizer is None or not getattr(tokenizer, "chat_template", None):
        return None

    def render(n: int) -> bool:
        calls = [
            {"id": f"c{i}", "type": "function", "function": {"name": "probe", "arguments": {"x": i}}} for i in range(n)
        ]
        conversation = [
            {"role": "user", "content": "probe"},
            {"role": "assistant", "content": "", "tool_calls": calls},
            *({"role": "tool", "tool_call_id": c["id"], "name": "probe", "content": "ok"} for c in calls),
        ]
        try:
            render_chat_template(
                tokenizer, conversation, tokenize=False, add_generation_prompt=True, **dict(chat_template_kwargs or {})
            )
        except Exception:  # noqa: BLE001 - any refusal of the template is what is being probed
            return False
        return True

    return 1 if render(1) and not render(2) else None


#: The text of the probe's tool result, and the probe's tool (some templates need ``tools`` to
#: render a call at all: Hermes, Command R+).
_RESULT_MARKER = "lightning-agents tool result probe 4817"
#: The shortest id the rollouts write (``call_{turn}_{i}``), and one Mistral's templates take.
_ROLLOUT_ID, _NINE_ID = "call_0_0", "a1b2c3d4e"
_PROBE_TOOL = {
    "type": "function",
    "function": {
        "name": "probe",
        "description": "probe",
        "parameters": {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]},
    },
}
_RENDERS_RESULTS: dict[tuple[str, str, str, str], bool | None] = {}


def model_renders_tool_results(tokenizer: Any, chat_template_kwargs: dict[str, Any] | None = None) -> bool | None:
    """Whether the model's chat template renders ``tool`` messages: ``False`` when a tool result
    is left out of the prompt (Phi-3.5's template has no tool role and renders
    ``<|assistant|>\n<|end|>`` for the whole exchange), ``None`` when the template cannot be probed
    (no template, or it refuses every probe conversation), else ``True``.

    The answer is cached per template, its bos/eos and ``chat_template_kwargs``: rollouts call it
    once per run, HFlow once per node.
    """
    key = _template_key(tokenizer, chat_template_kwargs)
    if key is None:
        return None
    if key not in _RENDERS_RESULTS:
        # a 9-character alphanumeric id: Mistral's templates refuse any other
        text = _probe_render(tokenizer, chat_template_kwargs, _NINE_ID, _RESULT_MARKER)
        _RENDERS_RESULTS[key] = None if text is None else _RESULT_MARKER in text
    return _RENDERS_RESULTS[key]


def _template_key(tokenizer: Any, chat_template_kwargs: dict[str, Any] | None) -> tuple[str, str, str, str] | None:
    """The cache key of a template probe (the template, its bos/eos and ``chat_template_kwargs``);
    ``None`` when the tokenizer has no template to probe."""
    template = getattr(tokenizer, "chat_template", None) if tokenizer is not None else None
    if not template:
        return None
    return (
        str(template),
        str(getattr(tokenizer, "bos_token", None)),
        str(getattr(tokenizer, "eos_token", None)),
        json.dumps(dict(chat_template_kwargs or {}), sort_keys=True, default=str),
    )


def _probe_render(tokenizer: Any, kwargs: dict[str, Any] | None, call_id: str, result: str) -> str | None:
    """The text of a one-call conversation (call ``call_id``, its result ``result``) as the
    template renders it, with ``tools`` and then without; ``None`` when it refuses both."""
    from lightning_agents.rollout.hf_engine import template_arguments

    kwargs = dict(kwargs or {})
    call = {"id": call_id, "type": "function", "function": {"name": "probe", "arguments": '{"x": 1}'}}
    conversation = [
        {"role": "user", "content": "probe"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call_id, "name": "probe", "content": result},
    ]
    conversation = template_arguments(tokenizer, conversation)
    for extra in ({"tools": [_PROBE_TOOL]}, {}):
        try:
            return render_chat_template(
                tokenizer, conversation, tokenize=False, add_generation_prompt=True, **{**kwargs, **extra}
            )
        except Exception:  # noqa: BLE001 - a template that refuses the probe: try the next form
            continue
    return None


_ALPHANUMERIC_IDS: dict[tuple[str, str, str, str], bool | None] = {}


def model_needs_alphanumeric_ids(tokenizer: Any, chat_template_kwargs: dict[str, Any] | None = None) -> bool | None:
    """Whether the model's chat template refuses the call ids rollouts write (``call_0_0``) and
    renders nine-character alphanumeric ones: Mistral's templates raise "Tool call IDs should be
    alphanumeric strings with length 9!" (vLLM's Mistral v0.3 template "length >= 9"), which
    stopped the batch at the first turn with a call. ``None``: not known (no template, or it
    refuses both). Cached per template, its bos/eos and ``chat_template_kwargs``.
    """
    key = _template_key(tokenizer, chat_template_kwargs)
    if key is None:
        return None
    if key not in _ALPHANUMERIC_IDS:
        if _probe_render(tokenizer, chat_template_kwargs, _ROLLOUT_ID, "ok") is not None:
            _ALPHANUMERIC_IDS[key] = False
        else:
            _ALPHANUMERIC_IDS[key] = (
                True if _probe_render(tokenizer, chat_template_kwargs, _NINE_ID, "ok") is not None else None
            )
    return _ALPHANUMERIC_IDS[key]


_CALL_FORMAT: dict[tuple[str, str, str, str], str | None] = {}


def model_call_format(tokenizer: Any, chat_template_kwargs: dict[str, Any] | None = None) -> str | None:
    """How a malformed call's notice tells the model to write a call, where its chat template writes
    them in a form of its own within its tool-call style, else ``None`` (the style's own form,
    :func:`~lightning_agents.rollout.tool_calls.malformed_call_observation`).

    The ``mistral`` style reads v3's ``[TOOL_CALLS][{"name": ..., "arguments": {...}}]`` (Nemo, v0.3)
    and ``[TOOL_CALLS]NAME[ARGS]{...}`` (Small 3.2, Devstral, Ministral 3) alike, and its notice
    named v3's form on every Mistral template: a template that renders a call with ``[ARGS]`` gets
    :data:`~lightning_agents.rollout.tool_calls.MISTRAL_ARGS_CALL_FORMAT`. A ``json_after:<tag>``
    template that closes its list of calls with the tag's closer (Apriel-1.6's
    ``<tool_calls>[...]</tool_calls>``) gets that form, closer included: the style's own hint names
    only the opening tag, which is not the form the template (and its system prompt) teaches.
    Decided by rendering one call, cached per template, its bos/eos and ``chat_template_kwargs``.
    """
    key = _template_key(tokenizer, chat_template_kwargs)
    if key is None:
        return None
    if key not in _CALL_FORMAT:
        if _MISTRAL_CALLS in key[0]:
            # a nine-character id first: Mistral's templates refuse any other
            rendered = (
                _probe_render(tokenizer, chat_template_kwargs, _NINE_ID, "ok")
                or _probe_render(tokenizer, chat_template_kwargs, _ROLLOUT_ID, "ok")
                or ""
            )
            written = _MISTRAL_CALLS in rendered and _MISTRAL_ARGS in rendered
            _CALL_FORMAT[key] = MISTRAL_ARGS_CALL_FORMAT if written else None
        else:
            tag = _tagged_list_tag(_probe_render(tokenizer, chat_template_kwargs, _NINE_ID, "ok") or "")
            # only where the parser reads calls after that very tag: a template writing its tool list as a
            # tagged list after the call, and its calls another way, must not get the list's tag named
            tagged = tag is not None and model_tool_call_style(tokenizer) == f"json_after:<{tag}>"
            _CALL_FORMAT[key] = _TAGGED_LIST_FORM.format(tag=tag) if tagged else None
    return _CALL_FORMAT[key]


#: A JSON list of calls right after an opening XML tag, as a template renders the probe's call.
_TAGGED_LIST = re.compile(r'<([A-Za-z_][\w.\-]*)>(\[\s*\{\s*"name"\s*:\s*"probe")')


#: The call form a notice names for a template that writes its calls as a JSON list inside ``<tag>``.
_TAGGED_LIST_FORM = '<{tag}>[{{"name": ..., "arguments": {{...}}}}]</{tag}>'


def _tagged_list_tag(rendered: str) -> str | None:
    """The ``tag`` where ``rendered`` (the probe's call as the template writes it) holds the call's
    JSON list between ``<tag>`` and ``</tag>``, else ``None``."""
    # the last one: the call comes after the tool list, which some templates write in a tag as well
    # (Nemotron Nano 2's <AVAILABLE_TOOLS>[...])
    found = next(reversed(list(_TAGGED_LIST.finditer(rendered))), None)
    if found is None:
        return None
    try:
        _, end = json.JSONDecoder().raw_decode(rendered, found.start(2))
    except ValueError:  # not one JSON list (a template that writes its calls some other way)
        return None
    tag = found.group(1)
    if not rendered[end:].lstrip().startswith(f"</{tag}>"):
        return None
    return tag


_MISTRAL_CALLS, _MISTRAL_ARGS = "[TOOL_CALLS]", "[ARGS]"


#: The roles a malformed call's notice may take, in the order they are tried.
_NOTICE_ROLES = ("tool", "user")
#: The probe's text of a malformed call, of its notice, of an answer and of a user's next turn.
_PROBE_BAD, _PROBE_NOTICE, _PROBE_ANSWER, _PROBE_NEXT = (
    "lightning-agents botched call probe 5023",
    "lightning-agents malformed call notice probe 6131",
    "lightning-agents answer probe 7243",
    "lightning-agents next user turn probe 8359",
)
_NOTICE_ROLE: dict[tuple[str, str, str, str], str] = {}


def model_notice_role(tokenizer: Any, chat_template_kwargs: dict[str, Any] | None = None) -> str:
    """The role of the message that answers a malformed call in a turn that shows no call
    (:func:`apply_reply`): ``"tool"``, as before, where the chat template renders such a tool
    message and keeps rendering once an answer and a user's next turn follow; else ``"user"``
    where it does that for a user message; else ``"tool"`` (no template, or it refuses both).

    Gemma 4's template renders only the tool messages after a turn with calls, so the notice was
    left out and the RL glue stopped the whole batch ("does not render 'tool' messages");
    Ministral-3 Reasoning's counts an assistant turn without calls as one of the user/assistant
    turns that must alternate, so the answer after the notice and a user's next turn raised; so do
    Mistral Nemo's, v0.3's and Small 3.2's (a second botched reply raised too, and SFT refused the
    stored episode), whose user notice takes their tool list in front of it (:func:`moved_text`).
    Decided by rendering, cached per template, its bos/eos and ``chat_template_kwargs``.
    """
    key = _template_key(tokenizer, chat_template_kwargs)
    if key is None:
        return "tool"
    if key not in _NOTICE_ROLE:
        shown = (role for role in _NOTICE_ROLES if _renders_notice(tokenizer, chat_template_kwargs, role))
        _NOTICE_ROLE[key] = next(shown, "tool")
    return _NOTICE_ROLE[key]


def _renders_notice(tokenizer: Any, kwargs: dict[str, Any] | None, role: str) -> bool:
    """Whether the template shows a notice of ``role`` after an assistant turn without calls, both
    as the last message and with an answer and a user's next turn after it; a ``user`` notice must
    also leave the turns before it as they were rendered, or only move text of theirs in front of
    itself (:func:`moved_text`: Mistral Nemo's, v0.3's and Small 3.2's tool list goes to the last
    user message; the RL token stream keeps it once, where the history had it)."""
    notice = {"role": role, "content": _PROBE_NOTICE}
    if role == "tool":
        # a nine-character id: Mistral's templates refuse any other
        notice.update(tool_call_id=_NINE_ID, name="invalid")
    head = [{"role": "user", "content": "probe"}, {"role": "assistant", "content": _PROBE_BAD}]
    later = [*head, notice, {"role": "assistant", "content": _PROBE_ANSWER}, {"role": "user", "content": _PROBE_NEXT}]
    for extra in ({"tools": [_PROBE_TOOL]}, {}):
        options = {**dict(kwargs or {}), **extra}
        try:
            before = render_chat_template(tokenizer, head, tokenize=False, **options)
            first = render_chat_template(tokenizer, [*head, notice], tokenize=False, **options)
            prompt = render_chat_template(
                tokenizer, [*head, notice], tokenize=False, add_generation_prompt=True, **options
            )
            second = render_chat_template(tokenizer, later, tokenize=False, add_generation_prompt=True, **options)
        except Exception:  # noqa: BLE001 - a template that refuses the probe: try the next form
            continue
        shown = _PROBE_NOTICE in prompt and _PROBE_NOTICE in second and _PROBE_NEXT in second
        # the turns before the notice must render as before up to the botched reply's text; the token
        # closing it may change (gpt-oss closes a last answer with <|return|>, an earlier one with
        # <|end|>: the RL glue takes that swap), text moved in front of it only where the notice's
        # rendering writes it again (Mistral's tool list, which the RL glue then leaves out)
        upto = before.rfind(_PROBE_BAD) + len(_PROBE_BAD)
        kept = upto >= len(_PROBE_BAD) and (first[:upto] == before[:upto] or _moved_in_front(before[:upto], first))
        return shown and (role == "tool" or kept)
    return False


def _moved_in_front(history: str, rendered: str) -> bool:
    """Whether ``rendered`` (the history and a notice) shows ``history`` up to the botched reply
    less one span that it writes again after that reply (:func:`moved_text`)."""
    upto = rendered.find(_PROBE_BAD) + len(_PROBE_BAD)
    span = moved_text(history, rendered[:upto]) if upto >= len(_PROBE_BAD) else None
    return span is not None and span in rendered[upto:]


def moved_text(history: str, shown: str) -> str | None:
    """The one span of ``history`` that ``shown`` leaves out, all else equal (``history`` is ``shown``
    with it put back at one place), or ``None`` where no single span is missing.

    Mistral Nemo's, v0.3's and Small 3.2's templates write the tool list in front of the last user
    message only, so once a user message follows (a malformed call's notice, a user's next turn) the
    history renders without the list where it stood: that list is the span. The span found is the
    leftmost such one (``[AVAILABLE_TOOLS]...[/AVAILABLE_TOOLS][`` may come out as
    ``AVAILABLE_TOOLS]...[/AVAILABLE_TOOLS][``: removing either leaves the same text).
    """
    extra = len(history) - len(shown)
    if extra <= 0:
        return None
    at = len(commonprefix([history, shown]))
    return history[at : at + extra] if history[at + extra :] == shown[at:] else None


def check_renders_tool_results(tokenizer: Any, chat_template_kwargs: dict[str, Any] | None = None) -> None:
    """Refuse a model whose chat template drops tool results (:func:`model_renders_tool_results`
    is ``False``) before any sampling: it would continue every episode without seeing what its
    calls returned, while the rollout's ``traj`` records the results as if it had.

    Raises:
        LightningAgentsError: the template renders no ``tool`` messages.
    """
    if model_renders_tool_results(tokenizer, chat_template_kwargs) is False:
        name = getattr(tokenizer, "name_or_path", "") or "the model"
        raise LightningAgentsError(
            f"{name}: the chat template does not render 'tool' messages (a tool result is left out of the "
            "prompt), so the model would continue without seeing what its calls returned; use a template "
            "that renders tool results (multi-turn tool use needs one)"
        )


def model_tool_call_style(tokenizer: Any) -> str:
    """The tool-call format a model writes: the one its chat template renders calls in, else the one
    its tokenizer's special tokens name (LFM2's ``<|tool_call_start|>``), else ``hermes`` (with a
    warning, once per model, when the template renders no calls; none without a template)."""
    from lightning_agents.datamodules.conversations import template_layout

    if tokenizer is None or not getattr(tokenizer, "chat_template", None):
        return "hermes"
    # LFM2's templates render no calls: its tokenizer's <|tool_call_start|> token names the style
    special_tokens = tokenizer.get_added_vocab() if hasattr(tokenizer, "get_added_vocab") else ()
    try:
        opener = template_layout(tokenizer).tool_call_opener
    except Exception:  # noqa: BLE001 - a template that cannot be probed: the default convention
        opener = None
    style = tool_call_style(opener, special_tokens)
    name = getattr(tokenizer, "name_or_path", "") or "the model"
    key = (name, str(tokenizer.chat_template))
    if opener is None and style == "hermes" and key not in _GUESSED:
        # Granite 3.x and Phi-4-mini's own templates render no calls: the format is a guess, and a
        # model that writes another one has every call taken for its final answer
        _GUESSED.add(key)
        logger.warning(
            "%s: the chat template renders no tool calls, so the format of this model's calls is not "
            "known; they are read as hermes <tool_call>{json}</tool_call> blocks",
            name,
        )
    return style


_GUESSED: set[tuple[str, str]] = set()


def apply_reply(episode: AgentEpisode, reply: ModelReply) -> TurnStep:
    """Act on one model reply: append it, run its tool calls, append their observations.

    This is the body of a turn (everything after generation). The episode ends on a reply
    without calls (or any reply when there is no world), on a reply cut at the length limit and on a
    failed model call; otherwise it continues with the observations appended.
    """
    turn = episode.turns
    episode.turns += 1
    # Reasoning whose delimiters are special tokens (Solar-Open's, gpt-oss's analysis, which the engines
    # hand over with them) is kept apart from the answer, under the key the template renders it from; calls an
    # engine parsed itself come with the server's content.
    reasoning, text = (
        ("", reply.text) if reply.tool_calls is not None else split_reasoning(reply.text, episode.tool_call_style)
    )
    thought = _thought(episode.tool_call_style, reasoning)
    if reply.error is not None or reply.truncated:
        # No complete turn to act on: the episode ends unanswered (scored 0).
        assistant = (
            {"role": "assistant", "content": text}
            if reply.tool_calls is not None
            else _unacted(reasoning, text, episode.tool_call_style)
        )
        episode.messages.append(assistant)
        episode.finished, episode.truncated, episode.error = True, True, reply.error
        return TurnStep(episode, reply.text, assistant, [])
    nine = episode.alphanumeric_ids if episode.alphanumeric_ids is not None else episode.tool_call_style == "mistral"
    if reply.tool_calls is not None:
        content, calls = (reply.text or "").strip(), [dict(c) for c in reply.tool_calls]
    else:
        # The world's schemas type the text values of XML-style calls (Qwen3-Coder's "3" for an integer).
        schemas = episode.world.tools if episode.world is not None else None
        content, calls = parse_tool_calls(
            text, id_prefix=f"call_{turn}", style=episode.tool_call_style, tools=schemas, keep_refused_ids=nine
        )
    # A botched block beside good ones is reported too: the good calls run, and the model is told
    # the other was not read (left unreported, it trained the model that a broken call is fine).
    malformed = malformed_call(content, episode.tool_call_style)
    earlier = _episode_ids(episode.messages)
    refused = _refused_written_ids(calls, reply) if nine else []
    repeated = [] if refused else _repeated_written_ids(calls, reply, earlier, episode.tool_call_style, nine)
    rule = ""
    if refused:
        rule = f"a call's id is nine letters or digits, not {refused[0]!r}"
    elif repeated:
        rule = f"a call's id must be new in the episode, not {repeated[0]!r}"
    if rule:
        # The model wrote an id its template refuses (Nemo's `"id": "call_1"`), or one an earlier
        # call of the episode has, on a template that shows it: renamed, the call's result would
        # answer another id than the sampled one in the trained tokens (and SFT of the stored
        # trajectory would train the new id as the model's), so the call is not run and is
        # answered as malformed, with the id rule (as a botched block is).
        content, calls, malformed = (text or "").strip(), [], True
    if (not calls and not malformed) or episode.world is None:
        assistant = {"role": "assistant", "content": content, **thought}
        episode.messages.append(assistant)
        episode.finished = True
        return TurnStep(episode, reply.text, assistant, [])
    if reply.tool_calls is None and episode.tool_call_style not in _PER_MESSAGE_IDS:
        calls = _unique_in_episode(calls, earlier, turn, nine)
    if nine:
        calls = _alphanumeric_ids(calls, turn, earlier)
    assistant = {"role": "assistant", "content": content, **thought}
    shown = calls if episode.calls_per_turn is None else calls[: episode.calls_per_turn]
    preamble = None
    if shown:
        assistant["tool_calls"] = shown
        if episode.tool_call_style == "harmony":
            preamble = _one_analysis(assistant, reply.text)
    replies = []
    for index, call in enumerate(calls):
        name = call["function"]["name"]
        limit = episode.max_tool_calls
        if index >= len(shown):
            # The template cannot show this call in the assistant message, so it is not run.
            observation = TOOL_CALLS_PER_TURN.format(limit=episode.calls_per_turn, call=call_text(call))
            is_error = True
        elif limit is not None and episode.calls >= limit:
            observation, is_error = TOOL_CALL_LIMIT.format(limit=limit), True
        else:
            observation, is_error = episode.world.execute(name, call["function"]["arguments"])
            episode.calls += 1
        episode.errors += bool(is_error)
        replies.append({"role": "tool", "tool_call_id": call["id"], "name": name, "content": observation})
    if malformed:
        episode.malformed += 1
        episode.errors += 1
        notice = malformed_call_observation(episode.tool_call_style, episode.call_format) + (
            f"; {rule}" if rule else ""
        )
        if not shown and episode.notice_role == "user":
            # The template shows no tool message after a turn without calls (Gemma 4), or refuses
            # the role order one makes (Ministral-3 Reasoning, Mistral): a user message it renders in order.
            replies.append({"role": "user", "content": notice})
        else:
            call_id = (
                _fresh_id(turn, len(calls), {c["id"] for c in calls} | earlier) if nine else f"call_{turn}_invalid"
            )
            replies.append({"role": "tool", "tool_call_id": call_id, "name": "invalid", "content": notice})
    if preamble:
        episode.preambles[len(episode.messages)] = preamble  # recorded once the tools ran without raising
    episode.messages.append(assistant)
    episode.messages.extend(replies)
    return TurnStep(episode, reply.text, assistant, replies, malformed)


#: The message key a style's template renders an assistant's reasoning from (Solar-Open's reads
#: ``reasoning``, gpt-oss's ``thinking``); other templates read ``reasoning_content`` (Qwen3, GLM,
#: Kimi-K2-Thinking).
_REASONING_KEY = {"solar_open": "reasoning", "harmony": "thinking"}


def reply_message(text: str, style: str) -> dict[str, Any]:
    """A completion sent back as an assistant message without acting on it (HFlow's retry, refine and
    test fix): its reasoning apart, under the key the style's template reads (:data:`_REASONING_KEY`),
    and a gpt-oss answer without its channel header, which the template refuses in a content."""
    return _unacted(*split_reasoning(text, style), style)


def _thought(style: str, reasoning: str) -> dict[str, str]:
    """The reasoning under the key the style's template reads (:data:`_REASONING_KEY`); ``{}`` for none."""
    return {_REASONING_KEY.get(style, "reasoning_content"): reasoning} if reasoning else {}


def _unacted(reasoning: str, rest: str, style: str) -> dict[str, Any]:
    """The assistant message of a reply split into ``reasoning`` and ``rest`` that is not acted on (a
    cut turn, a completion sent back): gpt-oss's content is what its parser reads (:func:`_cut_harmony_content`)."""
    content = _cut_harmony_content(rest) if style == "harmony" else rest
    return {"role": "assistant", "content": content, **_thought(style, reasoning)}


def _cut_harmony_content(rest: str) -> str:
    """The content of a cut gpt-oss reply, its analysis already apart: the text the ``harmony`` parser
    reads (a cut final answer without its ``<|channel|>final<|message|>`` header, which the template
    refuses in a content), or ``rest`` as it is where that holds a complete call (its arguments
    written, the ``<|call|>`` cut off), which the parser's content would leave out."""
    content, calls = parse_tool_calls(rest, style="harmony")
    return rest if calls else content


def _one_analysis(assistant: dict[str, Any], reply: str) -> str | None:
    """Fold a gpt-oss call turn's content into its ``thinking``: the template refuses a call message
    with both ("Cannot pass both content and thinking in an assistant message with tool calls!") and
    renders either as the call's analysis, so the text a recipient-less ``commentary`` message (or
    text outside any message) gave the content is kept there, where the model wrote it among its
    analyses in ``reply`` (:func:`~lightning_agents.rollout.tool_calls.harmony_written_order`).
    Returns the content folded away (the preamble a transcript shows), ``None`` when nothing was."""
    content, thinking = assistant.get("content"), assistant.get("thinking")
    if not (assistant.get("tool_calls") and content and thinking):
        return None
    assistant["thinking"], assistant["content"] = harmony_written_order(reply) or f"{thinking}\n\n{content}", ""
    return content


def _refused_written_ids(calls: list[dict[str, Any]], reply: ModelReply) -> list[str]:
    """The ids of ``calls`` that are not nine alphanumeric characters and that the model wrote in
    its reply's text (the parser keeps a written id; one it made up for a call without one is
    nine characters in the mistral style, and not in the text in the others). Calls an engine
    parsed itself (``reply.tool_calls``) are renamed instead: their ids are not sampled tokens."""
    if reply.tool_calls is not None:
        return []
    text = reply.text or ""
    return [
        c["id"] for c in calls if isinstance(c.get("id"), str) and not is_nine_character_id(c["id"]) and c["id"] in text
    ]


#: Styles whose ids are kept as written across turns: the first Kimi-K2 template numbers a call by
#: its place in its own message (``functions.NAME:{loop.index0}``), so its model writes ``:0`` in
#: every turn, and a result headed with a renamed id would name no call the template shows.
_PER_MESSAGE_IDS = frozenset({"kimi_k2"})

#: Styles whose templates show the id the model writes in its call and head the call's result with
#: it (Mistral's ``"id"`` and ``[CALL_ID]``, Solar-Open's ``<|tool_call:begin|>ID``): there a call
#: id that repeats an earlier one pairs the later result with the earlier call. Llama 3.1's and
#: Qwen3's templates show no id (a written one is renamed unseen); a template that takes only nine
#: alphanumeric ids (``alphanumeric_ids``) shows them too.
_SHOWN_WRITTEN_IDS = frozenset({"mistral", "solar_open"})


def _repeated_written_ids(
    calls: list[dict[str, Any]], reply: ModelReply, earlier: set[Any], style: str, nine: bool
) -> list[str]:
    """The ids of ``calls`` that the model wrote in its reply's text and that an earlier call or
    result of the episode (``earlier``) already has, where the template shows written ids
    (:data:`_SHOWN_WRITTEN_IDS`, or ``nine``) and not per message (:data:`_PER_MESSAGE_IDS`).

    Renamed, the stored call and its result would carry an id the sampled tokens do not: the RL
    token stream would hold a result answering an id no sampled call has (Mistral Nemo, v0.3,
    Small 3.2, Solar-Open), as :func:`_refused_written_ids` says of a refused id, so such a call is
    answered as malformed instead (the one rule for the token and the text paths: a saved
    trajectory trains as the model wrote it). Ids an engine parsed itself (``reply.tool_calls``)
    are the server's to pair and are kept; ids the parser made up are renamed
    (:func:`_unique_in_episode`): they are no sampled tokens."""
    if reply.tool_calls is not None or style in _PER_MESSAGE_IDS or not (nine or style in _SHOWN_WRITTEN_IDS):
        return []
    text = reply.text or ""
    return [c["id"] for c in calls if isinstance(c.get("id"), str) and c["id"] in earlier and c["id"] in text]


def _episode_ids(messages: list[dict[str, Any]]) -> set[Any]:
    """The ids of the calls and the results ``messages`` hold."""
    ids = {c.get("id") for m in messages for c in (m.get("tool_calls") or ()) if isinstance(c, dict)}
    return (ids | {m.get("tool_call_id") for m in messages if m.get("role") == "tool"}) - {None}


def _unique_in_episode(calls: list[dict[str, Any]], earlier: set[Any], turn: int, nine: bool) -> list[dict[str, Any]]:
    """``calls`` with every id an earlier call or result of the episode has (``earlier``) renamed
    to one no call of the episode has: ``call_{turn}_{k}``, or nine alphanumeric characters where
    the template takes no other; the call and the results built from it carry the new id. What is
    left to rename here is never an id the template shows as the model wrote it (those are answered
    as malformed, :func:`_repeated_written_ids`): an id the parser made up that a written one of an
    earlier turn took, or an id the template does not show (Llama 3.1's model writes ``"id":
    "call_0"`` in every turn), kept unique so a stored trajectory pairs each result with its own
    call wherever it is rendered. Ids an engine parsed (``reply.tool_calls``) are not renamed: an
    endpoint's Kimi-K2 parser returns the ``functions.NAME:0`` its model wrote in every turn, which
    its template shows per message."""
    if not any(c.get("id") in earlier for c in calls):
        return calls
    taken = earlier | {c.get("id") for c in calls}
    out = []
    for k, call in enumerate(calls):
        if call.get("id") in earlier:
            new = _fresh_id(turn, k, taken) if nine else _fresh_plain_id(turn, k, taken)
            call = {**call, "id": new}
            taken.add(new)
        out.append(call)
    return out


def _fresh_plain_id(turn: int, k: int, taken: set[Any]) -> str:
    """The first ``call_{turn}_{k}`` id from position ``k`` on that is not ``taken``."""
    while f"call_{turn}_{k}" in taken:
        k += 1
    return f"call_{turn}_{k}"


def _alphanumeric_ids(calls: list[dict[str, Any]], turn: int, earlier: set[Any] = frozenset()) -> list[dict[str, Any]]:
    """``calls`` with every id that is not nine alphanumeric characters, or repeats an earlier
    call's, replaced by the ``call_{turn}`` one of its position (:func:`alphanumeric_call_id`)
    that no other call of the reply, nor any id of the episode before it (``earlier``), has."""
    taken = {c.get("id") for c in calls if is_nine_character_id(c.get("id"))} | set(earlier)
    out: list[dict[str, Any]] = []
    for k, call in enumerate(calls):
        written = call.get("id")
        if not is_nine_character_id(written) or any(c["id"] == written for c in out):
            call = {**call, "id": _fresh_id(turn, k, taken)}
            taken.add(call["id"])
        out.append(call)
    return out


def _fresh_id(turn: int, k: int, taken: set[Any]) -> str:
    """The first nine-character alphanumeric id of ``turn`` from position ``k`` on that is not ``taken``."""
    while alphanumeric_call_id(f"call_{turn}", k) in taken:
        k += 1
    return alphanumeric_call_id(f"call_{turn}", k)


def agent_turn(
    episodes: Sequence[AgentEpisode],
    generate: Callable[[list[list[dict[str, Any]]], list[dict[str, Any]] | None], Sequence[ModelReply]],
    tools: list[dict[str, Any]] | None = None,
    batch_size: int | None = None,
    progress: Callable[[int], None] | None = None,
) -> list[TurnStep]:
    """Advance every unfinished episode by one turn.

    Args:
        episodes: the episodes; finished ones are skipped.
        generate: ``(conversations, tools) -> replies``, one :class:`ModelReply` per conversation in
            order. It renders each conversation with the tool schemas (the chat template of a local
            model, ``tools=`` of an HTTP endpoint) and generates. Conversations are the episodes'
            own message lists, the same object every turn.
        tools: the task's tool schemas (``None`` or empty: none).
        batch_size: conversations per ``generate`` call (``None``: all at once).
        progress: called with the number of turns generated after each call.

    Returns:
        One :class:`TurnStep` per episode that took a turn, in order.
    """
    if batch_size is not None and batch_size < 1:
        raise LightningAgentsError(f"batch_size must be >= 1 or None, got {batch_size}")
    active = [e for e in episodes if not e.finished]
    size = batch_size or max(len(active), 1)
    steps: list[TurnStep] = []
    for start in range(0, len(active), size):
        chunk = active[start : start + size]
        replies = list(generate([e.messages for e in chunk], tools or None))
        if len(replies) != len(chunk):
            raise LightningAgentsError(f"the generator returned {len(replies)} replies for {len(chunk)} conversations")
        steps += [apply_reply(e, r) for e, r in zip(chunk, replies)]
        if progress is not None:
            progress(len(chunk))
    return steps


def offered_tools(episode: AgentEpisode, tools: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
    """The tools an episode is offered: its world's own (a BFCL record's), else ``tools`` (the task's)."""
    return (episode.world.tools if episode.world is not None else None) or tools


def next_user_turn(task: Task, episode: AgentEpisode) -> list[dict[str, Any]]:
    """Deliver the user's next turn (:meth:`~lightning_agents.tasks.Task.next_user_turn`) to an
    episode the model has just answered, and reopen it.

    Returns:
        The messages appended (empty: the episode stays finished).
    """
    if not episode.answered:
        return []
    # a malformed call's notice given as a user message is no turn of the user's (BFCL counts them)
    said = [m for m in episode.messages if not is_notice(m)]
    new = [dict(m) for m in task.next_user_turn(said, episode.world, episode.problem) or []]
    if new:
        episode.messages.extend(new)
        episode.reopen()
    return new


def score_episode(task: Task, episode: AgentEpisode) -> float:
    """The episode's reward: the task's :meth:`~lightning_agents.tasks.Task.verify_episode` when it
    ended with a complete reply, 0 otherwise (out of turns, cut off, failed call).

    Raises:
        lightning_agents.errors.VerifierError: the task could not verify the episode.
    """
    if not episode.answered:
        return 0.0
    # a notice given as a user message is no user turn (BFCL and tau-bench number calls by them)
    said = [m for m in episode.messages if not is_notice(m)]
    return float(task.verify_episode(said, episode.world, episode.problem))
