"""Agent rollouts on Mistral's real chat templates, follow-ups of d86b624: the tool-call style of
vLLM's Mistral v0.3 template (its calls were read in the hermes style, so taken for final
answers), Mistral-written call text read as calls under each stored Mistral template, HFlow's
agent node giving the episode the template's id fact, and the review of d86b624's id rewriting."""

from __future__ import annotations

import re

import pytest
import torch
from chat_template_helpers import CALCULATOR, OURS, OUTPUTS, SPECIAL_WIDE, tokenizer_with_template
from fake_http import ScriptedEndpoint
from test_agent_rl_real_templates import _ScriptedTokens
from test_agent_rollout_session42 import _ids, _Texts

from lightning_agents.datamodules.conversations import normalize_conversation, template_layout, tokenize_conversation
from lightning_agents.hflow import BackbonePool, Completion, LocalHFBackbone, Node, Workflow, WorkflowExecutor
from lightning_agents.hflow.backbones import Backbone, build_backbone
from lightning_agents.models import load_model_and_tokenizer, load_tokenizer
from lightning_agents.rollout import HFGenerationEngine, SamplingConfig
from lightning_agents.rollout.agent_loop import continuation_text, run_agent_loop, run_agent_rl
from lightning_agents.rollout.agent_turn import model_tool_call_style
from lightning_agents.rollout.hf_engine import template_messages
from lightning_agents.rollout.tool_calls import parse_tool_calls
from lightning_agents.tasks import CalculatorTask
from lightning_agents.template_clock import render_chat_template

#: vLLM's examples/tool_chat_template_mistral_parallel.jinja (Mistral-7B-Instruct-v0.3's logic)
V03 = OURS / "vllm_mistral_v03_parallel.jinja"
NEMO = OURS / "mistral_nemo_2407.jinja"
SMALL = OUTPUTS / "Mistral-Small-3.2-24B-Instruct-2506.jinja"
MINISTRAL = OUTPUTS / "mistralai-Ministral-3-14B-Reasoning-2512.jinja"
NINE = re.compile(r"[A-Za-z0-9]{9}")
#: What the models write: Mistral-7B-v0.3 and Nemo a JSON list after [TOOL_CALLS] (v3 tokenizers),
#: Small 3.2, Devstral, Magistral and Ministral 3 `name[ARGS]{json}` (v11 and later).
V3_CALL = '[TOOL_CALLS] [{"name": "calculator", "arguments": {"expression": "EXPR"}}]'
V11_CALL = '[TOOL_CALLS]calculator[ARGS]{"expression": "EXPR"}'
WRITES = {V03: V3_CALL, NEMO: V3_CALL.replace("] [", "]["), SMALL: V11_CALL, MINISTRAL: V11_CALL}


def _mistral(path):
    return tokenizer_with_template(load_tokenizer("embedded:student"), path.read_text(), "<s>", "</s>", SPECIAL_WIDE)


# ----------------------------------------------------------------------------------------- style
def test_vllm_mistral_v03_template_reads_its_calls_in_the_mistral_style():
    # The template writes its tool-call instructions into the user message only while it is the
    # last, so the generation prompt differed from the conversation before the call and the layout
    # probe found no call opener: the calls were read as hermes blocks, none parsed.
    tok = _mistral(V03)
    assert template_layout(tok).tool_call_opener == '[TOOL_CALLS] [{"name": "'
    assert model_tool_call_style(tok) == "mistral"


@pytest.mark.parametrize("path", list(WRITES), ids=lambda p: p.name)
def test_mistral_written_calls_are_read_as_calls_under_each_mistral_template(path):
    tok = _mistral(path)
    style = model_tool_call_style(tok)
    assert style == "mistral", path.name
    content, calls = parse_tool_calls(WRITES[path].replace("EXPR", "17*23"), id_prefix="call_0", style=style)
    assert content == "" and [c["function"]["name"] for c in calls] == ["calculator"]


def test_a_v03_call_runs_on_the_text_and_token_paths():
    # Taken for the final answer, the episode ended at the call with nothing run (silently).
    tok = _mistral(V03)
    task = CalculatorTask(split="val", n=1)
    replies = [V3_CALL.replace("EXPR", "17*23"), V3_CALL.replace("EXPR", "391+1"), "392."]
    engine = _Texts(tok, replies)
    rollout = run_agent_loop(engine, task.problems, trials=1, task=task, max_turns=3)[0]
    assert rollout["info"]["finished"] and len(_ids(rollout["traj"])[0]) == 2
    calls, results = _ids(rollout["traj"])
    assert calls == results and len(set(calls)) == 2 and all(NINE.fullmatch(i) for i in calls)
    assert "[TOOL_RESULTS]" in engine.prompts[-1] and "391" in engine.prompts[-1]
    batch = run_agent_rl(_ScriptedTokens(tok, replies), task, task.problems, 2, SamplingConfig(), max_turns=3)
    assert all(r["info"]["finished"] and r["info"]["tool_calls"] == 2 for r in batch.rollouts)


# ----------------------------------------------------------------------------------------- HFlow
HERMES_CALL = '<tool_call>{"name": "calculator", "arguments": {"expression": "6*7"}}</tool_call>'


class _HermesUnderAnIdCheckingTemplate(Backbone):
    """A backbone whose model writes hermes calls while its chat template refuses ids shorter than
    nine characters, as vLLM's Mistral v0.3 template does: every request is rendered with it, as a
    local backbone renders it."""

    kind = "scripted"
    tool_call_style = "hermes"
    alphanumeric_ids = True

    def __init__(self):
        super().__init__("scripted", 1.0, 2.0)
        self.tokenizer, self.requests, self.rendered = _mistral(V03), [], []

    def _complete(self, requests):
        out = []
        for r in requests:
            self.requests.append(r)
            messages = template_messages(self.tokenizer, r.messages)
            self.rendered.append(render_chat_template(self.tokenizer, messages, tokenize=False))
            first = not any(m["role"] == "assistant" for m in r.messages)
            out.append(Completion(HERMES_CALL if first else "The answer is 42.", input_tokens=10, output_tokens=5))
        return out


def test_an_hflow_agent_node_writes_the_ids_its_backbones_template_takes():
    # The agent node did not give its episodes the template's id fact: the hermes call's id
    # call_0_0 made the next render raise "Tool call IDs should be alphanumeric strings with
    # length >= 9!", stopping the workflow run (run_agent_loop and run_agent_rl passed it).
    task = CalculatorTask()
    backbone = _HermesUnderAnIdCheckingTemplate()
    wf = Workflow([Node("a", "agent", backbone="scripted")], output="a")
    (trace,) = WorkflowExecutor(task, BackbonePool([backbone])).run(wf, [task.problems[0]])
    assert trace.answer and '"content": 42' in backbone.rendered[-1]
    calls, results = _ids(backbone.requests[-1].messages)
    assert calls == results and len(calls) == 1 and NINE.fullmatch(calls[0])


@pytest.mark.parametrize(
    ("path", "expected"), [(V03, True), (NEMO, True), (MINISTRAL, False)], ids=["v03", "nemo", "ministral3"]
)
def test_an_hflow_node_on_a_local_backbone_reads_the_id_fact_from_its_template(path, expected):
    backbone = LocalHFBackbone(
        "local", input_price=0.0, output_price=0.0, model_object=torch.nn.Linear(1, 1), tokenizer=_mistral(path)
    )
    executor = WorkflowExecutor(CalculatorTask(), BackbonePool([backbone]))
    assert executor._alphanumeric_ids(Node("a", "agent", backbone="local")) is expected


class _HermesCaller(Backbone):
    """Another model's backbone (hermes calls, ids ``call_{turn}_{i}``): one call, then an answer."""

    kind = "scripted"
    tool_call_style = "hermes"

    def __init__(self):
        super().__init__("hermes", 1.0, 2.0)

    def _complete(self, requests):
        return [
            Completion(
                "The answer is 42." if any(m["role"] == "assistant" for m in r.messages) else HERMES_CALL,
                input_tokens=10,
                output_tokens=5,
            )
            for r in requests
        ]


def test_a_verify_node_on_a_mistral_backbone_renders_another_backbones_call_ids():
    # An agent node on a hermes backbone wrote call_0_0; a verify node on a Mistral-Nemo local
    # backbone rendered that history and the template raised "Tool call IDs should be
    # alphanumeric strings with length 9!", stopping the run. The ids are renamed for the render,
    # each call and its result alike.
    model, tokenizer = load_model_and_tokenizer("embedded:student")
    nemo = tokenizer_with_template(tokenizer, NEMO.read_text(), "<s>", "</s>", SPECIAL_WIDE)
    local = LocalHFBackbone("nemo", input_price=0.0, output_price=0.0, model_object=model, tokenizer=nemo)
    engine, prompts = local._ensure_engine(), []
    render = engine.render
    # the render is what is tested; the small model generates from plain text (Nemo's special
    # tokens lie beyond its embeddings)
    engine.render = lambda prompt, tools=None: prompts.append(render(prompt, tools)) or "Check: 6*7 ="
    task = CalculatorTask()
    wf = Workflow(
        [
            Node("a", "agent", backbone="hermes"),
            Node("v", "verify", backbone="nemo", params={"when": "always", "max_turns": 1, "max_tokens": 4}),
        ],
        [("a", "v")],
        output="v",
    )
    WorkflowExecutor(task, BackbonePool([_HermesCaller(), local])).run(wf, [task.problems[0]])
    assert prompts, "the verify node never rendered the episode"
    (call_id,) = re.findall(r'"id": "([^"]*)"', prompts[-1])
    assert NINE.fullmatch(call_id) and f'"call_id": "{call_id}"' in prompts[-1]


def test_the_rl_glue_renames_another_models_ids_as_the_render_does():
    # the glue of a turn and the rendered history must name the same id, or the token stream's
    # result answers a call the prompt never showed
    tok = _mistral(NEMO)
    call = {
        "id": "call_0_0",
        "type": "function",
        "function": {"name": "calculator", "arguments": '{"expression": "6*7"}'},
    }
    history = [
        {"role": "user", "content": "What is 6*7?"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_0_0", "name": "calculator", "content": "42"},
        {"role": "tool", "tool_call_id": "call_0_invalid", "name": "invalid", "content": "error: malformed"},
    ]
    glue = continuation_text(tok, history[:2], history[2:], [CALCULATOR], None, ["</s>"])
    rendered = HFGenerationEngine(None, tok).render(history, [CALCULATOR])
    (call_id,) = re.findall(r'"id": "([^"]*)"', rendered)
    answered = re.findall(r'"call_id": "([^"]*)"', glue)
    assert (
        NINE.fullmatch(call_id) and answered[0] == call_id and answered == re.findall(r'"call_id": "([^"]*)"', rendered)
    )
    assert len(set(answered)) == 2 and all(NINE.fullmatch(i) for i in answered)


# ------------------------------------------------ review of a722ec6: L1 (RL), L2 (endpoint), L3 (one rule)
def test_rl_answers_a_call_under_an_id_its_template_refuses_as_malformed():
    # A Nemo-template model wrote '"id": "call_1"'; the call ran under a renamed id (0call0000),
    # so the trained tokens paired the sampled call with a result for another id. Now the call
    # is not run: it is answered as malformed, with the id rule, and the stored trajectory keeps
    # the call as the text the model wrote.
    tok = _mistral(NEMO)
    written = '[TOOL_CALLS][{"name": "calculator", "arguments": {"expression": "17*23"}, "id": "call_1"}]'
    engine = _ScriptedTokens(tok, [written, "It is 391."])
    task = CalculatorTask(split="val", n=1)
    batch = run_agent_rl(engine, task, task.problems, num_samples=1, sampling=SamplingConfig(), max_turns=2)
    rollout = batch.rollouts[0]
    assert rollout["info"]["malformed_calls"] == 1
    assistant, result = rollout["traj"][-3:-1]
    assert "tool_calls" not in assistant and '"id": "call_1"' in assistant["content"]
    # a user notice: a tool one is refused once an answer follows (agent_turn.model_notice_role)
    assert result["role"] == "user" and "nine letters or digits, not 'call_1'" in result["content"]
    out = batch.out
    mask, real = out.loss_mask[0].bool(), out.completion_mask[0].bool()
    glue = tok.decode(out.completion_ids[0][~mask & real].tolist(), skip_special_tokens=False)
    assert "391" not in glue.split("[/TOOL_RESULTS]")[0]  # no calculator result under another id


def test_a_call_id_the_model_wrote_nine_characters_long_still_runs():
    tok = _mistral(NEMO)
    written = '[TOOL_CALLS][{"name": "calculator", "arguments": {"expression": "17*23"}, "id": "Ab3dE5gH9"}]'
    engine = _ScriptedTokens(tok, [written, "It is 391."])
    task = CalculatorTask(split="val", n=1)
    batch = run_agent_rl(engine, task, task.problems, num_samples=1, sampling=SamplingConfig(), max_turns=2)
    assert batch.rollouts[0]["info"]["malformed_calls"] == 0
    calls, results = _ids(batch.rollouts[0]["traj"])
    assert calls == results == ["Ab3dE5gH9"]


def _openai_reply(body, k):
    for m in body["messages"]:
        ids = [c["id"] for c in m.get("tool_calls") or []] + [m.get("tool_call_id")] * (m["role"] == "tool")
        # vLLM's Mistral path: ids longer than nine keep their last nine, then mistral-common checks
        if any(not NINE.fullmatch(i[-9:] if len(i) > 9 else i) for i in ids):
            return 400, {"object": "error", "message": "Tool call id must be a-z, A-Z, 0-9, with a length of 9."}
    usage = {"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13}
    choice = {"index": 0, "message": {"role": "assistant", "content": "Verified: 42."}, "finish_reason": "stop"}
    head = {"id": "x", "object": "chat.completion", "created": 0, "model": body["model"]}
    return 200, {**head, "choices": [choice], "usage": usage}


@pytest.mark.parametrize("stated", ["spec", "attribute"])
def test_a_verify_node_on_a_mistral_endpoint_sends_ids_its_server_takes(stated):
    # Only the local render renamed another backbone's call_0_0: a Mistral endpoint got it as it
    # was and vLLM answered 400 (not retried), so the problem scored 0 with an error. The
    # endpoint option alphanumeric_ids renames the history it sends by the rollout/SFT rule.
    server = ScriptedEndpoint(_openai_reply)
    try:
        spec = {"name": "mistral", "model": "served", "kind": "openai", "base_url": server.url, "max_retries": 0}
        spec |= {"input_price": 1.0, "output_price": 3.0}
        if stated == "spec":  # the workflow config's backbone entry
            mistral = build_backbone({**spec, "alphanumeric_ids": True})
        else:
            mistral = build_backbone(spec)
            mistral.alphanumeric_ids = True
        task = CalculatorTask()
        wf = Workflow(
            [Node("a", "agent", backbone="hermes"), Node("v", "verify", backbone="mistral", params={"when": "always"})],
            [("a", "v")],
            output="v",
        )
        (trace,) = WorkflowExecutor(task, BackbonePool([_HermesCaller(), mistral])).run(wf, [task.problems[0]])
    finally:
        server.httpd.shutdown()
    assert trace.errors == 0
    sent = [c["id"] for b in server.bodies for m in b["messages"] for c in m.get("tool_calls") or []]
    answered = [m["tool_call_id"] for b in server.bodies for m in b["messages"] if m["role"] == "tool"]
    assert sent and sent == answered and all(NINE.fullmatch(i) for i in sent)


def test_the_rollout_and_sft_rename_another_backbones_ids_alike():
    # The rollout renamed call_0_0 as 00hist000 and SFT as 667848c66: SFT of an HFlow trajectory
    # trained in a context the verify node's model never read. One rule now (a hash).
    tok = _mistral(NEMO)

    def call(i, expression):
        arguments = f'{{"expression": "{expression}"}}'
        return {"id": i, "type": "function", "function": {"name": "calculator", "arguments": arguments}}

    traj = [
        {"role": "user", "content": "What is 6*7+1?"},
        {"role": "assistant", "content": "", "tool_calls": [call("call_0_0", "6*7")]},
        {"role": "tool", "tool_call_id": "call_0_0", "name": "calculator", "content": "42"},
        {"role": "assistant", "content": "", "tool_calls": [call("0call1000", "42+1")]},
        {"role": "tool", "tool_call_id": "0call1000", "name": "calculator", "content": "43"},
        {"role": "assistant", "content": "It is 43."},
    ]
    rollout = HFGenerationEngine(None, tok).render(traj[:-1], [CALCULATOR])
    messages, tools = normalize_conversation({"messages": traj, "tools": [CALCULATOR]})
    sft = tok.decode(tokenize_conversation(tok, messages, tools)["input_ids"])
    ids = re.findall(r'"id": "([^"]*)"', rollout)
    assert ids == re.findall(r'"id": "([^"]*)"', sft) and ids[1] == "0call1000" and NINE.fullmatch(ids[0])
