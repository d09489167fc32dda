"""Stand-ins for tests that drive :class:`~lightning_agents.hflow.HFlowSearch` with a scripted
executor: a backbone that is only a name and prices, and a task of numbered problems."""

from __future__ import annotations

from lightning_agents.hflow.backbones import Backbone


class ScriptedBackbone(Backbone):
    """A backbone no call reaches: the test's executor writes the traces itself."""

    kind = "scripted"


class ScriptedTask:
    """``n`` problems ``p0`` .. ``p{n-1}``, each answered "1"."""

    name, domain = "scripted", "math"

    def __init__(self, n: int = 20) -> None:
        self.problems = [{"id": f"p{i}", "question": f"q{i}", "reference": "1"} for i in range(n)]
