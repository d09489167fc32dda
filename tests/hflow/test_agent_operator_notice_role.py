"""HFlow's agent and verify nodes tell a malformed call's notice in the role their backbone's chat
template renders (:func:`~lightning_agents.rollout.agent_turn.model_notice_role`): Gemma 4's template
shows no lone tool message after a turn without calls, so on a local Gemma 4 backbone the notice was a
tool message its model never saw, and the node went on as if its botched call had been answered."""

from __future__ import annotations

from chat_template_helpers import GEMMA4, OUTPUTS, tokenizer_with_template

from lightning_agents.hflow import BackbonePool, Completion, Node, Workflow, WorkflowExecutor
from lightning_agents.hflow.backbones import Backbone
from lightning_agents.models import load_tokenizer
from lightning_agents.rollout.agent_turn import is_notice
from lightning_agents.tasks import CalculatorTask

BOTCHED = '<tool_call>{"name": "calculator", "arguments": </tool_call>'


class BotchedThenAnswer(Backbone):
    """Replies first with a call that does not parse, then with the answer; its template facts are
    probed on ``tokenizer``, as a local backbone's are."""

    kind = "scripted"

    def __init__(self, tokenizer):
        super().__init__("scripted", 1.0, 2.0)
        self.tokenizer = tokenizer
        self.requests = []

    def _template_fact(self, name, probe):
        return probe(self.tokenizer)

    def _complete(self, requests):
        self.requests += requests
        out = []
        for _ in requests:
            botched = len(self.requests) == len(requests)  # this backbone's first request
            out.append(Completion(BOTCHED if botched else "The answer is 6.", input_tokens=10, output_tokens=5))
        return out


def _gemma4():
    template = (OUTPUTS / "google-gemma-4-31B-it.jinja").read_text()
    return tokenizer_with_template(load_tokenizer("embedded:student"), template, "<bos>", "<turn|>", GEMMA4)


def _notices(backbone):
    last = backbone.requests[-1].messages
    return [m for m in last if m["role"] == "tool" and m.get("name") == "invalid"], [m for m in last if is_notice(m)]


def test_an_agent_node_on_gemma4_tells_the_notice_as_a_user_message():
    task = CalculatorTask()
    backbone = BotchedThenAnswer(_gemma4())
    wf = Workflow([Node("a", "agent", backbone="scripted")], output="a")
    (trace,) = WorkflowExecutor(task, BackbonePool([backbone])).run(wf, [task.problems[0]])
    tool_notices, user_notices = _notices(backbone)
    # before: one lone `tool` notice, which Gemma 4's template leaves out of the prompt
    assert not tool_notices and len(user_notices) == 1
    assert user_notices[0]["content"].startswith("error: malformed tool call")
    assert trace.answer


def test_a_verify_node_on_gemma4_tells_the_notice_as_a_user_message():
    task = CalculatorTask()
    agent = BotchedThenAnswer(None)  # no template facts: the default tool notice upstream
    agent.name = "plain"
    checker = BotchedThenAnswer(_gemma4())
    wf = Workflow(
        [
            Node("a", "agent", backbone="plain"),
            Node("v", "verify", backbone="scripted", params={"when": "always"}),
        ],
        [("a", "v")],
        output="v",
    )
    WorkflowExecutor(task, BackbonePool([agent, checker])).run(wf, [task.problems[0]])
    tool_notices, user_notices = _notices(agent)
    assert len(tool_notices) == 1 and not user_notices
    tool_notices, user_notices = _notices(checker)
    assert len(tool_notices) == 1 and len(user_notices) == 1  # the agent's stays as it was sent
