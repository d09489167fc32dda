"""HFlow's transcripts keep the text an agent wrote before its tool call (a preamble).

gpt-oss writes it as a recipient-less ``commentary`` message; its chat template refuses a call message
with both a content and a ``thinking``, so ``apply_reply`` folds the preamble into ``thinking`` and the
message's content is empty: the transcript a rater and the reflective optimizer read showed the call
with no word of what the agent said before it (session 46 review, LOW). Other templates keep the
preamble as the call turn's content, which the transcript already showed.
"""

from __future__ import annotations

from lightning_agents.hflow import BackbonePool, Completion, Node, Workflow, WorkflowExecutor, episode_transcript
from lightning_agents.hflow.backbones import Backbone
from lightning_agents.rollout.agent_turn import ModelReply, apply_reply, start_episode
from lightning_agents.tasks import CalculatorTask

ANALYSIS = "<|channel|>analysis<|message|>I should compute 17*23.<|end|>"
PREAMBLE = "<|start|>assistant<|channel|>commentary<|message|>Let me use the calculator.<|end|>"
CALL = (
    "<|start|>assistant<|channel|>commentary to=functions.calculator <|constrain|>json<|message|>"
    '{"expression": "17*23"}<|call|>'
)
ANSWER = "<|channel|>final<|message|>The answer is 391.<|return|>"


class GptOss(Backbone):
    """A local gpt-oss backbone as the agent operator sees it: harmony replies with their markers."""

    kind = "scripted"
    tool_call_style = "harmony"

    def __init__(self):
        super().__init__("scripted", 1.0, 2.0)
        self.sent = 0

    def _complete(self, requests):
        out = []
        for _ in requests:
            self.sent += 1
            out.append(Completion(ANALYSIS + PREAMBLE + CALL if self.sent == 1 else ANSWER, 10, 5))
        return out


def test_episode_transcript_shows_a_gpt_oss_preamble_folded_into_thinking():
    task = CalculatorTask(split="val", n=1)
    episode = start_episode(task, task.problems[0], tool_call_style="harmony")
    apply_reply(episode, ModelReply(ANALYSIS + PREAMBLE + CALL))
    call_turn = episode.messages[-2]
    assert call_turn["content"] == "" and "Let me use the calculator." in call_turn["thinking"]
    transcript = episode_transcript(episode.messages, episode.preambles)
    assert "agent: Let me use the calculator.\ncall calculator" in transcript
    assert "I should compute" not in transcript  # the analysis stays out, as every template's reasoning does


def test_an_agent_node_trace_keeps_the_preamble_before_the_call():
    task = CalculatorTask()
    wf = Workflow([Node("a", "agent", backbone="scripted")], output="a")
    (trace,) = WorkflowExecutor(task, BackbonePool([GptOss()])).run(wf, [task.problems[0]])
    (step,) = [s for s in trace.steps if s["op"] == "agent"]
    assert "agent: Let me use the calculator.\ncall calculator" in step["text"], step["text"]
    assert "reply: The answer is 391." in step["text"]
