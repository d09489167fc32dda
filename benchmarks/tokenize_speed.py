"""Assistant-label tokenization speed on tau-bench-length conversations.

The 200 real GPT-4o tau-bench airline trajectories (about 30 messages, 12k characters, a system
prompt and tool calls each) are repeated to ``--n`` conversations and tokenized by
``tokenize_to_dataset`` (one render and one tokenization per conversation, ``datasets.map`` with
``--num_proc`` processes; the on-disk cache is off so the work is measured). The tokenizer is
SmolLM2-135M-Instruct's (49,152 tokens) when ``--tokenizer`` names it, else the embedded one with
the template's special tokens added; the chat template is Qwen2.5's original, which has no
``{% generation %}`` markers, so every assistant turn is located in the rendered text.

Baselines, measured in the same run and process on the first ``--baseline_n`` conversations,
interleaved in chunks of 25 with the current code so that a change in the machine's load hits
both alike: the previous implementation (each conversation rendered with ``apply_chat_template``,
tokenized on its own with offsets, labels set in a Python loop over the tokens), against the
current ``tokenize_many`` on the same conversations, both in one process, timed in process CPU
seconds and wall seconds. ``--prefix_baseline_n`` also times the pre-issue-13 method
(re-rendering each prefix of the conversation twice per assistant turn) on that many.

    python benchmarks/tokenize_speed.py [--n 10000] [--num_proc 2] [--baseline_n 200] [--tokenizer PATH]

Prints one JSON line.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import re
import time
import timeit
from pathlib import Path

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def prefix_render_baseline(tokenizer, messages, tools):
    """The pre-issue-13 method: per assistant turn, render the prefix with and without it."""

    def ids(msgs, gen=False):
        return tokenizer(
            tokenizer.apply_chat_template(msgs, tools=tools, tokenize=False, add_generation_prompt=gen),
            add_special_tokens=False,
        )["input_ids"]

    full = ids(messages)
    for i, m in enumerate(messages):
        if m["role"] == "assistant":
            ids(messages[:i], True)
            ids(messages[: i + 1])
    return full


def previous_implementation(tokenizer, messages, tools):
    """The implementation before the batched one: one render, one tokenizer call, a Python label loop."""
    from lightning_agents.datamodules.conversations import IGNORE_INDEX, render_conversation

    text, spans = render_conversation(tokenizer, messages, tools)
    encoded = tokenizer([text], add_special_tokens=False, return_offsets_mapping=True)
    input_ids, offsets = encoded["input_ids"][0], encoded["offset_mapping"][0]
    labels = [IGNORE_INDEX] * len(input_ids)
    k = 0
    for t, (s, e) in enumerate(offsets):
        if e <= s:
            continue
        while k < len(spans) and spans[k][1] <= s:
            k += 1
        if k < len(spans) and spans[k][0] < e:
            labels[t] = input_ids[t]
    return {"input_ids": input_ids, "labels": labels}


def interleaved(tokenizer, conversations, chunk=25):
    """CPU and wall seconds of the previous and the current implementation on the same conversations."""
    from lightning_agents.datamodules.conversations import tokenize_many

    times = {"previous": [0.0, 0.0], "current": [0.0, 0.0]}
    same = True
    for at in range(0, len(conversations), chunk):
        part = conversations[at : at + chunk]
        # the current path gets its conversations as the data module does: freshly decoded JSON
        decoded = [json.loads(json.dumps(c)) for c in part]
        for name in ("previous", "current"):
            cpu, wall = time.process_time(), timeit.default_timer()
            if name == "previous":
                rows = [previous_implementation(tokenizer, c["messages"], c["tools"]) for c in part]
            else:
                rows = tokenize_many(tokenizer, [(c["messages"], c["tools"]) for c in decoded], None, from_json=True)
            times[name][0] += time.process_time() - cpu
            times[name][1] += timeit.default_timer() - wall
            if name == "previous":
                previous_rows = rows
        same &= all(
            a["input_ids"] == b["input_ids"].tolist() and a["labels"] == b["labels"].tolist()
            for a, b in zip(previous_rows, rows)
        )
    return times, same


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--n", type=int, default=10_000, help="conversations, the 200 trajectories repeated (default: 10000)"
    )
    parser.add_argument(
        "--num_proc",
        type=int,
        default=None,
        help="tokenizer processes of datasets.map (default: one per CPU, up to 8, from 2,000 conversations; else 1)",
    )
    parser.add_argument("--baseline_n", type=int, default=200, help="conversations for the interleaved baseline")
    parser.add_argument("--prefix_baseline_n", type=int, default=0, help="conversations for the prefix method")
    parser.add_argument("--tokenizer", default=None, help="tokenizer folder (default: the embedded one)")
    args = parser.parse_args()

    import datasets
    import tokenizers
    import torch
    import transformers

    from lightning_agents.datamodules.chat import tokenize_to_dataset
    from lightning_agents.datamodules.conversations import normalize_conversation
    from lightning_agents.models import load_tokenizer

    template = (DATA / "chat_templates" / "qwen2_5.jinja").read_text()
    tokenizer = copy.deepcopy(load_tokenizer(args.tokenizer or "embedded:student"))
    specials = sorted(
        set(re.findall(r"<\|[a-z_]+\|>|</?(?:tool_call|tool_response)>", template)) - set(tokenizer.get_vocab())
    )
    if specials:
        tokenizer.add_special_tokens({"additional_special_tokens": specials}, replace_extra_special_tokens=False)
    tokenizer.chat_template = template

    trajectories = json.loads((DATA / "tau_bench" / "gpt-4o-airline.json").read_text())
    base = []
    for record in trajectories:
        messages, tools = normalize_conversation({"messages": record["traj"]})
        base.append({"messages": messages, "tools": tools})
    conversations = [base[i % len(base)] for i in range(args.n)]
    chars = sum(len(json.dumps(c["messages"])) for c in conversations) / len(conversations)

    children = os.times()
    cpu, start = time.process_time(), time.perf_counter()
    rows, errors, dropped = tokenize_to_dataset(
        conversations, tokenizer, max_length=None, num_proc=args.num_proc, cache_dir=None
    )
    seconds = time.perf_counter() - start
    after = os.times()
    # the workers of datasets.map are reaped when the map ends, so their CPU time is counted here
    cpu_seconds = (
        time.process_time()
        - cpu
        + after.children_user
        - children.children_user
        + after.children_system
        - children.children_system
    )
    tokens = sum(len(r) for r in rows["input_ids"])
    labelled = sum(sum(1 for x in r if x != -100) for r in rows["labels"])

    times, same = interleaved(tokenizer, conversations[: args.baseline_n])
    n_base = max(1, min(args.baseline_n, len(conversations)))

    prefix_ms = None
    if args.prefix_baseline_n:
        start = time.perf_counter()
        for c in conversations[: args.prefix_baseline_n]:
            prefix_render_baseline(tokenizer, c["messages"], c["tools"])
        prefix_ms = round(1000 * (time.perf_counter() - start) / args.prefix_baseline_n, 1)

    print(
        json.dumps(
            {
                "benchmark": "tokenize_speed",
                "conversations": args.n,
                "mean_chars_per_conversation": round(chars),
                "mean_tokens_per_conversation": round(tokens / max(1, len(rows))),
                "labelled_fraction": round(labelled / max(1, tokens), 4),
                "errors": len(errors),
                "dropped": dropped,
                "seconds": round(seconds, 2),
                "cpu_seconds_all_processes": round(cpu_seconds, 2),
                "conversations_per_second": round(args.n / seconds, 1),
                "ms_per_conversation": round(1000 * seconds / args.n, 2),
                "load_average_1min_at_end": round(os.getloadavg()[0], 2),
                "interleaved_baseline": {
                    "conversations": n_base,
                    "same_rows": same,
                    "previous_cpu_ms_per_conversation": round(1000 * times["previous"][0] / n_base, 2),
                    "current_cpu_ms_per_conversation": round(1000 * times["current"][0] / n_base, 2),
                    "previous_wall_ms_per_conversation": round(1000 * times["previous"][1] / n_base, 2),
                    "current_wall_ms_per_conversation": round(1000 * times["current"][1] / n_base, 2),
                    "cpu_speedup": round(times["previous"][0] / max(1e-9, times["current"][0]), 2),
                },
                "prefix_rendering_baseline_ms_per_conversation": prefix_ms,
                "tokenizer": args.tokenizer or "embedded:student",
                "num_proc": args.num_proc,
                "cpus": os.cpu_count(),
                "versions": {
                    "python": platform.python_version(),
                    "torch": torch.__version__,
                    "transformers": transformers.__version__,
                    "tokenizers": tokenizers.__version__,
                    "datasets": datasets.__version__,
                },
            }
        )
    )


if __name__ == "__main__":
    main()
