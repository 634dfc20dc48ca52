"""`make pytest`: the suite in lanes, sharing the cores, each lane's failures reported.

- main: every test not marked `subprocess` or `default_emitters`, on `--workers` xdist workers
  (default 2), with a table case's tests grouped on one worker (`--dist loadgroup`, see
  tests/conftest.py), compiled with XLA:CPU's classic emitter (`EMITTER_FLAG`).
- processes: the tests marked `subprocess` (mkdocs build, notebooks, kill -9 checkpoints, the
  2-process run, the demo, benchmark smoke runs, Optax's suite subset) or `default_emitters`,
  one at a time: they mostly wait on the processes they start.

- oldest / newest (the version lanes, with `--python oldest=PATH newest=PATH`): a representative
  subset (`VERSION_SUBSET` narrowed by `VERSION_KEYWORDS`: every alias and contrib optimizer
  against its reference, compiled; checkpoints, sharding on 8 host devices, configs, the demo at
  a few steps) run by another interpreter: the oldest supported set (Python 3.10,
  constraints-oldest.txt) and what pip resolves today with no pins (Python 3.12). Their pytest
  header prints the versions. `make test` builds both venvs.

The lanes share the machine's cores through slots (`--slots`, default one more than the main
lane's workers): a lane takes one slot, the main lane one per worker, and a lane starts when its
slots are free, the longest first (the main lane and the processes lane at once, then newest
and oldest as earlier lanes end). More processes than cores only slow each other down (the
2-core CI machine ran five at once before: 4,063 CPU-seconds for the four lanes and the set-up,
against 3,604 for the four lanes each alone).

Usage: `python -m tests.lanes [--workers N] [--slots N] [--lane LANE] [--python LANE=PATH]
[pytest args...]`; the pytest arguments (e.g. `-k adam`, `-x`) go to every lane. Each lane's
output streams with its name in front; at the end each lane's summary is printed again and the
exit status is non-zero if any lane failed. Nothing is dropped: together main and processes run
every test of `pytest tests`.
"""

from __future__ import annotations

import argparse
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LANES = ("main", "processes")
VERSION_LANES = ("oldest", "newest")

# What the version lanes run: each module's own reference checks (Optax, NumPy transcriptions;
# the torch ones are skipped where torch is missing), with the version-sensitive parts of the
# library: checkpoints, shardings, configs and the command line, the demo.
VERSION_SUBSET = (
    "tests/optimizers",
    "tests/contrib",
    "tests/schedules",
    "tests/test_checkpoint.py",
    "tests/test_migrate.py",
    "tests/distributed/test_sharding.py",
    "tests/config",
    "tests/test_demo.py::test_demo_runs_a_subset_from_another_config",
)
# Within the optimizer modules the version lanes run the reference checks, compiled: a test
# whose name says what it is compared with (Optax, torch, a NumPy or paper rule; 8-bit and bf16
# states following float32), not its eager twin. The version-sensitive files run whole. The
# main lane runs everything on the main venv. tests/test_lanes.py checks that every optimizer
# module keeps a check here.
VERSION_KEYWORDS = (
    "(optax or pytorch or torch or reference or rule or paper or psgd or numpy or published "
    "or against or matches or follow) and not eager "
    "or test_checkpoint or test_migrate or test_sharding or config or test_demo or schedules"
)
# Known version-specific deviations, each with its measurement (none at present: MoMo's adaptive
# cases, 1.07e-6 from float64 on jax 0.6.2 and 1.53e-6 on jax 0.12.1, are inside the tolerance
# tests/contrib/test_momo.py justifies by Optax's own eager-vs-jit spread).
VERSION_DESELECT: dict[str, tuple[str, ...]] = {
    "oldest": (),
    "newest": (),
}


# The processes lane's tests: those that start processes, and those that need jax's default
# XLA:CPU emitters (the main lane compiles with the classic one, see EMITTER_FLAG).
PROCESSES_MARKERS = "(subprocess or default_emitters)"
# The order lanes start in as slots come free: the longest first.
ORDER = ("main", "processes", "newest", "oldest")


def lane_command(
    lane: str, workers: int, extra: list[str], python: str = sys.executable
) -> list[str]:
    if lane in VERSION_LANES:
        deselect = [f"--deselect={t}" for t in VERSION_DESELECT[lane]]
        keywords, extra = _merge_keywords(VERSION_KEYWORDS, extra)
        return [
            python, "-m", "pytest", *VERSION_SUBSET, "-p", "no:xdist", *deselect,
            "-k", keywords, *extra,
        ]  # fmt: skip
    base = [python, "-m", "pytest", "tests"]
    if lane == "main":
        parallel = (
            ["-n", str(workers), "--dist", "loadgroup"] if workers > 1 else ["-p", "no:xdist"]
        )
        return [*base, *parallel, "-m", f"not {PROCESSES_MARKERS}", *extra]
    return [*base, "-p", "no:xdist", "-m", PROCESSES_MARKERS, *extra]


def _merge_keywords(keywords: str, extra: list[str]) -> tuple[str, list[str]]:
    """`keywords` and any `-k EXPR` / `-kEXPR` / `-k=EXPR` of `extra` as one expression (pytest
    keeps only the last -k), and `extra` without them."""
    rest, given = [], []
    items = iter(extra)
    for item in items:
        if item == "-k":
            given.append(next(items, ""))
        elif item.startswith("-k"):
            given.append(item[2:].removeprefix("="))
        else:
            rest.append(item)
    return " and ".join(f"({k})" for k in (keywords, *given) if k), rest


# The lanes of this interpreter (main, processes and every process they start: xdist workers,
# notebooks' kernels, the demo, kill -9 checkpoints) share one persistent compilation cache for
# the run: a program or eager operation compiled by one of them (by XLA, optimized) is loaded by
# the next instead of compiled again. The cache is new for every run and removed at its end, so
# every program is still compiled once per run; JAX_COMPILATION_CACHE_DIR already set (a local
# loop keeping its cache) is used as given, with JAX's own thresholds unless set too. The
# version lanes run other jax versions (their programs would not hit). No size bound: a bound
# turns on JAX's eviction, which scans the folder on every write (1,000 eager operations: 131 s
# against 49 s unbounded); unbounded, writes are not locked, and an entry read while another
# process still writes it fails to decompress, which JAX reports as a warning and compiles
# instead.
CACHE_LANES = LANES
CACHE_ENV = {
    "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",  # eager operations too (~45 ms each)
    "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0",
}


# The main lane compiles with XLA:CPU's classic kernel emitter instead of the MLIR fusion emitters
# jax switched on for CPU in 0.7: the same optimized HLO (the same fusions; the fusion emitters only
# wrap a lone scalar operation in a one-operation fusion of its own, compared on
# `compiled.as_text()` of six table cases), lowered to LLVM at the same optimization level. An
# optimizer's step compiles in about half the time (eight table cases: 7.1-8.8 s -> 3.9-4.4 s), an
# eager operation in 42 ms instead of 53 (a 20-deep chain of elementwise operations in one fusion is
# slower: 1.6 s -> 2.5 s); the main and processes lanes together took 2,104 CPU-seconds against
# 2,948 with the default emitters, and CI 28.5 minutes against 37.9. Values may differ in the last
# bits (within every tolerance; a claim of bit-identity between two programs takes the
# `default_emitters` marker and runs in the processes lane). The processes lane (notebooks, the
# demo, the wheel: what users run) and the version lanes keep their jax's default emitters;
# `--fusion-emitters` keeps them in the main lane too, as does an XLA_FLAGS that already names the
# flag.
EMITTER_FLAG = "--xla_cpu_use_fusion_emitters=false"
EMITTER_LANES = ("main",)


def emitter_env(env: dict[str, str]) -> dict[str, str]:
    """`env` with XLA:CPU's classic emitter (unless its XLA_FLAGS choose the emitters already)."""
    flags = env.get("XLA_FLAGS", "")
    if "xla_cpu_use_fusion_emitters" in flags:
        return env
    return {**env, "XLA_FLAGS": f"{flags} {EMITTER_FLAG}".strip()}


def cache_env(env: dict[str, str], cache_dir: str | None) -> dict[str, str]:
    """`env` with the run's compilation cache in `cache_dir` (none: `env` as it is)."""
    if cache_dir is None:
        return env
    return {**CACHE_ENV, **env, "JAX_COMPILATION_CACHE_DIR": cache_dir}


def lane_slots(lane: str, workers: int) -> int:
    """The slots (cores) a lane keeps busy: the main lane one per xdist worker, the others one."""
    return max(1, workers) if lane == "main" else 1


def startable(waiting: list[str], busy: int, slots: int, workers: int) -> list[str]:
    """The waiting lanes to start now, in order, with `busy` slots taken: each while its slots
    fit in `slots`; the first one in any case when nothing runs (a lane wider than `slots`)."""
    start: list[str] = []
    for lane in waiting:
        need = lane_slots(lane, workers)
        if busy + need > slots and (busy or start):
            break
        start.append(lane)
        busy += need
    return start


def _pump(
    name: str,
    proc: subprocess.Popen,
    lines: list[str],
    lock: threading.Lock,
    done: queue.Queue[tuple[str, float]],
) -> None:
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.append(line)
        with lock:
            sys.stdout.write(f"[{name}] {line}")
            sys.stdout.flush()
    proc.wait()
    done.put((name, time.perf_counter()))


def _summary(lines: list[str]) -> list[str]:
    """The lane's closing sections: from the first summary banner on."""
    for i, line in enumerate(lines):
        if line.startswith("=") and any(
            k in line for k in ("short test summary", "XLA compilations", "FAILURES", "ERRORS")
        ):
            return lines[i:]
    return lines[-3:]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=2, help="xdist workers of the main lane")
    parser.add_argument(
        "--slots",
        type=int,
        default=None,
        help="lanes run while their slots fit (main: one per worker, others: one); "
        "default: workers + 1",
    )
    parser.add_argument(
        "--lane", choices=LANES + VERSION_LANES, action="append", help="run only this lane"
    )
    parser.add_argument(
        "--no-compilation-cache",
        action="store_true",
        help="compile every program in every process (no shared persistent cache)",
    )
    parser.add_argument(
        "--fusion-emitters",
        action="store_true",
        help="compile with XLA:CPU's default (MLIR fusion) emitters, not the classic one",
    )
    parser.add_argument(
        "--python",
        action="append",
        default=[],
        metavar="LANE=PATH",
        help="the interpreter of a version lane (oldest, newest); a lane given one runs",
    )
    args, extra = parser.parse_known_args(argv)
    pythons: dict[str, str] = {}
    for item in args.python:
        lane, sep, path = item.partition("=")
        if lane not in VERSION_LANES or not sep or not path:
            parser.error(f"--python takes LANE=PATH with LANE one of {VERSION_LANES}, got {item!r}")
        pythons[lane] = path
    lanes = sorted(args.lane or [*LANES, *pythons], key=ORDER.index)
    missing = [lane for lane in lanes if lane in VERSION_LANES and lane not in pythons]
    if missing:
        parser.error(f"the lanes {missing} need --python LANE=PATH")
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    use_cache = not args.no_compilation_cache and "JAX_COMPILATION_CACHE_DIR" not in env
    cache_dir = tempfile.mkdtemp(prefix="gradtx-jax-cache-") if use_cache else None
    try:
        slots = args.slots if args.slots is not None else max(1, args.workers) + 1
        return _run(
            lanes, pythons, args.workers, slots, extra, env, cache_dir, args.fusion_emitters
        )
    finally:
        if cache_dir is not None:
            shutil.rmtree(cache_dir, ignore_errors=True)


def _run(
    lanes: list[str],
    pythons: dict[str, str],
    workers: int,
    slots: int,
    extra: list[str],
    env: dict[str, str],
    cache_dir: str | None,
    fusion_emitters: bool = False,
) -> int:
    lock = threading.Lock()
    done: queue.Queue[tuple[str, float]] = queue.Queue()
    started: dict[str, float] = {}
    ended: dict[str, float] = {}
    procs: dict[str, tuple[subprocess.Popen, list[str], threading.Thread]] = {}
    codes: dict[str, int] = {}
    waiting = list(lanes)
    first = time.perf_counter()

    def start(lane: str) -> None:
        cmd = lane_command(lane, workers, extra, pythons.get(lane, sys.executable))
        with lock:
            print(f"[{lane}] {' '.join(cmd[1:])}", flush=True)
        lane_env = cache_env(env, cache_dir if lane in CACHE_LANES else None)
        if lane in EMITTER_LANES and not fusion_emitters:
            lane_env = emitter_env(lane_env)
        proc = subprocess.Popen(
            cmd, cwd=ROOT, env=lane_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        lines: list[str] = []
        pump = threading.Thread(target=_pump, args=(lane, proc, lines, lock, done), daemon=True)
        started[lane] = time.perf_counter()
        pump.start()
        procs[lane] = (proc, lines, pump)

    try:
        while waiting or len(codes) < len(procs):
            busy = sum(lane_slots(k, workers) for k in procs if k not in codes)
            for lane in startable(waiting, busy, slots, workers):
                waiting.remove(lane)
                start(lane)
            lane, at = done.get()
            proc, _, pump = procs[lane]
            pump.join()
            codes[lane] = proc.returncode
            ended[lane] = at
    except KeyboardInterrupt:
        for proc, _, _ in procs.values():
            proc.terminate()
        raise
    # pytest's 5 = no tests collected: fine when the arguments narrow the run (-k matching
    # nothing in one lane), a failure otherwise (a lane that lost its tests)
    passing = (0, 5) if extra else (0,)
    for lane, (_, lines, _) in procs.items():
        ok = codes[lane] in passing
        print(
            f"\n===== lane {lane}: {'passed' if ok else 'FAILED'} (exit {codes[lane]}, "
            f"{ended[lane] - started[lane]:.0f} s, from {started[lane] - first:.0f} s "
            f"to {ended[lane] - first:.0f} s) ====="
        )
        sys.stdout.writelines(_summary(lines))
    failed = [lane for lane in procs if codes[lane] not in passing]
    print(
        f"\nlanes ({slots} slots, {time.perf_counter() - first:.0f} s in all): "
        f"{', '.join(f'{k} {ended[k] - started[k]:.0f} s' for k in procs)}; "
        f"{'failed: ' + ', '.join(failed) if failed else 'all passed'}"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
