"""What every schedule shares: step conversion, the schedule wrapper and argument checks.

Every public schedule is a `NamedSchedule`: calling it turns the step into a saturated int32 array
(`as_step`), evaluates a pure `jax.numpy` formula (no Python branching on the step, so it runs
under `jax.jit`, `jax.vmap` and on any backend) and returns float32.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .._base._checks import HyperparameterError, check_int, concrete
from .._base._numerics import INT32_MAX
from .._base._typing import ArrayLike

_INT32_MAX_F = float(INT32_MAX)


def as_step(step: Any) -> jax.Array:
    """A step as an int32 array, saturated to [0, 2**31 - 1] instead of wrapping.

    Accepts a Python int of any size (clamped before conversion, so 2**40 becomes 2**31 - 1),
    NumPy or JAX integer, unsigned, boolean or float arrays (floats are floored, NaN becomes 0),
    and traced values. Negative steps count as step 0.
    """
    if isinstance(step, bool | int | np.integer):
        return jnp.asarray(min(max(int(step), 0), INT32_MAX), jnp.int32)
    if isinstance(step, float):
        value = 0 if math.isnan(step) else min(max(math.floor(step), 0), INT32_MAX)
        return jnp.asarray(value, jnp.int32)
    if isinstance(step, np.ndarray | np.generic):
        arr = np.asarray(step)
        if arr.dtype == np.bool_:
            return jnp.asarray(arr, jnp.int32)
        if np.issubdtype(arr.dtype, np.integer):
            return jnp.asarray(np.clip(arr, 0, INT32_MAX).astype(np.int32))
        arr = np.floor(np.nan_to_num(arr.astype(np.float64), nan=0.0))
        return jnp.asarray(np.clip(arr, 0, INT32_MAX).astype(np.int32))
    x = jnp.asarray(step)
    if x.dtype == jnp.int32:
        return jnp.maximum(x, 0)
    if x.dtype == jnp.bool_:
        return x.astype(jnp.int32)
    if jnp.issubdtype(x.dtype, jnp.unsignedinteger):
        if jnp.iinfo(x.dtype).max > INT32_MAX:
            x = jnp.minimum(x, jnp.asarray(INT32_MAX, x.dtype))
        return x.astype(jnp.int32)
    if jnp.issubdtype(x.dtype, jnp.integer):
        info = jnp.iinfo(x.dtype)
        if info.max > INT32_MAX:
            x = jnp.minimum(x, jnp.asarray(INT32_MAX, x.dtype))
        return jnp.maximum(x, 0).astype(jnp.int32)
    # Floating point: floor, map NaN to 0, saturate. The cast of a value >= 2**31 is discarded by
    # the `where`, so it cannot wrap.
    x = jnp.floor(jnp.real(x))
    top = x >= _INT32_MAX_F
    safe = jnp.where(top | jnp.isnan(x), 0.0, jnp.maximum(x, 0.0))
    return jnp.where(top, INT32_MAX, safe.astype(jnp.int32))


def f32(value: ArrayLike) -> jax.Array:
    """`value` as a float32 array (hyperparameters are cast when the schedule is called, so they
    may be traced)."""
    return jnp.asarray(value, jnp.float32)


def _fmt(value: Any) -> str:
    if isinstance(value, NamedSchedule):
        return repr(value)
    if callable(value):
        return getattr(value, "__name__", type(value).__name__)
    arr = concrete(value)
    if arr is not None and arr.ndim == 0:
        return repr(arr.item())
    return repr(value)


class NamedSchedule:
    """A schedule `step -> float32 value` with a readable `repr` and `name`.

    `name` is the constructor's name (used as the default label by `plot`); `repr` shows the
    arguments, e.g. ``cosine_decay(init_value=0.1, decay_steps=1000, alpha=0.0, exponent=1.0)``.
    """

    __slots__ = ("__gradtx_recipe__", "__weakref__", "_fn", "arguments", "name")

    def __init__(self, name: str, fn: Callable[[jax.Array], ArrayLike], **arguments: Any):
        for argument, value in arguments.items():
            _check_finite(name, argument, value)
        self.name = name
        self.arguments = arguments
        self._fn = fn

    def __call__(self, step: ArrayLike) -> jax.Array:
        return jnp.asarray(self._fn(as_step(step)), jnp.float32)

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={_fmt(v)}" for k, v in self.arguments.items())
        return f"{self.name}({args})"

    @property
    def __name__(self) -> str:  # lets code written for plain functions read a name
        return self.name


def _check_finite(who: str, name: str, value: Any) -> None:
    """Every number in `value` (a scalar, or numbers nested in lists, tuples and dicts) is finite:
    a NaN or infinite schedule value would train on NaN without any error. Schedules and traced
    values are not inspected."""
    if isinstance(value, Mapping):
        for key, item in value.items():
            _check_finite(who, f"{name}[{key!r}]", item)
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            _check_finite(who, f"{name}[{i}]", item)
    else:
        arr = concrete(value)
        if (
            arr is not None
            and np.issubdtype(arr.dtype, np.inexact)
            and not np.all(np.isfinite(arr))
        ):
            raise HyperparameterError(who, name, value, "finite")


def call(schedule: Callable[[Any], ArrayLike], step: jax.Array) -> jax.Array:
    """Evaluate any schedule (gradtx, Optax or a plain function) at `step`, as float32."""
    return jnp.asarray(schedule(step), jnp.float32)


# --------------------------------------------------------------------------------------------
# Construction-time checks shared by the schedule families
# --------------------------------------------------------------------------------------------


def traced(value: Any) -> bool:
    """Whether `value` is traced (a hyperparameter given inside `jax.jit` or `jax.vmap`, as
    `gradtx.with_hyperparameters` gives them): its number is unknown at construction, so the
    schedule computes with it instead of deciding on it."""
    return isinstance(value, jax.core.Tracer)


def check_steps(who: str, name: str, value: Any, *, minimum: int) -> Any:
    """`value` is an integer >= `minimum` (a step count); returns it as a Python int, or a traced
    integer as it is (unchecked)."""
    check_int(who, name, value, minimum=minimum)
    return value if traced(value) else int(value)


def check_callable(who: str, name: str, value: Any) -> None:
    if not callable(value):
        raise TypeError(
            f"{who}: {name} must be a schedule (a function step -> value), "
            f"got {type(value).__name__}"
        )


def check_sorted_steps(who: str, name: str, values: Sequence[Any], *, strict: bool) -> list[int]:
    """A list of integer steps >= 0, sorted (strictly increasing when `strict`); traced steps are
    kept as they are, and their order is not checked."""
    if isinstance(values, str | bytes) or not isinstance(values, Sequence | np.ndarray):
        raise HyperparameterError(who, name, values, "a list of integer steps", got=repr(values))
    out = [check_steps(who, f"{name}[{i}]", v, minimum=0) for i, v in enumerate(values)]
    if any(traced(v) for v in out):
        return out
    for a, b in itertools.pairwise(out):
        if b < a or (strict and b == a):
            order = "strictly increasing" if strict else "sorted in increasing order"
            fixed = sorted(set(out)) if strict else sorted(out)
            raise HyperparameterError(
                who, name, values, order, got=str(out), note=f"; pass them as {fixed}"
            )
    return out


def check_boundaries_and_scales(
    who: str,
    boundaries_and_scales: Mapping[Any, Any] | Sequence[tuple[Any, Any]] | None,
    *,
    non_negative_scales: bool = True,
) -> tuple[list[Any], list[Any]]:
    """A `{step: scale}` mapping, or a sequence of `(step, scale)` pairs, as (sorted steps,
    scales); steps must be integers >= 0. A traced scale or step is kept as it is, unchecked;
    with a traced step (pairs only: a dict key cannot be traced) the pairs are taken in the
    order given, which must be increasing."""
    if boundaries_and_scales is None:
        return [], []
    if isinstance(boundaries_and_scales, Mapping):
        pairs = list(boundaries_and_scales.items())
    elif isinstance(boundaries_and_scales, Sequence) and all(
        isinstance(p, Sequence) and len(p) == 2 for p in boundaries_and_scales
    ):
        pairs = [(p[0], p[1]) for p in boundaries_and_scales]
    else:
        raise ValueError(
            f"{who}: boundaries_and_scales must be a dict {{step: scale}} or a list of "
            f"(step, scale) pairs, got {type(boundaries_and_scales).__name__}"
        )
    items = []
    for step, scale in pairs:
        if isinstance(step, float) and step.is_integer():
            step = int(step)
        check_int(who, f"the boundary {step!r} in boundaries_and_scales", step, minimum=0)
        step = step if traced(step) else int(step)
        if traced(scale) and scale.ndim == 0:
            items.append((step, scale))
            continue
        arr = concrete(scale)
        if arr is None or arr.ndim != 0:
            raise ValueError(
                f"{who}: the scale at step {step} in boundaries_and_scales must be a number, "
                f"got {scale!r}"
            )
        if non_negative_scales and not float(arr) >= 0:
            raise ValueError(
                f"{who}: the scale at step {step} in boundaries_and_scales must be >= 0, "
                f"got {float(arr)!r}"
            )
        items.append((step, float(arr)))
    if not any(traced(s) for s, _ in items):
        items.sort(key=lambda kv: kv[0])
    return [s for s, _ in items], [v for _, v in items]


def as_boundaries_and_scales(bounds: list[Any], scales: list[Any]) -> Any:
    """The schedule's `boundaries_and_scales` for its `repr`: a dict, or pairs when a step is
    traced (a dict key cannot be)."""
    if any(traced(b) for b in bounds):
        return list(zip(bounds, scales, strict=True))
    return dict(zip(bounds, scales, strict=True))


def number(who: str, name: str, value: Any) -> Any:
    """`value` as a Python float, or a traced scalar as it is: for arguments that decide the
    schedule's shape at construction (a traced one is decided on with `jnp.where`)."""
    if traced(value) and value.ndim == 0:
        return value
    arr = concrete(value)
    if arr is None or arr.ndim != 0 or not np.issubdtype(arr.dtype, np.number):
        raise HyperparameterError(who, name, value, "a number", got=repr(value))
    return float(arr)


def int32s(steps: Sequence[Any]) -> jax.Array:
    """Steps (Python ints, some of them maybe traced) as one int32 array."""
    if any(traced(x) for x in steps):
        return jnp.stack([jnp.asarray(x, jnp.int32) for x in steps])
    return jnp.asarray(steps, jnp.int32)


def interpolate_segments(
    step: jax.Array, boundaries: Sequence[int], values: Sequence[Any], kind: str
) -> jax.Array:
    """Piecewise interpolation through `(boundaries[i], values[i])`, constant outside.

    `boundaries` are sorted steps starting at 0 (repeats allowed: a zero-length segment is
    skipped), Python ints or traced int32 scalars; `kind` is "linear" or "cosine" (half-cosine
    ease between the two values).
    """
    t = step.astype(jnp.float32)
    # As floats, so that boundaries may lie past the int32 step range (then never reached).
    if any(traced(x) for x in boundaries):
        b = jnp.stack([f32(x) for x in boundaries])
    else:
        b = jnp.asarray([float(x) for x in boundaries], jnp.float32)
    v = jnp.stack([f32(x) for x in values])
    n = len(boundaries)
    if n == 1:
        return jnp.broadcast_to(v[0], t.shape)
    # Segment i spans [b[i], b[i+1]); the last one is also used past the end (pct clips to 1).
    # It is found by exact int32 comparisons with the inner boundaries that steps can reach (a
    # traced one is an int32: any can be reached).
    inner = [x for x in boundaries[1:-1] if traced(x) or x <= INT32_MAX]
    if inner:
        idx = jnp.sum(step[..., None] >= int32s(inner), axis=-1)
    else:
        idx = jnp.zeros_like(step)
    lo, hi = b[idx], b[idx + 1]
    pct = jnp.clip((t - lo) / jnp.maximum(hi - lo, 1.0), 0.0, 1.0)
    pct = jnp.where(hi > lo, pct, 1.0)
    start, end = v[idx], v[idx + 1]
    if kind == "linear":
        return start + pct * (end - start)
    return end + 0.5 * (start - end) * (1.0 + jnp.cos(jnp.pi * pct))


__all__ = [
    "NamedSchedule",
    "as_step",
    "call",
    "check_boundaries_and_scales",
    "check_callable",
    "check_sorted_steps",
    "check_steps",
    "f32",
    "int32s",
    "interpolate_segments",
    "number",
    "traced",
]
