"""A code completion scores the same in RL as in evaluation (session 42).

``HumanEvalTask.verify(completion, problem)`` (evaluation, HFlow) builds the program with
``program_for``: the problem's stub first when the model returned only the function's body, and,
for an evalplus release row, its prints dropped. The RL prompt record's ``verifier``, which RSTG
and GRPO call as ``verifier(completion, reference)``, ran the raw completion: a body-only answer
that evaluation passed scored 0 in RL, and a release row's prints counted against the sandbox's
output cap there. The record's verifier now carries the stub, the entry point and the prints rule,
and ``verify`` scores with a verifier built from that same spec. Completions go through RSTG's own
scoring (``RSTGModule._sample`` with a scripted engine), the records through JSON, as saved.

Real rows: ``../shared/data/humaneval/HumanEval.jsonl.gz`` (openai/human-eval) and evalplus
release rows in ``tests/data/code/evalplus_release.jsonl`` (see its README).
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from lightning_agents.datamodules.prompts import read_prompt_records
from lightning_agents.modules.rstg import RSTGModule
from lightning_agents.rewards import CodeVerifier, resolve_verifier
from lightning_agents.rewards.isolation import isolation_report
from lightning_agents.tasks import HumanEvalTask

ROOT = Path(__file__).resolve().parents[2]
RELEASE = ROOT / "tests" / "data" / "code" / "evalplus_release.jsonl"
CONFIG = ROOT / "configs" / "rstg_qwen3_humaneval.yaml"

pytestmark = pytest.mark.skipif(not isolation_report()["bwrap_works"], reason="bubblewrap is unavailable here")


def _fence(code: str) -> str:
    return f"```python\n{code}\n```"


class _Scripted:
    """A generation engine that answers each prompt with the next given text."""

    def __init__(self, texts: list[str]) -> None:
        self.texts = texts

    def generate(self, prompts, num_samples, sampling, **_):
        assert len(prompts) * num_samples == len(self.texts)
        return SimpleNamespace(texts=list(self.texts))


def _rl_rewards(records: list[dict], completions: list[str], tmp_path: Path, verifier=None) -> list[float]:
    """RSTG's rewards of ``completions[i]`` sampled for ``records[i]`` (its verifier, else
    ``verifier``, the module's default), each record saved and read back as JSON."""
    extra = {} if verifier is None else {"verifier": verifier}
    module = RSTGModule(
        model="embedded:student",
        guidance=False,
        teacher=None,
        num_generations=2,
        max_new_tokens=4,
        micro_batch_size=4,
        teacher_cache=str(tmp_path / "cache.jsonl"),
        log_samples_every_n_steps=0,
        reward_workers=2,
        **extra,
    )
    saved = [json.loads(json.dumps(r)) for r in records]
    _, rewards, _, _ = module._sample(_Scripted(completions), saved, 1, module.sampling)
    return list(rewards)


@pytest.fixture(scope="module")
def humaneval(shared_data):
    task = HumanEvalTask(str(shared_data / "humaneval" / "HumanEval.jsonl.gz"))
    return task, {p["id"]: p for p in task.problems}


# HumanEval/32's stub holds the trusted helper `poly` that the body calls; /58's body is one line.
IDS = ["HumanEval/2", "HumanEval/32", "HumanEval/58"]


def _answers(problem: dict) -> list[str]:
    """Right body only, right full function, wrong full function, wrong body only (all fenced)."""
    body, stub = problem["canonical_solution"], problem["prompt_text"]
    return [_fence(body), _fence(stub + body), _fence(stub + "    return None\n"), _fence("    return None\n")]


def test_body_only_and_full_answers_score_the_same_in_rl_as_in_evaluation(humaneval, shared_data, tmp_path):
    task, problems = humaneval
    chosen = [problems[i] for i in IDS]
    from_task = [task.prompt_record(p) for p in chosen]
    # the records RSTG reads from the HumanEval file itself (configs/rstg_qwen3_humaneval.yaml)
    from_file = {
        r["id"]: r for r in read_prompt_records(str(shared_data / "humaneval" / "HumanEval.jsonl.gz"), size=60)
    }
    records, completions, evaluated = [], [], []
    for problem, record in zip(chosen, from_task):
        for answer in _answers(problem):
            records += [record, from_file[problem["id"]]]
            completions += [answer, answer]
            evaluated += [task.verify(answer, problem)] * 2
    assert evaluated == [1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0] * len(IDS)
    assert _rl_rewards(records, completions, tmp_path) == evaluated
    # one spec: evaluation's verifier is built from the record's (plain JSON) verifier
    for problem, record in zip(chosen, from_task):
        assert json.loads(json.dumps(record["verifier"])) == record["verifier"]
        assert vars(resolve_verifier(record["verifier"])) == vars(task.problem_verifier(problem))


@pytest.fixture(scope="module")
def release(tmp_path_factory):
    rows = [json.loads(line) for line in RELEASE.read_text().splitlines() if line.strip()]
    chosen = [r for r in rows if r["task_id"] in ("HumanEval/2", "Mbpp/2")]
    path = tmp_path_factory.mktemp("release") / "rows.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in chosen))
    task = HumanEvalTask(str(path), evalplus_cache=None)
    return task, {p["id"]: p for p in task.problems}, {r["task_id"]: r for r in chosen}


def _printing(code: str, entry_point: str) -> str:
    """``code`` whose entry point prints 2,000 characters a call: over the sandbox's 64 KiB
    output cap across the row's inputs, which evalplus drops (``swallow_io``)."""
    return code.replace(f"def {entry_point}(", f"def _{entry_point}(") + (
        f"\n\ndef {entry_point}(*args):\n    print('x' * 2000)\n    return _{entry_point}(*args)\n"
    )


def test_release_rows_drop_prints_and_take_a_body_in_rl_as_in_evaluation(release, tmp_path):
    task, problems, rows = release
    he, mbpp = problems["HumanEval/2"], problems["Mbpp/2"]
    he_full = he["prompt_text"] + rows["HumanEval/2"]["canonical_solution"]
    mbpp_full = rows["Mbpp/2"]["canonical_solution"]
    cases = [
        (he, _fence(rows["HumanEval/2"]["canonical_solution"])),  # body only
        (he, _fence(_printing(he_full, "truncate_number"))),
        (he, _fence(he["prompt_text"] + "    return number\n")),  # wrong
        (mbpp, _fence(_printing(mbpp_full, "similar_elements"))),
        (mbpp, _fence("def similar_elements(a, b):\n    return tuple(a)\n")),  # wrong
    ]
    evaluated = [task.verify(answer, problem) for problem, answer in cases]
    assert evaluated == [1.0, 1.0, 0.0, 1.0, 0.0]
    records = [task.prompt_record(problem) for problem, _ in cases]
    assert _rl_rewards(records, [answer for _, answer in cases], tmp_path) == evaluated
    assert all(r["verifier"]["init_args"]["drop_prints"] is True for r in records)


def test_reasoning_before_an_unfenced_function_is_read_alike(humaneval, tmp_path):
    # Qwen3 with thinking on writes its <think> block into the content. Both readers drop it (the
    # answer is read once now: evaluation used to keep the block in the code it built and lose it
    # only when the verifier read the program again). A function drafted only inside the block is
    # no answer in either. A guard of the one reading: it passes on the old code too.
    task, problems = humaneval
    problem = problems["HumanEval/58"]
    full = problem["prompt_text"] + problem["canonical_solution"]
    cases = [
        f"<think>\nThe intersection, sorted. def common(l1, l2) ...\n</think>\n\n{full}",
        f"<think>\n{_fence(full)}\n</think>\n\nI could not finish.",
    ]
    evaluated = [task.verify(answer, problem) for answer in cases]
    assert evaluated == [1.0, 0.0]
    assert _rl_rewards([task.prompt_record(problem)] * 2, cases, tmp_path) == evaluated


def test_the_configs_default_verifier_runs_the_candidate_as_evaluation_does(humaneval, tmp_path):
    # A record with no verifier of its own is scored by the config's `model.verifier`. It ran the
    # program as __main__, where HumanEval's and evalplus's graders (and `verify`) do not: a wrong
    # function fixed in a main block passed, a right one whose main block reads input() failed.
    task, problems = humaneval
    problem = problems["HumanEval/2"]
    default = yaml.safe_load(CONFIG.read_text())["model"]["init_args"]["verifier"]
    record = {"id": problem["id"], "prompt": task.prompt(problem), "reference": problem["reference"]}
    right = problem["prompt_text"] + problem["canonical_solution"]
    fixed_in_main = (
        problem["prompt_text"]
        + "    return number\n\n\nif __name__ == '__main__':\n"
        + "    def truncate_number(number):\n        return number % 1.0\n"
    )
    reads_input = right + "\n\nif __name__ == '__main__':\n    print(truncate_number(float(input())))\n"
    cases = [_fence(fixed_in_main), _fence(reads_input)]
    evaluated = [task.verify(answer, problem) for answer in cases]
    assert evaluated == [0.0, 1.0]
    assert _rl_rewards([record] * 2, cases, tmp_path, verifier=default) == evaluated


def test_records_saved_before_still_score_the_whole_program(humaneval, tmp_path):
    # A record written before (its verifier has no entry point) keeps its rule: the completion is
    # the whole program, so a full function passes and a body alone does not, as it did then. A
    # guard: it passes on the old code too.
    task, problems = humaneval
    problem = problems["HumanEval/2"]
    old = {**task.prompt_record(problem)}
    old["verifier"] = {"class_path": "lightning_agents.rewards.CodeVerifier", "init_args": {"module_name": "solution"}}
    body, full = problem["canonical_solution"], problem["prompt_text"] + problem["canonical_solution"]
    assert _rl_rewards([old, old], [_fence(full), _fence(body)], tmp_path) == [1.0, 0.0]
    assert resolve_verifier(old["verifier"])(_fence(full), old["reference"]) == 1.0


def test_codeverifier_refuses_an_entry_point_that_is_no_name():
    for bad in ("", "f(x)", "def f", 3):
        with pytest.raises(ValueError, match="entry_point"):
            CodeVerifier(entry_point=bad)
