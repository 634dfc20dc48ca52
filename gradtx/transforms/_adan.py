"""Adan: adaptive Nesterov momentum from gradient differences (no extra gradient evaluation)."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from .._base._recipe import recorded
from .._base._typing import ArrayLike, Updates
from ..core._transformation import GradientTransformation
from ..state._quantize import MomentDType
from ._building_blocks import abs_sq, bias_correction, ema, widen
from ._rule import decay, non_negative, rule, slot


class ScaleByAdanState(NamedTuple):
    """State of `scale_by_adan`."""

    count: jax.Array  # type: ignore[assignment]  # int32, saturating
    mu: Updates  # m: EMA of the gradients, dtype mu_dtype or the params'
    delta: Updates  # v: EMA of the gradient differences g_t - g_{t-1}, dtype mu_dtype or params'
    nu: Updates  # n: EMA of |g_t + (1 - b2)(g_t - g_{t-1})|^2, dtype nu_dtype or the params'
    prev_grad: Updates  # g_{t-1}, the last gradient seen, dtype of the params


@recorded
def scale_by_adan(
    b1: ArrayLike = 0.98,
    b2: ArrayLike = 0.92,
    b3: ArrayLike = 0.99,
    eps: ArrayLike = 1e-8,
    eps_root: ArrayLike = 0.0,
    *,
    mu_dtype: MomentDType | None = None,
    nu_dtype: MomentDType | None = None,
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
      mu_dtype: dtype of :math:`m` and :math:`v` (default: the params' dtype), or
        `gradtx.quantized()` for block-wise 8-bit storage (signed code).
      nu_dtype: dtype of :math:`n` (default: the params' dtype), or `gradtx.quantized()`.

    Returns:
      A `GradientTransformation` with state `ScaleByAdanState(count, mu, delta, nu, prev_grad)`.

    Reference: Xie et al., "Adan: Adaptive Nesterov Momentum Algorithm for Faster Optimizing
    Deep Models" (arXiv:2208.06677, 2022), Algorithm 1.
    """
    return _adan(
        b1=b1, b2=b2, b3=b3, eps=eps, eps_root=eps_root, mu_dtype=mu_dtype, nu_dtype=nu_dtype
    )


@rule(
    "scale_by_adan",
    ScaleByAdanState,
    slots={
        "mu": slot(dtype="mu_dtype"),
        "delta": slot(dtype="mu_dtype"),
        "nu": slot(dtype="nu_dtype", signed=False),
        "prev_grad": slot(quantizable=False),
    },
    checks={"b1": decay, "b2": decay, "b3": decay, "eps": non_negative, "eps_root": non_negative},
)
def _adan(t, *, b1, b2, b3, eps, eps_root):
    first = t == 1
    c1, c2, c3 = bias_correction(b1, t), bias_correction(b2, t), bias_correction(b3, t)

    def leaf(g, s):
        d = jnp.where(first, jnp.zeros_like(g), g - widen(s.prev_grad))
        m = s.keep("mu", ema(b1, g, s.mu))
        v = s.keep("delta", ema(b2, d, s.delta))
        n = s.keep("nu", ema(b3, abs_sq(g + (1 - b2) * d), s.nu))
        s.keep("prev_grad", g)
        return (m / c1 + (1 - b2) * (v / c2)) / (jnp.sqrt(n / c3 + eps_root) + eps)

    return leaf


__all__ = ["ScaleByAdanState", "scale_by_adan"]
