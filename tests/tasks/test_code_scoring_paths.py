"""The two code-scoring paths the record verifier of 32ca778 did not reach yet (session 42).

Since 32ca778 a HumanEval problem's RL record names ``CodeVerifier`` with the problem's entry point,
stub and ``module_name``, so RL scores a body-only answer as ``HumanEvalTask.verify`` does. Two
paths still scored the raw completion:

- ``run_agent_loop`` put the task-level verifier (no stub) on every rollout, and ``curate`` copies
  a rollout's verifier into the RL record it builds: a right body its rollout scored 1 scored 0 in
  RL from the curated record;
- ``HeldOutAccuracy`` scored every problem of a held-out file with its one ``verifier`` built with
  default arguments: a HumanEval record's right body scored 0, and the program ran as ``__main__``.

Real rows: ``../shared/data/humaneval/HumanEval.jsonl.gz`` (openai/human-eval). HumanEval/32's stub
holds the helper ``poly`` the body calls; HumanEval/58's body is one line.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch

from lightning_agents.callbacks import HeldOutAccuracy
from lightning_agents.datamodules.prompts import read_prompt_records
from lightning_agents.datamodules.trajectories import load_rollouts
from lightning_agents.rewards import RewardScorer
from lightning_agents.rewards.isolation import isolation_report
from lightning_agents.rewards.registry import resolve_verifier
from lightning_agents.rollout.agent_loop import run_agent_loop
from lightning_agents.tasks import CalculatorTask, HumanEvalTask
from lightning_agents.topology import curate_rollouts

pytestmark = pytest.mark.skipif(not isolation_report()["bwrap_works"], reason="bubblewrap is unavailable here")

IDS = ["HumanEval/2", "HumanEval/32", "HumanEval/58"]


def _fence(code: str) -> str:
    return f"```python\n{code}\n```"


def _answers(problem: dict) -> dict[str, str]:
    """Right body only, right full function, right function with a main block that fails when run
    as ``__main__`` (graders do not run it), wrong full function, wrong body only."""
    body, stub = problem["canonical_solution"], problem["prompt_text"]
    return {
        "right_body": _fence(body),
        "right_full": _fence(stub + body),
        "main_block": _fence(stub + body + '\nif __name__ == "__main__":\n    raise SystemExit(1)\n'),
        "wrong_full": _fence(stub + "    return None\n"),
        "wrong_body": _fence("    return None\n"),
    }


@pytest.fixture(scope="module")
def humaneval(shared_data):
    task = HumanEvalTask(str(shared_data / "humaneval" / "HumanEval.jsonl.gz"))
    problems = {p["id"]: p for p in task.problems}
    return task, [problems[i] for i in IDS]


class _PerTrial:
    """Answers the k-th episode of a problem with ``plan[problem id][k]`` (one turn each)."""

    def __init__(self, problems: list[dict], plan: dict[str, list[str]]) -> None:
        self.problems, self.plan, self.seen = problems, plan, {}

    def generate(self, prompts, num_samples=1, sampling=None, tools=None):
        texts = []
        for messages in prompts:
            problem = next(p for p in self.problems if p["prompt_text"] in messages[-1]["content"])
            k = self.seen[problem["id"]] = self.seen.get(problem["id"], -1) + 1
            texts.append(self.plan[problem["id"]][k])
        return SimpleNamespace(texts=texts)


def test_rl_records_curated_from_humaneval_rollouts_score_a_body_as_the_rollout_did(humaneval, tmp_path):
    task, problems = humaneval
    # two trials per problem: the right body (a success) and the wrong body, so curation keeps each task
    plan = {p["id"]: [_answers(p)["right_body"], _answers(p)["wrong_body"]] for p in problems}
    rollouts = run_agent_loop(_PerTrial(problems, plan), problems, trials=2, task=task, max_turns=1)
    assert [r["reward"] for r in rollouts] == [1.0, 0.0] * len(problems)
    path = tmp_path / "rollouts.json"
    path.write_text(json.dumps(rollouts))
    records = curate_rollouts(load_rollouts(path)).rl_records()
    assert sorted(r["id"] for r in records) == sorted(IDS)
    # the RL file curate writes, read as RSTG/GRPO read their prompt records
    rl_file = tmp_path / "rl_tasks.jsonl"
    rl_file.write_text("".join(json.dumps(r) + "\n" for r in records))
    read = {r["id"]: r for r in read_prompt_records(str(rl_file))}
    kinds = ["right_body", "right_full", "wrong_full", "wrong_body"]
    completions, references, specs, evaluated = [], [], [], []
    for p in problems:
        for kind in kinds:
            answer = _answers(p)[kind]
            completions.append(answer)
            references.append(read[p["id"]]["reference"])
            specs.append(read[p["id"]]["verifier"])
            evaluated.append(task.verify(answer, p))
    assert evaluated == [1.0, 1.0, 0.0, 0.0] * len(problems)
    assert RewardScorer(max_workers=2).score(completions, references, specs).rewards == evaluated
    # one spec: the rollout carries what the problem's own RL record names
    for r, p in zip(rollouts[::2], problems):
        assert r["info"]["verifier"] == task.prompt_record(p)["verifier"]


def test_rollouts_of_a_task_with_one_verifier_keep_it():
    task = CalculatorTask(split="val")
    problems = task.get_problems(n=2)

    class _Answer:
        def generate(self, prompts, num_samples=1, sampling=None, tools=None):
            return SimpleNamespace(texts=["The answer is 0"] * len(prompts))

    rollouts = run_agent_loop(_Answer(), problems, trials=2, task=task, max_turns=1)
    assert [r["info"]["verifier"] for r in rollouts] == [task.verifier_spec()] * 4


class _Scripted:
    """An engine that answers every prompt with its scripted text, in order."""

    def __init__(self, texts: list[str]) -> None:
        self.texts = list(texts)

    def generate(self, prompts, sampling=None, **_):
        out, self.texts = self.texts[: len(prompts)], self.texts[len(prompts) :]
        return SimpleNamespace(texts=out, truncated=torch.zeros(len(out), dtype=torch.bool))


def test_heldout_accuracy_scores_humaneval_records_with_their_own_verifier(humaneval, tmp_path, monkeypatch):
    task, problems = humaneval
    heldout = tmp_path / "heldout.jsonl"
    # the records RL trains on, as curate and generate save them; a last one names no verifier and
    # gets the callback's `verifier`, with its defaults, as before (the answer is the whole program)
    first = problems[0]
    plain = {"prompt": first["prompt_text"], "reference": first["reference"]}
    heldout.write_text("".join(json.dumps(task.prompt_record(p)) + "\n" for p in problems) + json.dumps(plain) + "\n")
    callback = HeldOutAccuracy(path=str(heldout), verifier="lightning_agents.rewards.CodeVerifier", batch_size=2)
    module = SimpleNamespace(model=None, tokenizer=None)
    got, evaluated = {}, {}
    for kind in ["right_body", "right_full", "main_block", "wrong_full", "wrong_body"]:
        texts = [_answers(p)[kind] for p in problems] + [_answers(first)["right_full"]]
        monkeypatch.setattr(
            "lightning_agents.callbacks.accuracy.HFGenerationEngine", lambda *_, texts=texts: _Scripted(texts)
        )
        got[kind] = callback.evaluate(module)["accuracy"]
        evaluated[kind] = (sum(task.verify(_answers(p)[kind], p) for p in problems) + 1) / (len(problems) + 1)
    assert evaluated == {
        "right_body": 1.0,
        "right_full": 1.0,
        "main_block": 1.0,
        "wrong_full": 0.25,
        "wrong_body": 0.25,
    }
    assert got == evaluated


def test_the_curate_command_takes_humaneval_rollouts(humaneval, tmp_path):
    """``lightning-agents curate`` on HumanEval rollouts: its reward check stopped with ``TypeError:
    unhashable type: 'dict'`` on the rollouts' verifier mapping (only a class path string was
    looked up), so the command never reached the RL records the library path writes."""
    from lightning_agents.commands.curate import CurateCommand

    task, problems = humaneval
    plan = {p["id"]: [_answers(p)["right_body"], _answers(p)["wrong_body"]] for p in problems}
    rollouts = run_agent_loop(_PerTrial(problems, plan), problems, trials=2, task=task, max_turns=1)
    path = tmp_path / "rollouts.json"
    path.write_text(json.dumps(rollouts))
    CurateCommand().curate(rollouts=[str(path)], output=str(tmp_path / "out"))
    written = [json.loads(line) for line in (tmp_path / "out" / "rl_tasks.jsonl").read_text().splitlines()]
    assert sorted(r["id"] for r in written) == sorted(IDS)
    assert all(r["verifier"]["init_args"]["entry_point"] for r in written)


@pytest.fixture(scope="module")
def humaneval_by_id(shared_data):
    task = HumanEvalTask(str(shared_data / "humaneval" / "HumanEval.jsonl.gz"), evalplus_cache=None)
    return task, {p["task_id"]: p for p in task.load("test")}


def _rl_and_eval(task, problem, completion):
    """(score from the problem's RL record after a JSON round trip, HumanEvalTask.verify)."""
    record = json.loads(json.dumps(task.prompt_record(problem)))
    rl = float(resolve_verifier(record["verifier"])(completion, record["reference"]))
    return rl, float(task.verify(completion, problem))


FACTORIAL_BODY = (
    "```python\n    def factorial(k):\n        x = 1\n        for j in range(1, k + 1):\n            x *= j\n"
    "        return x\n    return [factorial(i) if i % 2 == 0 else i * (i + 1) // 2 for i in range(1, n + 1)]\n```"
)
FIB_ITER_BODY = (
    "```python\n    def fib_iter(k):\n        a, b = 0, 1\n        for _ in range(k):\n            a, b = b, a + b\n"
    "        return a\n    return fib_iter(n)\n```"
)


@pytest.mark.parametrize(
    "task_id, body",
    [("HumanEval/106", FACTORIAL_BODY), ("HumanEval/55", FIB_ITER_BODY)],
    ids=["entry_f_helper_factorial", "entry_fib_helper_fib_iter"],
)
def test_a_right_body_whose_helper_starts_with_the_entry_point_name_gets_the_stub(humaneval_by_id, task_id, body):
    # `def f` is a substring of `def factorial`, `def fib` of `def fib_iter`: function_program takes
    # the body for a whole function, runs it without the stub, and a right answer scores 0
    # (IndentationError, compile_error) in RL and in evaluation alike. The stub rule should ask
    # whether the code defines `entry_point` at the top level (a `def <name>(` at column 0), not
    # whether the text contains `def <name>`.
    task, problems = humaneval_by_id
    assert _rl_and_eval(task, problems[task_id], body) == (1.0, 1.0)


def test_a_non_python_fence_before_the_answer_does_not_swallow_it(humaneval_by_id):
    # Review of 32ca778, HIGH-2: extract_code's fence pattern skipped a ```bash opener, so the bash block's closing fence opens
    # a 'block' that runs to the python block's opener ("Then:\n" is read as code) and the right
    # function is lost: 0 in RL and in evaluation.
    task, problems = humaneval_by_id
    answer = (
        "Nothing to install:\n```bash\npython -V\n```\nThen:\n```python\ndef fib(n):\n    a, b = 0, 1\n"
        "    for _ in range(n):\n        a, b = b, a + b\n    return a\n```"
    )
    assert _rl_and_eval(task, problems["HumanEval/55"], answer) == (1.0, 1.0)


@pytest.mark.parametrize("opener", ["```Python", "``` python", "```python3.11"])
def test_a_python_fence_spelled_otherwise_is_still_read(humaneval_by_id, opener):
    # _FENCE/_OPEN_FENCE accepted only ```, ```python, ```python3 and ```py (lower case, no space):
    # a right function under ```Python is run with its fence lines (compile_error), 0 in RL and in
    # evaluation. Proposed: an opener takes any info string (so fences pair up), and a block is code
    # when its tag is empty or Python-like (case-insensitive), which also mends the bash case above.
    task, problems = humaneval_by_id
    full = "def fib(n):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a\n"
    assert _rl_and_eval(task, problems["HumanEval/55"], f"Here:\n{opener}\n{full}```\n") == (1.0, 1.0)


def test_forcing_the_records_own_verifier_class_keeps_the_problems_arguments(shared_data, humaneval_by_id):
    # Review of 32ca778, MED-1: data.force_verifier replaced HumanEval's per-problem {class_path, init_args} (entry_point, stub,
    # module_name, time limit) with a bare class path: forcing CodeVerifier itself (say, to be sure
    # of the class) makes every right body score 0 in RL while evaluation scores it 1. Proposed: a
    # forced class path equal to the record's own class keeps the record's init_args (or the
    # module refuses/warns when it would drop a per-problem spec).
    from lightning_agents.datamodules.prompts import PromptDataModule

    task, problems = humaneval_by_id
    path = str(shared_data / "humaneval" / "HumanEval.jsonl.gz")
    dm = PromptDataModule(train=path, val=None, force_verifier="lightning_agents.rewards.CodeVerifier")
    records = {r["task_id"]: r for r in dm._load("train")}
    p, r = problems["HumanEval/2"], records["HumanEval/2"]
    body = f"```python\n{p['canonical_solution']}```"
    assert float(resolve_verifier(r["verifier"])(body, r["reference"])) == float(task.verify(body, p)) == 1.0


def test_forcing_another_verifier_warns_that_the_records_arguments_are_dropped(shared_data, caplog):
    from lightning_agents.datamodules.prompts import PromptDataModule

    path = str(shared_data / "humaneval" / "HumanEval.jsonl.gz")
    dm = PromptDataModule(train=path, val=None, force_verifier="lightning_agents.rewards.GSM8KVerifier")
    with caplog.at_level("WARNING", logger="lightning_agents.datamodules.prompts"):
        records = dm._load("train")
    assert {r["verifier"] for r in records} == {"lightning_agents.rewards.GSM8KVerifier"}
    assert "force_verifier" in caplog.text and "entry point" in caplog.text
