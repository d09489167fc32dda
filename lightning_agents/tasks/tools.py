"""The tool-world interface: an environment an agent acts in through OpenAI-style function tools."""

from __future__ import annotations

from typing import Any

from lightning_agents.json_text import JSONTextError, loads_json

__all__ = ["ToolWorld", "parse_arguments"]


def parse_arguments(arguments: str | dict | None) -> tuple[dict[str, Any] | None, str | None]:
    """Tool-call arguments as a dict: ``(arguments, None)`` or ``(None, error text)`` for a model to read."""
    if arguments is None:
        return {}, None
    if isinstance(arguments, str):
        try:
            arguments = loads_json(arguments) if arguments.strip() else {}
        except JSONTextError as exc:
            return None, f"error: arguments are not valid JSON ({exc})"
    if not isinstance(arguments, dict):
        return None, "error: arguments must be a JSON object"
    return arguments, None


class ToolWorld:
    """An environment the agent acts in through tools; one instance per episode.

    Subclasses list their OpenAI tool schemas in :attr:`tools` and implement :meth:`execute`.
    Stateful worlds also implement :meth:`state` so that rollouts can record the state after every
    call (TopoCurate merges trajectory nodes that reach the same state).
    """

    tools: list[dict[str, Any]] = []

    def execute(self, name: str, arguments: str | dict) -> tuple[str, bool]:
        """Run tool ``name``; return ``(observation text, is_error)``. Must not raise on bad calls:
        a malformed call is an error observation the model can read and recover from."""
        raise NotImplementedError

    def state(self) -> dict[str, Any] | None:
        """A JSON-able snapshot of the world's state (``None`` for stateless worlds)."""
        return None
