"""`python -m benchmarks --leaves`: build and step cost against the number of leaves (issue 24).

A fixed number of float32 values (4.2M; 60k with `--quick`) is split into N 1-D leaves, in two
layouts: `equal` (N leaves of the same length) and `different` (N leaves of N different lengths,
`base - N//2 + i`, the same total within rounding; where N distinct positive lengths cannot add
up to the total, lengths `1 .. N` and the total grows, which the table reports). For each
optimizer, layout and N, gradtx and Optax are built and timed in the same process:

- lower: `jax.jit(step).trace(...).lower()` (trace + lower, seconds);
- compile: `.compile()` (seconds);
- step: the compiled `update` + `apply_updates` step, params and state donated, timed in
  interleaved rounds (gradtx, Optax, Optax, gradtx, ...), median seconds per call;
- peak: `memory_analysis()` of the compiled step: arguments + outputs - aliased + temporaries.

Reported: the ratios gradtx / Optax, and each side's compile(N) / compile(N0) and step(N) /
step(N0), N0 the smallest N of the run (10 by default).

Two FLOOR rows per layout bound what any engine that returns per-leaf arrays can reach on the
backend: `per-leaf add` (`p + 0.1 g` on every leaf, the cheapest per-leaf update) and `packed`
(concatenate the leaves, one element-wise update of the flat buffer, slice back into leaves).

8-bit AdamW is gradtx's AdamW with both moments `gradtx.quantized(min_size=1024)`; Optax has no
8-bit state, so its column is Optax's float32 AdamW.
"""

from __future__ import annotations

import gc
import json
import os
import time
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .harness import Budget, Stats, interleaved, machine_facts, paired_ratio
from .report import pyplot
from .workloads import _adamw_clip_cosine, _lion

FULL_TOTAL = 4_200_000
QUICK_TOTAL = 60_000
FULL_COUNTS = (10, 100, 1000, 3000)
QUICK_COUNTS = (10, 30)
LAYOUTS = ("equal", "different")
QUICK_OPTIMIZERS = ("adamw", "sgd_momentum")
FLOORS = ("floor: per-leaf add", "floor: packed")
FLOOR_NAME = "floors"  # the `--optimizer` name that selects the two floor rows
# The CPU targets for gradtx.
TARGET_COMPILE_GROWTH = 3.0  # compile(1000) <= 3x compile(10)
TARGET_VS_OPTAX = 0.1  # at 3000 leaves, compile <= 0.1x Optax's


def optimizers() -> dict[str, Callable[[str], Any]]:
    """name -> lib -> transformation (the same hyperparameters in both libraries)."""
    import optax

    import gradtx

    def adamw(lib: str) -> Any:
        if lib == "gradtx":
            return gradtx.adamw(1e-3, weight_decay=1e-4)
        return optax.adamw(1e-3, weight_decay=1e-4)

    def sgd_momentum(lib: str) -> Any:
        if lib == "gradtx":
            return gradtx.sgd(1e-2, momentum=0.9)
        return optax.sgd(1e-2, momentum=0.9)

    def adamw_8bit(lib: str) -> Any:
        if lib == "gradtx":
            q = gradtx.quantized(min_size=1024)
            return gradtx.adamw(1e-3, weight_decay=1e-4, mu_dtype=q, nu_dtype=q)
        return optax.adamw(1e-3, weight_decay=1e-4)  # Optax has no 8-bit state: float32

    return {
        "adamw": adamw,
        "clip+adamw(warmup-cosine)": _adamw_clip_cosine,  # the suite's, as in workloads.py
        "sgd_momentum": sgd_momentum,
        "lion": _lion,
        "adamw_8bit": adamw_8bit,
    }


def names() -> list[str]:
    """Every name `--optimizer` accepts with `--leaves`."""
    return [*optimizers(), FLOOR_NAME]


def lengths(total: int, n: int, layout: str) -> list[int]:
    """The leaf lengths of one tree."""
    base = total // n
    if layout == "equal":
        return [base] * n
    if base - n // 2 >= 1:
        return [base - n // 2 + i for i in range(n)]
    return [1 + i for i in range(n)]  # N distinct positive lengths add up to more than `total`


def _tree(lens: Sequence[int], seed: int, scale: float = 1.0) -> dict[str, jax.Array]:
    rng = np.random.default_rng(seed)
    return {
        f"leaf_{i:05d}": jnp.asarray(scale * rng.standard_normal(m).astype(np.float32))
        for i, m in enumerate(lens)
    }


def _peak(compiled: Any) -> int | None:
    """Bytes live at once while the step runs (as `harness.compile_step` counts them)."""
    try:
        mem = compiled.memory_analysis()
    except (AttributeError, NotImplementedError):
        return None
    if mem is None:
        return None
    return int(
        mem.argument_size_in_bytes
        + mem.output_size_in_bytes
        - mem.alias_size_in_bytes
        + mem.temp_size_in_bytes
    )


class _Case:
    """One jitted step (its first `n_state` arguments are fed back), built and timed."""

    def __init__(self, fn: Callable, args: tuple, n_state: int, calls: int):
        jitted = jax.jit(fn, donate_argnums=tuple(range(n_state)))
        t0 = time.perf_counter()
        lowered = jitted.trace(*args).lower()
        t1 = time.perf_counter()
        self.compiled = lowered.compile()
        t2 = time.perf_counter()
        self.lower_s, self.compile_s = t1 - t0, t2 - t1
        self.peak_bytes = _peak(self.compiled)
        self.args = args
        self.n_state = n_state
        self.calls = calls

    def run_block(self) -> float:
        """Seconds per call over one block of `calls` calls."""
        fn, k = self.compiled, self.n_state
        state, rest = self.args[:k], self.args[k:]
        t = time.perf_counter()
        for _ in range(self.calls):
            state = fn(*state, *rest)
            if k == 1:
                state = (state,)
        jax.block_until_ready(state)
        dt = time.perf_counter() - t
        self.args = (*state, *rest)
        return dt / self.calls


def _optimizer_case(make: Callable[[str], Any], lib: str, lens, calls: int) -> _Case:
    tx = make(lib)
    if lib == "gradtx":
        import gradtx

        apply = gradtx.apply_updates
    else:
        import optax

        apply = optax.apply_updates

    def step(params, state, grads):
        updates, state = tx.update(grads, state, params)
        return apply(params, updates), state

    params = _tree(lens, 0)
    state = jax.jit(tx.init)(params)
    return _Case(step, (params, state, _tree(lens, 1, 1e-2)), n_state=2, calls=calls)


def _floor_case(name: str, lens, calls: int) -> _Case:
    if name == FLOORS[0]:

        def step(params, grads):
            return jax.tree.map(lambda p, g: p + 0.1 * g, params, grads)

    else:
        keys = sorted(f"leaf_{i:05d}" for i in range(len(lens)))
        offsets = np.cumsum([0, *lens])

        def step(params, grads):
            flat = jnp.concatenate([params[k] for k in keys])
            flat_g = jnp.concatenate([grads[k] for k in keys])
            flat = flat + 0.1 * flat_g
            return {k: flat[offsets[i] : offsets[i + 1]] for i, k in enumerate(keys)}

    return _Case(step, (_tree(lens, 0), _tree(lens, 1, 1e-2)), n_state=1, calls=calls)


def _row(case: _Case, **kw: Any) -> dict[str, Any]:
    return {
        **kw,
        "lower_s": case.lower_s,
        "compile_s": case.compile_s,
        "peak_bytes": case.peak_bytes,
    }


def run(
    quick: bool,
    log: Callable[[str], None],
    counts: Sequence[int] | None = None,
    selected: Sequence[str] | None = None,
    layouts: Sequence[str] | None = None,
    rounds: int | None = None,
    partial: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Build and time every case; `partial(result)` is called after each (N, optimizer) case
    with the result so far (a long run that is stopped keeps what it measured)."""
    total = QUICK_TOTAL if quick else FULL_TOTAL
    counts = sorted(set(counts or (QUICK_COUNTS if quick else FULL_COUNTS)))
    layouts = list(layouts or LAYOUTS)
    all_opts = optimizers()
    chosen = list(selected) if selected else [*(QUICK_OPTIMIZERS if quick else all_opts), "floors"]
    unknown = [n for n in chosen if n not in all_opts and n != FLOOR_NAME]
    if unknown:
        raise ValueError(f"unknown optimizer(s) {unknown}; choose from {names()}")
    budget = (
        Budget(warmup=1, min_rounds=2, max_rounds=rounds or 2, seconds=0.0)
        if quick
        else Budget(warmup=2, min_rounds=rounds or 7, max_rounds=rounds or 21, seconds=3.0)
    )
    calls = 2 if quick else 5
    rows: list[dict[str, Any]] = []
    floors: list[dict[str, Any]] = []
    trees: list[dict[str, Any]] = []
    for layout in layouts:
        for n in counts:
            lens = lengths(total, n, layout)
            trees.append(
                {
                    "layout": layout,
                    "leaves": n,
                    "values": sum(lens),
                    "min": lens[0],
                    "max": lens[-1],
                }
            )
            for name in chosen:
                if name == FLOOR_NAME:
                    cases: dict[str, Any] = {}
                    for f in FLOORS:
                        cases[f] = _floor_case(f, lens, calls)
                        log(
                            f"{f:28s} {layout:9s} {n:5d}  lower {cases[f].lower_s:7.2f}  "
                            f"compile {cases[f].compile_s:7.2f}"
                        )
                    times = interleaved(cases, budget)
                    for f, c in cases.items():
                        med = Stats.of(times[f]).median
                        floors.append(_row(c, floor=f, layout=layout, leaves=n, step_s=med))
                        log(f"{f:28s} {layout:9s} {n:5d}  step {med * 1e3:8.3f} ms")
                else:
                    cases = {}
                    for lib in ("gradtx", "optax"):
                        cases[lib] = _optimizer_case(all_opts[name], lib, lens, calls)
                        log(
                            f"{name:28s} {layout:9s} {n:5d}  {lib:6s}  lower "
                            f"{cases[lib].lower_s:7.2f}  compile {cases[lib].compile_s:7.2f}"
                        )
                    times = interleaved(cases, budget)
                    ratio = paired_ratio(times, "gradtx", "optax")
                    assert ratio is not None
                    row: dict[str, Any] = {
                        "optimizer": name,
                        "layout": layout,
                        "leaves": n,
                        "step_ratio": ratio.median,
                        "step_ratio_q": [ratio.q1, ratio.q3],
                        "rounds": ratio.n,
                    }
                    for lib, c in cases.items():
                        row[lib] = _row(c, step_s=Stats.of(times[lib]).median)
                    row["compile_ratio"] = row["gradtx"]["compile_s"] / row["optax"]["compile_s"]
                    row["lower_ratio"] = row["gradtx"]["lower_s"] / row["optax"]["lower_s"]
                    pg, po = row["gradtx"]["peak_bytes"], row["optax"]["peak_bytes"]
                    row["peak_ratio"] = pg / po if pg and po else None
                    rows.append(row)
                    log(
                        f"{name:28s} {layout:9s} {n:5d}  step gradtx "
                        f"{row['gradtx']['step_s'] * 1e3:8.3f} ms  optax "
                        f"{row['optax']['step_s'] * 1e3:8.3f} ms  ratio {ratio.median:.3f}"
                    )
                del cases
                gc.collect()
                if partial is not None:
                    partial(_result(total, counts, layouts, chosen, trees, calls, rows, floors))
    return _result(total, counts, layouts, chosen, trees, calls, rows, floors)


def _result(total, counts, layouts, chosen, trees, calls, rows, floors) -> dict[str, Any]:
    _add_growth(rows, floors, counts[0])
    result = {
        "machine": machine_facts(),
        "total_values": total,
        "counts": counts,
        "base_count": counts[0],
        "layouts": layouts,
        "optimizers": [n for n in chosen if n != FLOOR_NAME],
        "trees": trees,
        "calls_per_round": calls,
        "rows": rows,
        "floors": floors,
    }
    result["targets"] = targets(result)
    return result


def _add_growth(rows: list[dict[str, Any]], floors: list[dict[str, Any]], n0: int) -> None:
    """compile(N) / compile(N0) and step(N) / step(N0) per side, in place."""
    base = {(r["optimizer"], r["layout"]): r for r in rows if r["leaves"] == n0}
    for r in rows:
        b = base.get((r["optimizer"], r["layout"]))
        for lib in ("gradtx", "optax"):
            for k in ("compile_s", "step_s"):
                r[lib][k.replace("_s", "_growth")] = r[lib][k] / b[lib][k] if b else None
    fbase = {(r["floor"], r["layout"]): r for r in floors if r["leaves"] == n0}
    for r in floors:
        b = fbase.get((r["floor"], r["layout"]))
        for k in ("compile_s", "step_s"):
            r[k.replace("_s", "_growth")] = r[k] / b[k] if b else None


def targets(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The issue's two CPU targets, for gradtx and, as bounds, for the floors.

    compile(1000) / compile(10) <= 3, and compile(3000) / Optax AdamW compile(3000) <= 0.1 (each
    optimizer against Optax's same optimizer; the floors against Optax's AdamW)."""
    out = []
    n0 = result["base_count"]
    optax_adamw = {
        (r["layout"], r["leaves"]): r["optax"]["compile_s"]
        for r in result["rows"]
        if r["optimizer"] == "adamw"
    }
    for r in result["rows"]:
        if r["leaves"] == 1000 and n0 == 10 and r["gradtx"]["compile_growth"] is not None:
            g = r["gradtx"]["compile_growth"]
            out.append(
                {
                    "target": f"gradtx {r['optimizer']} ({r['layout']}): compile(1000)/compile(10)",
                    "value": g,
                    "limit": TARGET_COMPILE_GROWTH,
                    "met": g <= TARGET_COMPILE_GROWTH,
                }
            )
        if r["leaves"] == 3000:
            out.append(
                {
                    "target": f"gradtx {r['optimizer']} ({r['layout']}): compile(3000) / Optax's",
                    "value": r["compile_ratio"],
                    "limit": TARGET_VS_OPTAX,
                    "met": r["compile_ratio"] <= TARGET_VS_OPTAX,
                }
            )
    for f in result["floors"]:
        if f["leaves"] == 1000 and n0 == 10 and f["compile_growth"] is not None:
            out.append(
                {
                    "target": f"{f['floor']} ({f['layout']}): compile(1000)/compile(10)",
                    "value": f["compile_growth"],
                    "limit": TARGET_COMPILE_GROWTH,
                    "met": f["compile_growth"] <= TARGET_COMPILE_GROWTH,
                }
            )
        ref = optax_adamw.get((f["layout"], f["leaves"]))
        if f["leaves"] == 3000 and ref:
            v = f["compile_s"] / ref
            out.append(
                {
                    "target": f"{f['floor']} ({f['layout']}): compile(3000) / Optax AdamW's",
                    "value": v,
                    "limit": TARGET_VS_OPTAX,
                    "met": v <= TARGET_VS_OPTAX,
                }
            )
    return out


def _mb(b: int | None) -> str:
    return "—" if b is None else f"{b / 1e6:.1f}"


def _x(v: float | None, digits: int = 2) -> str:
    return "—" if v is None else f"{v:.{digits}f}"


def markdown(result: dict[str, Any]) -> str:
    m = result["machine"]
    n0 = result["base_count"]
    lines = [
        f"{result['total_values']:,} float32 values in N 1-D leaves; jax {m['jax']}, optax "
        f"{m['optax']}, {m['backend']} ({m['cpu_count']} cores, {m['cpu']}), {m['date']}. "
        f"Step: median of interleaved rounds of {result['calls_per_round']} calls, params and "
        f"state donated. Growth columns: value at N / value at N={n0}.",
        "",
        "Trees:",
        "",
        "| layout | N | values | shortest | longest |",
        "|---|---:|---:|---:|---:|",
    ]
    for t in result["trees"]:
        lines.append(
            f"| {t['layout']} | {t['leaves']} | {t['values']:,} | {t['min']:,} | {t['max']:,} |"
        )
    lines += [
        "",
        "| optimizer | layout | N | lower s gradtx / optax | compile s gradtx / optax | "
        "compile ratio | step ms gradtx / optax | step ratio (IQR) | peak MB gradtx / optax | "
        f"compile(N)/({n0}) gradtx / optax | step(N)/({n0}) gradtx / optax |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in result["rows"]:
        g, o = r["gradtx"], r["optax"]
        q = r["step_ratio_q"]
        lines.append(
            f"| {r['optimizer']} | {r['layout']} | {r['leaves']} "
            f"| {g['lower_s']:.2f} / {o['lower_s']:.2f} "
            f"| {g['compile_s']:.2f} / {o['compile_s']:.2f} | {r['compile_ratio']:.2f} "
            f"| {g['step_s'] * 1e3:.2f} / {o['step_s'] * 1e3:.2f} "
            f"| {r['step_ratio']:.2f} ({q[0]:.2f}–{q[1]:.2f}) "
            f"| {_mb(g['peak_bytes'])} / {_mb(o['peak_bytes'])} "
            f"| {_x(g['compile_growth'], 1)} / {_x(o['compile_growth'], 1)} "
            f"| {_x(g['step_growth'])} / {_x(o['step_growth'])} |"
        )
    if result["floors"]:
        lines += [
            "",
            "Floors (what any engine returning per-leaf arrays reaches on this backend):",
            "",
            f"| floor | layout | N | lower s | compile s | step ms | peak MB | compile(N)/({n0}) "
            f"| step(N)/({n0}) |",
            "|---|---|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for f in result["floors"]:
            lines.append(
                f"| {f['floor']} | {f['layout']} | {f['leaves']} | {f['lower_s']:.2f} "
                f"| {f['compile_s']:.2f} | {f['step_s'] * 1e3:.2f} | {_mb(f['peak_bytes'])} "
                f"| {_x(f['compile_growth'], 1)} | {_x(f['step_growth'])} |"
            )
    if result["targets"]:
        lines += ["", "| target | value | limit | met |", "|---|---:|---:|---|"]
        for t in result["targets"]:
            met = "yes" if t["met"] else "**no**"
            lines.append(f"| {t['target']} | {t['value']:.2f} | {t['limit']:.2f} | {met} |")
    if "adamw_8bit" in result["optimizers"]:
        lines += ["", "adamw_8bit: Optax has no 8-bit state; its column is Optax's float32 AdamW."]
    return "\n".join(lines)


def write_png(result: dict[str, Any], path: str) -> bool:
    """Log-log compile time and step time against N, one row of panels per layout."""
    plt = pyplot()
    if plt is None:
        return False
    layouts = result["layouts"]
    fig, axes = plt.subplots(len(layouts), 2, figsize=(12, 4.2 * len(layouts)), squeeze=False)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for row_axes, layout in zip(axes, layouts, strict=True):
        ax_c, ax_s = row_axes
        for i, name in enumerate(result["optimizers"]):
            rs = sorted(
                (r for r in result["rows"] if r["optimizer"] == name and r["layout"] == layout),
                key=lambda r: r["leaves"],
            )
            if not rs:
                continue
            ns = [r["leaves"] for r in rs]
            col = colors[i % len(colors)]
            for lib, style in (("gradtx", "-"), ("optax", "--")):
                if lib == "optax" and name == "adamw_8bit":
                    continue  # Optax's float32 AdamW: the adamw line
                label = f"{lib} {name}"
                ax_c.plot(ns, [r[lib]["compile_s"] for r in rs], style, marker="o", color=col,
                          label=label)  # fmt: skip
                ax_s.plot(ns, [r[lib]["step_s"] * 1e3 for r in rs], style, marker="o", color=col,
                          label=label)  # fmt: skip
        for j, f in enumerate(FLOORS):
            fs = sorted(
                (r for r in result["floors"] if r["floor"] == f and r["layout"] == layout),
                key=lambda r: r["leaves"],
            )
            if not fs:
                continue
            ns = [r["leaves"] for r in fs]
            style = ":" if j == 0 else "-."
            ax_c.plot(ns, [r["compile_s"] for r in fs], style, color="black", marker="x", label=f)
            ax_s.plot(ns, [r["step_s"] * 1e3 for r in fs], style, color="black", marker="x",
                      label=f)  # fmt: skip
        for ax, what in ((ax_c, "compile s"), (ax_s, "step ms")):
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlabel("leaves N")
            ax.set_ylabel(what)
            ax.set_title(f"{what} vs N ({layout} lengths)")
            ax.grid(alpha=0.3, which="both")
        ax_c.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


def main(
    quick: bool,
    out: str,
    log: Callable[[str], None],
    counts: Sequence[int] | None = None,
    selected: Sequence[str] | None = None,
    layouts: Sequence[str] | None = None,
    rounds: int | None = None,
) -> int:
    os.makedirs(out, exist_ok=True)

    def save(result: dict[str, Any]) -> None:
        with open(os.path.join(out, "leaves.json"), "w") as f:
            json.dump(result, f, indent=2)

    result = run(
        quick, log, counts=counts, selected=selected, layouts=layouts, rounds=rounds, partial=save
    )
    save(result)
    text = markdown(result)
    with open(os.path.join(out, "leaves.md"), "w") as f:
        f.write(text + "\n")
    write_png(result, os.path.join(out, "leaves.png"))
    print(text)
    return 0
