"""Build a task from what a YAML config or a command line names: a class path, a mapping or a short name.

``lightning_agents.tasks.GSM8KTask`` with ``init_args``, ``{"class_path": ..., "init_args": ...}``
(LightningCLI's form) and a user's ``my_pkg.tasks.MyTask`` all resolve the same way; the short
names ``embedded:arithmetic[/split]``, ``embedded:calculator[/split]``, ``embedded:agent_world[/split]``,
``gsm8k``, ``math`` and ``humaneval`` are kept for the commands that accepted them before.
"""

from __future__ import annotations

import importlib
from typing import Any

from lightning_agents.errors import LightningAgentsError
from lightning_agents.tasks.base import Task, class_path

__all__ = ["TaskSpecError", "build_task", "load_task", "task_class"]


class TaskSpecError(LightningAgentsError, ValueError):
    """A task named in a config cannot be built; the message says which name and why."""


_EMBEDDED = {
    "embedded:arithmetic": "lightning_agents.tasks.arithmetic.ArithmeticTask",
    "embedded:calculator": "lightning_agents.tasks.arithmetic.CalculatorTask",
    "embedded:agent_world": "lightning_agents.tasks.agent_world.AgentWorldTask",
}
_FILE_TASKS = {
    "gsm8k": "lightning_agents.tasks.gsm8k.GSM8KTask",
    "math": "lightning_agents.tasks.math.BoxedMathTask",
    "humaneval": "lightning_agents.tasks.code.HumanEvalTask",
}


def _import(path: str) -> Any:
    module_name, _, attr = path.rpartition(".")
    if not module_name:
        raise TaskSpecError(
            f"task {path!r} is not a class path (module.Class) nor a known task name "
            f"({', '.join([*_EMBEDDED, *_FILE_TASKS])})"
        )
    try:
        return getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise TaskSpecError(f"cannot import task {path!r}: {exc}") from None


def task_class(spec: str) -> type[Task]:
    """The :class:`Task` subclass a class path or short name names, without constructing it.

    Args:
        spec: ``module.Class``, or a short name (``embedded:<task>[/<split>]``, ``gsm8k``, ...).
    """
    base = spec.partition("/")[0]
    path = _EMBEDDED.get(base) or _FILE_TASKS.get(spec) or spec
    cls = _import(path)
    if not (isinstance(cls, type) and issubclass(cls, Task)):
        raise TaskSpecError(f"{path!r} is not a subclass of lightning_agents.tasks.Task")
    return cls


def load_task(spec: str | dict[str, Any] | Task, **init_args: Any) -> Task:
    """A :class:`Task` from a class path, a short name, a ``{class_path, init_args}`` mapping or a task.

    Args:
        spec: what the config names. A short name ``embedded:<task>/<split>`` sets ``split``.
        init_args: constructor arguments (a mapping's own ``init_args`` take precedence); ``None``
            values are dropped so callers can pass optional settings through.
    """
    if isinstance(spec, Task):
        return spec
    kwargs = {k: v for k, v in init_args.items() if v is not None}
    if isinstance(spec, dict):
        if "class_path" not in spec:
            raise TaskSpecError(f"a task mapping needs 'class_path', got keys {sorted(spec)}")
        kwargs.update(spec.get("init_args") or {})
        spec = spec["class_path"]
    if not isinstance(spec, str) or not spec:
        raise TaskSpecError(f"cannot build a task from {spec!r}")
    base, _, split = spec.partition("/")
    if base in _EMBEDDED and split:
        kwargs["split"] = split
    elif spec in _FILE_TASKS and "path" not in kwargs:
        raise TaskSpecError(
            f"task {spec!r} needs a data path (task_path / init_args.path), e.g. ../shared/data/{spec}/..."
        )
    cls = task_class(spec)
    path = class_path(cls)
    try:
        return cls(**kwargs)
    except TypeError as exc:
        raise TaskSpecError(f"cannot construct task {path} with {sorted(kwargs)}: {exc}") from None


def build_task(
    task: str | dict[str, Any] | Task, path: str | None = None, n: int | None = None, seed: int | None = None
) -> Task:
    """The task HFlow evaluates on: :func:`load_task` with a data ``path``, ``n`` problems and a ``seed``.

    Args:
        task: class path, mapping or short name (``embedded:arithmetic[/split]``, ``gsm8k``, ``humaneval``, ...).
        path: data file for file-backed tasks.
        n: number of problems (sample size).
        seed: problem-drawing seed.
    """
    return load_task(task, path=path, n=n, seed=seed)
