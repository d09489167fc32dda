"""`lightning-agents curate`: placeholder until issue 4 (TopoCurate) lands."""

from __future__ import annotations

import sys


class CurateCommand:
    """Mixin that adds the ``curate`` subcommand to the trainer."""

    def curate(self, model=None, datamodule=None) -> None:
        """Not yet available in this version of lightning-agents."""
        sys.exit("lightning-agents curate: not yet available in this version (tracked in issue 4 (TopoCurate))")
