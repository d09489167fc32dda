"""A fair test of RSTG's claim: the paper's incremental table with paired seeds and confidence intervals.

Recipes (each row adds one component to the one above it, from naive OPD on):

=================  =========  ==============  ===============  ================  ===========
recipe             guidance   distill_scope   token_selection  sample_weight     teacher_sft
=================  =========  ==============  ===============  ================  ===========
grpo               no         --              --               --                --
naive_opd          yes        all             all              none              no
naive_opd_sft      yes        all             all              none              yes
gated              yes        negative        all              none              no
gated_weighted     yes        negative        all              teacher_pass_rate no
gated_soft_or      yes        negative        soft_or          teacher_pass_rate no
rstg               yes        negative        soft_or          teacher_pass_rate yes
=================  =========  ==============  ===============  ================  ===========

Settings: ``arithmetic`` (embedded student, embedded teacher), ``weak_teacher`` (the teacher is the
student after a short SFT run, so the teacher's pass rate ``w_x`` varies instead of being ~1) and
``agent_world`` (multi-turn tool use in the stateful shop world; ``--agent_task`` picks another
task with tools). For every guided recipe beta is chosen on the val split from ``--beta_grid``
(which includes the paper's 5e-3 schedule) with one short run per value; then every recipe trains
with each of the paired seeds (same init, same prompt order, same sampling seed across recipes)
and is evaluated on the whole test split: greedy accuracy and pass@k (k samples at temperature 1).
Logged per run: negative-group fraction, ``A_opd`` sign balance, entropy, mean teacher weight.

Output: one JSON line per finished run as it happens (the incremental table fills in), then one
JSON line per setting with paired differences (recipe minus GRPO, and recipe minus the row above)
and their 95% t-intervals over seeds; ``--table`` also writes the Markdown table.

Full size (about an hour per setting on a free 2-core machine; do not run it on a shared one):

    OMP_NUM_THREADS=2 python benchmarks/rstg_learning.py --settings arithmetic weak_teacher agent_world \\
        --steps 150 --seeds 0 1 2 3 4 --test_size 0 --table docs/benchmarks/rstg_incremental.md

Tiny smoke run (minutes):

    python benchmarks/rstg_learning.py --settings arithmetic --steps 2 --seeds 0 1 --test_size 16 \\
        --select_steps 1 --beta_grid paper 0.5 --recipes grpo rstg --batch_size 2 --num_generations 4
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import lightning as L
import torch

from lightning_agents.datamodules.prompts import PromptDataModule
from lightning_agents.modules.rstg import RSTGModule
from lightning_agents.rollout import SamplingConfig

RECIPES = {
    "grpo": dict(guidance=False, teacher=None),
    "naive_opd": dict(distill_scope="all", token_selection="all", sample_weight="none", teacher_sft=False),
    "naive_opd_sft": dict(distill_scope="all", token_selection="all", sample_weight="none", teacher_sft=True),
    "gated": dict(distill_scope="negative", token_selection="all", sample_weight="none", teacher_sft=False),
    "gated_weighted": dict(
        distill_scope="negative", token_selection="all", sample_weight="teacher_pass_rate", teacher_sft=False
    ),
    "gated_soft_or": dict(
        distill_scope="negative", token_selection="soft_or", sample_weight="teacher_pass_rate", teacher_sft=False
    ),
    "rstg": dict(
        distill_scope="negative", token_selection="soft_or", sample_weight="teacher_pass_rate", teacher_sft=True
    ),
}
# Beta schedules: the paper's (5e-3 annealed to 1e-3) and constant larger weights.
BETAS = {"paper": dict(beta_start=5e-3, beta_slope=-5e-5, beta_floor=1e-3)}
# Two-sided 95% t quantiles by degrees of freedom (scipy is not a dependency).
T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228}


def beta_schedule(name: str) -> dict[str, float]:
    if name in BETAS:
        return BETAS[name]
    value = float(name)
    return dict(beta_start=value, beta_slope=0.0, beta_floor=value)


def paired_ci(a: list[float], b: list[float]) -> dict[str, float]:
    """Mean of ``a - b`` over paired seeds with a 95% t-interval."""
    d = [x - y for x, y in zip(a, b)]
    mean = statistics.mean(d)
    if len(d) < 2:
        return {"diff": mean, "lo": math.nan, "hi": math.nan}
    half = T95.get(len(d) - 1, 1.96) * statistics.stdev(d) / math.sqrt(len(d))
    return {"diff": mean, "lo": mean - half, "hi": mean + half}


class Trace(L.Callback):
    """Per-step training statistics."""

    KEYS = (
        "train/frac_negative_zero_var",
        "train/opd_adv_pos_frac",
        "train/entropy",
        "train/teacher_weight_mean",
        "train/reward_mean",
        "train/unverified_frac",
    )

    def __init__(self) -> None:
        self.values: dict[str, list[float]] = {k: [] for k in self.KEYS}

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        m = trainer.callback_metrics
        for k in self.KEYS:
            if k in m:
                self.values[k].append(float(m[k]))

    def summary(self) -> dict[str, float | None]:
        return {k.split("/")[1]: (statistics.mean(v) if v else None) for k, v in self.values.items()}


def evaluate(module: RSTGModule, records: list[dict], k: int, batch: int = 64) -> dict[str, float]:
    """Greedy accuracy and pass@k (k samples at temperature 1, any success) over ``records``."""
    module.eval()
    greedy, passk = [], []
    hp = module.hparams
    for i in range(0, len(records), batch):
        chunk = records[i : i + batch]
        _, g, _, _ = module._sample(
            module.engine, chunk, 1, SamplingConfig(max_new_tokens=hp.max_new_tokens, do_sample=False)
        )
        greedy += [0.0 if math.isnan(x) else x for x in g]
        if k > 0:
            _, s, _, _ = module._sample(
                module.engine, chunk, k, SamplingConfig(max_new_tokens=hp.max_new_tokens, temperature=1.0)
            )
            for j in range(len(chunk)):
                passk.append(float(any(x >= hp.success_threshold for x in s[j * k : (j + 1) * k] if not math.isnan(x))))
    return {"greedy": statistics.mean(greedy), f"pass@{k}": statistics.mean(passk) if passk else None}


def make_weak_teacher(out_dir: str, steps: int, seed: int) -> str:
    """The student after ``steps`` SFT steps on the embedded gold conversations: a teacher only a
    little stronger than the student, so its pass rate varies across prompts."""
    from lightning_agents.datamodules.chat import ChatDataModule
    from lightning_agents.modules.sft import SFTModule

    path = Path(out_dir) / "weak_teacher"
    if (path / "config.json").is_file():
        return str(path)
    L.seed_everything(seed, verbose=False)
    module = SFTModule(model="embedded:student", lr=3e-4)
    dm = ChatDataModule(
        train="embedded:arithmetic/train", val=None, batch_size=16, embedded_size=steps * 16, cache_dir=None
    )
    L.Trainer(
        max_steps=steps,
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
    ).fit(module, dm)
    module.model.save_pretrained(path)
    module.tokenizer.save_pretrained(path)
    return str(path)


def task_spec(setting: str, agent_task: str) -> dict:
    if setting == "agent_world":
        return {"class_path": agent_task}
    return {"class_path": "lightning_agents.tasks.ArithmeticTask"}


def records_of(spec: dict, split: str, n: int | None) -> list[dict]:
    from lightning_agents.tasks import load_task

    task = load_task(spec)
    return [task.prompt_record(p) for p in task.get_problems(split, n=n or None)]


def train_one(
    setting: dict, recipe: str, beta: str, seed: int, steps: int, args, cache: str
) -> tuple[RSTGModule, Trace]:
    L.seed_everything(seed, verbose=False)
    kwargs = dict(
        num_generations=args.num_generations,
        max_new_tokens=setting["max_new_tokens"],
        micro_batch_size=64,
        lr=args.lr,
        teacher_k=8,
        eps_high=0.28,
        loss_aggregation="token_mean",
        log_samples_every_n_steps=0,
        teacher_cache=cache,
        teacher=setting["teacher"],
        max_turns=setting["max_turns"],
    )
    kwargs.update(RECIPES[recipe])
    if recipe != "grpo":
        kwargs.update(beta_schedule(beta))
    module = RSTGModule(**kwargs)
    dm = PromptDataModule(
        task=setting["task"], val=None, train_size=steps * args.batch_size, batch_size=args.batch_size, seed=seed
    )
    trace = Trace()
    L.Trainer(
        max_steps=steps,
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[trace],
        limit_val_batches=0,
    ).fit(module, dm)
    return module, trace


def emit(line: dict, table: list[dict]) -> None:
    table.append(line)
    print(json.dumps(line), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--settings",
        nargs="+",
        default=["arithmetic", "weak_teacher", "agent_world"],
        choices=["arithmetic", "weak_teacher", "agent_world"],
    )
    ap.add_argument("--recipes", nargs="+", default=list(RECIPES), choices=list(RECIPES))
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    ap.add_argument(
        "--beta_grid",
        nargs="+",
        default=["paper", "0.05", "0.5"],
        help="'paper' (5e-3 annealed to 1e-3) or constant values",
    )
    ap.add_argument("--select_steps", type=int, default=40, help="steps of each beta-selection run (val split)")
    ap.add_argument("--select_size", type=int, default=128, help="val problems scoring a beta")
    ap.add_argument("--test_size", type=int, default=0, help="test problems (0: the whole split)")
    ap.add_argument("--pass_k", type=int, default=8)
    ap.add_argument("--batch_size", type=int, default=8)
    ap.add_argument("--num_generations", type=int, default=8)
    ap.add_argument("--lr", type=float, default=5e-4)
    ap.add_argument("--weak_teacher_steps", type=int, default=30)
    ap.add_argument("--agent_task", default="lightning_agents.tasks.agent_world.AgentWorldTask")
    ap.add_argument("--work_dir", default=None)
    ap.add_argument("--table", default=None, help="write the Markdown table here")
    args = ap.parse_args()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    work = args.work_dir or tempfile.mkdtemp(prefix="rstg-learning-")
    table: list[dict] = []
    summaries = []
    start = time.time()
    for name in args.settings:
        spec = task_spec(name, args.agent_task)
        setting = {"task": spec, "teacher": "embedded:teacher", "max_new_tokens": 24, "max_turns": 1}
        if name == "weak_teacher":
            setting["teacher"] = make_weak_teacher(work, args.weak_teacher_steps, 0)
        if name == "agent_world":
            setting.update(max_new_tokens=48, max_turns=4)
        cache = str(Path(work) / f"teacher_cache_{name}.jsonl")  # keyed by teacher and settings: shared safely
        val = records_of(spec, "val", args.select_size)
        test = records_of(spec, "test", args.test_size)
        chosen: dict[str, str] = {}
        for recipe in args.recipes:
            if recipe == "grpo":
                continue
            scores = {}
            for beta in args.beta_grid:
                module, _ = train_one(setting, recipe, beta, 0, args.select_steps, args, cache)
                scores[beta] = evaluate(module, val, 0)["greedy"]
            chosen[recipe] = max(scores, key=lambda b: scores[b])
            emit({"setting": name, "recipe": recipe, "beta_selection": scores, "chosen": chosen[recipe]}, table)
        results: dict[str, list[dict]] = {}
        base_model = RSTGModule(
            guidance=False, teacher=None, max_new_tokens=setting["max_new_tokens"], max_turns=setting["max_turns"]
        )
        base_model.configure_model()
        before = evaluate(base_model, test, args.pass_k)
        emit({"setting": name, "recipe": "initial_student", **before}, table)
        for seed in args.seeds:
            for recipe in args.recipes:
                module, trace = train_one(setting, recipe, chosen.get(recipe, "paper"), seed, args.steps, args, cache)
                res = {
                    "setting": name,
                    "recipe": recipe,
                    "seed": seed,
                    "beta": chosen.get(recipe),
                    **evaluate(module, test, args.pass_k),
                    **trace.summary(),
                }
                results.setdefault(recipe, []).append(res)
                emit(res, table)
        summary = {
            "setting": name,
            "steps": args.steps,
            "seeds": args.seeds,
            "test_size": len(test),
            "initial": before,
            "recipes": {},
        }
        order = [r for r in RECIPES if r in results]
        for i, recipe in enumerate(order):
            accs = [r["greedy"] for r in results[recipe]]
            entry = {
                "greedy_mean": statistics.mean(accs),
                "pass_k_mean": statistics.mean([r[f"pass@{args.pass_k}"] for r in results[recipe]])
                if args.pass_k
                else None,
                "beta": chosen.get(recipe),
            }
            if "grpo" in results and recipe != "grpo":
                entry["vs_grpo"] = paired_ci(accs, [r["greedy"] for r in results["grpo"]])
            if i > 0:
                entry["vs_previous"] = paired_ci(accs, [r["greedy"] for r in results[order[i - 1]]])
            for key in ("frac_negative_zero_var", "opd_adv_pos_frac", "entropy", "teacher_weight_mean"):
                vals = [r[key] for r in results[recipe] if r.get(key) is not None]
                entry[key] = statistics.mean(vals) if vals else None
            summary["recipes"][recipe] = entry
        summary["wall_s"] = round(time.time() - start, 1)
        summaries.append(summary)
        print(json.dumps({"benchmark": "rstg_learning", **summary}), flush=True)
    if args.table:
        Path(args.table).parent.mkdir(parents=True, exist_ok=True)
        from lightning_agents.atomic import atomic_write_text

        atomic_write_text(args.table, markdown(summaries, args.pass_k))
    print(f"done in {time.time() - start:.0f} s", file=sys.stderr)


def markdown(summaries: list[dict], k: int) -> str:
    lines = []
    for s in summaries:
        lines += [
            f"#### {s['setting']} ({s['steps']} steps, seeds {s['seeds']}, {s['test_size']} test problems; "
            f"initial greedy {s['initial']['greedy']:.3f})",
            "",
            f"| recipe | beta | greedy | pass@{k} | vs GRPO (95% CI) | vs row above (95% CI) | neg. groups | "
            "A_opd > 0 | entropy | w_x |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]

        def ci(e):
            return "" if e is None else f"{e['diff']:+.3f} [{e['lo']:+.3f}, {e['hi']:+.3f}]"

        def num(x):
            return "" if x is None else f"{x:.3f}"

        for recipe, e in s["recipes"].items():
            lines.append(
                f"| {recipe} | {e['beta'] or ''} | {e['greedy_mean']:.3f} | {num(e['pass_k_mean'])} | "
                f"{ci(e.get('vs_grpo'))} | {ci(e.get('vs_previous'))} | {num(e['frac_negative_zero_var'])} | "
                f"{num(e['opd_adv_pos_frac'])} | {num(e['entropy'])} | {num(e['teacher_weight_mean'])} |"
            )
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
