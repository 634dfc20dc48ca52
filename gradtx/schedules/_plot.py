"""Plotting schedules (needs the optional extra `gradtx[plot]`, i.e. matplotlib)."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ._common import as_step

_FORMATS = (".png", ".svg", ".pdf")


def _named(schedules: Any) -> list[tuple[str, Callable[[Any], Any]]]:
    if isinstance(schedules, Mapping):
        items = [(str(k), v) for k, v in schedules.items()]
    elif callable(schedules):
        items = [(getattr(schedules, "__name__", "schedule"), schedules)]
    elif isinstance(schedules, Sequence) and not isinstance(schedules, str | bytes):
        items = [(getattr(s, "__name__", f"schedule {i}"), s) for i, s in enumerate(schedules)]
    else:
        raise ValueError(
            "plot: schedules must be a schedule, a list of them or a dict {name: schedule}, "
            f"got {type(schedules).__name__}"
        )
    if not items:
        raise ValueError("plot: schedules is empty; pass at least one schedule")
    for name, s in items:
        if not callable(s):
            raise ValueError(f"plot: the schedule {name!r} is not callable, got {s!r}")
    return items


def _steps(steps: Any) -> np.ndarray:
    if isinstance(steps, int | np.integer) and not isinstance(steps, bool):
        if steps < 1:
            raise ValueError(f"plot: steps must be >= 1 (the number of steps to show), got {steps}")
        return np.arange(int(steps), dtype=np.int32)
    arr = np.asarray(as_step(np.asarray(steps)))
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(
            "plot: steps must be a number of steps or a non-empty 1-D array of steps, "
            f"got shape {np.shape(steps)}"
        )
    return arr


def plot(
    schedules: Any,
    steps: int | Sequence[int] | np.ndarray,
    path: str | os.PathLike | None = None,
    *,
    title: str | None = None,
    log_scale: bool = False,
) -> Any:
    """Plot schedules against the step: one figure, one curve per schedule.

    Each schedule is evaluated over all steps in one `jax.vmap`-ed, jitted call. The figure is a
    `matplotlib.figure.Figure` created without pyplot, so no display or backend is needed (PNG
    is rendered with Agg), and it shows in notebooks when it is the cell's result.

    Args:
      schedules: a schedule, a list of schedules (labelled by their names) or a dict
        `{label: schedule}`; gradtx, Optax and plain jit-compatible functions all work.
      steps: the number of steps to show (steps 0 .. steps-1) or a 1-D array of steps.
      path: where to save the figure; the suffix picks the format (.png, .svg or .pdf).
      title: the figure title.
      log_scale: use a logarithmic y axis.

    Returns:
      The `matplotlib.figure.Figure` (its axes hold one line per schedule, in order).

    Raises:
      ImportError: matplotlib is not installed (`pip install 'gradtx[plot]'`; from a checkout:
        `pip install -e '.[plot]'`).
    """
    items = _named(schedules)
    xs = _steps(steps)
    if path is not None and os.path.splitext(os.fspath(path))[1].lower() not in _FORMATS:
        raise ValueError(
            f"plot: path must end in one of {list(_FORMATS)} (the suffix picks the format), "
            f"got {os.fspath(path)!r}"
        )
    try:
        from matplotlib.figure import Figure
    except ImportError as err:
        raise ImportError(
            "gradtx.schedules.plot needs matplotlib, which is not installed; "
            "install it with: pip install 'gradtx[plot]' "
            "(from a checkout: pip install -e '.[plot]')"
        ) from err

    fig = Figure(figsize=(7.0, 4.0), layout="constrained")
    ax = fig.add_subplot()
    grid = jnp.asarray(xs)
    for label, schedule in items:
        curve = jax.jit(jax.vmap(lambda t, s=schedule: jnp.asarray(s(t), jnp.float32)))(grid)
        ax.plot(xs, np.asarray(curve), label=label)
    ax.set_xlabel("step")
    ax.set_ylabel("value")
    if log_scale:
        ax.set_yscale("log")
    if title:
        ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend()
    if path is not None:
        fig.savefig(os.fspath(path))
    return fig


__all__ = ["plot"]
