"""BFCL multi-turn RL records run as episodes in BFCL's own API classes (BFCLWorldTask).

The world must be BFCL's: replaying real trials through the agent loop gives the tool outputs BFCL
logged and BFCL's verdicts; the ground truth scores 1 and a policy that never calls scores 0 after
hearing every user turn; and RSTG trains on curate's BFCL records instead of refusing them.
"""

from __future__ import annotations

import json
import math

import pytest

pytest.importorskip("bfcl_eval", reason="BFCLWorldTask runs BFCL's API classes (pip install --no-deps bfcl-eval)")

from bfcl_episodes import ScriptedPolicy, claude_rollouts, ground_truth_plan, logged_plan, play, records  # noqa: E402
from bfcl_glyphh import BFCL_VALID, glyphh_rollouts  # noqa: E402
from one_step import one_step_trainer  # noqa: E402

from lightning_agents.rollout.agent_loop import run_agent_loop  # noqa: E402
from lightning_agents.tasks.base import class_path  # noqa: E402
from lightning_agents.tasks.bfcl_world import BFCLWorldTask  # noqa: E402
from lightning_agents.topology.pipeline import rl_prompt_record  # noqa: E402


def test_execution_records_name_the_world_and_call_match_records_do_not(tmp_path):
    assert {r.info.get("task") for r in glyphh_rollouts("execution").values()} == {class_path(BFCLWorldTask)}
    assert {r.info.get("task") for r in glyphh_rollouts("call_match").values()} == {None}


def test_replaying_real_trials_gives_bfcls_verdicts(tmp_path):
    # glyphh-ada-1.1's 9 committed trials, played call by call through the world with BFCL's user
    # turns delivered one after another: the episode's reward is BFCL's own verdict on each.
    rollouts = list(glyphh_rollouts("execution").values())
    problems = records(rollouts, tmp_path / "rl_tasks.jsonl")
    out = play([logged_plan(r) for r in rollouts], problems)
    assert {o["task_id"]: o["reward"] == 1.0 for o in out} == BFCL_VALID
    for o, problem in zip(out, problems):
        assert sum(m["role"] == "user" for m in o["traj"]) == len(problem["user_turns"])
        assert o["info"]["finished"]


def test_the_world_returns_the_outputs_bfcl_logged(shared_data, tmp_path):
    # Claude's two BFCL trials with their inference_log: every one of the 22 tool outputs the
    # world returns is the text BFCL's own execution logged for that call.
    rollouts = claude_rollouts(shared_data / "bfcl")
    problems = records(rollouts, tmp_path / "rl_tasks.jsonl")
    out = play([logged_plan(r) for r in rollouts], problems)
    logged = [[m["content"] for m in r.messages if m["role"] == "tool"] for r in rollouts]
    played = [[m["content"] for m in o["traj"] if m["role"] == "tool"] for o in out]
    assert [len(x) for x in logged] == [14, 8] and played == logged
    assert [o["reward"] for o in out] == [r.reward for r in rollouts] == [1.0, 1.0]


def test_the_ground_truth_scores_one_and_doing_nothing_scores_zero(tmp_path):
    problems = records(glyphh_rollouts("execution").values(), tmp_path / "rl_tasks.jsonl")
    truth = play([ground_truth_plan(p) for p in problems], problems)
    assert [o["reward"] for o in truth] == [1.0] * 9
    silent = play([[] for _ in problems], problems)
    assert [o["reward"] for o in silent] == [0.0] * 9
    # It heard every user turn, answering each without a call: the episode ended after the last.
    assert [o["info"]["turns"] for o in silent] == [len(p["user_turns"]) for p in problems]
    assert all(o["info"]["finished"] for o in silent)


def test_a_refused_call_is_an_observation_and_runs_nothing(tmp_path):
    (problem, *_) = records(glyphh_rollouts("execution").values(), tmp_path / "rl_tasks.jsonl")
    world = BFCLWorldTask().environment(problem)
    before = json.dumps({k: repr(v) for k, v in vars(world.instances["GorillaFileSystem"]).items()})
    for name, arguments in [("_load_scenario", {}), ("rm", {"__class__": 1}), ("eval", {"source": "1"})]:
        observation, is_error = world.execute(name, arguments)
        assert is_error and observation.startswith(("error:", "Error during execution")), observation
    assert world.execute("cd", "{not json")[1]
    assert json.dumps({k: repr(v) for k, v in vars(world.instances["GorillaFileSystem"]).items()}) == before


def test_one_rstg_step_runs_bfcl_episodes(tmp_path):
    from lightning_agents.datamodules.prompts import PromptDataModule
    from lightning_agents.modules.rstg import RSTGModule

    rollouts = [
        r for r in glyphh_rollouts("execution").values() if r.task_id in ("multi_turn_base_0", "multi_turn_base_113")
    ]
    path = tmp_path / "rl_tasks.jsonl"
    path.write_text("".join(json.dumps(rl_prompt_record(r)) + "\n" for r in rollouts))
    module = RSTGModule(
        model="embedded:student",
        guidance=False,
        teacher=None,
        num_generations=2,
        max_new_tokens=40,
        max_turns=8,
        micro_batch_size=4,
        teacher_cache=str(tmp_path / "cache.jsonl"),
        log_samples_every_n_steps=0,
    )
    batches = []
    sample = module._sample

    def recording(*args, **kwargs):
        result = sample(*args, **kwargs)
        batches.append(result[3])
        return result

    module._sample = recording
    trainer = one_step_trainer(tmp_path)
    trainer.fit(module, datamodule=PromptDataModule(train=str(path), val=None, batch_size=2))
    (batch,) = batches
    assert batch is not None and len(batch.rewards) == 4
    assert all(math.isfinite(r) for r in batch.rewards)
    assert {ro["task_id"] for ro in batch.rollouts} == {"multi_turn_base_0", "multi_turn_base_113"}
    # Episodes in BFCL's world: the record's own tools were offered, and the user spoke again.
    assert all(ro["tools"] == rollouts[0].tools or ro["tools"] == rollouts[1].tools for ro in batch.rollouts)
    assert any(sum(m["role"] == "user" for m in ro["traj"]) > 1 for ro in batch.rollouts)
    assert math.isfinite(float(trainer.callback_metrics["train/loss"]))


def test_rstg_refuses_a_turn_budget_no_bfcl_episode_can_finish(tmp_path):
    # With the default max_turns (4) a BFCL record of more user turns scored 0 every time, silently.
    from lightning_agents.datamodules.prompts import PromptDataModule
    from lightning_agents.modules.rstg import RSTGModule, RSTGSettingError

    # base_0 has 4 user turns, each with calls: it needs 8 model turns, and the default 4 passed the
    # first version of this check (it counted user turns only), while no episode could finish
    rollouts = [r for r in glyphh_rollouts("execution").values() if r.task_id == "multi_turn_base_0"]
    records = [rl_prompt_record(r) for r in rollouts]
    assert len(records[0]["user_turns"]) == 4
    path = tmp_path / "rl_tasks.jsonl"
    path.write_text(json.dumps(records[0]) + "\n")
    module = RSTGModule(model="embedded:student", guidance=False, teacher=None, teacher_cache=str(tmp_path / "c.jsonl"))
    trainer = one_step_trainer(tmp_path)
    with pytest.raises(RSTGSettingError, match=r"record 1 .* needs at least 8 model turns .* model.max_turns is 4"):
        trainer.fit(module, datamodule=PromptDataModule(train=str(path), val=None, batch_size=1))


def test_the_world_runs_a_call_as_the_rewards_replay_does(tmp_path):
    # `_0`-named arguments: the world refused them while the replay ran them positionally, so an
    # episode whose every call had failed in the world scored 1.
    (problem, *_) = records(glyphh_rollouts("execution").values(), tmp_path / "rl_tasks.jsonl")
    world = BFCLWorldTask().environment(problem)
    folder = next(iter(world.instances["GorillaFileSystem"]._current_dir.contents))
    output, is_error = world.execute("cd", {"_0": folder})
    assert not is_error and world.instances["GorillaFileSystem"]._current_dir.name == folder, output
    # a call both refuse says that it costs the episode
    output, is_error = world.execute("cd", {"folder": folder, "_private": 1})
    assert is_error and "scores the episode 0" in output


def test_a_bad_records_file_names_its_line(tmp_path):
    from lightning_agents.tasks._files import TaskDataError

    path = tmp_path / "rl_tasks.jsonl"
    path.write_text('{"id": "x"}\n{not json\n')
    with pytest.raises(TaskDataError, match=rf"^{path}:1: not a BFCL RL record"):
        BFCLWorldTask(str(path)).load("train")
    path.write_text("\n{not json\n")
    with pytest.raises(TaskDataError, match=rf"^{path}:2: invalid JSON"):
        BFCLWorldTask(str(path)).load("train")


def test_calls_past_the_limit_are_not_replayed_by_the_reward(tmp_path):
    # The world ran none of them (max_tool_calls 0), but the replay ran all: the ground truth's
    # calls written blind scored 1.0 on every task.
    problems = records(glyphh_rollouts("execution").values(), tmp_path / "rl_tasks.jsonl")
    task = BFCLWorldTask()
    for plan, problem in zip([ground_truth_plan(p) for p in problems], problems):
        (out,) = run_agent_loop(ScriptedPolicy(plan), [problem], trials=1, task=task, max_turns=60, max_tool_calls=0)
        assert out["reward"] == 0.0, problem["id"]


def test_a_file_system_doubled_by_copies_stops_the_world_and_scores_zero(tmp_path):
    # cp copies a directory shallowly and mv shares its contents: cp(L, M), mv(M, L) doubles the
    # paths under L; 45 such calls took 1.2 GB to hash and a `du` of days in the reward.
    import time

    (problem, *_) = records(glyphh_rollouts("execution").values(), tmp_path / "rl_tasks.jsonl")
    world = BFCLWorldTask().environment(problem)
    world.execute("mkdir", {"dir_name": "L"})
    started, outputs = time.perf_counter(), []
    for k in range(40):
        outputs.append(world.execute("cp", {"source": "L", "destination": f"M{k}"}))
        outputs.append(world.execute("mv", {"source": f"M{k}", "destination": "L"}))
    assert time.perf_counter() - started < 20.0
    assert world.broken and "grew the file system" in " ".join(text for text, _ in outputs)
    assert world.execute("ls", {})[1]  # nothing runs any more
    messages = [*problem["prompt"], {"role": "assistant", "content": "Done."}]
    assert BFCLWorldTask().verify_episode(messages, world, problem) == 0.0


def test_a_refused_call_made_again_after_a_verify_turn_is_scored_where_it_ran(tmp_path):
    # HFlow's verify node renews the call budget: the last turn's calls, refused past the limit, were
    # written again after its user message and run there, and the reward matched them back into the
    # turn where the world had refused them (7 of 7 tasks paid 1.0).
    from lightning_agents.rollout.agent_turn import TOOL_CALL_LIMIT

    task, paid = BFCLWorldTask(), []
    for problem in records(glyphh_rollouts("execution").values(), tmp_path / "rl_tasks.jsonl"):
        plan = ground_truth_plan(problem)
        if len(plan) < 2 or not plan[-1]:
            continue
        world, messages, k = task.environment(problem), [dict(m) for m in task.prompt(problem)], 0
        for turn, replies in enumerate(plan):
            if turn:
                messages += task.next_user_turn(messages, world, problem)
            for name, arguments in (call for reply in replies for call in reply):
                k += 1
                refused = turn == len(plan) - 1
                messages.append({"role": "assistant", "content": "", "tool_calls": [_call(f"c{k}", name, arguments)]})
                result = TOOL_CALL_LIMIT.format(limit=1) if refused else world.execute(name, json.dumps(arguments))[0]
                messages.append({"role": "tool", "tool_call_id": f"c{k}", "content": result})
            messages.append({"role": "assistant", "content": "Done."})
        messages.append({"role": "user", "content": "Check your work and fix anything left undone."})
        for name, arguments in (call for reply in plan[-1] for call in reply):
            k += 1
            messages.append({"role": "assistant", "content": "", "tool_calls": [_call(f"c{k}", name, arguments)]})
            messages.append(
                {"role": "tool", "tool_call_id": f"c{k}", "content": world.execute(name, json.dumps(arguments))[0]}
            )
        messages.append({"role": "assistant", "content": "Done."})
        paid.append(task.verify_episode(messages, world, problem))
    assert paid and paid == [0.0] * len(paid)


def _call(call_id: str, name: str, arguments: dict) -> dict:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


def test_growth_found_in_the_replay_is_a_zero_not_a_verifier_error(tmp_path):
    from lightning_agents.rewards.registry import RewardScorer

    (problem, *_) = records(glyphh_rollouts("execution").values(), tmp_path / "rl_tasks.jsonl")
    calls = [("mkdir", {"dir_name": "L"})] + [
        c
        for k in range(20)
        for c in (("cp", {"source": "L", "destination": f"M{k}"}), ("mv", {"source": f"M{k}", "destination": "L"}))
    ]
    messages = [
        *problem["prompt"],
        {"role": "assistant", "content": "", "tool_calls": [_call(f"c{k}", n, a) for k, (n, a) in enumerate(calls)]},
    ]
    messages += [{"role": "tool", "tool_call_id": f"c{k}", "content": "x"} for k in range(len(calls))]
    messages.append({"role": "assistant", "content": "Done."})
    result = RewardScorer(max_workers=1).score([json.dumps(messages)], [problem["reference"]], [problem["verifier"]])
    assert result.rewards == [0.0] and result.num_errors == 0


def test_a_result_that_reads_like_the_limits_note_cannot_take_a_call_out_of_the_replay(tmp_path):
    # Only the loop writes that note, for calls it never ran: a call the world ran whose result
    # reads like it (a tool's own output) would leave the replay without a call that changed the world.
    from lightning_agents.rollout.agent_turn import TOOL_CALL_LIMIT

    (problem, *_) = records(glyphh_rollouts("execution").values(), tmp_path / "rl_tasks.jsonl")
    task = BFCLWorldTask()
    world = task.environment(problem)
    plan = ground_truth_plan(problem)
    messages, k = [dict(m) for m in task.prompt(problem)], 0
    for turn, replies in enumerate(plan):
        if turn:
            messages += task.next_user_turn(messages, world, problem)
        for name, arguments in (call for reply in replies for call in reply):
            k += 1
            result = world.execute(name, json.dumps(arguments))[0]
            messages.append({"role": "assistant", "content": "", "tool_calls": [_call(f"c{k}", name, arguments)]})
            messages.append({"role": "tool", "tool_call_id": f"c{k}", "content": result})
        messages.append({"role": "assistant", "content": "Done."})
    assert task.verify_episode(messages, world, problem) == 1.0
    forged = [dict(m) for m in messages]
    first = next(i for i, m in enumerate(forged) if m["role"] == "tool")
    forged[first] = {**forged[first], "content": TOOL_CALL_LIMIT.format(limit=8)}
    assert task.verify_episode(forged, world, problem) == 0.0
