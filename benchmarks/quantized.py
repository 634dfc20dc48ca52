"""8-bit optimizer states: step time, state bytes and peak bytes of float32, bf16 and 8-bit Adam
side by side (one process, interleaved rounds), build (compile) time against the number of leaves,
and a training-quality table on two small tasks.

`python -m benchmarks --quantized [--quick] [--tree NAME ...] [--part steps|build|quality ...]`
prints the tables and writes `quantized.json` / `quantized.md` into `--out`. "8-bit" packs the
quantized leaves of each buffer into one codec (`gradtx.quantized()`, the default); "8-bit
per-leaf" is `gradtx.quantized(pack_leaves=False)`, measured where it compiles in minutes (up to
`PER_LEAF_MAX_LEAVES` leaves).
"""

from __future__ import annotations

import gc
import itertools
import json
import os
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .harness import Budget, Stats, compile_step, interleaved, machine_facts, make_runner
from .workloads import FULL_TREES, QUICK_TREES, Workload, step_fn

VARIANTS = ("float32", "bf16", "8-bit")
PER_LEAF = "8-bit per-leaf"
PER_LEAF_MAX_LEAVES = 200  # above this the per-leaf codec takes minutes and GBs to compile
BUILD_LEAVES = (20, 200, 2000)  # trees of (80, 100) leaves for the build-time table
QUICK_BUILD_LEAVES = (4, 16)
PARTS = ("steps", "build", "quality")


def make_adam(variant: str, learning_rate: Any = 1e-3) -> Any:
    import gradtx

    if variant == "float32":
        return gradtx.adam(learning_rate)
    if variant == "bf16":
        return gradtx.adam(learning_rate, mu_dtype=jnp.bfloat16, nu_dtype=jnp.bfloat16)
    q = gradtx.quantized(pack_leaves=variant != PER_LEAF)
    return gradtx.adam(learning_rate, mu_dtype=q, nu_dtype=q)


def _workload(variant: str) -> Workload:
    return Workload(f"adam_{variant}", lambda lib, v=variant: make_adam(v), description=variant)


# --------------------------------------------------------------------------------------------
# Step time and memory
# --------------------------------------------------------------------------------------------


def step_table(
    quick: bool,
    log: Callable[[str], None],
    trees: list[str] | None = None,
    donations: tuple[bool, ...] = (True, False),
) -> list[dict[str, Any]]:
    budget = (
        Budget(min_rounds=3, max_rounds=4, seconds=0.2, warmup=1)
        if quick
        else Budget(min_rounds=5, max_rounds=15, seconds=3.0, warmup=1)
    )
    rows = []
    for tree in QUICK_TREES if quick else FULL_TREES:
        if trees and tree.name not in trees:
            continue
        params, grads = tree.params(), tree.grads()
        # packing changes nothing on a one-leaf tree; per-leaf is too slow to build on big ones
        variants = VARIANTS + ((PER_LEAF,) if 1 < tree.count <= PER_LEAF_MAX_LEAVES else ())
        for donate in donations:
            compiled = {
                v: compile_step(_workload(v), tree, "gradtx", donate, params, grads)
                for v in variants
            }
            runners = {v: make_runner(_workload(v), "gradtx", compiled[v], tree) for v in variants}
            times = interleaved(runners, budget)
            for v in variants:
                ratios = [a / b for a, b in zip(times[v], times["float32"], strict=True)]
                c = compiled[v]
                row = {
                    "tree": tree.name,
                    "donated": donate,
                    "variant": v,
                    "ms": 1e3 * Stats.of(times[v]).median,
                    "ratio": Stats.of(ratios).as_dict(),
                    "state_bytes_per_param": c.state_bytes / tree.size,
                    "peak_bytes": c.peak_bytes,
                    "temp_bytes": c.temp_bytes,
                    "build_s": c.trace_s + c.lower_s + c.compile_s,
                }
                rows.append(row)
                r = row["ratio"]
                log(
                    f"  {tree.name:8s} {'donated' if donate else 'undonated':9s} {v:14s} "
                    f"{row['ms']:8.2f} ms  x{r['median']:.2f} [{r['q1']:.2f}, {r['q3']:.2f}]  "
                    f"{row['state_bytes_per_param']:.3f} B/param  peak {c.peak_bytes}  "
                    f"build {row['build_s']:.1f} s"
                )
            del runners, compiled
            gc.collect()
        del params, grads
        gc.collect()
    return rows


# --------------------------------------------------------------------------------------------
# Build time against the number of leaves
# --------------------------------------------------------------------------------------------


def build_table(quick: bool, log: Callable[[str], None]) -> list[dict[str, Any]]:
    """Trace, lower and compile the donated Adam step (as `compile_step`) on trees of `n`
    leaves of 80x100 (8000 values each, quantized at the default `min_size`): wall seconds of
    each stage, and the process's CPU seconds for all three (steadier on a shared machine)."""
    rows = []
    for n in QUICK_BUILD_LEAVES if quick else BUILD_LEAVES:
        params = {
            f"layer_{i:04d}": {"w": jax.ShapeDtypeStruct((80, 100), jnp.float32)} for i in range(n)
        }
        variants = ("float32", "8-bit") + ((PER_LEAF,) if n <= PER_LEAF_MAX_LEAVES else ())
        for v in variants:
            tx = make_adam(v)
            state = jax.eval_shape(tx.init, params)
            jitted = jax.jit(step_fn(tx, "gradtx"), donate_argnums=(0, 1))
            cpu0, t0 = time.process_time(), time.perf_counter()
            traced = jitted.trace(params, state, params)
            t1 = time.perf_counter()
            lowered = traced.lower()
            t2 = time.perf_counter()
            compiled = lowered.compile()
            t3, cpu3 = time.perf_counter(), time.process_time()
            kernels = compiled.as_text().count(" fusion(")
            row = {
                "leaves": n,
                "variant": v,
                "trace_s": t1 - t0,
                "lower_s": t2 - t1,
                "compile_s": t3 - t2,
                "build_s": t3 - t0,
                "cpu_s": cpu3 - cpu0,
                "kernels": kernels,
            }
            rows.append(row)
            log(
                f"  {n:5d} leaves {v:14s} trace {row['trace_s']:6.2f}  lower {row['lower_s']:6.2f}"
                f"  compile {row['compile_s']:7.2f}  (build {row['build_s']:7.2f} s wall, "
                f"{row['cpu_s']:7.2f} s CPU, {kernels} fusions)"
            )
            del compiled, lowered, traced, jitted
            gc.collect()
    return rows


# --------------------------------------------------------------------------------------------
# Training quality
# --------------------------------------------------------------------------------------------

# 3x5 glyphs of the digits 0-9 (rows top to bottom, 3 bits each), for the generated fallback.
_GLYPHS = [
    "111101101101111", "010110010010111", "111001111100111", "111001111001111",
    "101101111001001", "111100111001111", "111100111101111", "111001001001001",
    "111101111101111", "111101111001111",
]  # fmt: skip


def digits_data() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, str]:
    """scikit-learn's 8x8 digits (1797 images) when installed; otherwise generated 8x8 images of
    the 3x5 digit glyphs, scaled, shifted and noised. Returns a train/test split."""
    try:
        from sklearn.datasets import load_digits

        d = load_digits()
        x, y, source = d.data.astype(np.float32) / 16.0, d.target.astype(np.int32), "sklearn digits"
    except ImportError:
        rng = np.random.default_rng(0)
        n = 2000
        y = rng.integers(0, 10, n).astype(np.int32)
        x = np.zeros((n, 8, 8), np.float32)
        for i, label in enumerate(y):
            g = np.array([int(c) for c in _GLYPHS[label]], np.float32).reshape(5, 3)
            big = np.kron(g, np.ones((1, 2), np.float32))[:, : rng.integers(5, 7)]
            r, c = rng.integers(0, 8 - 5 + 1), rng.integers(0, 8 - big.shape[1] + 1)
            x[i, r : r + 5, c : c + big.shape[1]] = big * rng.uniform(0.6, 1.0)
        x = np.clip(x + rng.normal(0, 0.25, x.shape), 0, 1).reshape(n, 64).astype(np.float32)
        source = "generated 8x8 digit glyphs (scikit-learn not installed)"
    split = int(0.8 * len(y))
    return x[:split], y[:split], x[split:], y[split:], source


def _mlp_init(key: Any, sizes: list[int]) -> dict:
    params = {}
    for i, (a, b) in enumerate(itertools.pairwise(sizes)):
        key, sub = jax.random.split(key)
        params[f"layer{i}"] = {
            "w": jax.random.normal(sub, (a, b)) * np.sqrt(2.0 / a),
            "b": jnp.zeros(b),
        }
    return params


def _mlp(params: dict, x: jax.Array) -> jax.Array:
    n = len(params)
    for i in range(n):
        x = x @ params[f"layer{i}"]["w"] + params[f"layer{i}"]["b"]
        if i < n - 1:
            x = jax.nn.relu(x)
    return x


def _xent(logits: jax.Array, y: jax.Array) -> jax.Array:
    return jnp.mean(
        jax.nn.logsumexp(logits, -1) - jnp.take_along_axis(logits, y[:, None], -1)[:, 0]
    )


def train_digits(variant: str, steps: int) -> dict[str, float]:
    xtr, ytr, xte, yte, _ = (jnp.asarray(a) if not isinstance(a, str) else a for a in digits_data())
    params = _mlp_init(jax.random.PRNGKey(0), [64, 256, 256, 10])
    tx = make_adam(variant, 1e-3)
    batch = 64

    def loss_fn(p, x, y):
        return _xent(_mlp(p, x), y)

    @jax.jit
    def run(params):
        def step(carry, i):
            p, s = carry
            idx = jax.random.randint(jax.random.PRNGKey(i), (batch,), 0, xtr.shape[0])
            loss, g = jax.value_and_grad(loss_fn)(p, xtr[idx], ytr[idx])
            u, s = tx.update(g, s, p)
            return (jax.tree.map(jnp.add, p, u), s), loss

        (p, _), _ = jax.lax.scan(step, (params, tx.init(params)), jnp.arange(steps))
        return p

    p = run(params)
    logits = _mlp(p, xte)
    return {
        "train_loss": float(loss_fn(p, xtr, ytr)),
        "test_loss": float(_xent(logits, yte)),
        "test_accuracy": float(jnp.mean(jnp.argmax(logits, -1) == yte)),
    }


def corpus() -> tuple[str, str]:
    """The repository's own documentation (bundled text): README and docs/*.md."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    parts = []
    docs = sorted(f for f in os.listdir(os.path.join(root, "docs")) if f.endswith(".md"))
    for rel in ["README.md", *(os.path.join("docs", f) for f in docs)]:
        path = os.path.join(root, rel)
        if os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                parts.append(f.read())
    text = "".join(c for c in "\n".join(parts) if 32 <= ord(c) < 127 or c == "\n")
    return text[:400_000], "README.md + docs/*.md of this repository"


def _lm_init(key: Any, vocab: int, d: int, ctx: int) -> dict:
    ks = jax.random.split(key, 8)

    def n(k, shape, scale):
        return jax.random.normal(k, shape) * scale

    return {
        "embed": n(ks[0], (vocab, d), 0.1),
        "pos": n(ks[1], (ctx, d), 0.1),
        "qkv": n(ks[2], (d, 3 * d), d**-0.5),
        "proj": n(ks[3], (d, d), d**-0.5),
        "mlp_in": n(ks[4], (d, 4 * d), d**-0.5),
        "mlp_out": n(ks[5], (4 * d, d), (4 * d) ** -0.5),
        "ln1": jnp.ones(d),
        "ln2": jnp.ones(d),
        "out": n(ks[6], (d, vocab), d**-0.5),
    }


def _ln(x: jax.Array, g: jax.Array) -> jax.Array:
    m = x.mean(-1, keepdims=True)
    return g * (x - m) / jnp.sqrt(((x - m) ** 2).mean(-1, keepdims=True) + 1e-5)


def _lm(p: dict, tokens: jax.Array) -> jax.Array:
    """A one-block causal transformer (4 heads) over characters."""
    t = tokens.shape[-1]
    x = p["embed"][tokens] + p["pos"][:t]
    h = _ln(x, p["ln1"])
    q, k, v = jnp.split(h @ p["qkv"], 3, -1)
    heads = 4

    def split(z):
        return z.reshape(*z.shape[:-1], heads, -1).swapaxes(-2, -3)

    q, k, v = split(q), split(k), split(v)
    att = q @ k.swapaxes(-1, -2) / np.sqrt(q.shape[-1])
    att = jnp.where(jnp.tril(jnp.ones((t, t), bool)), att, -1e9)
    y = (jax.nn.softmax(att, -1) @ v).swapaxes(-2, -3).reshape(x.shape)
    x = x + y @ p["proj"]
    x = x + jax.nn.gelu(_ln(x, p["ln2"]) @ p["mlp_in"]) @ p["mlp_out"]
    return x @ p["out"]


def train_lm(variant: str, steps: int) -> dict[str, float]:
    text, _ = corpus()
    chars = sorted(set(text))
    ids = np.array([chars.index(c) for c in text], np.int32)
    split = int(0.9 * len(ids))
    train, test = jnp.asarray(ids[:split]), jnp.asarray(ids[split:])
    ctx, batch = 32, 32
    params = _lm_init(jax.random.PRNGKey(0), len(chars), 64, ctx)
    tx = make_adam(variant, 3e-3)

    def windows(data, starts):
        return jax.vmap(lambda s: jax.lax.dynamic_slice(data, (s,), (ctx + 1,)))(starts)

    def loss_fn(p, w):
        logits = _lm(p, w[:, :-1])
        return _xent(logits.reshape(-1, logits.shape[-1]), w[:, 1:].reshape(-1))

    @jax.jit
    def run(params):
        def step(carry, i):
            p, s = carry
            starts = jax.random.randint(jax.random.PRNGKey(i), (batch,), 0, split - ctx - 1)
            loss, g = jax.value_and_grad(loss_fn)(p, windows(train, starts))
            u, s = tx.update(g, s, p)
            return (jax.tree.map(jnp.add, p, u), s), loss

        (p, _), losses = jax.lax.scan(step, (params, tx.init(params)), jnp.arange(steps))
        return p, losses

    p, losses = run(params)
    test_starts = jnp.arange(0, test.shape[0] - ctx - 1, ctx)[:256]
    w = windows(test, test_starts)
    logits = _lm(p, w[:, :-1])
    return {
        "train_loss": float(jnp.mean(losses[-50:])),
        "test_loss": float(loss_fn(p, w)),
        "test_accuracy": float(jnp.mean(jnp.argmax(logits, -1) == w[:, 1:])),
    }


def quality_table(quick: bool, log: Callable[[str], None]) -> dict[str, Any]:
    steps = {"digits": 100 if quick else 600, "lm": 60 if quick else 400}
    out: dict[str, Any] = {
        "sources": {"digits": digits_data()[4], "lm": corpus()[1]},
        "steps": steps,
        "rows": [],
    }
    for task, fn in (("digits", train_digits), ("lm", train_lm)):
        for v in VARIANTS:
            t = time.perf_counter()
            r = fn(v, steps[task])
            r.update(task=task, variant=v, seconds=time.perf_counter() - t)
            out["rows"].append(r)
            log(
                f"  {task:6s} {v:7s} train {r['train_loss']:.4f}  test {r['test_loss']:.4f}  "
                f"acc {r['test_accuracy']:.4f}  ({r['seconds']:.0f} s)"
            )
    return out


def markdown(
    step_rows: list[dict[str, Any]],
    quality: dict[str, Any] | None,
    build_rows: list[dict[str, Any]] | None = None,
) -> str:
    lines: list[str] = []
    if step_rows:
        lines += [
            "| tree | step | variant | ms | time / float32 Adam | state B/param | peak MB | "
            "build s |",
            "|---|---|---|---:|---:|---:|---:|---:|",
        ]
    for r in step_rows:
        q = r["ratio"]
        peak = "n/a" if r["peak_bytes"] is None else f"{r['peak_bytes'] / 1e6:.0f}"
        lines.append(
            f"| {r['tree']} | {'donated' if r['donated'] else 'undonated'} | {r['variant']} | "
            f"{r['ms']:.1f} | {q['median']:.2f} ({q['q1']:.2f}-{q['q3']:.2f}) | "
            f"{r['state_bytes_per_param']:.3f} | {peak} | {r['build_s']:.1f} |"
        )
    if build_rows:
        lines += [
            "",
            "Build time of the donated Adam step, leaves of 80x100 (trace + lower + compile):",
            "",
            "| leaves | variant | wall s | CPU s | compile s | fusions |",
            "|---:|---|---:|---:|---:|---:|",
        ]
        for r in build_rows:
            lines.append(
                f"| {r['leaves']} | {r['variant']} | {r['build_s']:.1f} | {r['cpu_s']:.1f} | "
                f"{r['compile_s']:.1f} | {r['kernels']} |"
            )
    if quality is None:
        return "\n".join(lines)
    lines += [
        "",
        f"Training quality ({quality['steps']['digits']} / {quality['steps']['lm']} steps; "
        f"digits: {quality['sources']['digits']}; language model: {quality['sources']['lm']}):",
        "",
        "| task | variant | train loss | test loss | test accuracy | loss vs float32 |",
        "|---|---|---:|---:|---:|---:|",
    ]
    base = {r["task"]: r for r in quality["rows"] if r["variant"] == "float32"}
    for r in quality["rows"]:
        rel = r["test_loss"] / base[r["task"]]["test_loss"] - 1
        lines.append(
            f"| {r['task']} | {r['variant']} | {r['train_loss']:.4f} | {r['test_loss']:.4f} | "
            f"{r['test_accuracy']:.4f} | {100 * rel:+.1f}% |"
        )
    return "\n".join(lines)


def main(
    *,
    quick: bool,
    out: str,
    log: Callable[[str], None] = print,
    trees: list[str] | None = None,
    parts: list[str] | None = None,
    donations: tuple[bool, ...] = (True, False),
) -> int:
    parts = list(parts or PARTS)
    facts = machine_facts()
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    log(f"8-bit states on {facts['cpu']} ({facts['cpu_count']} cores), load {load}")
    steps = step_table(quick, log, trees, donations) if "steps" in parts else []
    builds = build_table(quick, log) if "build" in parts else []
    quality = quality_table(quick, log) if "quality" in parts else None
    end_load = os.getloadavg() if hasattr(os, "getloadavg") else None
    log(f"load at the end {end_load}")
    md = markdown(steps, quality, builds)
    os.makedirs(out, exist_ok=True)
    result = {
        "facts": facts,
        "load": load,
        "end_load": end_load,
        "steps": steps,
        "build": builds,
        "quality": quality,
    }
    with open(os.path.join(out, "quantized.json"), "w") as f:
        json.dump(result, f, indent=1)
    with open(os.path.join(out, "quantized.md"), "w") as f:
        f.write(md + "\n")
    log("")
    log(md)
    return 0
