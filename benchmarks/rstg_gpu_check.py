"""GPU readiness check for RSTG: bf16 training steps with each sampler, peak memory at Qwen size.

Default: fp32 master weights with bf16 autocast (``bf16-mixed``) and a bf16 teacher, the setting the
Qwen3 configs use; ``--dtype bfloat16 --precision bf16-true`` shows that pure-bf16 AdamW steps at
lr 1e-6 leave the weights unchanged.

For each engine in ``--engines`` (``hf``, ``vllm-colocate``, ``vllm-server``) it runs ``--steps``
RSTG optimizer steps (guidance on, teacher SFT on, gradient checkpointing on, bf16) and prints one
JSON line: step time, peak GPU memory (``torch.cuda.max_memory_allocated``), the sampler/trainer
log-prob gap and importance weights (which must stay near 0 and 1 when weights are synced every
step), and whether the student's weights moved. ``vllm-server`` starts ``vllm serve`` on a copy of
the student (``VLLM_SERVER_DEV_MODE=1`` for weight reloads, processed log-probs) and stops it after.

Models: ``--student`` / ``--teacher`` local folders, or ``--size qwen3`` to build randomly
initialised models with Qwen3-1.7B / Qwen3-4B shapes (vocabulary 151936) around the embedded
tokenizer, so peak memory is measured at the real size without downloading anything. Random
weights say nothing about accuracy; this checks memory, wiring and the sampler/trainer gap.

Without a GPU it runs what a CPU allows: the ``hf`` engine on the embedded models in bf16 (one
step), the vLLM engines reported as skipped, and the Qwen-size parameter counts from meta-device
models (no memory allocated).

    python benchmarks/rstg_gpu_check.py --size qwen3 --engines hf vllm-colocate vllm-server --steps 3
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import torch

QWEN3 = {  # Qwen3-1.7B and Qwen3-4B shapes (config.json of the released checkpoints)
    "student": dict(
        hidden_size=2048,
        intermediate_size=6144,
        num_hidden_layers=28,
        num_attention_heads=16,
        num_key_value_heads=8,
        head_dim=128,
        tie_word_embeddings=True,
    ),
    "teacher": dict(
        hidden_size=2560,
        intermediate_size=9728,
        num_hidden_layers=36,
        num_attention_heads=32,
        num_key_value_heads=8,
        head_dim=128,
        tie_word_embeddings=True,
    ),
}


def qwen3_config(which: str):
    from transformers import Qwen3Config

    return Qwen3Config(
        vocab_size=151936,
        max_position_embeddings=4096,
        rope_theta=1_000_000.0,
        eos_token_id=2,
        pad_token_id=0,
        bos_token_id=None,
        torch_dtype="bfloat16",
        **QWEN3[which],
    )


def build_qwen_size(out: Path, which: str) -> str:
    """A randomly initialised Qwen3-shaped model with the embedded tokenizer, saved in bf16."""
    from transformers import AutoModelForCausalLM

    from lightning_agents.models import load_tokenizer

    path = out / which
    if (path / "config.json").is_file():
        return str(path)
    torch.manual_seed(0)
    # Initialised on the GPU where there is one: random init of 5.7 B parameters on the CPU took
    # most of the 200 s the first H200 run gave this check.
    with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
        model = AutoModelForCausalLM.from_config(qwen3_config(which), dtype=torch.bfloat16)
    model.save_pretrained(path)
    del model
    load_tokenizer("embedded:student").save_pretrained(path)
    return str(path)


def parameter_counts() -> dict[str, float]:
    from transformers import AutoModelForCausalLM

    counts = {}
    for which in ("student", "teacher"):
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(qwen3_config(which))
        counts[which] = sum(p.numel() for p in model.parameters()) / 1e9
    return counts


def records(n: int) -> list[dict]:
    from lightning_agents.tasks import ArithmeticTask

    task = ArithmeticTask(split="train")
    return [task.prompt_record(p) for p in task.get_problems("train", n=n)]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(model_dir: str, port: int, mem: float) -> subprocess.Popen:
    env = {**os.environ, "VLLM_SERVER_DEV_MODE": "1"}
    cmd = [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        model_dir,
        "--port",
        str(port),
        "--logprobs-mode",
        "processed_logprobs",
        "--gpu-memory-utilization",
        str(mem),
        "--dtype",
        "bfloat16",
        "--served-model-name",
        "policy",
    ]
    proc = subprocess.Popen(
        cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    deadline = time.time() + 600
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"vllm serve exited: {proc.stderr.read()[-2000:]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5):
                return proc
        except OSError:
            time.sleep(5)
    proc.kill()
    raise RuntimeError("vllm serve did not become healthy in 600 s")


def run_engine(engine: str, student: str, teacher: str, args, work: Path) -> dict:
    import lightning as L
    from torch.utils.data import DataLoader

    from lightning_agents.modules.rstg import RSTGModule

    cuda = torch.cuda.is_available()
    kwargs = dict(
        model=student,
        teacher=teacher,
        dtype=args.dtype,
        teacher_dtype="bfloat16",
        gradient_checkpointing=True,
        num_generations=args.num_generations,
        max_new_tokens=args.max_new_tokens,
        teacher_k=2,
        micro_batch_size=args.micro_batch_size,
        lr=args.lr,
        beta_start=5e-3,
        loss_aggregation="token_mean",
        chat_template_kwargs={"enable_thinking": False},
        log_samples_every_n_steps=0,
        teacher_cache=str(work / f"teacher_{engine}.jsonl"),
    )
    server = None
    if engine == "vllm-colocate":
        kwargs.update(
            engine="vllm",
            vllm_mode="colocate",
            vllm_gpu_memory_utilization=args.vllm_memory,
            vllm_max_model_len=args.max_new_tokens + 512,
        )
    elif engine == "vllm-server":
        weights = work / "served"
        shutil.copytree(student, weights, dirs_exist_ok=True)
        port = free_port()
        server = start_server(str(weights), port, args.vllm_memory)
        kwargs.update(
            engine="vllm",
            vllm_mode="server",
            vllm_server_url=f"http://127.0.0.1:{port}/v1",
            vllm_weights_dir=str(weights),
        )
    metrics: list[dict] = []

    class Record(L.Callback):
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            metrics.append({k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith("train/")})

    try:
        module = RSTGModule(**kwargs)
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        trainer = L.Trainer(
            accelerator="gpu" if cuda else "cpu",
            devices=1,
            precision=args.precision,
            max_steps=args.steps,
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            limit_val_batches=0,
            callbacks=[Record()],
        )
        data = DataLoader(records(args.steps * args.prompts), batch_size=args.prompts, collate_fn=list)
        module.configure_model()
        before = [p.detach().float().clone().cpu() for p in list(module.model.parameters())[:4]]
        start = time.perf_counter()
        trainer.fit(module, data)
        elapsed = time.perf_counter() - start
        moved = any(not torch.equal(b, p.detach().float().cpu()) for b, p in zip(before, module.model.parameters()))
    finally:
        if server is not None:
            os.killpg(server.pid, 15)
            server.wait(timeout=60)
    last = metrics[-1] if metrics else {}
    return {
        "engine": engine,
        "ok": True,
        "steps": len(metrics),
        "seconds_per_step": elapsed / max(len(metrics), 1),
        "peak_gpu_gib": torch.cuda.max_memory_allocated() / 2**30 if cuda else None,
        "sampler_logprob_gap_abs": [m.get("train/sampler_logprob_gap_abs") for m in metrics],
        "importance_weight_mean": [m.get("train/importance_weight_mean") for m in metrics],
        "weights_moved": moved,
        "reward_mean": last.get("train/reward_mean"),
        "truncated_frac": last.get("train/truncated_frac"),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--engines",
        nargs="+",
        default=["hf", "vllm-colocate", "vllm-server"],
        choices=["hf", "vllm-colocate", "vllm-server"],
        help="samplers to check, one run each; the vLLM ones need CUDA and vllm and are reported skipped "
        "otherwise (default: all three)",
    )
    ap.add_argument(
        "--size",
        choices=["embedded", "qwen3"],
        default="qwen3",
        help="models: the embedded ones, or random ones with Qwen3-1.7B / Qwen3-4B shapes (default: qwen3; "
        "embedded without a GPU)",
    )
    ap.add_argument("--student", default=None, help="local student folder (overrides --size)")
    ap.add_argument("--teacher", default=None, help="local teacher folder (overrides --size)")
    ap.add_argument("--steps", type=int, default=3, help="optimizer steps per engine (default: 3; 1 without a GPU)")
    ap.add_argument("--prompts", type=int, default=4, help="prompts per step (default: 4; 2 without a GPU)")
    ap.add_argument("--num_generations", type=int, default=8, help="samples per prompt (default: 8; 2 without a GPU)")
    ap.add_argument(
        "--max_new_tokens", type=int, default=512, help="most tokens per sample (default: 512; 16 without a GPU)"
    )
    ap.add_argument("--micro_batch_size", type=int, default=8, help="rows per training forward pass (default: 8)")
    ap.add_argument(
        "--vllm_memory",
        type=float,
        default=0.3,
        help="share of GPU memory vLLM may take (its gpu_memory_utilization), 0-1; the rest is the "
        "trainer's (default: 0.3)",
    )
    ap.add_argument("--dtype", default="float32", help="student weights (fp32 master weights by default)")
    ap.add_argument("--precision", default="bf16-mixed", help="Lightning precision; bf16-true shows the lost updates")
    ap.add_argument("--lr", type=float, default=1e-6, help="student learning rate, the Qwen3 configs' (default: 1e-6)")
    args = ap.parse_args()
    cuda = torch.cuda.is_available()
    work = Path(tempfile.mkdtemp(prefix="rstg-gpu-check-"))
    print(
        json.dumps(
            {
                "check": "environment",
                "cuda": cuda,
                "device": torch.cuda.get_device_name(0) if cuda else "cpu",
                "torch": torch.__version__,
                "qwen3_params_billion": parameter_counts(),
            }
        ),
        flush=True,
    )
    if not cuda:
        # What a CPU allows: the wiring in bf16 on the embedded models, one short step.
        args.size, args.steps, args.prompts, args.num_generations, args.max_new_tokens = "embedded", 1, 2, 2, 16
    if args.student:
        student, teacher = args.student, args.teacher or args.student
    elif args.size == "qwen3":
        student, teacher = build_qwen_size(work, "student"), build_qwen_size(work, "teacher")
    else:
        student, teacher = "embedded:student", "embedded:teacher"
    from lightning_agents.rollout.vllm_engine import vllm_available

    for engine in args.engines:
        if engine.startswith("vllm") and not (cuda and vllm_available()):
            print(json.dumps({"engine": engine, "ok": None, "skipped": "needs CUDA and vllm"}), flush=True)
            continue
        try:
            print(json.dumps(run_engine(engine, student, teacher, args, work)), flush=True)
        except Exception as err:  # noqa: BLE001 -- report every engine, keep checking the others
            print(
                json.dumps({"engine": engine, "ok": False, "error": f"{type(err).__name__}: {err}"[-2000:]}), flush=True
            )
        if cuda:
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
