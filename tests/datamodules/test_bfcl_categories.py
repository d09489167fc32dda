"""BFCL multi-turn categories beyond base, on real BFCL items: miss_func's held-out functions,
optional arguments written at their defaults, BFCL's type names, and the inputs that are not rollouts.

Result files are written the way bfcl_eval writes them (``{id, result}``, ``result[turn][step]`` a
list of ``{name: JSON arguments}`` or a text reply), from the real possible answers.
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest

from lightning_agents.datamodules.trajectories import RolloutFormatError, load_ground_truth, load_rollouts
from lightning_agents.tasks.tau_actions import ActionReferenceError, BFCLActionVerifier, parse_call_string
from lightning_agents.topology.pipeline import rl_prompt_record, sft_conversation

DATA = Path(__file__).resolve().parents[1] / "data" / "bfcl"


@pytest.fixture
def miss_func(shared_data, tmp_path):
    """The first three real miss_func items, next to the shared tool docs (as in BFCL's data folder)."""
    folder = tmp_path / "bfcl"
    shutil.copytree(shared_data / "bfcl" / "multi_turn_func_doc", folder / "multi_turn_func_doc")
    question = shutil.copy(DATA / "BFCL_v4_multi_turn_miss_func.json", folder)
    answer = shutil.copy(DATA / "BFCL_v4_multi_turn_miss_func_possible_answer.json", folder)
    return [Path(question), Path(answer)]


def _result_line(task_id: str, ground_truth: list[list[str]], order: dict, edit=None) -> dict:
    """A bfcl_eval FC result record that makes exactly the possible answer's calls (one step per call)."""
    turns = []
    for t, turn in enumerate(ground_truth):
        steps = []
        for call in turn:
            name, arguments = parse_call_string(call, order)
            if edit is not None:
                name, arguments = edit(t, name, arguments)
            steps.append([{name: json.dumps(arguments)}])
        steps.append("I cannot do that with the functions I have." if not turn else "Done.")
        turns.append(steps)
    return {"id": task_id, "result": turns}


def _write(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def _order(truth: dict) -> dict:
    tools = [*truth["tools"], *(t for added in truth["tools_added"].values() for t in added)]
    return {t["function"]["name"]: list(t["function"]["parameters"]["properties"]) for t in tools}


def test_miss_func_offers_a_held_out_function_from_its_turn_on(miss_func, tmp_path):
    truth = load_ground_truth(miss_func)
    records = [_result_line(task_id, entry["ground_truth"], _order(entry)) for task_id, entry in truth.items()]
    rollouts = load_rollouts(_write(tmp_path / "result.json", records), ground_truth=miss_func)
    assert [r.reward for r in rollouts] == [1.0, 1.0, 1.0]
    first = rollouts[0]  # missed_function {"3": ["sort"]}
    assert "sort" not in {t["function"]["name"] for t in first.tools}
    assert [t["function"]["name"] for t in first.info["tools_added"]["3"]] == ["sort"]
    # BFCL leaves the arrival turn's question empty and says this instead; the schema goes with it,
    # since a chat template renders one tool list for the whole conversation.
    arrival = first.info["user_turns"][3][0]["content"]
    assert arrival.startswith("I have updated some more functions") and '"name": "sort"' in arrival
    users = [m["content"] for m in first.messages if m["role"] == "user"]
    assert users[3] == arrival and len(users) == 5

    # The records carry it; the RL verifier counts the arrival message as the turn it is.
    sft = sft_conversation(first)
    rl = rl_prompt_record(first)
    assert sft["tools_added"] == rl["tools_added"] == first.info["tools_added"]
    assert BFCLActionVerifier()(json.dumps(first.messages), rl["reference"]) == 1.0
    # Using the held-out function before it arrives is what the possible answer rules out.
    early = dict(records[0])
    early["result"] = [*records[0]["result"][:2], [[{"sort": json.dumps({"file_name": "final_report.pdf"})}]]]
    early["result"] += records[0]["result"][3:]
    early["result"][3] = ["Done."]
    [rollout] = load_rollouts(_write(tmp_path / "early.json", [early]), ground_truth=miss_func)
    assert rollout.reward == 0.0


def test_miss_func_inference_log_names_positional_arguments_of_a_held_out_function(miss_func, tmp_path):
    """bfcl_eval's ``--include-input-log`` records: the tools offered at each step, the held-out one
    from its turn on. Its possible answer calls it positionally (``sort('final_report.pdf')``)."""
    truth = load_ground_truth(miss_func)["multi_turn_miss_func_0"]
    order = _order(truth)
    first = [t["function"] for t in truth["tools"]]
    log = []
    for t, turn in enumerate(truth["question"]):
        offered = first + ([t2["function"] for t2 in truth["tools_added"][3]] if t >= 3 else [])
        query = turn or [{"role": "user", "content": "I have updated some more functions you can choose from."}]
        entry = {"begin_of_turn_query": query}
        for k, call in enumerate(truth["ground_truth"][t]):
            name, arguments = parse_call_string(call, order)
            entry[f"step_{k}"] = [
                {"role": "inference_input", "content": {"message": "...", "tools": offered}},
                {"role": "assistant", "content": [{name: json.dumps(arguments)}]},
                {"role": "tool", "content": "{}"},
            ]
        log.append(entry)
    record = {"id": "multi_turn_miss_func_0", "result": [], "inference_log": log}
    [rollout] = load_rollouts(_write(tmp_path / "log.json", [record]), ground_truth=miss_func)
    assert rollout.reward == 1.0
    assert "sort" not in {t["function"]["name"] for t in rollout.tools}
    arrival = [m["content"] for m in rollout.messages if m["role"] == "user"][3]
    assert '"name": "sort"' in arrival
    # Without the question file the log alone shows when the function arrived.
    [alone] = load_rollouts(_write(tmp_path / "log2.json", [record]))
    assert [t["function"]["name"] for t in alone.info["tools_added"]["3"]] == ["sort"]


def test_optional_argument_written_at_its_default_is_the_same_call(shared_data, tmp_path):
    """multi_turn_base_5's answer posts a tweet without ``mentions`` (documented default ``[]``);
    BFCL executes both forms the same and accepts both."""
    folder = shared_data / "bfcl"
    files = [folder / "BFCL_v4_multi_turn_base.json", folder / "BFCL_v4_multi_turn_base_possible_answer.json"]
    entry = load_ground_truth(files)["multi_turn_base_5"]
    order = {t["function"]["name"]: list(t["function"]["parameters"]["properties"]) for t in entry["tools"]}

    def mentions(value):
        def edit(turn, name, arguments):
            return name, ({**arguments, "mentions": value} if name == "post_tweet" else arguments)

        return edit

    records = [
        _result_line("multi_turn_base_5", entry["ground_truth"], order),
        _result_line("multi_turn_base_5", entry["ground_truth"], order, mentions([])),
        _result_line("multi_turn_base_5", entry["ground_truth"], order, mentions(["@alex"])),
    ]
    rollouts = load_rollouts(_write(tmp_path / "result.json", records), ground_truth=files)
    assert [r.reward for r in rollouts] == [1.0, 1.0, 0.0]
    assert json.loads(rollouts[0].info["reference"])["parameter_defaults"]["post_tweet"]["mentions"] == []


def test_tool_schemas_use_json_schema_types(shared_data):
    """BFCL's docs say ``dict`` and ``float``; OpenAI-style tool APIs reject those type names."""
    folder = shared_data / "bfcl"
    truth = load_ground_truth([folder / "BFCL_v4_multi_turn_base.json"])
    types = set()

    def walk(node):
        if isinstance(node, dict):
            if isinstance(node.get("type"), str):
                types.add(node["type"])
            for key, value in node.items():
                walk(value) if key != "properties" else [walk(v) for v in value.values()]
        elif isinstance(node, list):
            for value in node:
                walk(value)

    for entry in truth.values():
        walk([t["function"]["parameters"] for t in entry["tools"]])
    assert types <= {"object", "string", "integer", "number", "boolean", "array"}, types
    assert {"object", "number"} <= types


def test_environment_names_the_category(miss_func, tmp_path):
    truth = load_ground_truth(miss_func)
    entry = truth["multi_turn_miss_func_1"]
    path = _write(tmp_path / "r.json", [_result_line("multi_turn_miss_func_1", entry["ground_truth"], _order(entry))])
    [rollout] = load_rollouts(path, ground_truth=miss_func)
    assert rollout.info["environment"]["category"] == "multi_turn_miss_func"


def test_single_turn_results_and_answer_strings_are_refused_with_the_reason(shared_data, tmp_path):
    fc = _write(tmp_path / "simple_fc.json", [{"id": "simple_python_0", "result": [{"calc": '{"x": 1}'}]}])
    with pytest.raises(RolloutFormatError, match=r"simple_fc\.json\S*: .*single-turn results .* are not read"):
        load_rollouts(fc)
    prompt = _write(tmp_path / "simple_prompt.json", [{"id": "simple_python_0", "result": "[calc(x=1)]"}])
    with pytest.raises(RolloutFormatError, match=r"simple_prompt\.json\S*: cannot tell .*single-turn results"):
        load_rollouts(prompt)
    with pytest.raises(ActionReferenceError, match="memory and web_search answers are answer strings"):
        BFCLActionVerifier().score_turns([[]], {"ground_truth": ["Michael"]})


def test_records_without_ground_truth_are_named(shared_data, tmp_path, caplog):
    folder = shared_data / "bfcl"
    files = [folder / "BFCL_v4_multi_turn_base.json", folder / "BFCL_v4_multi_turn_base_possible_answer.json"]
    path = _write(tmp_path / "other.json", [{"id": "multi_turn_miss_func_0", "result": [["Done."]]}])
    with caplog.at_level(logging.WARNING, logger="lightning_agents.datamodules.trajectories"):
        [rollout] = load_rollouts(path, ground_truth=files)
    assert rollout.reward is None
    assert "other.json: 1 records have no entry in the ground-truth files (e.g. multi_turn_miss_func_0)" in caplog.text
