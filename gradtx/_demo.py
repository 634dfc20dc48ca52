"""The demo job: train a small MLP on a generated classification task with gradtx.

`python -m gradtx demo` (what `make demo` runs) prints the loss falling and, when matplotlib is
installed, writes the training curves and the learned decision regions to `demo_out/`.
"""

from __future__ import annotations

import argparse
import itertools
import time
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import gradtx


def spirals(n_per_class: int = 300, classes: int = 3, noise: float = 0.3, seed: int = 0):
    """Interleaved 2-D spirals, one per class: (x float32[N, 2], y int32[N])."""
    rng = np.random.default_rng(seed)
    xs, ys = [], []
    for c in range(classes):
        r = np.linspace(0.05, 1.0, n_per_class)
        theta = np.linspace(c * 2 * np.pi / classes, c * 2 * np.pi / classes + 5.0, n_per_class)
        theta = theta + noise * rng.normal(size=n_per_class)
        xs.append(np.stack([r * np.sin(theta), r * np.cos(theta)], axis=1))
        ys.append(np.full(n_per_class, c))
    return np.concatenate(xs).astype(np.float32), np.concatenate(ys).astype(np.int32)


def init_mlp(key: jax.Array, sizes: tuple[int, ...]) -> dict[str, Any]:
    """He-initialised dense layers: {"layer0": {"kernel", "bias"}, ...}."""
    params = {}
    for i, (m, n) in enumerate(itertools.pairwise(sizes)):
        key, sub = jax.random.split(key)
        params[f"layer{i}"] = {
            "kernel": jax.random.normal(sub, (m, n)) * jnp.sqrt(2.0 / m),
            "bias": jnp.zeros(n),
        }
    return params


def mlp(params: dict[str, Any], x: jax.Array) -> jax.Array:
    n = len(params)
    for i in range(n):
        layer = params[f"layer{i}"]
        x = x @ layer["kernel"] + layer["bias"]
        if i < n - 1:
            x = jax.nn.relu(x)
    return x


def loss_fn(params: dict[str, Any], x: jax.Array, y: jax.Array) -> jax.Array:
    logits = mlp(params, x)
    return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), y[:, None], axis=1))


def make_schedule(steps: int):
    """Linear warm-up over the first 5% of the steps, then cosine decay to 1e-4."""
    return gradtx.schedules.warmup_cosine_decay(
        init_value=0.0,
        peak_value=1e-2,
        warmup_steps=max(steps // 20, 1),
        decay_steps=steps,
        end_value=1e-4,
    )


def make_optimizer(schedule) -> gradtx.GradientTransformation:
    """AdamW with global-norm clipping and a scheduled learning rate.

    Biases are excluded from weight decay with a glob pattern on parameter paths.
    """
    return gradtx.chain(
        gradtx.clip_by_global_norm(1.0),
        gradtx.adamw(schedule, weight_decay=1e-4, mask="!**/bias"),
    )


def train(steps: int = 2000, batch_size: int = 128, seed: int = 0, log_every: int = 200):
    """Train and return (params, history) where history has step / loss / accuracy lists."""
    x_all, y_all = spirals(seed=seed)
    order = np.random.default_rng(seed).permutation(len(x_all))
    n_test = len(order) // 5
    x, y = x_all[order[n_test:]], y_all[order[n_test:]]
    x_test, y_test = x_all[order[:n_test]], y_all[order[:n_test]]
    schedule = make_schedule(steps)
    tx = make_optimizer(schedule)
    params = init_mlp(jax.random.key(seed), (2, 64, 64, 3))
    opt_state = tx.init(params)

    @jax.jit
    def step(params, opt_state, xb, yb):
        loss, grads = jax.value_and_grad(loss_fn)(params, xb, yb)
        updates, opt_state = tx.update(grads, opt_state, params, value=loss)
        return gradtx.apply_updates(params, updates), opt_state, loss

    @jax.jit
    def evaluate(params):
        test_acc = jnp.mean(jnp.argmax(mlp(params, x_test), -1) == y_test)
        return loss_fn(params, x, y), test_acc

    rng = np.random.default_rng(seed + 1)
    # accuracy is measured on the held-out set; lr is the scheduled learning rate at that step
    history: dict[str, list] = {"step": [], "loss": [], "accuracy": [], "lr": []}
    start = time.perf_counter()
    for i in range(steps + 1):
        if i % log_every == 0 or i == steps:
            loss, acc = evaluate(params)
            history["step"].append(i)
            history["loss"].append(float(loss))
            history["accuracy"].append(float(acc))
            history["lr"].append(float(schedule(i)))
            print(f"step {i:5d}  train loss {float(loss):.4f}  test accuracy {float(acc):6.1%}")
        if i == steps:
            break
        idx = rng.integers(0, len(x), batch_size)
        params, opt_state, _ = step(params, opt_state, x[idx], y[idx])
    print(f"trained {steps} steps in {time.perf_counter() - start:.1f} s")
    return params, history


def plot(params, history, out_dir: Path) -> list[Path]:
    """Write the training curves and decision regions; returns the files written."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: skipping plots (pip install 'gradtx[plot]')")
        return []
    out_dir.mkdir(parents=True, exist_ok=True)
    x, y = spirals()
    fig, (ax1, ax3, ax2) = plt.subplots(1, 3, figsize=(15, 4))
    ax1.plot(history["step"], history["loss"], marker="o")
    ax1.set(xlabel="step", ylabel="cross-entropy", title="training loss", yscale="log")
    ax3.plot(history["step"], history["lr"], marker=".")
    ax3.set(xlabel="step", ylabel="learning rate", title="warm-up + cosine schedule")
    grid = np.stack(np.meshgrid(np.linspace(-1.2, 1.2, 200), np.linspace(-1.2, 1.2, 200)), -1)
    pred = np.asarray(jnp.argmax(mlp(params, jnp.asarray(grid.reshape(-1, 2))), -1))
    ax2.contourf(grid[..., 0], grid[..., 1], pred.reshape(200, 200), alpha=0.3, levels=2)
    ax2.scatter(x[:, 0], x[:, 1], c=y, s=6)
    ax2.set(title=f"decision regions (test accuracy {history['accuracy'][-1]:.1%})")
    fig.tight_layout()
    path = out_dir / "demo.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return [path]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gradtx demo", description=__doc__)
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--out", type=Path, default=Path("demo_out"))
    parser.add_argument("--no-plot", action="store_true")
    args = parser.parse_args(argv)
    params, history = train(steps=args.steps, log_every=max(args.steps // 30, 1))
    if not args.no_plot:
        for path in plot(params, history, args.out):
            print(f"wrote {path}")
    return 0
