"""Basic schedules: constant, linear, polynomial, exponential, piecewise and multi-step.

`t` below is the step (an int32 count starting at 0; negative steps count as 0 and steps past
2**31 - 1 saturate). Every schedule returns float32.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp

from .._base._checks import check_non_negative, check_one_of, check_positive
from .._base._recipe import recorded
from .._base._typing import ArrayLike
from ._common import (
    NamedSchedule,
    as_boundaries_and_scales,
    check_boundaries_and_scales,
    check_sorted_steps,
    check_steps,
    f32,
    int32s,
    interpolate_segments,
    traced,
)


@recorded(schedule=True)
def constant(value: ArrayLike) -> NamedSchedule:
    r"""The same value at every step: :math:`v(t) = c`.

    Args:
      value: :math:`c` (a number; may be traced).

    Returns:
      A schedule `step -> float32` (same shape as the step).

    Reference: `optax.constant_schedule`.
    """

    def fn(step):
        return jnp.broadcast_to(f32(value), step.shape)

    return NamedSchedule("constant", fn, value=value)


def _degenerate(who: str, transition_steps: Any, transition_begin: Any, **zero: Any) -> tuple:
    """Optax's documented fallbacks, with a warning: (constant?, transition_begin).

    `transition_steps <= 0` (or a zero in `zero`, exponential_decay's `decay_rate`) gives a
    constant schedule at `init_value`; a negative `transition_begin` counts from 0. Both are
    what Optax documents (it logs them at INFO level, which no one sees); here they warn.
    Traced values cannot be decided on here: the schedule applies both rules itself
    (`_held`, `jnp.maximum`), without a warning.
    """
    check_steps(who, "transition_steps", transition_steps, minimum=-(2**62))
    check_steps(who, "transition_begin", transition_begin, minimum=-(2**62))
    constant_reason = None
    if not traced(transition_steps) and transition_steps <= 0:
        constant_reason = f"transition_steps={transition_steps} <= 0"
    for name, value in zero.items():
        if isinstance(value, int | float) and value == 0:
            constant_reason = f"{name}=0"
    if constant_reason is not None:
        warnings.warn(
            f"{who}: {constant_reason} gives a constant schedule at init_value (as in Optax);"
            " pass transition_steps >= 1 for a transition",
            UserWarning,
            stacklevel=3,
        )
    if traced(transition_begin):
        transition_begin = jnp.maximum(transition_begin, 0)
    elif transition_begin < 0:
        warnings.warn(
            f"{who}: transition_begin={transition_begin} < 0 counts from step 0 (as in Optax)",
            UserWarning,
            stacklevel=3,
        )
        transition_begin = 0
    return constant_reason is not None, transition_begin


def _held(value: jax.Array, constant: Any, init_value: ArrayLike) -> jax.Array:
    """`value`, or `init_value` where the traced condition `constant` holds (the rules of
    `_degenerate`, for values known only when the schedule runs); `value` itself when
    `constant` is None (decided at construction)."""
    if constant is None:
        return value
    return jnp.where(constant, f32(init_value), value)


def _positive_steps(who: str, steps: Any) -> tuple[Any, Any]:
    """`(steps, None)` for an int (>= 1: `_degenerate` made the schedule constant otherwise);
    for a traced one `(max(steps, 1), steps <= 0)`: the length to divide by and the condition
    under which Optax's schedule is constant."""
    if not traced(steps):
        return check_steps(who, "transition_steps", steps, minimum=1), None
    return jnp.maximum(steps, 1), steps <= 0


def _polynomial(
    who: str,
    init_value: ArrayLike,
    end_value: ArrayLike,
    power: ArrayLike,
    transition_steps: int,
    transition_begin: int,
) -> NamedSchedule:
    is_constant, transition_begin = _degenerate(who, transition_steps, transition_begin)
    if is_constant:
        return constant(init_value)
    steps, held = _positive_steps(who, transition_steps)
    begin = check_steps(who, "transition_begin", transition_begin, minimum=0)

    def fn(step):
        # 1 - tau/T as (T - tau)/T with the subtraction in integers: under jit XLA turns the
        # division into a multiplication by 1/T, and 1 - T * (1/T) can be slightly negative,
        # which a fractional power turns into NaN (optax.polynomial_schedule has that bug).
        # The ends are exact (XLA's 1/T multiply makes T/T = 1 - ulp): the first value is
        # init_value and the last end_value, as without jit.
        remaining = steps - jnp.clip(step - begin, 0, steps)
        frac = jnp.where(remaining == steps, 1.0, remaining.astype(jnp.float32) / steps)
        init, end = f32(init_value), f32(end_value)
        return _held((init - end) * frac ** f32(power) + end, held, init_value)

    args: dict[str, Any] = {"init_value": init_value, "end_value": end_value}
    if who == "polynomial":
        args["power"] = power
    args.update(transition_steps=steps, transition_begin=begin)
    return NamedSchedule(who, fn, **args)


@recorded(schedule=True)
def polynomial(
    init_value: ArrayLike,
    end_value: ArrayLike,
    power: ArrayLike,
    transition_steps: int,
    transition_begin: int = 0,
) -> NamedSchedule:
    r"""Polynomial transition from `init_value` to `end_value`.

    .. math::

      v(t) = (I - E) \left(1 - \frac{\tau}{T}\right)^{p} + E, \qquad
      \tau = \min(\max(t - B, 0), T)

    so :math:`v = I` up to step :math:`B` and :math:`v = E` from step :math:`B + T` on.

    Args:
      init_value: :math:`I`.
      end_value: :math:`E`.
      power: :math:`p` > 0.
      transition_steps: :math:`T`, the length of the transition (<= 0: constant, see below).
      transition_begin: :math:`B`, the steps held at `init_value` first (< 0 counts as 0).

    Returns:
      A schedule `step -> float32`.

    Reference: `optax.polynomial_schedule` (same values). As there, `transition_steps <= 0` gives
    the constant schedule `init_value` and a negative `transition_begin` counts from 0; here
    each warns.
    """
    check_positive("polynomial", "power", power)
    return _polynomial(
        "polynomial", init_value, end_value, power, transition_steps, transition_begin
    )


@recorded(schedule=True)
def linear(
    init_value: ArrayLike, end_value: ArrayLike, transition_steps: int, transition_begin: int = 0
) -> NamedSchedule:
    r"""Linear transition from `init_value` to `end_value`.

    .. math::  v(t) = I + \frac{\min(\max(t - B, 0), T)}{T} (E - I)

    Args:
      init_value: :math:`I`.
      end_value: :math:`E`.
      transition_steps: :math:`T` >= 1.
      transition_begin: :math:`B` >= 0.

    Returns:
      A schedule `step -> float32`.

    Reference: `optax.linear_schedule` (`polynomial` with power 1).
    """
    return _polynomial("linear", init_value, end_value, 1.0, transition_steps, transition_begin)


@recorded(schedule=True)
def exponential_decay(
    init_value: ArrayLike,
    transition_steps: int,
    decay_rate: ArrayLike,
    transition_begin: int = 0,
    staircase: bool = False,
    end_value: ArrayLike | None = None,
) -> NamedSchedule:
    r"""Exponential decay (or growth) by `decay_rate` every `transition_steps` steps.

    .. math::

      v(t) = I \, r^{\,p}, \qquad p = \frac{\max(t - B, 0)}{T}
      \quad (\lfloor p \rfloor \text{ with staircase})

    clipped below at `end_value` when :math:`r < 1` (above when :math:`r > 1`).

    Args:
      init_value: :math:`I`.
      transition_steps: :math:`T` >= 1.
      decay_rate: :math:`r` > 0.
      transition_begin: :math:`B` >= 0, the steps held at `init_value` first.
      staircase: decay in discrete jumps every `transition_steps`.
      end_value: the bound at which the decay (or growth) stops; None for no bound.

    Returns:
      A schedule `step -> float32`.

    Examples:
      >>> import gradtx
      >>> lr = gradtx.schedules.exponential_decay(1.0, 10, decay_rate=0.5, staircase=True)
      >>> [float(lr(t)) for t in (0, 9, 10, 25)]
      [1.0, 1.0, 0.5, 0.25]

    Reference: `optax.exponential_decay`. As there, `transition_steps <= 0` or `decay_rate == 0`
    gives the constant schedule `init_value` and a negative `transition_begin` counts from 0;
    here each warns. A negative `decay_rate` (NaN at fractional powers) raises a `ValueError`.
    """
    who = "exponential_decay"
    is_constant, transition_begin = _degenerate(
        who, transition_steps, transition_begin, decay_rate=decay_rate
    )
    if is_constant:
        return constant(init_value)
    steps, held = _positive_steps(who, transition_steps)
    begin = check_steps(who, "transition_begin", transition_begin, minimum=0)
    check_positive(who, "decay_rate", decay_rate)
    if traced(decay_rate):  # 0: Optax's constant schedule
        held = (decay_rate == 0) if held is None else held | (decay_rate == 0)

    def fn(step):
        elapsed = jnp.maximum(step - begin, 0)
        if staircase:
            p = (elapsed // steps).astype(jnp.float32)
        else:
            p = elapsed.astype(jnp.float32) / steps
        rate = f32(decay_rate)
        value = f32(init_value) * rate**p
        if end_value is not None:
            end = f32(end_value)
            value = jnp.where(rate < 1.0, jnp.maximum(value, end), jnp.minimum(value, end))
        return _held(value, held, init_value)

    return NamedSchedule(
        who,
        fn,
        init_value=init_value,
        transition_steps=steps,
        decay_rate=decay_rate,
        transition_begin=begin,
        staircase=staircase,
        end_value=end_value,
    )


@recorded(schedule=True)
def piecewise_constant(
    init_value: ArrayLike,
    boundaries_and_scales: Mapping[int, float] | Sequence[tuple[int, float]] | None = None,
) -> NamedSchedule:
    r"""Piecewise constant: `init_value` multiplied by every scale whose boundary has passed.

    .. math::  v(t) = I \prod_{i:\; t \ge b_i} s_i

    Args:
      init_value: :math:`I`.
      boundaries_and_scales: a dict `{b_i: s_i}` of integer steps >= 0 and scales >= 0 (in any
        order, as in Optax), or a list of `(b_i, s_i)` pairs. Scales and steps may be traced
        (`gradtx.with_hyperparameters` passes a dict's items as pairs, in increasing order).

    Returns:
      A schedule `step -> float32`.

    Examples:
      >>> import gradtx
      >>> lr = gradtx.schedules.piecewise_constant(0.1, {100: 0.1, 200: 0.5})
      >>> [round(float(lr(t)), 6) for t in (0, 99, 100, 250)]
      [0.1, 0.1, 0.01, 0.005]

    Reference: `optax.piecewise_constant_schedule`.
    """
    bounds, scales = check_boundaries_and_scales("piecewise_constant", boundaries_and_scales)

    def fn(step):
        init = f32(init_value)
        if not bounds:
            return jnp.broadcast_to(init, step.shape)
        b = int32s(bounds)
        s = jnp.asarray(scales, jnp.float32)
        factors = jnp.where(step[..., None] >= b, s, 1.0)
        return init * jnp.prod(factors, axis=-1)

    return NamedSchedule(
        "piecewise_constant",
        fn,
        init_value=init_value,
        boundaries_and_scales=as_boundaries_and_scales(bounds, scales),
    )


@recorded(schedule=True)
def piecewise_interpolate(
    interpolate_type: str,
    init_value: ArrayLike,
    boundaries_and_scales: Mapping[int, float] | Sequence[tuple[int, float]] | None = None,
) -> NamedSchedule:
    r"""Interpolate (linearly or along a half cosine) between values set at boundaries.

    The value at step :math:`b_k` is :math:`v_k = I \prod_{i \le k} s_i` (and :math:`I` at step 0);
    between two boundaries the schedule moves from one value to the next, after the last one it
    stays at the last value. Cosine interpolation uses
    :math:`v = v_{k+1} + \tfrac12 (v_k - v_{k+1})(1 + \cos \pi\rho)`, :math:`\rho` the fraction of
    the segment done.

    Args:
      interpolate_type: "linear" or "cosine".
      init_value: :math:`I`.
      boundaries_and_scales: a dict `{b_i: s_i}` of integer steps >= 0 and scales, or a list
        of `(b_i, s_i)` pairs (both may be traced, as in `piecewise_constant`).

    Returns:
      A schedule `step -> float32`.

    Reference: `optax.piecewise_interpolate_schedule`.
    """
    who = "piecewise_interpolate"
    check_one_of(who, "interpolate_type", interpolate_type, ["linear", "cosine"])
    bounds, scales = check_boundaries_and_scales(
        who, boundaries_and_scales, non_negative_scales=True
    )

    def fn(step):
        values = [f32(init_value)]
        for s in scales:
            values.append(values[-1] * s)
        return interpolate_segments(step, [0, *bounds], values, interpolate_type)

    return NamedSchedule(
        who,
        fn,
        interpolate_type=interpolate_type,
        init_value=init_value,
        boundaries_and_scales=as_boundaries_and_scales(bounds, scales),
    )


@recorded(schedule=True)
def multistep(init_value: ArrayLike, gamma: ArrayLike, milestones: Sequence[int]) -> NamedSchedule:
    r"""Multiply by `gamma` at each milestone (a step decay).

    .. math::  v(t) = I \, \gamma^{\,\#\{m \in M:\; t \ge m\}}

    This is nnabla's `StepScheduler` and PyTorch's `MultiStepLR`. A milestone listed twice
    applies `gamma` twice. For nnabla's unsorted `iter_steps` and its worker-count division, use
    `nnabla_step`.

    Args:
      init_value: :math:`I`.
      gamma: :math:`\gamma` >= 0, the factor applied at each milestone.
      milestones: :math:`M`, integer steps >= 0 in increasing order.

    Returns:
      A schedule `step -> float32`.
    """
    who = "multistep"
    check_non_negative(who, "gamma", gamma)
    ms = check_sorted_steps(who, "milestones", milestones, strict=False)

    def fn(step):
        init = f32(init_value)
        if not ms:
            return jnp.broadcast_to(init, step.shape)
        passed = jnp.sum(step[..., None] >= int32s(ms), axis=-1)
        return init * f32(gamma) ** passed.astype(jnp.float32)

    return NamedSchedule(who, fn, init_value=init_value, gamma=gamma, milestones=ms)


@recorded(schedule=True)
def inverse_sqrt(peak_value: ArrayLike, warmup_steps: int) -> NamedSchedule:
    r"""Inverse square root decay after a linear warm-up (the Noam / Transformer schedule).

    With :math:`s = t + 1` (the paper counts steps from 1):

    .. math::  v(t) = P \min\left(\frac{s}{W}, \sqrt{\frac{W}{s}}\right)

    The value rises linearly to :math:`P` at step :math:`W - 1`, then decays as
    :math:`1/\sqrt{s}`. The paper's :math:`d^{-1/2}\min(s^{-1/2}, s\,W^{-3/2})` is
    `inverse_sqrt(d ** -0.5 * W ** -0.5, W)`.

    Args:
      peak_value: :math:`P`, the largest value.
      warmup_steps: :math:`W` >= 1.

    Returns:
      A schedule `step -> float32`.

    Reference: Vaswani et al., "Attention Is All You Need" (NeurIPS 2017), eq. (3).
    """
    who = "inverse_sqrt"
    warm = check_steps(who, "warmup_steps", warmup_steps, minimum=1)

    def fn(step):
        s = step.astype(jnp.float32) + 1.0
        return f32(peak_value) * jnp.minimum(s / warm, jnp.sqrt(warm / s))

    return NamedSchedule(who, fn, peak_value=peak_value, warmup_steps=warm)


__all__ = [
    "constant",
    "exponential_decay",
    "inverse_sqrt",
    "linear",
    "multistep",
    "piecewise_constant",
    "piecewise_interpolate",
    "polynomial",
]
