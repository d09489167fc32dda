"""Build the embedded default: the tiny tokenizer and the tiny student and teacher checkpoints.

Run from the project root: ``python scripts/build_embedded.py`` (about 15 minutes on 2 CPU cores).
It writes ``lightning_agents/assets/{student,teacher}/`` (config, safetensors weights, tokenizer,
chat template) and prints one JSON line per model with its held-out accuracy. Everything is seeded,
so a rebuild on the same torch version gives the same weights.

Both models are Llama-architecture causal LMs pretrained on the embedded arithmetic task in the
three chat formats the library uses (direct answer, calculator tool call, Python program). The
student is small and trained briefly so its direct-answer accuracy stays well below the teacher's,
which leaves RL, distillation and workflow search room to show an effect.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from lightning_agents.datamodules.conversations import IGNORE_INDEX, tokenize_conversation  # noqa: E402
from lightning_agents.rewards.arithmetic import (  # noqa: E402
    ArithmeticVerifier,
    arithmetic_conversation,
    make_arithmetic_split,
)
from lightning_agents.rollout import HFGenerationEngine  # noqa: E402
from lightning_agents.rollout.evaluate import evaluate_accuracy  # noqa: E402

ASSETS = ROOT / "lightning_agents" / "assets"
SPECIAL = ["<|pad|>", "<|im_start|>", "<|im_end|>"]
# Tool-call tags are ordinary (not special) tokens so decoding with skip_special_tokens keeps them.
TAGS = ["<tool_call>", "</tool_call>"]

# The student is small and stops as soon as its validation accuracy reaches `stop_at`, which lands
# it inside the 15-50% band the library wants (room to improve); the teacher is larger and trains
# until it is above 70%. Both are a few MB.
MODELS = {
    "student": dict(hidden_size=64, intermediate_size=192, num_hidden_layers=2, num_attention_heads=4,
                    max_steps=3000, lr=3e-3, stop_at=0.30),
    "teacher": dict(hidden_size=160, intermediate_size=448, num_hidden_layers=4, num_attention_heads=4,
                    max_steps=5000, lr=2e-3, stop_at=0.85),
}
STYLE_WEIGHTS = {"direct": 0.7, "tool": 0.15, "program": 0.15}
EVAL_EVERY = 100


def build_tokenizer(workdir: Path):
    """Train a small byte-level BPE on the task's text with digits split one per token."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    template = (ASSETS / "chat_template.jinja").read_text()
    corpus = []
    for record in make_arithmetic_split("train", n=4000, seed=7):
        for style in STYLE_WEIGHTS:
            conv = arithmetic_conversation(record, style)
            corpus.append(json.dumps(conv["messages"]))
    tok = Tokenizer(models.BPE(unk_token=None))
    # Single-digit tokens keep numbers compositional, which is what lets a tiny model add.
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=448,
        special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<|pad|>", eos_token="<|im_end|>", bos_token=None, unk_token=None
    )
    fast.add_special_tokens({"additional_special_tokens": ["<|im_start|>"]})
    fast.add_tokens(TAGS)
    fast.chat_template = template
    fast.model_max_length = 256
    path = workdir / "tokenizer"
    fast.save_pretrained(path)
    return PreTrainedTokenizerFast.from_pretrained(path)


def training_rows(tokenizer, n: int, seed: int):
    rng = random.Random(seed)
    styles, weights = zip(*STYLE_WEIGHTS.items())
    rows = []
    for record in make_arithmetic_split("train", n=n):
        conv = arithmetic_conversation(record, rng.choices(styles, weights)[0])
        rows.append(tokenize_conversation(tokenizer, conv["messages"], conv.get("tools"), max_length=192))
    return rows


def collate(rows, pad_id: int):
    width = max(len(r["input_ids"]) for r in rows)
    ids = torch.full((len(rows), width), pad_id)
    labels = torch.full((len(rows), width), IGNORE_INDEX)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        n = len(r["input_ids"])
        ids[i, :n] = torch.tensor(r["input_ids"])
        labels[i, :n] = torch.tensor(r["labels"])
        mask[i, :n] = 1
    return ids, mask, labels


def pretrain(name: str, spec: dict, tokenizer, rows, out_dir: Path, batch_size: int, seed: int) -> dict:
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=spec["hidden_size"],
        intermediate_size=spec["intermediate_size"],
        num_hidden_layers=spec["num_hidden_layers"],
        num_attention_heads=spec["num_attention_heads"],
        num_key_value_heads=spec["num_attention_heads"],
        max_position_embeddings=256,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
    )
    model = LlamaForCausalLM(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=spec["lr"], weight_decay=0.01, betas=(0.9, 0.98))
    steps = spec["max_steps"]
    warmup = max(steps // 30, 1)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min((s + 1) / warmup, 0.5 * (1 + math.cos(math.pi * min(s / steps, 1.0))))
    )
    model.generation_config = GenerationConfig(
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, do_sample=False
    )
    engine = HFGenerationEngine(model, tokenizer)
    verifier = ArithmeticVerifier()

    def accuracy(split: str, n: int | None = None) -> float:
        records = make_arithmetic_split(split)[:n]
        prompts = [[{"role": "user", "content": r["question"]}] for r in records]
        return evaluate_accuracy(engine, prompts, [r["answer"] for r in records], verifier, max_new_tokens=32)["accuracy"]

    rng = random.Random(seed)
    model.train()
    start = time.time()
    step, val_accuracy = 0, 0.0
    while step < steps:
        ids, mask, labels = collate(rng.sample(rows, batch_size), tokenizer.pad_token_id)
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad(set_to_none=True)
        step += 1
        if step % EVAL_EVERY == 0:
            val_accuracy = accuracy("val", 100)
            model.train()
            print(f"[{name}] step {step} loss {loss.item():.4f} val acc {val_accuracy:.2f} {time.time() - start:.0f}s",
                  file=sys.stderr, flush=True)
            if val_accuracy >= spec["stop_at"]:
                break
    model.eval()
    test_accuracy = accuracy("test")
    if out_dir.exists():
        shutil.rmtree(out_dir)
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    return {"model": name, "params": sum(p.numel() for p in model.parameters()), "test_accuracy": test_accuracy,
            "val_accuracy_at_stop": val_accuracy, "steps": step, "seconds": round(time.time() - start, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS), help="which checkpoints to build")
    parser.add_argument("--batch-size", type=int, default=32, help="conversations per optimizer step")
    parser.add_argument("--train-size", type=int, default=20000, help="training problems drawn from the train split")
    parser.add_argument("--seed", type=int, default=0, help="seed of initialisation and batch order")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads per build process")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        tokenizer = build_tokenizer(Path(tmp))
        rows = training_rows(tokenizer, args.train_size, args.seed)
        for name in args.models:
            print(json.dumps(pretrain(name, MODELS[name], tokenizer, rows, ASSETS / name, args.batch_size, args.seed)), flush=True)


if __name__ == "__main__":
    main()
