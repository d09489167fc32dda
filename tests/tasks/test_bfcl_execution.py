"""BFCLExecutionVerifier: BFCL multi-turn trials executed in BFCL's API classes (the optional bfcl-eval
package), against the verdicts of BFCL's own checker (tests/data/bfcl_results/README.md), and never
executing anything but a documented public method with literal arguments."""

from __future__ import annotations

import importlib.util
import json
import sys

import pytest
from bfcl_glyphh import BFCL_VALID, glyphh_rollouts, turn_messages

from lightning_agents.tasks.tau_actions import ActionReferenceError, BFCLActionVerifier

needs_bfcl = pytest.mark.skipif(
    importlib.util.find_spec("bfcl_eval") is None,
    reason="bfcl-eval is not installed (optional: pip install --no-deps bfcl-eval)",
)


def _verifier():
    from lightning_agents.tasks.bfcl_execution import BFCLExecutionVerifier

    return BFCLExecutionVerifier()


def _reference(rollout) -> dict:
    """The reader's reference with the task's environment in it, as an RL record's verifier gets it."""
    return {**json.loads(rollout.info["reference"]), "environment": rollout.info["environment"]}


@needs_bfcl
def test_verdicts_equal_bfcl_score_files():
    verifier = _verifier()
    rollouts = glyphh_rollouts()
    assert set(rollouts) == set(BFCL_VALID)
    for task_id, rollout in rollouts.items():
        reference = json.loads(rollout.info["reference"])
        assert verifier.score_turns(rollout.info["turn_calls"], reference, rollout.info["environment"]) == float(
            BFCL_VALID[task_id]
        ), task_id
        # The same from messages, the environment inside the reference.
        scored = verifier(json.dumps(turn_messages(rollout.info["turn_calls"])), json.dumps(_reference(rollout)))
        assert scored == float(BFCL_VALID[task_id]), task_id


@needs_bfcl
def test_calls_that_fail_in_execution_change_nothing():
    # base_0: `mv(destination='temp/final_report.pdf')` (no such folder yet) and a grep before the cd
    # fail when executed; a result-only file does not say so and the action verifier fails the trial.
    rollout = glyphh_rollouts()["multi_turn_base_0"]
    assert BFCLActionVerifier().score_turns(rollout.info["turn_calls"], json.loads(rollout.info["reference"])) == 0.0
    assert (
        _verifier().score_turns(rollout.info["turn_calls"], _reference(rollout)) == 1.0 == BFCL_VALID[rollout.task_id]
    )


@needs_bfcl
def test_a_write_the_ground_truth_does_not_make_fails():
    # An extra file returns None (no output to miss): only the state comparison sees it.
    rollout = glyphh_rollouts()["multi_turn_base_0"]
    turns = [list(turn) for turn in rollout.info["turn_calls"]]
    turns[2].append(("touch", {"file_name": "extra.txt"}))
    assert _verifier().score_turns(turns, _reference(rollout)) == 0.0
    # Made in a turn BFCL does not check, and removed again before the next check, it changes nothing.
    turns[2].append(("rm", {"file_name": "extra.txt"}))
    assert _verifier().score_turns(turns, _reference(rollout)) == 1.0


@needs_bfcl
def test_ground_truth_outputs_must_be_among_the_models():
    # miss_param_133: the model read the watchlist before adding AAPL, the ground truth after (same
    # final state); BFCL fails it on the missing output.
    rollout = glyphh_rollouts()["multi_turn_miss_param_133"]
    turns = [list(turn) for turn in rollout.info["turn_calls"]]
    verifier = _verifier()
    assert verifier.score_turns(turns, _reference(rollout)) == 0.0
    # Reading the watchlist again after the write (the turn the ground truth reads it in) gives its output.
    turns[1].append(("get_watchlist", {}))
    assert verifier.score_turns(turns, _reference(rollout)) == 1.0


@needs_bfcl
def test_long_context_category_loads_bfcl_long_data():
    from lightning_agents.tasks.bfcl_execution import _Run

    verifier = _verifier()
    config = {"TradingBot": {"authenticated": True}}
    for category, long in [
        ("multi_turn_base", False),
        ("multi_turn_long_context", True),
        ("multi_turn_composite", True),
    ]:
        environment = {"initial_config": config, "involved_classes": ["TradingBot"], "category": category}
        assert verifier._environment({}, environment) == (["TradingBot"], config, long)
    # BFCL's long-context data makes the same read answer differently (the runs compare like with like).
    classes, allowed = {"TradingBot": verifier._classes["TradingBot"]}, {"TradingBot": {"get_watchlist"}}
    short = _Run(classes, allowed, config, long_context=False).call("get_watchlist", (), {})
    longer = _Run(classes, allowed, config, long_context=True).call("get_watchlist", (), {})
    assert len(longer) > 10 * len(short)


@needs_bfcl
def test_missing_environment_is_a_reference_error():
    with pytest.raises(ActionReferenceError, match="initial_config"):
        _verifier().score_turns([[("ls", {})]], {"ground_truth": [["ls()"]]})


ATTACKS = [
    "ls(a=__import__('os').system('touch {marker}'))",
    "cat(file_name=open('{marker}', 'w').write('x'))",
    "__import__('os').system('touch {marker}')",
    "_load_scenario({{'root': {{}}}})",
    "__class__()",
    "__init__()",
    "cd(**{{'folder': 'x'}})",
    "power(base=9, exponent=10**9)",
]


@needs_bfcl
@pytest.mark.parametrize("attack", ATTACKS)
def test_attacks_are_refused_never_executed(attack, tmp_path, monkeypatch):
    from lightning_agents.tasks import bfcl_execution

    marker = tmp_path / "pwned"
    executed = []
    real = bfcl_execution._Run.call

    def spy(self, name, args, kwargs):
        executed.append(name)
        return real(self, name, args, kwargs)

    monkeypatch.setattr(bfcl_execution._Run, "call", spy)
    verifier = _verifier()
    environment = {"initial_config": {}, "involved_classes": ["GorillaFileSystem", "MathAPI"], "category": "x"}
    reference = {"ground_truth": [["ls()"]], "environment": environment}
    # The ground truth's call plus the attack: a trial that would pass without it.
    assert verifier.score_turns([["ls()"]], reference) == 1.0
    executed.clear()
    assert verifier.score_turns([["ls()", attack.format(marker=marker)]], reference) == 0.0
    assert executed == [] and not marker.exists()


@needs_bfcl
@pytest.mark.parametrize(
    ("name", "arguments"),
    [
        ("_load_scenario", {"scenario": {}}),
        ("__class__", {}),
        ("__getattribute__", {"_0": "_load_scenario"}),
        ("ls", {"__class__": 1}),
        ("power", {"base": 9, "exponent": 10**9}),
        # a 4,000-digit base to the 1024th took 2.7 s a call, in the world and again in every replay
        ("power", {"base": 10**4000, "exponent": 1024}),
        ("power", {"_0": 10**4000, "_1": 1024}),
        ("square_root", {"number": 2, "precision": 10**8}),
        ("logarithm", {"value": 8, "base": 2, "precision": -1000}),
        ("square_root", {"_0": 2, "_1": 10**8}),
        ("multiply", {"a": "x", "b": 10**9}),
    ],
)
def test_refused_tool_calls_fromturn_messages(name, arguments, monkeypatch):
    from lightning_agents.tasks import bfcl_execution

    executed = []
    monkeypatch.setattr(bfcl_execution._Run, "call", lambda self, n, a, k: executed.append(n) or "")
    environment = {"initial_config": {}, "involved_classes": ["GorillaFileSystem", "MathAPI"], "category": "x"}
    reference = json.dumps({"ground_truth": [["ls()"]], "environment": environment})
    assert _verifier()(json.dumps(turn_messages([[("ls", {}), (name, arguments)]])), reference) == 0.0
    assert executed == []


@needs_bfcl
def test_model_text_in_arguments_stays_text(tmp_path):
    # A JSON argument that looks like code is a string the method gets; nothing evaluates it.
    marker = tmp_path / "pwned"
    environment = {"initial_config": {}, "involved_classes": ["GorillaFileSystem"], "category": "x"}
    reference = json.dumps({"ground_truth": [["ls()"]], "environment": environment})
    attack = f"__import__('os').system('touch {marker}')"
    write = [("touch", {"file_name": "note.txt"}), ("echo", {"content": attack, "file_name": "note.txt"})]
    truth = {
        "ground_truth": [["touch(file_name='note.txt')", f"echo(content={attack!r}, file_name='note.txt')"]],
        "environment": environment,
    }
    assert _verifier()(json.dumps(turn_messages([write])), json.dumps(truth)) == 1.0  # the same text on both sides
    assert not marker.exists()
    messages = turn_messages([[("ls", {}), *write]])
    assert _verifier()(json.dumps(messages), reference) == 0.0  # a file the ground truth did not write
    assert not marker.exists()
    # A function no involved class documents is an error result, as in BFCL, not a refusal.
    messages = turn_messages([[("ls", {}), ("post_tweet", {"content": "x"}), ("system", {"command": "id"})]])
    assert _verifier()(json.dumps(messages), reference) == 1.0


def test_missing_package_names_the_install(monkeypatch):
    from lightning_agents.tasks import bfcl_execution

    monkeypatch.setitem(sys.modules, "bfcl_eval", None)  # import bfcl_eval raises ImportError
    with pytest.raises(ImportError, match=r"pip install --no-deps bfcl-eval"):
        bfcl_execution.BFCLExecutionVerifier()


@needs_bfcl
def test_math_calls_leave_the_processs_precision_as_it_was():
    # MathAPI set the thread's decimal precision and the process's mpmath precision and left them:
    # after one policy call, `1/3` equalled 0.3 in GSM8K rewards and mpmath.sqrt(2) was 1.0.
    import decimal

    import mpmath

    digits, prec = mpmath.mp.dps, decimal.getcontext().prec
    environment = {"initial_config": {}, "involved_classes": ["MathAPI"], "category": "x"}
    reference = json.dumps({"ground_truth": [["square_root(number=4, precision=1)"]], "environment": environment})
    calls = [("square_root", {"number": 4, "precision": 1}), ("logarithm", {"value": 8, "base": 2, "precision": 1})]
    _verifier()(json.dumps(turn_messages([calls])), reference)
    assert (mpmath.mp.dps, decimal.getcontext().prec) == (digits, prec)
