"""nnabla-compatible schedules: the values of `nnabla.utils.learning_rate_scheduler`, exactly.

Each constructor takes nnabla's argument names and applies the rules of nnabla's NNP loader
(`nnabla.utils.load`) for data-parallel training: step counts are divided by the number of
workers `comm_size` with integer division, as the loader does,

- `max_iter // comm_size` (Polynomial, Cosine),
- `iter_interval // comm_size` when `iter_interval > comm_size`, else 1 (Exponential and the
  legacy `lr_decay_interval`),
- `step // comm_size` for each of `iter_steps` (Step),
- `warmup_iter // comm_size` when `warmup_iter >= comm_size`, else no warm-up (LinearWarmup).

With `comm_size=1` the values are those of the scheduler classes themselves. nnabla counts
iterations from 0, as gradtx's step counts do. `nnabla_solver_schedule` rebuilds the whole
scheduler the loader builds from a solver configuration.

Where nnabla's value is not a real number or does not exist (documented per function), gradtx
returns a float32 NaN or raises at construction instead.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .._base._checks import check_non_negative, did_you_mean
from .._base._numerics import INT32_MAX
from .._base._recipe import recorded
from .._base._typing import ArrayLike
from ._basic import constant
from ._common import NamedSchedule, check_callable, check_steps, f32, int32s, number, traced
from ._compose import warmup

# Traced step counts (`gradtx.with_hyperparameters`) are int32 and unchecked: the loader's
# rules become `jnp.where`s, and a count that nnabla would divide by zero gives inf or NaN.


def _comm(who: str, comm_size: int) -> Any:
    return check_steps(who, "comm_size", comm_size, minimum=1)


def _divided(who: str, name: str, value: int, comm_size: Any) -> Any:
    """`value // comm_size`, which must stay >= 1 (nnabla would divide by zero)."""
    steps = check_steps(who, name, value, minimum=1)
    out = steps // comm_size
    if traced(out):
        return out
    if out < 1:
        raise ValueError(
            f"{who}: {name} // comm_size must be >= 1 (nnabla divides by it), got "
            f"{name}={steps}, comm_size={comm_size}; use {name} >= {comm_size}"
        )
    return out


@recorded(schedule=True)
def nnabla_polynomial(
    init_lr: ArrayLike, max_iter: int, power: float, *, comm_size: int = 1, clamp: bool = False
) -> NamedSchedule:
    r"""nnabla's `PolynomialScheduler`: :math:`\eta(t) = \eta_0 (1 - t/M)^{p}`.

    :math:`M` = `max_iter // comm_size`. nnabla does not stop at :math:`M`: past it the base is
    negative, so an even integer power rises again and an odd one goes negative (reproduced
    here), while a non-integer power gives a complex Python number, which nnabla's solvers cannot
    take; gradtx returns NaN there. `clamp=True` holds the value at :math:`M` (0) instead, like
    `polynomial`. A power of 0 is the constant :math:`\eta_0` (the loader's rule).

    Args:
      init_lr: :math:`\eta_0`.
      max_iter: the iterations of the whole run, before the division by `comm_size`.
      power: :math:`p` >= 0.
      comm_size: the number of data-parallel workers, >= 1.
      clamp: hold the value from step :math:`M` on.

    Returns:
      A schedule `step -> float32`.

    Reference: nnabla `learning_rate_scheduler.PolynomialScheduler` and `utils.load`.
    """
    who = "nnabla_polynomial"
    comm = _comm(who, comm_size)
    p = number(who, "power", power)
    check_non_negative(who, "power", p)
    if not traced(p) and p == 0.0:
        check_steps(who, "max_iter", max_iter, minimum=0)
        return NamedSchedule(who, constant(init_lr), init_lr=init_lr, power=p)
    total = _divided(who, "max_iter", max_iter, comm)

    def fn(step):
        t = jnp.minimum(step, total) if clamp else step
        base = (total - t).astype(jnp.float32) / total  # exact 0 at max_iter, also under jit
        # An integer power is exact for negative bases (nnabla's real result past max_iter);
        # a fractional power of a negative base is NaN.
        if traced(p):
            factor = _traced_power(base, p)
        else:
            factor = jnp.power(base, int(p)) if p.is_integer() else jnp.power(base, p)
        return f32(init_lr) * factor

    return NamedSchedule(
        who, fn, init_lr=init_lr, max_iter=max_iter, power=p, comm_size=comm, clamp=clamp
    )


def _traced_power(base: jax.Array, p: jax.Array) -> jax.Array:
    """`base ** p` for a traced power p >= 0 as `nnabla_polynomial` takes it: real for an integer
    power (negative bases too), NaN for a fractional power of a negative base, 1 for p = 0."""
    p = f32(p)
    whole = p == jnp.round(p)
    magnitude = jnp.abs(base) ** p
    odd = whole & (jnp.abs(p) % 2.0 == 1.0)
    value = jnp.where(whole, jnp.where((base < 0) & odd, -magnitude, magnitude), base**p)
    return jnp.where(p == 0.0, 1.0, value)


@recorded(schedule=True)
def nnabla_cosine(
    init_lr: ArrayLike, max_iter: int, *, comm_size: int = 1, clamp: bool = False
) -> NamedSchedule:
    r"""nnabla's `CosineScheduler`: :math:`\eta(t) = \eta_0 \cdot \tfrac12 (1 + \cos(\pi t / M))`.

    :math:`M` = `max_iter // comm_size`. Past :math:`M` nnabla's value rises again (period
    :math:`2M`); reproduced here, or held at its value at :math:`M` with `clamp=True`. The phase
    is reduced modulo :math:`2M` in integers, so late steps keep full float32 accuracy.

    Args:
      init_lr: :math:`\eta_0`.
      max_iter: the iterations of the whole run, before the division by `comm_size`.
      comm_size: the number of data-parallel workers, >= 1.
      clamp: hold the value from step :math:`M` on.

    Returns:
      A schedule `step -> float32`.

    Reference: nnabla `learning_rate_scheduler.CosineScheduler` and `utils.load`.
    """
    who = "nnabla_cosine"
    comm = _comm(who, comm_size)
    total = _divided(who, "max_iter", max_iter, comm)

    def fn(step):
        if clamp:
            t = jnp.minimum(step, total)
        elif traced(total):
            short = total <= INT32_MAX // 2
            t = jnp.where(short, step % jnp.where(short, 2 * total, 1), step)
        elif 2 * total <= INT32_MAX:
            t = step % (2 * total)
        else:
            t = step
        return f32(init_lr) * 0.5 * (1.0 + jnp.cos(jnp.pi * (t.astype(jnp.float32) / total)))

    return NamedSchedule(who, fn, init_lr=init_lr, max_iter=max_iter, comm_size=comm, clamp=clamp)


def _loader_interval(interval: Any, comm_size: Any) -> Any:
    if traced(interval) or traced(comm_size):
        return jnp.where(interval > comm_size, interval // comm_size, 1)
    return interval // comm_size if interval > comm_size else 1


@recorded(schedule=True)
def nnabla_exponential(
    init_lr: ArrayLike, gamma: ArrayLike, iter_interval: int = 1, *, comm_size: int = 1
) -> NamedSchedule:
    r"""nnabla's `ExponentialScheduler`: :math:`\eta(t) = \eta_0 \gamma^{\lfloor t / K \rfloor}`.

    :math:`K` = `iter_interval // comm_size` when `iter_interval > comm_size`, else 1 (the
    loader's rule, which also turns an unset interval of 0 into 1).

    Args:
      init_lr: :math:`\eta_0`.
      gamma: :math:`\gamma` >= 0.
      iter_interval: iterations between decays (>= 0), before the division by `comm_size`.
      comm_size: the number of data-parallel workers, >= 1.

    Returns:
      A schedule `step -> float32`.

    Reference: nnabla `learning_rate_scheduler.ExponentialScheduler` and `utils.load`.
    """
    who = "nnabla_exponential"
    comm = _comm(who, comm_size)
    check_non_negative(who, "gamma", gamma)
    interval = _loader_interval(check_steps(who, "iter_interval", iter_interval, minimum=0), comm)

    def fn(step):
        return f32(init_lr) * f32(gamma) ** (step // interval).astype(jnp.float32)

    return NamedSchedule(
        who, fn, init_lr=init_lr, gamma=gamma, iter_interval=iter_interval, comm_size=comm
    )


@recorded(schedule=True)
def nnabla_step(
    init_lr: ArrayLike, gamma: ArrayLike, iter_steps: Sequence[int], *, comm_size: int = 1
) -> NamedSchedule:
    r"""nnabla's `StepScheduler`: :math:`\eta(t) = \eta_0 \gamma^{\#\{s:\; t \ge s\}}`.

    The steps are `step // comm_size` each; they need not be sorted (as in nnabla), and a step
    listed twice applies :math:`\gamma` twice.

    Args:
      init_lr: :math:`\eta_0`.
      gamma: :math:`\gamma` >= 0.
      iter_steps: the iterations at which to decay (integers >= 0, any order), before the
        division by `comm_size`.
      comm_size: the number of data-parallel workers, >= 1.

    Returns:
      A schedule `step -> float32`.

    Reference: nnabla `learning_rate_scheduler.StepScheduler` and `utils.load`.
    """
    who = "nnabla_step"
    comm = _comm(who, comm_size)
    check_non_negative(who, "gamma", gamma)
    if isinstance(iter_steps, str | bytes) or not isinstance(iter_steps, Sequence | np.ndarray):
        raise ValueError(f"{who}: iter_steps must be a list of integer steps, got {iter_steps!r}")
    steps = []
    for i, s in enumerate(iter_steps):
        steps.append(check_steps(who, f"iter_steps[{i}]", s, minimum=0) // comm)

    def fn(step):
        init = f32(init_lr)
        if not steps:
            return jnp.broadcast_to(init, step.shape)
        passed = jnp.sum(step[..., None] >= int32s(steps), axis=-1)
        return init * f32(gamma) ** passed.astype(jnp.float32)

    return NamedSchedule(
        who, fn, init_lr=init_lr, gamma=gamma, iter_steps=list(iter_steps), comm_size=comm
    )


@recorded(schedule=True)
def nnabla_linear_warmup(
    schedule: Callable[[Any], ArrayLike], warmup_iter: int, *, comm_size: int = 1
) -> NamedSchedule:
    r"""nnabla's `LinearWarmupScheduler` around any schedule.

    .. math::  \eta(t) = s(t) \cdot \min\left(\frac{t + 1}{W}, 1\right)

    :math:`W` = `warmup_iter // comm_size` when `warmup_iter >= comm_size`; otherwise there is no
    warm-up (the loader's rule). The schedule is not shifted (unlike `warmup`'s default mode).

    Args:
      schedule: :math:`s`, the schedule being warmed up (e.g. `nnabla_cosine(...)`).
      warmup_iter: warm-up iterations (>= 0), before the division by `comm_size`.
      comm_size: the number of data-parallel workers, >= 1.

    Returns:
      A schedule `step -> float32`.

    Reference: nnabla `learning_rate_scheduler.LinearWarmupScheduler` and `utils.load`.
    """
    who = "nnabla_linear_warmup"
    comm = _comm(who, comm_size)
    check_callable(who, "schedule", schedule)
    raw = check_steps(who, "warmup_iter", warmup_iter, minimum=0)
    steps: Any
    if traced(raw) or traced(comm):
        steps = jnp.where(raw >= comm, raw // comm, 0)
    else:
        steps = raw // comm if raw >= comm else 0
    inner = warmup(schedule, steps, mode="nnabla")
    return NamedSchedule(who, inner, schedule=schedule, warmup_iter=raw, comm_size=comm)


@recorded(schedule=True)
def lr_decay(
    init_lr: ArrayLike,
    lr_decay: float = 0.0,
    lr_decay_interval: int = 0,
    *,
    comm_size: int = 1,
    cpp_trainer: bool = False,
) -> NamedSchedule:
    r"""nnabla's legacy solver fields `lr_decay` / `lr_decay_interval` as a schedule.

    The Python loader maps them to `ExponentialScheduler`:
    :math:`\eta(t) = \eta_0 \gamma^{\lfloor t / K \rfloor}` with :math:`\gamma` = `lr_decay` when
    it is > 0, else 1, and :math:`K` = `lr_decay_interval // comm_size` when
    `lr_decay_interval > comm_size`, else 1 (both fields unset: the constant :math:`\eta_0`).

    `cpp_trainer=True` reproduces nnabla's C++ NNP trainer instead, whose test
    `(iter + 1) % lr_decay_interval` is inverted: after every update whose iteration is *not*
    the last of an interval it multiplies the rate by `lr_decay`, so

    .. math::  \eta(t) = \eta_0 \gamma^{\,t - \lfloor t / K \rfloor}

    with the raw fields (:math:`K` = `lr_decay_interval` >= 1; with :math:`K = 1` it never
    decays). The C++ trainer runs one process, so `comm_size` must be 1 there.

    Args:
      init_lr: :math:`\eta_0`.
      lr_decay: the decay factor (>= 0; 0 means unset for the Python loader).
      lr_decay_interval: iterations per decay (>= 0; 0 means unset for the Python loader).
      comm_size: the number of data-parallel workers, >= 1.
      cpp_trainer: reproduce the C++ trainer (see above).

    Returns:
      A schedule `step -> float32`.

    Reference: nnabla `utils/load.py` (`_create_optimizer`) and
    `src/nbla_utils/nnp_impl_optimizer.cpp` (`OptimizerImpl::update`).
    """
    who = "lr_decay"
    comm = _comm(who, comm_size)
    decay = number(who, "lr_decay", lr_decay)
    check_non_negative(who, "lr_decay", decay)
    interval = check_steps(who, "lr_decay_interval", lr_decay_interval, minimum=0)
    args = dict(init_lr=init_lr, lr_decay=decay, lr_decay_interval=interval, comm_size=comm)
    if not cpp_trainer:
        gamma = jnp.where(decay > 0, decay, 1.0) if traced(decay) else decay if decay > 0 else 1.0
        inner = nnabla_exponential(init_lr, gamma, interval, comm_size=comm)
        return NamedSchedule(who, inner, **args)
    if not traced(interval) and interval < 1:
        raise ValueError(
            f"{who}: lr_decay_interval must be >= 1 with cpp_trainer=True (the C++ trainer "
            f"computes (iter + 1) % lr_decay_interval), got {interval}"
        )
    if not traced(comm) and comm != 1:
        raise ValueError(
            f"{who}: comm_size must be 1 with cpp_trainer=True (the C++ trainer does not divide "
            f"by workers), got {comm}"
        )

    def fn(step):
        decays = (step - step // interval).astype(jnp.float32)
        return f32(init_lr) * (f32(decay) if traced(decay) else jnp.float32(decay)) ** decays

    return NamedSchedule(who, fn, **args, cpp_trainer=True)


_legacy_lr_decay = lr_decay  # `nnabla_solver_schedule` has an argument of the same name

_PARAM_KEYS = {
    "polynomial_scheduler_param": ("max_iter", "power"),
    "cosine_scheduler_param": ("max_iter",),
    "exponential_scheduler_param": ("gamma", "iter_interval"),
    "step_scheduler_param": ("gamma", "iter_steps"),
    "linear_warmup_scheduler_param": ("warmup_iter",),
}
_SCHEDULER_TYPES = ["", "Polynomial", "Cosine", "Exponential", "Step"]


def _params(who: str, name: str, given: Mapping[str, Any] | None) -> dict[str, Any]:
    """A `*_scheduler_param` message as a dict, unset fields at their proto default (0 / [])."""
    keys = _PARAM_KEYS[name]
    out: dict[str, Any] = {k: ([] if k == "iter_steps" else 0) for k in keys}
    if given is None:
        return out
    if not isinstance(given, Mapping):
        raise ValueError(f"{who}: {name} must be a dict with keys {list(keys)}, got {given!r}")
    for k, v in given.items():
        if k not in keys:
            raise ValueError(
                f"{who}: {name} has no field {k!r}{did_you_mean(str(k), keys)}; "
                f"its fields are {list(keys)}"
            )
        out[k] = v
    return out


def _differs(who: str, name: str, value: Any, special: float) -> bool:
    """Whether a field differs from the loader's special value; a traced one may."""
    value = number(who, name, value)
    return traced(value) or value != special


@recorded(schedule=True)
def nnabla_solver_schedule(
    init_lr: ArrayLike,
    *,
    lr_scheduler_type: str = "",
    polynomial_scheduler_param: Mapping[str, Any] | None = None,
    cosine_scheduler_param: Mapping[str, Any] | None = None,
    exponential_scheduler_param: Mapping[str, Any] | None = None,
    step_scheduler_param: Mapping[str, Any] | None = None,
    lr_decay: float = 0.0,
    lr_decay_interval: int = 0,
    lr_warmup_scheduler_type: str = "",
    linear_warmup_scheduler_param: Mapping[str, Any] | None = None,
    comm_size: int = 1,
) -> NamedSchedule:
    """The schedule nnabla's NNP loader builds from a solver configuration.

    The keywords are the solver message's fields (unset ones at their proto default, 0); the
    loader's rules apply: Polynomial only when `power != 0`, Exponential only when `gamma != 1`,
    Step only when `gamma != 1` and `iter_steps` is not empty, the legacy `lr_decay` fields when
    `lr_scheduler_type` is "", otherwise the constant `init_lr`; then a linear warm-up when
    `lr_warmup_scheduler_type == "Linear"`, all with the worker-count division described in the
    module docstring. nnabla's "Custom" type is not implemented there and is rejected here.

    Args:
      init_lr: the solver's learning rate (`lr`, or `alpha` for the Adam family).
      lr_scheduler_type: "", "Polynomial", "Cosine", "Exponential" or "Step".
      polynomial_scheduler_param: `{"max_iter", "power"}`.
      cosine_scheduler_param: `{"max_iter"}`.
      exponential_scheduler_param: `{"gamma", "iter_interval"}`.
      step_scheduler_param: `{"gamma", "iter_steps"}`.
      lr_decay: legacy decay factor (used when `lr_scheduler_type` is "").
      lr_decay_interval: legacy decay interval (used when `lr_scheduler_type` is "").
      lr_warmup_scheduler_type: "" or "Linear".
      linear_warmup_scheduler_param: `{"warmup_iter"}`.
      comm_size: the number of data-parallel workers, >= 1.

    Returns:
      A schedule `step -> float32`.

    Reference: nnabla `utils/load.py` (`_create_optimizer`).
    """
    who = "nnabla_solver_schedule"
    comm = _comm(who, comm_size)
    if lr_scheduler_type not in _SCHEDULER_TYPES:
        hint = did_you_mean(str(lr_scheduler_type), [t for t in _SCHEDULER_TYPES if t])
        extra = " ('Custom' is not implemented by nnabla either)"
        raise ValueError(
            f"{who}: lr_scheduler_type must be one of {_SCHEDULER_TYPES}, got "
            f"{lr_scheduler_type!r}{hint}{extra if lr_scheduler_type == 'Custom' else ''}"
        )
    if lr_warmup_scheduler_type not in ("", "Linear"):
        raise ValueError(
            f"{who}: lr_warmup_scheduler_type must be '' or 'Linear', got "
            f"{lr_warmup_scheduler_type!r}"
        )
    poly = _params(who, "polynomial_scheduler_param", polynomial_scheduler_param)
    cos = _params(who, "cosine_scheduler_param", cosine_scheduler_param)
    expo = _params(who, "exponential_scheduler_param", exponential_scheduler_param)
    step = _params(who, "step_scheduler_param", step_scheduler_param)
    warm = _params(who, "linear_warmup_scheduler_param", linear_warmup_scheduler_param)

    # A traced power or gamma cannot be compared with the loader's special values: the schedule
    # is built, and gives the constant `init_lr` itself at those values.
    schedule: Callable[[Any], ArrayLike] = constant(init_lr)
    if lr_scheduler_type == "Polynomial" and _differs(who, "power", poly["power"], 0.0):
        schedule = nnabla_polynomial(init_lr, poly["max_iter"], poly["power"], comm_size=comm)
    elif lr_scheduler_type == "Cosine":
        schedule = nnabla_cosine(init_lr, cos["max_iter"], comm_size=comm)
    elif lr_scheduler_type == "Exponential" and _differs(who, "gamma", expo["gamma"], 1.0):
        schedule = nnabla_exponential(init_lr, expo["gamma"], expo["iter_interval"], comm_size=comm)
    elif (
        lr_scheduler_type == "Step"
        and _differs(who, "gamma", step["gamma"], 1.0)
        and len(step["iter_steps"]) > 0
    ):
        schedule = nnabla_step(init_lr, step["gamma"], step["iter_steps"], comm_size=comm)
    elif lr_scheduler_type == "" and (
        _differs(who, "lr_decay_interval", lr_decay_interval, 0)
        or _differs(who, "lr_decay", lr_decay, 0.0)
    ):
        schedule = _legacy_lr_decay(init_lr, lr_decay, lr_decay_interval, comm_size=comm)
    if lr_warmup_scheduler_type == "Linear":
        schedule = nnabla_linear_warmup(schedule, warm["warmup_iter"], comm_size=comm)
    return NamedSchedule(
        who,
        schedule,
        init_lr=init_lr,
        lr_scheduler_type=lr_scheduler_type,
        lr_warmup_scheduler_type=lr_warmup_scheduler_type,
        comm_size=comm,
    )


__all__ = [
    "lr_decay",
    "nnabla_cosine",
    "nnabla_exponential",
    "nnabla_linear_warmup",
    "nnabla_polynomial",
    "nnabla_solver_schedule",
    "nnabla_step",
]
