"""What session 42's one code-scoring path (32ca778, 9570f4f, b417076) left, session 43.

- ``run_agent_rl`` put the task-level verifier (no stub) on every rollout, where ``run_agent_loop``
  puts the problem's own: an RL record ``curate`` builds from a HumanEval agent-RL rollout scored a
  right body-only answer 0 where the rollout had scored 1.
- ``HeldOutAccuracy`` stopped the whole evaluation (and with it the fit) when one record's verifier
  raised or could not be built; such a record now counts wrong, with one warning naming it.
- The evalplus cache lock waited forever for a holder hung inside it; the wait is now bounded by
  ``EVALPLUS_LOCK_TIMEOUT_S`` and the error names the lock file.
- A HumanEval record saved before 32ca778 (its ``CodeVerifier`` names no ``entry_point``) still
  scores the raw completion; ``HeldOutAccuracy`` warns once, naming the file and how to rebuild it.

Real rows: ``../shared/data/humaneval/HumanEval.jsonl.gz`` (openai/human-eval). HumanEval/32's stub
holds the helper ``poly`` its body calls; HumanEval/58's body is one line.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from lightning_agents.callbacks import HeldOutAccuracy
from lightning_agents.datamodules.prompts import read_prompt_records
from lightning_agents.datamodules.trajectories import load_rollouts
from lightning_agents.rewards import RewardScorer
from lightning_agents.rewards.isolation import isolation_report
from lightning_agents.rollout import GenerationOutput, SamplingConfig
from lightning_agents.rollout.agent_loop import run_agent_rl
from lightning_agents.tasks import HumanEvalTask
from lightning_agents.topology import curate_rollouts

sandboxed = pytest.mark.skipif(not isolation_report()["bwrap_works"], reason="bubblewrap is unavailable here")

IDS = ["HumanEval/2", "HumanEval/32", "HumanEval/58"]


def _fence(code: str) -> str:
    return f"```python\n{code}```"


@pytest.fixture(scope="module")
def humaneval(shared_data):
    task = HumanEvalTask(str(shared_data / "humaneval" / "HumanEval.jsonl.gz"), evalplus_cache=None)
    problems = {p["id"]: p for p in task.problems}
    return task, [problems[i] for i in IDS]


class _TokenScript:
    """A token-id sampler for ``run_agent_rl``: the k-th episode of a problem "samples"
    ``plan[problem id][k]`` (the problem is found by its entry point's ``def`` in the prompt)."""

    def __init__(self, tok, problems: list[dict], plan: dict[str, list[str]]) -> None:
        self.tokenizer, self.problems, self.plan, self.seen = tok, problems, plan, {}
        self.stop_ids = [tok.eos_token_id]

    def render(self, messages, tools=None):
        return self.tokenizer.apply_chat_template(messages, tools=tools, tokenize=False, add_generation_prompt=True)

    def _reply(self, prompt_text: str) -> str:
        problem = next(p for p in self.problems if f"def {p['entry_point']}(" in prompt_text)
        k = self.seen[problem["id"]] = self.seen.get(problem["id"], -1) + 1
        return self.plan[problem["id"]][k]

    def generate(self, prompts, num_samples=1, sampling=None, seeds=None):
        tok, rows = self.tokenizer, []
        for ids in prompts:
            rows.append(tok(self._reply(tok.decode(ids)), add_special_tokens=False)["input_ids"] + [tok.eos_token_id])
        width = max(len(r) for r in rows)
        ids = torch.full((len(rows), width), tok.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, r in enumerate(rows):
            ids[i, : len(r)], mask[i, : len(r)] = torch.tensor(r), 1
        return GenerationOutput(
            prompt_ids=torch.zeros((len(rows), 1), dtype=torch.long),
            prompt_mask=torch.ones((len(rows), 1), dtype=torch.long),
            completion_ids=ids,
            completion_mask=mask,
            logprobs=torch.zeros(ids.shape),
            texts=[tok.decode(r[:-1]) for r in rows],
            truncated=torch.zeros(len(rows), dtype=torch.bool),
            entropies=torch.zeros(ids.shape),
        )


@sandboxed
@pytest.mark.parametrize("given", ["problems", "rl_records"])
def test_rl_records_curated_from_agent_rl_rollouts_score_a_body_as_the_rollout_did(humaneval, tmp_path, given):
    from lightning_agents.models import load_tokenizer

    task, problems = humaneval
    # run_agent_rl takes the task's problems, or RL records as RSTG's datamodule reads them
    inputs = problems if given == "problems" else [json.loads(json.dumps(task.prompt_record(p))) for p in problems]
    right = {p["id"]: _fence(p["canonical_solution"]) for p in problems}
    wrong = {p["id"]: _fence("    return None\n") for p in problems}
    plan = {i: [right[i], wrong[i]] for i in IDS}
    engine = _TokenScript(load_tokenizer("embedded:student"), inputs, plan)
    batch = run_agent_rl(engine, task, inputs, num_samples=2, sampling=SamplingConfig(), max_turns=1)
    assert batch.rewards == [1.0, 0.0] * len(problems)
    path = tmp_path / "rollouts.json"
    path.write_text(json.dumps(batch.rollouts))
    rl_file = tmp_path / "rl_tasks.jsonl"
    rl_file.write_text("".join(json.dumps(r) + "\n" for r in curate_rollouts(load_rollouts(path)).rl_records()))
    read = {r["id"]: r for r in read_prompt_records(str(rl_file))}
    assert sorted(read) == sorted(IDS)
    completions = [answer[i] for i in IDS for answer in (right, wrong)]
    specs = [read[i]["verifier"] for i in IDS for _ in range(2)]
    references = [read[i]["reference"] for i in IDS for _ in range(2)]
    # the canonical body scores 1 through the curated record, as its rollout did (0 before)
    assert RewardScorer(max_workers=2).score(completions, references, specs).rewards == [1.0, 0.0] * len(IDS)
    # one spec: each rollout carries what its problem's own RL record names
    for rollout, p in zip(batch.rollouts[::2], problems):
        assert rollout["info"]["verifier"] == task.prompt_record(p)["verifier"]


class RaisingVerifier:
    """Raises on every completion, as a verifier whose sandbox does not start does."""

    def __call__(self, completion: str, reference: str) -> float:
        raise RuntimeError(f"the sandbox did not start (reference {reference})")


class _Scripted:
    """An engine that answers every prompt with its scripted text, in order."""

    def __init__(self, texts: list[str]) -> None:
        self.texts = list(texts)

    def generate(self, prompts, sampling=None, **_):
        out, self.texts = self.texts[: len(prompts)], self.texts[len(prompts) :]
        return SimpleNamespace(texts=out, truncated=torch.zeros(len(out), dtype=torch.bool))


def _evaluate(monkeypatch, callback, texts):
    monkeypatch.setattr("lightning_agents.callbacks.accuracy.HFGenerationEngine", lambda *_: _Scripted(texts))
    return callback.evaluate(SimpleNamespace(model=None, tokenizer=None))


def test_heldout_accuracy_counts_a_record_whose_verifier_raises_wrong(tmp_path, monkeypatch, caplog):
    raising = f"{__name__}.RaisingVerifier"
    records = [
        {"id": "ok-1", "prompt": "2+2=", "reference": "4"},
        {"id": "boom-1", "prompt": "3+3=", "reference": "6", "verifier": raising},
        {"id": "ok-2", "prompt": "5+5=", "reference": "10"},
        {"id": "boom-2", "prompt": "1+1=", "reference": "2", "verifier": raising},
    ]
    path = tmp_path / "heldout.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    callback = HeldOutAccuracy(path=str(path), batch_size=2)
    with caplog.at_level("WARNING", logger="lightning_agents.callbacks.accuracy"):
        metrics = _evaluate(monkeypatch, callback, [f"The answer is {r['reference']}" for r in records])
    assert metrics["accuracy"] == pytest.approx(2 / 4) and metrics["n"] == 4
    # how many were counted wrong for their verifier, not for their answer, is a metric of its own
    assert metrics["verifier_errors"] == 2
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1, warnings
    (message,) = warnings
    assert "2 of 4 records" in message
    assert f"boom-1 ({path}:2)" in message and raising in message
    assert "RuntimeError: the sandbox did not start (reference 6)" in message


class _Counting(_Scripted):
    """A scripted engine that counts its generate calls."""

    calls = 0

    def generate(self, prompts, sampling=None, **_):
        type(self).calls += 1
        return super().generate(prompts, sampling)


@pytest.mark.parametrize("setting", ["typo", "refused"])
def test_heldout_accuracy_refuses_a_verifier_class_path_no_record_can_build(tmp_path, monkeypatch, setting):
    """A verifier no record can build (a mistyped class path; ``init_args`` the verifier refuses) is
    a config error: b1726c4 counted every record naming it wrong, so the file read as accuracy 0
    with one warning. It raises before anything is generated, naming the first record naming it."""
    spec = {
        "typo": "lightning_agents.rewards.ArithmeticVerifer",
        "refused": {"class_path": "lightning_agents.rewards.CodeVerifier", "init_args": {"module_name": "json"}},
    }[setting]
    records = [{"id": "plain", "prompt": "1+1=", "reference": "2"}] + [
        {"id": f"p{i}", "prompt": f"{i}+{i}=", "reference": str(2 * i), "verifier": spec} for i in range(4)
    ]
    path = tmp_path / "heldout.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    callback = HeldOutAccuracy(path=str(path))
    _Counting.calls = 0
    monkeypatch.setattr(
        "lightning_agents.callbacks.accuracy.HFGenerationEngine",
        lambda *_: _Counting([f"The answer is {r['reference']}" for r in records]),
    )
    with pytest.raises(ValueError, match="cannot be built") as caught:
        callback.evaluate(SimpleNamespace(model=None, tokenizer=None))
    message = str(caught.value)
    assert f"record p0 ({path}:2)" in message
    assert ("ArithmeticVerifer" if setting == "typo" else '"module_name": "json"') in message
    assert _Counting.calls == 0


def test_heldout_accuracy_raises_when_the_verifier_raised_on_every_record(tmp_path, monkeypatch):
    """No record scored is no accuracy: an evaluation whose verifier raised on every record raises
    with the first exception, rather than report 0 as the model's."""
    raising = f"{__name__}.RaisingVerifier"
    records = [{"id": f"p{i}", "prompt": f"{i}+1=", "reference": str(i + 1), "verifier": raising} for i in range(3)]
    path = tmp_path / "heldout.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    callback = HeldOutAccuracy(path=str(path), batch_size=2)
    with pytest.raises(RuntimeError, match="raised on all 3 records") as caught:
        _evaluate(monkeypatch, callback, [f"The answer is {r['reference']}" for r in records])
    assert f"p0 ({path}:1)" in str(caught.value)
    assert "the sandbox did not start (reference 1)" in str(caught.value.__cause__)


def test_heldout_accuracy_warns_once_about_humaneval_records_saved_before_32ca778(
    humaneval, tmp_path, monkeypatch, caplog
):
    task, problems = humaneval
    new = [task.prompt_record(p) for p in problems]
    # what HumanEvalTask.prompt_record wrote before 32ca778: the task-level spec, no entry point
    old = [{**r, "verifier": task.verifier_spec()} for r in new]
    callback_new = HeldOutAccuracy(path=str(_write(tmp_path / "new.jsonl", new)))
    old_path = _write(tmp_path / "old.jsonl", old)
    callback_old = HeldOutAccuracy(path=old_path)
    with caplog.at_level("WARNING", logger="lightning_agents.callbacks.accuracy"):
        callback_new.problems()
        assert not caplog.records
        callback_old.problems()
        callback_old.problems()
    (message,) = [r.getMessage() for r in caplog.records]
    assert f"{old_path}:1: record HumanEval/2" in message and "entry_point" in message
    assert "Write the file again from its source" in message


def _write(path: Path, records: list[dict]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return str(path)


_HOLD = """
import fcntl, pathlib, sys, time
fh = open(sys.argv[1], "a")
fcntl.flock(fh, fcntl.LOCK_EX)
print("held", flush=True)
time.sleep(float(sys.argv[2]))
pathlib.Path(sys.argv[1] + ".released").touch()
fh.close()
"""


def _holder(lock: Path, seconds: float) -> subprocess.Popen:
    """A second process that takes ``lock``, keeps it ``seconds`` (hung inside it), then notes
    ``<lock>.released`` and lets go."""
    lock.parent.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen([sys.executable, "-c", _HOLD, str(lock), str(seconds)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_the_evalplus_cache_lock_stops_waiting_for_a_hung_holder(tmp_path, monkeypatch):
    from lightning_agents.tasks import evalplus

    monkeypatch.setattr(evalplus, "_MEMORY_CACHE", {})
    monkeypatch.setattr(evalplus, "EVALPLUS_LOCK_TIMEOUT_S", 1.0, raising=False)
    row = {
        "task_id": "HumanEval/970",
        "prompt": "def f970(x):\n    '''x'''\n",
        "entry_point": "f970",
        "canonical_solution": "    return x\n",
        "base_input": [[1]],
        "plus_input": [],
        "atol": 0,
    }
    data = _write(tmp_path / "rows.jsonl", [row])
    cache = tmp_path / "cache"
    lock = cache / f"{evalplus._file_key(Path(data))}.lock"
    holder = _holder(lock, 600)
    outcome: list[BaseException | None] = []

    def load() -> None:
        try:
            outcome.append(HumanEvalTask(data, evalplus_cache=str(cache)).problems and None)
        except BaseException as exc:  # noqa: BLE001 -- the test inspects it
            outcome.append(exc)

    try:
        # in a thread: before session 43 the load waited in flock for as long as the holder lived
        waiter = threading.Thread(target=load, daemon=True)
        waiter.start()
        waiter.join(60)
        assert outcome, "the load still waited for the lock after 60 s"
    finally:
        holder.kill()
        holder.wait()
    (exc,) = outcome
    assert isinstance(exc, evalplus.EvalplusCacheLockTimeout), exc
    assert str(lock) in str(exc) and "EVALPLUS_LOCK_TIMEOUT_S" in str(exc) and "evalplus_cache" in str(exc)


def test_the_evalplus_cache_lock_is_taken_once_its_holder_lets_go(tmp_path, monkeypatch):
    from lightning_agents.tasks import evalplus

    monkeypatch.setattr(evalplus, "EVALPLUS_LOCK_TIMEOUT_S", 120.0, raising=False)
    holder = _holder(tmp_path / "k.lock", 1.0)
    try:
        with evalplus._locked(tmp_path, "k"):
            assert (tmp_path / "k.lock.released").exists()  # taken only after the holder let go
    finally:
        holder.kill()
        holder.wait()


@sandboxed
def test_an_agent_rl_record_naming_no_verifier_curates_to_what_its_rollout_scored(humaneval):
    """An RL record with prompt messages and an entry point but ``verifier: null`` (what
    ``read_prompt_records`` makes of a record naming none) is scored 1 by ``task.verify`` in its
    rollout; b1726c4's rollout carried ``task.verifier_spec()`` (no entry point, no stub), so the
    record ``curate`` builds from it scored the same body 0."""
    from lightning_agents.models import load_tokenizer
    from lightning_agents.rewards.registry import resolve_verifier

    task, problems = humaneval
    problem = problems[0]  # HumanEval/2
    record = {**json.loads(json.dumps(task.prompt_record(problem))), "verifier": None}
    body = _fence(problem["canonical_solution"])
    engine = _TokenScript(load_tokenizer("embedded:student"), [record], {problem["id"]: [body]})
    batch = run_agent_rl(engine, task, [record], num_samples=1, sampling=SamplingConfig(), max_turns=1)
    assert batch.rewards == [1.0]
    carried = batch.rollouts[0]["info"]["verifier"]
    # what the record curated from this rollout scores the body (0 on b1726c4)
    assert resolve_verifier(carried)(body, record["reference"]) == 1.0
    assert carried == task.prompt_record(problem)["verifier"]


class _Answers(_TokenScript):
    """Answers each prompt with the answer of the record whose user turn it shows."""

    def _reply(self, prompt_text: str) -> str:
        problem = next(p for p in self.problems if p["prompt"][-1]["content"] in prompt_text)
        return f"The answer is {problem['reference']}."


def test_an_agent_rl_record_naming_no_verifier_whose_prompt_cannot_be_rebuilt_carries_the_task_level_one():
    """A calculator RL record has no ``question`` (``prompt_record`` leaves it out), so its task
    cannot rebuild the problem's verifier from it: the rollout carries ``task.verifier_spec()``, the
    verifier ``task.verify`` scored it with, and is not refused (a guard: HEAD did the same)."""
    from lightning_agents.models import load_tokenizer
    from lightning_agents.tasks import CalculatorTask

    task = CalculatorTask(split="val", n=2)
    records = [{**json.loads(json.dumps(task.prompt_record(p))), "verifier": None} for p in task.problems]
    assert not any("question" in r for r in records)
    engine = _Answers(load_tokenizer("embedded:student"), records, {})
    batch = run_agent_rl(engine, task, records, num_samples=1, sampling=SamplingConfig(), max_turns=2)
    assert batch.rewards == [1.0, 1.0]
    assert [r["info"]["verifier"] for r in batch.rollouts] == [task.verifier_spec()] * 2
