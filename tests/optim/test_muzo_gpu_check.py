"""The GPU check's MUZO child (benchmarks/muzo_gpu_memory.py) on its CPU smoke shape.

On a GPU the script measures Qwen3-1.7B-sized memory; here the same child code runs a tiny model,
so what the GPU run reports (exact restore at lr 0, Adam steps of about lr) is known to be right
before device time is spent on it.
"""

import importlib.util
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture(scope="module")
def gpu_check():
    sys.path.insert(0, str(BENCH))
    try:
        spec = importlib.util.spec_from_file_location("muzo_gpu_memory", BENCH / "muzo_gpu_memory.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.path.remove(str(BENCH))


def test_lr0_restores_bf16_weights_bit_for_bit(gpu_check):
    row = gpu_check.child("lr0", steps=2, batch=2, seq=16, queries=2, device="cpu")
    assert row["max_abs_change"] == 0.0 and row["changed_fraction"] == 0.0
    assert row["master_max_abs_change"] == 0.0


@pytest.mark.parametrize("mode", ["muzo_adam_bf16", "muzo_adam_int8"])
def test_adam_moves_master_weights_by_about_lr_per_step(gpu_check, mode):
    row = gpu_check.child(mode, steps=2, batch=2, seq=16, queries=2, device="cpu")
    assert row["master_entries_beyond_10_lr_per_step"] == 0
    assert 0 < row["master_max_abs_change"] <= 3 * 1e-6 * 1.05  # 3 steps of at most ~lr each
    assert row["changed_fraction"] > 0
