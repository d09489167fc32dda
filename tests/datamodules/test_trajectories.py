import copy
import json
import re

import pytest

from lightning_agents.datamodules.conversations import normalize_conversation
from lightning_agents.datamodules.trajectories import RolloutFormatError, detect_format, load_rollouts
from lightning_agents.topology import build_quotient_graph, curate_rollouts


@pytest.fixture(scope="module")
def tau_records(shared_data):
    return json.loads((shared_data / "tau_bench" / "gpt-4o-airline.json").read_text())


@pytest.fixture(scope="module")
def tau2_path(shared_data):
    return shared_data / "tau2_bench" / "retail_example_trajectory.json"


@pytest.fixture(scope="module")
def bfcl_path(shared_data):
    return shared_data / "bfcl" / "claude_multi_turn_base_result.json"


def _write(path, data):
    path.write_text(json.dumps(data))
    return path


def test_openai_format_messages_train_as_is(tau_records, tmp_path):
    path = _write(tmp_path / "few.json", tau_records[:8])
    rollouts = load_rollouts(path, format="openai")
    assert [(r.task_id, r.trial) for r in rollouts] == [(str(x["task_id"]), x["trial"]) for x in tau_records[:8]]
    messages, _ = normalize_conversation({"messages": rollouts[0].messages})
    assert len(messages) == len(tau_records[0]["traj"])
    assert rollouts[0].source == f"{path}[0]"
    assert "actions" in json.loads(rollouts[0].info["reference"])


def test_openai_jsonl_and_missing_trial_numbers(tmp_path):
    lines = [
        {
            "task_id": "x",
            "reward": 1,
            "messages": [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "The answer is 4."}],
        },
        {
            "task_id": "x",
            "reward": 0,
            "messages": [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "The answer is 5."}],
        },
    ]
    path = tmp_path / "r.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    rollouts = load_rollouts([path])
    assert [(r.trial, r.reward) for r in rollouts] == [(0, 1.0), (1, 0.0)]
    assert rollouts[1].source == f"{path}:2"

    # JSON Lines keep each record's text and decode its messages on first access only.
    from lightning_agents.topology.records import EncodedMessages

    assert isinstance(rollouts[1].__dict__["_messages"], EncodedMessages)
    assert rollouts[1].messages == lines[1]["messages"]
    assert rollouts[1].__dict__["_messages"] is rollouts[1].messages  # decoded once, then kept


def test_tau2_single_record(tau2_path):
    (rollout,) = load_rollouts(tau2_path)
    assert (rollout.task_id, rollout.trial, rollout.reward) == ("1", 0, 1.0)
    calls = [s.name for s in rollout.steps if s.kind == "call"]
    assert calls == [
        "find_user_id_by_name_zip",
        "get_order_details",
        "get_product_details",
        "get_product_details",
        "exchange_delivered_order_items",
    ]
    observations = [s for s in rollout.steps if s.kind == "observation"]
    assert [s.name for s in observations] == calls  # named through the tool message's id
    assert not any(s.error for s in observations)
    messages, _ = normalize_conversation({"messages": rollout.messages})
    assert messages[4]["tool_calls"][0]["function"]["arguments"] == {
        "first_name": "Yusuf",
        "last_name": "Rossi",
        "zip": "19122",
    }
    assert "find_user_id_by_name_zip" in rollout.info["reference"]


def test_tau2_results_object_with_tasks_and_simulations(tau2_path, tmp_path):
    single = json.loads(tau2_path.read_text())
    failed = copy.deepcopy(single["simulation_run"])
    failed.update(trial=1, reward_info={"reward": 0.0})
    failed["messages"][5]["error"] = True
    results = {"info": {}, "tasks": [single["task"]], "simulations": [single["simulation_run"], failed]}
    path = _write(tmp_path / "results.json", results)
    rollouts = load_rollouts(path)
    assert [(r.trial, r.reward) for r in rollouts] == [(0, 1.0), (1, 0.0)]
    assert rollouts[1].source == f"{path}:simulations[1]"
    assert [s.error for s in rollouts[1].steps if s.kind == "observation"][0] is True  # the explicit flag wins
    assert rollouts[1].info["reference"] == rollouts[0].info["reference"] != ""
    graph = build_quotient_graph(rollouts)
    # The error on the first call sends trial 1 back to where it called from: a loop edge.
    assert any(attrs["error"] for _, _, attrs in graph.edges(data=True))


def test_tau2_results_policy_becomes_the_system_message(tau2_path, tmp_path):
    # tau2 stores the agent's policy once per results file (info.environment_info.policy), never in
    # the messages: it was dropped, so SFT conversations and RL prompts had no system message.
    from lightning_agents.topology.pipeline import rl_prompt_record, sft_conversation

    single = json.loads(tau2_path.read_text())
    policy = "# Retail agent policy\nAuthenticate the user before any action."
    results = {
        "info": {"environment_info": {"domain_name": "retail", "policy": policy}},
        "tasks": [single["task"]],
        "simulations": [single["simulation_run"]],
    }
    (rollout,) = load_rollouts(_write(tmp_path / "results.json", results))
    assert rollout.messages[0] == {"role": "system", "content": policy}
    assert rollout.messages[1:] == load_rollouts(tau2_path)[0].messages
    assert sft_conversation(rollout)["policy"] == policy
    # The example's reward basis includes NL_ASSERTION (an LLM judge), so RL needs a verifier given.
    assert rl_prompt_record(rollout, verifier="my_project.rewards.Tau2Judge")["policy"] == policy


def test_bfcl_result_file_with_environment_states(bfcl_path):
    rollouts = load_rollouts(bfcl_path)
    assert [r.task_id for r in rollouts] == ["multi_turn_base_0", "multi_turn_base_1"]
    first = rollouts[0]
    assert first.reward is None  # result files carry no score
    lines = bfcl_path.read_text().splitlines()
    record = json.loads(lines[0])
    turns = [e for e in record["inference_log"] if isinstance(e, dict)]
    assert sum(s.state is not None for s in first.steps) == len(turns)
    decoded = [c for turn in record["result"] for step in turn for c in step if isinstance(c, dict)]
    assert [s.name for s in first.steps if s.kind == "call"] == [next(iter(c)) for c in decoded]
    assert first.tools and first.tools[0]["type"] == "function"
    normalize_conversation({"messages": first.messages})


def test_bfcl_states_merge_trials_that_reach_the_same_state(bfcl_path, tmp_path):
    line = bfcl_path.read_text().splitlines()[0]
    record = json.loads(line)
    # Trial 1 runs `pwd` twice in turn 1 and is scored a failure; turn 1 still ends in the same
    # recorded state, so from there both trials share nodes.
    variant = copy.deepcopy(record)
    turn = variant["inference_log"][1]
    turn["step_0"] = copy.deepcopy(turn["step_0"])
    turn["step_0"][1]["content"] = [{"pwd": "{}"}, {"pwd": "{}"}]
    turn["step_0"].append(copy.deepcopy(turn["step_0"][-1]))
    record["valid"], variant["valid"] = True, False
    path = tmp_path / "two.json"
    path.write_text(json.dumps(record) + "\n" + json.dumps(variant) + "\n")
    rollouts = load_rollouts(path)
    assert [(r.trial, r.reward) for r in rollouts] == [(0, 1.0), (1, 0.0)]
    graph = build_quotient_graph(rollouts)
    p0, p1 = graph.graph["trials"][0]["path"], graph.graph["trials"][1]["path"]
    assert p0 != p1 and p0[-1] == p1[-1]
    shared = set(p0) & set(p1)
    assert len(shared) > len(p0) // 2
    assert curate_rollouts(rollouts).sft == [("multi_turn_base_0", 0)]


def test_auto_detection():
    assert detect_format({"traj": []}) == "openai"
    assert detect_format({"simulation_run": {}}) == "tau2"
    assert detect_format({"inference_log": []}) == "bfcl"
    assert detect_format({"foo": 1}) is None and detect_format([1]) is None


@pytest.mark.parametrize(
    "index, breaker, message",
    [
        (3, lambda r: r.update(reward="high"), "field 'reward' must be a number"),
        (5, lambda r: r.pop("task_id"), "field 'task_id' must be a non-empty string"),
        (7, lambda r: r["traj"][1].update(role="robot"), "traj[1].role is 'robot'"),
    ],
)
def test_broken_openai_record_names_file_and_index(tau_records, tmp_path, index, breaker, message):
    records = copy.deepcopy(tau_records[:10])
    breaker(records[index])
    path = _write(tmp_path / "broken.json", records)
    with pytest.raises(RolloutFormatError) as info:
        load_rollouts(path)
    assert str(info.value).startswith(f"{path}[{index}]: ")
    assert message in str(info.value)


def test_broken_tool_arguments_name_the_message(tau_records, tmp_path):
    records = copy.deepcopy(tau_records[:3])
    i = next(i for i, m in enumerate(records[2]["traj"]) if m.get("tool_calls"))
    records[2]["traj"][i]["tool_calls"][0]["function"]["arguments"] = "{not json"
    path = _write(tmp_path / "args.json", records)
    with pytest.raises(
        RolloutFormatError, match=rf"\[2\]: traj\[{i}\]\.tool_calls\[0\]\.function\.arguments is not valid JSON"
    ):
        load_rollouts(path)


def test_broken_tau2_and_bfcl_records(tau2_path, bfcl_path, tmp_path):
    single = json.loads(tau2_path.read_text())
    single["simulation_run"]["messages"][4]["tool_calls"][0]["arguments"] = [1, 2]
    path = _write(tmp_path / "tau2.json", single)
    with pytest.raises(
        RolloutFormatError,
        match=r"tau2\.json: simulation_run\.messages\[4\]\.tool_calls\[0\]\.arguments must be a JSON object",
    ):
        load_rollouts(path)
    lines = bfcl_path.read_text().splitlines()
    broken = json.loads(lines[1])
    broken["inference_log"][1]["step_0"][1]["content"] = 42
    path = tmp_path / "bfcl.json"
    path.write_text(lines[0] + "\n" + json.dumps(broken) + "\n")
    with pytest.raises(
        RolloutFormatError,
        match=r"bfcl\.json:2: inference_log\[1\]\.step_0\[1\]\.content must be a list or text, got int",
    ):
        load_rollouts(path)


def _as_prompt_mode(record):
    """A BFCL FC record as bfcl_eval logs a prompt-mode (non-FC) model: each reply is raw text, its
    calls written as a Python list (``[cd(folder='document')]``), text replies as they were."""

    def text(parts):
        calls = [p for p in parts if isinstance(p, dict)]
        if not calls:
            return parts[0] if parts else ""
        written = []
        for call in calls:
            ((name, args),) = call.items()
            written.append(f"{name}(" + ", ".join(f"{k}={v!r}" for k, v in json.loads(args).items()) + ")")
        return "[" + ", ".join(written) + "]"

    record = copy.deepcopy(record)
    for entry in record["inference_log"]:
        for key, items in entry.items() if isinstance(entry, dict) else []:
            for item in items if key.startswith("step_") else []:
                if item["role"] == "assistant":
                    item["content"] = text(item["content"])
    record["result"] = [[text(step) for step in turn] for turn in record["result"]]
    return record


def test_bfcl_prompt_mode_results_read_the_calls_written_as_python(bfcl_path, shared_data, tmp_path):
    # Prompt-mode models (every "-prompt" entry of the leaderboard) log their replies as text: the
    # reader refused them (content must be a list), and a result-only file was read with no calls
    # and scored 0 against the possible answer, silently.
    folder = shared_data / "bfcl"
    truth = [folder / "BFCL_v4_multi_turn_base.json", folder / "BFCL_v4_multi_turn_base_possible_answer.json"]
    fc = json.loads(bfcl_path.read_text().splitlines()[0])
    prompt = _as_prompt_mode(fc)
    assert isinstance(prompt["result"][0][0], str) and prompt["result"][0][0].startswith("[pwd(")
    with_log = _write(tmp_path / "prompt.json", prompt)
    result_only = _write(tmp_path / "prompt_result.json", {k: v for k, v in prompt.items() if k != "inference_log"})
    (expected,) = load_rollouts(_write(tmp_path / "fc.json", fc), ground_truth=truth)
    calls = [(s.name, s.arguments) for s in expected.steps if s.kind == "call"]
    for path in (with_log, result_only):
        (rollout,) = load_rollouts(path, ground_truth=truth)
        assert [(s.name, s.arguments) for s in rollout.steps if s.kind == "call"] == calls
        assert rollout.reward == expected.reward == 1.0
    # without the question file the positional arguments of the answer cannot be named: said, not scored 0
    with pytest.raises(RolloutFormatError, match="positional arguments, which cannot be named"):
        load_rollouts(result_only, ground_truth=truth[1:])


def test_skip_invalid_counts_what_it_skipped(tau_records, tmp_path):
    records = copy.deepcopy(tau_records[:6])
    records[1]["reward"] = "x"
    records[4]["traj"] = []
    path = _write(tmp_path / "some_bad.json", records)
    rollouts = load_rollouts(path, skip_invalid=True)
    assert len(rollouts) == 4 and rollouts.skipped_count == 2
    assert rollouts.skipped[0].startswith(f"{path}[1]:") and rollouts.skipped[1].startswith(f"{path}[4]:")
    jsonl = tmp_path / "bad_line.jsonl"
    jsonl.write_text(json.dumps(records[0]) + "\n{oops\n")
    with pytest.raises(RolloutFormatError, match=r"bad_line\.jsonl:2: invalid JSON"):
        load_rollouts(jsonl)
    assert load_rollouts(jsonl, skip_invalid=True).skipped_count == 1


def test_unknown_format_and_missing_file(tmp_path):
    path = _write(tmp_path / "other.json", [{"foo": 1}])
    with pytest.raises(RolloutFormatError, match=r"other\.json\[0\]: cannot tell the rollout format"):
        load_rollouts(path)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_rollouts(tmp_path / "missing.json")
    with pytest.raises(ValueError, match="unknown rollout format"):
        load_rollouts(path, format="csv")


def test_json_lists_stream_element_by_element(shared_data, tmp_path, monkeypatch):
    import lightning_agents.datamodules.trajectories as trajectories

    path = shared_data / "tau_bench" / "gpt-4o-airline.json"
    whole = load_rollouts(path)
    # 4 KiB chunks: every record crosses several refills; the file is never read whole.
    monkeypatch.setattr(trajectories, "_CHUNK", 4096)
    monkeypatch.setattr(type(path), "read_text", lambda *a, **k: pytest.fail("a JSON list was read whole"))
    streamed = load_rollouts(path)
    assert [(r.task_id, r.trial, r.reward, r.messages) for r in streamed] == [
        (r.task_id, r.trial, r.reward, r.messages) for r in whole
    ]
    monkeypatch.undo()
    broken = tmp_path / "broken.json"
    broken.write_text(
        '[{"task_id": 1, "reward": 1, "traj": [{"role": "user", "content": "x"}]},\n {"task_id": 2,\n "reward": '
    )
    with pytest.raises(RolloutFormatError, match=r"broken\.json:3: invalid JSON .* in element 1"):
        load_rollouts(broken)


def test_bfcl_scored_from_possible_answers_with_turn_keyed_states(shared_data, bfcl_path):
    import networkx as nx

    from lightning_agents.topology import analyze_task

    answers = shared_data / "bfcl" / "BFCL_v4_multi_turn_base_possible_answer.json"
    rollouts = load_rollouts(bfcl_path, ground_truth=[answers, shared_data / "bfcl" / "BFCL_v4_multi_turn_base.json"])
    for rollout in rollouts:
        assert rollout.reward == 1.0 and rollout.info["reward_source"] == "possible_answer"
        assert rollout.info["verifier"].endswith("BFCLActionVerifier") and len(rollout.info["user_turns"]) == 4
        graph = build_quotient_graph([rollout])
        (trial,) = analyze_task(graph)[1]
        # A perfect single trial: no spurious cycle from an unchanged state, efficiency 1.0.
        assert nx.is_directed_acyclic_graph(graph) and trial.efficiency == 1.0 and trial.loops == 0
    # A changed ground truth (another folder in turn 1) fails the trial.
    record = json.loads(answers.read_text().splitlines()[0])
    assert record["id"] == "multi_turn_base_0"


def test_bfcl_without_inference_log_falls_back_to_result(shared_data, bfcl_path, tmp_path):
    records = [json.loads(line) for line in bfcl_path.read_text().splitlines()]
    for record in records:
        del record["inference_log"]
    path = tmp_path / "result_only.json"
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    bfcl = shared_data / "bfcl"
    rollouts = load_rollouts(
        path,
        ground_truth=[bfcl / "BFCL_v4_multi_turn_base_possible_answer.json", bfcl / "BFCL_v4_multi_turn_base.json"],
    )
    assert [r.reward for r in rollouts] == [1.0, 1.0]
    first = rollouts[0]
    assert [s.name for s in first.steps if s.kind == "call"][:3] == ["pwd", "ls", "cd"]
    assert sum(m["role"] == "user" for m in first.messages) == 4  # the question file's turns
    assert first.tools and {t["function"]["name"] for t in first.tools} >= {
        "cd",
        "mkdir",
        "mv",
    }  # from multi_turn_func_doc
    assert load_rollouts(path)[0].reward is None


def test_run_files_of_one_benchmark_pool_with_renumbered_trials(tau2_path, tmp_path, caplog):
    data = json.loads(tau2_path.read_text())
    first, second = _write(tmp_path / "run1.json", data), _write(tmp_path / "run2.json", data)
    with pytest.raises(RolloutFormatError, match="given twice"):
        load_rollouts([first, first])  # the same file twice is a mistake, not a pool
    with caplog.at_level("WARNING"):
        pooled = load_rollouts([first, second])
    # a copy under another name may be a mistake too (its trials count twice): said, not refused
    assert "same content" in caplog.text and "run2.json" in caplog.text
    assert [r.trial for r in pooled] == [data["simulation_run"]["trial"], data["simulation_run"]["trial"] + 1]
    assert pooled.renumbered == 1 and pooled[1].info["source_trial"] == data["simulation_run"]["trial"]
    assert curate_rollouts(pooled).analyses[0].task.trials == 2


def test_tau_bench_records_keep_the_whole_task_and_a_tools_file_attaches(shared_data, tmp_path, tau_records):
    tools = [
        {
            "type": "function",
            "function": {
                "name": "get_user_details",
                "description": "",
                "parameters": {"type": "object", "properties": {}},
            },
        }
    ]
    path = _write(tmp_path / "tools.json", tools)
    rollouts = load_rollouts(shared_data / "tau_bench" / "gpt-4o-airline.json", tools=path)
    first = rollouts[0]
    assert first.tools == tools and first.info["instruction"] == tau_records[0]["info"]["task"]["instruction"]
    assert first.info["ground_truth"]["actions"] == tau_records[0]["info"]["task"]["actions"]
    assert first.info["verifier"] == "lightning_agents.tasks.tau_actions.TauActionVerifier"
    with pytest.raises(RolloutFormatError, match="list of OpenAI tool schemas"):
        load_rollouts(shared_data / "tau_bench" / "gpt-4o-airline.json", tools=_write(tmp_path / "bad.json", {"x": 1}))


def test_shards_partition_the_tasks(shared_data):
    path = shared_data / "tau_bench" / "gpt-4o-airline.json"
    shards = [load_rollouts(path, num_shards=4, shard_index=i) for i in range(4)]
    ids = [{r.task_id for r in shard} for shard in shards]
    assert sum(len(s) for s in shards) == 200 and set().union(*ids) == {str(i) for i in range(50)}
    assert all(not (a & b) for i, a in enumerate(ids) for b in ids[i + 1 :])
    with pytest.raises(ValueError, match="shard_index"):
        load_rollouts(path, num_shards=4, shard_index=4)


def test_degenerate_tool_text_in_a_real_file_is_skipped_not_raised(tau_records, tmp_path):
    """A 5,000-digit number in a call's arguments or an observation nested past the recursion limit
    raise ValueError / RecursionError from json, not JSONDecodeError: skip_invalid skips the record."""
    records = copy.deepcopy(tau_records[:6])
    calls = [m for m in records[2]["traj"] if m.get("tool_calls")]
    calls[0]["tool_calls"][0]["function"]["arguments"] = '{"x": ' + "1" * 5000 + "}"
    tools = [m for m in records[3]["traj"] if m.get("role") == "tool"]
    tools[0]["content"] = '{"error": ' + "[" * 3000
    path = _write(tmp_path / "degenerate.json", records)
    rollouts = load_rollouts(path, skip_invalid=True)
    assert rollouts.skipped_count >= 1 and rollouts.skipped[0].startswith(f"{path}[2]:")
    assert "is not valid JSON (Exceeds the limit" in rollouts.skipped[0]
    assert len(rollouts) + rollouts.skipped_count == 6


def test_a_json_list_cut_short_keeps_the_records_before_the_cut(tau_records, tmp_path):
    # A run killed while writing its list: with skip_invalid the complete records were lost too
    # (the reader raised out of the loop), and the message read "starting at in element 95".
    lines = [json.dumps(r) for r in tau_records[:12]]
    text = "[\n" + ",\n".join(lines) + "\n]"
    path = tmp_path / "cut.json"
    inside = text.index(lines[7]) + lines[7].index('"content": "') + 20
    path.write_text(text[:inside])  # inside a string of record 7
    rollouts = load_rollouts(path, skip_invalid=True)
    assert len(rollouts) == 7
    (skipped,) = rollouts.skipped
    assert re.fullmatch(
        rf"{re.escape(str(path))}:9: invalid JSON \(Unterminated string starting at column \d+, in element 7\)", skipped
    ), skipped
    with pytest.raises(RolloutFormatError, match="Unterminated string starting at column"):
        load_rollouts(path)
