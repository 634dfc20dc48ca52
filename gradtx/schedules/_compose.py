"""Combining schedules: `join` (one after another) and `warmup` (a linear ramp in front)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax.numpy as jnp

from .._base._checks import check_one_of, concrete
from .._base._recipe import recorded
from .._base._typing import ArrayLike
from ._basic import exponential_decay
from ._common import (
    NamedSchedule,
    call,
    check_callable,
    check_sorted_steps,
    check_steps,
    f32,
    traced,
)

Schedule = Callable[[Any], ArrayLike]


@recorded(schedule=True)
def join(schedules: Sequence[Schedule], boundaries: Sequence[int]) -> NamedSchedule:
    r"""Run schedules one after another; each restarts its count at its boundary.

    .. math::  v(t) = s_k(t - b_k) \quad \text{for } b_k \le t < b_{k+1}, \qquad b_0 = 0

    Every schedule is evaluated and the right value selected with `jnp.where`, so there is no
    Python branching on the step.

    Args:
      schedules: :math:`s_0, \dots, s_n`, any schedules (gradtx, Optax or plain functions).
      boundaries: :math:`b_1, \dots, b_n`, one fewer than `schedules`, integer steps >= 0 in
        increasing order (a repeated boundary skips the schedule between).

    Returns:
      A schedule `step -> float32`.

    Examples:
      >>> import gradtx
      >>> warm = gradtx.schedules.linear(0.0, 1.0, transition_steps=10)
      >>> decay = gradtx.schedules.exponential_decay(1.0, 10, decay_rate=0.1)
      >>> lr = gradtx.schedules.join([warm, decay], boundaries=[10])
      >>> [round(float(lr(t)), 4) for t in (0, 5, 10, 20)]
      [0.0, 0.5, 1.0, 0.1]

    Reference: `optax.join_schedules`.
    """
    who = "join"
    schedules = list(schedules)
    if not schedules:
        raise ValueError(f"{who}: schedules must hold at least one schedule, got []")
    for i, s in enumerate(schedules):
        check_callable(who, f"schedules[{i}]", s)
    bounds = check_sorted_steps(who, "boundaries", boundaries, strict=False)
    if len(bounds) != len(schedules) - 1:
        raise ValueError(
            f"{who}: boundaries must have one entry fewer than schedules ({len(schedules) - 1}), "
            f"got {len(bounds)}: {bounds}"
        )

    def fn(step):
        value = call(schedules[0], step)
        for b, s in zip(bounds, schedules[1:], strict=True):
            value = jnp.where(step >= b, call(s, step - b), value)
        return value

    return NamedSchedule(who, fn, schedules=schedules, boundaries=bounds)


@recorded(schedule=True)
def warmup(
    schedule: Schedule,
    warmup_steps: int,
    init_value: ArrayLike = 0.0,
    *,
    mode: str = "linear",
) -> NamedSchedule:
    r"""A linear warm-up in front of any schedule.

    `mode="linear"` (Optax's convention for its `warmup_*` schedules) ramps from `init_value`
    to the schedule's first value, then runs the schedule from its own step 0:

    .. math::

      v(t) = \begin{cases} I + \frac{t}{W}\,(s(0) - I) & t < W \\ s(t - W) & t \ge W \end{cases}

    `mode="nnabla"` is nnabla's `LinearWarmupScheduler`: it scales the schedule, without shifting
    it, by a factor that reaches 1 at the last warm-up step (`init_value` must stay 0):

    .. math::

      v(t) = \begin{cases} s(t)\,\frac{t + 1}{W} & t < W \\ s(t) & t \ge W \end{cases}

    Args:
      schedule: :math:`s`, any schedule.
      warmup_steps: :math:`W` >= 0 (0 returns the schedule unchanged).
      init_value: :math:`I`, the value at step 0 (mode "linear").
      mode: "linear" or "nnabla".

    Returns:
      A schedule `step -> float32`.
    """
    who = "warmup"
    check_callable(who, "schedule", schedule)
    steps = check_steps(who, "warmup_steps", warmup_steps, minimum=0)
    check_one_of(who, "mode", mode, ["linear", "nnabla"])
    if mode == "nnabla" and not traced(init_value):
        init = concrete(init_value)
        if init is None or init.ndim != 0 or float(init) != 0.0:
            raise ValueError(
                f"{who}: init_value must stay 0.0 with mode='nnabla' (its factor starts at "
                f"1/warmup_steps), got {init_value!r}; use mode='linear' to ramp from a value"
            )

    # A traced warm-up length may be 0: then `step < steps` never holds, and the division is
    # kept finite.
    length = jnp.maximum(steps, 1) if traced(steps) else steps

    def fn(step):
        if not traced(steps) and steps == 0:
            return call(schedule, step)
        t = step.astype(jnp.float32)
        if mode == "nnabla":
            factor = jnp.where(step < steps, (t + 1.0) / length, 1.0)
            return call(schedule, step) * factor
        init = f32(init_value)
        ramp = init + (t / length) * (call(schedule, jnp.zeros_like(step)) - init)
        return jnp.where(step < steps, ramp, call(schedule, step - steps))

    args: dict[str, Any] = {"schedule": schedule, "warmup_steps": steps}
    if mode == "linear":
        args["init_value"] = init_value
    args["mode"] = mode
    return NamedSchedule(who, fn, **args)


@recorded(schedule=True)
def warmup_constant(
    init_value: ArrayLike, peak_value: ArrayLike, warmup_steps: int
) -> NamedSchedule:
    r"""Linear warm-up from `init_value` to `peak_value`, then constant.

    .. math::  v(t) = I + \frac{\min(t, W)}{W} (P - I)

    Args:
      init_value: :math:`I`.
      peak_value: :math:`P`.
      warmup_steps: :math:`W` >= 0 (0: constant `peak_value`).

    Returns:
      A schedule `step -> float32`.

    Reference: `optax.warmup_constant_schedule`.
    """
    who = "warmup_constant"
    steps = check_steps(who, "warmup_steps", warmup_steps, minimum=0)

    def fn(step):
        peak = f32(peak_value)
        if traced(steps):  # 0 steps: `peak_value` from step 0
            frac = jnp.minimum(step, steps).astype(jnp.float32) / jnp.maximum(steps, 1)
            frac = jnp.where(steps == 0, 1.0, frac)
        elif steps == 0:
            return jnp.broadcast_to(peak, step.shape)
        else:
            frac = jnp.minimum(step, steps).astype(jnp.float32) / steps
        init = f32(init_value)
        return init + frac * (peak - init)

    return NamedSchedule(who, fn, init_value=init_value, peak_value=peak_value, warmup_steps=steps)


@recorded(schedule=True)
def warmup_exponential_decay(
    init_value: ArrayLike,
    peak_value: ArrayLike,
    warmup_steps: int,
    transition_steps: int,
    decay_rate: ArrayLike,
    transition_begin: int = 0,
    staircase: bool = False,
    end_value: ArrayLike | None = None,
) -> NamedSchedule:
    r"""Linear warm-up to `peak_value`, then `exponential_decay` from it.

    .. math::

      v(t) = \begin{cases}
        I + \frac{t}{W} (P - I) & t < W \\
        \text{exponential\_decay}(P, T, r, B, \text{staircase}, E)(t - W) & t \ge W
      \end{cases}

    Args:
      init_value: :math:`I`, the value at step 0.
      peak_value: :math:`P`, reached at the end of the warm-up.
      warmup_steps: :math:`W` >= 0.
      transition_steps: :math:`T` >= 1 (see `exponential_decay`).
      decay_rate: :math:`r` > 0.
      transition_begin: :math:`B` >= 0, steps held at `peak_value` after the warm-up.
      staircase: decay in discrete jumps.
      end_value: the bound at which the decay stops; None for no bound.

    Returns:
      A schedule `step -> float32`.

    Reference: `optax.warmup_exponential_decay_schedule`.
    """
    who = "warmup_exponential_decay"
    steps = check_steps(who, "warmup_steps", warmup_steps, minimum=0)
    try:
        decay = exponential_decay(
            peak_value, transition_steps, decay_rate, transition_begin, staircase, end_value
        )
    except ValueError as err:
        raise ValueError(str(err).replace("exponential_decay:", f"{who}:", 1)) from err
    inner = warmup(decay, steps, init_value) if traced(steps) or steps else decay
    return NamedSchedule(
        who,
        inner,
        init_value=init_value,
        peak_value=peak_value,
        warmup_steps=steps,
        transition_steps=transition_steps,
        decay_rate=decay_rate,
        transition_begin=transition_begin,
        staircase=staircase,
        end_value=end_value,
    )


__all__ = ["join", "warmup", "warmup_constant", "warmup_exponential_decay"]
