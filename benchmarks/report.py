"""Turning a suite run into a Markdown table, a JSON file and a PNG chart."""

from __future__ import annotations

import json
import os
from typing import Any


def _ms(x: float) -> str:
    return f"{1e3 * x:.1f}"


def _ratio(st: dict | None) -> str:
    if st is None:
        return "-"
    return f"{st['median']:.2f} ({st['q1']:.2f}-{st['q3']:.2f})"


def markdown(run: dict[str, Any]) -> str:
    """The tables of a run, in Markdown (what `benchmarks/README.md` holds)."""
    m = run["machine"]
    lines = [
        f"Run {m['date']}{' (--quick sizes)' if run['quick'] else ''}: {m['cpu']}, "
        f"{m['cpu_count']} cores, {(m['memory_bytes'] or 0) / 2**30:.0f} GiB, {m['platform']}; "
        f"python {m['python']}, jax {m['jax']}, jaxlib {m['jaxlib']}, optax {m['optax']}, "
        f"numpy {m['numpy']}, torch {m['torch'] or 'not installed'}; backend {m['backend']}. "
        f"Whole run {run['elapsed_s']:.0f} s.",
        "",
        "Step time of a jitted `update + apply_updates`: median ms per call, and the ratio "
        "gradtx / Optax as median (interquartile range) of the per-round ratios.",
        "",
        "| workload | tree | donated: gradtx ms | optax ms | ratio | undonated: gradtx ms "
        "| optax ms | ratio |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in run["results"]:
        d, u = r["step"]["donated"], r["step"]["undonated"]
        lines.append(
            f"| {r['workload']} | {r['tree']} | {_ms(d['gradtx']['median'])} | "
            f"{_ms(d['optax']['median'])} | {_ratio(d['ratio'])} | {_ms(u['gradtx']['median'])} | "
            f"{_ms(u['optax']['median'])} | {_ratio(u['ratio'])} |"
        )
    lines += [
        "",
        "Trace + lower + compile of the donated step (seconds), and memory: optimizer-state "
        "bytes per parameter and the peak bytes live during the step (XLA's memory analysis: "
        "arguments + outputs not written in place + scratch), donated / undonated, MB.",
        "",
        "| workload | tree | gradtx trace / lower / compile | optax trace / lower / compile "
        "| ratio | state B/param gradtx / optax | peak MB gradtx | peak MB optax |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in run["results"]:
        g, o = r["build"]["gradtx"]["donated"], r["build"]["optax"]["donated"]
        mg, mo = r["memory"]["gradtx"], r["memory"]["optax"]

        def peak(mem: dict) -> str:
            d, u = mem.get("peak_bytes_donated"), mem.get("peak_bytes_undonated")
            if d is None or u is None:
                return "-"
            return f"{d / 1e6:.0f} / {u / 1e6:.0f}"

        lines.append(
            f"| {r['workload']} | {r['tree']} | {g['trace_s']:.2f} / {g['lower_s']:.2f} / "
            f"{g['compile_s']:.2f} | {o['trace_s']:.2f} / {o['lower_s']:.2f} / "
            f"{o['compile_s']:.2f} | {r['build']['ratio']:.2f} | "
            f"{mg['state_bytes_per_param']:.2f} / {mo['state_bytes_per_param']:.2f} | "
            f"{peak(mg)} | {peak(mo)} |"
        )
    base = [r for r in run["results"] if "ratio_to_baseline" in r["step"]["donated"]]
    if base:
        lines += [
            "",
            "Against gradtx's plain float32 adam step, timed in the same rounds "
            "(per call; for accumulation that is per micro-step):",
            "",
            "| workload | tree | gradtx donated | optax donated | gradtx undonated "
            "| optax undonated |",
            "|---|---|---:|---:|---:|---:|",
        ]
        for r in base:
            d, u = r["step"]["donated"], r["step"]["undonated"]
            lines.append(
                f"| {r['workload']} | {r['tree']} | {_ratio(d['ratio_to_baseline'])} | "
                f"{_ratio(d['optax_ratio_to_baseline'])} | {_ratio(u['ratio_to_baseline'])} | "
                f"{_ratio(u['optax_ratio_to_baseline'])} |"
            )
    t = run["triad"]
    lines += [
        "",
        f"Memory bandwidth (in-place triad, {t['elements']:,} float32, 12 bytes/element): XLA "
        f"{t['xla']['best_Bps'] / 1e9:.1f} GB/s (median {t['xla']['median_Bps'] / 1e9:.1f}), "
        f"NumPy {t['numpy']['best_Bps'] / 1e9:.1f} GB/s (median "
        f"{t['numpy']['median_Bps'] / 1e9:.1f}).",
    ]
    bw = run["summary"].get("adam_bandwidth")
    if bw:
        lines.append(
            f"Donated single-leaf adam step at 28 bytes/param: gradtx {bw['gradtx_Bps'] / 1e9:.1f} "
            f"GB/s = {100 * bw['fraction']:.0f}% of the triad's best, Optax "
            f"{bw['optax_Bps'] / 1e9:.1f} GB/s."
        )
    if run["torch"]["available"]:
        tv = run["summary"].get("torch_vs_optax", {})
        lines += [
            "",
            "torch.optim.Adam on CPU (same leaves, in place), ms per step and ratio to Optax's "
            "donated adam step:",
            "",
            "| variant | ms | ratio to Optax |",
            "|---|---:|---:|",
        ]
        for name, st in run["torch"]["adam"].items():
            ratio = tv.get(name)
            lines.append(
                f"| {name} | {_ms(st['median'])} | {ratio:.2f} |"
                if ratio
                else f"| {name} | {_ms(st['median'])} | - |"
            )
    else:
        lines += ["", f"torch.optim: not measured: {run['torch']['note']}."]
    lines += ["", "| target | value | limit | met |", "|---|---:|---:|---|"]
    for tg in run["summary"]["targets"]:
        lines.append(
            f"| {tg['target']} | {tg['value']:.2f} | {tg['limit']:.2f} | "
            f"{'yes' if tg['met'] else '**no**'} |"
        )
    return "\n".join(lines) + "\n"


def write_json(run: dict[str, Any], path: str) -> None:
    with open(path, "w") as f:
        json.dump(run, f, indent=1, sort_keys=True)


def pyplot() -> Any:
    """`matplotlib.pyplot` on the file-only Agg backend, or None when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


def write_png(run: dict[str, Any], path: str) -> bool:
    """A bar chart of the gradtx / Optax ratios (step donated, undonated, build); False when
    matplotlib is missing."""
    plt = pyplot()
    if plt is None:
        return False
    results = run["results"]
    labels = [f"{r['workload']}\n{r['tree']}" for r in results]
    series = [
        ("step, donated", [r["step"]["donated"]["ratio"] for r in results]),
        ("step, undonated", [r["step"]["undonated"]["ratio"] for r in results]),
        ("trace + compile", [{"median": r["build"]["ratio"]} for r in results]),
    ]
    fig, ax = plt.subplots(figsize=(max(8.0, 0.55 * len(labels) + 2), 5.0))
    width = 0.27
    for i, (name, values) in enumerate(series):
        xs = [j + (i - 1) * width for j in range(len(values))]
        med = [v["median"] for v in values]
        err = None
        if "q1" in values[0]:
            err = [
                [v["median"] - v["q1"] for v in values],
                [v["q3"] - v["median"] for v in values],
            ]
        ax.bar(xs, med, width, yerr=err, label=name, capsize=2)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels(labels, rotation=70, fontsize=7)
    ax.set_ylabel("gradtx / Optax (lower is faster)")
    m = run["machine"]
    ax.set_title(f"gradtx vs Optax {m['optax']}, jax {m['jax']}, {m['cpu']} ({m['date'][:10]})")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def write_all(run: dict[str, Any], out_dir: str) -> dict[str, str]:
    """`results.json`, `results.md` and (with matplotlib) `ratios.png` in `out_dir`."""
    os.makedirs(out_dir, exist_ok=True)
    paths = {
        "json": os.path.join(out_dir, "results.json"),
        "markdown": os.path.join(out_dir, "results.md"),
    }
    write_json(run, paths["json"])
    with open(paths["markdown"], "w") as f:
        f.write(markdown(run))
    png = os.path.join(out_dir, "ratios.png")
    if write_png(run, png):
        paths["png"] = png
    return paths


def write_result(result: dict[str, Any], text: str, out_dir: str, name: str) -> None:
    """Write a benchmark's `result` as `<name>.json` and its markdown `text` as `<name>.md` in
    `out_dir`, and print the text."""
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, f"{name}.json"), "w") as f:
        json.dump(result, f, indent=2)
    with open(os.path.join(out_dir, f"{name}.md"), "w") as f:
        f.write(text + "\n")
    print(text)
