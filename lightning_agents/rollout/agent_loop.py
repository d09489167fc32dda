"""A multi-turn tool-use agent loop over any task with tools.

The loop runs any model behind :class:`~lightning_agents.rollout.hf_engine.HFGenerationEngine`:
the model answers, every ``<tool_call>`` it emits is executed by the episode's world (a fresh one
from :meth:`~lightning_agents.tasks.Task.environment` per episode) and returned as a tool message,
and the model continues until it answers without a call or runs out of turns. All open
conversations advance together, one batched ``generate`` per turn. The rollouts come out in the
OpenAI/tau-bench format (``{task_id, trial, reward, info, traj}``) that TopoCurate reads; the task
scores each finished episode (:meth:`~lightning_agents.tasks.Task.verify_episode`).
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Sequence

from lightning_agents.rollout.hf_engine import HFGenerationEngine, SamplingConfig
from lightning_agents.rollout.tool_calls import parse_tool_calls
from lightning_agents.tasks import CalculatorTask, CalculatorWorld, Task, ToolWorld, class_path

__all__ = ["CalculatorWorld", "ToolWorld", "run_agent_loop"]


def _chunks(items: Sequence[int], size: int) -> Iterable[Sequence[int]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def run_agent_loop(
    engine: HFGenerationEngine,
    tasks: Sequence[dict[str, Any]],
    trials: int = 4,
    task: Task | None = None,
    sampling: SamplingConfig | None = None,
    max_turns: int = 3,
    batch_size: int = 64,
    progress: Callable[[int], None] | None = None,
) -> list[dict[str, Any]]:
    """Run ``trials`` independent multi-turn episodes per problem and score each.

    Args:
        engine: the model to run.
        tasks: the problems (``id``, ``question``, ``reference`` -- or ``answer`` -- and whatever
            the task's world needs), e.g. ``task.get_problems("train", n=64)``.
        trials: episodes per problem (K).
        task: the task: its prompt, tools, world per episode and episode verifier (default: the
            embedded :class:`~lightning_agents.tasks.CalculatorTask`).
        sampling: sampling settings of every model turn (sample, so trials differ).
        max_turns: model turns per episode; an episode still calling tools after the last turn
            ends unanswered and scores 0.
        batch_size: conversations per ``generate`` call.
        progress: called with the number of model turns generated after each batch.

    Returns:
        Rollouts ``{task_id, trial, reward, info, tools, traj}``; ``traj`` is the OpenAI-format
        conversation, ``info`` holds ``question``, ``reference``, ``verifier``, ``task`` (class
        path), ``turns``, ``finished``, ``tool_errors`` and, for stateful worlds, the final ``state``
        and the ``problem``.
    """
    if trials < 1 or max_turns < 1:
        raise ValueError(f"trials and max_turns must be at least 1, got {trials} and {max_turns}")
    task = task or CalculatorTask()
    sampling = sampling or SamplingConfig()
    episodes = []
    for problem in tasks:
        if "reference" not in problem:
            problem = {**problem, "reference": problem.get("answer")}
        for k in range(trials):
            episodes.append({"problem": problem, "trial": k, "messages": task.prompt(problem), "finished": False,
                             "turns": 0, "errors": 0, "world": task.environment(problem)})
    for turn in range(max_turns):
        active = [i for i, e in enumerate(episodes) if not e["finished"]]
        if not active:
            break
        for chunk in _chunks(active, batch_size):
            out = engine.generate([episodes[i]["messages"] for i in chunk], num_samples=1, sampling=sampling,
                                  tools=task.tools or None)
            for i, text in zip(chunk, out.texts):
                episode = episodes[i]
                episode["turns"] += 1
                content, calls = parse_tool_calls(text, id_prefix=f"call_{turn}")
                if not calls or episode["world"] is None:
                    episode["messages"].append({"role": "assistant", "content": content})
                    episode["finished"] = True
                    continue
                episode["messages"].append({"role": "assistant", "content": content, "tool_calls": calls})
                for call in calls:
                    observation, is_error = episode["world"].execute(call["function"]["name"], call["function"]["arguments"])
                    episode["errors"] += bool(is_error)
                    episode["messages"].append(
                        {"role": "tool", "tool_call_id": call["id"], "name": call["function"]["name"], "content": observation}
                    )
            if progress is not None:
                progress(len(chunk))
    rollouts = []
    verifier = task.verifier_spec()
    for episode in episodes:
        problem, world = episode["problem"], episode["world"]
        reward = float(task.verify_episode(episode["messages"], world, problem)) if episode["finished"] else 0.0
        info = {
            "question": problem["question"],
            "reference": problem["reference"],
            "verifier": verifier,
            "task": class_path(task),
            "turns": episode["turns"],
            "finished": episode["finished"],
            "tool_errors": episode["errors"],
        }
        state = world.state() if world is not None else None
        if state is not None:
            # A stateful world's episode is checked against its problem, so the problem travels
            # with the rollout (TopoCurate's RL records carry it on).
            info["state"] = state
            info["problem"] = problem
        rollouts.append({"task_id": problem["id"], "trial": episode["trial"], "reward": reward, "info": info,
                         "tools": task.tools, "traj": episode["messages"]})
    return rollouts
