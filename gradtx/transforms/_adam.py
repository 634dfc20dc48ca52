"""Adam-family preconditioners built on first and second moment estimates."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from .._checks import check_in_range, check_non_negative
from .._core import GradientTransformation
from .._numerics import bias_correction, safe_increment, zero_count
from .._typing import ArrayLike, Updates
from ..tree import assert_same_structure, map_split, zeros_like


class ScaleByAdamState(NamedTuple):
    count: jax.Array  # type: ignore[assignment]  # int32, saturating
    mu: Updates  # first moment (EMA of g), dtype mu_dtype or the params'
    nu: Updates  # second moment (EMA of |g|^2), dtype nu_dtype or the params'


def _abs_sq(g: jax.Array) -> jax.Array:
    return jnp.real(g * jnp.conj(g)) if jnp.iscomplexobj(g) else g * g


def scale_by_adam(
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.999,
    eps: ArrayLike = 1e-8,
    eps_root: ArrayLike = 0.0,
    *,
    mu_dtype: Any = None,
    nu_dtype: Any = None,
    nesterov: bool = False,
) -> GradientTransformation:
    r"""Rescale updates by Adam's bias-corrected moment estimates.

    .. math::

      m_t = \beta_1 m_{t-1} + (1-\beta_1) g_t, \qquad
      v_t = \beta_2 v_{t-1} + (1-\beta_2) |g_t|^2, \\
      \hat m_t = \frac{m_t}{1-\beta_1^t}, \qquad \hat v_t = \frac{v_t}{1-\beta_2^t}, \qquad
      u_t = \frac{\hat m_t}{\sqrt{\hat v_t + \epsilon_{root}} + \epsilon}

    With `nesterov=True` (NAdam, Dozat 2016) :math:`\hat m_t` is replaced by
    :math:`\beta_1 m_t/(1-\beta_1^{t+1}) + (1-\beta_1) g_t/(1-\beta_1^t)`. Bias corrections are
    computed in float32. Matches `optax.scale_by_adam`.

    Args:
      b1: :math:`\beta_1` in [0, 1), decay of the first moment.
      b2: :math:`\beta_2` in [0, 1), decay of the second moment.
      eps: :math:`\epsilon` >= 0 added to the denominator outside the square root.
      eps_root: :math:`\epsilon_{root}` >= 0 added inside the square root.
      mu_dtype: dtype of the first moment buffer (default: the params' dtype).
      nu_dtype: dtype of the second moment buffer (default: the params' dtype).
      nesterov: use the Nesterov (NAdam) first moment.

    Returns:
      A `GradientTransformation` with state `ScaleByAdamState(count, mu, nu)`.

    Reference: Kingma & Ba, "Adam: A Method for Stochastic Optimization" (ICLR 2015).
    """
    who = "scale_by_adam"
    check_in_range(who, "b1", b1, 0.0, 1.0, high_open=True)
    check_in_range(who, "b2", b2, 0.0, 1.0, high_open=True)
    check_non_negative(who, "eps", eps)
    check_non_negative(who, "eps_root", eps_root)

    def init(params):
        return ScaleByAdamState(
            count=zero_count(),
            mu=zeros_like(params, mu_dtype),
            nu=zeros_like(params, nu_dtype),
        )

    def update(updates, state, params=None, **extra_args):
        del params, extra_args
        assert_same_structure(who, updates=updates, **{"state.mu": state.mu})
        count = safe_increment(state.count)
        c1 = bias_correction(b1, count)
        c2 = bias_correction(b2, count)
        c1_next = bias_correction(b1, safe_increment(count)) if nesterov else None

        def leaf(g, m, v):
            m_new = (1 - b1) * g + b1 * m
            v_new = (1 - b2) * _abs_sq(g) + b2 * v
            if nesterov:
                m_hat = b1 * (m_new / c1_next) + (1 - b1) * (g / c1)
            else:
                m_hat = m_new / c1
            u = m_hat / (jnp.sqrt(v_new / c2 + eps_root) + eps)
            return u.astype(g.dtype), m_new.astype(m.dtype), v_new.astype(v.dtype)

        updates, mu, nu = map_split(leaf, 3, updates, state.mu, state.nu)
        return updates, ScaleByAdamState(count=count, mu=mu, nu=nu)

    return GradientTransformation(init, update)


__all__ = ["ScaleByAdamState", "scale_by_adam"]
