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

Output: one JSON line per finished run as it happens (``--jsonl`` appends it to a file, fsynced),
then one JSON line per setting with paired differences (recipe minus GRPO, minus the row above,
minus the starting checkpoint) and their 95% t-intervals over seeds; ``--table`` also writes the
Markdown table. Runs go seed-major (every recipe for seed 0, then seed 1, ...), so a run stopped
part-way leaves whole paired seeds: ``--table_only --jsonl FILE`` builds the table from whatever
lines exist (only seeds every recipe finished, the rest listed as pending), and rerunning the same
command with the same ``--jsonl`` resumes, skipping the runs already there.

``--lr_grid`` adds the learning rate to the val-split selection (per recipe, jointly with beta).

Full size (about an hour per setting on a free 2-core machine; do not run it on a shared one):

    OMP_NUM_THREADS=2 python benchmarks/rstg_learning.py --settings arithmetic weak_teacher agent_world \\
        --steps 150 --seeds 0 1 2 3 4 --test_size 0 --jsonl runs/rstg_incremental.jsonl \\
        --table docs/benchmarks/rstg_incremental.md

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
    setting: dict,
    recipe: str,
    beta: str | None,
    seed: int,
    steps: int,
    args,
    cache: str | None,
    lr: float,
    train_records: list[dict] | None = None,
    callbacks: list[L.Callback] | None = None,
) -> tuple[RSTGModule, Trace]:
    """Train ``recipe`` for ``steps`` steps; ``train_records`` restricts the training prompts to
    these records (a fixed task pool, cycled); ``callbacks`` run alongside the trace."""
    L.seed_everything(seed, verbose=False)
    kwargs = dict(
        num_generations=args.num_generations,
        max_new_tokens=setting["max_new_tokens"],
        micro_batch_size=64,
        lr=lr,
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
        kwargs.update(beta_schedule(beta or "paper"))
    module = RSTGModule(**kwargs)
    dm = PromptDataModule(
        task=setting["task"], val=None, train_size=steps * args.batch_size, batch_size=args.batch_size, seed=seed
    )
    if train_records is not None:
        dm.records["train"] = list(train_records)  # setup() reads only what is not loaded yet
    trace = Trace()
    L.Trainer(
        max_steps=steps,
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[trace, *(callbacks or [])],
        limit_val_batches=0,
    ).fit(module, dm)
    return module, trace


class Log:
    """The run's JSON lines: printed, and appended to ``--jsonl`` as each one finishes.

    Lines already in that file from an earlier (interrupted) run with the same protocol are reused,
    so a restarted run continues where the last one stopped instead of repeating finished runs.
    """

    def __init__(self, path: str | None) -> None:
        self.path = Path(path) if path else None
        self.lines: list[dict] = read_lines(self.path) if self.path and self.path.is_file() else []
        if self.path and self.path.is_file() and not self.path.read_bytes().endswith(b"\n"):
            with open(self.path, "a") as f:  # end a torn last line so the next line stays whole
                f.write("\n")
        if self.lines:
            print(f"resuming: {len(self.lines)} lines already in {self.path}", file=sys.stderr)

    def find(self, **match) -> dict | None:
        hits = [line for line in self.lines if all(line.get(k) == v for k, v in match.items())]
        return hits[-1] if hits else None

    def emit(self, line: dict) -> None:
        self.lines.append(line)
        text = json.dumps(line)
        print(text, flush=True)
        if self.path:
            # One whole line per write, flushed and synced: a reader (or a killed run) sees only
            # complete lines, and ``read_lines`` ignores a torn last line if the disk filled up.
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "a") as f:
                f.write(text + "\n")
                f.flush()
                os.fsync(f.fileno())


def read_lines(path: str | Path) -> list[dict]:
    """The JSON lines of ``path``; a torn (unparseable) line, e.g. from a killed writer, is skipped."""
    out = []
    for n, raw in enumerate(Path(path).read_text().splitlines(), 1):
        if not raw.strip():
            continue
        try:
            out.append(json.loads(raw))
        except json.JSONDecodeError:
            print(f"{path}:{n}: skipping an unparseable line", file=sys.stderr)
    return out


PROTOCOL_KEYS = (
    "setting",
    "task",
    "steps",
    "test_size",
    "batch_size",
    "num_generations",
    "pass_k",
    "max_turns",
    "max_new_tokens",
)


def protocol(args, name: str, test_size: int, setting: dict) -> dict:
    """What must match for a finished run's line to be reused or paired with another."""
    proto = {
        "setting": name,
        "steps": args.steps,
        "test_size": test_size,
        "batch_size": args.batch_size,
        "num_generations": args.num_generations,
        "pass_k": args.pass_k,
    }
    if name == "agent_world":  # which task, and the episode limits, change what is measured
        proto.update(
            task=setting["task"]["class_path"], max_turns=setting["max_turns"], max_new_tokens=setting["max_new_tokens"]
        )
    return proto


def select(setting, recipe, args, cache, val, log: Log, proto: dict) -> tuple[float, str | None]:
    """(lr, beta) for ``recipe``: the best greedy val score over ``--lr_grid`` x ``--beta_grid``
    (beta only for guided recipes), one ``--select_steps`` run per pair and selection seed (seeds
    0 .. ``--select_seeds`` - 1, scores averaged: one short run can miss an unstable learning rate).
    With one candidate there is nothing to select and no run is made."""
    betas = [None] if recipe == "grpo" else list(args.beta_grid)
    grid = [(lr, beta) for lr in args.lr_grid for beta in betas]
    if len(grid) == 1:
        return grid[0]
    key = dict(proto, recipe=recipe, select_steps=args.select_steps, select_size=len(val))
    if args.select_seeds > 1:  # absent for one seed, so lines of earlier runs still match
        key["select_seeds"] = args.select_seeds
    done = log.find(**key, grid=[[lr, b] for lr, b in grid])
    if done is not None:
        return tuple(done["chosen"])
    scores = []
    for lr, beta in grid:
        per_seed = []
        for seed in range(args.select_seeds):
            module, _ = train_one(setting, recipe, beta, seed, args.select_steps, args, cache, lr)
            per_seed.append(evaluate(module, val, 0)["greedy"])
        scores.append(statistics.mean(per_seed))
    # Ties go to the first grid entry (the order given on the command line).
    best = max(range(len(grid)), key=lambda i: (scores[i], -i))
    log.emit({**key, "grid": [[lr, b] for lr, b in grid], "val_greedy": scores, "chosen": list(grid[best])})
    return grid[best]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--settings",
        nargs="+",
        default=["arithmetic", "weak_teacher", "agent_world"],
        choices=["arithmetic", "weak_teacher", "agent_world"],
        help="settings to run, one table each (default: all three)",
    )
    ap.add_argument(
        "--recipes",
        nargs="+",
        default=list(RECIPES),
        choices=list(RECIPES),
        help="rows of the table to train; each is compared with the row above it among these (default: all)",
    )
    ap.add_argument("--steps", type=int, default=150, help="training steps of each reported run (default: 150)")
    ap.add_argument(
        "--seeds",
        type=int,
        nargs="+",
        default=[0, 1, 2, 3, 4],
        help="paired seeds: each is one run of every recipe, same init, prompts and sampling (default: 0-4)",
    )
    ap.add_argument(
        "--beta_grid",
        nargs="+",
        default=["paper", "0.05", "0.5"],
        help="'paper' (5e-3 annealed to 1e-3) or constant values",
    )
    ap.add_argument(
        "--lr_grid",
        type=float,
        nargs="+",
        default=None,
        help="learning rates to choose from on the val split, per recipe (default: --lr only)",
    )
    ap.add_argument("--select_steps", type=int, default=40, help="steps of each selection run (val split)")
    ap.add_argument("--select_size", type=int, default=128, help="val problems scoring a selection run")
    ap.add_argument("--select_seeds", type=int, default=1, help="seeds per selection grid point (scores averaged)")
    ap.add_argument("--test_size", type=int, default=0, help="test problems (0: the whole split)")
    ap.add_argument(
        "--pass_k",
        type=int,
        default=8,
        help="k of the test pass@k, k samples at temperature 1 per problem; 0 skips it (default: 8)",
    )
    ap.add_argument("--batch_size", type=int, default=8, help="prompts per training step (default: 8)")
    ap.add_argument("--num_generations", type=int, default=8, help="samples per prompt, the group size (default: 8)")
    ap.add_argument(
        "--lr", type=float, default=5e-4, help="student learning rate when --lr_grid is not given (default: 5e-4)"
    )
    ap.add_argument(
        "--weak_teacher_steps",
        type=int,
        default=30,
        help="SFT steps that make the weak_teacher setting's teacher from the student (default: 30)",
    )
    ap.add_argument(
        "--agent_task",
        default="lightning_agents.tasks.agent_world.AgentWorldTask",
        help="class path of the agent_world setting's task, one with tools (default: the shop world, "
        "lightning_agents.tasks.agent_world.AgentWorldTask)",
    )
    ap.add_argument("--max_new_tokens", type=int, default=None, help="per turn (default 24, agent_world 48)")
    ap.add_argument(
        "--max_turns",
        type=int,
        default=7,
        help="model turns per agent_world episode (shop tasks need up to 5 calls plus recoveries and the answer)",
    )
    ap.add_argument(
        "--work_dir",
        default=None,
        help="folder for the weak teacher and the teacher caches; a rerun with the same one reuses them "
        "(default: a new temporary folder)",
    )
    ap.add_argument(
        "--jsonl", default=None, help="append every JSON line here as it is made; rerunning resumes from it"
    )
    ap.add_argument("--table", default=None, help="write the Markdown table here")
    ap.add_argument(
        "--table_only",
        action="store_true",
        help="train nothing: build --table (or print it) from the lines already in --jsonl",
    )
    args = ap.parse_args()
    args.lr_grid = args.lr_grid or [args.lr]
    if args.table_only:
        if not args.jsonl:
            ap.error("--table_only needs --jsonl")
        write_table(args, read_lines(args.jsonl))
        return
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    work = args.work_dir or tempfile.mkdtemp(prefix="rstg-learning-")
    log = Log(args.jsonl)
    start = time.time()
    for name in args.settings:
        spec = task_spec(name, args.agent_task)
        setting = {"task": spec, "teacher": "embedded:teacher", "max_new_tokens": 24, "max_turns": 1}
        if name == "weak_teacher":
            setting["teacher"] = make_weak_teacher(work, args.weak_teacher_steps, 0)
        if name == "agent_world":
            setting.update(max_new_tokens=48, max_turns=args.max_turns)
        if args.max_new_tokens:
            setting["max_new_tokens"] = args.max_new_tokens
        cache = str(Path(work) / f"teacher_cache_{name}.jsonl")  # keyed by teacher and settings: shared safely
        val = records_of(spec, "val", args.select_size)
        test = records_of(spec, "test", args.test_size)
        proto = protocol(args, name, len(test), setting)
        chosen = {recipe: select(setting, recipe, args, cache, val, log, proto) for recipe in args.recipes}
        if log.find(**proto, recipe="initial_student") is None:
            base_model = RSTGModule(
                guidance=False, teacher=None, max_new_tokens=setting["max_new_tokens"], max_turns=setting["max_turns"]
            )
            base_model.configure_model()
            log.emit({**proto, "recipe": "initial_student", **evaluate(base_model, test, args.pass_k)})
        # Seed-major: every recipe for seed 0, then seed 1, ...; an interrupted run leaves whole
        # paired seeds, which is what the table needs.
        for seed in args.seeds:
            for recipe in args.recipes:
                lr, beta = chosen[recipe]
                if log.find(**proto, recipe=recipe, seed=seed, lr=lr, beta=beta) is not None:
                    continue
                t0 = time.time()
                module, trace = train_one(setting, recipe, beta, seed, args.steps, args, cache, lr)
                log.emit(
                    {
                        **proto,
                        "recipe": recipe,
                        "seed": seed,
                        "lr": lr,
                        "beta": beta,
                        **evaluate(module, test, args.pass_k),
                        **trace.summary(),
                        "wall_s": round(time.time() - t0, 1),
                    }
                )
                if args.table:  # kept current, so a stopped run still leaves its paired table
                    write_table(args, log.lines)
        summary = summarize(log.lines, proto, args.recipes, chosen)
        summary["wall_s"] = round(time.time() - start, 1)
        print(json.dumps({"benchmark": "rstg_learning", **summary}), flush=True)
    write_table(args, log.lines)
    print(f"done in {time.time() - start:.0f} s", file=sys.stderr)


def summarize(lines: list[dict], proto: dict, recipes: list[str], chosen: dict | None = None) -> dict:
    """Paired summary of one setting over the seeds for which **every** recipe has finished.

    ``lines`` may come from a run still in progress: seeds with missing recipes are listed as
    pending and left out of every mean and interval, so all differences stay paired.
    """
    runs: dict[str, dict[int, dict]] = {}
    for line in lines:
        if "seed" in line and all(line.get(k) == v for k, v in proto.items()) and line["recipe"] in recipes:
            if chosen is None or [line.get("lr"), line.get("beta")] == list(chosen[line["recipe"]]):
                runs.setdefault(line["recipe"], {})[line["seed"]] = line
    order = [r for r in RECIPES if r in recipes]
    all_seeds = sorted({s for per in runs.values() for s in per})
    seeds = [s for s in all_seeds if all(s in runs.get(r, {}) for r in order)]
    initial = [
        line
        for line in lines
        if line.get("recipe") == "initial_student" and all(line.get(k) == v for k, v in proto.items())
    ]
    k = proto["pass_k"]
    summary = {
        **proto,
        "seeds": seeds,
        "pending_seeds": [s for s in all_seeds if s not in seeds],
        "initial": {key: initial[-1][key] for key in ("greedy", f"pass@{k}")} if initial else None,
        "recipes": {},
    }
    if not seeds:
        return summary
    for i, recipe in enumerate(order):
        rows = [runs[recipe][s] for s in seeds]
        accs = [r["greedy"] for r in rows]
        entry = {
            "greedy_mean": statistics.mean(accs),
            "pass_k_mean": statistics.mean([r[f"pass@{k}"] for r in rows]) if k else None,
            "lr": rows[0].get("lr"),
            "beta": rows[0].get("beta"),
        }
        if "grpo" in order and recipe != "grpo":
            entry["vs_grpo"] = paired_ci(accs, [runs["grpo"][s]["greedy"] for s in seeds])
        if i > 0:
            entry["vs_previous"] = paired_ci(accs, [runs[order[i - 1]][s]["greedy"] for s in seeds])
        if summary["initial"] is not None:
            entry["vs_initial"] = paired_ci(accs, [summary["initial"]["greedy"]] * len(accs))
        for key in ("frac_negative_zero_var", "opd_adv_pos_frac", "entropy", "teacher_weight_mean"):
            vals = [r[key] for r in rows if r.get(key) is not None]
            entry[key] = statistics.mean(vals) if vals else None
        summary["recipes"][recipe] = entry
    return summary


def write_table(args, lines: list[dict]) -> None:
    """The Markdown table of every setting and protocol found in ``lines`` (``--table``, or stdout)."""
    protos = []
    for line in lines:
        if "seed" in line or line.get("recipe") == "initial_student":
            proto = {k: line[k] for k in PROTOCOL_KEYS if k in line}
            if proto not in protos and line.get("setting") in args.settings:
                protos.append(proto)
    summaries = []
    for proto in protos:
        recipes = [
            r
            for r in args.recipes
            if any(
                line.get("recipe") == r and "seed" in line and all(line.get(k) == v for k, v in proto.items())
                for line in lines
            )
        ]
        summaries.append(summarize(lines, proto, recipes))
    text = markdown(summaries)
    if args.table:
        from lightning_agents.atomic import atomic_write_text

        Path(args.table).parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(args.table, text)
    else:
        print(text)


def markdown(summaries: list[dict]) -> str:
    lines = []
    for s in summaries:
        k = s["pass_k"]
        initial = "" if s["initial"] is None else f"; initial greedy {s['initial']['greedy']:.3f}"
        pending = f"; seeds {s['pending_seeds']} pending" if s["pending_seeds"] else ""
        where = s["setting"]
        if "task" in s:
            where += f": {s['task'].rsplit('.', 1)[-1]}, up to {s['max_turns']} turns of {s['max_new_tokens']} tokens"
        lines += [
            f"#### {where} ({s['steps']} steps of {s['batch_size']} prompts x G={s['num_generations']}, "
            f"paired seeds {s['seeds']}{pending}, {s['test_size']} test problems{initial})",
            "",
        ]
        if not s["recipes"]:
            lines += ["No seed has finished every recipe yet.", ""]
            continue
        passk = f" pass@{k} |" if k else ""
        lines += [
            f"| recipe | lr | beta | greedy |{passk} vs initial (95% CI) | vs GRPO (95% CI) | "
            "vs row above (95% CI) | neg. groups | A_opd > 0 | entropy | w_x |",
            "|---|---|---|---|" + ("---|" if k else "") + "---|---|---|---|---|---|---|",
        ]

        def ci(e):
            if e is None:
                return ""
            if math.isnan(e["lo"]):  # one seed: no interval
                return f"{e['diff']:+.3f}"
            return f"{e['diff']:+.3f} [{e['lo']:+.3f}, {e['hi']:+.3f}]"

        def num(x):
            return "" if x is None else f"{x:.3f}"

        for recipe, e in s["recipes"].items():
            lines.append(
                f"| {recipe} | {e['lr']:g} | {e['beta'] or ''} | {e['greedy_mean']:.3f} | "
                + (f"{num(e['pass_k_mean'])} | " if k else "")
                + f"{ci(e.get('vs_initial'))} | {ci(e.get('vs_grpo'))} | {ci(e.get('vs_previous'))} | "
                f"{num(e['frac_negative_zero_var'])} | {num(e['opd_adv_pos_frac'])} | {num(e['entropy'])} | "
                f"{num(e['teacher_weight_mean'])} |"
            )
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
