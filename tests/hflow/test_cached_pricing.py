"""Cached prompt tokens: read from the usage OpenAI and DeepSeek send, priced at a backbone's
``cached_input_price`` in the ledger, logged to ``calls.jsonl`` and replayed on resume to the same
dollars. Without a cached price every figure is the one a full-price prompt gives.
"""

from __future__ import annotations

import json
import math
import threading

import pytest
import yaml
from fake_http import JSONHandler, serve

from lightning_agents.hflow import BackbonePool, ConfigError, Ledger, OpenAIBackbone, Request
from lightning_agents.hflow.backbones import build_backbone

MSG = [{"role": "user", "content": "Ava has 8 shells and gets 2 more. How many?"}]
# gpt-4o-mini's list prices: cached prompt tokens cost half
MINI = {"input_price": 0.15, "output_price": 0.60, "cached_input_price": 0.075}
# binary-exact prices, so a call's dollars are one exact numerator over 1e6
EXACT = {"input_price": 1.0, "output_price": 4.0, "cached_input_price": 0.25}
OPENAI_USAGE = {
    "prompt_tokens": 2000,
    "completion_tokens": 100,
    "total_tokens": 2100,
    "prompt_tokens_details": {"cached_tokens": 1536, "audio_tokens": 0},
    "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0},
}
DEEPSEEK_USAGE = {
    "prompt_tokens": 2000,
    "completion_tokens": 100,
    "total_tokens": 2100,
    "prompt_cache_hit_tokens": 1536,
    "prompt_cache_miss_tokens": 464,
}
EXACT_CALL = (464 * 1.0 + 1536 * 0.25 + 100 * 4.0) / 1e6  # one OPENAI_USAGE call at EXACT prices


def _chat(usage, content="The answer is 10."):
    choices = [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}]
    return {"id": "c", "object": "chat.completion", "created": 0, "model": "m", "choices": choices, "usage": usage}


@pytest.fixture
def endpoint():
    """A fake OpenAI-compatible server; ``start(reply)`` serves ``reply(k) -> body`` for request ``k``."""
    servers = []

    def start(reply):
        count = []

        class Handler(JSONHandler):
            def do_POST(self):
                self.read_json()
                count.append(1)
                self.send_json(200, reply(len(count) - 1))

        servers.append(serve(Handler)[0])
        return f"http://127.0.0.1:{servers[-1].server_address[1]}/v1"

    yield start
    for httpd in servers:  # serve_forever polls every 0.5 s: do not wait for it
        threading.Thread(target=httpd.shutdown, daemon=True).start()


def _backbone(url, **prices):
    return OpenAIBackbone("remote", "m", url, **(prices or EXACT), timeout_s=5.0, max_retries=1, backoff_s=0.01)


# ------------------------------------------------------------------------ prices and cost


def test_without_a_cached_price_every_figure_is_the_full_price_one():
    backbone = build_backbone({"name": "b", "model": "m", "input_price": 0.15, "output_price": 0.60})
    full = (2000 * 0.15 + 100 * 0.60) / 1e6
    assert backbone.cached_input_price == 0.15
    assert backbone.cost(2000, 100) == full
    assert backbone.cost(2000, 100, 1536) == full  # bit for bit, not only close
    assert backbone.describe()["cached_input_price"] == 0.15


def test_the_cached_share_is_priced_at_the_cached_price():
    backbone = build_backbone({"name": "b", "model": "m", **MINI})
    expected = (464 * 0.15 + 1536 * 0.075 + 100 * 0.60) / 1e6
    assert backbone.cost(2000, 100, 1536) == pytest.approx(expected, rel=1e-12)
    assert backbone.cost(2000, 100) == pytest.approx((2000 * 0.15 + 100 * 0.60) / 1e6, rel=1e-12)


@pytest.mark.parametrize("price", [-0.01, math.nan, math.inf, "cheap"])
def test_a_bad_cached_price_is_refused(price):
    with pytest.raises(ConfigError, match="cached_input_price must be a finite number >= 0"):
        build_backbone(
            {"name": "b", "model": "m", "input_price": 1.0, "output_price": 2.0, "cached_input_price": price}
        )


def test_the_spec_takes_the_cached_price_and_still_refuses_unknown_keys(tmp_path, capsys):
    spec = {"name": "b", "model": "m", "input_price": 1.0, "output_price": 2.0, "cached_input_price": 0.5}
    assert build_backbone(spec).cached_input_price == 0.5
    with pytest.raises(ConfigError, match="bad backbone spec"):
        build_backbone({**spec, "cached_price": 0.5})
    from lightning_agents.cli import cli_main

    spec = {**spec, "kind": "openai", "base_url": "http://127.0.0.1:9/v1", "cached_price": 0.5}
    path = tmp_path / "evolve.yaml"
    path.write_text(yaml.safe_dump({"backbones": [spec], "output": str(tmp_path / "out"), "progress": False}))
    with pytest.raises(SystemExit):
        cli_main(["evolve", "--config", str(path)])
    # named as written: the item, its backbone and its line (not backbones.init_args.cached_price)
    assert f"backbones[0].cached_price (b): no such setting ({path}:" in capsys.readouterr().err


# ------------------------------------------------------------------------ reading usage


@pytest.mark.parametrize(
    ("extra", "cached"),
    [
        ({"prompt_tokens_details": {"cached_tokens": 1536, "audio_tokens": 0}}, 1536),  # OpenAI
        ({"prompt_cache_hit_tokens": 1536, "prompt_cache_miss_tokens": 464}, 1536),  # DeepSeek
        ({"prompt_tokens_details": None}, 0),
        ({}, 0),
        ({"prompt_tokens_details": {"audio_tokens": 0}}, 0),
        ({"prompt_tokens_details": {"cached_tokens": None}, "prompt_cache_hit_tokens": None}, 0),
        ({"prompt_tokens_details": {"cached_tokens": 99999}}, 2000),  # never more than the prompt
        ({"prompt_cache_hit_tokens": -5}, 0),  # never negative
        ({"prompt_tokens_details": "n/a", "prompt_cache_hit_tokens": {"tokens": 3}}, 0),
    ],
    ids=["openai", "deepseek", "null", "missing", "no-count", "null-counts", "over-large", "negative", "garbage"],
)
def test_cached_tokens_are_read_from_every_usage_shape(endpoint, extra, cached):
    usage = {"prompt_tokens": 2000, "completion_tokens": 100, "total_tokens": 2100, **extra}
    (c,) = _backbone(endpoint(lambda k: _chat(usage))).complete([Request(MSG)])
    assert (c.error, c.input_tokens, c.output_tokens, c.cached_tokens) == (None, 2000, 100, cached)


def test_reasoning_tokens_are_not_counted_twice(endpoint):
    # OpenAI's reasoning tokens are part of completion_tokens: the call bills 300 output tokens, not 556
    usage = {**OPENAI_USAGE, "completion_tokens": 300, "completion_tokens_details": {"reasoning_tokens": 256}}
    pool = BackbonePool([_backbone(endpoint(lambda k: _chat(usage)))])
    (c,) = pool.complete("remote", [Request(MSG)])
    assert (c.output_tokens, c.cached_tokens) == (300, 1536)
    assert pool.ledger.total_cost() == (464 * 1.0 + 1536 * 0.25 + 300 * 4.0) / 1e6


def test_a_retried_malformed_response_books_its_cached_share(endpoint):
    empty = {**_chat(OPENAI_USAGE), "choices": []}
    (c,) = _backbone(endpoint(lambda k: empty if k == 0 else _chat(OPENAI_USAGE))).complete([Request(MSG)])
    assert (c.error, c.input_tokens, c.cached_tokens) == (None, 4000, 3072)


# ------------------------------------------------------------------------ the ledger


@pytest.mark.parametrize("usage", [OPENAI_USAGE, DEEPSEEK_USAGE], ids=["openai", "deepseek"])
def test_the_ledger_books_cached_tokens_at_the_cached_price(endpoint, tmp_path, usage):
    pool = BackbonePool([_backbone(endpoint(lambda k: _chat(usage)))])
    pool.ledger.log_calls(tmp_path / "calls.jsonl")
    pool.complete("remote", [Request(MSG)] * 3, workflow="w")
    total = pool.ledger.summary()["total"]
    assert (total["calls"], total["input_tokens"], total["cached_tokens"]) == (3, 6000, 4608)
    assert total["cost"] == pool.ledger.total_cost() == (3 * 464 * 1.0 + 3 * 1536 * 0.25 + 3 * 100 * 4.0) / 1e6
    assert pool.ledger.state_dict()["rows"][0]["cached_tokens"] == 4608
    rows = [json.loads(line) for line in (tmp_path / "calls.jsonl").read_text().splitlines()]
    assert [r["cached_tokens"] for r in rows] == [1536] * 3


def test_the_call_log_replays_to_the_same_dollars_and_reads_old_lines(tmp_path):
    log = tmp_path / "calls.jsonl"
    ledger = Ledger({"remote": (1.0, 4.0, 0.25)})
    ledger.log_calls(log)
    for generation, (prompt, cached) in enumerate([(2000, 1536), (900, 0), (3000, 2944)]):
        ledger.record("remote", prompt, 100, workflow="w", generation=generation, cached_tokens=cached)
    replayed = Ledger({"remote": (1.0, 4.0, 0.25)})
    replayed.log_calls(log)
    assert replayed.replay_log() == 3
    assert replayed.total_cost() == ledger.total_cost()
    assert replayed.summary("generation") == ledger.summary("generation")
    # a line written before cached tokens were logged: that call had none
    old = {"backbone": "remote", "role": "workflow", "workflow": "old", "generation": 0}
    with log.open("a") as f:
        f.write(json.dumps({**old, "input_tokens": 2000, "output_tokens": 100}) + "\n")
    assert replayed.replay_log() == 4
    assert replayed.summary("workflow")["old"] == {
        "calls": 1,
        "input_tokens": 2000,
        "output_tokens": 100,
        "cached_tokens": 0,
        "cost": (2000 * 1.0 + 100 * 4.0) / 1e6,
    }


def test_a_saved_ledger_round_trips_and_an_older_one_loads():
    ledger = Ledger({"remote": (1.0, 4.0, 0.25)})
    ledger.record("remote", 2000, 100, workflow="w", cached_tokens=1536)
    restored = Ledger()
    restored.load_state_dict(json.loads(json.dumps(ledger.state_dict())))
    assert restored.prices == ledger.prices and restored.total_cost() == ledger.total_cost() == EXACT_CALL
    # a state saved before cached prices: two prices, no cached tokens; the configured cached price stays
    row = {"backbone": "remote", "role": "workflow", "workflow": "w", "generation": 0, "calls": 1}
    older = {"prices": {"remote": [1.0, 4.0]}, "rows": [{**row, "input_tokens": 2000, "output_tokens": 100}]}
    ledger.load_state_dict(older)
    assert ledger.prices["remote"] == (1.0, 4.0, 0.25)
    assert ledger.summary()["total"]["cached_tokens"] == 0 and ledger.total_cost() == 2400 / 1e6
    fresh = Ledger()
    fresh.load_state_dict(older)
    assert fresh.prices["remote"] == (1.0, 4.0, 1.0)


# ------------------------------------------------------------------------ evolve, killed and resumed


def _evolve(tmp_path, url, name):
    from lightning_agents.cli import cli_main

    backbone = {"name": "remote", "model": "m", "kind": "openai", "base_url": url, "max_retries": 0, **EXACT}
    search = {"eval_problems": 4, "population_size": 2, "offspring": 2, "max_nodes": 2, "rater": "none"}
    config = {
        "backbones": [backbone],
        "task": "embedded:arithmetic/val",
        "task_size": 6,
        "generations": 1,
        "search": {**search, "heldout_problems": 0, "workers": 1},
        "memory_file": str(tmp_path / f"{name}_memory.json"),
        "output": str(tmp_path / name),
        "progress": False,
    }
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    cli_main(["evolve", "--config", str(path)])
    return json.loads((tmp_path / name / "ledger.json").read_text())


def test_evolve_killed_and_resumed_pays_the_same_dollars_for_cached_tokens(endpoint, tmp_path, monkeypatch):
    import lightning_agents.commands.evolve as evolve_module

    url = endpoint(lambda k: _chat(OPENAI_USAGE))
    whole = _evolve(tmp_path, url, "whole")
    real, saves = evolve_module._write, []

    def write(path, text):  # the first generation runs and is paid; its state save never lands
        if path.name == "search_state.json":
            saves.append(path)
            if len(saves) == 2:
                raise KeyboardInterrupt("killed")
        real(path, text)

    with monkeypatch.context() as patch:
        patch.setattr(evolve_module, "_write", write)
        with pytest.raises(KeyboardInterrupt):
            _evolve(tmp_path, url, "killed")
    resumed = _evolve(tmp_path, url, "killed")
    calls = whole["total"]["calls"]
    assert calls > 0 and resumed["total"]["calls"] == calls
    assert resumed["total"]["cached_tokens"] == whole["total"]["cached_tokens"] == 1536 * calls
    assert resumed["total"]["cost"] == pytest.approx(whole["total"]["cost"], rel=1e-12)
    assert whole["total"]["cost"] == pytest.approx(calls * EXACT_CALL, rel=1e-12)


def test_a_traces_cost_is_what_its_calls_were_billed(endpoint, tmp_path):
    # The fitness's cost term reads trace costs: they must price the cached share as the ledger does.
    _evolve(tmp_path, endpoint(lambda k: _chat(OPENAI_USAGE)), "run")
    lines = (tmp_path / "run" / "traces.jsonl").read_text().splitlines()
    costs = [json.loads(line)["trace"]["cost"] for line in lines if '"trace"' in line]
    assert costs and all(c > 0 for c in costs)
    for cost in costs:  # every call costs EXACT_CALL: a trace's cost is a whole number of them
        assert cost / EXACT_CALL == pytest.approx(round(cost / EXACT_CALL), abs=1e-9)
