"""`lightning-agents rollout`: placeholder until issue 4 (TopoCurate) lands."""

from __future__ import annotations

import sys


class RolloutCommand:
    """Mixin that adds the ``rollout`` subcommand to the trainer."""

    def rollout(self, model=None, datamodule=None) -> None:
        """Not yet available in this version of lightning-agents."""
        sys.exit("lightning-agents rollout: not yet available in this version (tracked in issue 4 (TopoCurate))")
