"""Getting `gradtx.metrics` out of a training loop: to host numbers every n steps, and into
TensorBoard, Weights & Biases style `log(dict)` calls, a list, or `print`."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import jax
import numpy as np

from .._base._checks import check_int


def to_scalars(metrics: Mapping[str, Any]) -> dict[str, float]:
    """`gradtx.metrics` output as plain Python floats, fetched from the devices in one transfer.

    Args:
      metrics: a dict of scalar arrays (or numbers).

    Returns:
      `dict[str, float]` with the same keys, in the same order.
    """
    host = jax.device_get(dict(metrics))  # a dict pytree: comes back with its keys sorted
    out = {}
    for key in metrics:
        arr = np.asarray(host[key])
        if arr.size != 1:
            raise ValueError(
                f"to_scalars: metric {key!r} has shape {arr.shape}; metrics are scalars (call "
                "gradtx.metrics on one optimizer state, not on a stacked / pmapped one: index a "
                "device first)"
            )
        out[key] = float(arr.reshape(()))
    return out


def format_metrics(values: Mapping[str, float], step: int | None = None) -> str:
    """One line of `key=value` pairs (integers as such, others to 6 significant digits).

    Args:
      values: host numbers, e.g. from `to_scalars`.
      step: shown first as `step N` when given.

    Returns:
      The line, e.g. `"step 10  learning_rate=0.001  grad_norm=0.5"`.
    """
    parts = [f"step {step}"] if step is not None else []
    for key, value in values.items():
        if float(value).is_integer() and math.isfinite(value) and abs(value) < 1e15:
            parts.append(f"{key}={int(value)}")
        else:
            parts.append(f"{key}={value:.6g}")
    return "  ".join(parts)


def _write(sink: Any, values: dict[str, float], step: int) -> None:
    if sink is print:
        print(format_metrics(values, step))
    elif isinstance(sink, list):
        sink.append((step, values))
    elif callable(getattr(sink, "add_scalar", None)):  # tensorboardX / torch.utils.tensorboard
        for key, value in values.items():
            sink.add_scalar(key, value, step)
    elif callable(getattr(sink, "log", None)):  # a wandb run (or the wandb module)
        sink.log(values, step=step)
    else:
        sink(values, step)


def _check_sink(sink: Any, i: int) -> None:
    if sink is print or isinstance(sink, list) or callable(sink):
        return
    if callable(getattr(sink, "add_scalar", None)) or callable(getattr(sink, "log", None)):
        return
    raise TypeError(
        f"log_every: sink {i} must be print, a list, a TensorBoard SummaryWriter (add_scalar), a "
        f"wandb run (log) or a function (values, step), got {type(sink).__name__}"
    )


class MetricsLogger:
    """What `log_every` returns: `logger(step, metrics)` writes on every n-th step."""

    def __init__(self, every: int, sinks: tuple[Any, ...]) -> None:
        self.every = every
        self.sinks = sinks if sinks else (print,)

    def due(self, step: int) -> bool:
        """Whether `step` is one this logger writes (a multiple of `every`)."""
        return int(step) % self.every == 0

    def __call__(self, step: Any, metrics: Mapping[str, Any]) -> dict[str, float] | None:
        """Write `metrics` (from `gradtx.metrics`) at `step` if it is due, and return the host
        values written (None when not due; no device transfer then)."""
        step = int(step)
        if not self.due(step):
            return None
        values = to_scalars(metrics)
        for sink in self.sinks:
            _write(sink, values, step)
        return values


def log_every(n: int, *sinks: Any) -> MetricsLogger:
    """A logger for a training loop: every `n`-th step, the metrics go to each sink.

    Only due steps move anything to the host, so the jitted step is not synchronised on the
    others. A sink is `print` (one line; the default), a list (a `(step, values)` pair per
    logged step is appended), a TensorBoard writer (`tensorboardX.SummaryWriter` or
    `torch.utils.tensorboard.SummaryWriter`: `add_scalar(key, value, step)` per metric), a
    Weights & Biases run or module (`log(values, step=step)`), or a function `(values, step)`.

    Args:
      n: log on the steps that are multiples of `n`, an int >= 1.
      *sinks: where the metrics go.

    Returns:
      A `MetricsLogger`: call it as `logger(step, gradtx.metrics(tx, state))`.

    Example:
      >>> import jax.numpy as jnp, gradtx
      >>> tx = gradtx.with_metrics(gradtx.sgd(0.1))
      >>> params, state, history = jnp.ones(2), tx.init(jnp.ones(2)), []
      >>> log = gradtx.log_every(2, history)
      >>> for step in range(1, 5):
      ...     updates, state = tx.update(jnp.full(2, 3.0), state, params)
      ...     _ = log(step, gradtx.metrics(tx, state))
      >>> [(step, round(values["grad_norm"], 3)) for step, values in history]
      [(2, 4.243), (4, 4.243)]
    """
    check_int("log_every", "n", n, minimum=1)
    for i, sink in enumerate(sinks):
        _check_sink(sink, i)
    return MetricsLogger(n, sinks)


__all__ = ["MetricsLogger", "format_metrics", "log_every", "to_scalars"]
