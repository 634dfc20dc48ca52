"""The benchmark suite: every workload on every tree, both libraries side by side."""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Sequence
from typing import Any

from .harness import (
    LIBS,
    Budget,
    Stats,
    compile_step,
    interleaved,
    machine_facts,
    make_runner,
    paired_ratio,
    torch_adam_step_time,
    torch_available,
    triad_bandwidth,
)
from .workloads import BY_NAME, FULL_TREES, QUICK_TREES, WORKLOADS, TreeSpec, Workload

ADAM_BYTES_PER_PARAM = 28  # read p, g, m, v; write p, m, v (float32)


def _stats(s: Stats | None) -> dict[str, float] | None:
    return None if s is None else s.as_dict()


def _run_pair(
    workload: Workload,
    tree: TreeSpec,
    params: Any,
    grads: Any,
    budget: Budget,
    log: Callable[[str], None],
) -> dict[str, Any]:
    """Both donation settings of one workload on one tree."""
    out: dict[str, Any] = {
        "workload": workload.name,
        "description": workload.description,
        "tree": tree.name,
        "params": tree.size,
        "leaves": tree.count,
        "leaf_shape": list(tree.shape),
        "step": {},
        "build": {},
        "memory": {},
    }
    for donate in (True, False):
        key = "donated" if donate else "undonated"
        compiled = {lib: compile_step(workload, tree, lib, donate, params, grads) for lib in LIBS}
        runners = {lib: make_runner(workload, lib, compiled[lib], tree) for lib in LIBS}
        if workload.baseline is not None:
            base = BY_NAME[workload.baseline]
            c = compile_step(base, tree, "gradtx", donate, params, grads)
            runners["gradtx_baseline"] = make_runner(base, "gradtx", c, tree)
        times = interleaved(runners, budget)
        entry: dict[str, Any] = {k: Stats.of(v).as_dict() for k, v in times.items()}
        entry["ratio"] = _stats(paired_ratio(times, "gradtx", "optax"))
        if workload.baseline is not None:
            entry["ratio_to_baseline"] = _stats(paired_ratio(times, "gradtx", "gradtx_baseline"))
            entry["optax_ratio_to_baseline"] = _stats(
                paired_ratio(times, "optax", "gradtx_baseline")
            )
        out["step"][key] = entry
        for lib in LIBS:
            c = compiled[lib]
            build = {"trace_s": c.trace_s, "lower_s": c.lower_s, "compile_s": c.compile_s}
            build["total_s"] = c.trace_s + c.lower_s + c.compile_s
            out["build"].setdefault(lib, {})[key] = build
            mem = out["memory"].setdefault(lib, {})
            mem["state_bytes_per_param"] = c.state_bytes / tree.size
            mem[f"peak_bytes_{key}"] = c.peak_bytes
            mem[f"temp_bytes_{key}"] = c.temp_bytes
        ratio = entry["ratio"]
        log(
            f"  {workload.name:18s} {tree.name:8s} {key:9s} "
            f"gradtx {1e3 * entry['gradtx']['median']:8.2f} ms  "
            f"optax {1e3 * entry['optax']['median']:8.2f} ms  "
            f"ratio {ratio['median']:.3f} [{ratio['q1']:.3f}, {ratio['q3']:.3f}]  "
            f"build {out['build']['gradtx'][key]['total_s']:.2f}s / "
            f"{out['build']['optax'][key]['total_s']:.2f}s"
        )
        del runners, compiled
        gc.collect()
    gx, ox = out["build"]["gradtx"]["donated"], out["build"]["optax"]["donated"]
    out["build"]["ratio"] = gx["total_s"] / ox["total_s"]
    return out


def run_suite(
    *,
    quick: bool = False,
    only: Sequence[str] | None = None,
    trees: Sequence[str] | None = None,
    repeats: int | None = None,
    seconds: float | None = None,
    with_torch: bool = True,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Run the suite and return everything measured, as a JSON-ready dict."""
    budget = Budget(min_rounds=3, max_rounds=5, seconds=0.2, warmup=1) if quick else Budget()
    if repeats is not None:
        budget.max_rounds = max(1, repeats)
        budget.min_rounds = min(budget.min_rounds, budget.max_rounds)
    if seconds is not None:
        budget.seconds = seconds
    workloads = [w for w in WORKLOADS if not only or w.name in only]
    unknown = sorted(set(only or ()) - {w.name for w in WORKLOADS})
    if unknown:
        raise ValueError(
            f"unknown workload(s) {unknown}; choose from {[w.name for w in WORKLOADS]}"
        )
    tree_specs = [t for t in (QUICK_TREES if quick else FULL_TREES) if not trees or t.name in trees]
    start = time.perf_counter()
    facts = machine_facts()
    log(
        f"gradtx benchmarks on {facts['cpu']} ({facts['cpu_count']} cores), jax {facts['jax']}, "
        f"optax {facts['optax']}, torch {facts['torch'] or 'not installed'}"
    )
    triad_n = tree_specs[0].size if tree_specs else 1_000_000
    triad = triad_bandwidth(triad_n, budget)
    log(
        f"  triad: XLA {triad['xla']['best_Bps'] / 1e9:.1f} GB/s, "
        f"NumPy {triad['numpy']['best_Bps'] / 1e9:.1f} GB/s"
    )
    results = []
    for tree in tree_specs:
        params, grads = tree.params(), tree.grads()
        for w in workloads:
            results.append(_run_pair(w, tree, params, grads, budget, log))
        del params, grads
        gc.collect()
    torch_results: dict[str, Any] = {}
    ok, why = torch_available()
    if with_torch and ok:
        for tree in tree_specs:
            for variant in ("foreach", "fused"):
                st = torch_adam_step_time(tree, variant, budget)
                torch_results[f"{tree.name}/{variant}"] = st.as_dict()
                log(f"  torch Adam {variant:7s} {tree.name:8s} {1e3 * st.median:8.2f} ms")
    elif not with_torch:
        why = "skipped (--no-torch)"
    summary = _summarise(results, triad, torch_results)
    return {
        "machine": facts,
        "quick": quick,
        "budget": budget.__dict__,
        "triad": triad,
        "results": results,
        "torch": {
            "available": ok and with_torch,
            "note": "" if ok and with_torch else why,
            "adam": torch_results,
        },
        "summary": summary,
        "elapsed_s": time.perf_counter() - start,
    }


def _find(results: list[dict], workload: str, tree: str) -> dict | None:
    for r in results:
        if r["workload"] == workload and r["tree"] == tree:
            return r
    return None


def _summarise(results: list[dict], triad: dict, torch_results: dict) -> dict[str, Any]:
    """Derived figures: adam bandwidth, torch ratios, and each target with its verdict."""
    summary: dict[str, Any] = {"targets": []}
    targets = summary["targets"]

    def target(name: str, value: float | None, limit: float, higher_is_better: bool = False):
        if value is None:
            return
        met = value >= limit if higher_is_better else value <= limit
        targets.append({"target": name, "value": value, "limit": limit, "met": bool(met)})

    for key in ("donated", "undonated"):
        worst = [r["step"][key]["ratio"]["median"] for r in results if r["workload"] != "adam_bf16"]
        if worst:
            target(f"{key} step <= 1.0x Optax on every workload (worst)", max(worst), 1.0)
    for r in results:
        if r["tree"] == "2000x8k" and r["workload"] != "adam_bf16":
            for key in ("donated", "undonated"):
                target(
                    f"2000-leaf step <= 0.7x Optax: {r['workload']} {key}",
                    r["step"][key]["ratio"]["median"],
                    0.7,
                )
            target(
                f"2000-leaf trace+compile <= 0.5x Optax: {r['workload']}", r["build"]["ratio"], 0.5
            )
    one = _find(results, "adam", "1x16M")
    if one is not None:
        med = one["step"]["donated"]["gradtx"]["median"]
        bps = ADAM_BYTES_PER_PARAM * one["params"] / med
        summary["adam_bandwidth"] = {
            "gradtx_Bps": bps,
            "optax_Bps": ADAM_BYTES_PER_PARAM
            * one["params"]
            / one["step"]["donated"]["optax"]["median"],
            "triad_Bps": triad["reference_Bps"],
            "fraction": bps / triad["reference_Bps"],
        }
        target(
            "donated 1-leaf adam >= 90% of triad bandwidth", bps / triad["reference_Bps"], 0.9, True
        )
    for r in results:
        if r["workload"] == "accumulate4_adam":
            target(
                f"accumulate_k_steps <= 1.2x a plain step per micro-step: {r['tree']} donated",
                r["step"]["donated"]["ratio_to_baseline"]["median"],
                1.2,
            )
        if r["workload"] == "adam_bf16":
            f32 = _find(results, "adam", r["tree"])
            if f32 is not None:
                half = (
                    r["memory"]["gradtx"]["state_bytes_per_param"]
                    / f32["memory"]["gradtx"]["state_bytes_per_param"]
                )
                target(f"bf16 moments: state bytes vs float32: {r['tree']}", half, 0.5 + 1e-3)
            for key in ("donated", "undonated"):
                target(
                    f"bf16 moments: step time vs float32: {r['tree']} {key}",
                    r["step"][key]["ratio_to_baseline"]["median"],
                    1.0,
                )
    if torch_results:
        summary["torch_vs_optax"] = {}
        for name, st in torch_results.items():
            tree = name.split("/")[0]
            adam = _find(results, "adam", tree)
            if adam is not None:
                summary["torch_vs_optax"][name] = (
                    st["median"] / adam["step"]["donated"]["optax"]["median"]
                )
    return summary
