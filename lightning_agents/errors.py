"""The package's one exception base.

Every error this package raises about a user's input (a file, a record, a setting, a missing OS
feature) derives from :class:`LightningAgentsError`, so the command line can print it as one line
with exit status 2 while a genuine bug (any other exception) still shows its traceback.
"""

from __future__ import annotations

__all__ = ["LightningAgentsError", "VerifierError"]


class LightningAgentsError(Exception):
    """Base of every error about the user's input or environment raised by lightning-agents.

    Subclasses also derive from the built-in they refine (``ValueError``, ``RuntimeError``) so that
    existing ``except ValueError`` callers keep working.
    """


class VerifierError(LightningAgentsError, RuntimeError):
    """The verifier itself failed (the sandbox could not start, a checker crashed), as opposed to a
    program or answer that was checked and found wrong.

    Reward code treats it as "no reward" (excluded from group statistics and from guidance), never
    as a reward of 0, so infrastructure faults do not teach a policy anything.
    """
