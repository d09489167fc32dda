"""The Task interface, the registry, the one code extractor and the file-backed tasks on real data."""

from __future__ import annotations

import sys
import textwrap

import pytest

from lightning_agents.errors import LightningAgentsError
from lightning_agents.rewards import CodeVerifier, GSM8KVerifier, resolve_verifier
from lightning_agents.tasks import (
    ArithmeticTask,
    CalculatorTask,
    GSM8KTask,
    HumanEvalTask,
    Task,
    TaskSpecError,
    build_task,
    extract_code,
    extract_program,
    load_task,
)
from lightning_agents.tasks.answers import extract_stated_answer, last_number


def test_one_code_extractor_joins_blocks_and_takes_a_truncated_fence():
    two = "Here:\n```python\ndef f():\n    return 1\n```\nand a check\n```py\nassert f() == 1\n```"
    assert extract_code(two) == "def f():\n    return 1\n\nassert f() == 1\n"
    assert extract_code("```python\nprint(3)") == "print(3)"
    assert extract_code("no fence at all") is None and extract_code("```python\n```") is None
    # The program runner falls back to the whole text only when there is no fence at all.
    assert extract_program("print(1)") == "print(1)" and extract_program("```python\n```") == ""
    # Another language's block is no Python: nothing to run, and its closer opens nothing.
    assert extract_code("```bash\nls\n```") is None and extract_program("```bash\nls\n```") == ""
    assert extract_code("```bash\nls\n```\nThen:\n```Python\nx = 1\n```") == "x = 1\n"


def test_rewards_code_and_hflow_use_the_same_extractor():
    import lightning_agents.hflow.operators as operators
    import lightning_agents.rewards.code as code

    assert code.extract_program is extract_program
    assert operators.extract_code is extract_code


@pytest.mark.parametrize(
    ("text", "answer"),
    [
        ("The answer is 1,234.", "1234"),
        ("so the answer is -12.", "-12"),
        ("The answer is 2.50", "2.5"),
        ("nothing", None),
    ],
)
def test_stated_answer(text, answer):
    assert extract_stated_answer(text) == answer


def test_last_number_of_program_output():
    assert last_number("x = 3\n42.0\n") == "42" and last_number("") is None


def test_registry_short_names_class_paths_and_mappings(shared_data):
    arith = load_task("embedded:arithmetic/test", n=3)
    assert isinstance(arith, ArithmeticTask) and arith.split_name == "test" and len(arith.problems) == 3
    same = load_task({"class_path": "lightning_agents.tasks.ArithmeticTask", "init_args": {"split": "test", "n": 3}})
    assert same.problems == arith.problems
    assert isinstance(load_task("embedded:calculator"), CalculatorTask)
    gsm = build_task("gsm8k", str(shared_data / "gsm8k" / "test.jsonl"), n=4, seed=1)
    assert isinstance(gsm, GSM8KTask) and len(gsm.problems) == 4
    with pytest.raises(TaskSpecError, match="needs a data path"):
        load_task("gsm8k")
    with pytest.raises(TaskSpecError, match="cannot import"):
        load_task("no_such_pkg.Task")
    with pytest.raises(TaskSpecError, match="not a subclass"):
        load_task("lightning_agents.rewards.GSM8KVerifier")
    assert issubclass(TaskSpecError, LightningAgentsError) and issubclass(TaskSpecError, ValueError)


def test_gsm8k_task_scores_every_gold_solution(shared_data):
    task = GSM8KTask(str(shared_data / "gsm8k" / "test.jsonl"))
    problems = task.problems
    assert len(problems) == 1319
    assert all(task.verify(p["solution"], p) == 1.0 for p in problems)
    assert task.verify("The answer is 0.", problems[0]) == 0.0 or problems[0]["reference"] == "0"
    record = task.prompt_record(problems[0])
    assert isinstance(resolve_verifier(record["verifier"]), GSM8KVerifier)
    assert "####" in record["prompt"][-1]["content"]
    assert task.extract_answer("... #### 1,000") == "1000"


def test_humaneval_task_reference_examples_and_scoring(shared_data):
    task = HumanEvalTask(str(shared_data / "humaneval" / "HumanEval.jsonl.gz"))
    assert len(task.problems) == 164
    first = next(p for p in task.problems if p["id"] == "HumanEval/0")
    assert first["reference"].endswith("check(has_close_elements)\n")
    assert "_hflow_close(_hflow_got, False), 'has_close_elements([1.0, 2.0, 3.0], 0.5)'" in task.example_tests(first)
    record = task.prompt_record(first)
    assert isinstance(resolve_verifier(record["verifier"]), CodeVerifier)
    solution = first["prompt_text"] + first["canonical_solution"]
    assert task.verify(f"```python\n{solution}\n```", first) == 1.0
    # A body alone gets the stub prepended; a wrong body fails the hidden tests.
    assert task.verify(f"```python\n{first['canonical_solution']}\n```", first) == 1.0
    assert task.verify("```python\ndef has_close_elements(numbers, threshold):\n    return False\n```", first) == 0.0


def test_arithmetic_task_program_style_runs_the_program():
    task = ArithmeticTask("val", n=2, style="program")
    problem = task.problems[0]
    assert task.prompt(problem)[0]["role"] == "system"
    assert task.verify(f"```python\nprint({problem['expression']})\n```", problem) == 1.0
    assert task.verify("```python\nprint(-1)\n```", problem) == 0.0
    assert task.verifier_spec().endswith("ProgramOutputVerifier")


USER_TASK = '''
from lightning_agents.tasks import Task

class ReverseTask(Task):
    """Reverse a word; answered as `The answer is <word>`."""

    default_name = "reverse"

    def load(self, split):
        words = {"train": ["cat", "dog"], "val": ["owl", "emu"], "test": ["yak"]}[split]
        return [{"id": f"{split}-{w}", "question": f"Reverse {w}.", "reference": w[::-1]} for w in words]

    def check(self, completion, reference):
        return float(completion.strip().endswith(f"The answer is {reference}."))
'''


@pytest.fixture()
def user_task_module(tmp_path, monkeypatch):
    (tmp_path / "my_tasks.py").write_text(textwrap.dedent(USER_TASK))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "my_tasks.ReverseTask"
    sys.modules.pop("my_tasks", None)


def test_a_user_task_plugs_in_by_class_path(user_task_module):
    task = load_task(user_task_module, split="val")
    assert isinstance(task, Task) and [p["reference"] for p in task.problems] == ["lwo", "ume"]
    record = task.prompt_record(task.problems[0])
    # The record names the task class as its verifier; the reward machinery builds and calls it.
    assert record["verifier"] == "my_tasks.ReverseTask" and record["task"] == "my_tasks.ReverseTask"
    verifier = resolve_verifier(record["verifier"])
    assert verifier("The answer is lwo.", record["reference"]) == 1.0
    assert verifier("The answer is owl.", record["reference"]) == 0.0


def test_reasoning_blocks_are_not_answers_on_real_items(shared_data):
    """A reasoning model served without a reasoning parser returns ``<think>...</think>`` in the
    content. Its drafts must not be read as the answer, and a thought cut off at the token limit
    has no answer."""
    gsm = GSM8KTask(str(shared_data / "gsm8k" / "test.jsonl"))
    p = gsm.problems[0]
    gold = p["reference"]
    wrong = str(int(gold) + 1)
    draft = f"<think>\nFirst try: ... #### {wrong}\nNo, I mis-added; redo it.\n</think>\n\n"
    assert gsm.verify(draft + f"The answer is {gold}.", p) == 1.0
    # the template opened the block in the prompt: only the closing tag is in the completion
    assert gsm.verify(draft.removeprefix("<think>") + f"The answer is {gold}.", p) == 1.0
    assert gsm.verify(f"<think>\nSo the answer is {gold}, let me double-check", p) == 0.0
    assert gsm.verify(f"#### {gold}", p) == 1.0  # no block: unchanged

    code = HumanEvalTask(str(shared_data / "humaneval" / "HumanEval.jsonl.gz"))
    first = next(q for q in code.problems if q["id"] == "HumanEval/0")
    solution = first["prompt_text"] + first["canonical_solution"]
    drafted = (
        "<think>\nA first version:\n```python\ndef has_close_elements(numbers, threshold):\n"
        "    return undefined_name\n\nhas_close_elements([1.0], 0.5)\n```\nThat crashes; fix it.\n</think>\n"
        f"```python\n{solution}\n```"
    )
    assert code.verify(drafted, first) == 1.0
    assert extract_program("<think>\nprint(1)") == ""


@pytest.mark.parametrize(
    ("text", "answer"),
    [
        ("Janet makes 9 * 2 = 18 dollars.\n\nThe final answer is $\\boxed{18}$.", "18"),
        ("\\boxed{\\$18}", "18"),  # an escaped dollar, common in money questions
        ("\\boxed{\\text{\\$1,234}}", "1234"),
        ("So the answer is \\(18\\).", "18"),  # LaTeX inline math
        ("The answer is \\( \\$18 \\)", "18"),
        ("**Answer:** **$18**", "18"),
        ("The answer is $$-3$$", "-3"),
        ("#### $1,000", "1000"),
        ("The total is 18.", None),  # a number that is not stated as the answer
    ],
)
def test_gsm8k_answers_in_the_forms_models_write_them(text, answer):
    from lightning_agents.tasks.answers import _decimal_text, extract_gsm8k_answer

    got = extract_gsm8k_answer(text)
    assert (None if got is None else _decimal_text(got)) == answer


@pytest.mark.parametrize(
    ("text", "answer"),
    [
        # SmolLM2-135M-Instruct's greedy answers to GSM8K test rows 16, 18 and 12 (their last lines)
        (
            "So, the total profit made by the merchant is 5.1% of 2.5% + 1.2% = 7.2%\n\n"
            "The final answer is 7.2% - 5.1% = 1.8%\n\nThe profit made by the merchant is 1.8% of 2.5% + 1.2%",
            "1.8",
        ),
        (
            "So, the answer is \n$30 * 100 = 30% of her annual salary.\n\n"
            "The answer is \n$30 * 100 = 30% of her annual salary.",
            "30",
        ),
        ("The total cost of the donuts, mini cupcakes, and donuts is 520 donuts.\n#### N = 520\n#### N = 520", "520"),
        ("#### N = 520\n#### N =", None),  # cut off at the token limit mid-statement
        # an equation is read as its result, never as its first operand
        ("#### 16 - 3 - 4 = 9", "9"),
        ("The answer is 9 * 2 = 18.", "18"),
        ("\\boxed{9 \\times 2 = 18}", "18"),
        ("The answer is 2^10 = 1024", "1024"),
        ("The answer is 18, because x = 5", "18"),  # an explanation after the answer
        ("**Answer**: 18", "18"),
        ("#### 3/4", "0.75"),
        ("#### 2 1/2 hours", "2.5"),
        # what names no single number is no answer
        ("The answer is 5-6 apples", None),
        ("#### 16 - 3", None),
        ("#### 70k", None),
        ("#### 1e3", None),
    ],
)
def test_gsm8k_statements_are_read_as_a_person_reads_them(text, answer):
    from lightning_agents.tasks.answers import _decimal_text, extract_gsm8k_answer

    got = extract_gsm8k_answer(text)
    assert (None if got is None else _decimal_text(got)) == answer
