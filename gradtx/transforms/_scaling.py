"""Scaling by constants, learning rates and schedules, and the learning-rate ratio helper."""

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from .._base._checks import check_non_negative, check_positive, check_scalar, concrete
from .._base._introspect import register
from .._base._numerics import abs_sq, last_used, safe_increment, value_at, zero_count
from .._base._recipe import recorded
from .._base._typing import ArrayLike, ScalarOrSchedule, Schedule
from ..core._transformation import GradientTransformation, stateless
from ._elementwise import elementwise


@recorded
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

    check_scalar("scale", "step_size", step_size)
    return stateless(lambda u, p: jax.tree.map(lambda g: (step_size * g).astype(g.dtype), u))


class ScaleByScheduleState(NamedTuple):
    count: jax.Array  # type: ignore[assignment]  # int32, saturating


def _scale_by_step_value(
    who: str, name: str, value: ScalarOrSchedule, sign: float
) -> GradientTransformation:
    def init(params):
        del params
        return ScaleByScheduleState(count=zero_count())

    def update(updates, state, params=None, **extra_args):
        del params, extra_args
        factor = value_at(value, state.count, who=who, name=name)
        if sign != 1.0:
            factor = sign * factor
        updates = jax.tree.map(lambda g: (factor * g).astype(g.dtype), updates)
        return updates, ScaleByScheduleState(count=safe_increment(state.count))

    # `gradtx.metrics` reports the value the latest update used (Optax's inject_hyperparams
    # convention): the schedule at count - 1, at step 0 before the first update.
    key = "step_size" if name == "step_size_fn" else name

    def report(state):
        return {key: last_used(value, state.count, who=who, name=name)}

    return register(GradientTransformation(init, update), "leaf", report=report)


@recorded
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
    return _scale_by_step_value("scale_by_schedule", "step_size_fn", step_size_fn, 1.0)


@recorded
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
    check_non_negative("scale_by_learning_rate", "learning_rate", learning_rate, finite=True)
    return _scale_by_step_value(
        "scale_by_learning_rate", "learning_rate", learning_rate, -1.0 if flip_sign else 1.0
    )


def lr_ratio(
    who: str, learning_rate: ScalarOrSchedule, initial_learning_rate: ArrayLike | None
) -> Callable[[Any], Any]:
    r"""`count -> \eta_t / \eta_0`, validated now.

    :math:`\eta_0` is `initial_learning_rate` when given, else the learning rate itself (a
    constant, for which the ratio is exactly 1) or the schedule's value at step 0. A schedule that
    starts at 0 (a warm-up from zero) has no usable ratio: the error asks for
    `initial_learning_rate`.
    """
    check_non_negative(who, "learning_rate", learning_rate, finite=True)
    if initial_learning_rate is not None:
        check_positive(who, "initial_learning_rate", initial_learning_rate)
        eta0 = initial_learning_rate
        return lambda count: value_at(learning_rate, count, who=who, name="learning_rate") / eta0
    if not callable(learning_rate):
        return lambda count: 1.0
    first = concrete(learning_rate(jnp.zeros([], jnp.int32)))  # None when traced
    if first is not None and not bool(jnp.all(first > 0)):
        raise ValueError(
            f"{who}: the learning-rate schedule is {first.item() if first.ndim == 0 else first} "
            "at step 0, so eta_t / eta_0 is undefined; pass initial_learning_rate=<the base "
            "learning rate> (nnabla's eta_0, the learning rate given to the solver)"
        )
    return lambda count: (
        value_at(learning_rate, count, who=who, name="learning_rate")
        / value_at(learning_rate, 0, who=who, name="learning_rate")
    )


@recorded
def normalize(eps: ArrayLike = 1e-12) -> GradientTransformation:
    r"""Divide each gradient leaf by its L2 norm.

    .. math::  u = \frac{g}{\sqrt{\max(\sum_i |g_i|^2,\ \epsilon)}}

    The norm is taken over one leaf (one parameter tensor), in float32, as `tf.nn.l2_normalize`
    does in RETURNN's `NormalizedSGD`; :math:`\epsilon` only keeps a zero gradient at zero.

    Args:
      eps: :math:`\epsilon` > 0, the smallest squared norm divided by.

    Returns:
      A `GradientTransformation` with state `ElementwiseState(count, slots={})`.

    Reference: RETURNN `NormalizedSGD` (`returnn/tf/updater.py`), after
    https://github.com/kmkolasinski/deep-learning-notes/tree/master/max-normed-optimizer.
    """
    who = "normalize"
    check_positive(who, "eps", eps)

    def rule(g, t):
        del t
        return g / jnp.sqrt(jnp.maximum(jnp.sum(abs_sq(g)), eps))

    return elementwise(rule, name=who)


__all__ = [
    "ScaleByScheduleState",
    "normalize",
    "scale",
    "scale_by_learning_rate",
    "scale_by_schedule",
]
