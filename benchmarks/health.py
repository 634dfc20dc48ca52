"""`python -m benchmarks --health`: what the training-health tools cost in a real training step.

The benchmark model is an MLP (forward, backward and update in one jitted step, params and state
donated) trained with `chain(clip_by_global_norm(1.0), adamw(warmup-cosine))`. Each variant
adds one tool and returns `gradtx.metrics(tx, state)` from the step (so the metrics are computed
inside it, as a training loop would log them); Optax's same optimizer runs in the same
interleaved rounds. Reported: the median per-round ratio of each variant's step time to plain
gradtx's, and plain gradtx's to Optax's.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .harness import Budget, Stats, interleaved, machine_facts, paired_ratio
from .report import write_result

FULL = {"widths": (512, 1024, 1024, 1024, 1024, 512, 10), "batch": 256}
QUICK = {"widths": (32, 64, 64, 10), "batch": 16}


def _model(widths: tuple[int, ...], seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    params = {}
    for i, (a, b) in enumerate(itertools.pairwise(widths)):
        params[f"layer_{i}"] = {
            "kernel": jnp.asarray(rng.standard_normal((a, b), np.float32) / np.sqrt(a)),
            "bias": jnp.zeros(b, jnp.float32),
            "scale": jnp.ones(b, jnp.float32),
        }
    return params


def _loss(params: dict, x: jax.Array, y: jax.Array) -> jax.Array:
    h = x
    layers = sorted(params)
    for name in layers:
        p = params[name]
        h = (h @ p["kernel"] + p["bias"]) * p["scale"]
        if name != layers[-1]:
            h = jax.nn.gelu(h)
    logp = jax.nn.log_softmax(h)
    return -jnp.mean(jnp.take_along_axis(logp, y[:, None], axis=1))


def variants() -> dict[str, Callable[[], tuple[Any, bool]]]:
    """name -> () -> (optimizer, whether the step returns gradtx.metrics)."""
    import optax

    import gradtx

    schedule = gradtx.schedules.warmup_cosine_decay(0.0, 1e-3, 100, 10_000)

    def base():
        return gradtx.chain(gradtx.clip_by_global_norm(1.0), gradtx.adamw(schedule))

    return {
        "optax": lambda: (
            optax.chain(
                optax.clip_by_global_norm(1.0),
                optax.adamw(optax.warmup_cosine_decay_schedule(0.0, 1e-3, 100, 10_000)),
            ),
            False,
        ),
        "gradtx": lambda: (base(), False),
        "gradtx + metrics (no wrapper)": lambda: (base(), True),
        "with_metrics (global)": lambda: (gradtx.with_metrics(base()), True),
        "with_metrics (per leaf)": lambda: (gradtx.with_metrics(base(), per_leaf=True), True),
        "skip_on_spikes (grad_norm)": lambda: (
            gradtx.skip_on_spikes(base(), metric="grad_norm"),
            True,
        ),
        "apply_if_finite (located)": lambda: (
            gradtx.apply_if_finite(base(), 5, locate_nonfinite=True),
            True,
        ),
    }


class _Runner:
    def __init__(self, tx: Any, with_metrics: bool, params: dict, batch: tuple, calls: int):
        import gradtx

        def step(params, state, x, y):
            loss, grads = jax.value_and_grad(_loss)(params, x, y)
            updates, state = tx.update(grads, state, params, value=loss)
            params = jax.tree.map(lambda p, u: p + u, params, updates)
            out = gradtx.metrics(tx, state) if with_metrics else {}
            return params, state, loss, out

        self.fn = jax.jit(step, donate_argnums=(0, 1))
        self.params = jax.tree.map(jnp.copy, params)
        self.state = jax.jit(tx.init)(self.params)  # distinct buffers (donated)
        self.batch = batch
        self.calls = calls

    def run_block(self) -> float:
        import time

        p, s = self.params, self.state
        t = time.perf_counter()
        for _ in range(self.calls):
            p, s, loss, out = self.fn(p, s, *self.batch)
        jax.block_until_ready((p, s, loss, out))
        dt = time.perf_counter() - t
        self.params, self.state = p, s
        return dt / self.calls


def run(quick: bool, rounds: int | None, log: Callable[[str], None]) -> dict[str, Any]:
    size = QUICK if quick else FULL
    params = _model(size["widths"])
    rng = np.random.default_rng(1)
    x = jnp.asarray(rng.standard_normal((size["batch"], size["widths"][0]), np.float32))
    y = jnp.asarray(rng.integers(0, size["widths"][-1], size["batch"]).astype(np.int32))
    n_params = sum(int(np.prod(v.shape)) for v in jax.tree.leaves(params))
    budget = (
        Budget(warmup=1, min_rounds=2, max_rounds=rounds or 3, seconds=0.0)
        if quick
        else Budget(warmup=2, min_rounds=rounds or 15, max_rounds=rounds or 40, seconds=20.0)
    )
    runners = {}
    for name, make in variants().items():
        tx, with_m = make()
        runners[name] = _Runner(tx, with_m, params, (x, y), calls=2 if quick else 10)
        log(f"compiling {name}")
        runners[name].run_block()
    times = interleaved(runners, budget)
    rows = []
    for name in runners:
        med = Stats.of(times[name]).median
        vs_plain = paired_ratio(times, name, "gradtx")
        vs_optax = paired_ratio(times, name, "optax")
        rows.append(
            {
                "variant": name,
                "step_ms": med * 1e3,
                "vs_gradtx": None if vs_plain is None else vs_plain.median,
                "vs_gradtx_q": None if vs_plain is None else [vs_plain.q1, vs_plain.q3],
                "vs_optax": None if vs_optax is None else vs_optax.median,
            }
        )
    return {
        "machine": machine_facts(),
        "model": {"widths": list(size["widths"]), "batch": size["batch"], "params": n_params},
        "leaves": len(jax.tree.leaves(params)),
        "rounds": len(next(iter(times.values()))),
        "rows": rows,
    }


def markdown(result: dict[str, Any]) -> str:
    m = result["model"]
    lines = [
        f"MLP {'-'.join(map(str, m['widths']))}, batch {m['batch']}, {m['params']:,} params in "
        f"{result['leaves']} leaves; median of {result['rounds']} interleaved rounds.",
        "",
        "| variant | step ms | vs plain gradtx (IQR) | vs Optax |",
        "|---|---:|---:|---:|",
    ]
    for r in result["rows"]:
        q = r["vs_gradtx_q"]
        rel = "—" if r["vs_gradtx"] is None else f"{r['vs_gradtx']:.3f} ({q[0]:.3f}–{q[1]:.3f})"
        vo = "—" if r["vs_optax"] is None else f"{r['vs_optax']:.3f}"
        lines.append(f"| {r['variant']} | {r['step_ms']:.2f} | {rel} | {vo} |")
    return "\n".join(lines)


def main(quick: bool, out: str, rounds: int | None, log: Callable[[str], None]) -> int:
    result = run(quick, rounds, log)
    write_result(result, markdown(result), out, "health")
    return 0
