"""Checkpoint throughput: `gradtx.save` / `gradtx.load` of a 16M-parameter Adam state against
`numpy.save` / `numpy.load` of the same arrays, and the peak extra memory of each.

Run with `python -m benchmarks --checkpoint` (add `--quick` for tiny trees). Every round times
each variant once, in turn, on the same arrays and the same folder; rates are bytes of state per
second and ratios are per round (gradtx / NumPy, higher is better), reported as median
(interquartile range). Reads come from the page cache right after the writes, for both.

- `numpy.save` writes each leaf with `np.save` into one open file (no fsync), `numpy.load`
  reads them back in order; "+ fsync" adds `os.fsync` before closing, which is what `gradtx.save`
  does by default (its `fsync=False` variant is timed too).
- Memory: peak resident set size (Linux `VmHWM`, reset through `/proc/self/clear_refs`) above the
  resident size before the call, in a fresh process per variant so allocator caches of other
  variants do not count. For `load`, the restored state itself (one copy) is part of the peak;
  the template is abstract (`jax.eval_shape(tx.init, params)`), so no second state is allocated.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from .harness import machine_facts
from .workloads import FULL_TREES, QUICK_TREES, TreeSpec

MB = 1e6


def adam_state(tree: TreeSpec) -> tuple[Any, Any, Any]:
    """(tx, params, state): Adam's state after one step on `tree` (non-zero moments)."""
    import gradtx

    tx = gradtx.adam(1e-3)
    params = tree.params()
    _, state = tx.update(tree.grads(), tx.init(params), params)
    return tx, params, state


def _numpy_save(path: str, arrays: list[np.ndarray], fsync: bool) -> None:
    with open(path, "wb") as f:
        for a in arrays:
            np.save(f, a, allow_pickle=False)
        if fsync:
            f.flush()
            os.fsync(f.fileno())


def _numpy_load(path: str, count: int) -> list[np.ndarray]:
    with open(path, "rb") as f:
        return [np.load(f, allow_pickle=False) for _ in range(count)]


def _quartiles(xs: list[float]) -> dict[str, float]:
    q1, med, q3 = np.percentile(xs, [25, 50, 75])
    return {"median": float(med), "q1": float(q1), "q3": float(q3), "n": len(xs)}


def _time(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    out = fn()
    if out is not None:
        import jax

        jax.block_until_ready(out)
    return time.perf_counter() - start


def throughput(tree: TreeSpec, rounds: int, folder: str) -> dict[str, Any]:
    """Rates (MB/s) of every variant over `rounds` interleaved rounds, and the ratios."""
    import jax

    import gradtx

    tx, params, state = adam_state(tree)
    arrays = [np.asarray(x) for x in jax.tree.leaves(state)]
    nbytes = sum(a.nbytes for a in arrays)
    abstract = jax.eval_shape(tx.init, params)
    npy, gtx = os.path.join(folder, "state.npy"), os.path.join(folder, "state.safetensors")
    variants: dict[str, Callable[[], Any]] = {
        "numpy.save": lambda: _numpy_save(npy, arrays, fsync=False),
        "gradtx.save(fsync=False)": lambda: gradtx.save(gtx, state, fsync=False) and None,
        "numpy.save + fsync": lambda: _numpy_save(npy, arrays, fsync=True),
        "gradtx.save": lambda: gradtx.save(gtx, state) and None,
        "numpy.load": lambda: _numpy_load(npy, len(arrays)) and None,
        "gradtx.load": lambda: gradtx.load(gtx, abstract),
    }
    for fn in variants.values():  # warm-up: files exist, code paths compiled
        fn()
    times: dict[str, list[float]] = {k: [] for k in variants}
    for _ in range(rounds):
        for name, fn in variants.items():
            times[name].append(_time(fn))
    rates = {k: [nbytes / t / MB for t in v] for k, v in times.items()}
    pairs = {
        "save / numpy.save": ("gradtx.save(fsync=False)", "numpy.save"),
        "save / numpy.save + fsync": ("gradtx.save", "numpy.save + fsync"),
        "save (fsync) / numpy.save": ("gradtx.save", "numpy.save"),
        "load / numpy.load": ("gradtx.load", "numpy.load"),
    }
    ratios = {
        k: _quartiles([a / b for a, b in zip(rates[x], rates[y], strict=True)])
        for k, (x, y) in pairs.items()
    }
    return {
        "tree": tree.name,
        "leaves": len(arrays),
        "state_bytes": nbytes,
        "rates_MBps": {k: _quartiles(v) for k, v in rates.items()},
        "ratios": ratios,
    }


_MEMORY_CHILD = r"""
import json, os, sys
import jax
import gradtx
from benchmarks.checkpoint import adam_state
from benchmarks.workloads import FULL_TREES, QUICK_TREES

name, size = sys.argv[1], int(sys.argv[2])
tree = next(t for t in FULL_TREES + QUICK_TREES if t.name == name and t.size == size)
variant, folder = sys.argv[3], sys.argv[4]
tx, params, state = adam_state(tree)
path = os.path.join(folder, "mem.safetensors")
gradtx.save(path, state)
abstract = jax.eval_shape(tx.init, params)
del params

def status(field):
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(field)

with open("/proc/self/clear_refs", "w") as f:
    f.write("5")
before = status("VmRSS")
if variant == "save":
    gradtx.save(path, state)
else:
    out = gradtx.load(path, abstract)
    jax.block_until_ready(out)
print(json.dumps({"peak_extra_bytes": status("VmHWM") - before}))
"""


def peak_memory(tree: TreeSpec, folder: str) -> dict[str, Any]:
    """Peak resident bytes above the starting point during `save` and `load` (Linux only)."""
    if not os.path.exists("/proc/self/clear_refs"):
        return {"note": "not measured: needs Linux /proc/self/clear_refs"}
    out: dict[str, Any] = {}
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "PYTHONPATH": root}
    for variant in ("save", "load"):
        proc = subprocess.run(
            [sys.executable, "-c", _MEMORY_CHILD, tree.name, str(tree.size), variant, folder],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        if proc.returncode != 0:
            out[variant] = {"error": proc.stderr[-2000:]}
            continue
        out[variant] = json.loads(proc.stdout.strip().splitlines()[-1])
    return out


def run_checkpoint_bench(
    *, quick: bool = False, rounds: int | None = None, log: Callable[[str], None] = print
) -> dict[str, Any]:
    """The whole checkpoint benchmark: throughput and memory on the 1- and 200-leaf trees."""
    trees = [t for t in (QUICK_TREES if quick else FULL_TREES) if t.name in ("1x16M", "200x80k")]
    rounds = rounds or (3 if quick else 9)
    results = []
    folder = tempfile.mkdtemp(prefix="gradtx-ckpt-bench-", dir=os.environ.get("GRADTX_BENCH_DIR"))
    try:
        for tree in trees:
            r = throughput(tree, rounds, folder)
            r["memory"] = peak_memory(tree, folder)
            results.append(r)
            log(
                f"  checkpoint {tree.name:8s} save/numpy.save "
                f"{r['ratios']['save / numpy.save']['median']:.2f}  load/numpy.load "
                f"{r['ratios']['load / numpy.load']['median']:.2f}"
            )
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return {"machine": machine_facts(), "quick": quick, "folder": folder, "results": results}


def _r(st: dict) -> str:
    return f"{st['median']:.2f} ({st['q1']:.2f}-{st['q3']:.2f})"


def checkpoint_markdown(run: dict[str, Any]) -> str:
    """The checkpoint benchmark's tables, in Markdown."""
    m = run["machine"]
    lines = [
        f"Run {m['date']}{' (--quick sizes)' if run['quick'] else ''}: {m['cpu']}, "
        f"{m['cpu_count']} cores; jax {m['jax']}, numpy {m['numpy']}; files in a temporary "
        "folder on the local disk.",
        "",
        "Rates in MB/s of optimizer-state bytes (median of the rounds):",
        "",
        "| tree | state MB | numpy.save | gradtx.save(fsync=False) | numpy.save + fsync "
        "| gradtx.save | numpy.load | gradtx.load |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    names = [
        "numpy.save",
        "gradtx.save(fsync=False)",
        "numpy.save + fsync",
        "gradtx.save",
        "numpy.load",
        "gradtx.load",
    ]
    for r in run["results"]:
        cells = " | ".join(f"{r['rates_MBps'][n]['median']:.0f}" for n in names)
        lines.append(
            f"| {r['tree']} ({r['leaves']} arrays) | {r['state_bytes'] / MB:.0f} | {cells} |"
        )
    lines += [
        "",
        "Ratios gradtx / NumPy per round, median (interquartile range); the target is >= 0.8:",
        "",
        "| tree | save / numpy.save | save / numpy.save, both fsync | save (fsync) / numpy.save "
        "(no fsync) | load / numpy.load | peak extra MB: save | load (incl. the result) |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in run["results"]:
        q = r["ratios"]
        mem = r["memory"]

        def peak(k: str) -> str:
            v = mem.get(k, {})
            return f"{v['peak_extra_bytes'] / MB:.0f}" if "peak_extra_bytes" in v else "-"

        lines.append(
            f"| {r['tree']} | {_r(q['save / numpy.save'])} | {_r(q['save / numpy.save + fsync'])} "
            f"| {_r(q['save (fsync) / numpy.save'])} | {_r(q['load / numpy.load'])} "
            f"| {peak('save')} | {peak('load')} |"
        )
    return "\n".join(lines)


def main(quick: bool, out: str, rounds: int | None = None) -> int:
    run = run_checkpoint_bench(quick=quick, rounds=rounds, log=lambda s: print(s, flush=True))
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, "checkpoint.json")
    with open(path, "w") as f:
        json.dump(run, f, indent=1)
    print()
    print(checkpoint_markdown(run))
    print(f"wrote {path}")
    return 0
