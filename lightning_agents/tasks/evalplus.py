"""evalplus's release files (``HumanEvalPlus.jsonl``, ``MbppPlus.jsonl``) graded on their plus tests.

A release row is ``{task_id, prompt, entry_point, canonical_solution, base_input, plus_input, atol}``
(HumanEval+'s also keeps HumanEval's base ``test``, MBPP+'s an ``assertion``): the extra tests are
only *inputs*. evalplus (``evalplus/evaluate.py``, ``get_groundtruth``) runs ``prompt +
canonical_solution`` on ``base_input + plus_input`` to get the expected outputs, then checks each
candidate output against them (``evalplus/eval/__init__.py``, ``unsafe_execute``).

This module does the same inside this project's sandbox: the canonical solution runs in
:func:`~lightning_agents.rewards.sandbox.run_python` (trusted, but still sandboxed), its outputs are
cached per file (keyed by the file's bytes), and each row gets a test program
that calls the candidate on every input and compares as ``unsafe_execute`` does: Python's ``==``
(``operator.eq``, so ``True == 1`` as in evalplus: the harness's type-strict rewrite of ``==`` is
for tests that compare with the candidate's objects, and here both sides are plain data the
harness decoded, so no candidate code runs in the comparison);
else, with a tolerance (the row's ``atol``, or ``1e-6`` when it is 0 and the expected value is a
float or a list of floats), the same type, the same length and ``np.allclose(out, exp,
rtol=1e-07, atol=atol)``; HumanEval/32 (``find_zero``) by ``|poly(xs, out)| <= atol``; MBPP's
special oracles (set equality for Mbpp/2, 7, 111, 140, 232, 249, 579, 769; ``out is not None``
for 737, 787, 794; Mbpp/164, 295, 558, 581 as evalplus's ``_special_oracle.py``). MBPP+ inputs
are read as ``evalplus/data/mbpp.py``'s ``mbpp_deserialize_inputs`` reads them (JSON has no
tuples, sets or complex numbers).

Source: evalplus/evalplus (Apache-2.0) @ 26d6d00, files named above.
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import json
import logging
import os
import secrets
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any

from lightning_agents.errors import LightningAgentsError
from lightning_agents.tasks._files import TaskDataError

log = logging.getLogger(__name__)

__all__ = [
    "DISCARD_PRINTS",
    "EVALPLUS_LOCK_TIMEOUT_S",
    "EVALPLUS_TIME_CAP_S",
    "EvalplusCacheLockTimeout",
    "REFERENCE_LIMITS",
    "evalplus_budget",
    "evalplus_test",
    "discard_prints",
    "expected_outputs",
    "input_time_limits",
    "is_release_row",
    "mbpp_deserialize_inputs",
    "release_tests",
]

# Bump when the runner, the codec or the comparison changes: a cache made by other code is not reused.
CACHE_VERSION = 1

#: Limits of the sandbox that runs a canonical solution on all of a row's inputs. evalplus computes
#: its ground truth in-process, unbounded; its evaluator caps a process at 4 GiB and a task at 60 s.
REFERENCE_LIMITS = {"timeout_s": 120.0, "memory_mb": 4096, "max_output_bytes": 64 << 20}

#: The most seconds a candidate gets on one release row however slow its reference was: evalplus
#: runs base and plus inputs as two runs of at most 60 + 1 s each (``untrusted_check``,
#: ``EVALPLUS_TIMEOUT_PER_TASK``). See :meth:`~lightning_agents.tasks.code.HumanEvalTask.time_limit`.
EVALPLUS_TIME_CAP_S = 2 * (60.0 + 1.0)

#: evalplus's ``DEFAULT_GT_TIME_LIMIT_FACTOR`` (``evalplus/config.py``): an input gets this many
#: times the reference's time on it.
EVALPLUS_TIME_FACTOR = 4.0

#: evalplus's ``DEFAULT_MIN_TIME_LIMIT`` (``evalplus/config.py``): the fewest seconds an input gets.
EVALPLUS_MIN_TIME_LIMIT_S = 4.0

# evalplus/eval/_special_oracle.py @ 26d6d00
MBPP_OUTPUT_NOT_NONE_TASKS = ("check_str", "text_match_three", "text_starta_endb")
MBPP_OUTPUT_SET_EQ_TASKS = (
    "similar_elements",
    "find_char_long",
    "common_in_nested_lists",
    "extract_singly",
    "larg_nnum",
    "intersection_array",
    "find_dissimilar",
    "Diff",
)


def is_release_row(row: dict[str, Any]) -> bool:
    """Whether ``row`` is an evalplus release row whose tests are only inputs: it has ``base_input``
    or ``plus_input`` and no ``test`` that runs them (evalplus's original format,
    ``tools/humaneval/to_original_fmt.py``, writes ``inputs = [...]`` into ``check()``: such a row is
    graded by its own test)."""
    import re

    if "plus_input" not in row and "base_input" not in row:
        return False
    test = row.get("test")
    if isinstance(test, str) and test.startswith(TEST_HEADER):
        return False
    return not (isinstance(test, str) and re.search(r"^\s*inputs\s*=", test, re.MULTILINE))


def _dataset(task_id: str) -> str:
    """evalplus's ``dataset`` argument, which switches its special oracles on: by the id's prefix."""
    prefix = task_id.split("/", 1)[0].lower()
    return {"humaneval": "humaneval", "mbpp": "mbpp"}.get(prefix, "")


# evalplus/data/mbpp.py @ 26d6d00: which MBPP+ tasks' inputs hold tuples and how deep
# fmt: off
_TUPLES_1 = (2, 116, 132, 143, 222, 261, 273, 394, 399, 421, 424, 429, 470, 560, 579, 596, 616, 630, 726, 740, 744, 809)
_TUPLES_2 = (63, 64, 70, 94, 120, 237, 272, 299, 400, 409, 417, 438, 473, 614, 780)
_TUPLES_FIRST = (75, 413, 444, 753)
_TUPLE_FIRST_ARG = (250, 405, 446, 617, 720, 763, 808)
# fmt: on


def mbpp_deserialize_inputs(task_id: str, inputs: list) -> list:
    """MBPP+ inputs as evalplus reads them (``evalplus/data/mbpp.py`` @ 26d6d00, the same cases):
    the JSON file stores tuples, sets and complex numbers as lists and strings."""
    task = int(task_id.split("/")[-1])
    if task in _TUPLES_1:
        return [[tuple(lst) for lst in inp] for inp in inputs]
    if task in _TUPLES_2:
        return [[[tuple(lst) for lst in lst_lst] for lst_lst in inp] for inp in inputs]
    if task in _TUPLES_FIRST:
        return [[[tuple(lst) for lst in inp[0]]] + [inp[1]] for inp in inputs]
    if task in (106, 750):
        return [[inp[0]] + [tuple(inp[1])] for inp in inputs]
    if task == 115:
        return [[[set(item) if isinstance(item, list) and len(item) else {} for item in inp[0]]] for inp in inputs]
    if task == 124:
        return [(float(inp[0]), complex(inp[1])) for inp in inputs]
    if task in _TUPLE_FIRST_ARG:
        return [[tuple(inp[0])] + [inp[1]] for inp in inputs]
    if task in (259, 401, 445):
        inputs = [[[tuple(lst) for lst in lst_lst] for lst_lst in inp] for inp in inputs]
        return [[tuple(lst) for lst in inp] for inp in inputs]
    if task == 278:
        inputs = [[[tuple(item) if isinstance(item, list) else item for item in inp[0]]] for inp in inputs]
        return [[tuple(lst) for lst in inp] for inp in inputs]
    if task == 307:
        return [[tuple(inp[0])] + [inp[1], inp[2]] for inp in inputs]
    if task == 722:
        return [[{key: tuple(value) for key, value in inp[0].items()}] + inp[1:] for inp in inputs]
    if task == 252:
        return [[complex(inp[0])] for inp in inputs]
    if task in (580, 615, 791):

        def as_tuples(inp):
            return tuple(as_tuples(item) for item in inp) if isinstance(inp, list) else inp

        return [as_tuples(inp) for inp in inputs]
    return inputs


# --- the value codec: inputs and outputs travel as tagged JSON (tuples, sets, complex, inf/nan and
# ints of any size survive; JSON and Python literals lose some of these). Both functions are
# standard-library only: their source is copied into the sandboxed runner and into the tests.


def _la_encode(value):
    # subclasses (numpy's float64, a namedtuple, a Counter) go as their base type, as the wire
    # between harness and candidate sends the candidate's values
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str):
        return str(value)
    if isinstance(value, int):
        value = int(value)
        return value if abs(value) < 10**15 else {"i": hex(value)}
    if isinstance(value, float):
        value = float(value)
        return value if value == value and value not in (float("inf"), float("-inf")) else {"x": repr(value)}
    if isinstance(value, complex):
        return {"c": [_la_encode(value.real), _la_encode(value.imag)]}
    if isinstance(value, bytes):
        return {"b": bytes(value).hex()}
    if isinstance(value, list):
        return [_la_encode(v) for v in value]
    if isinstance(value, tuple):
        return {"t": [_la_encode(v) for v in value]}
    if isinstance(value, frozenset):
        return {"f": [_la_encode(v) for v in value]}
    if isinstance(value, set):
        return {"s": [_la_encode(v) for v in value]}
    if isinstance(value, dict):
        return {"d": [[_la_encode(k), _la_encode(v)] for k, v in value.items()]}
    raise TypeError(f"a value of type {type(value).__name__} cannot be stored: {value!r:.80}")


def _la_decode(value):
    if isinstance(value, list):
        return [_la_decode(v) for v in value]
    if not isinstance(value, dict):
        return value
    ((tag, body),) = value.items()
    if tag == "i":
        return int(body, 16)
    if tag == "x":
        return float(body)
    if tag == "c":
        return complex(_la_decode(body[0]), _la_decode(body[1]))
    if tag == "b":
        return bytes.fromhex(body)
    if tag == "t":
        return tuple(_la_decode(v) for v in body)
    if tag == "f":
        return frozenset(_la_decode(v) for v in body)
    if tag == "s":
        return {_la_decode(v) for v in body}
    if tag == "d":
        return {_la_decode(k): _la_decode(v) for k, v in body}
    raise ValueError(f"unknown tag {tag!r}")


def _la_tagged(obj):
    # json.loads's object_hook: the same values as _la_decode, but the lists are built by the JSON
    # parser in C and only the tagged objects (every JSON object is one) pass through Python.
    # MBPP+'s Mbpp/630 holds 11 MB of expected lists: _la_decode's walk of each value took 3 s of its
    # 17 s limit in every verdict, and a right program timed out on a busy machine.
    ((tag, body),) = obj.items()
    if tag == "i":
        return int(body, 16)
    if tag == "x":
        return float(body)
    if tag == "c":
        return complex(body[0], body[1])
    if tag == "b":
        return bytes.fromhex(body)
    if tag == "t":
        return tuple(body)
    if tag == "f":
        return frozenset(body)
    if tag == "s":
        return set(body)
    if tag == "d":
        return {k: v for k, v in body}
    raise ValueError(f"unknown tag {tag!r}")


_CODEC = inspect.getsource(_la_encode) + "\n\n" + inspect.getsource(_la_decode) + "\n\n" + inspect.getsource(_la_tagged)

# The runner: the canonical solution on every input, outputs and seconds per input after a marker
# made fresh for the run (what the solution prints cannot be taken for them).
_RUNNER = """
import contextlib as _la_contextlib, copy as _la_copy, io as _la_io, json as _la_json, sys as _la_sys, time as _la_time
if hasattr(_la_sys, "set_int_max_str_digits"):
    _la_sys.set_int_max_str_digits(0)
{codec}
_la_inputs = _la_decode(_la_json.loads({inputs}))
_la_fn = globals()[{entry_point!r}]
_la_out, _la_times = [], []
for _la_inp in _la_inputs:
    _la_inp = _la_copy.deepcopy(_la_inp)
    with _la_contextlib.redirect_stdout(_la_io.StringIO()):
        _la_t0 = _la_time.perf_counter()
        _la_value = _la_fn(*_la_inp)
        _la_times.append(_la_time.perf_counter() - _la_t0)
    if {not_none}:
        _la_value = _la_value is not None
    _la_out.append(_la_encode(_la_value))
_la_sys.stdout.write({marker!r} + _la_json.dumps({{"out": _la_out, "times": _la_times}}))
"""


def _inputs(row: dict[str, Any], where: str) -> list:
    """``base_input + plus_input`` of a row (a field may be a JSON string, as in evalplus's data
    files in its repository), each input a list of arguments; MBPP's read as evalplus reads them."""
    return _field_inputs(row, "base_input", where) + _field_inputs(row, "plus_input", where)


def _field_inputs(row: dict[str, Any], field: str, where: str) -> list:
    """One field's inputs (see :func:`_inputs`)."""
    value = row.get(field, [])
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError as exc:
            raise TaskDataError(f"{where}: {field!r} is a string that is not JSON ({exc})") from None
    if value == {}:
        value = []  # MbppPlus.jsonl @ 767efcc, Mbpp/793: evalplus iterates it as no inputs
    if not isinstance(value, list) or not all(isinstance(inp, list) for inp in value):
        raise TaskDataError(f"{where}: {field!r} must be a list of argument lists, got {str(value)[:80]}")
    if _dataset(str(row.get("task_id", ""))) == "mbpp":
        try:
            value = mbpp_deserialize_inputs(str(row["task_id"]), value)
        except (TypeError, ValueError, IndexError, KeyError, AttributeError) as exc:
            raise TaskDataError(f"{where}: {field!r} is not in MBPP+'s form for {row['task_id']} ({exc})") from None
    return value


def _check_row(row: dict[str, Any], where: str) -> None:
    missing = [k for k in ("prompt", "entry_point", "canonical_solution") if not isinstance(row.get(k), str)]
    if missing:
        raise TaskDataError(
            f"{where}: an evalplus release record (it has base_input/plus_input) needs string fields "
            f"{missing}: its expected outputs are the canonical solution's (it has {sorted(row)[:10]})"
        )
    atol = row.get("atol", 0)
    if isinstance(atol, str):
        try:
            atol = float(atol)
        except ValueError:
            atol = None
    if isinstance(atol, bool) or not isinstance(atol, (int, float)) or not atol >= 0:
        raise TaskDataError(f"{where}: 'atol' must be a number >= 0, got {row.get('atol')!r}")


def _atol(row: dict[str, Any]) -> float:
    atol = row.get("atol", 0)
    return float(atol) if isinstance(atol, str) else atol


def _run_reference(row: dict[str, Any], where: str, inputs: list) -> dict[str, Any]:
    from lightning_agents.rewards.sandbox import run_python

    marker = f"\n@@la-evalplus-{secrets.token_hex(8)}@@"
    entry_point = row["entry_point"]
    not_none = _dataset(str(row.get("task_id", ""))) == "mbpp" and entry_point in MBPP_OUTPUT_NOT_NONE_TASKS
    runner = _RUNNER.format(
        codec=_CODEC,
        inputs=json.dumps(json.dumps([_la_encode(i) for i in inputs])),
        entry_point=entry_point,
        not_none=not_none,
        marker=marker,
    )
    program = f"{row['prompt']}{row['canonical_solution']}\n\n{runner}"
    limits = REFERENCE_LIMITS
    result = run_python(
        program,
        timeout_s=limits["timeout_s"],
        memory_mb=limits["memory_mb"],
        max_output_bytes=limits["max_output_bytes"],
        site_packages=True,
    )
    _, sep, body = result.stdout.rpartition(marker)
    if result.ok and sep:
        return json.loads(body)
    what = f"the canonical solution of {row.get('task_id')} gave no expected outputs on its {len(inputs)} inputs"
    if result.timed_out or result.killed or result.output_truncated:
        # a limit of this machine, not a fault of the row (MBPP+'s Mbpp/255 returns about 1 GB for
        # one input): the row is skipped, and the rest of the file is graded
        why = (
            f"timed out after {limits['timeout_s']:.0f} s"
            if result.timed_out
            else f"over the {limits['max_output_bytes'] >> 20} MiB output cap"
            if result.output_truncated
            else f"killed (signal {-(result.returncode or 0)}; the cap is {limits['memory_mb']} MiB)"
        )
        # the path is not in the message (the cache serves the same bytes at another path) and the
        # limits are kept: under higher ones the row is tried again (see _stale)
        return {"skip": f"{what} ({why})", "limits": dict(limits)}
    tail = result.stderr.strip().splitlines()[-1:] or [f"exit status {result.returncode}"]
    raise TaskDataError(f"{where}: {what}: {tail[0][:300]}")


def _file_key(path: Path) -> str:
    digest = hashlib.sha256(f"evalplus-expected-v{CACHE_VERSION}\n".encode())
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


_MEMORY_CACHE: dict[str, dict[str, Any]] = {}


def _stale(entry: dict[str, Any] | None) -> bool:
    """Whether a cached entry must be computed again: absent, or a skip made under lower limits
    than :data:`REFERENCE_LIMITS` now (or with none recorded): a limit that was raised, or a load
    that timed out on a busy machine, is not kept for good."""
    if entry is None:
        return True
    if "skip" not in entry:
        return False
    had = entry.get("limits")
    if not isinstance(had, dict):
        return True
    return any(not isinstance(had.get(k), (int, float)) or had[k] < v for k, v in REFERENCE_LIMITS.items())


#: An input whose reference took longer than this (seconds) in the first, parallel pass is timed
#: again alone, and keeps the smaller time (see :func:`_retime`).
RETIME_ABOVE_S = 1.0


def _needs_retime(entry: dict[str, Any] | None) -> bool:
    """Whether a computed entry has an input slower than :data:`RETIME_ABOVE_S` not yet timed again
    alone (an entry cached before session 42's second mends is timed again at its next load)."""
    if entry is None or "times" not in entry or entry.get("retimed"):
        return False
    return any(isinstance(t, (int, float)) and t > RETIME_ABOVE_S for t in entry["times"])


def _retime(row: dict[str, Any], where: str, entry: dict[str, Any]) -> dict[str, Any]:
    """``entry`` with each input slower than :data:`RETIME_ABOVE_S` run again, alone (no other
    reference run of this load beside it), keeping the smaller of its two times.

    The first pass runs two sandboxes at once on whatever else the machine runs, and its times size
    the inputs' limits for as long as the cache lives: MBPP+'s Mbpp/583 and 389 had their slowest
    input stored at 2.52 and 2.06 s (limits 10.1 and 8.2 s) and took 1.56 and 1.31 s alone (the
    session-42 review), so a candidate 6.5x slower than the reference passed, where evalplus, which
    times its ground truth one task at a time, allows 4x. Only inputs over a quarter of the 4 s
    floor matter (the floor decides the rest): 19 inputs of 3 rows in MBPP+ (Mbpp/389, 583, 599),
    none in HumanEval+. A run that fails keeps the first times, with a warning."""
    times = list(entry["times"])
    slow = [i for i, t in enumerate(times) if isinstance(t, (int, float)) and t > RETIME_ABOVE_S]
    inputs = _inputs(row, where)
    try:
        again = _run_reference(row, where, [inputs[i] for i in slow])
        found = again.get("times") if isinstance(again, dict) else None
        if not isinstance(found, list) or len(found) != len(slow):
            raise ValueError(again.get("skip", "no times") if isinstance(again, dict) else "no times")
    except Exception as exc:  # noqa: BLE001 -- the first times stand; the row is graded either way
        log.warning("%s: timing its slow inputs again failed (%s); keeping the first times", where, exc)
        return {**entry, "retimed": True}
    for i, t in zip(slow, found):
        times[i] = min(times[i], t)
    log.info(
        "%s: %d slow input(s) timed again alone: the row's total %.2f -> %.2f s",
        where,
        len(slow),
        sum(entry["times"]),
        sum(times),
    )
    return {**entry, "times": times, "retimed": True}


def _read_cache(cached: Path) -> dict[str, dict[str, Any]]:
    """The entries of a cache file; a file that cannot be read or parsed is warned about, naming
    it, and counts as empty (its rows are computed again and the file rewritten)."""
    try:
        found = json.loads(cached.read_text())
        if not isinstance(found, dict) or not all(isinstance(v, dict) for v in found.values()):
            raise ValueError("not an object of entries")
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        log.warning("%s: evalplus cache file unreadable (%s); computing its rows again", cached, exc)
        return {}
    return found


def _write_cache(cached: Path, by_line: dict[str, dict[str, Any]]) -> None:
    """Write the cache file (whole, then renamed over the old one: a reader never sees half of it).
    A folder that cannot be written (read-only, full) is warned about: the outputs were computed
    and are kept in memory, so the load goes on (before, minutes of reference runs were lost to
    the write's error)."""
    tmp = cached.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        tmp.write_text(json.dumps(by_line))
        os.replace(tmp, cached)
    except OSError as exc:
        log.warning("%s: cannot write the evalplus cache file (%s); its outputs are kept in memory only", cached, exc)
        with contextlib.suppress(OSError):
            tmp.unlink()


#: The most seconds a process waits for ``<sha256>.lock``, which another process holds while it
#: computes the same evalplus outputs (MBPP+'s first load: about 3 minutes on 2 cores). Past it the
#: load raises :class:`EvalplusCacheLockTimeout` naming the lock file: a holder hung inside the lock
#: (a stopped rank, a frozen sandbox) made every other process wait forever before session 43.
EVALPLUS_LOCK_TIMEOUT_S = 3600.0


# Not a TimeoutError: that is an OSError, which _locked reads as "no lock on this file system".
class EvalplusCacheLockTimeout(LightningAgentsError, RuntimeError):
    """Another process held the evalplus cache lock longer than :data:`EVALPLUS_LOCK_TIMEOUT_S`."""


@contextlib.contextmanager
def _locked(folder: Path | None, key: str) -> Iterator[None]:
    """Hold ``<folder>/<key>.lock`` (``fcntl.flock``): DDP ranks load the same file at once, and
    each would run every reference (2 sandboxes of 4 GiB each per rank) and could keep different
    rows; the first computes, the others wait and read its file. Without a folder, no lock.

    The kernel drops the lock when its holder exits, however it ends: a crashed process leaves a
    lock file but no lock. A folder where the lock cannot be taken (read-only, or a file system
    without ``flock``, some NFS mounts) is warned about and the load goes on unlocked: processes
    sharing it may then compute the same outputs, but none fails (before, the load raised).

    A process waits at most :data:`EVALPLUS_LOCK_TIMEOUT_S` for the lock, then raises
    :class:`EvalplusCacheLockTimeout` naming the lock file and what to do."""
    if folder is None:
        yield
        return
    import fcntl

    lock = folder / f"{key}.lock"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fh = lock.open("a")
    except OSError as exc:
        log.warning("%s: cannot open the evalplus cache lock (%s); loading without it", lock, exc)
        yield
        return
    with fh:
        held = True
        try:
            _wait_for_lock(fh, lock)
        except OSError as exc:
            log.warning("%s: cannot lock the evalplus cache (%s); loading without the lock", lock, exc)
            held = False
        try:
            yield
        finally:
            if held:
                fcntl.flock(fh, fcntl.LOCK_UN)


def _wait_for_lock(fh, lock: Path) -> None:
    """Take ``fh``'s exclusive ``flock``, polling, for at most :data:`EVALPLUS_LOCK_TIMEOUT_S` (a
    blocking ``flock`` cannot be given a time limit)."""
    import fcntl

    start = time.monotonic()
    deadline = start + EVALPLUS_LOCK_TIMEOUT_S
    noted = None
    while True:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            pass
        now = time.monotonic()
        if now >= deadline:
            raise EvalplusCacheLockTimeout(
                f"{lock}: another process has held this evalplus cache lock for over "
                f"{EVALPLUS_LOCK_TIMEOUT_S:g} s (EVALPLUS_LOCK_TIMEOUT_S in lightning_agents.tasks.evalplus) while "
                "computing the same outputs, or it hangs. See which process holds it (`fuser -v "
                f"{lock}`): if it is still computing, let it finish and start this load again (it "
                "reads that process's cache file); if it hangs, end it (the kernel drops its lock). "
                "To load without the shared cache, set the task's evalplus_cache to null (each "
                "process then computes its own outputs)."
            )
        if noted is None or now - noted >= 60:
            log.info(
                "%s: waiting for another process computing the same evalplus outputs (%.0f s of at most %g s)",
                lock,
                now - start,
                EVALPLUS_LOCK_TIMEOUT_S,
            )
            noted = now
        time.sleep(min(0.5, max(deadline - now, 0.01)))


def _compute(
    path: Path, items: list[tuple[str, dict[str, Any]]], workers: int, cached: Path | None
) -> tuple[dict[str, dict[str, Any]], list[BaseException]]:
    """The reference runs of ``items``, by line, with the errors of the rows that failed: every row
    runs, so the good ones are kept (and cached) even when another raises."""
    inputs = {where: _inputs(row, where) for where, row in items}
    total = len(items)
    log.info(
        "%s: computing the canonical outputs of %d evalplus row(s) (%d inputs) in the sandbox; cached in %s",
        path,
        total,
        sum(len(v) for v in inputs.values()),
        cached if cached is not None else "memory only",
    )
    start = last = time.monotonic()
    done: dict[str, dict[str, Any]] = {}
    errors: list[tuple[str, BaseException]] = []
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        futures = {pool.submit(_run_reference, row, where, inputs[where]): where for where, row in items}
        for count, future in enumerate(as_completed(futures), 1):
            where = futures[future]
            try:
                done[where.rsplit(":", 1)[1]] = future.result()
            except Exception as exc:  # noqa: BLE001 -- every row runs; the errors are raised after
                errors.append((where, exc))
            now = time.monotonic()
            # about every 10 % of the rows, or 30 s: MBPP+'s first load takes minutes
            if count < total and (now - last >= 30 or count * 10 // total > (count - 1) * 10 // total):
                log.info("%s: %d/%d evalplus rows computed (%.0f s)", path, count, total, now - start)
                last = now
    log.info("%s: computed %d evalplus row(s) in %.1f s", path, total, time.monotonic() - start)
    errors.sort(key=lambda item: int(item[0].rsplit(":", 1)[1]))
    return done, [exc for _, exc in errors]


def expected_outputs(
    path: Path, rows: list[tuple[str, dict[str, Any]]], cache_dir: str | Path | None = "default", workers: int = 2
) -> dict[str, dict[str, Any]]:
    """The canonical solutions' outputs on every input of the release rows of ``path``, by
    ``file:line``: ``{"out": [encoded values], "times": [seconds per input]}``, or ``{"skip":
    reason, "limits": ...}`` for a row whose reference run hit a limit of :data:`REFERENCE_LIMITS`
    (time, memory, output size).

    Computed once per file content: kept in memory and, unless ``cache_dir`` is None, in
    ``<cache_dir>/<sha256 of the file>.json`` (``"default"``: ``$XDG_CACHE_HOME/lightning_agents/evalplus``).
    A moved or renamed file still hits; an edited one does not. Only rows missing from the cache
    run: a skip is run again once :data:`REFERENCE_LIMITS` are higher than those that made it, and
    when a row raises, the rows computed beside it are still cached. Processes sharing the folder
    take turns (a file lock), so one computes and the others read its file. An unreadable cache
    file is warned about and computed again; deleting it clears the cache.

    Raises:
        TaskDataError: a row is malformed or its canonical solution raises on an input, naming
            ``file:line`` and the error (the first such row; the message counts the others).
    """
    from lightning_agents.datamodules.sources import cache_home

    todo = [(where, row) for where, row in rows if is_release_row(row)]
    for where, row in todo:
        _check_row(row, where)
    # rows are named by line number: the same bytes at another path still match
    key = _file_key(path)
    folder = None if cache_dir is None else cache_home("evalplus") if cache_dir == "default" else Path(cache_dir)
    cached = folder / f"{key}.json" if folder is not None else None
    by_line = dict(_MEMORY_CACHE.get(key, {}))
    lines = {where.rsplit(":", 1)[1]: (where, row) for where, row in todo}
    if any(_stale(by_line.get(line)) or _needs_retime(by_line.get(line)) for line in lines):
        with _locked(folder, key):
            # read under the lock: another process may have just written what this one lacks
            if cached is not None:
                by_line.update(_read_cache(cached))
            missing = [item for line, item in lines.items() if _stale(by_line.get(line))]
            errors: list[BaseException] = []
            done: dict[str, dict[str, Any]] = {}
            if missing:
                done, errors = _compute(path, missing, workers, cached)
                by_line.update(done)
            # one at a time, after the parallel pass: see _retime
            retimed = 0
            for line, (where, row) in lines.items():
                if _needs_retime(by_line.get(line)):
                    by_line[line] = _retime(row, where, by_line[line])
                    retimed += 1
            if cached is not None and (done or retimed):
                _write_cache(cached, by_line)
            _MEMORY_CACHE[key] = by_line
            if errors:
                first = errors[0]
                if len(errors) > 1 and isinstance(first, TaskDataError):
                    raise TaskDataError(f"{first} (and {len(errors) - 1} more row(s) of {path})") from first
                raise first
    _MEMORY_CACHE[key] = by_line
    return {f"{path}:{line}": value for line, value in by_line.items() if line in lines}


# --- the test program: evalplus's unsafe_execute comparison, for one row

# Every name the program binds starts with `_la_`: the harness sends each name the tests use without
# binding to the candidate, so a helper named like an entry point (MBPP+'s Mbpp/56 is `check`,
# HumanEval's tests define `check`) would hide it. The entry point is called by name at module level.
_ORACLES = """
# Both sides of every comparison are plain data the harness decoded (the candidate's values cross
# its wire as base types), so Python's `==` runs no candidate code. It is spelt `_la_op.eq`: the
# harness rewrites each `==` of the tests into its type-strict `strict_eq` (True != 1), and evalplus
# compares with Python's (HumanEval/147's canonical answers False for a count, so a right `0`
# failed). Built-ins are called through `_la_b`: an entry point named like one (MBPP+'s `sum`)
# is the candidate's function everywhere in the tests.
def _la_poly(xs, x):
    # evalplus/eval/_special_oracle.py: HumanEval/32
    return _la_b.sum([coeff * _la_math.pow(x, i) for i, coeff in _la_b.enumerate(xs)])


def _la_surface_Area(base_edge, height):
    # evalplus/eval/_special_oracle.py: Mbpp/581
    slant_height = _la_math.sqrt((base_edge / 2) ** 2 + height**2)
    base_area = base_edge**2
    lateral_area = 4 * (base_edge * slant_height) / 2
    return _la_b.round(base_area + lateral_area)


def _la_digit_distance_nums(num1, num2):
    # evalplus/eval/_special_oracle.py: Mbpp/558
    str_num1, str_num2 = _la_b.str(num1), _la_b.str(num2)
    max_length = _la_b.max(_la_b.len(str_num1), _la_b.len(str_num2))
    str_num1, str_num2 = str_num1.zfill(max_length), str_num2.zfill(max_length)
    return _la_b.sum(_la_b.abs(_la_b.int(a) - _la_b.int(b)) for a, b in _la_b.zip(str_num1, str_num2))


def _la_is_floats(x):
    if _la_b.isinstance(x, _la_b.float):
        return True
    if _la_b.isinstance(x, (_la_b.list, _la_b.tuple)) and x:
        return _la_b.all(_la_b.isinstance(i, _la_b.float) for i in x)
    return False


def _la_equal(out, exp, inp, atol):
    # evalplus/eval/__init__.py unsafe_execute's check of one output
    exact_match = _la_op.eq(out, exp)
    if _LA_DATASET == "mbpp":
        if _LA_ENTRY_POINT == "are_equivalent":
            exact_match = True
        elif _LA_ENTRY_POINT == "sum_div":
            exact_match = exact_match or _la_op.eq(out, 0)
        elif _LA_ENTRY_POINT == "surface_Area":
            exact_match = exact_match or _la_b.abs(out - _la_surface_Area(*inp)) <= atol
        elif _LA_ENTRY_POINT == "digit_distance_nums":
            exact_match = exact_match or _la_op.eq(out, _la_digit_distance_nums(*inp))
        elif _LA_ENTRY_POINT in _LA_SET_EQ:
            exact_match = _la_op.eq(_la_b.set(out), _la_b.set(exp))
        elif _LA_ENTRY_POINT in _LA_NOT_NONE:
            if _la_b.isinstance(out, _la_b.bool):
                exact_match = _la_op.eq(out, exp)
            else:
                exact_match = _la_op.eq(exp, out is not None)
    if _LA_DATASET == "humaneval" and _LA_ENTRY_POINT == "find_zero":
        return _la_b.abs(_la_poly(*inp, out)) <= atol
    if atol == 0 and _la_is_floats(exp):
        atol = 1e-6
    if not exact_match and atol != 0:
        if _la_b.type(out) is not _la_b.type(exp):
            return False
        if _la_b.isinstance(exp, (_la_b.list, _la_b.tuple)) and _la_b.len(out) != _la_b.len(exp):
            return False
        return _la_b.bool(_la_np.allclose(out, exp, rtol=1e-07, atol=atol))
    return _la_b.bool(exact_match)
"""

# evalplus/eval/__init__.py unsafe_execute: `with time_limit(time_limits[i]): out = fn(*inp)`, a
# SIGALRM timer (evalplus/eval/utils.py time_limit). The tests run in the harness's main thread; the
# timer interrupts its wait for the candidate's reply, and the tests end there: a wrong answer, and
# the verdict ends with them (the program's one limit, up to 122 s, no longer bounds a loop). The
# seconds are also read after the call: a reply that came after the limit fails too, whatever
# caught the timer's exception on the way.
_TIMER = """
class _la_InputTimeout(_la_b.AssertionError):
    pass


def _la_on_alarm(signum, frame):
    raise _la_InputTimeout("over its time limit")


def _la_timed(fn, inp, i):
    if _la_limits is None:
        return fn(*inp)
    limit = _la_limits[i]
    old = _la_signal.signal(_la_signal.SIGALRM, _la_on_alarm)
    start = _la_time.monotonic()
    _la_signal.setitimer(_la_signal.ITIMER_REAL, limit)
    try:
        out = fn(*inp)
    except _la_InputTimeout:
        raise _la_InputTimeout(f"input {i} ({_la_b.str(inp)[:100]}): over its {limit} s limit") from None
    finally:
        _la_signal.setitimer(_la_signal.ITIMER_REAL, 0)
        _la_signal.signal(_la_signal.SIGALRM, old)
    took = _la_time.monotonic() - start
    if took > limit:
        raise _la_InputTimeout(f"input {i} ({_la_b.str(inp)[:100]}): {took:.1f} s, over its {limit} s limit")
    return out
"""

# The first line of a test built here: such a row is no longer a release row (see is_release_row).
TEST_HEADER = "# evalplus release row: every base and plus input, graded as evalplus grades them\n"


def input_time_limits(times: list[float]) -> list[float]:
    """Seconds each input gets, from the reference's seconds on it: ``max(4 s, 4 x its time)``, as
    evalplus's ``untrusted_check`` sizes ``time_limits`` (``DEFAULT_MIN_TIME_LIMIT``,
    ``DEFAULT_GT_TIME_LIMIT_FACTOR``, ``evalplus/config.py`` @ 26d6d00)."""
    return [round(max(EVALPLUS_MIN_TIME_LIMIT_S, EVALPLUS_TIME_FACTOR * t), 3) for t in times]


def evalplus_budget(times: list[float], n_base: int) -> float:
    """Seconds evalplus's ``untrusted_check`` gives a candidate on a row whose reference took
    ``times`` per input, the first ``n_base`` of them the base inputs: each of its two runs (base,
    then plus inputs; one with no inputs is not counted) ``min(60 s, the sum of its inputs' limits)
    + 1 s`` (``evalplus/eval/__init__.py`` @ 26d6d00, ``timeout = min(EVALPLUS_TIMEOUT_PER_TASK,
    sum(time_limits)) + 1``), so at most :data:`EVALPLUS_TIME_CAP_S`."""
    runs = [times[:n_base], times[n_base:]]
    return round(sum(min(60.0, sum(input_time_limits(run))) + 1.0 for run in runs if run), 3)


def evalplus_test(row: dict[str, Any], inputs: list, expected: list, times: list[float] | None = None) -> str:
    """The test program of one release row: every input, its expected output and evalplus's
    comparison (see the module docstring); it calls the entry point by name at module level.

    With ``times`` (the reference's seconds per input), each call gets its own limit
    (:func:`input_time_limits`, a ``SIGALRM`` timer in the harness, as evalplus's ``time_limit``):
    the first input over it fails the program, so a looping candidate costs that limit, not the
    whole program's."""
    task_id = str(row.get("task_id", ""))
    entry_point = row["entry_point"]
    # compact JSON (a quarter fewer bytes to parse in every verdict), read by _la_tagged
    encoded_inputs = json.dumps(json.dumps([_la_encode(i) for i in inputs], separators=(",", ":")))
    encoded_expected = json.dumps(json.dumps(expected, separators=(",", ":")))
    limits = None if times is None else input_time_limits(times)
    return (
        f"{TEST_HEADER}import builtins as _la_b\nimport json as _la_json\nimport math as _la_math\n"
        "import operator as _la_op\nimport signal as _la_signal\nimport time as _la_time\n\n"
        "import numpy as _la_np\n\n"
        f"{_CODEC}\n\n"
        f"_LA_DATASET = {_dataset(task_id)!r}\n_LA_ENTRY_POINT = {entry_point!r}\n_LA_ATOL = {_atol(row)!r}\n"
        f"_LA_SET_EQ = {MBPP_OUTPUT_SET_EQ_TASKS!r}\n_LA_NOT_NONE = {MBPP_OUTPUT_NOT_NONE_TASKS!r}\n"
        f"_la_inputs = _la_json.loads({encoded_inputs}, object_hook=_la_tagged)\n"
        f"_la_results = _la_json.loads({encoded_expected}, object_hook=_la_tagged)\n"
        f"_la_limits = {limits!r}\n"
        f"{_ORACLES}\n{_TIMER}\n\n"
        "for _la_i, (_la_inp, _la_exp) in _la_b.enumerate(_la_b.zip(_la_inputs, _la_results)):\n"
        f"    _la_out = _la_timed({entry_point}, _la_inp, _la_i)\n"
        "    assert _la_equal(_la_out, _la_exp, _la_inp, _LA_ATOL), (\n"
        '        f"input {_la_i} ({_la_b.str(_la_inp)[:100]}): out {_la_b.str(_la_out)[:100]}, "\n'
        '        f"exp {_la_b.str(_la_exp)[:100]}"\n'
        "    )\n"
    )


# evalplus/eval/utils.py swallow_io: the candidate's prints go nowhere (here they would count
# against the sandbox's output cap, and a right program printing in a loop failed). One statement
# that binds no name of the program's: the candidate's globals stay as it wrote them. The writer
# takes text only, as swallow_io's StringIO does (its own write, so bytes raise the same
# TypeError); sys.__stdout__/__stderr__ are dropped too: in evalplus they are the process's own
# streams, harmless, and here they counted against the cap (EFBIG, a right program scored 0).
DISCARD_PRINTS = (
    '__import__("sys").stdout = __import__("sys").stderr = __import__("sys").__stdout__ = '
    '__import__("sys").__stderr__ = type("_LaDiscard", (__import__("io").TextIOBase,), '
    '{"write": lambda self, text, _la_s=__import__("io").StringIO: _la_s().write(text), '
    '"writable": lambda self: True})()'
)


def discard_prints(code: str) -> str:
    """``code`` with :data:`DISCARD_PRINTS` first (after its module docstring, kept as its
    ``__doc__``, and its ``from __future__`` imports, which must come first:
    :func:`~lightning_agents.rewards.code.insert_first`): what the program writes to
    ``sys.stdout``/``sys.stderr`` (and ``sys.__stdout__``/``sys.__stderr__``) is dropped, as
    evalplus's ``swallow_io`` drops it. Code that does not parse is returned as it is (it fails
    to compile either way)."""
    from lightning_agents.rewards.code import insert_first

    return insert_first(code, DISCARD_PRINTS)


def release_tests(
    path: Path, rows: list[tuple[str, dict[str, Any]]], cache_dir: str | Path | None = "default"
) -> list[tuple[str, dict[str, Any]]]:
    """``rows`` with each release row's ``test`` replaced by its evalplus test program (HumanEval's
    base ``check()`` or MBPP's asserts are a subset of it); other rows as they are. A row whose
    canonical solution hit a limit of :data:`REFERENCE_LIMITS` is left out, with one warning
    naming the file, the count and the first such row.

    Raises:
        TaskDataError: as :func:`expected_outputs`.
    """
    if not any(is_release_row(row) for _, row in rows):
        return rows
    found = expected_outputs(path, rows, cache_dir)
    skipped = [
        f"{where}: {found[where]['skip']}" for where, row in rows if is_release_row(row) and "skip" in found[where]
    ]
    if skipped:
        log.warning(
            "%s: skipped %d evalplus row(s) that cannot be graded here; first: %s", path, len(skipped), skipped[0]
        )
    out = []
    for where, row in rows:
        if is_release_row(row) and "skip" in found[where]:
            continue
        if is_release_row(row):
            inputs = _inputs(row, where)
            times = found[where]["times"]
            row = {
                **row,
                "test": evalplus_test(row, inputs, found[where]["out"], times),
                "evalplus_ref_s": sum(times),
                "evalplus_budget_s": evalplus_budget(times, len(_field_inputs(row, "base_input", where))),
            }
        out.append((where, row))
    return out
