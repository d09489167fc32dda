"""HFlow's agent operators after the review of 7dd504a / fb480a0 (session 41): a verify node on a
one-call (Llama 3.1) backbone continues an episode whose agent node wrote two calls in one message,
a backbone whose chat template renders no tool results (Phi-3.5) is refused before any call, and
a node reads its backbone's calls-per-turn once, not once per problem under the generation lock."""

from __future__ import annotations

import threading

import pytest
from chat_template_helpers import SPECIAL_WIDE, tokenizer_with_template
from test_agent_operator_calls_per_turn import TwoCallsThenAnswer

from lightning_agents.hflow import BackbonePool, LocalHFBackbone, Node, Workflow, WorkflowExecutor
from lightning_agents.hflow.genome import WorkflowError
from lightning_agents.tasks import CalculatorTask


def _local(embedded_pool_factory, shared_data, name, template, eos, bos=None):
    student = embedded_pool_factory().get("student")
    text = (shared_data / "chat_templates" / template).read_text()
    tok = tokenizer_with_template(student._tokenizer, text, bos, eos, SPECIAL_WIDE)
    return LocalHFBackbone(name, input_price=0.0, output_price=0.0, model_object=student._model, tokenizer=tok)


def test_verify_on_a_one_call_backbone_continues_a_two_call_episode(shared_data, embedded_pool_factory):
    # An agent node on a backbone without the limit wrote two calls in one message; a verify node on a
    # Llama 3.1 local backbone rendered that episode and the template's exception stopped the run.
    llama = _local(embedded_pool_factory, shared_data, "llama", "llama3_1.jinja", "<|eot_id|>", "<|begin_of_text|>")
    engine = llama._ensure_engine()
    prompts = []
    render = engine.render
    engine.render = lambda prompt, tools=None: prompts.append(render(prompt, tools)) or prompts[-1]
    task = CalculatorTask()
    wf = Workflow(
        [
            Node("a", "agent", backbone="scripted"),
            Node("v", "verify", backbone="llama", params={"when": "always", "max_turns": 1, "max_tokens": 4}),
        ],
        [("a", "v")],
        output="v",
    )
    (trace,) = WorkflowExecutor(task, BackbonePool([TwoCallsThenAnswer(None), llama])).run(wf, [task.problems[0]])
    assert prompts, "the verify node never rendered the episode"
    # both calls and both results, each call followed by its own result
    text = prompts[-1]
    assert text.index('"2*3"') < text.index('"6"<|eot_id|>') < text.index('"4*5"') < text.index('"20"<|eot_id|>')


@pytest.mark.parametrize("op", ["agent", "verify"])
def test_a_backbone_whose_template_drops_tool_results_is_refused_before_any_call(
    shared_data, embedded_pool_factory, op
):
    # Phi-3.5's template has no tool role: the node's model went on without its tool results while
    # the trace recorded them as seen.
    phi = _local(embedded_pool_factory, shared_data, "phi", "phi3_5.jinja", "<|end|>")
    engine = phi._ensure_engine()
    engine.generate = lambda *a, **k: pytest.fail("generated before the template was checked")
    task = CalculatorTask()
    scripted = TwoCallsThenAnswer(None)
    if op == "agent":
        wf = Workflow([Node("a", "agent", backbone="phi")], output="a")
    else:
        wf = Workflow(
            [Node("a", "agent", backbone="scripted"), Node("v", "verify", backbone="phi", params={"when": "always"})],
            [("a", "v")],
            output="v",
        )
    with pytest.raises(WorkflowError, match="does not render 'tool' messages"):
        WorkflowExecutor(task, BackbonePool([scripted, phi])).run(wf, [task.problems[0]])


class _CountingReads(TwoCallsThenAnswer):
    """Counts the reads of ``calls_per_turn``."""

    def __init__(self):
        super().__init__(None)
        self.reads = 0

    @property
    def calls_per_turn(self):
        self.reads += 1
        return None

    @calls_per_turn.setter
    def calls_per_turn(self, value):
        pass


def test_an_agent_node_reads_its_backbones_limit_once_not_per_problem():
    task = CalculatorTask()
    backbone = _CountingReads()
    wf = Workflow([Node("a", "agent", backbone="scripted")], output="a")
    WorkflowExecutor(task, BackbonePool([backbone])).run(wf, task.problems[:3])
    assert backbone.reads == 1


def test_a_local_backbones_template_facts_do_not_wait_on_a_running_generation(shared_data, embedded_pool_factory):
    # LocalHFBackbone.calls_per_turn took the generation lock on every read: an HFlow search thread
    # waited for another thread's whole generation to learn a fact of an unchanging template.
    llama = _local(embedded_pool_factory, shared_data, "llama", "llama3_1.jinja", "<|eot_id|>", "<|begin_of_text|>")
    first = (llama.calls_per_turn, llama.tool_call_style)
    assert first == (1, "llama3_json") and llama.renders_tool_results is True
    got = []
    with llama._lock:  # a generation in progress
        reader = threading.Thread(target=lambda: got.append((llama.calls_per_turn, llama.tool_call_style)))
        reader.start()
        reader.join(timeout=30)
        blocked = reader.is_alive()
    reader.join()
    assert not blocked and got == [first]
