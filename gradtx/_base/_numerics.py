"""Numerical building blocks shared by the transformations (internal).

Counters are int32 and saturate instead of wrapping; bias corrections and norms are computed in
float32 (or wider, when the inputs are wider) and cast back by the caller.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ._checks import HyperparameterError
from ._typing import ArrayLike

INT32_MAX = int(jnp.iinfo(jnp.int32).max)


def zero_count() -> jax.Array:
    """A fresh step counter: an int32 scalar 0."""
    return jnp.zeros([], jnp.int32)


def safe_increment(count: ArrayLike) -> jax.Array:
    """`count + 1`, saturating at the largest value of the counter's dtype instead of wrapping.

    Integer counters (gradtx's are int32) stop at `iinfo(dtype).max`, float counters at
    `finfo(dtype).max`; the result keeps the counter's dtype. As `optax.safe_increment`.

    Example:
      >>> import jax.numpy as jnp, gradtx
      >>> gradtx.safe_increment(jnp.int32(2147483647))
      Array(2147483647, dtype=int32)

    Args:
      count: a counter (an integer or float array).
    """
    count = jnp.asarray(count)
    dtype = count.dtype
    top: Any
    if jnp.issubdtype(dtype, jnp.integer) and dtype != jnp.bool_:
        top = jnp.iinfo(dtype).max
    elif jnp.issubdtype(dtype, jnp.floating):
        top = jnp.finfo(dtype).max
    else:
        raise ValueError(
            f"safe_increment: count must have an integer or floating dtype, got {dtype}; "
            "use e.g. jnp.zeros([], jnp.int32) as the counter"
        )
    top_arr = jnp.asarray(top, dtype)
    return jnp.where(count < top_arr, count + jnp.asarray(1, dtype), top_arr)


safe_int32_increment = safe_increment
"""Optax's older name of `safe_increment` (the same function)."""


def wide_float(*dtypes) -> jnp.dtype:
    """float32, or float64 when any of `dtypes` is already float64 (and x64 is enabled)."""
    for d in dtypes:
        if d is not None and jnp.dtype(d) == jnp.float64:
            return jnp.dtype(jnp.float64)
    return jnp.dtype(jnp.float32)


def widen(x: ArrayLike) -> jax.Array:
    """`x` in float32 at least: bf16/f16/float8 (and integers) are widened, float64 and complex
    kept.

    Update rules compute in this precision and cast results back to the buffers' dtypes, so that
    e.g. `(1 - b2) * g**2` does not underflow to 0 for small float16 gradients.
    """
    x = jnp.asarray(x)
    if jnp.issubdtype(x.dtype, jnp.floating) and x.dtype.itemsize == 1:
        return x.astype(jnp.float32)  # float8_*: JAX promotes it to nothing implicitly
    return x.astype(jnp.promote_types(x.dtype, jnp.float32))


def abs_sq(g: jax.Array) -> jax.Array:
    """`|g|^2`, real for complex `g`."""
    return jnp.real(g * jnp.conj(g)) if jnp.iscomplexobj(g) else g * g


def bias_correction(decay: ArrayLike, count: ArrayLike) -> jax.Array:
    r"""`1 - decay ** count`, computed in float32.

    `count` is the number of the current step, starting at 1 for the first update.
    """
    decay = jnp.asarray(decay, jnp.float32)
    return 1.0 - decay ** jnp.asarray(count, jnp.float32)


def ema(decay: ArrayLike, g: Any, m: Any) -> Any:
    """`(1 - decay) g + decay m` in Optax's order and precision (`decay m` rounds in `m`'s dtype,
    so a bf16 buffer gives Optax's numbers); `g` is already widened."""
    return (1 - decay) * g + decay * m


def adam_step_size(b1: ArrayLike, b2: ArrayLike, count: ArrayLike) -> jax.Array:
    r"""Adam's bias-corrected step factor :math:`\sqrt{1-\beta_2^t} / (1-\beta_1^t)`, float32."""
    return jnp.sqrt(bias_correction(b2, count)) / bias_correction(b1, count)


def safe_divide(numerator: ArrayLike, denominator: ArrayLike, *, positive: bool = False) -> Any:
    """`numerator / denominator`, and 0 where the denominator is 0 (0/0 -> 0, no NaN), or with
    `positive` where it is <= 0 (a running sum that has measured nothing yet: Optax divides
    unconditionally, so a first all-zero gradient gives 0 / 0 = NaN and every later update NaN).
    Only the guarded denominators give 0: a NaN or infinite one gives `numerator / denominator`,
    so a non-finite value stays visible."""
    numerator, denominator = jnp.asarray(numerator), jnp.asarray(denominator)
    ok = denominator > 0 if positive else denominator != 0
    return jnp.where(ok, numerator / jnp.where(ok, denominator, 1.0), 0.0)


def _norm_sq(x: jax.Array, axis=None, keepdims: bool = False) -> jax.Array:
    x = jnp.asarray(x)
    x = x.astype(wide_float(x.dtype)) if not jnp.iscomplexobj(x) else x
    return jnp.sum(jnp.real(x * jnp.conj(x)), axis=axis, keepdims=keepdims)


def safe_norm(
    x: ArrayLike,
    min_norm: ArrayLike = 0.0,
    ord: int | float | str | None = None,
    axis: int | tuple[int, ...] | None = None,
    keepdims: bool = False,
) -> jax.Array:
    """`max(jnp.linalg.norm(x, ord, axis), min_norm)`, with a gradient that is defined at zero.

    Where the norm would be <= `min_norm` the result is `min_norm` and the gradient with
    respect to `x` is zero (instead of the NaN that `jnp.linalg.norm` gives at 0). As
    `optax.safe_norm`, with the same argument order, except that the norm is computed in float32
    at least (float64 and complex inputs keep their precision), so a bf16 `x` gives a float32
    result.

    Args:
      x: an array.
      min_norm: lower bound of the result (default 0).
      ord: the order of the norm, as in `jnp.linalg.norm` (`None`: the 2-norm of the flattened
        `x`, or of each slice along `axis`; a 2-tuple `axis` gives matrix norms).
      axis: the axis (int) or the two matrix axes (2-tuple) to reduce; `None`: all of `x`.
      keepdims: keep the reduced axes as size-1 dimensions.
    """
    x = jnp.asarray(x)
    if ord is None:
        sq = _norm_sq(x, axis=axis, keepdims=keepdims)
        min_norm = jnp.asarray(min_norm, sq.dtype)
        positive = ~(sq <= min_norm**2)  # NaN stays on the sqrt branch, so it propagates
        # Feed a harmless 1 into sqrt where the branch is discarded, so its gradient stays finite.
        return jnp.where(positive, jnp.sqrt(jnp.where(positive, sq, 1.0)), min_norm)
    xw = x if jnp.iscomplexobj(x) else x.astype(wide_float(x.dtype))
    kept = jnp.linalg.norm(xw, ord=ord, axis=axis, keepdims=True)
    min_norm = jnp.asarray(min_norm, kept.dtype)
    small = kept <= min_norm
    # Where the norm is at most min_norm, take the norm of ones instead (its gradient is finite)
    # and discard it.
    masked = jnp.linalg.norm(jnp.where(small, 1.0, xw), ord=ord, axis=axis, keepdims=keepdims)
    if not keepdims:
        small = jnp.squeeze(small, axis=axis)
    return jnp.where(small, min_norm, masked)


def safe_rms(x: ArrayLike, min_rms: ArrayLike = 0.0) -> jax.Array:
    """Root mean square of `x` in float32, at least `min_rms`, with a defined gradient at zero."""
    x = jnp.asarray(x)
    n = max(int(x.size), 1)
    ms = _norm_sq(x) / n
    min_rms = jnp.asarray(min_rms, ms.dtype)
    positive = ~(ms <= min_rms**2)  # NaN stays on the sqrt branch, so it propagates
    return jnp.where(positive, jnp.sqrt(jnp.where(positive, ms, 1.0)), min_rms)


def safe_root_mean_squares(x: ArrayLike, min_rms: ArrayLike) -> jax.Array:
    """`max(sqrt(mean(|x|^2)), min_rms)`, with a zero gradient (not NaN) where it is `min_rms`.

    As `optax.safe_root_mean_squares`, computed in float32 at least (float64 kept); an empty
    `x` gives `min_rms` (Optax: NaN, the mean of nothing).

    Args:
      x: an array.
      min_rms: the smallest value returned.
    """
    return safe_rms(x, min_rms)


def value_at(hyperparameter, count: ArrayLike, *, who: str = "", name: str = ""):
    """A hyperparameter's value at step `count`: a schedule is called (its result as float32),
    a constant is returned unchanged (a Python float stays weakly typed, so it does not promote
    bf16 updates).

    A schedule that returns an array raises a `HyperparameterError` naming the transformation
    `who` and its hyperparameter `name` (``scale_by_learning_rate: learning_rate schedule must
    return a scalar, got shape (3,)``)."""
    if callable(hyperparameter):
        value = jnp.asarray(hyperparameter(count), jnp.float32)
        if value.ndim != 0:
            raise HyperparameterError(
                who or "value_at",
                name or "a",
                hyperparameter,
                "a scalar",
                verb="return",
                aspect="schedule",
                got=f"shape {value.shape}",
                note="" if who else f" from {hyperparameter!r}",
            )
        return value
    return hyperparameter


def last_used(value: Any, count: Any, *, start: int = 0, who: str = "", name: str = "") -> Any:
    """`value` (a number or a schedule of the step count) as the latest update used it, for a
    `report`: at `count - 1`, with `count` the state's counter after that update, or at `start`
    (the counter's value before the first update) when no update has run yet: the value the
    first update will use. A float32 scalar (Optax's `inject_hyperparams` convention)."""
    latest = jnp.maximum(jnp.asarray(count) - 1, start)
    return jnp.asarray(value_at(value, latest, who=who, name=name), jnp.float32)


def key_data(who: str, name: str, seed: Any) -> jax.Array:
    """The raw key data (uint32) of an integer seed or a PRNG key (typed, or a legacy uint32
    `jax.random.PRNGKey`), for state that must hold plain arrays; a `ValueError` naming `who`'s
    argument `name` otherwise."""
    if isinstance(seed, jax.Array) and jnp.issubdtype(seed.dtype, jax.dtypes.prng_key):
        return jax.random.key_data(seed)
    if not isinstance(seed, bool):
        arr = seed if isinstance(seed, jax.Array) else np.asarray(seed)
        if arr.ndim == 0 and jnp.issubdtype(arr.dtype, jnp.integer):
            return jax.random.key_data(jax.random.key(seed))
        if arr.dtype == jnp.uint32 and arr.ndim == 1:  # a legacy jax.random.PRNGKey(...)
            return jnp.asarray(arr)
    raise ValueError(f"{who}: {name} must be an integer seed or a PRNG key, got {seed!r}")


def cond(pred: Any, true_fn: Callable[..., Any], false_fn: Callable[..., Any], *operands: Any):
    """`jax.lax.cond`, or a plain Python branch when `pred` is concrete (eager updates): an eager
    `lax.cond` compiles its branches anew at every call, as they are new closures each step."""
    if isinstance(pred, jax.core.Tracer):
        return jax.lax.cond(pred, true_fn, false_fn, *operands)
    return true_fn(*operands) if bool(pred) else false_fn(*operands)
