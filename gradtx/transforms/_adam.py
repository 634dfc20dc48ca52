"""Adam-family preconditioners built on first and second moment estimates.

`scale_by_adam`, `scale_by_adamax` and `scale_by_amsgrad` live here with the helpers the whole
family shares; the other variants (AdaBelief, Yogi, RAdam, NovoGrad) are in `_adam_variants.py`.

Gradients are widened to float32 (float64 and complex stay as they are) before a rule is
evaluated, and only the results are cast: updates to the gradients' dtype, buffers to the dtype
they were created with. So a tiny float16 gradient does not underflow to a zero second moment and
an infinite update. A decayed buffer (`b1 * mu`) is rounded in the buffer's own dtype, as in Optax,
so a bf16 `mu_dtype` gives Optax's numbers.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from .._checks import check_in_range, check_non_negative
from .._core import GradientTransformation
from .._numerics import abs_sq, as_stored, bias_correction, safe_increment, widen, zero_count
from .._typing import ArrayLike, Updates
from ..tree import assert_same_structure, map_split, zeros_like


class ScaleByAdamState(NamedTuple):
    """State of `scale_by_adam` (also of `scale_by_adamax`, `scale_by_yogi`, `scale_by_radam`)."""

    count: jax.Array  # type: ignore[assignment]  # int32, saturating
    mu: Updates  # first moment (EMA of g), dtype mu_dtype or the params'
    nu: Updates  # second moment (EMA of |g|^2, or the infinity norm), dtype nu_dtype or params'


class ScaleByAmsgradState(NamedTuple):
    """State of `scale_by_amsgrad`."""

    count: jax.Array  # type: ignore[assignment]  # int32, saturating
    mu: Updates  # first moment, dtype mu_dtype or the params'
    nu: Updates  # second moment, dtype nu_dtype or the params'
    nu_max: Updates  # running maximum of the (optionally bias-corrected) second moment


def _ema(decay: ArrayLike, g: jax.Array, m: jax.Array) -> Any:
    """`(1 - decay) g + decay m` for a widened `g`, in Optax's order and precision (`decay m`
    is rounded in the buffer's dtype), so a bf16 `mu_dtype` gives Optax's numbers."""
    return (1 - decay) * g + decay * m


def _check_moments(who: str, b1: ArrayLike, b2: ArrayLike, eps: ArrayLike) -> None:
    check_in_range(who, "b1", b1, 0.0, 1.0, high_open=True)
    check_in_range(who, "b2", b2, 0.0, 1.0, high_open=True)
    check_non_negative(who, "eps", eps)


def _first_moment_estimate(
    b1: ArrayLike, count: jax.Array, nesterov: bool
) -> Callable[[jax.Array, jax.Array], Any]:
    r"""`(m_t, g_t) -> \hat m_t` at step `count`: :math:`m_t/(1-\beta_1^t)`, or with
    `nesterov` (NAdam, Dozat 2016) :math:`\beta_1 m_t/(1-\beta_1^{t+1}) + (1-\beta_1)
    g_t/(1-\beta_1^t)`. The corrections are float32 scalars."""
    c1 = bias_correction(b1, count)
    if not nesterov:
        return lambda m, g: m / c1
    c1_next = bias_correction(b1, safe_increment(count))
    return lambda m, g: b1 * (m / c1_next) + (1 - b1) * (g / c1)


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
    _check_moments(who, b1, b2, eps)
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
        m_hat = _first_moment_estimate(b1, count, nesterov)
        c2 = bias_correction(b2, count)

        def leaf(g, m, v):
            gw = widen(g)
            m_new = as_stored(_ema(b1, gw, m), m)
            v_new = as_stored(_ema(b2, abs_sq(gw), v), v)
            u = m_hat(m_new, gw) / (jnp.sqrt(v_new / c2 + eps_root) + eps)
            return u.astype(g.dtype), m_new.astype(m.dtype), v_new.astype(v.dtype)

        updates, mu, nu = map_split(leaf, 3, updates, state.mu, state.nu)
        return updates, ScaleByAdamState(count=count, mu=mu, nu=nu)

    return GradientTransformation(init, update)


def scale_by_adamax(
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.999,
    eps: ArrayLike = 1e-8,
    *,
    mu_dtype: Any = None,
    nu_dtype: Any = None,
) -> GradientTransformation:
    r"""Rescale updates by AdaMax: Adam with an exponentially weighted infinity norm.

    .. math::

      m_t = \beta_1 m_{t-1} + (1-\beta_1) g_t, \qquad
      v_t = \max(|g_t| + \epsilon,\ \beta_2 v_{t-1}), \qquad
      u_t = \frac{m_t}{(1-\beta_1^t)\, v_t}

    The infinity norm needs no bias correction. Matches `optax.scale_by_adamax`. nnabla's Adamax
    takes :math:`\max(\beta_2 v, |g|)` and adds :math:`\epsilon` to the denominator instead; the
    two differ only while :math:`|g| \lesssim \epsilon`.

    Args:
      b1: :math:`\beta_1` in [0, 1), decay of the first moment.
      b2: :math:`\beta_2` in [0, 1), decay of the infinity norm.
      eps: :math:`\epsilon` >= 0, added to :math:`|g_t|` so the denominator is never zero.
      mu_dtype: dtype of the first moment buffer (default: the params' dtype).
      nu_dtype: dtype of the infinity-norm buffer (default: the params' dtype).

    Returns:
      A `GradientTransformation` with state `ScaleByAdamState(count, mu, nu)`.

    Reference: Kingma & Ba, "Adam: A Method for Stochastic Optimization" (ICLR 2015), §7.1.
    """
    who = "scale_by_adamax"
    _check_moments(who, b1, b2, eps)

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

        def leaf(g, m, v):
            gw = widen(g)
            m_new = as_stored(_ema(b1, gw, m), m)
            v_new = as_stored(jnp.maximum(jnp.abs(gw) + eps, b2 * v), v)
            u = (m_new / c1) / v_new
            return u.astype(g.dtype), m_new.astype(m.dtype), v_new.astype(v.dtype)

        updates, mu, nu = map_split(leaf, 3, updates, state.mu, state.nu)
        return updates, ScaleByAdamState(count=count, mu=mu, nu=nu)

    return GradientTransformation(init, update)


def scale_by_amsgrad(
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.999,
    eps: ArrayLike = 1e-8,
    eps_root: ArrayLike = 0.0,
    *,
    mu_dtype: Any = None,
    nu_dtype: Any = None,
    bias_correction_mu: bool = True,
    bias_correction_nu: bool = True,
) -> GradientTransformation:
    r"""Rescale updates by AMSGrad: Adam with a running maximum of the second moment.

    .. math::

      m_t = \beta_1 m_{t-1} + (1-\beta_1) g_t, \qquad
      v_t = \beta_2 v_{t-1} + (1-\beta_2) |g_t|^2, \\
      \bar v_t = \max\!\left(\bar v_{t-1},\ \frac{v_t}{1-\beta_2^t}\right), \qquad
      u_t = \frac{m_t / (1-\beta_1^t)}{\sqrt{\bar v_t + \epsilon_{root}} + \epsilon}

    Each bias correction can be switched off; with both off this is the rule of the paper, of
    nnabla's `AMSGRAD(bias_correction=False)` (its default) and of RETURNN's `AMSGradOptimizer`
    (which also defaults to :math:`\beta_2 = 0.99`, :math:`\epsilon = 0`). Matches
    `optax.scale_by_amsgrad`.

    Args:
      b1: :math:`\beta_1` in [0, 1), decay of the first moment.
      b2: :math:`\beta_2` in [0, 1), decay of the second moment.
      eps: :math:`\epsilon` >= 0 added to the denominator outside the square root.
      eps_root: :math:`\epsilon_{root}` >= 0 added inside the square root.
      mu_dtype: dtype of the first moment buffer (default: the params' dtype).
      nu_dtype: dtype of the second moment and of its running maximum (default: the params').
      bias_correction_mu: divide :math:`m_t` by :math:`1-\beta_1^t`.
      bias_correction_nu: divide :math:`v_t` by :math:`1-\beta_2^t` before taking the maximum.

    Returns:
      A `GradientTransformation` with state `ScaleByAmsgradState(count, mu, nu, nu_max)`.

    Reference: Reddi, Kale & Kumar, "On the Convergence of Adam and Beyond" (ICLR 2018).
    """
    who = "scale_by_amsgrad"
    _check_moments(who, b1, b2, eps)
    check_non_negative(who, "eps_root", eps_root)

    def init(params):
        return ScaleByAmsgradState(
            count=zero_count(),
            mu=zeros_like(params, mu_dtype),
            nu=zeros_like(params, nu_dtype),
            nu_max=zeros_like(params, nu_dtype),
        )

    def update(updates, state, params=None, **extra_args):
        del params, extra_args
        assert_same_structure(who, updates=updates, **{"state.mu": state.mu})
        count = safe_increment(state.count)
        c1 = bias_correction(b1, count) if bias_correction_mu else None
        c2 = bias_correction(b2, count) if bias_correction_nu else None

        def leaf(g, m, v, v_max):
            gw = widen(g)
            m_new = as_stored(_ema(b1, gw, m), m)
            v_new = as_stored(_ema(b2, abs_sq(gw), v), v)
            m_hat = m_new if c1 is None else m_new / c1
            v_eff = v_new if c2 is None else v_new / c2
            v_max_new = as_stored(jnp.maximum(widen(v_max), v_eff), v_max)
            u = m_hat / (jnp.sqrt(v_max_new + eps_root) + eps)
            return (
                u.astype(g.dtype),
                m_new.astype(m.dtype),
                v_new.astype(v.dtype),
                v_max_new.astype(v_max.dtype),
            )

        updates, mu, nu, nu_max = map_split(leaf, 4, updates, state.mu, state.nu, state.nu_max)
        return updates, ScaleByAmsgradState(count=count, mu=mu, nu=nu, nu_max=nu_max)

    return GradientTransformation(init, update)


__all__ = [
    "ScaleByAdamState",
    "ScaleByAmsgradState",
    "scale_by_adam",
    "scale_by_adamax",
    "scale_by_amsgrad",
]
