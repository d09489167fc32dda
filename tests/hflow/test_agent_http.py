"""The agent operator over an OpenAI-compatible endpoint: ``tools=`` out, ``message.tool_calls`` back.

A stdlib server on 127.0.0.1 plays the gold shop episodes the way a server with a tool-call parser
answers (structured ``tool_calls``, ``finish_reason: tool_calls``, its own call ids), and checks
what the client sent: the tool schemas, and the previous calls and their observations.
"""

from __future__ import annotations

import pytest
from fake_http import ScriptedEndpoint

from lightning_agents.hflow import BackbonePool, Node, OpenAIBackbone, Workflow, WorkflowExecutor
from lightning_agents.tasks.agent_world import AgentWorldTask, shop_conversation


def _tool_server(problems) -> ScriptedEndpoint:
    """An endpoint that answers each shop conversation with its gold plan's next assistant turn."""
    plans = {
        p["question"]: [m for m in shop_conversation(p, "lookup")["messages"] if m["role"] == "assistant"]
        for p in problems
    }

    def reply(body, k):
        messages = body["messages"]
        question = next(m["content"] for m in messages if m["role"] == "user")
        gold = plans[question][sum(m["role"] == "assistant" for m in messages)]
        message = {"role": "assistant", "content": gold["content"] or None}
        finish = "stop"
        if gold.get("tool_calls"):
            fn = gold["tool_calls"][0]["function"]
            message["tool_calls"] = [
                {
                    "id": f"srv-{k + 1}",
                    "type": "function",
                    "function": {"name": fn["name"], "arguments": fn["arguments"]},
                }
            ]
            finish = "tool_calls"
        usage = {"prompt_tokens": 20 + 3 * len(messages), "completion_tokens": 7, "total_tokens": 0}
        choices = [{"index": 0, "message": message, "finish_reason": finish}]
        return 200, {
            "id": "x",
            "object": "chat.completion",
            "created": 0,
            "model": body["model"],
            "choices": choices,
            "usage": usage,
        }

    server = ScriptedEndpoint(reply)
    server.plans = plans
    return server


@pytest.fixture
def setting():
    task = AgentWorldTask("val")
    problems = [next(p for p in task.problems if p["kind"] == k) for k in ("pay", "cancel-shipped")]
    server = _tool_server(problems)
    yield task, problems, server
    server.httpd.shutdown()


def test_agent_over_http_sends_tools_reads_tool_calls_and_books_every_turn(setting):
    task, problems, server = setting
    backbone = OpenAIBackbone("remote", "served", server.url, input_price=1.0, output_price=3.0, max_retries=0)
    pool = BackbonePool([backbone])
    wf = Workflow([Node("a", "agent", backbone="remote")], output="a")
    traces = WorkflowExecutor(task, pool).run(wf, problems)
    assert [t.score for t in traces] == [1.0, 1.0]
    assert all(
        [t["function"]["name"] for t in b["tools"]] == [t["function"]["name"] for t in task.tools]
        for b in server.bodies
    )
    # the next request carries the server's call (its own id) and the world's observation for it
    second = next(b for b in server.bodies if sum(m["role"] == "assistant" for m in b["messages"]) == 1)
    call, observation = second["messages"][-2], second["messages"][-1]
    assert call["tool_calls"][0]["id"].startswith("srv-") and observation["tool_call_id"] == call["tool_calls"][0]["id"]
    assert observation["role"] == "tool" and observation["content"].startswith("order ")
    total = pool.ledger.summary()["total"]
    assert total["calls"] == len(server.bodies) == sum(len(server.plans[p["question"]]) for p in problems)
    assert total["input_tokens"] == sum(20 + 3 * len(b["messages"]) for b in server.bodies)
    assert total["output_tokens"] == 7 * len(server.bodies)
    assert sum(t.cost for t in traces) == pytest.approx(total["cost"])
    assert "call get_order" in traces[0].output and "-> order " in traces[0].output
