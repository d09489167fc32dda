"""A math-verify worker process: one ``[gold, predicted]`` JSON line in, one ``1``/``0`` line out.

Started by :class:`lightning_agents.tasks.math.BoxedMathVerifier` for calls off the main thread:
math-verify's timeouts use ``signal.alarm``, which only works on a process's main thread, and here
every call runs on this process's main thread.
"""

from __future__ import annotations

import json
import os
import sys


def main() -> None:
    """Serve requests until standard input closes."""
    # Verdicts go to the original standard output; anything math-verify or sympy prints goes to
    # standard error, so it can never be read as a verdict.
    verdicts = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    from lightning_agents.tasks.math import _math_verify_equal

    for line in sys.stdin:
        gold, predicted = json.loads(line)
        try:
            same = _math_verify_equal(gold, predicted)
        except Exception:  # noqa: BLE001 -- an answer math-verify cannot handle is not equal
            same = False
        verdicts.write("1\n" if same else "0\n")


if __name__ == "__main__":
    main()
