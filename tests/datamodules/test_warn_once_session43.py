"""Per-record warnings come once per file, with the count and the first record (session 43).

As ``curate`` since 923ec4f: ``ChatDataModule`` logged the first 20 skipped records one line each
(every line the first file's reason, hiding the other files'), BFCL ground truth logged one line per
miss_func question naming a function its classes lack, and ``PromptDataModule`` said nothing about
code records that score the raw completion (only ``HeldOutAccuracy`` warned, about its own file).
Inputs: the real GSM8K test set and HumanEval (``../shared/data``), BFCL's miss_func items
(``tests/data/bfcl``, from ShishirPatil/gorilla) and Mistral Nemo's chat template
(``tests/data/chat_templates``; sources in their READMEs).
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

from chat_template_helpers import SPECIAL_WIDE, tokenizer_with_template

from lightning_agents.datamodules.chat import ChatDataModule
from lightning_agents.datamodules.prompts import PromptDataModule
from lightning_agents.datamodules.trajectories import load_ground_truth
from lightning_agents.models import load_tokenizer
from lightning_agents.tasks import HumanEvalTask

DATA = Path(__file__).resolve().parents[1] / "data"
# What HumanEvalTask.prompt_record wrote as the verifier before commit 32ca778 (default settings).
OLD_CODE_VERIFIER = "lightning_agents.rewards.CodeVerifier"


def _warnings(caplog, text: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and text in r.getMessage()]


def test_chat_skipped_records_are_one_warning_per_file_with_the_first(shared_data, tmp_path, caplog):
    # Two real files that hold no conversations: every record of each is skipped.
    gsm8k = str(shared_data / "gsm8k" / "test.jsonl")
    humaneval = str(shared_data / "humaneval" / "HumanEval.jsonl.gz")
    dm = ChatDataModule(train=[gsm8k, humaneval], val=None, skip_invalid=True, cache_dir=None)
    with caplog.at_level(logging.WARNING):
        assert dm.load_conversations("fit") == []
    lines = _warnings(caplog, "skipped")
    assert len(lines) == 2, lines  # HEAD: 20 one-record lines (all GSM8K's) and a total
    assert lines[0].startswith(f"{gsm8k}: skipped 1319 invalid record(s) for fit; first: {gsm8k}:1: ")
    assert lines[1].startswith(f"{humaneval}: skipped 164 invalid record(s) for fit; first: {humaneval}:1: ")
    # every skipped record is still kept, in order
    assert len(dm.skipped["fit"]) == 1319 + 164
    assert dm.skipped["fit"][1319].startswith(f"{humaneval}:1: ")


def test_chat_records_the_template_cannot_label_are_one_warning_per_file(tmp_path, caplog):
    # Mistral Nemo renders a system prompt only in a final user turn: a conversation that ends with
    # the reply and has one cannot be labelled (unrendered_system_prompt="refuse").
    base = load_tokenizer("embedded:student")
    template = (DATA / "chat_templates" / "mistral_nemo_2407.jinja").read_text()
    tok = tokenizer_with_template(base, template, "<s>", "</s>", SPECIAL_WIDE)
    turns = [{"role": "user", "content": "What is 2+2?"}, {"role": "assistant", "content": "4."}]
    with_system = {"messages": [{"role": "system", "content": "Be terse."}, *turns]}
    paths = []
    for name, bad in (("a.jsonl", 25), ("b.jsonl", 2)):
        records = [{"messages": turns}] + [with_system] * bad
        (tmp_path / name).write_text("".join(json.dumps(r) + "\n" for r in records))
        paths.append(str(tmp_path / name))
    dm = ChatDataModule(train=paths, val=None, cache_dir=None, max_length=512, skip_invalid=True)
    dm._tokenizer = tok
    with caplog.at_level(logging.WARNING):
        dm.setup("fit")
    lines = _warnings(caplog, "cannot label")
    assert len(lines) == 2, lines  # HEAD: one total for both files, after 20 lines all a.jsonl's
    assert lines[0].startswith(f"{paths[0]}: skipped 25 conversation(s) that the chat template")
    assert f"(for fit); first: {paths[0]}:2: message 0 (system)" in lines[0]
    assert lines[1].startswith(f"{paths[1]}: skipped 2 conversation(s)") and f"first: {paths[1]}:2: " in lines[1]
    assert len(dm.skipped["fit"]) == 27 and len(dm.datasets["fit"]) == 2


def test_bfcl_missed_functions_not_among_the_tools_are_one_warning_per_file(shared_data, tmp_path, caplog):
    # The real miss_func items, two of them naming a function none of their classes has, as BFCL's
    # composite category does (update_market_status).
    folder = tmp_path / "bfcl"
    shutil.copytree(shared_data / "bfcl" / "multi_turn_func_doc", folder / "multi_turn_func_doc")
    items = [json.loads(line) for line in (DATA / "bfcl" / "BFCL_v4_multi_turn_miss_func.json").open()]
    items[1]["missed_function"]["2"].append("update_market_status")
    items[2]["missed_function"]["4"].append("update_market_status")
    question = folder / "BFCL_v4_multi_turn_miss_func.json"
    question.write_text("".join(json.dumps(item) + "\n" for item in items))
    with caplog.at_level(logging.WARNING):
        truth = load_ground_truth(question)
    lines = _warnings(caplog, "missed_function")
    assert len(lines) == 1, lines  # HEAD: one line per question
    assert lines[0].startswith(f"{question}: 2 question(s) name missed_function entries not among the tools")
    assert lines[0].endswith(f"first: {question}:2: ['update_market_status']")
    # the unknown name is left out; the real one is still held out until its turn
    added = truth["multi_turn_miss_func_1"]["tools_added"][2]
    assert [t["function"]["name"] for t in added] == ["mv"]


def _prompt_file(path: Path, records: list[dict]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return str(path)


def test_prompt_records_scoring_code_raw_are_one_warning_per_file(shared_data, tmp_path, caplog):
    task = HumanEvalTask(path=str(shared_data / "humaneval" / "HumanEval.jsonl.gz"))
    current = [task.prompt_record(p) for p in task.get_problems("test")]
    assert len(current) == 164
    # A file written before 32ca778: the same records, their verifier naming no entry point.
    old = [{**rec, "verifier": OLD_CODE_VERIFIER} for rec in current]
    old_path = _prompt_file(tmp_path / "rl_old.jsonl", old)
    new_path = _prompt_file(tmp_path / "rl_new.jsonl", current)
    with caplog.at_level(logging.WARNING):
        dm = PromptDataModule(train=old_path, val=new_path, val_size=None)
        dm.setup("fit")
    lines = _warnings(caplog, "names no entry_point")
    assert len(lines) == 1, lines  # HEAD: none (HeldOutAccuracy alone warned, about its own path)
    assert lines[0].startswith(f"{old_path}: 164 of 164 record(s) are HumanEval-style code records")
    assert f"first: {old_path}:1 (record HumanEval/0, verifier {OLD_CODE_VERIFIER})" in lines[0]
    assert len(dm.records["train"]) == len(dm.records["val"]) == 164
    # the old name stays importable
    from lightning_agents.callbacks.accuracy import scores_code_raw
    from lightning_agents.tasks.raw_code import scores_code_raw as moved

    assert scores_code_raw is moved and moved(old[0]) and not moved(current[0])
