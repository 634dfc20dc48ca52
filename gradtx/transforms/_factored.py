"""Adafactor's factored second-moment estimate."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from .._base._checks import check_int, check_non_negative
from .._base._recipe import recorded
from .._base._typing import ArrayLike, Updates
from ..core._transformation import GradientTransformation
from ..tree import assert_same_structure, map_split
from ._building_blocks import abs_sq, ema, safe_increment, widen, zero_count


class FactoredState(NamedTuple):
    count: jax.Array  # type: ignore[assignment]  # int32, saturating
    v_row: Updates  # row statistics of factored leaves (a 1-element placeholder elsewhere)
    v_col: Updates  # column statistics of factored leaves (a 1-element placeholder elsewhere)
    v: Updates  # full second moment of unfactored leaves (a 1-element placeholder elsewhere)


def _decay_rate_pow(step: ArrayLike, exponent: ArrayLike = 0.8) -> jax.Array:
    """Adafactor's increasing decay :math:`1 - (k+1)^{-c}` at the 0-based step `k`."""
    t = jnp.asarray(step, jnp.float32) + 1.0
    return 1.0 - t ** (-jnp.asarray(exponent, jnp.float32))


def _factored_dims(
    shape: tuple[int, ...], factored: bool, min_dim_size_to_factor: int
) -> tuple[int, int] | None:
    """(second largest axis, largest axis), or None when the leaf is not factored.

    Ties keep axis order (a stable sort), as `numpy.argsort` does for the small ranks of
    parameters, so the same axes are chosen as by Optax.
    """
    if not factored or len(shape) < 2:
        return None
    order = sorted(range(len(shape)), key=lambda i: shape[i])
    if shape[order[-2]] < min_dim_size_to_factor:
        return None
    return order[-2], order[-1]


def _drop_axis(shape: tuple[int, ...], axis: int) -> tuple[int, ...]:
    return shape[:axis] + shape[axis + 1 :]


@recorded
def scale_by_factored_rms(
    factored: bool = True,
    decay_rate: ArrayLike = 0.8,
    step_offset: ArrayLike = 0,
    min_dim_size_to_factor: int = 128,
    epsilon: ArrayLike = 1e-30,
    decay_rate_fn: Callable[[ArrayLike, ArrayLike], ArrayLike] = _decay_rate_pow,
) -> GradientTransformation:
    r"""Divide updates by a factored estimate of their root mean square (Adafactor).

    For a leaf whose two largest axes (rows :math:`r`, columns :math:`c`) both have at least
    `min_dim_size_to_factor` elements, only row and column averages of :math:`g^2` are kept:

    .. math::

      \beta_t = 1 - (t - t_0 + 1)^{-\gamma}, \qquad G_t = g_t^2 + \epsilon, \\
      R_t = \beta_t R_{t-1} + (1-\beta_t)\, \mathrm{mean}_c G_t, \qquad
      C_t = \beta_t C_{t-1} + (1-\beta_t)\, \mathrm{mean}_r G_t, \\
      u_t = g_t \Big/ \sqrt{\frac{R_t\, C_t}{\mathrm{mean}_r R_t}}

    Other leaves keep the full average :math:`V_t = \beta_t V_{t-1} + (1-\beta_t) G_t` and get
    :math:`u_t = g_t / \sqrt{V_t}`. Here :math:`t = 0, 1, \dots` is the step, :math:`t_0` the
    `step_offset` and :math:`\gamma` the `decay_rate`; `decay_rate_fn(t - t_0, decay_rate)`
    replaces the schedule :math:`\beta_t` (e.g. a capped one, as in Zhai et al., 2021).
    Statistics are computed in float32 for low-precision leaves and stored in the leaf's
    dtype. Matches `optax.scale_by_factored_rms` (same state layout: every leaf has `v_row`,
    `v_col` and `v`, the unused ones as 1-element placeholders). Unlike Optax it does not need
    `params`: shapes are read from the updates.

    Args:
      factored: factor the second moment of leaves with two large enough axes.
      decay_rate: :math:`\gamma` >= 0, the exponent of the default decay schedule.
      step_offset: :math:`t_0` >= 0, e.g. the first step of a fine-tuning phase.
      min_dim_size_to_factor: factor only when the two largest axes have at least this size.
      epsilon: :math:`\epsilon` >= 0 added to the squared gradients.
      decay_rate_fn: `(step, decay_rate) -> beta`, the decay schedule.

    Returns:
      A `GradientTransformation` with state `FactoredState(count, v_row, v_col, v)`.

    Reference: Shazeer & Stern, "Adafactor: Adaptive Learning Rates with Sublinear Memory Cost"
    (ICML 2018), Algorithm 4.
    """
    who = "scale_by_factored_rms"
    if decay_rate_fn is _decay_rate_pow:
        check_non_negative(who, "decay_rate", decay_rate)
    elif not callable(decay_rate_fn):
        raise ValueError(
            f"{who}: decay_rate_fn must be a callable (step, decay_rate) -> decay, "
            f"got {decay_rate_fn!r}"
        )
    check_non_negative(who, "step_offset", step_offset)
    check_int(who, "min_dim_size_to_factor", min_dim_size_to_factor, minimum=0)
    check_non_negative(who, "epsilon", epsilon)

    def dims(shape: tuple[int, ...]) -> tuple[int, int] | None:
        return _factored_dims(tuple(shape), factored, min_dim_size_to_factor)

    def init(params):
        def init_leaf(p: Any) -> tuple:
            shape, dtype = tuple(p.shape), p.dtype
            # A fresh placeholder for each field: one array shared by two state leaves could
            # not be donated to a jitted step (XLA refuses to donate a buffer twice).
            placeholder = lambda: jnp.zeros((1,), dtype)
            axes = dims(shape)
            if axes is None:
                return placeholder(), placeholder(), jnp.zeros(shape, dtype)
            d1, d0 = axes
            v_row = jnp.zeros(_drop_axis(shape, d0), dtype)
            v_col = jnp.zeros(_drop_axis(shape, d1), dtype)
            return v_row, v_col, placeholder()

        v_row, v_col, v = map_split(init_leaf, 3, params)
        return FactoredState(count=zero_count(), v_row=v_row, v_col=v_col, v=v)

    def update(updates, state, params=None, **extra_args):
        del params, extra_args
        assert_same_structure(
            who,
            updates=updates,
            **{"state.v_row": state.v_row, "state.v_col": state.v_col, "state.v": state.v},
        )
        beta = jnp.asarray(decay_rate_fn(state.count - step_offset, decay_rate), jnp.float32)

        def leaf(g, vr, vc, v):
            g32 = widen(g)
            sq = abs_sq(g32) + epsilon
            axes = dims(g.shape)
            if axes is None:
                v_new = ema(beta, sq, v.astype(sq.dtype))
                u = g32 * jax.lax.rsqrt(v_new)
                return u.astype(g.dtype), vr, vc, v_new.astype(v.dtype)
            d1, d0 = axes
            vr_new = ema(beta, jnp.mean(sq, axis=d0), vr.astype(sq.dtype))
            vc_new = ema(beta, jnp.mean(sq, axis=d1), vc.astype(sq.dtype))
            d1_in_row = d1 - 1 if d1 > d0 else d1
            row_factor = jax.lax.rsqrt(vr_new / jnp.mean(vr_new, axis=d1_in_row, keepdims=True))
            col_factor = jax.lax.rsqrt(vc_new)
            u = g32 * jnp.expand_dims(row_factor, d0) * jnp.expand_dims(col_factor, d1)
            return u.astype(g.dtype), vr_new.astype(vr.dtype), vc_new.astype(vc.dtype), v

        updates, v_row, v_col, v = map_split(leaf, 4, updates, state.v_row, state.v_col, state.v)
        count = safe_increment(state.count)
        return updates, FactoredState(count=count, v_row=v_row, v_col=v_col, v=v)

    return GradientTransformation(init, update)


__all__ = ["FactoredState", "scale_by_factored_rms"]
