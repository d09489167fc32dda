"""The reflective optimizer reads replies as real models write them: reasoning blocks, the format
restated in prose, spelling variants, fences, truncation, and free text that proposes nothing."""

from __future__ import annotations

import logging

import pytest

from lightning_agents.hflow import BackbonePool, Ledger, Node, ReflectiveOptimizer, Workflow
from lightning_agents.hflow.backbones import Backbone, Completion
from lightning_agents.hflow.reflection import STRUCTURE_EDITS, parse_edit, parse_instruction

# A reply of SmolLM2-135M-Instruct (the real model, temperature 0.7) to a prompt-rewrite request on
# real GSM8K failures: free text, no tags, and nothing that should become a prompt.
SMOLLM2_REPLY = (
    "N. The answer is 18, so the reward is 18, and the reward has been Rewrite.\n\n"
    "The reward is 18, and the answer is 18, so the reward is 18.\n\n"
    "This means that the previous completion of the task has been Rewarded."
)


@pytest.mark.parametrize(
    ("reply", "truncated", "expected"),
    [
        ("The step ignores units. <instruction>Convert units first.</instruction>", False, "Convert units first."),
        # a reasoning model's drafts are not its answer
        (
            "<think>Maybe <instruction>Think harder.</instruction>? No.</think>\n"
            "<instruction>Write and run a program.</instruction>",
            False,
            "Write and run a program.",
        ),
        # the format restated before the answer
        (
            "I will put the new instruction between <instruction> and </instruction>.\n\n"
            "<instruction>State every unit.</instruction>",
            False,
            "State every unit.",
        ),
        ('<INSTRUCTION>\n"Check the sign."\n</INSTRUCTION>', False, "Check the sign."),
        # left open: taken when the reply ended on its own, not when it was cut at max_tokens
        ("<instruction>Check the sign of every term", False, "Check the sign of every term"),
        ("<instruction>Check the sign of every term", True, None),
        # GEPA's format: a fenced block
        (
            "Here is the improved instruction:\n```\nCompute it with code.\n```\nGood luck!",
            False,
            "Compute it with code.",
        ),
        ("Here is the improved instruction:\n```\nCompute it with", True, None),
        # free text proposes nothing
        (SMOLLM2_REPLY, False, None),
        ("<think>The step should", True, None),
        ("<instruction></instruction>", False, None),
        ("", False, None),
        (None, False, None),
    ],
)
def test_parse_instruction(reply, truncated, expected):
    assert parse_instruction(reply, truncated) == expected


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ("Add a program. <edit>add:programmer</edit>", "add:programmer"),
        ("Voting helps. <edit>add: vote</edit>", "add:vote"),
        ("**<edit>`Add_Vote`</edit>**", "add:vote"),
        ("<edit> add cot </edit>", "add:cot"),
        ("I reply with the edit between <edit> and </edit>: <edit>remove</edit>", "remove"),
        (
            "<think>First idea: <edit>add:cot</edit>. Too slow.</think>The cheap model is weak. <edit>backbone</edit>",
            "backbone",
        ),
        ("<edit>params", "params"),
        ("add:refine", "add:refine"),
        ("`remove`", "remove"),
        # names no allowed edit
        ("<edit>add:self-consistency</edit>", None),
        ("We could remove a step, or change the backbone, or add a vote; hard to say which is best here.", None),
        (SMOLLM2_REPLY, None),
        (None, None),
    ],
)
def test_parse_edit(reply, expected):
    assert parse_edit(reply, STRUCTURE_EDITS) == expected


class _Scripted(Backbone):
    kind = "scripted"

    def __init__(self, replies):
        super().__init__("opt", 1.0, 2.0)
        self.replies = list(replies)

    def _complete(self, requests):
        out = []
        for _ in requests:
            text, truncated = self.replies.pop(0)
            out.append(Completion(text, 100, 20, truncated=truncated))
        return out


def _failure():
    problem = {"id": "p1", "question": "Janet has 3 apples and buys 4. How many?", "reference": "7"}
    trace = {"steps": [{"node": "n0", "op": "cot", "backbone": "opt", "text": "3 + 4 = 8"}], "answer": "8", "score": 0}
    return [(problem, trace)]


def test_a_reply_without_a_proposal_keeps_the_prompt_is_counted_and_reported_once(caplog):
    replies = [(SMOLLM2_REPLY, False), ("<instruction>Add the numbers", True), (SMOLLM2_REPLY, False)]
    replies += [("Add a check. <edit>add:test</edit>", False), (SMOLLM2_REPLY, False), (SMOLLM2_REPLY, False)]
    pool = BackbonePool([_Scripted(replies)], Ledger())
    opt = ReflectiveOptimizer(pool, "opt", "gsm8k")
    wf = Workflow([Node("n0", "cot", prompt="Think step by step.", backbone="opt")])
    with caplog.at_level(logging.WARNING, logger="lightning_agents.hflow.reflection"):
        assert opt.propose_prompt(wf, wf.nodes[0], 0.5, _failure()) == "Think step by step."
        assert opt.propose_prompt(wf, wf.nodes[0], 0.5, _failure()) == "Think step by step."
        assert opt.propose_edit(wf, 0.5, _failure()) is None
        assert opt.propose_edit(wf, 0.5, _failure()) == "add:test"
        assert opt.propose_edit(wf, 0.5, _failure()) is None
        assert opt.propose_prompt(wf, wf.nodes[0], 0.5, _failure()) == "Think step by step."
    assert (opt.calls, opt.unusable) == (6, 5)
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1 and "4 of its first 5 replies held no usable proposal" in warnings[0]
    assert pool.ledger.summary("role")["optimizer"]["calls"] == 6
