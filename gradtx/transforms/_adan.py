"""Adan: adaptive Nesterov momentum from gradient differences (no extra gradient evaluation)."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from .._base._checks import check_in_range, check_non_negative
from .._base._typing import ArrayLike, Updates
from ..core._transformation import GradientTransformation
from ..tree import assert_same_structure, map_split
from ._tier import (
    abs_sq,
    bias_correction,
    ema,
    safe_increment,
    stored,
    widen,
    zero_count,
    zeros_like_params,
)


class ScaleByAdanState(NamedTuple):
    """State of `scale_by_adan`."""

    count: jax.Array  # type: ignore[assignment]  # int32, saturating
    mu: Updates  # m: EMA of the gradients
    delta: Updates  # v: EMA of the gradient differences g_t - g_{t-1}
    nu: Updates  # n: EMA of |g_t + (1 - b2)(g_t - g_{t-1})|^2
    prev_grad: Updates  # g_{t-1}, the last gradient seen


def scale_by_adan(
    b1: ArrayLike = 0.98,
    b2: ArrayLike = 0.92,
    b3: ArrayLike = 0.99,
    eps: ArrayLike = 1e-8,
    eps_root: ArrayLike = 0.0,
) -> GradientTransformation:
    r"""Rescale updates by Adan's bias-corrected moments of gradients and gradient differences.

    .. math::

      d_t = g_t - g_{t-1} \ (d_1 = 0), \qquad
      m_t = \beta_1 m_{t-1} + (1-\beta_1) g_t, \qquad
      v_t = \beta_2 v_{t-1} + (1-\beta_2) d_t, \\
      n_t = \beta_3 n_{t-1} + (1-\beta_3) |g_t + (1-\beta_2) d_t|^2, \qquad
      u_t = \frac{\hat m_t + (1-\beta_2) \hat v_t}{\sqrt{\hat n_t + \epsilon_{root}} + \epsilon}

    where :math:`\hat x_t = x_t / (1-\beta^t)` with the buffer's own decay. The decays are
    Optax's: :math:`\beta` weighs the *old* value (the paper's :math:`1-\beta`). Bias corrections
    are computed in float32. Matches `optax.scale_by_adan`.

    Args:
      b1: :math:`\beta_1` in [0, 1), decay of the gradient EMA.
      b2: :math:`\beta_2` in [0, 1), decay of the gradient-difference EMA.
      b3: :math:`\beta_3` in [0, 1), decay of the squared term.
      eps: :math:`\epsilon` >= 0 added to the denominator outside the square root.
      eps_root: :math:`\epsilon_{root}` >= 0 added inside the square root.

    Returns:
      A `GradientTransformation` with state `ScaleByAdanState(count, mu, delta, nu, prev_grad)`.

    Reference: Xie et al., "Adan: Adaptive Nesterov Momentum Algorithm for Faster Optimizing
    Deep Models" (arXiv:2208.06677, 2022), Algorithm 1.
    """
    who = "scale_by_adan"
    check_in_range(who, "b1", b1, 0.0, 1.0, high_open=True)
    check_in_range(who, "b2", b2, 0.0, 1.0, high_open=True)
    check_in_range(who, "b3", b3, 0.0, 1.0, high_open=True)
    check_non_negative(who, "eps", eps)
    check_non_negative(who, "eps_root", eps_root)

    def init(params):
        return ScaleByAdanState(
            count=zero_count(),
            mu=zeros_like_params(params),
            delta=zeros_like_params(params),
            nu=zeros_like_params(params),
            prev_grad=zeros_like_params(params),
        )

    def update(updates, state, params=None, **extra_args):
        del params, extra_args
        assert_same_structure(who, updates=updates, **{"state.mu": state.mu})
        first = state.count == 0
        count = safe_increment(state.count)
        c1 = bias_correction(b1, count)
        c2 = bias_correction(b2, count)
        c3 = bias_correction(b3, count)

        def leaf(g, m, v, n, g_prev):
            gw = widen(g)
            d = jnp.where(first, jnp.zeros_like(gw), gw - widen(g_prev))
            m_buf, m_new = stored(ema(b1, gw, m), m)
            v_buf, v_new = stored(ema(b2, d, v), v)
            n_buf, n_new = stored(ema(b3, abs_sq(gw + (1 - b2) * d), n), n)
            direction = m_new / c1 + (1 - b2) * (v_new / c2)
            u = direction / (jnp.sqrt(n_new / c3 + eps_root) + eps)
            return u.astype(g.dtype), m_buf, v_buf, n_buf, g.astype(g_prev.dtype)

        updates, mu, delta, nu, prev = map_split(
            leaf, 5, updates, state.mu, state.delta, state.nu, state.prev_grad
        )
        return updates, ScaleByAdanState(count=count, mu=mu, delta=delta, nu=nu, prev_grad=prev)

    return GradientTransformation(init, update)


__all__ = ["ScaleByAdanState", "scale_by_adan"]
