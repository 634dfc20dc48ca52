"""Scaling by constants, learning rates and schedules."""

from __future__ import annotations

from typing import NamedTuple

import jax

from .._checks import check_non_negative
from .._core import EmptyState, GradientTransformation
from .._numerics import safe_increment, value_at, zero_count
from .._typing import ArrayLike, ScalarOrSchedule, Schedule


def scale(step_size: ArrayLike) -> GradientTransformation:
    r"""Multiply every update by a constant.

    .. math::  u_t = s \, g_t

    Args:
      step_size: the factor :math:`s` (a scalar; may be traced).

    Returns:
      A stateless `GradientTransformation` (state `EmptyState`).
    """
    if callable(step_size):
        raise TypeError(
            "scale: step_size must be a number; for a function of the step use "
            "scale_by_schedule(fn) or scale_by_learning_rate(fn)"
        )

    def init(params):
        del params
        return EmptyState()

    def update(updates, state, params=None, **extra_args):
        del params, extra_args
        updates = jax.tree.map(lambda g: (step_size * g).astype(g.dtype), updates)
        return updates, state

    return GradientTransformation(init, update)


class ScaleByScheduleState(NamedTuple):
    count: jax.Array  # type: ignore[assignment]  # int32, saturating


def _scale_by_step_value(value: ScalarOrSchedule, sign: float) -> GradientTransformation:
    def init(params):
        del params
        return ScaleByScheduleState(count=zero_count())

    def update(updates, state, params=None, **extra_args):
        del params, extra_args
        factor = value_at(value, state.count)
        if sign != 1.0:
            factor = sign * factor
        updates = jax.tree.map(lambda g: (factor * g).astype(g.dtype), updates)
        return updates, ScaleByScheduleState(count=safe_increment(state.count))

    return GradientTransformation(init, update)


def scale_by_schedule(step_size_fn: Schedule) -> GradientTransformation:
    r"""Multiply every update by a function of the step count.

    .. math::  u_t = s(t) \, g_t, \qquad t = 0, 1, 2, \dots

    Args:
      step_size_fn: a function `count -> factor` (jit-compatible; `count` is an int32 scalar that
        starts at 0 on the first update).

    Returns:
      A `GradientTransformation` with state `ScaleByScheduleState(count)`.
    """
    if not callable(step_size_fn):
        raise TypeError(
            f"scale_by_schedule: step_size_fn must be callable, got {type(step_size_fn).__name__};"
            " for a constant use scale(step_size)"
        )
    return _scale_by_step_value(step_size_fn, 1.0)


def scale_by_learning_rate(
    learning_rate: ScalarOrSchedule, *, flip_sign: bool = True
) -> GradientTransformation:
    r"""Scale updates by a learning rate (a constant or a schedule) and, by default, negate them.

    .. math::  u_t = -\eta_t \, g_t

    so that `apply_updates(params, updates)` descends the gradient.

    Args:
      learning_rate: :math:`\eta`, a float >= 0 or a schedule `count -> lr`.
      flip_sign: negate (gradient descent). Pass False to ascend or to scale only.

    Returns:
      A `GradientTransformation` with state `ScaleByScheduleState(count)`; the layout is the same
      for a constant and for a schedule, so checkpoints survive switching between them.
    """
    check_non_negative("scale_by_learning_rate", "learning_rate", learning_rate)
    return _scale_by_step_value(learning_rate, -1.0 if flip_sign else 1.0)


__all__ = [
    "ScaleByScheduleState",
    "scale",
    "scale_by_learning_rate",
    "scale_by_schedule",
]
