"""Session 43: tau-bench trials that raised, and load warnings once per file (and shard).

Real records, copied verbatim:

- ``RAISED``: four records of avaljotsingh/tau-bench
  ``final_results/assertions-agent-none-0.1_range_0-100_6_18_2025.json`` (commit 161f11e33b6577db5926cb2d6d5bc8c977a07f2f,
  records 1, 16, 27 and 42 of 100), written by tau-bench's ``run.py`` for a trial whose ``agent.solve`` raised:
  ``reward`` 0.0, ``traj: []``, the exception in ``info.error`` and ``info.traceback``.
- ``AYA``: the first 12 lines of ShishirPatil/gorilla
  ``berkeley-function-call-leaderboard/result/AYA Pipeline/aya-pipeline_result_multi_turn_base.jsonl``
  (commit a018f4cfc926e6b5124fcfb29d94a87ae28ffa7a): one JSON array of replies per line, no task id.
"""

import json
import logging

from lightning_agents.datamodules.trajectories import load_rollouts

RAISED = [
    '{"task_id": 1, "reward": 0.0, "info": {"error": "1 validation error for EnvResponse\\nobservation\\n  Input should be a valid string [type=string_type, input_value=13.46, input_type=float]\\n    For further information visit https://errors.pydantic.dev/2.10/v/string_type", "traceback": "Traceback (most recent call last):\\n  File \\"C:\\\\Users\\\\t-avalsingh\\\\tau-bench\\\\tau_bench\\\\run.py\\", line 92, in _run\\n    res = agent.solve(\\n        env=isolated_env,\\n        task_index=idx,\\n    )\\n  File \\"C:\\\\Users\\\\t-avalsingh\\\\tau-bench\\\\tau_bench\\\\agents\\\\assertions_agent.py\\", line 543, in solve\\n    done, observation, reward, env_info = self.action_agent.execute_action(action, env)\\n                                          ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~^^^^^^^^^^^^^\\n  File \\"C:\\\\Users\\\\t-avalsingh\\\\tau-bench\\\\tau_bench\\\\agents\\\\assertions_agent.py\\", line 265, in execute_action\\n    env_response = env.step(action)\\n  File \\"C:\\\\Users\\\\t-avalsingh\\\\tau-bench\\\\tau_bench\\\\envs\\\\base.py\\", line 120, in step\\n    return EnvResponse(observation=observation, reward=reward, done=done, info=info)\\n  File \\"C:\\\\Users\\\\t-avalsingh\\\\AppData\\\\Local\\\\miniconda3\\\\Lib\\\\site-packages\\\\pydantic\\\\main.py\\", line 214, in __init__\\n    validated_self = self.__pydantic_validator__.validate_python(data, self_instance=self)\\npydantic_core._pydantic_core.ValidationError: 1 validation error for EnvResponse\\nobservation\\n  Input should be a valid string [type=string_type, input_value=13.46, input_type=float]\\n    For further information visit https://errors.pydantic.dev/2.10/v/string_type\\n"}, "traj": [], "trial": 1, "records": {}}',
    '{"task_id": 16, "reward": 0.0, "info": {"error": "1 validation error for EnvResponse\\nobservation\\n  Input should be a valid string [type=string_type, input_value=8276.23, input_type=float]\\n    For further information visit https://errors.pydantic.dev/2.10/v/string_type", "traceback": "Traceback (most recent call last):\\n  File \\"C:\\\\Users\\\\t-avalsingh\\\\tau-bench\\\\tau_bench\\\\run.py\\", line 92, in _run\\n    res = agent.solve(\\n        env=isolated_env,\\n        task_index=idx,\\n    )\\n  File \\"C:\\\\Users\\\\t-avalsingh\\\\tau-bench\\\\tau_bench\\\\agents\\\\assertions_agent.py\\", line 543, in solve\\n    done, observation, reward, env_info = self.action_agent.execute_action(action, env)\\n                                          ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~^^^^^^^^^^^^^\\n  File \\"C:\\\\Users\\\\t-avalsingh\\\\tau-bench\\\\tau_bench\\\\agents\\\\assertions_agent.py\\", line 265, in execute_action\\n    env_response = env.step(action)\\n  File \\"C:\\\\Users\\\\t-avalsingh\\\\tau-bench\\\\tau_bench\\\\envs\\\\base.py\\", line 116, in step\\n    reward_res = self.calculate_reward()\\n  File \\"C:\\\\Users\\\\t-avalsingh\\\\tau-bench\\\\tau_bench\\\\envs\\\\base.py\\", line 137, in calculate_reward\\n    self.step(action)\\n    ~~~~~~~~~^^^^^^^^\\n  File \\"C:\\\\Users\\\\t-avalsingh\\\\tau-bench\\\\tau_bench\\\\envs\\\\base.py\\", line 120, in step\\n    return EnvResponse(observation=observation, reward=reward, done=done, info=info)\\n  File \\"C:\\\\Users\\\\t-avalsingh\\\\AppData\\\\Local\\\\miniconda3\\\\Lib\\\\site-packages\\\\pydantic\\\\main.py\\", line 214, in __init__\\n    validated_self = self.__pydantic_validator__.validate_python(data, self_instance=self)\\npydantic_core._pydantic_core.ValidationError: 1 validation error for EnvResponse\\nobservation\\n  Input should be a valid string [type=string_type, input_value=8276.23, input_type=float]\\n    For further information visit https://errors.pydantic.dev/2.10/v/string_type\\n"}, "traj": [], "trial": 16, "records": {}}',
    '{"task_id": 27, "reward": 0.0, "info": {"error": "Syntax error while parsing: unterminated string literal (detected at line 1) (<unknown>, line 1)", "traceback": "Traceback (most recent call last):\\n  File \\"C:\\\\Users\\\\t-avalsingh\\\\tau-bench\\\\tau_bench\\\\agents\\\\assertions_agent.py\\", line 127, in extract_function_call_components\\n    tree = ast.parse(rhs, mode=\'eval\')\\n  File \\"C:\\\\Users\\\\t-avalsingh\\\\AppData\\\\Local\\\\miniconda3\\\\Lib\\\\ast.py\\", line 54, in parse\\n    return compile(source, filename, mode, flags,\\n                   _feature_version=feature_version, optimize=optimize)\\n  File \\"<unknown>\\", line 1\\n    transfer_to_human_agents(summary=\'Customer Isabella Johansson requested to return the Garden Hose and Backpack and exchange the Hiking Boots in order #W7181492 for the waterproof version. The returns have been successfully processed, but the exchange for the Hiking Boots cannot proceed due to a conflict with the order\'s \\"return requested\\" status. Escalation to a human agent is needed to resolve this issue and ensure the boots are exchanged for the waterproof version, specifically size 12 in leather.\')\\n                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                            ^\\nSyntaxError: unterminated string literal (detected at line 1)\\n\\nDuring handling of the above exception, another exception occurred:\\n\\nTraceback (most recent call last):\\n  File \\"C:\\\\Users\\\\t-avalsingh\\\\tau-bench\\\\tau_bench\\\\run.py\\", line 92, in _run\\n    res = agent.solve(\\n        env=isolated_env,\\n        task_index=idx,\\n    )\\n  File \\"C:\\\\Users\\\\t-avalsingh\\\\tau-bench\\\\tau_bench\\\\agents\\\\assertions_agent.py\\", line 553, in solve\\n    messages = self.records.get_messages()\\n  File \\"C:\\\\Users\\\\t-avalsingh\\\\tau-bench\\\\tau_bench\\\\agents\\\\assertions_agent.py\\", line 198, in get_messages\\n    func_name, kwargs = extract_function_call_components(self.plan[index])\\n                        ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~^^^^^^^^^^^^^^^^^^\\n  File \\"C:\\\\Users\\\\t-avalsingh\\\\tau-bench\\\\tau_bench\\\\agents\\\\assertions_agent.py\\", line 151, in extract_function_call_components\\n    raise ValueError(f\\"Syntax error while parsing: {e}\\")\\nValueError: Syntax error while parsing: unterminated string literal (detected at line 1) (<unknown>, line 1)\\n"}, "traj": [], "trial": 27, "records": {}}',
    '{"task_id": 42, "reward": 0.0, "info": {"error": "Operation returned an invalid status \'TRAPI: Forbidden (https://aka.ms/trapi/errors)\'", "traceback": "Traceback (most recent call last):\\n  File \\"C:\\\\Users\\\\t-avalsingh\\\\tau-bench\\\\tau_bench\\\\run.py\\", line 92, in _run\\n    res = agent.solve(\\n        env=isolated_env,\\n        task_index=idx,\\n    )\\n  File \\"C:\\\\Users\\\\t-avalsingh\\\\tau-bench\\\\tau_bench\\\\agents\\\\assertions_agent.py\\", line 548, in solve\\n    old_postconditions, new_postconditions = self.postcondition_agent.register_conversation(self.postconditions, self.records)\\n                                             ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^\\n  File \\"C:\\\\Users\\\\t-avalsingh\\\\tau-bench\\\\tau_bench\\\\agents\\\\assertions_agent.py\\", line 432, in register_conversation\\n    new_postconditions = self.generate_new_postcondition(current_postconditions, message1)\\n  File \\"C:\\\\Users\\\\t-avalsingh\\\\tau-bench\\\\tau_bench\\\\agents\\\\assertions_agent.py\\", line 408, in generate_new_postcondition\\n    res = completion(messages=context, tools=self.tools_info)\\n  File \\"C:\\\\Users\\\\t-avalsingh\\\\tau-bench\\\\tau_bench\\\\trapi_infer.py\\", line 106, in completion\\n    res = client.complete(*args, **filtered_kwargs)\\n  File \\"C:\\\\Users\\\\t-avalsingh\\\\AppData\\\\Local\\\\miniconda3\\\\Lib\\\\site-packages\\\\azure\\\\ai\\\\inference\\\\_patch.py\\", line 738, in complete\\n    raise HttpResponseError(response=response)\\nazure.core.exceptions.HttpResponseError: Operation returned an invalid status \'TRAPI: Forbidden (https://aka.ms/trapi/errors)\'\\n"}, "traj": [], "trial": 42, "records": {}}',
]

AYA = [
    "[]",
    "[]",
    "[]",
    '["No relevant function available."]',
    '["No relevant function available."]',
    '["No relevant function available."]',
    "[\"[create_file(name='Annual_Report_2023.docx'), add_statistics(file_name='Annual_Report_2023.docx', statistics={'Company Earning': 2000, 'Company Expenditure': 500, 'Company Name': 'Gorilla'}), read_file(file_name='Annual_Report_2023.docx'), count_words(file_name='Annual_Report_2023.docx'), create_file(name='report_word_count')]\"]",
    "[]",
    "[\"[extract_lines_with_term(file_name='experiment_log.txt', term='Anomaly'), compare_logs(file1='experiment_log.txt', file2='previous_study_log.txt'), post_tweet(username='dr_smith', password='securePass123', body='Diff results summary: Cheers!')]\"]",
    '["No relevant function available."]',
    '["No relevant function available."]',
    "[]",
]

LOGGER = "lightning_agents.datamodules.trajectories"


def _write(tmp_path, name, lines):
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _raised_file(tmp_path):
    path = tmp_path / "assertions-agent-none-0.1_range_0-100_6_18_2025.json"
    path.write_text("[" + ",".join(RAISED) + "]", encoding="utf-8")
    return path


def _warnings(caplog):
    return [r.getMessage() for r in caplog.records if r.name == LOGGER and r.levelno == logging.WARNING]


def test_raised_tau_bench_trials_are_left_out_whatever_raised(tmp_path):
    """tau-bench's run.py writes any exception out of ``agent.solve`` as reward 0.0 and ``traj: []``
    (and its pass^k counts it as a failure, whatever raised). These four real ones raised in the
    fork's own harness: twice ``EnvResponse`` refused the float the fork's ``calculate`` returned
    (once on the agent's call, once while ``calculate_reward`` replayed the ground truth, after the
    agent had finished), once the agent's own call parser, once the model API (`TRAPI: Forbidden`). None has a
    step to keep, and the environment errors are the harness's, not the agent's: left out, listed,
    never a 0 in the task's pass rate."""
    rollouts = load_rollouts(_raised_file(tmp_path))
    assert len(rollouts) == 0
    assert [entry.split(": ", 1)[0].rsplit("[", 1)[1] for entry in rollouts.not_run] == ["0]", "1]", "2]", "3]"]
    errors = [entry.split("info.error: ", 1)[1] for entry in rollouts.not_run]
    assert errors[0] == errors[1] == "1 validation error for EnvResponse"
    assert errors[2].startswith("Syntax error while parsing")
    assert "TRAPI: Forbidden" in errors[3]
    assert "calculate_reward" in json.loads(RAISED[1])["info"]["traceback"]
    assert "calculate_reward" not in json.loads(RAISED[0])["info"]["traceback"]


def test_skipped_records_warn_once_per_file_with_count_and_first(tmp_path, caplog):
    """A file whose records are all invalid gave ten identical ``skipped`` lines (and hid every
    other file's reason behind them); now one warning per file with its count and first line."""
    aya = _write(tmp_path, "aya-pipeline_result_multi_turn_base.jsonl", AYA)
    raised = _raised_file(tmp_path)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        rollouts = load_rollouts([aya, raised], skip_invalid=True)
    assert rollouts.skipped_count == 12 and len(rollouts.not_run) == 4
    messages = _warnings(caplog)
    about_aya = [m for m in messages if str(aya) in m]
    assert len(about_aya) == 1, messages
    assert about_aya[0].startswith(f"{aya}: skipped 12 invalid rollout record(s); first: {aya}:1: cannot tell")
    about_raised = [m for m in messages if m.startswith(str(raised))]
    assert len(about_raised) == 1, messages
    assert "left out 4 trial(s)" in about_raised[0]
    assert f"first: {raised}[0]: info.error: 1 validation error for EnvResponse" in about_raised[0]


def test_warnings_name_the_shard_and_records_without_a_task_count_once(tmp_path, caplog):
    """A sharded load warns once per file for its own shard, and says which shard. Lines with no
    task id belong to no shard and every shard reads them: shard 0 alone counts them, so a merge
    reports 12 skipped as a one-process run does (it reported 24 for two shards)."""
    aya = _write(tmp_path, "aya-pipeline_result_multi_turn_base.jsonl", AYA)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        first = load_rollouts(aya, skip_invalid=True, num_shards=2, shard_index=0)
    messages = [m for m in _warnings(caplog) if str(aya) in m]
    assert len(messages) == 1, messages
    assert messages[0].startswith(f"{aya} (shard 0 of 2): skipped 12 invalid rollout record(s); first: {aya}:1:")
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        second = load_rollouts(aya, skip_invalid=True, num_shards=2, shard_index=1)
    assert (first.skipped_count, second.skipped_count) == (12, 0)
    assert not [m for m in _warnings(caplog) if str(aya) in m]
    assert load_rollouts(aya, skip_invalid=True).skipped_count == 12


def test_sharded_counts_of_real_files_add_up_to_one_process(tmp_path):
    """Three shards of the two real files count what one process counts: the 12 lines with no task
    once (each shard counted them, 36 in all), each raised trial by its task's shard."""
    aya = _write(tmp_path, "aya-pipeline_result_multi_turn_base.jsonl", AYA)
    raised = _raised_file(tmp_path)
    whole = load_rollouts([aya, raised], skip_invalid=True)
    shards = [load_rollouts([aya, raised], skip_invalid=True, num_shards=3, shard_index=i) for i in range(3)]
    assert sum(s.skipped_count for s in shards) == whole.skipped_count == 12
    assert sorted(x for s in shards for x in s.not_run) == sorted(whole.not_run)
