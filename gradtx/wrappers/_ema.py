"""Exponential moving averages of the updates, and of measurements taken on them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from .._base._checks import check_in_range
from .._base._recipe import recorded
from .._base._typing import ArrayLike, DType, PyTree, Updates
from ..core._transformation import GradientTransformation, chain
from ..transforms._building_blocks import (
    bias_correction,
    check_float_dtype,
    safe_increment,
    stateless,
    widen,
    zero_count,
)
from ..transforms._building_blocks import ema as _ema
from ..tree import assert_same_structure, map_split, zeros_like


class EmaState(NamedTuple):
    """State of `ema`: the step count and the (not debiased) moving average."""

    count: jax.Array  # type: ignore[assignment]  # int32, saturating: steps averaged so far
    ema: Updates  # the moving average, in its buffer dtype (fixed at init)


def _buffer_dtype(x: Any, accumulator_dtype: Any) -> Any:
    if accumulator_dtype is not None:
        return jnp.dtype(accumulator_dtype)
    dtype = jnp.dtype(x.dtype)
    # an average of booleans or integers is a fraction: keep it in float32
    return dtype if jnp.issubdtype(dtype, jnp.inexact) else jnp.dtype(jnp.float32)


def _out_dtype(x: Any, buffer: Any) -> Any:
    dtype = jnp.dtype(x.dtype)
    return dtype if jnp.issubdtype(dtype, jnp.inexact) else jnp.dtype(buffer.dtype)


def _zeros(tree: PyTree, accumulator_dtype: Any) -> PyTree:
    def leaf(x):
        if not isinstance(x, jax.ShapeDtypeStruct):
            x = jnp.asarray(x)
        return zeros_like(x, _buffer_dtype(x, accumulator_dtype))

    return jax.tree.map(leaf, tree)


@recorded
def ema(
    decay: ArrayLike, debias: bool = True, accumulator_dtype: DType | None = None
) -> GradientTransformation:
    r"""Replace the updates by an exponential moving average of the updates seen so far.

    .. math::

      m_t = \beta m_{t-1} + (1-\beta) g_t, \quad m_0 = 0, \qquad
      u_t = \begin{cases} m_t / (1 - \beta^t) & \text{debias} \\ m_t & \text{otherwise}
      \end{cases}

    Unlike `trace` (:math:`m_t = g_t + \beta m_{t-1}`) the new value enters with weight
    :math:`1-\beta`. Computed in float32 (or wider), in Optax's order (a Python float
    :math:`\beta` is used as given, not rounded to float32 first); the updates keep the
    gradients' dtype, the buffer keeps its own. Booleans and integers are averaged in a float32
    buffer (so `measure_with_ema` of a predicate gives the fraction of steps where it held).

    Args:
      decay: :math:`\beta`, in [0, 1) with `debias` (else in [0, 1]).
      debias: divide by :math:`1-\beta^t`, so early averages are not pulled towards 0.
      accumulator_dtype: dtype of the buffer :math:`m` (default: the updates' dtype; float32
        for booleans and integers).

    Returns:
      A `GradientTransformation` with state `EmaState(count, ema)`; `ema` holds :math:`m_t`
      (not debiased), as in Optax.

    Reference: matches `optax.ema` (same state fields).
    """
    who = "ema"
    if not isinstance(debias, bool):
        raise ValueError(f"{who}: debias must be True or False, got {debias!r}")
    check_in_range(who, "decay", decay, 0.0, 1.0, high_open=debias)
    check_float_dtype(who, "accumulator_dtype", accumulator_dtype)

    def init(params):
        return EmaState(count=zero_count(), ema=_zeros(params, accumulator_dtype))

    def update(updates, state, params=None, **extra_args):
        del params, extra_args
        if not isinstance(state, EmaState):
            raise ValueError(
                f"{who}: expected an EmaState (from this transformation's init), "
                f"got {type(state).__name__}"
            )
        assert_same_structure(who, updates=updates, **{"state.ema": state.ema})
        count = safe_increment(state.count)
        correction = bias_correction(decay, count) if debias else None

        def leaf(g, m):
            g = jnp.asarray(g)
            new = _ema(decay, widen(g), widen(m))
            out = new / correction.astype(new.dtype) if correction is not None else new
            return out.astype(_out_dtype(g, m)), new.astype(m.dtype)

        new_updates, new_ema = map_split(leaf, 2, updates, state.ema)
        return new_updates, EmaState(count=count, ema=new_ema)

    return GradientTransformation(init, update)


@recorded
def measure_with_ema(
    measure: Callable[[Updates], PyTree],
    decay: ArrayLike,
    debias: bool = True,
    accumulator_dtype: DType | None = None,
) -> GradientTransformation:
    r"""A moving average of a measurement of the updates, returned in place of the updates.

    .. math::  u_t = \mathrm{ema}_\beta(\mathrm{measure}(g))_t

    For monitoring (e.g. the fraction of steps whose gradient norm exceeded a threshold); the
    output is the averaged measurement, not an update to apply: use it inside a monitor, or
    read it from the state (`gradtx.tree.get(state, "ema")`, the not-debiased average).
    The average's buffer is shaped like `measure(params)` (computed abstractly at init, so
    `init` also works on `jax.ShapeDtypeStruct` params).

    Args:
      measure: a function `updates -> pytree of arrays` (e.g. `gradtx.tree.norm`).
      decay: :math:`\beta` of the moving average (see `ema`).
      debias: divide by :math:`1-\beta^t` (see `ema`).
      accumulator_dtype: dtype of the average's buffer (default: the measurement's dtype;
        float32 for booleans and integers).

    Returns:
      A `GradientTransformation`: `chain(stateless(measure), ema(...))`, state
      `(EmptyState(), EmaState(count, ema))`.

    Reference: matches `optax.measure_with_ema` (Optax's buffer for a boolean measurement
    starts as bool and becomes float32 after the first step; here it is float32 from init).
    """
    who = "measure_with_ema"
    if not callable(measure):
        raise TypeError(f"{who}: measure must be callable, got {type(measure).__name__}")
    try:
        averaged = ema(decay, debias, accumulator_dtype)
    except ValueError as e:
        raise ValueError(f"{who}: {e}") from e

    def init(params):
        return averaged.init(jax.eval_shape(measure, params))

    return chain(
        stateless(lambda updates, params: measure(updates)),
        GradientTransformation(init, averaged.update),
    )


__all__ = ["EmaState", "ema", "measure_with_ema"]
