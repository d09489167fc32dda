"""A fake OpenAI-compatible server on 127.0.0.1 that answers HumanEval prompts with the gold
solution, cut at the request's token limit (one token per whitespace-separated piece or
punctuation mark, about what a BPE tokenizer counts for code), through the official openai client."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest
from fake_http import JSONHandler, serve

from lightning_agents.hflow import (
    BackbonePool,
    Node,
    OpenAIBackbone,
    Workflow,
    WorkflowExecutor,
)
from lightning_agents.tasks import HumanEvalTask

DATA = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "humaneval" / "HumanEval.jsonl.gz"
_TOKEN = re.compile(r"\s+|\w+|[^\w\s]")


@pytest.fixture(scope="module")
def gold_server():
    if not DATA.is_file():
        pytest.skip(f"{DATA} is not there")
    with gzip.open(DATA, "rt") as f:
        rows = [json.loads(x) for x in f]
    gold = {r["prompt"].strip(): r["prompt"] + r["canonical_solution"] for r in rows}
    state = {"bodies": [], "fail_on": None}

    class Handler(JSONHandler):
        def do_POST(self):
            body = self.read_json()
            state["bodies"].append(body)
            user = body["messages"][-1]["content"]
            # whatever the task wraps around it, the problem's stub is in the user turn
            prompt = next((k for k in gold if k in user), "")
            if state["fail_on"] and state["fail_on"] == prompt:
                return self.send_json(400, {"error": {"message": "This model's maximum context length is 8192 tokens"}})
            answer = "```python\n" + gold.get(prompt, "") + "\n```"
            pieces = _TOKEN.findall(answer)
            limit = body.get("max_tokens") or body.get("max_completion_tokens")
            text = "".join(pieces[: limit * 2])  # whitespace pieces are free: ~limit real tokens
            self.send_json(
                200,
                {
                    "id": "x",
                    "object": "chat.completion",
                    "created": 0,
                    "model": body["model"],
                    "choices": [
                        {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}
                    ],
                    "usage": {
                        "prompt_tokens": len(_TOKEN.findall(user)) // 2,
                        "completion_tokens": min(limit, len(pieces) // 2),
                        "total_tokens": 0,
                    },
                },
            )

    httpd, state["url"] = serve(Handler)
    yield state
    httpd.shutdown()


@pytest.mark.slow
def test_generate_on_humaneval_reaches_the_canonical_pass_rate_and_a_400_costs_one_problem(gold_server):
    task = HumanEvalTask(str(DATA))
    pool = BackbonePool(
        [
            OpenAIBackbone(
                "coder",
                "gold",
                gold_server["url"],
                0.15,
                0.6,
                max_retries=0,
                max_concurrency=8,
                max_tokens_param="max_completion_tokens",
                send_temperature=False,
            )
        ]
    )
    wf = Workflow([Node("n0", "generate", backbone="coder")])
    problems = task.problems
    gold_server["fail_on"] = problems[7]["prompt"].strip()
    traces = WorkflowExecutor(task, pool, sandbox_workers=2).run(wf, problems)
    scores = {t.problem_id: t.score for t in traces}
    # every canonical solution passes; the one request the server refused costs that problem only
    assert sum(scores.values()) == len(problems) - 1 and scores[problems[7]["id"]] == 0.0
    assert traces[7].errors == 1
    # model quirks: o1-style fields, no temperature
    body = gold_server["bodies"][-1]
    assert "max_completion_tokens" in body and "max_tokens" not in body and "temperature" not in body


def test_the_old_48_token_limit_truncates_humaneval(gold_server):
    task = HumanEvalTask(str(DATA), n=12, seed=0)
    pool = BackbonePool([OpenAIBackbone("coder", "gold", gold_server["url"], 0.15, 0.6, max_retries=0)])
    gold_server["fail_on"] = None
    wf = Workflow([Node("n0", "generate", backbone="coder")])
    full = WorkflowExecutor(task, pool, sandbox_workers=2).run(wf, task.problems)
    short = WorkflowExecutor(task, pool, sandbox_workers=2, max_tokens={"generate": 48}).run(wf, task.problems)
    assert sum(t.score for t in full) == 12 and sum(t.score for t in short) < 6
