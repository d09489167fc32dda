"""Lightning callbacks that cannot work with modules that build their weights in ``configure_model``.

``StochasticWeightAveraging`` copies the module in ``setup``, before the Trainer calls
``configure_model``: the copy of an SFT or RSTG module has no parameters, so SWA averaged nothing
and only switched the learning rate to its SWA schedule, without a word. Lightning's
``WeightAveraging`` callback builds its average after ``configure_model`` and works.
"""

from __future__ import annotations

from typing import Any

from lightning_agents.errors import LightningAgentsError

__all__ = ["check_callbacks"]


def check_callbacks(trainer: Any, module: str) -> None:
    """Refuse callbacks that would silently do nothing for this module (call at train start).

    Args:
        trainer: the running Trainer.
        module: the module's name, for the message.
    """
    from lightning.pytorch.callbacks import StochasticWeightAveraging

    for callback in getattr(trainer, "callbacks", []):
        average = getattr(callback, "_average_model", None) if isinstance(callback, StochasticWeightAveraging) else None
        if average is not None and not any(True for _ in average.parameters()):
            raise LightningAgentsError(
                f"{module} builds its weights in configure_model, after StochasticWeightAveraging copied the module "
                "(empty), so SWA would average nothing and only change the learning rate; use "
                "lightning.pytorch.callbacks.WeightAveraging (e.g. with torch.optim.swa_utils.get_ema_avg_fn()) instead"
            )
