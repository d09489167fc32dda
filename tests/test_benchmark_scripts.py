"""The benchmark scripts' command lines (benchmarks/*.py): every option explained, early exits.

Nothing here runs a benchmark: the option check stops each script at ``parse_args``.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
SCRIPTS = sorted(p.name for p in BENCH.glob("*.py"))

# Run in a fresh interpreter: each script is executed as __main__ with ArgumentParser.parse_args
# replaced by a probe that records the options and stops, so no benchmark work starts and the
# scripts' sys.path edits stay out of the test process.
_PROBE = r"""
import argparse, json, runpy, sys

class Stop(Exception):
    pass

def probe(self, args=None, namespace=None):
    out = [(a.option_strings[0], a.help) for a in self._actions
           if a.option_strings and not isinstance(a, argparse._HelpAction)]
    print("OPTIONS " + json.dumps([sys.argv[0], out]), flush=True)
    raise Stop

argparse.ArgumentParser.parse_args = probe
for path in sys.argv[1:]:
    sys.argv = [path, "--help"]
    try:
        runpy.run_path(path, run_name="__main__")
    except Stop:
        pass
"""


@pytest.fixture(scope="module")
def options() -> dict[str, list[tuple[str, str | None]]]:
    """Per script: its options and their help texts (scripts without a parser are absent)."""
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE, *(str(BENCH / name) for name in SCRIPTS)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    found = {}
    for line in proc.stdout.splitlines():
        if line.startswith("OPTIONS "):
            path, opts = json.loads(line[len("OPTIONS ") :])
            found[Path(path).name] = [tuple(o) for o in opts]
    return found


def test_every_shown_benchmark_option_has_a_help_text(options):
    """Before: 88 options of 18 scripts had no help= (e.g. ``--seeds`` of hflow_sim_search.py), so
    --help listed a bare name; hidden child-process options (help=SUPPRESS) stay hidden."""
    assert len(options) >= 20, f"the probe found only {sorted(options)}"
    missing = [f"{name}: {opt}" for name, opts in options.items() for opt, text in opts if not (text or "").strip()]
    assert missing == []


def test_rstg_vs_trl_without_trl_stops_before_any_work():
    """Before: it ran the RSTG side (subprocesses, about 13 s even at the smallest settings) and then
    died with a PackageNotFoundError traceback at ``md.version("trl")``."""
    # trl made unimportable in this process, whether or not it is installed
    code = (
        "import runpy, sys; sys.modules['trl'] = None; "
        f"sys.argv = [{str(BENCH / 'rstg_vs_trl.py')!r}, '--steps', '1', '--repeats', '1', '--prompts', '1', "
        "'--g', '2', '--length', '4']; "
        "runpy.run_path(sys.argv[0], run_name='__main__')"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert (proc.returncode, proc.stderr, proc.stdout) == (2, "needs trl: pip install 'lightning-agents[bench]'\n", "")


def test_lora_memory_docstring_states_the_built_models_size(tmp_path):
    """Before: the docstring said 49.6M parameters; build_model(768, 7) has 49,902,336."""
    sys.path.insert(0, str(BENCH))
    try:
        import lora_memory
    finally:
        sys.path.remove(str(BENCH))
    n = lora_memory.build_model(str(tmp_path), 768, 7)
    stated = set(re.findall(r"(\d+\.\d)M parameters", lora_memory.__doc__.replace("\n", " ")))
    assert stated == {f"{n / 1e6:.1f}"}, f"docstring says {stated}M, the model has {n:,}"


def test_lost_taste_help_explains_its_arguments_and_classes():
    """Before: run 40's diagnosis was a scratch script outside the repo (positional sys.argv, run 33's
    settings hard-wired), so docs/benchmarks.md's commands could not be rerun from it."""
    proc = subprocess.run(
        [sys.executable, str(BENCH / "hflow_sim_lost_taste.py"), "--help"], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    for word in ("{gsm8k,humaneval}", "--pair-with", "--seeds", "--out", "--run-settings", "preference_taste_delta"):
        assert word in proc.stdout, f"--help does not mention {word}"
    for cls in ("(i) none built", "(ii) built, never fully evaluated", "(iii) evaluated, outside reach"):
        assert cls in " ".join(proc.stdout.split()), f"--help does not name class {cls}"


def test_lost_taste_classes_and_default_settings():
    """The diagnosis's class is the first stage that holds no workflow showing the working; its
    default settings are run 33's ten (what run 40's diagnosis ran with)."""
    sys.path.insert(0, str(BENCH))
    try:
        import hflow_sim_lost_taste as lost
    finally:
        sys.path.remove(str(BENCH))
    assert lost.classify(True, 0, 0, 0) == "ok"
    # counts of shows-the-working workflows built, fully evaluated, within reach; the choice lacks it
    stages = ((0, 0, 0), (3, 0, 0), (3, 2, 0), (3, 2, 1))
    assert [lost.classify(False, *counts) for counts in stages] == ["i", "ii", "iii", "iv"]
    args = lost.parse_args(["humaneval", "--pair-with", "p.jsonl", "--seeds", "130", "131"])
    assert (args.world, args.seeds, args.out) == ("humaneval", [130, 131], None)
    assert len(args.run_settings) == 10 and args.run_settings["preference_lineage"] == 0.08
    assert "preference_taste_delta" not in args.run_settings
    args = lost.parse_args(
        ["gsm8k", "--pair-with", "p", "--seeds", "1", "--run-settings", '{"preference_taste_delta": 0}']
    )
    assert args.run_settings == {"preference_taste_delta": 0}


def _search_script(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(BENCH / "hflow_sim_search.py"), *argv], capture_output=True, text=True, timeout=120
    )


def test_search_main_rater_options_are_explained_and_checked_before_any_search():
    """Before: run 40b's tasteless noisy rater needed a wrapper that swapped the script's classes, as
    the main methods' rater had no noise, flip-rate or SearchConfig option (noisyctl's drive.py)."""
    proc = _search_script("--help")
    assert proc.returncode == 0, proc.stderr[-2000:]
    for word in ("--rater-noise", "--rater-flip-rate", "--run-settings", "preference_taste_delta", "run 40b"):
        assert word in proc.stdout, f"--help does not mention {word}"
    # each bad value stops at the parser (exit 2) with a message naming it, before the world loads
    bad = (
        (("--run-settings", '{"preference_taste_dleta": 0.04}'), "'preference_taste_dleta'"),
        (("--run-settings", "[0.04]"), "a JSON object"),
        (("--rater-flip-rate", "0.5"), "--rater-flip-rate"),
        (("--rater-noise", "1.5"), "--rater-noise"),
    )
    for argv, word in bad:
        proc = _search_script(*argv)
        assert proc.returncode == 2 and word in proc.stderr, (argv, proc.stderr[-500:])
        assert "unrecognized arguments" not in proc.stderr, argv


def test_search_flip_rate_reaches_the_main_methods_settings_only_when_given():
    """``flip_rate`` None keeps the benchmark's own modelled rates (the stored rows'); a value overrides them."""
    sys.path.insert(0, str(BENCH))
    try:
        import hflow_sim_search as search
    finally:
        sys.path.remove(str(BENCH))
    assert search.hflow_settings(1)["rater_flip_rate"] == 0.05
    assert search.hflow_settings(1, criterion=object())["rater_flip_rate"] == 0.15
    assert search.hflow_settings(1, flip_rate=0.1)["rater_flip_rate"] == 0.1
