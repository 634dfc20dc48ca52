"""The demo job: several optimizers from a config file, trained side by side on generated spirals.

`python -m gradtx demo` (what `make demo` runs) builds each optimizer of a config file (by default
the package's `demo.yaml`: SGD with Nesterov momentum, Adam, AdamW with warm-up + cosine,
AdaBound and Eve) with `from_config`, wraps it in `with_metrics`, trains the same MLP from the
same initial parameters on the same batches with each, shows a progress bar per run, prints a
results table (final training loss, test accuracy, final gradient norm, how often clipping acted,
skipped steps, steps per second) and writes `results.md`, `results.json` and `demo.png` (loss
curves, accuracy, learning-rate schedules, gradient and update norms with the skipped steps
marked, the best run's decision regions) to `--out`.

The metrics (`gradtx.metrics`) are read inside the compiled `lax.scan`, one dict of scalars per
step, and come back with the chunk's losses: no extra compile, no extra device round trip.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .._base._version import __version__
from ..config import from_config
from ..config._errors import ConfigError, shown
from ..config._load import read as read_config
from ..core import apply_updates
from ..health import metrics, with_metrics

DEFAULT_CONFIG = Path(__file__).with_name("demo.yaml")
TRAIN_DEFAULTS: dict[str, Any] = {"steps": 3000, "batch_size": 128, "hidden": [64, 64], "seed": 0}
# what a demo may ask for: (smallest, largest) of each integer setting
TRAIN_BOUNDS: dict[str, tuple[int, int]] = {
    "steps": (1, 1_000_000),
    "batch_size": (1, 65_536),
    "hidden": (1, 4_096),  # each layer's width
    "seed": (0, 2**31 - 1),
}
MAX_LAYERS = 16


def spirals(
    n_per_class: int = 400, classes: int = 4, turn: float = 7.0, noise: float = 0.3, seed: int = 0
):
    """Interleaved 2-D spirals, one per class, each turning `turn` radians with angular noise:
    (x float32[N, 2], y int32[N])."""
    rng = np.random.default_rng(seed)
    xs, ys = [], []
    for c in range(classes):
        r = np.linspace(0.05, 1.0, n_per_class)
        theta = np.linspace(c * 2 * np.pi / classes, c * 2 * np.pi / classes + turn, n_per_class)
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


def load_demo_config(path: str | Path) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """`(train settings, {run name: optimizer config})` from a demo config file.

    The file has an `optimizers` mapping (run name -> a `from_config` config) and an
    optional `train` mapping (`steps`, `batch_size`, `hidden`, `seed`). Every optimizer config is
    validated here, before anything trains.
    """
    data, where = read_config(Path(path), what="demo config")
    unknown = sorted(set(data) - {"train", "optimizers"})
    if unknown:
        raise ConfigError(
            f"{where}: unknown section(s) {unknown}; a demo config has `optimizers` (run name -> "
            "optimizer config) and an optional `train`"
        )
    runs = data.get("optimizers")
    if not isinstance(runs, dict) or not runs:
        raise ConfigError(
            f"{where}: `optimizers` must map run names to optimizer configs (docs/config.md), "
            f"got {shown(runs)}"
        )
    train = dict(TRAIN_DEFAULTS)
    given = data.get("train") or {}
    if not isinstance(given, dict):
        raise ConfigError(f"{where}: train: must be a mapping of settings, got {shown(given)}")
    bad = sorted(map(str, set(given) - set(TRAIN_DEFAULTS)))
    if bad:
        raise ConfigError(f"{where}: unknown `train` key(s) {bad}; known: {sorted(TRAIN_DEFAULTS)}")
    for key, value in given.items():
        if key == "hidden":
            check_hidden(value, f"{where}: train.hidden")
        else:
            check_setting(key, value, f"{where}: train.{key}")
    train.update(given)
    for name, cfg in runs.items():
        try:
            built = from_config(cfg)
        except ConfigError as e:
            raise ConfigError(f"{where}: optimizers.{name}: {e}") from None
        if built.member_configs is not None:
            raise ConfigError(
                f"{where}: optimizers.{name}.sweep: the demo trains one optimizer per run; give "
                "each member its own run (a sweep builds a population, trained in Python: "
                "docs/config.md, Sweeps)"
            )
    return train, {str(k): v for k, v in runs.items()}


def check_setting(key: str, value: Any, where: str) -> int:
    """`value` if it is an integer within `TRAIN_BOUNDS[key]`, else a `ConfigError`."""
    lo, hi = TRAIN_BOUNDS[key]
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{where}: must be an integer, got {shown(value)}")
    if not lo <= value <= hi:
        raise ConfigError(f"{where}: must be in {lo} .. {hi}, got {shown(value)}")
    return value


def check_hidden(value: Any, where: str) -> None:
    if not isinstance(value, list) or len(value) > MAX_LAYERS:
        raise ConfigError(
            f"{where}: must be a list of at most {MAX_LAYERS} layer widths, got {shown(value)}"
        )
    for i, width in enumerate(value):
        check_setting("hidden", width, f"{where}[{i}]")


def check_output_folder(out: Path) -> None:
    """Create `out` (the results folder) and check that it takes files, before any training."""
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {str(out)!r}: exists and is not a folder")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ConfigError(f"--out {str(out)!r}: cannot create the folder: {e}") from None
    if not os.access(out, os.W_OK | os.X_OK):
        raise ConfigError(f"--out {str(out)!r}: the folder is not writable")


def select(runs: dict[str, Any], wanted: str | None) -> dict[str, Any]:
    """The runs named in the comma-separated `wanted` (all when None), in the order given."""
    if wanted is None:
        return runs
    names = [n.strip() for n in wanted.split(",") if n.strip()]
    missing = [n for n in names if n not in runs]
    if missing or not names:
        raise ConfigError(
            f"--optimizers: unknown run(s) {missing or wanted!r}; the config defines "
            f"{', '.join(runs)}"
        )
    return {n: runs[n] for n in names}


class _Progress:
    """A progress bar: tqdm's when it is installed, else one plain line rewritten in place."""

    def __init__(self, total: int, desc: str):
        try:
            from tqdm.auto import tqdm
        except ImportError:
            self._bar = None
        else:
            self._bar = tqdm(total=total, desc=f"{desc:>20s}", unit="step", leave=True)
        self.total, self.desc, self.done = total, desc, 0

    def update(self, n: int, loss: float) -> None:
        self.done += n
        if self._bar is not None:
            self._bar.set_postfix(loss=f"{loss:.4f}", refresh=False)
            self._bar.update(n)
            return
        width = 30
        filled = width * self.done // max(self.total, 1)
        end = "\n" if self.done >= self.total else ""
        print(
            f"\r{self.desc:>20s} [{'#' * filled}{'.' * (width - filled)}] "
            f"{self.done}/{self.total}  loss {loss:.4f}",
            end=end,
            flush=True,
        )

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


@dataclass
class Run:
    """One optimizer's training: its curves and final numbers."""

    name: str
    optimizer: str
    steps: list[int] = field(default_factory=list)
    loss: list[float] = field(default_factory=list)  # training loss, mean over each chunk
    accuracy: list[float] = field(default_factory=list)  # held-out accuracy after each chunk
    lr: np.ndarray | None = None
    grad_norm: list[float] = field(default_factory=list)  # global gradient norm, chunk means
    update_norm: list[float] = field(default_factory=list)  # global update norm, chunk means
    grad_norm_steps: np.ndarray | None = None  # the gradient norm of every step
    clip_fraction: np.ndarray | None = None  # per step, largest over the clipping links; or None
    skipped_steps: list[int] = field(default_factory=list)  # steps a skip wrapper dropped (1-based)
    final_loss: float = float("nan")  # on the whole training set, after the last step
    test_accuracy: float = float("nan")
    steps_per_s: float = float("nan")
    compile_s: float = float("nan")
    params: Any = None

    @property
    def final_grad_norm(self) -> float:
        """The gradient norm averaged over the last chunk of steps (NaN when not measured)."""
        return self.grad_norm[-1] if self.grad_norm else float("nan")

    @property
    def clipped(self) -> float | None:
        """The fraction of steps on which clipping removed something; None without a clip link."""
        if self.clip_fraction is None or not len(self.clip_fraction):
            return None
        return float(np.mean(self.clip_fraction > 0))

    @property
    def skipped(self) -> int:
        """How many steps were skipped (spikes) or non-finite; 0 without such wrappers."""
        return len(self.skipped_steps)


def _ends_with(key: str, name: str) -> bool:
    """Whether a `gradtx.metrics` key is `name` or a path-qualified `.../name`."""
    return key == name or key.endswith(f"/{name}")


def step_health(values: dict[str, np.ndarray]) -> tuple[np.ndarray | None, np.ndarray]:
    """From per-step `gradtx.metrics` (each a float/int/bool array over steps): the largest clip
    fraction of each step (None when no link clips) and which steps a skip wrapper counted
    (`skip_on_spikes`' `total_skipped`, `apply_if_finite`'s `total_notfinite` going up)."""
    clips = [
        np.asarray(v, np.float64) for k, v in values.items() if k.split("/")[0] == "clip_fraction"
    ]
    clip = np.max(np.stack(clips), axis=0) if clips else None
    n = len(values["grad_norm"])
    skipped = np.zeros(n, bool)
    for key, value in values.items():
        if _ends_with(key, "total_skipped") or _ends_with(key, "total_notfinite"):
            total = np.asarray(value, np.int64)
            skipped |= np.diff(total, prepend=0) > 0
    return clip, skipped


def train_run(
    name: str,
    config: dict[str, Any],
    data: tuple[np.ndarray, ...],
    *,
    steps: int,
    batch_size: int,
    hidden: tuple[int, ...],
    seed: int,
    chunk: int = 100,
) -> Run:
    """Train the MLP with the optimizer `config` builds; every run sees the same initial
    parameters and the same batches. Steps run `chunk` at a time inside one compiled `lax.scan`
    (the loss is passed to every update as `value=`, which Eve and plateau schedules read).
    The optimizer is wrapped in `with_metrics`; `gradtx.metrics` of every step's state is a scan
    output next to the loss."""
    x, y, x_test, y_test = data
    configured = from_config(config)  # keeps `learning_rate_at`
    tx = with_metrics(configured)
    params = init_mlp(jax.random.key(seed), (x.shape[1], *hidden, int(y.max()) + 1))
    opt_state = tx.init(params)

    def one_step(carry, batch):
        params, opt_state = carry
        loss, grads = jax.value_and_grad(loss_fn)(params, *batch)
        updates, opt_state = tx.update(grads, opt_state, params, value=loss)
        return (apply_updates(params, updates), opt_state), (loss, metrics(tx, opt_state))

    def run_chunk(params, opt_state, xb, yb):
        (params, opt_state), (losses, per_step) = jax.lax.scan(
            one_step, (params, opt_state), (xb, yb)
        )
        test_acc = jnp.mean(jnp.argmax(mlp(params, jnp.asarray(x_test)), -1) == y_test)
        return params, opt_state, jnp.mean(losses), test_acc, per_step

    rng = np.random.default_rng(seed + 1)
    chunks = [chunk] * (steps // chunk) + ([steps % chunk] if steps % chunk else [])
    idx = (rng.integers(0, len(x), (n, batch_size)) for n in chunks)  # drawn chunk by chunk
    compiled: dict[int, Any] = {}
    start = time.perf_counter()
    for n in sorted(set(chunks)):
        xb_shape = jax.ShapeDtypeStruct((n, batch_size, x.shape[1]), x.dtype)
        yb_shape = jax.ShapeDtypeStruct((n, batch_size), y.dtype)
        compiled[n] = (
            jax.jit(run_chunk, donate_argnums=(0, 1))
            .lower(params, opt_state, xb_shape, yb_shape)
            .compile()
        )
    run = Run(name=name, optimizer=str(config.get("optimizer", {}).get("name", "?")))
    run.compile_s = time.perf_counter() - start
    bar = _Progress(steps, name)
    done = 0
    train_time = 0.0
    per_step: list[dict[str, np.ndarray]] = []
    for n, ix in zip(chunks, idx, strict=True):
        xb, yb = x[ix], y[ix]
        t0 = time.perf_counter()
        params, opt_state, loss, acc, chunk_metrics = compiled[n](params, opt_state, xb, yb)
        loss, acc = float(loss), float(acc)  # waits for the chunk
        train_time += time.perf_counter() - t0
        chunk_metrics = jax.device_get(chunk_metrics)  # computed already: a small copy
        per_step.append(chunk_metrics)
        done += n
        run.steps.append(done)
        run.loss.append(loss)
        run.accuracy.append(acc)
        run.grad_norm.append(float(np.mean(chunk_metrics["grad_norm"])))
        run.update_norm.append(float(np.mean(chunk_metrics["update_norm"])))
        bar.update(n, loss)
    bar.close()
    if per_step:
        values = {k: np.concatenate([np.asarray(m[k]) for m in per_step]) for k in per_step[0]}
        run.grad_norm_steps = values["grad_norm"].astype(np.float32)
        run.clip_fraction, skipped = step_health(values)
        run.skipped_steps = [int(i) + 1 for i in np.flatnonzero(skipped)]
    run.steps_per_s = steps / train_time if train_time > 0 else float("nan")
    run.final_loss = float(jax.jit(loss_fn)(params, x, y))
    run.test_accuracy = run.accuracy[-1] if run.accuracy else float("nan")
    run.lr = configured.learning_rate_at(np.arange(steps + 1))
    run.params = params
    return run


def results_table(runs: list[Run]) -> str:
    """A Markdown table of the runs' final numbers: "grad norm" is the mean global gradient norm
    of the last chunk of steps, "clipped %" the share of steps on which a clipping link removed
    something ("-" for a run without clipping), "skipped" the steps a skip wrapper dropped or
    found non-finite (`skip_on_spikes`, `apply_if_finite`; 0 without them)."""
    lines = [
        "| run | optimizer | final train loss | test accuracy | grad norm | clipped % | skipped "
        "| steps/s | compile s |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in runs:
        clipped = "-" if r.clipped is None else f"{r.clipped:.1%}"
        lines.append(
            f"| {r.name} | {r.optimizer} | {r.final_loss:.4f} | {r.test_accuracy:.1%} | "
            f"{r.final_grad_norm:#.3g} | {clipped} | {r.skipped} | "
            f"{r.steps_per_s:,.0f} | {r.compile_s:.2f} |"
        )
    return "\n".join(lines)


def plot(runs: list[Run], data: tuple[np.ndarray, ...], out_dir: Path) -> Path | None:
    """Write `demo.png`: loss curves, test accuracy, learning rates, gradient norms (skipped
    steps marked), update norms, best decision regions."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(
            "matplotlib is not installed: no plot (pip install 'gradtx[demo]'; "
            "from a checkout: pip install -e '.[demo]')"
        )
        return None
    x, y = data[0], data[1]
    fig, axes = plt.subplots(2, 3, figsize=(18, 9))
    (ax_loss, ax_acc, ax_lr), (ax_grad, ax_upd, ax_regions) = axes
    styles = itertools.cycle(["-", "--", "-.", ":"])
    any_skipped = False
    for r, style in zip(runs, styles, strict=False):
        (line,) = ax_loss.plot(r.steps, r.loss, style, label=r.name)
        color = line.get_color()
        ax_acc.plot(r.steps, r.accuracy, style, color=color, label=r.name)
        if r.lr is not None and np.all(np.isfinite(r.lr)):
            ax_lr.plot(np.arange(len(r.lr)), r.lr, style, color=color, label=r.name)
        per_step = r.grad_norm_steps
        if per_step is not None and len(per_step):
            every = np.arange(1, len(per_step) + 1)
            ax_grad.plot(every, per_step, "-", color=color, alpha=0.15, lw=0.6)
            if r.skipped_steps:
                any_skipped = True
                at = np.asarray(r.skipped_steps)
                # a non-finite step's norm cannot be drawn: its mark goes at the run's top
                finite = per_step[np.isfinite(per_step)]
                top = float(finite.max()) if finite.size else 1.0
                shown_at = np.where(np.isfinite(per_step[at - 1]), per_step[at - 1], top)
                ax_grad.scatter(at, shown_at, marker="x", color=color, s=30, zorder=3)
        if r.grad_norm:
            ax_grad.plot(r.steps, r.grad_norm, style, color=color, label=r.name)
        if r.update_norm:
            ax_upd.plot(r.steps, r.update_norm, style, color=color, label=r.name)
    ax_loss.set(xlabel="step", ylabel="cross-entropy", title="training loss", yscale="log")
    ax_acc.set(xlabel="step", ylabel="accuracy", title="held-out accuracy")
    ax_lr.set(xlabel="step", ylabel="learning rate", title="learning-rate schedules", yscale="log")
    title = "gradient norm (chunk mean; every step faint)"
    if any_skipped:
        title += "; x: skipped steps"
    ax_grad.set(xlabel="step", ylabel="global L2 norm", title=title, yscale="log")
    ax_upd.set(
        xlabel="step", ylabel="global L2 norm", title="update norm (chunk mean)", yscale="log"
    )
    for ax in (ax_loss, ax_acc, ax_lr, ax_grad, ax_upd):
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
    best = max(runs, key=lambda r: r.test_accuracy)
    lo, hi = float(x.min()) - 0.2, float(x.max()) + 0.2
    grid = np.stack(np.meshgrid(np.linspace(lo, hi, 200), np.linspace(lo, hi, 200)), -1)
    pred = np.asarray(jnp.argmax(mlp(best.params, jnp.asarray(grid.reshape(-1, 2))), -1))
    levels = np.arange(int(y.max()) + 2) - 0.5
    ax_regions.contourf(
        grid[..., 0], grid[..., 1], pred.reshape(200, 200), alpha=0.3, levels=levels
    )
    ax_regions.scatter(x[:, 0], x[:, 1], c=y, s=5)
    ax_regions.set(
        title=f"decision regions of {best.name} (test accuracy {best.test_accuracy:.1%})"
    )
    fig.tight_layout()
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "demo.png"
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def _int_arg(text: str) -> int:
    try:
        if len(text) > 30:
            raise ValueError
        return int(text)
    except ValueError:
        shortened = text if len(text) <= 40 else f"{text[:37]}..."
        raise argparse.ArgumentTypeError(f"expected an integer, got {shortened!r}") from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m gradtx demo",
        description="Train a small MLP on generated spirals with several optimizers from a config "
        "file, print a results table and plot the runs.",
    )
    parser.add_argument("--config", type=Path, default=DEFAULT_CONFIG, help="demo config file")
    parser.add_argument("--optimizers", help="comma-separated run names (default: all)")
    parser.add_argument(
        "--steps", type=_int_arg, help="optimizer steps per run (default: config's)"
    )
    parser.add_argument("--out", type=Path, default=Path("demo_out"), help="output folder")
    parser.add_argument("--no-plot", action="store_true", help="do not write demo.png")
    args = parser.parse_args(argv)
    try:
        train, runs = load_demo_config(args.config)
        runs = select(runs, args.optimizers)
        if args.steps is not None:
            lo, hi = TRAIN_BOUNDS["steps"]
            if not lo <= args.steps <= hi:
                raise ConfigError(f"--steps must be in {lo} .. {hi}, got {args.steps}")
        check_output_folder(args.out)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    steps = int(args.steps if args.steps is not None else train["steps"])
    x_all, y_all = spirals(seed=int(train["seed"]))
    order = np.random.default_rng(int(train["seed"])).permutation(len(x_all))
    n_test = len(order) // 5
    data = (
        x_all[order[n_test:]],
        y_all[order[n_test:]],
        x_all[order[:n_test]],
        y_all[order[:n_test]],
    )
    print(
        f"gradtx {__version__} demo: {len(runs)} optimizers from {args.config}, {steps} "
        f"steps each, batch {train['batch_size']}, MLP "
        f"2-{'-'.join(map(str, train['hidden']))}-{int(y_all.max()) + 1}, "
        f"on {jax.default_backend()}"
    )
    results = [
        train_run(
            name,
            cfg,
            data,
            steps=steps,
            batch_size=int(train["batch_size"]),
            hidden=tuple(int(h) for h in train["hidden"]),
            seed=int(train["seed"]),
        )
        for name, cfg in runs.items()
    ]
    table = results_table(results)
    print()
    print(table)
    (args.out / "results.md").write_text(table + "\n", encoding="utf-8")
    summary = [
        {k: getattr(r, k) for k in ("name", "optimizer", "final_loss", "test_accuracy")}
        | {"grad_norm": r.final_grad_norm, "clipped": r.clipped, "skipped": r.skipped}
        | {"skipped_steps": r.skipped_steps[:1000]}
        | {"steps_per_s": r.steps_per_s, "compile_s": r.compile_s, "steps": steps}
        for r in results
    ]
    (args.out / "results.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    print(f"\nwrote {args.out / 'results.md'}, {args.out / 'results.json'}")
    if not args.no_plot:
        path = plot(results, data, args.out)
        if path is not None:
            print(f"wrote {path}")
    return 0
