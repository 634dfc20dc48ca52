"""Cosine schedules: cosine decay, warm-up + cosine decay, SGDR restarts and one-cycle."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import jax
import jax.numpy as jnp

from .._base._checks import check_in_range, check_int, check_one_of, check_positive
from .._base._numerics import INT32_MAX
from .._base._recipe import recorded
from .._base._typing import ArrayLike
from ._common import NamedSchedule, check_steps, f32, interpolate_segments, number, traced
from ._compose import join


def _cosine_factor(elapsed, length: int, exponent: ArrayLike):
    """:math:`(\\tfrac12 (1 + \\cos(\\pi \\min(\\tau, L) / L)))^p` in float32.

    The length enters as a float, so it may exceed the int32 step range (as in Optax); a traced
    length is an int32.
    """
    end = f32(length) if traced(length) else float(length)
    tau = jnp.clip(jnp.asarray(elapsed).astype(jnp.float32), 0.0, end)
    return (0.5 * (1.0 + jnp.cos(jnp.pi * tau / end))) ** f32(exponent)


@recorded(schedule=True)
def cosine_decay(
    init_value: ArrayLike, decay_steps: int, alpha: ArrayLike = 0.0, exponent: ArrayLike = 1.0
) -> NamedSchedule:
    r"""Cosine decay from `init_value` to `alpha * init_value` over `decay_steps`.

    .. math::

      v(t) = I \left[(1 - \alpha) \left(\tfrac12 \left(1 + \cos \frac{\pi \min(t, T)}{T}\right)
      \right)^{p} + \alpha\right]

    Args:
      init_value: :math:`I`.
      decay_steps: :math:`T` >= 1, any size (steps saturate at :math:`2^{31} - 1`, :math:`T`
        does not); the value stays at :math:`\alpha I` after it.
      alpha: :math:`\alpha`, the final value as a fraction of `init_value`.
      exponent: :math:`p` > 0.

    Returns:
      A schedule `step -> float32`.

    Reference: Loshchilov & Hutter, "SGDR: Stochastic Gradient Descent with Warm Restarts"
    (ICLR 2017); `optax.cosine_decay_schedule`.
    """
    who = "cosine_decay"
    steps = check_steps(who, "decay_steps", decay_steps, minimum=1)
    check_positive(who, "exponent", exponent)

    def fn(step):
        a = f32(alpha)
        return f32(init_value) * ((1.0 - a) * _cosine_factor(step, steps, exponent) + a)

    return NamedSchedule(
        who, fn, init_value=init_value, decay_steps=steps, alpha=alpha, exponent=exponent
    )


@recorded(schedule=True)
def warmup_cosine_decay(
    init_value: ArrayLike,
    peak_value: ArrayLike,
    warmup_steps: int,
    decay_steps: int,
    end_value: ArrayLike = 0.0,
    exponent: ArrayLike = 1.0,
) -> NamedSchedule:
    r"""Linear warm-up to `peak_value`, then cosine decay to `end_value`.

    .. math::

      v(t) = \begin{cases}
        I + \frac{t}{W} (P - I) & t < W \\
        E + (P - E) \left(\tfrac12 \left(1 + \cos \frac{\pi \min(t - W, T - W)}{T - W}\right)
        \right)^{p} & t \ge W
      \end{cases}

    Args:
      init_value: :math:`I`, the value at step 0.
      peak_value: :math:`P`, reached at the end of the warm-up.
      warmup_steps: :math:`W` >= 0.
      decay_steps: :math:`T` > `warmup_steps`, the length of the whole schedule (warm-up
        included, as in Optax).
      end_value: :math:`E`, the value from step :math:`T` on.
      exponent: :math:`p` > 0.

    Returns:
      A schedule `step -> float32`.

    Examples:
      >>> import gradtx
      >>> lr = gradtx.schedules.warmup_cosine_decay(0.0, 1.0, warmup_steps=10, decay_steps=110)
      >>> [round(float(lr(t)), 4) for t in (0, 5, 10, 60, 110, 1000)]
      [0.0, 0.5, 1.0, 0.5, 0.0, 0.0]

    Reference: `optax.warmup_cosine_decay_schedule` (same values, except that Optax ignores
    `end_value` when `peak_value` is 0).
    """
    who = "warmup_cosine_decay"
    warm = check_steps(who, "warmup_steps", warmup_steps, minimum=0)
    total = check_steps(who, "decay_steps", decay_steps, minimum=1)
    if not (traced(warm) or traced(total)) and warm >= total:
        raise ValueError(
            f"{who}: warmup_steps must be < decay_steps (decay_steps counts the warm-up too), "
            f"got warmup_steps={warm}, decay_steps={total}; pass decay_steps="
            f"{warm} + the number of decay steps"
        )
    check_positive(who, "exponent", exponent)

    def fn(step):
        peak, end = f32(peak_value), f32(end_value)
        init = f32(init_value)
        if traced(warm):  # an int32: may be 0 (then `step < warm` never holds)
            ramp = init + (step.astype(jnp.float32) / f32(jnp.maximum(warm, 1))) * (peak - init)
        else:
            ramp = init + (step.astype(jnp.float32) / float(max(warm, 1))) * (peak - init)
            if warm > INT32_MAX:  # steps saturate at int32's maximum: the warm-up never ends
                return ramp
        decayed = end + (peak - end) * _cosine_factor(step - warm, total - warm, exponent)
        if not traced(warm) and warm == 0:
            return decayed
        return jnp.where(step < warm, ramp, decayed)

    return NamedSchedule(
        who,
        fn,
        init_value=init_value,
        peak_value=peak_value,
        warmup_steps=warm,
        decay_steps=total,
        end_value=end_value,
        exponent=exponent,
    )


@recorded(schedule=True)
def sgdr_schedule(cosine_kwargs: Iterable[Mapping[str, Any]]) -> NamedSchedule:
    r"""Warm restarts: `warmup_cosine_decay` cycles joined one after another.

    Cycle :math:`k` is `warmup_cosine_decay(**cosine_kwargs[k])` and starts where the previous
    one's `decay_steps` end; after the last cycle the value stays at its `end_value`.

    Args:
      cosine_kwargs: one dict of `warmup_cosine_decay` arguments per cycle.

    Returns:
      A schedule `step -> float32`.

    Reference: `optax.sgdr_schedule`. See `sgdr` for the paper's parametrisation.
    """
    who = "sgdr_schedule"
    cycles: list[NamedSchedule] = []
    bounds: list[int] = []
    start: Any = 0
    for i, kwargs in enumerate(cosine_kwargs):
        if not isinstance(kwargs, Mapping):
            raise ValueError(
                f"{who}: cosine_kwargs[{i}] must be a dict of warmup_cosine_decay arguments, "
                f"got {kwargs!r}"
            )
        try:
            cycle = warmup_cosine_decay(**kwargs)
        except (TypeError, ValueError) as err:
            raise ValueError(f"{who}: cosine_kwargs[{i}]: {err}") from err
        if cycles:
            bounds.append(start)
        cycles.append(cycle)
        start = start + cycle.arguments["decay_steps"]  # an int, or traced
    if not cycles:
        raise ValueError(f"{who}: cosine_kwargs must hold at least one cycle, got none")
    # Steps saturate at int32's maximum: the cycles that start later are never reached (a
    # traced start is an int32, so it may be).
    reached = 1 + sum(traced(b) or b <= INT32_MAX for b in bounds)
    joined = join(cycles[:reached], bounds[: reached - 1])
    return NamedSchedule(who, joined, cosine_kwargs=[dict(c.arguments) for c in cycles])


@recorded(schedule=True)
def sgdr(
    peak_value: ArrayLike,
    cycle_steps: int,
    num_cycles: int,
    *,
    cycle_mult: int = 1,
    peak_decay: ArrayLike = 1.0,
    end_value: ArrayLike = 0.0,
) -> NamedSchedule:
    r"""SGDR: cosine annealing with warm restarts, cycles growing by `cycle_mult`.

    .. math::

      v(t) = E + \tfrac12 (P_k - E) \left(1 + \cos \frac{\pi\, t_k}{L_k}\right), \qquad
      L_k = L\, m^{k}, \quad P_k = P\, d^{k}

    where :math:`k` is the current cycle and :math:`t_k` the steps since it began. After the last
    cycle the value stays at :math:`E`. Steps saturate at :math:`2^{31} - 1`: cycles starting
    later are never reached.

    Args:
      peak_value: :math:`P`, the value at the start of the first cycle.
      cycle_steps: :math:`L` >= 1, the length of the first cycle.
      num_cycles: the number of cycles, >= 1.
      cycle_mult: :math:`m` >= 1 (integer), the growth of the cycle length (the paper's
        :math:`T_{mult}`).
      peak_decay: :math:`d` >= 0, the factor on the peak at each restart.
      end_value: :math:`E`, the value each cycle anneals to (the paper's :math:`\eta_{min}`).

    Returns:
      A schedule `step -> float32`.

    Reference: Loshchilov & Hutter, "SGDR: Stochastic Gradient Descent with Warm Restarts"
    (ICLR 2017), eq. (5).
    """
    who = "sgdr"
    first = check_steps(who, "cycle_steps", cycle_steps, minimum=1)
    n = check_steps(who, "num_cycles", num_cycles, minimum=1)
    check_int(who, "cycle_mult", cycle_mult, minimum=1)
    check_in_range(who, "peak_decay", peak_decay, 0.0, float("inf"))
    args = dict(
        peak_value=peak_value,
        cycle_steps=first,
        num_cycles=n,
        cycle_mult=cycle_mult,
        peak_decay=peak_decay,
        end_value=end_value,
    )
    if traced(first) or traced(n) or traced(cycle_mult):
        return NamedSchedule(who, _traced_sgdr(first, n, cycle_mult, **args), **args)
    # Steps saturate at int32's maximum: only the cycles that start by then are kept, and their
    # lengths (which may reach past it) enter as floats.
    lengths: list[int] = []
    starts: list[int] = []
    total = 0
    for k in range(n):
        if total > INT32_MAX:
            break
        lengths.append(first * int(cycle_mult) ** k)
        starts.append(total)
        total += lengths[-1]

    def fn(step):
        if len(starts) > 1:
            k = jnp.sum(step[..., None] >= jnp.asarray(starts[1:], jnp.int32), axis=-1)
        else:
            k = jnp.zeros_like(step)
        k = jnp.asarray(k, jnp.int32)
        tau = (step - jnp.asarray(starts, jnp.int32)[k]).astype(jnp.float32)
        length = jnp.asarray([float(x) for x in lengths], jnp.float32)[k]
        end = f32(end_value)
        peak = f32(peak_value) * f32(peak_decay) ** k.astype(jnp.float32)
        value = end + 0.5 * (peak - end) * (1.0 + jnp.cos(jnp.pi * tau / length))
        if total > INT32_MAX:  # never over
            return value
        return jnp.where(step >= total, end, value)

    return NamedSchedule(who, fn, **args)


# With cycle_mult >= 2 cycle k starts at cycle_steps * (2**k - 1) or later: cycle 31 and later
# start past the int32 step range, so 32 cycles are all that can be reached.
_GROWING_CYCLES = 32


def _over(a: jax.Array, b: jax.Array, product: bool) -> tuple[jax.Array, jax.Array]:
    """`a * b` (`product`) or `a + b` for int32 a >= 0, b >= 1, saturated at the int32 maximum,
    and whether it went past it."""
    past = a > (INT32_MAX // b if product else INT32_MAX - b)
    return jnp.where(past, INT32_MAX, a * b if product else a + b), past


def _traced_sgdr(first: Any, n: Any, mult: Any, **args: Any) -> Any:
    """`sgdr`'s values for a traced cycle length, count or growth (int32): the cycle is found by
    integer comparisons with the cycles' starts (those of the 32 cycles that can be reached with
    `cycle_mult >= 2`, or in closed form with `cycle_mult == 1`); a cycle starting past the
    int32 range is never reached, and a length past it enters as a float, as in `sgdr`."""
    first, n, mult = (jnp.maximum(jnp.asarray(x, jnp.int32), 1) for x in (first, n, mult))
    no = jnp.zeros((), bool)
    length, start, length_past, start_past = first, jnp.zeros((), jnp.int32), no, no
    length_f = first.astype(jnp.float32)
    table: list[tuple[jax.Array, ...]] = []  # per cycle: start, its past flag, length (float)
    for _ in range(_GROWING_CYCLES + 1):
        table.append((start, start_past, length_f))
        start, past = _over(start, length, product=False)
        start_past = start_past | length_past | past
        length, past = _over(length, mult, product=True)
        length_past = length_past | past
        length_f = jnp.where(length_past, length_f * mult.astype(jnp.float32), f32(length))
    starts, starts_past, lengths = (jnp.stack(column) for column in zip(*table, strict=True))
    index = jnp.arange(1, _GROWING_CYCLES)

    def fn(step):
        later = (step[..., None] >= starts[1:-1]) & ~starts_past[1:-1] & (index < n)
        k_grow = jnp.sum(later, axis=-1).astype(jnp.int32)
        k_flat = jnp.minimum(step // first, n - 1)
        flat = mult == 1
        k = jnp.where(flat, k_flat, k_grow)
        begin = jnp.where(flat, k_flat * first, starts[k_grow])
        length = jnp.where(flat, f32(first), lengths[k_grow])
        last = jnp.minimum(n, _GROWING_CYCLES)  # the end of cycle n - 1 is the start of n
        total, total_past = _over(first, n, product=True)
        total = jnp.where(flat, total, starts[last])
        total_past = jnp.where(flat, total_past, starts_past[last])
        tau = (step - begin).astype(jnp.float32)
        end = f32(args["end_value"])
        peak = f32(args["peak_value"]) * f32(args["peak_decay"]) ** k.astype(jnp.float32)
        value = end + 0.5 * (peak - end) * (1.0 + jnp.cos(jnp.pi * tau / length))
        return jnp.where((step >= total) & ~total_past, end, value)

    return fn


@recorded(schedule=True)
def one_cycle(
    transition_steps: int,
    peak_value: ArrayLike,
    pct_start: float = 0.3,
    div_factor: float = 25.0,
    final_div_factor: float = 1e4,
    *,
    anneal: str = "cosine",
    pct_final: float = 0.85,
) -> NamedSchedule:
    r"""The one-cycle policy: up from `peak/div_factor` to the peak, then down far below.

    With :math:`I = P / \text{div}` and :math:`F = I / \text{final\_div}`:

    - `anneal="cosine"`: :math:`I \to P` over steps :math:`[0, \lfloor s T \rfloor]`, then
      :math:`P \to F` until :math:`T`, each along a half cosine.
    - `anneal="linear"`: :math:`I \to P` until :math:`\lfloor s T \rfloor`, :math:`P \to I` until
      :math:`\lfloor f T \rfloor`, :math:`I \to F` until :math:`T`, linearly.

    After step :math:`T` the value stays at :math:`F`.

    Args:
      transition_steps: :math:`T` >= 1.
      peak_value: :math:`P`.
      pct_start: :math:`s` in (0, 1), the fraction of the steps spent rising.
      div_factor: > 0, gives the start value :math:`P / \text{div}`.
      final_div_factor: > 0, gives the final value :math:`I / \text{final\_div}`.
      anneal: "cosine" or "linear".
      pct_final: :math:`f` in (`pct_start`, 1], the end of the descent back to :math:`I`
        (linear only).

    Returns:
      A schedule `step -> float32`.

    Reference: Smith & Topin, "Super-Convergence" (2017); `optax.cosine_onecycle_schedule` and
    `optax.linear_onecycle_schedule`.
    """
    who = "one_cycle"
    steps = check_steps(who, "transition_steps", transition_steps, minimum=1)
    check_one_of(who, "anneal", anneal, ["cosine", "linear"])
    start = number(who, "pct_start", pct_start)
    check_in_range(who, "pct_start", start, 0.0, 1.0, low_open=True, high_open=True)
    check_positive(who, "div_factor", div_factor)
    check_positive(who, "final_div_factor", final_div_factor)
    if anneal == "linear":
        final = number(who, "pct_final", pct_final)
        if not (traced(start) or traced(final)) and not start < final <= 1.0:
            raise ValueError(
                f"{who}: pct_final must be in (pct_start, 1] = ({start}, 1], got {final}"
            )
        bounds = [0, _step_at(start, steps), _step_at(final, steps), steps]
    else:
        bounds = [0, _step_at(start, steps), steps]

    def fn(step):
        peak = f32(peak_value)
        low = peak / f32(div_factor)
        last = low / f32(final_div_factor)
        if anneal == "linear":
            return interpolate_segments(step, bounds, [low, peak, low, last], "linear")
        return interpolate_segments(step, bounds, [low, peak, last], "cosine")

    args: dict[str, Any] = dict(
        transition_steps=steps,
        peak_value=peak_value,
        pct_start=pct_start,
        div_factor=div_factor,
        final_div_factor=final_div_factor,
        anneal=anneal,
    )
    if anneal == "linear":
        args["pct_final"] = pct_final
    return NamedSchedule(who, fn, **args)


def _step_at(pct: Any, steps: Any) -> Any:
    """`int(pct * steps)`, the step a fraction of the way; in float32 when either is traced."""
    if traced(pct) or traced(steps):
        return (f32(pct) * steps).astype(jnp.int32)
    return int(pct * steps)


@recorded(schedule=True)
def cosine_onecycle_schedule(
    transition_steps: int,
    peak_value: ArrayLike,
    pct_start: float = 0.3,
    div_factor: float = 25.0,
    final_div_factor: float = 1e4,
) -> NamedSchedule:
    """`one_cycle(..., anneal="cosine")` under Optax's name and signature."""
    return one_cycle(transition_steps, peak_value, pct_start, div_factor, final_div_factor)


@recorded(schedule=True)
def linear_onecycle_schedule(
    transition_steps: int,
    peak_value: ArrayLike,
    pct_start: float = 0.3,
    pct_final: float = 0.85,
    div_factor: float = 25.0,
    final_div_factor: float = 1e4,
) -> NamedSchedule:
    """`one_cycle(..., anneal="linear")` under Optax's name and signature."""
    return one_cycle(
        transition_steps,
        peak_value,
        pct_start,
        div_factor,
        final_div_factor,
        anneal="linear",
        pct_final=pct_final,
    )


__all__ = [
    "cosine_decay",
    "cosine_onecycle_schedule",
    "linear_onecycle_schedule",
    "one_cycle",
    "sgdr",
    "sgdr_schedule",
    "warmup_cosine_decay",
]
