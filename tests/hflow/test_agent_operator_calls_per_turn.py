"""HFlow's agent operators and a chat template that renders one tool call per assistant message
(Llama 3.1/3.2 raise on two): a second call in one reply is answered as an observation, where the
next render of the conversation raised and stopped the whole workflow run."""

from __future__ import annotations

import copy

import pytest
from chat_template_helpers import SPECIAL_WIDE, tokenizer_with_template

from lightning_agents.hflow import BackbonePool, Completion, LocalHFBackbone, Node, Workflow, WorkflowExecutor
from lightning_agents.hflow.backbones import Backbone
from lightning_agents.rollout.agent_turn import TOOL_CALLS_PER_TURN
from lightning_agents.tasks import CalculatorTask

CALL = '<tool_call>{{"name": "calculator", "arguments": {{"expression": "{}"}}}}</tool_call>'


class TwoCallsThenAnswer(Backbone):
    """Replies with two calculator calls in one message, then with the final answer."""

    kind = "scripted"

    def __init__(self, calls_per_turn):
        super().__init__("scripted", 1.0, 2.0)
        self.calls_per_turn = calls_per_turn
        self.requests = []

    def _complete(self, requests):
        self.requests += requests
        out = []
        for r in requests:
            first = not any(m["role"] == "assistant" for m in r.messages)
            text = CALL.format("2*3") + CALL.format("4*5") if first else "The answer is 6."
            out.append(Completion(text, input_tokens=10, output_tokens=5))
        return out


@pytest.mark.parametrize("calls_per_turn", [1, None])
def test_a_second_call_beyond_the_backbones_limit_is_an_observation(calls_per_turn):
    task = CalculatorTask()
    problem = task.problems[0]
    backbone = TwoCallsThenAnswer(calls_per_turn)
    wf = Workflow([Node("a", "agent", backbone="scripted")], output="a")
    (trace,) = WorkflowExecutor(task, BackbonePool([backbone])).run(wf, [problem])
    # the answer turn saw one tool message per call of the first reply, in order
    last = backbone.requests[-1].messages
    tool_results = [m["content"] for m in last if m["role"] == "tool"]
    calls = [m for m in last if m["role"] == "assistant"][0]["tool_calls"]
    if calls_per_turn == 1:
        assert tool_results == ["6", TOOL_CALLS_PER_TURN.format(limit=1, call='calculator({"expression": "4*5"})')]
        assert len(calls) == 1  # the message keeps the call that ran, as the template can render it
    else:
        assert tool_results == ["6", "20"]
        assert len(calls) == 2
    assert trace.answer


def test_a_local_backbone_reads_its_templates_limit(shared_data, embedded_pool_factory):
    student = embedded_pool_factory().get("student")
    template = (shared_data / "chat_templates" / "llama3_1.jinja").read_text()
    llama = tokenizer_with_template(student._tokenizer, template, "<|begin_of_text|>", "<|eot_id|>", SPECIAL_WIDE)

    def local(tokenizer):
        return LocalHFBackbone(
            "local", input_price=0.0, output_price=0.0, model_object=student._model, tokenizer=tokenizer
        )

    assert local(llama).calls_per_turn == 1
    assert local(copy.deepcopy(student._tokenizer)).calls_per_turn is None
