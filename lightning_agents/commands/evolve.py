"""`lightning-agents evolve`: placeholder until issue 6 (HFlow) lands."""

from __future__ import annotations

import sys


class EvolveCommand:
    """Mixin that adds the ``evolve`` subcommand to the trainer."""

    def evolve(self, model=None, datamodule=None) -> None:
        """Not yet available in this version of lightning-agents."""
        sys.exit("lightning-agents evolve: not yet available in this version (tracked in issue 6 (HFlow))")
