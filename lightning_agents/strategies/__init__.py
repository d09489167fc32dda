"""Lightning strategies for zeroth-order training: ``"muzo"``, ``"muzo_ddp"`` and variants.

The names are registered in Lightning's ``StrategyRegistry`` as soon as both ``lightning_agents``
and Lightning are imported, in either order, so ``Trainer(strategy="muzo")`` works right after
``import lightning_agents``. Registration stores small factories; the strategy classes (and with
them Lightning) are imported only when a strategy is built or a class is accessed, so importing
this package (``lightning_agents`` imports it) stays torch-free.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
from typing import Any

__all__ = [
    "MUZODDPStrategy",
    "MUZOSettingError",
    "MUZOStrategy",
    "SkippedBatchWarning",
    "install_registration",
    "register_strategies",
]

_STRATEGY_MODULE = "lightning_agents.strategies.muzo"
_LIGHTNING_STRATEGIES = "lightning.pytorch.strategies"

# name -> (class name, init params, description)
STRATEGIES: dict[str, tuple[str, dict[str, Any], str]] = {
    "muzo": ("MUZOStrategy", {}, "Zeroth-order (forward-only) training with MUZOAdam on one device"),
    "muzo_ddp": ("MUZODDPStrategy", {"start_method": "popen"}, "Zeroth-order data-parallel training with MUZOAdam"),
    "muzo_ddp_spawn": ("MUZODDPStrategy", {"start_method": "spawn"}, "muzo_ddp with start_method 'spawn'"),
    "muzo_ddp_fork": ("MUZODDPStrategy", {"start_method": "fork"}, "muzo_ddp with start_method 'fork'"),
    "muzo_queries": (
        "MUZODDPStrategy",
        {"start_method": "popen", "parallel": "queries"},
        "Zeroth-order query-parallel training with MUZOAdam: ranks share a batch and split the queries",
    ),
}


def __getattr__(name: str) -> Any:
    if name in ("MUZOStrategy", "MUZODDPStrategy", "MUZOSettingError", "SkippedBatchWarning"):
        return getattr(importlib.import_module(_STRATEGY_MODULE), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _factory(class_name: str):
    def build(**kwargs: Any) -> Any:
        return getattr(importlib.import_module(_STRATEGY_MODULE), class_name)(**kwargs)

    build.__name__ = build.__qualname__ = class_name
    return build


def register_strategies(registry: Any) -> None:
    """Register every name of :data:`STRATEGIES` in a Lightning ``StrategyRegistry``.

    Args:
        registry: ``lightning.pytorch.strategies.StrategyRegistry``.
    """
    for name, (class_name, params, description) in STRATEGIES.items():
        if name in registry and getattr(registry[name]["strategy"], "__name__", None) == class_name:
            # Already there (the classes themselves, registered by the strategy module): keep them.
            continue
        registry.register(name, _factory(class_name), description=description, override=True, **params)


class _RegisterOnImport(importlib.abc.MetaPathFinder):
    """Registers the strategies right after ``lightning.pytorch.strategies`` has been executed."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != _LIGHTNING_STRATEGIES:
            return None
        sys.meta_path.remove(self)  # one shot, and the real finders locate the module
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        spec.loader = _RegisteringLoader(spec.loader)
        return spec


class _RegisteringLoader(importlib.abc.Loader):
    def __init__(self, loader: Any) -> None:
        self._loader = loader

    def create_module(self, spec: Any) -> Any:
        return self._loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        self._loader.exec_module(module)
        register_strategies(module.StrategyRegistry)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)


def install_registration() -> None:
    """Register the strategies now if Lightning's registry is loaded, otherwise when it loads."""
    module = sys.modules.get(_LIGHTNING_STRATEGIES)
    if module is not None and hasattr(module, "StrategyRegistry"):
        register_strategies(module.StrategyRegistry)
    elif not any(isinstance(finder, _RegisterOnImport) for finder in sys.meta_path):
        sys.meta_path.insert(0, _RegisterOnImport())


install_registration()
