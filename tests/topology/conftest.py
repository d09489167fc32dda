"""Hand-built rollouts for the topology tests, written as short step specs.

A spec item is ``"kind:detail"``:
- ``u:text`` / ``a:text``: a user / assistant message with that text;
- ``c:name`` or ``c:name{json}``: an assistant call of tool ``name`` with those arguments;
- ``o:content``: a successful observation of the last call; ``e:content``: an error observation;
- a trailing ``@state`` on any item records an environment state after that step.
"""

from __future__ import annotations

import json

import pytest

from lightning_agents.topology import Rollout, Step


def _step(item: str, last_call: list[str]) -> Step:
    state = None
    if "@" in item:
        item, state = item.rsplit("@", 1)
    kind, _, detail = item.partition(":")
    if kind == "u":
        return Step("text", "user", content=detail, state=state)
    if kind == "a":
        return Step("text", "assistant", content=detail, state=state)
    if kind == "c":
        name, brace, rest = detail.partition("{")
        arguments = json.loads("{" + rest) if brace else {}
        last_call[:] = [name]
        return Step("call", "assistant", name=name, arguments=arguments, state=state)
    if kind in ("o", "e"):
        return Step(
            "observation",
            "tool",
            name=last_call[0] if last_call else "",
            content=detail,
            error=kind == "e",
            state=state,
        )
    raise ValueError(f"bad spec item {item!r}")


def make_rollout(task_id: str, trial: int, reward: float | None, spec: list[str]) -> Rollout:
    """A rollout from a spec (see the module docstring)."""
    last_call: list[str] = []
    steps = [_step(item, last_call) for item in spec]
    return Rollout(
        task_id=task_id, trial=trial, reward=reward, steps=steps, messages=[{"role": "user", "content": "q"}]
    )


@pytest.fixture
def rollout():
    """The :func:`make_rollout` factory."""
    return make_rollout
