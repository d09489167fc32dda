"""One rank of the sharded-generation test (run by ``torch.distributed.run`` with 2 gloo processes).

Usage: ``sharded_generation_worker.py fsdp1|fsdp2 OUT_DIR``. Every rank samples its own prompts
(of different lengths, so the ranks' completions end at different steps) from the embedded student
sharded over both ranks, and compares with the same sampling from an unsharded copy. Writes
``OUT_DIR/rank{r}.json``.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist

from lightning_agents.models import load_model_and_tokenizer
from lightning_agents.rollout import HFGenerationEngine, SamplingConfig
from lightning_agents.rollout.sharding import gathered_for_generation, sharding_kind
from lightning_agents.tasks.arithmetic import make_arithmetic_split


def main(kind: str, out_dir: Path) -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.set_num_threads(1)
    records = make_arithmetic_split("val")
    prompts = [[{"role": "user", "content": r["question"]}] for r in records[rank * 3 : rank * 3 + 1 + 2 * rank]]
    sampling = SamplingConfig(max_new_tokens=20 + 12 * rank, temperature=1.0)
    seeds = [100 + 10 * rank + i for i in range(len(prompts))]

    full, tok = load_model_and_tokenizer("embedded:student")
    expected = HFGenerationEngine(full.eval(), tok).generate(prompts, num_samples=2, sampling=sampling, seeds=seeds)

    model, _ = load_model_and_tokenizer("embedded:student")
    model.eval()
    layer_type = type(model.model.layers[0])
    result: dict = {"rank": rank}
    if kind == "fsdp2":
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        mesh = init_device_mesh("cpu", (dist.get_world_size(),))
        for layer in model.model.layers:
            fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
        root = None
    else:
        from torch.distributed.fsdp import FullyShardedDataParallel
        from torch.distributed.fsdp.wrap import ModuleWrapPolicy

        class Holder(torch.nn.Module):
            """Stands for the LightningModule that Lightning's FSDPStrategy wraps; its forward
            is what Lightning redirects ``training_step`` through."""

            def __init__(self, policy):
                super().__init__()
                self.policy = policy

            def forward(self, generate):
                return generate()

        root = FullyShardedDataParallel(
            Holder(model),
            auto_wrap_policy=ModuleWrapPolicy({layer_type}),
            device_id=torch.device("cpu"),
            use_orig_params=True,
        )
    result["kind"] = sharding_kind(model, root)
    # The local shard of a parameter is smaller than the parameter.
    result["sharded"] = any(
        (p.to_local() if hasattr(p, "to_local") else p).numel() < q.numel()
        for p, q in zip(model.parameters(), full.parameters())
    )
    engine = HFGenerationEngine(model, tok)

    def generate():
        with gathered_for_generation(model, root) as synced:
            result.setdefault("synced", synced)
            return engine.generate(prompts, num_samples=2, sampling=sampling, seeds=seeds, synced_gpus=synced)

    runs = {"outside_forward": generate()}
    if kind == "fsdp1":
        # Inside the root's forward, as in a Lightning training_step: the root holds its gathered
        # parameters already and summon_full_params would be refused.
        runs["inside_forward"] = root(generate)
    for name, out in runs.items():
        result[name] = {
            "equal": out.texts == expected.texts and torch.equal(out.completion_ids, expected.completion_ids),
            "lengths": out.completion_mask.sum(1).tolist(),
        }
    (out_dir / f"rank{rank}.json").write_text(json.dumps(result))
    # every rank past its last collective before any tears gloo down: a rank that destroys the
    # group while the other still talks to it can abort (seen once in CI: SIGABRT at exit)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
    # Skip the interpreter's teardown: a C++ thread torch leaves joinable can abort it with
    # "terminate called without an active exception" after the work is done and written (SIGABRT
    # seen twice in CI, once after the barrier above was added). The results are already on disk.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
