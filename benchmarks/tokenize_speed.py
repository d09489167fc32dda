"""Assistant-label tokenization speed on tau-bench-length conversations.

The 200 real GPT-4o tau-bench airline trajectories (about 30 messages, 12k characters, a system
prompt and tool calls each) are repeated to ``--n`` conversations and tokenized by
``tokenize_to_dataset`` (one render and one tokenization per conversation, ``datasets.map`` with
``--num_proc`` processes; the on-disk cache is off so the work is measured). The tokenizer is
SmolLM2-135M-Instruct's (49,152 tokens) when ``--tokenizer`` names it, else the embedded one with
the template's special tokens added; the chat template is Qwen2.5's original, which has no
``{% generation %}`` markers, so every assistant turn is located in the rendered text. The
baseline, measured in the same run, is the earlier method (re-rendering each prefix of the
conversation twice per assistant turn) on the first ``--baseline_n`` conversations.

    python benchmarks/tokenize_speed.py [--n 10000] [--num_proc 2] [--tokenizer PATH]

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10_000)
    parser.add_argument("--num_proc", type=int, default=None)
    parser.add_argument("--baseline_n", type=int, default=50)
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

    start = time.perf_counter()
    rows, errors, dropped = tokenize_to_dataset(
        conversations, tokenizer, max_length=None, num_proc=args.num_proc, cache_dir=None
    )
    seconds = time.perf_counter() - start
    tokens = sum(len(r) for r in rows["input_ids"])
    labelled = sum(sum(1 for x in r if x != -100) for r in rows["labels"])

    start = time.perf_counter()
    for c in conversations[: args.baseline_n]:
        prefix_render_baseline(tokenizer, c["messages"], c["tools"])
    baseline_per_conv = (time.perf_counter() - start) / args.baseline_n

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
                "conversations_per_second": round(args.n / seconds, 1),
                "baseline_prefix_rendering_ms_per_conversation": round(1000 * baseline_per_conv, 1),
                "new_ms_per_conversation": round(1000 * seconds / args.n, 2),
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
