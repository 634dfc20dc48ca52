"""`make pytest`: the suite in lanes, sharing the cores, each lane's failures reported.

- main: every test not marked `subprocess` or `default_emitters`, on `--workers` xdist workers
  (default 2), with a table case's tests grouped on one worker (`--dist loadgroup`, see
  tests/conftest.py), compiled with XLA:CPU's classic emitter (`EMITTER_FLAG`).
- processes: the tests marked `subprocess` (mkdocs build, notebooks, kill -9 checkpoints, the
  2-process run, the demo, benchmark smoke runs, Optax's suite subset) or `default_emitters`,
  one at a time: they mostly wait on the processes they start.

- oldest / newest (the version lanes, with `--python oldest=PATH newest=PATH`): only what can
  differ between versions (the tests marked `across_versions`: every optimizer once against its
  reference, compiled; the schedules' references; the config round trip; checkpoints; shardings
  and the sharded table; the demo at a few steps) run by another interpreter: the oldest
  supported set (Python 3.10, constraints-oldest.txt) and what pip resolves today with no pins
  (Python 3.12).
  Their pytest header prints the versions. `make test` builds both venvs.

The lanes share the machine's cores through slots (`--slots`, default one more than the main
lane's workers): a lane takes one slot, the main lane one per worker, and a lane starts when its
slots are free, the longest first (the main lane and the processes lane at once, then newest
and oldest as earlier lanes end). The last lane to start, a version lane, takes the free slots
(up to `--workers`) as xdist workers (`lane_workers`), so that the run does not end on one busy
core. More processes than cores only slow each other down (the 2-core CI machine ran five at
once before: 4,063 CPU-seconds for the four lanes and the set-up, against 3,604 for the four
lanes each alone).

Usage: `python -m tests.lanes [--workers N] [--slots N] [--lane LANE] [--python LANE=PATH]
[pytest args...]`; the pytest arguments (e.g. `-k adam`, `-x`) go to every lane. Each lane's
output streams with its name in front; at the end each lane's summary is printed again and the
exit status is non-zero if any lane failed. Nothing is dropped: together main and processes run
every test of `pytest tests`.

The run ends with its test-time budget: each lane's wall and CPU seconds (the CPU of the lane's
processes and the processes they waited for), the total against `BUDGET_CPU_S`, and the ten
slowest test files (from each lane's JUnit XML report, summed over the lanes). Over the budget
it warns, naming the files that grew since the last full run of the same lanes (`record_path`, under
.pytest_cache), but does not fail.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pytest

ROOT = Path(__file__).resolve().parent.parent
LANES = ("main", "processes")
VERSION_LANES = ("oldest", "newest")

# What the version lanes run: only what can differ between jax / numpy / optax versions, each
# once. A test says so itself with the `across_versions` marker (a file with `pytestmark`), and
# `version_subset()` reads those markers from the test files' source. The lanes collect only
# those files and run `-m version_lane`: tests/conftest.py gives that marker to the compiled
# cases of the marked tests (`in_version_subset`). A case whose id has an `eager` part
# (`[eager-adam]`, `[adam-eager]`) is the same comparison without jit, left to the main lane
# (every optimizer that has an eager case has a jit one too); `pytest tests -m version_lane`
# shows the selection. What is marked:
# - every optimizer once against its reference, compiled: each alias and contrib module's
#   reference test (Optax, a NumPy transcription of the paper or the seed system; the torch
#   references are skipped where torch is missing, as in the lanes' venvs, and those optimizers
#   run there in the sharded table, every table case sharded against unsharded);
# - the schedules' reference tests and their integer-step edge cases, and their plots;
# - the config round trip; checkpoints and their migration; shardings and the sharded table on
#   8 host devices; the demo at a few steps.
# The main lane runs all of it, and everything else, on the main venv. tests/test_lanes.py
# checks that every module of gradtx/optimizers, gradtx/contrib and gradtx/schedules keeps a
# marked test (by `tests.check.source_tests`, the mapping `make check` uses).
VERSION_DECLARATION = "across_versions"
VERSION_MARKER = "version_lane"
# Known version-specific deviations, each with its measurement (MoMo's adaptive cases, 1.07e-6
# from float64 on jax 0.6.2 and 1.53e-6 on jax 0.12.1, are inside the tolerance
# tests/contrib/test_momo.py justifies by Optax's own eager-vs-jit spread).
VERSION_DESELECT: dict[str, tuple[str, ...]] = {
    "oldest": (),
    # jax 0.12.1: dion's sharded update 2 ends 1.66e-6 from the unsharded one on 2 of 64
    # elements (tolerance 1e-6; its QR orthogonalisation under a sharded matmul); jax 0.10.2
    # (the main lane) and 0.6.2 agree to 1e-6.
    "newest": ("tests/distributed/test_table.py::test_sharded_jit_equals_unsharded[dion]",),
}


# The processes lane's tests: those that start processes, and those that need jax's default
# XLA:CPU emitters (the main lane compiles with the classic one, see EMITTER_FLAG).
PROCESSES_MARKERS = "(subprocess or default_emitters)"
# The order lanes start in as slots come free: the longest first.
ORDER = ("main", "processes", "newest", "oldest")


def version_subset(root: Path = ROOT) -> dict[str, tuple[str, ...]]:
    """The tests marked `across_versions`, read from the source of tests/**/test_*.py: each file
    that has some, with the names of its marked tests, `()` for a file whose `pytestmark` has it."""
    import ast

    def marks(node: ast.AST) -> int:
        return sum(
            isinstance(sub, ast.Attribute) and sub.attr == VERSION_DECLARATION
            for sub in ast.walk(node)
        )

    def marked(decorators: list[ast.expr]) -> bool:
        return any(marks(node) for node in decorators)

    subset: dict[str, tuple[str, ...]] = {}
    for path in sorted((root / "tests").rglob("test_*.py")):
        source = path.read_text()
        if VERSION_DECLARATION not in source:
            continue
        tree = ast.parse(source)
        module_marks = [
            node.value
            for node in tree.body
            if isinstance(node, ast.Assign)
            and any(getattr(t, "id", None) == "pytestmark" for t in node.targets)
        ]
        functions = [
            node for node in tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        ]
        whole = marked(module_marks)
        names = tuple(node.name for node in functions if marked(node.decorator_list))
        read = sum(marks(n) for n in module_marks) + sum(
            marks(d) for node in functions for d in node.decorator_list
        )
        if marks(tree) != read:  # e.g. on a class or a method, or in a variable
            raise ValueError(
                f"{path}: `{VERSION_DECLARATION}` marks a test function or the module's "
                "`pytestmark` only (tests.lanes.version_subset reads those)"
            )
        if whole or names:
            subset[path.relative_to(root).as_posix()] = () if whole else names
    return subset


def in_version_subset(item: pytest.Item) -> bool:
    """Whether the version lanes run the collected test `item`: it is marked `across_versions`
    (itself or its file) and it is not an eager case."""
    if item.get_closest_marker(VERSION_DECLARATION) is None:
        return False
    params = item.nodeid.partition("::")[2].partition("[")[2].removesuffix("]")
    return "eager" not in params.split("-")


def lane_command(
    lane: str, workers: int, extra: list[str], python: str = sys.executable
) -> list[str]:
    """The lane's pytest command; `workers`: its xdist workers (the processes lane runs one).

    The main lane keeps each table case's tests on one worker (`--dist loadgroup`); a version
    lane sends each file to one worker (`--dist loadfile`), which keeps the sharded table's one
    program on one worker without xdist's groups, which the pytest of its venv may ignore
    (pytest 9.2, pytest-xdist #1386; tests/conftest.py refuses `loadgroup` there)."""
    if workers <= 1:
        parallel = ["-p", "no:xdist"]
    else:
        dist = "loadfile" if lane in VERSION_LANES else "loadgroup"
        parallel = ["-n", str(workers), "--dist", dist]
    if lane in VERSION_LANES:
        deselect = [f"--deselect={t}" for t in VERSION_DESELECT[lane]]
        markers, extra = _merge_option("-m", VERSION_MARKER, extra)
        return [
            python, "-m", "pytest", *version_subset(), *parallel, *deselect,
            "-m", markers, *extra,
        ]  # fmt: skip
    base = [python, "-m", "pytest", "tests"]
    if lane == "main":
        return [*base, *parallel, "-m", f"not {PROCESSES_MARKERS}", *extra]
    return [*base, "-p", "no:xdist", "-m", PROCESSES_MARKERS, *extra]


def _merge_option(flag: str, expression: str, extra: list[str]) -> tuple[str, list[str]]:
    """`expression` and any `FLAG EXPR` / `FLAGEXPR` / `FLAG=EXPR` of `extra` (`-m`, `-k`) as one
    expression (pytest keeps only the last), and `extra` without them."""
    rest, given = [], []
    items = iter(extra)
    for item in items:
        if item == flag:
            given.append(next(items, ""))
        elif item.startswith(flag):
            given.append(item[len(flag) :].removeprefix("="))
        else:
            rest.append(item)
    return " and ".join(f"({e})" for e in (expression, *given) if e), rest


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
    """The slots (cores) a lane needs to start: the main lane one per xdist worker, the others
    one."""
    return max(1, workers) if lane == "main" else 1


def lane_workers(lane: str, workers: int, free: int, last: bool, xdist: bool) -> int:
    """The xdist workers a lane starts with, `free` slots being free when it starts: the main
    lane `workers`, the processes lane one; a version lane one, or, when it is the `last` lane to
    start and its interpreter has xdist, the free slots up to `workers`: the run's last lane
    would otherwise keep one core busy while the other waits (on 2 cores the oldest lane ran
    alone for its last ~150 s)."""
    if lane in VERSION_LANES and last and xdist:
        return max(1, min(free, workers))
    return lane_slots(lane, workers)


def has_xdist(python: str) -> bool:
    """Whether `python` can import pytest-xdist (the version lanes' venvs install it)."""
    probe = [python, "-c", "import xdist"]
    return subprocess.run(probe, capture_output=True, check=False).returncode == 0


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


# The test-time budget of one run of the lanes, all lanes together, in CPU-seconds. The target
# is CI within 20 minutes on its 2-core machine: 2 x 1,200 = 2,400 core-seconds, less about 300
# for what `make test` does before the lanes (the three venvs' installs, lint and a cold mypy),
# leaves 2,100 for the lanes. Lanes do not keep both cores busy all the time, so a run at the
# budget is at the target, not under it. Over the budget the run warns; it does not fail.
BUDGET_CPU_S = 2100
# The numbers of the last full run of a set of lanes (no pytest arguments narrowing it, every
# lane passed), which an over-budget run of the same lanes compares its test files with; git
# ignores .pytest_cache.
RECORDS = ROOT / ".pytest_cache" / "gradtx-lanes"
SLOWEST = 10


def report_file(classname: str) -> str:
    """The test file of a JUnit `classname` (`tests.contrib.test_soap`, or with a class after
    the module: `tests.test_core.TestChain`): its parts up to the first `test_` module."""
    parts = classname.split(".")
    for i, part in enumerate(parts):
        if part.startswith("test_"):
            return "/".join(parts[: i + 1]) + ".py"
    return "/".join(parts) + ".py" if classname else "(collection)"


def file_seconds(*reports: str) -> dict[str, float]:
    """Seconds per test file (setup, call and teardown of its tests) summed over pytest JUnit XML
    `reports` (their text)."""
    seconds: dict[str, float] = {}
    for text in reports:
        for case in ET.fromstring(text).iter("testcase"):
            path = report_file(case.get("classname", ""))
            seconds[path] = seconds.get(path, 0.0) + float(case.get("time") or 0.0)
    return seconds


def grown_files(
    files: dict[str, float], before: dict[str, float], least: float = 1.0
) -> list[tuple[str, float, float]]:
    """`(file, seconds before, seconds now)` of the files that take at least `least` seconds
    more than `before` (a new file: from 0), the largest growth first, at most `SLOWEST`."""
    grown = [
        (f, before.get(f, 0.0), s) for f, s in files.items() if s - before.get(f, 0.0) >= least
    ]
    return sorted(grown, key=lambda g: g[2] - g[1], reverse=True)[:SLOWEST]


def budget_report(
    lanes: dict[str, tuple[float, float]],
    files: dict[str, float],
    previous: dict | None,
    budget: float = BUDGET_CPU_S,
) -> list[str]:
    """The run's budget lines: each lane's `(wall, CPU)` seconds, the total CPU against `budget`,
    the `SLOWEST` test files of `files`, and over the budget a warning naming the files that grew
    since `previous` (a record of the same lanes: `{"lanes": {...}, "files": {...}}`)."""
    total = sum(cpu for _, cpu in lanes.values())
    lines = ["test-time budget (wall s, CPU s):"]
    lines += [f"  {k:<10} {w:>7,.0f} s {c:>8,.0f} CPU-s" for k, (w, c) in lanes.items()]
    lines.append(
        f"  {'total':<10} {'':>9} {total:>8,.0f} CPU-s of a {budget:,.0f} CPU-s budget "
        f"({total / budget:.0%})"
    )
    slow = sorted(files.items(), key=lambda f: -f[1])[:SLOWEST]
    if slow:
        lines.append(f"the slowest test files (test seconds, all lanes; at most {SLOWEST}):")
        lines += [f"  {s:>7,.0f} s  {f}" for f, s in slow]
    else:
        lines.append("no JUnit report came back: no per-file times")
    if total <= budget:
        return lines
    lines.append(
        f"WARNING: {total - budget:,.0f} CPU-s over the test-time budget of {budget:,.0f} "
        "(tests/lanes.py, BUDGET_CPU_S; not a failure)"
    )
    if previous is None or sorted(previous.get("lanes", {})) != sorted(lanes):
        lines.append(
            f"  no earlier full run of these lanes recorded ({RECORDS.relative_to(ROOT)}) "
            "to compare with; the slowest files are listed above"
        )
        return lines
    grown = grown_files(files, previous.get("files", {}))
    was = sum(lane["cpu"] for lane in previous["lanes"].values())
    lines.append(f"  the last full run took {was:,.0f} CPU-s; the files that grew since:")
    lines += [f"  {f}: {b:,.0f} s -> {s:,.0f} s (+{s - b:,.0f} s)" for f, b, s in grown]
    if not grown:
        lines.append("  none by a second or more: the growth is outside the tests' own time")
    return lines


def record_path(lanes: list[str] | dict) -> Path:
    """Where the last full run of `lanes` is recorded: one file per set of lanes."""
    return RECORDS / f"{'+'.join(sorted(lanes))}.json"


def load_record(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:  # a damaged record: said, and replaced by the next run
        print(f"lanes: ignoring the record {path}: {e}")
        return None


def save_record(lanes: dict[str, tuple[float, float]], files: dict[str, float], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {"lanes": {k: {"wall": w, "cpu": c} for k, (w, c) in lanes.items()}, "files": files}
    path.write_text(json.dumps(record, indent=1, sort_keys=True))


def _pump(
    name: str,
    proc: subprocess.Popen,
    lines: list[str],
    lock: threading.Lock,
    done: queue.Queue[tuple[str, float]],
    cpu: dict[str, float],
) -> None:
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.append(line)
        with lock:
            sys.stdout.write(f"[{name}] {line}")
            sys.stdout.flush()
    # reaped here, with its resource usage: its own CPU and that of the processes it waited for
    # (xdist workers, the processes tests start)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    cpu[name] = usage.ru_utime + usage.ru_stime
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
    reports = tempfile.mkdtemp(prefix="gradtx-lanes-junit-")
    try:
        slots = args.slots if args.slots is not None else max(1, args.workers) + 1
        return _run(
            lanes, pythons, args.workers, slots, extra, env, cache_dir, reports,
            args.fusion_emitters,
        )  # fmt: skip
    finally:
        shutil.rmtree(reports, ignore_errors=True)
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
    reports: str,
    fusion_emitters: bool = False,
) -> int:
    lock = threading.Lock()
    done: queue.Queue[tuple[str, float]] = queue.Queue()
    started: dict[str, float] = {}
    ended: dict[str, float] = {}
    procs: dict[str, tuple[subprocess.Popen, list[str], threading.Thread]] = {}
    codes: dict[str, int] = {}
    cpu: dict[str, float] = {}
    waiting = list(lanes)
    first = time.perf_counter()
    taken: dict[str, int] = {}  # the slots of each lane started: its xdist workers

    def start(lane: str, n_workers: int) -> None:
        taken[lane] = n_workers
        cmd = lane_command(lane, n_workers, extra, pythons.get(lane, sys.executable))
        # each lane's JUnit report, for the per-file times (a --junitxml of `extra` wins)
        cmd[3:3] = [f"--junitxml={Path(reports) / lane}.xml"]
        with lock:
            print(f"[{lane}] {' '.join(cmd[1:])}", flush=True)
        lane_env = cache_env(env, cache_dir if lane in CACHE_LANES else None)
        if lane in EMITTER_LANES and not fusion_emitters:
            lane_env = emitter_env(lane_env)
        proc = subprocess.Popen(
            cmd, cwd=ROOT, env=lane_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        lines: list[str] = []
        pump = threading.Thread(
            target=_pump, args=(lane, proc, lines, lock, done, cpu), daemon=True
        )
        started[lane] = time.perf_counter()
        pump.start()
        procs[lane] = (proc, lines, pump)

    try:
        while waiting or len(codes) < len(procs):
            busy = sum(taken[k] for k in procs if k not in codes)
            for lane in startable(waiting, busy, slots, workers):
                waiting.remove(lane)
                python = pythons.get(lane, sys.executable)
                last = not waiting and lane in VERSION_LANES
                n = lane_workers(lane, workers, slots - busy, last, last and has_xdist(python))
                start(lane, n)
                busy += n
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
    times = {k: (ended[k] - started[k], cpu[k]) for k in procs}
    found = [Path(reports) / f"{k}.xml" for k in procs]
    try:
        files = file_seconds(*(p.read_text() for p in found if p.exists()))
    except ET.ParseError as e:  # a lane killed while writing it
        print(f"\nlanes: a JUnit report did not parse ({e}); no per-file times")
        files = {}
    print("\n" + "\n".join(budget_report(times, files, load_record(record_path(times)))))
    if not extra and not failed:
        save_record(times, files, record_path(times))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
