"""The clock chat templates read while lightning-agents renders them.

Some real chat templates print the current time: Hunyuan-A13B's system prompt (with tools) to the
second (``当前时间：2026-12-07 02:01:26 星期一``), Llama 3.2, gpt-oss, Apertus, Solar Open and
Mistral Small 3.2 the date. lightning-agents finds assistant turns, the text a template writes
between turns and what a template accepts by rendering one conversation several times and comparing
the texts, so a clock that moved between two renders made them differ: SFT trained Hunyuan's
``<|extra_0|>`` and not the ``助手：`` its model writes (no error), a probe refused the template, or a
test's prompt no longer prefixed its conversation, at random (a probe pair straddled a second about
once in 2,500). Every render here reads one instant instead, taken
at the first render of the process (a run's date, as a server started that day would show it), or
the one :data:`TEMPLATE_TIME_ENV` names, so that processes on several machines, or a later run,
tokenize such conversations to the same ids.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import threading

from lightning_agents.errors import LightningAgentsError

__all__ = [
    "TEMPLATE_TIME_ENV",
    "fixed_template_clock",
    "render_chat_template",
    "set_template_instant",
    "template_instant",
]

#: Environment variable with the local time chat templates show, in ISO 8601
#: (``2026-12-07T12:00:00``); unset: the time of the process's first render. Each machine's first
#: rank tokenizes an SFT data set on its own, so without it machines that start their first render
#: in different seconds render Hunyuan-A13B's tool prompt differently, and rows may differ in length.
TEMPLATE_TIME_ENV = "LIGHTNING_AGENTS_TEMPLATE_TIME"

_lock = threading.RLock()
_depth = 0
_saved = None
#: How many fixed_template_clock contexts this thread is inside: the swap is process-wide, and a
#: render outside ours (a user's own, in another thread) must keep transformers' clock.
_inside = threading.local()
_instant: datetime.datetime | None = None


def template_instant() -> datetime.datetime:
    """The time every chat-template render of this process shows: :data:`TEMPLATE_TIME_ENV`'s, else
    the local time of the first call."""
    global _instant
    with _lock:
        if _instant is None:
            _instant = _instant_from_env() or datetime.datetime.now()
        return _instant


def set_template_instant(instant: datetime.datetime | str) -> None:
    """Make ``instant`` (a ``datetime`` or its ISO 8601 text) the time renders show from now on: a
    tokenizer worker process takes its parent's, so one data set shows one time."""
    global _instant
    with _lock:
        _instant = datetime.datetime.fromisoformat(instant) if isinstance(instant, str) else instant


def _instant_from_env() -> datetime.datetime | None:
    text = os.environ.get(TEMPLATE_TIME_ENV, "").strip()
    if not text:
        return None
    try:
        # Python 3.10's fromisoformat reads no `Z` (UTC) suffix; 3.11 does
        return datetime.datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith("Z") else text)
    except ValueError:
        raise LightningAgentsError(
            f"environment variable {TEMPLATE_TIME_ENV}={text!r} is not an ISO 8601 time such as 2026-12-07T12:00:00"
        ) from None


class _FixedClock(datetime.datetime):
    """``datetime`` as transformers' ``strftime_now`` sees it: ``now()`` is always the process's instant."""

    @classmethod
    def now(cls, tz=None):
        saved = _saved  # read once: the outermost context may put it back meanwhile
        if not getattr(_inside, "depth", 0) and saved is not None:
            return saved.now(tz)  # another thread's render, not ours: the clock it would have read
        instant = template_instant()
        return instant.astimezone(tz) if tz is not None else instant


@contextlib.contextmanager
def fixed_template_clock():
    """Within this context every chat template transformers renders reads :func:`template_instant`.

    transformers' ``strftime_now`` (the one clock a template may read) calls its module's
    ``datetime.now()``; it cannot be passed as a template argument (callables are turned into
    placeholder strings), so that module's ``datetime`` is swapped for the fixed clock while the
    outermost context lasts, then put back. Nested and concurrent contexts share one swap.
    """
    global _depth, _saved
    from transformers.utils import chat_template_utils

    with _lock:
        if _depth == 0:
            _saved = chat_template_utils.__dict__.get("datetime")
            if _saved is not None:
                chat_template_utils.datetime = _FixedClock
        _depth += 1
    _inside.depth = getattr(_inside, "depth", 0) + 1
    try:
        yield
    finally:
        _inside.depth -= 1
        with _lock:
            _depth -= 1
            if _depth == 0 and _saved is not None:
                chat_template_utils.datetime = _saved
                _saved = None


def render_chat_template(tokenizer, messages, **kwargs):
    """``tokenizer.apply_chat_template(messages, **kwargs)`` read at the fixed clock (the one render path)."""
    with fixed_template_clock():
        return tokenizer.apply_chat_template(messages, **kwargs)
