"""The quality part of `python -m benchmarks --lowbit` (see `benchmarks/lowbit.py`): final
held-out loss of the `--quality` language model and final loss of the demo MLP with float32,
8-bit and 4-bit AdamW moments, and with bf16 params (plain, with an int8 compensation residual,
with stochastic rounding), over seeds; state bytes per parameter."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .lowbit import _adamw, _nbytes, _spec

# --------------------------------------------------------------------------------------------
# Quality: the --quality language model
# --------------------------------------------------------------------------------------------

LM_PEAK_LR = 1e-2  # AdamW's best peak learning rate on this model (benchmarks/README.md)
LM_MIN_SIZE = 1024  # quantizes every 2-D leaf of the model (the smallest, embed / head: 1,920)
LM: dict[str, dict[str, Any]] = {
    "full": {"steps": 600, "seeds": (0, 1, 2), "long": 2000},
    "quick": {"seeds": (0,), "long": 16},
}
COMPENSATED = "4-bit, bf16 params + int8 compensation"
# --quick compiles fewer variants (each compile takes seconds): one per code path
QUICK_LM_VARIANTS = ("float32", "4-bit", COMPENSATED, "4-bit, bf16 params + stochastic rounding")
QUICK_DEMO_VARIANTS = ("float32", COMPENSATED)


def lm_variants(min_size: int) -> dict[str, tuple[str, Callable[[Any, int], Any]]]:
    """name -> (params dtype, (schedule, seed) -> optimizer)."""
    import gradtx

    def q(codec: str) -> Any:
        return _spec(codec, min_size=min_size)

    def four(lr: Any) -> Any:
        return _adamw(lr, q("4-bit"), weight_decay=0.01)

    return {
        "float32": ("float32", lambda lr, s: _adamw(lr, weight_decay=0.01)),
        "8-bit dynamic": ("float32", lambda lr, s: _adamw(lr, q("8-bit dynamic"), 0.01)),
        "8-bit sqrt": ("float32", lambda lr, s: _adamw(lr, q("8-bit sqrt"), 0.01)),
        "4-bit": ("float32", lambda lr, s: four(lr)),
        COMPENSATED: (
            "bfloat16",
            lambda lr, s: gradtx.with_compensation(four(lr), residual="int8"),
        ),
        "4-bit, bf16 params (plain)": ("bfloat16", lambda lr, s: four(lr)),
        "4-bit, bf16 params + stochastic rounding": (
            "bfloat16",
            lambda lr, s: gradtx.with_compensation(
                four(lr), residual=None, stochastic_rounding=True, key=s
            ),
        ),
    }


def _f32(tree: Any) -> Any:
    return jax.tree.map(lambda a: a.astype(jnp.float32), tree)


def _cast(tree: Any, dtype: str) -> Any:
    return jax.tree.map(lambda a: jnp.asarray(a, dtype), tree)


def _quantized_leaves(params: Any, spec: Any) -> list[str]:
    from gradtx.state._quantize import wants_quantized

    return [
        jax.tree_util.keystr(path)
        for path, leaf in jax.tree_util.tree_flatten_with_path(params)[0]
        if wants_quantized(spec, leaf)
    ]


def _memory(tx: Any, params: Any) -> dict[str, Any]:
    """Bytes per parameter value: the optimizer state on the 2-D leaves and on the whole model,
    and what training keeps (params + residual + optimizer state)."""
    import gradtx

    n = sum(int(np.prod(x.shape)) for x in jax.tree.leaves(params))
    whole = gradtx.state_bytes(jax.eval_shape(tx.init, params), params)
    matrices = {
        jax.tree_util.keystr(k): v
        for k, v in jax.tree_util.tree_flatten_with_path(params)[0]
        if v.ndim == 2
    }
    mats = gradtx.state_bytes(jax.eval_shape(tx.init, matrices), matrices)
    param_bytes = sum(_nbytes(x) for x in jax.tree.leaves(params))
    return {
        "optimizer_matrices": mats.optimizer_per_parameter,
        "optimizer_model": whole.optimizer_per_parameter,
        "residual": whole.residual_per_parameter,
        "persistent": (param_bytes + whole.total) / n,
    }


def _lm_run(tx: Any, params: Any, batches: np.ndarray, evaluate: Callable, heads: int) -> dict:
    import gradtx

    from .quality import loss_fn

    def step(params, state, tokens):
        loss, grads = jax.value_and_grad(lambda p: loss_fn(_f32(p), tokens, heads))(params)
        updates, state = tx.update(grads, state, params)
        return gradtx.apply_updates(params, updates), state, loss

    jitted = jax.jit(step, donate_argnums=(0, 1))
    params = jax.tree.map(jnp.array, params)  # a copy: the step donates it
    state = tx.init(params)
    losses = []
    for tokens in batches:
        params, state, loss = jitted(params, state, tokens)
        losses.append(loss)
    train = np.asarray(jnp.stack(losses))
    final = float(evaluate(_f32(params)))
    return {
        "final_loss": final,
        "train_loss_last50": float(np.mean(train[-50:])),
        "nan": bool(not np.all(np.isfinite(train)) or not np.isfinite(final)),
        "first_nonfinite_step": (
            int(np.flatnonzero(~np.isfinite(train))[0]) + 1
            if not np.all(np.isfinite(train))
            else None
        ),
    }


def lm_quality(quick: bool, log: Callable[[str], None]) -> dict[str, Any]:
    from . import quality as qb

    cfg = dict(qb.QUICK if quick else qb.FULL)
    plan = LM["quick" if quick else "full"]
    steps = cfg["steps"] if quick else plan["steps"]
    long_steps = plan.get("long")
    alphabet = qb._alphabet()
    longest = max(steps, long_steps or 0)
    text = qb.corpus(max(longest * cfg["batch"] * (cfg["context"] + 1) * 2, 20_000), seed=1)
    eval_batches = qb._batches(
        qb.corpus(20_000, seed=2), alphabet, qb.EVAL_BATCHES, cfg["batch"], cfg["context"], 4
    )
    heads = cfg["heads"]
    evaluate = jax.jit(
        lambda p: jnp.mean(jax.vmap(lambda b: qb.loss_fn(p, b, heads))(eval_batches))
    )
    min_size = LM_MIN_SIZE
    variants = lm_variants(min_size)
    params0 = qb.init_params(cfg, len(alphabet), 0)
    n = sum(int(np.prod(x.shape)) for x in jax.tree.leaves(params0))
    rows = []
    for name, (dtype, make) in variants.items():
        if quick and name not in QUICK_LM_VARIANTS:
            continue
        row: dict[str, Any] = {"variant": name, "params_dtype": dtype, "seeds": []}
        for seed in plan["seeds"]:
            params = _cast(qb.init_params(cfg, len(alphabet), seed), dtype)
            batches = qb._batches(
                text, alphabet, steps, cfg["batch"], cfg["context"], 3 + 10 * seed
            )
            tx = make(qb._schedule(LM_PEAK_LR, steps), seed)
            t = time.perf_counter()
            r = _lm_run(tx, params, batches, evaluate, heads)
            r.update(seed=seed, seconds=time.perf_counter() - t)
            row["seeds"].append(r)
            log(
                f"  lm {name:42s} seed {seed}: held-out {r['final_loss']:.4f}"
                f"{'  NaN' if r['nan'] else ''}  ({r['seconds']:.0f} s)"
            )
        row["mean_loss"] = float(np.mean([r["final_loss"] for r in row["seeds"]]))
        row["nan"] = any(r["nan"] for r in row["seeds"])
        row["memory"] = _memory(make(LM_PEAK_LR, 0), _cast(params0, dtype))
        rows.append(row)
    base = rows[0]["mean_loss"]
    for row in rows:
        row["vs_float32"] = row["mean_loss"] / base - 1
        row["within_1pct"] = bool(row["vs_float32"] <= 0.01 and not row["nan"])
    long = None
    if long_steps:
        long = {"steps": long_steps, "seed": 0, "runs": {}}
        params = qb.init_params(cfg, len(alphabet), 0)
        batches = qb._batches(text, alphabet, long_steps, cfg["batch"], cfg["context"], 3)
        for name in ("4-bit",) if quick else ("float32", "4-bit"):
            tx = variants[name][1](qb._schedule(LM_PEAK_LR, long_steps), 0)
            r = _lm_run(tx, _cast(params, "float32"), batches, evaluate, heads)
            long["runs"][name] = r
            log(f"  lm {long_steps} steps {name}: held-out {r['final_loss']:.4f}  NaN {r['nan']}")
    return {
        "config": cfg,
        "steps": steps,
        "peak_lr": LM_PEAK_LR,
        "parameters": n,
        "min_size": min_size,
        "quantized_leaves": _quantized_leaves(params0, _spec("4-bit", min_size=min_size)),
        "float32_leaves": [
            k
            for k in (
                jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_flatten_with_path(params0)[0]
            )
            if k not in _quantized_leaves(params0, _spec("4-bit", min_size=min_size))
        ],
        "rows": rows,
        "long": long,
    }


# --------------------------------------------------------------------------------------------
# Quality: the demo MLP
# --------------------------------------------------------------------------------------------

DEMO: dict[str, dict[str, Any]] = {
    "full": {"steps": 3000, "seeds": (0, 1, 2)},
    "quick": {"steps": 20, "seeds": (0,)},
}
DEMO_LR, DEMO_BATCH, DEMO_SIZES = 3e-3, 128, (2, 64, 64, 4)


def demo_variants() -> dict[str, tuple[str, Callable[[], Any]]]:
    import gradtx

    def adam(codec: str | None) -> Any:
        q = None if codec is None else _spec(codec)
        return gradtx.adam(DEMO_LR, mu_dtype=q, nu_dtype=q)

    return {
        "float32": ("float32", lambda: adam(None)),
        "8-bit sqrt": ("float32", lambda: adam("8-bit sqrt")),
        "4-bit": ("float32", lambda: adam("4-bit")),
        COMPENSATED: (
            "bfloat16",
            lambda: gradtx.with_compensation(adam("4-bit"), residual="int8"),
        ),
    }


def demo_quality(quick: bool, log: Callable[[str], None]) -> dict[str, Any]:
    """The demo's MLP and data (its train / test split), each run one compiled `lax.scan`."""
    import gradtx
    from gradtx.cli._demo import init_mlp, loss_fn, mlp, spirals

    plan = DEMO["quick" if quick else "full"]
    x_all, y_all = spirals(seed=0)
    order = np.random.default_rng(0).permutation(len(x_all))
    n_test = len(order) // 5
    x, y = jnp.asarray(x_all[order[n_test:]]), jnp.asarray(y_all[order[n_test:]])
    x_test, y_test = jnp.asarray(x_all[order[:n_test]]), jnp.asarray(y_all[order[:n_test]])
    rows = []
    for name, (dtype, make) in demo_variants().items():
        if quick and name not in QUICK_DEMO_VARIANTS:
            continue
        tx = make()

        @jax.jit
        def run(params, idx, tx=tx):
            def one(carry, ix):
                p, s = carry
                g = jax.grad(lambda q: loss_fn(_f32(q), x[ix], y[ix]))(p)
                u, s = tx.update(g, s, p)
                return (gradtx.apply_updates(p, u), s), None

            (p, _), _ = jax.lax.scan(one, (params, tx.init(params)), idx)
            p = _f32(p)
            acc = jnp.mean(jnp.argmax(mlp(p, x_test), -1) == y_test)
            return loss_fn(p, x, y), loss_fn(p, x_test, y_test), acc

        row: dict[str, Any] = {"variant": name, "params_dtype": dtype, "seeds": []}
        for seed in plan["seeds"]:
            params = _cast(init_mlp(jax.random.key(seed), DEMO_SIZES), dtype)
            idx = np.random.default_rng(seed + 1).integers(0, len(x), (plan["steps"], DEMO_BATCH))
            loss, test_loss, acc = run(params, jnp.asarray(idx))
            row["seeds"].append(
                {
                    "seed": seed,
                    "final_loss": float(loss),
                    "test_loss": float(test_loss),
                    "test_accuracy": float(acc),
                }
            )
            log(
                f"  demo {name:42s} seed {seed}: loss {float(loss):.4f}  held-out "
                f"{float(test_loss):.4f}  test acc {float(acc):.3f}"
            )
        row["mean_loss"] = float(np.mean([r["final_loss"] for r in row["seeds"]]))
        row["mean_test_loss"] = float(np.mean([r["test_loss"] for r in row["seeds"]]))
        row["nan"] = not all(np.isfinite(r["final_loss"]) for r in row["seeds"])
        rows.append(row)
    for row in rows:
        row["vs_float32"] = row["mean_loss"] / rows[0]["mean_loss"] - 1
        row["test_vs_float32"] = row["mean_test_loss"] / rows[0]["mean_test_loss"] - 1
    params = init_mlp(jax.random.key(0), DEMO_SIZES)
    return {
        "steps": plan["steps"],
        "batch": DEMO_BATCH,
        "sizes": list(DEMO_SIZES),
        "learning_rate": DEMO_LR,
        "quantized_leaves": _quantized_leaves(params, _spec("4-bit")),
        "rows": rows,
    }


# --------------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------------


def lm_markdown(lm: dict[str, Any]) -> list[str]:
    cfg = lm["config"]
    seeds = [r["seed"] for r in lm["rows"][0]["seeds"]]
    lines = [
        f"Language model (benchmarks/quality.py: {cfg['layers']} layers, width {cfg['width']}, "
        f"{lm['parameters']:,} parameters), {lm['steps']} steps of batch {cfg['batch']}, AdamW "
        f"(weight decay 0.01) at peak lr {lm['peak_lr']:g}, warm-up + cosine; final held-out "
        f"loss per seed. Quantized leaves (`min_size={lm['min_size']}`): "
        f"{', '.join(lm['quantized_leaves'])}; float32: {', '.join(lm['float32_leaves'])}. "
        "bf16 params: stored in bf16, the loss computed in float32 from them.",
        "",
        "| variant | "
        + " | ".join(f"seed {s}" for s in seeds)
        + " | mean | vs float32 | within 1% | NaN | state B/param, matrices | "
        "state B/param, model | residual B/param | persistent B/param |",
        "|---|" + "---:|" * (len(seeds) + 2) + "---|---|" + "---:|" * 4,
    ]
    for r in lm["rows"]:
        m = r["memory"]
        lines.append(
            f"| {r['variant']} | "
            + " | ".join(f"{x['final_loss']:.4f}" for x in r["seeds"])
            + f" | {r['mean_loss']:.4f} | {100 * r['vs_float32']:+.2f}% | "
            f"{'yes' if r['within_1pct'] else '**no**'} | {'**yes**' if r['nan'] else 'no'} | "
            f"{m['optimizer_matrices']:.3f} | {m['optimizer_model']:.3f} | {m['residual']:.3f} | "
            f"{m['persistent']:.3f} |"
        )
    if lm["long"]:

        def nan(v: dict) -> str:
            return f", NaN from step {v['first_nonfinite_step']}" if v["nan"] else ", no NaN"

        runs = lm["long"]["runs"]
        text = "; ".join(f"{k}: {v['final_loss']:.4f}{nan(v)}" for k, v in runs.items())
        lines += ["", f"{lm['long']['steps']}-step runs (seed 0), final held-out loss: {text}."]
    return lines


def demo_markdown(demo: dict[str, Any]) -> list[str]:
    seeds = [r["seed"] for r in demo["rows"][0]["seeds"]]
    sizes = "-".join(map(str, demo["sizes"]))
    lines = [
        f"Demo MLP ({sizes} on the demo's spirals, batch {demo['batch']}, {demo['steps']} steps "
        f"of Adam at {demo['learning_rate']:g}): final held-out loss (training loss, test "
        f"accuracy). Quantized leaves (default `min_size`): "
        f"{', '.join(demo['quantized_leaves'])}.",
        "",
        "| variant | "
        + " | ".join(f"seed {s}" for s in seeds)
        + " | held-out mean | vs float32 | training mean | vs float32 |",
        "|---|" + "---:|" * (len(seeds) + 4),
    ]
    for r in demo["rows"]:
        cells = " | ".join(
            f"{x['test_loss']:.4f} ({x['final_loss']:.4f}, {x['test_accuracy']:.3f})"
            for x in r["seeds"]
        )
        lines.append(
            f"| {r['variant']} | {cells} | {r['mean_test_loss']:.4f} | "
            f"{100 * r['test_vs_float32']:+.1f}% | {r['mean_loss']:.4f} | "
            f"{100 * r['vs_float32']:+.1f}% |"
        )
    return lines
