import json
import logging
import random
from pathlib import Path

import pytest

from lightning_agents.datamodules.topocurate import TopoCurateDataModule, conversation_windows, curation_cache_key
from lightning_agents.tasks.arithmetic import CALCULATOR_TOOL
from lightning_agents.topology import SelectionConfig


def _trial(task, trial, expression, answer, correct):
    """An embedded-task rollout in the OpenAI format the rollout command writes."""
    call = {
        "id": f"call_{trial}",
        "type": "function",
        "function": {"name": "calculator", "arguments": json.dumps({"expression": expression})},
    }
    said = answer if correct else str(int(answer) + 1)
    return {
        "task_id": task,
        "trial": trial,
        "reward": float(correct),
        "info": {"reference": answer, "verifier": "lightning_agents.rewards.arithmetic.ArithmeticVerifier"},
        "tools": [CALCULATOR_TOOL],
        "traj": [
            {"role": "user", "content": f"What is {expression}?"},
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": call["id"], "name": "calculator", "content": said},
            {"role": "assistant", "content": f"The answer is {said}."},
        ],
    }


@pytest.fixture
def rollout_file(tmp_path):
    records = []
    for t, (a, b) in enumerate([(12, 30), (45, 17), (99, 1), (5, 8)]):
        expression, answer = f"{a} + {b}", str(a + b)
        for k in range(4):
            # task 0 always right, task 3 never, tasks 1 and 2 half the time
            correct = {0: True, 3: False}.get(t, k % 2 == 0)
            records.append(_trial(f"task{t}", k, expression if k < 2 else f"{a}+{b}", answer, correct))
    path = tmp_path / "rollouts.json"
    path.write_text(json.dumps(records))
    return path


def _dm(path, cache, **kwargs):
    return TopoCurateDataModule(
        rollouts=[str(path)], cache_dir=None if cache is None else str(cache), batch_size=4, max_length=256, **kwargs
    )


def test_sft_mode_tokenizes_the_selection(rollout_file, tmp_path):
    dm = _dm(rollout_file, tmp_path / "cache")
    dm.setup("fit")
    selection = dm.curated["selection"]["sft"]
    assert len(dm.datasets["fit"]) == len(selection) > 0
    assert all(task in {"task0", "task1", "task2"} for task, _ in selection)
    batch = next(iter(dm.train_dataloader()))
    assert set(batch) >= {"input_ids", "labels"}
    assert (batch["labels"] != -100).any() and (batch["labels"] == -100).any()
    state = dm.state_dict()
    assert state["topocurate_selection"] == dm.curated["selection"] and state["topocurate_rollouts"] == 16


def test_workers_select_the_same_data(rollout_file, monkeypatch):
    monkeypatch.setattr("lightning_agents.topology.pipeline._MIN_TASKS_PER_WORKER", 1)  # fork even for 4 tasks
    one, two = _dm(rollout_file, None), _dm(rollout_file, None, workers=2)
    one.setup("fit")
    two.setup("fit")
    assert one.curated["selection"] == two.curated["selection"] and one.curated["sft"] == two.curated["sft"]
    with pytest.raises(ValueError, match="workers"):
        _dm(rollout_file, None, workers=-1)


def test_ranks_curate_once_in_prepare_data_and_read_the_cache(rollout_file, tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    node = _dm(rollout_file, cache)
    node.prepare_data()  # what Lightning runs on one process per node
    assert not node.cache_hit and len(list(cache.glob("*.json"))) == 1

    def no_second_curation(self):
        raise AssertionError("a rank curated again instead of reading the cache")

    monkeypatch.setattr(TopoCurateDataModule, "_compute", no_second_curation)
    for _ in range(2):  # every rank's own DataModule
        rank = _dm(rollout_file, cache)
        rank.setup("fit")
        assert rank.cache_hit and rank.curated["selection"] == node.curated["selection"]


def test_the_log_shows_the_selection_next_to_its_baselines(rollout_file, caplog):
    import logging

    with caplog.at_level(logging.INFO, logger="lightning_agents.datamodules.topocurate"):
        _dm(rollout_file, None).curate()
    text = caplog.text
    for name in ("SFT topocurate", "SFT outcome", "SFT random_k", "SFT shortest_k", "SFT pass_rate", "RL  uncertainty"):
        assert name in text, name


def test_rl_mode_yields_prompt_records_without_degenerate_tasks(rollout_file, tmp_path):
    dm = _dm(rollout_file, tmp_path / "cache", mode="rl")
    dm.setup("fit")
    batch = next(iter(dm.train_dataloader()))
    assert isinstance(batch, list) and {r["id"] for r in dm.rl_records()} == {"task1", "task2"}
    record = batch[0]
    assert record["prompt"][-1]["role"] == "user" and record["reference"] in {"75", "62", "100", "13", "42"}
    assert record["verifier"].endswith("ArithmeticVerifier") and 0 < record["pass_rate"] < 1


def test_cache_is_reused_and_keyed_by_content_and_settings(rollout_file, tmp_path):
    cache = tmp_path / "cache"
    first = _dm(rollout_file, cache)
    first.curate()
    assert not first.cache_hit and len(list(cache.glob("*.json"))) == 1
    second = _dm(rollout_file, cache)
    second.curate()
    assert second.cache_hit and second.curated["selection"] == first.curated["selection"]
    other = _dm(rollout_file, cache, selection=SelectionConfig(sft_per_task=1))
    other.curate()
    assert not other.cache_hit and len(list(cache.glob("*.json"))) == 2
    moved = tmp_path / "moved.json"
    moved.write_bytes(rollout_file.read_bytes())
    assert curation_cache_key([str(moved)], first.settings) == curation_cache_key([str(rollout_file)], first.settings)
    assert not list(cache.glob("*.tmp")) and not list(cache.glob(".*"))


def test_selection_is_identical_whatever_the_record_order(rollout_file, tmp_path):
    records = json.loads(rollout_file.read_text())
    random.Random(0).shuffle(records)
    shuffled = tmp_path / "shuffled.json"
    shuffled.write_text(json.dumps(records))
    a = _dm(rollout_file, None).curate()["selection"]
    b = _dm(shuffled, None).curate()["selection"]
    assert a == b


def test_real_tau_bench_rl_mode(shared_data, tmp_path):
    dm = TopoCurateDataModule(
        rollouts=str(shared_data / "tau_bench" / "gpt-4o-airline.json"),
        mode="rl",
        selection={"rl_top_n": 5},
        cache_dir=None,
    )
    dm.setup("fit")
    records = dm.rl_records()
    assert len(records) == 5 and all(0 < r["pass_rate"] < 1 for r in records)
    assert records[0]["prompt"][0]["role"] == "system"
    # The whole task: the user's instruction, the policy, the ground-truth actions and a verifier
    # from the task layer that gives the ground truth full marks.
    from lightning_agents.rewards.registry import resolve_verifier

    for record in records:
        assert record["user_goal"].startswith("You are ") and record["policy"].startswith("# Airline Agent Policy")
        assert "actions" in record["ground_truth"] and record["environment"]["benchmark"] == "tau-bench"
        verifier = resolve_verifier(record["verifier"])
        truth = record["ground_truth"]
        said = [{"role": "assistant", "content": " ".join(map(str, truth["outputs"]))}]
        calls = [
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": str(i),
                        "type": "function",
                        "function": {"name": a["name"], "arguments": json.dumps(a["kwargs"])},
                    }
                ],
            }
            for i, a in enumerate(truth["actions"])
        ]
        assert verifier(json.dumps(calls + said), record["reference"]) == 1.0


def test_long_conversations_split_at_user_turns_keeping_the_policy():
    conversation = [{"role": "system", "content": "P" * 10}]
    for turn in range(4):
        conversation += [{"role": "user", "content": f"u{turn}" * 3}, {"role": "assistant", "content": f"a{turn}" * 3}]

    def length(messages):
        return sum(len(m["content"]) for m in messages)

    # system 10 + each turn 12: the whole is 58; 40 fits the system and two turns. After the
    # first window the trained turns take at most half the budget and the turn before them
    # comes along as context, its assistant message with weight 0 (seen, not trained again).
    windows, dropped = conversation_windows(conversation, length, 40, "split")
    turn = lambda i, context=False: [  # noqa: E731
        conversation[1 + 2 * i],
        {**conversation[2 + 2 * i], "weight": 0} if context else conversation[2 + 2 * i],
    ]
    system = conversation[:1]
    assert dropped == 0
    assert windows == [
        system + turn(0) + turn(1),
        system + turn(1, context=True) + turn(2),
        system + turn(2, context=True) + turn(3),
    ]
    assert all(length(w) <= 40 for w in windows)
    trained = [m for w in windows for m in w if m["role"] == "assistant" and "weight" not in m]
    assert trained == conversation[2::2]  # every assistant turn trained once, in order
    (end,), first = conversation_windows(conversation, length, 40, "keep_end")
    assert end == conversation[:1] + conversation[5:] and first == 2  # the last two turns
    assert conversation_windows(conversation, length, 40, "truncate") == ([conversation], 0)
    # A turn longer than the budget on its own is dropped and counted; the rest still trains.
    long_turn = (
        conversation[:3]
        + [{"role": "user", "content": "x" * 50}, {"role": "assistant", "content": "y"}]
        + conversation[3:]
    )
    windows, dropped = conversation_windows(long_turn, length, 40, "split")
    trained = [m for w in windows for m in w if m["role"] == "assistant" and "weight" not in m]
    assert dropped == 1 and trained == conversation[2::2]


def _tau_windows(tau, count, dropped):
    # The airline policy alone is 4,289 tokens of the embedded tokenizer (longer than the old 512-token
    # default, which dropped every conversation); whole conversations run to 12k.
    split = TopoCurateDataModule(rollouts=tau, cache_dir=None, max_length=6000)
    split.setup("fit")
    truncated = TopoCurateDataModule(rollouts=tau, cache_dir=None, max_length=6000, long_conversations="truncate")
    truncated.setup("fit")
    conversations = split.curated["sft"]
    assert len(conversations) == count and all(c["policy"].startswith("# Airline Agent Policy") for c in conversations)
    labels = lambda rows: sum(sum(1 for x in r["labels"] if x != -100) for r in rows)  # noqa: E731
    # One turn (a long tool result) does not fit beside the policy; tokenizing the empty
    # validation split used to reset the count to 0 after setup.
    assert len(split.datasets["fit"]) > len(conversations)
    assert split.windows_dropped == dropped
    # Truncation keeps the start and cuts the late turns; splitting trains on all of them.
    assert labels(split.datasets["fit"]) > 1.5 * labels(truncated.datasets["fit"])


def test_real_tau_bench_sft_keeps_late_turns(shared_data, tmp_path):
    # Tasks 12 and 13 of the real file (8 trials, 6 successes), to keep the default suite fast.
    records = [
        r
        for r in json.loads((shared_data / "tau_bench" / "gpt-4o-airline.json").read_text())
        if r["task_id"] in (12, 13)
    ]
    path = tmp_path / "tau_12_13.json"
    path.write_text(json.dumps(records))
    _tau_windows(str(path), 4, dropped=1)


@pytest.mark.slow
def test_real_tau_bench_sft_keeps_every_conversation(shared_data):
    # 30 turns (long tool results) do not fit beside the 4,289-token policy in 6,000 tokens
    _tau_windows(str(shared_data / "tau_bench" / "gpt-4o-airline.json"), 59, dropped=30)


def test_nothing_to_train_on_is_a_clear_error(tmp_path):
    path = tmp_path / "all_wrong.json"
    path.write_text(json.dumps([_trial("t", k, "1 + 1", "2", False) for k in range(3)]))
    with pytest.raises(ValueError, match="selected no successful trajectory"):
        _dm(path, None).setup("fit")
    with pytest.raises(ValueError, match="selected no RL task"):
        _dm(path, None, mode="rl").setup("fit")
    with pytest.raises(ValueError, match="mode must be"):
        _dm(path, None, mode="dpo")


def test_bfcl_is_scored_from_its_possible_answers(shared_data):
    bfcl = shared_data / "bfcl"
    result = str(bfcl / "claude_multi_turn_base_result.json")
    with pytest.raises(ValueError, match="possible-answer"):
        TopoCurateDataModule(rollouts=result, cache_dir=None).curate()
    dm = TopoCurateDataModule(
        rollouts=result, cache_dir=None, ground_truth=[str(bfcl / "BFCL_v4_multi_turn_base_possible_answer.json")]
    )
    sft = dm.curate()["sft"]
    assert len(sft) == 2 and all(c["reward"] == 1.0 and len(c["tools"]) >= 18 for c in sft)


def test_a_file_whose_rewards_the_verifier_disputes_is_warned_about_at_curation_and_from_the_cache(tmp_path, caplog):
    # retail task 13: the file credits a ground truth whose PayPal return tau-bench rejected
    retail = Path(__file__).resolve().parents[1] / "data" / "tau_bench_other" / "retail-gpt-4o-records.json"
    for hit in (False, True):
        caplog.clear()
        dm = TopoCurateDataModule(rollouts=[str(retail)], skip_invalid=True, cache_dir=str(tmp_path), max_length=256)
        with caplog.at_level(logging.WARNING, logger="lightning_agents.datamodules.topocurate"):
            dm.curate()
        assert dm.cache_hit == hit
        assert "agrees with the files' rewards on 2 of 3 trials" in caplog.text and "task 13" in caplog.text


def test_a_conversation_the_template_cannot_render_is_skipped_with_its_task_not_a_jinja_traceback(shared_data, caplog):
    # Windowing measured every conversation with apply_chat_template and let the template's own
    # error through (Llama 3.1 refuses parallel calls), even with skip_invalid; ChatDataModule
    # skips such a conversation with the reason, and now TopoCurateDataModule does too.
    from chat_template_helpers import tokenizer_with_template

    from lightning_agents.models import load_tokenizer

    template = (shared_data / "chat_templates" / "llama3_1.jinja").read_text()
    tok = tokenizer_with_template(load_tokenizer("embedded:student"), template, "<|begin_of_text|>", "<|eot_id|>")
    dm = TopoCurateDataModule(
        rollouts=str(shared_data / "tau_bench" / "gpt-4o-airline.json"),
        cache_dir=None,
        skip_invalid=True,
        max_length=64,
    )
    dm._tokenizer = tok
    calls = [
        {"id": f"c{i}", "type": "function", "function": {"name": "get_user_details", "arguments": '{"user_id": "u"}'}}
        for i in range(2)
    ]
    parallel = {
        "task_id": "7",
        "trial": 2,
        "messages": [
            {"role": "system", "content": "Policy " * 40},
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": None, "tool_calls": calls},
            *({"role": "tool", "tool_call_id": c["id"], "name": "get_user_details", "content": "{}"} for c in calls),
            {"role": "assistant", "content": "Done."},
        ],
    }
    with caplog.at_level("WARNING"):
        rows = dm.tokenize([parallel])
    assert len(rows) == 0 and "cannot" in caplog.text


def test_no_rows_names_the_rollouts_and_the_dropped_turns_not_a_train_setting(shared_data, tmp_path):
    # The policy alone is longer than max_length: every turn was dropped, and the error said to
    # "set the `train` source", a setting this module does not have.
    records = [
        r for r in json.loads((shared_data / "tau_bench" / "gpt-4o-airline.json").read_text()) if r["task_id"] == 12
    ]
    path = tmp_path / "gpt-4o-airline-12.json"
    path.write_text(json.dumps(records))
    dm = TopoCurateDataModule(rollouts=str(path), cache_dir=None, max_length=256)
    dm.setup("fit")
    assert dm.windows_dropped > 0
    with pytest.raises(
        ValueError, match=r"`rollouts` source .*gpt-4o-airline.*turn\(s\) did not fit max_length=256"
    ) as err:
        dm.train_dataloader()
    assert "`train`" not in str(err.value)
