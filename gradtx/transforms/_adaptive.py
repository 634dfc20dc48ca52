"""Per-coordinate adaptive preconditioners: RMSprop (plain and centered), Adagrad and Adadelta."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from .._base._checks import check_in_range, check_non_negative
from .._base._typing import ArrayLike, Updates
from ..core._transformation import GradientTransformation
from ..tree import assert_same_structure, map_split
from ._elementwise import ElementwiseState
from ._rule import decay, non_negative, rule, slot
from ._tier import (
    abs_sq,
    ema,
    moment_buffers,
    safe_increment,
    stored,
    widen,
    zero_count,
    zeros_like_params,
)
from ._tier import bias_correction as _bias_correction  # `bias_correction` is a flag here

# --------------------------------------------------------------------------------------------
# RMSprop
# --------------------------------------------------------------------------------------------


class ScaleByRmsState(NamedTuple):
    count: jax.Array  # type: ignore[assignment]  # int32, saturating
    nu: Updates  # EMA of |g|^2, dtype of the params


class ScaleByStddevState(NamedTuple):
    count: jax.Array  # type: ignore[assignment]  # int32, saturating
    mu: Updates  # EMA of g, dtype of the params
    nu: Updates  # EMA of |g|^2, dtype of the params


def _check_rms_args(who: str, decay: ArrayLike, eps: ArrayLike, initial_scale: ArrayLike) -> None:
    check_in_range(who, "decay", decay, 0.0, 1.0, high_open=True)
    check_non_negative(who, "eps", eps)
    check_non_negative(who, "initial_scale", initial_scale)


def _inverse_root(x: jax.Array, eps: ArrayLike, eps_in_sqrt: bool) -> jax.Array:
    return jax.lax.rsqrt(x + eps) if eps_in_sqrt else 1.0 / (jnp.sqrt(x) + eps)


def scale_by_rms(
    decay: ArrayLike = 0.9,
    eps: ArrayLike = 1e-8,
    initial_scale: ArrayLike = 0.0,
    *,
    eps_in_sqrt: bool = True,
    bias_correction: bool = False,
    centered: bool = False,
) -> GradientTransformation:
    r"""Divide updates by the root of an exponential moving average of their squares (RMSprop).

    .. math::

      \nu_t = \rho\, \nu_{t-1} + (1-\rho) |g_t|^2, \qquad
      u_t = \frac{g_t}{\sqrt{\hat\nu_t + \epsilon}}
      \quad\text{or, with eps_in_sqrt=False,}\quad
      u_t = \frac{g_t}{\sqrt{\hat\nu_t} + \epsilon}

    where :math:`\hat\nu_t = \nu_t / (1-\rho^t)` with `bias_correction` and :math:`\nu_t`
    otherwise; :math:`\nu_0` is `initial_scale`. With `centered=True` this is
    `scale_by_stddev` (the variance replaces the second moment). Statistics are computed in
    float32 for low-precision leaves. Matches `optax.scale_by_rms`; nnabla's `RMSprop` is
    `eps_in_sqrt=False`.

    Args:
      decay: :math:`\rho` in [0, 1).
      eps: :math:`\epsilon` >= 0.
      initial_scale: :math:`\nu_0` >= 0 (Optax and PyTorch start from 0, TensorFlow 1's
        `RMSPropOptimizer` from 1).
      eps_in_sqrt: add `eps` inside the square root (Optax's default) or outside (PyTorch,
        nnabla).
      bias_correction: divide :math:`\nu_t` by :math:`1-\rho^t`; then
        `scale_by_rms(b2, eps_in_sqrt=False, bias_correction=True)` equals
        `scale_by_adam(b1=0, b2=b2)` without a first moment.
      centered: subtract the squared moving average of the gradient (see `scale_by_stddev`).

    Returns:
      A `GradientTransformation` with state `ScaleByRmsState(count, nu)`
      (`ScaleByStddevState(count, mu, nu)` when centered).

    Reference: Tieleman & Hinton, Lecture 6.5 of "Neural Networks for Machine Learning" (2012).
    """
    if centered:
        return scale_by_stddev(
            decay, eps, initial_scale, eps_in_sqrt=eps_in_sqrt, bias_correction=bias_correction
        )
    who = "scale_by_rms"
    _check_rms_args(who, decay, eps, initial_scale)

    def init(params):
        return ScaleByRmsState(
            count=zero_count(), nu=moment_buffers(params, fill_value=initial_scale)
        )

    def update(updates, state, params=None, **extra_args):
        del params, extra_args
        assert_same_structure(who, updates=updates, **{"state.nu": state.nu})
        count = safe_increment(state.count)
        corr = _bias_correction(decay, count) if bias_correction else None

        def leaf(g, v):
            g32 = widen(g)
            # the buffer widened first, so that `decay * v` rounds in float32, not in bf16
            v_buf, v_new = stored(ema(decay, abs_sq(g32), v.astype(g32.dtype)), v)
            v_hat = v_new / corr.astype(v_new.dtype) if corr is not None else v_new
            u = g32 * _inverse_root(v_hat, eps, eps_in_sqrt)
            return u.astype(g.dtype), v_buf

        updates, nu = map_split(leaf, 2, updates, state.nu)
        return updates, ScaleByRmsState(count=count, nu=nu)

    return GradientTransformation(init, update)


def scale_by_stddev(
    decay: ArrayLike = 0.9,
    eps: ArrayLike = 1e-8,
    initial_scale: ArrayLike = 0.0,
    *,
    eps_in_sqrt: bool = True,
    bias_correction: bool = False,
) -> GradientTransformation:
    r"""Divide updates by a running estimate of their standard deviation (centered RMSprop).

    .. math::

      \mu_t = \rho\, \mu_{t-1} + (1-\rho) g_t, \qquad
      \nu_t = \rho\, \nu_{t-1} + (1-\rho) |g_t|^2, \qquad
      \sigma_t^2 = \max(\nu_t - |\mu_t|^2,\ 0), \qquad
      u_t = \frac{g_t}{\sqrt{\sigma_t^2 + \epsilon}}

    (or :math:`g_t / (\sqrt{\sigma_t^2} + \epsilon)` with `eps_in_sqrt=False`). The variance is
    clamped at 0: it is never negative in exact arithmetic, but with a constant gradient
    :math:`\nu_t - |\mu_t|^2` is a difference of equal numbers that rounds below 0 (in Optax
    and PyTorch too, whose centered RMSprop then gives NaN). Matches `optax.scale_by_stddev`
    wherever that is finite; followed by the learning rate and momentum it is nnabla's
    `RMSpropGraves` (Graves, 2013) with `eps_in_sqrt=True`.

    Args:
      decay: :math:`\rho` in [0, 1).
      eps: :math:`\epsilon` >= 0.
      initial_scale: :math:`\nu_0` >= 0 (:math:`\mu_0 = 0`).
      eps_in_sqrt: add `eps` inside the square root (default) or outside it.
      bias_correction: must be False (kept for Optax's signature): bias-corrected averages
        make the first variance exactly 0 and the first step :math:`g/\sqrt{\epsilon}`, so
        True raises a `ValueError` that says so.

    Returns:
      A `GradientTransformation` with state `ScaleByStddevState(count, mu, nu)`.

    Reference: Graves, "Generating Sequences With Recurrent Neural Networks" (2013), eq. 38-40.
    """
    who = "scale_by_stddev"
    _check_rms_args(who, decay, eps, initial_scale)
    if bias_correction:
        raise ValueError(
            f"{who}: bias_correction=True is not supported with centering: after the first step "
            "the bias-corrected variance of a single gradient is exactly 0 (m_hat = g, "
            "v_hat = g^2), so the first update is g / sqrt(eps), about 1/sqrt(eps) times the "
            "gradient; use bias_correction=False (centered RMSprop as in Graves 2013, PyTorch and "
            "Optax's default), or centered=False to keep the bias correction"
        )

    def init(params):
        return ScaleByStddevState(
            count=zero_count(),
            mu=zeros_like_params(params),
            nu=moment_buffers(params, fill_value=initial_scale),
        )

    def update(updates, state, params=None, **extra_args):
        del params, extra_args
        assert_same_structure(who, updates=updates, **{"state.mu": state.mu, "state.nu": state.nu})
        count = safe_increment(state.count)

        def leaf(g, m, v):
            g32 = widen(g)
            m_buf, m_new = stored(ema(decay, g32, m.astype(g32.dtype)), m)
            v_buf, v_new = stored(ema(decay, abs_sq(g32), v.astype(g32.dtype)), v)
            # v - |m|^2 is a variance: >= 0 exactly, but rounding (bf16 buffers, a constant
            # gradient) can make the difference negative, and sqrt would give NaN.
            variance = jnp.maximum(v_new - abs_sq(m_new), 0.0)
            u = g32 * _inverse_root(variance, eps, eps_in_sqrt)
            return u.astype(g.dtype), m_buf, v_buf

        updates, mu, nu = map_split(leaf, 3, updates, state.mu, state.nu)
        return updates, ScaleByStddevState(count=count, mu=mu, nu=nu)

    return GradientTransformation(init, update)


# --------------------------------------------------------------------------------------------
# Adagrad
# --------------------------------------------------------------------------------------------


class ScaleByRssState(NamedTuple):
    sum_of_squares: Updates  # running sum of |g|^2, dtype of the params


def scale_by_rss(
    initial_accumulator_value: ArrayLike = 0.1,
    eps: ArrayLike = 1e-7,
    *,
    eps_in_sqrt: bool = True,
) -> GradientTransformation:
    r"""Divide updates by the root of the sum of all squared updates so far (Adagrad).

    .. math::

      G_t = G_{t-1} + |g_t|^2, \qquad
      u_t = \frac{g_t}{\sqrt{G_t + \epsilon}}
      \quad\text{or, with eps_in_sqrt=False,}\quad
      u_t = \frac{g_t}{\sqrt{G_t} + \epsilon}

    with :math:`G_0` = `initial_accumulator_value` and :math:`u_t = 0` where :math:`G_t = 0`.
    Matches `optax.scale_by_rss`; nnabla's `Adagrad` is `initial_accumulator_value=0,
    eps_in_sqrt=False` (and PyTorch's, with its default `eps=1e-10`).

    Args:
      initial_accumulator_value: :math:`G_0` >= 0.
      eps: :math:`\epsilon` >= 0.
      eps_in_sqrt: add `eps` inside the square root (Optax) or outside it (nnabla, PyTorch).

    Returns:
      A `GradientTransformation` with state `ScaleByRssState(sum_of_squares)`.

    Reference: Duchi, Hazan & Singer, "Adaptive Subgradient Methods for Online Learning and
    Stochastic Optimization" (JMLR 2011).
    """
    who = "scale_by_rss"
    check_non_negative(who, "initial_accumulator_value", initial_accumulator_value)
    check_non_negative(who, "eps", eps)

    def init(params):
        return ScaleByRssState(
            sum_of_squares=moment_buffers(params, fill_value=initial_accumulator_value)
        )

    def update(updates, state, params=None, **extra_args):
        del params, extra_args
        assert_same_structure(
            who, updates=updates, **{"state.sum_of_squares": state.sum_of_squares}
        )

        def leaf(g, s):
            g32 = widen(g)
            s_buf, s_new = stored(s.astype(g32.dtype) + abs_sq(g32), s)
            positive = s_new > 0
            safe = jnp.where(positive, s_new, 1.0)  # keeps the discarded branch finite
            u = jnp.where(positive, g32 * _inverse_root(safe, eps, eps_in_sqrt), 0.0)
            return u.astype(g.dtype), s_buf

        updates, sum_of_squares = map_split(leaf, 2, updates, state.sum_of_squares)
        return updates, ScaleByRssState(sum_of_squares=sum_of_squares)

    return GradientTransformation(init, update)


# --------------------------------------------------------------------------------------------
# Adadelta
# --------------------------------------------------------------------------------------------


class ScaleByAdadeltaState(NamedTuple):
    e_g: Updates  # EMA of squared gradients, dtype of the params
    e_x: Updates  # EMA of squared (unit-free) updates, dtype of the params


def scale_by_adadelta(rho: ArrayLike = 0.9, eps: ArrayLike = 1e-6) -> GradientTransformation:
    r"""Rescale updates by the ratio of running RMS of past updates and of gradients (Adadelta).

    .. math::

      E[g^2]_t = \rho E[g^2]_{t-1} + (1-\rho) g_t^2, \qquad
      u_t = \frac{\sqrt{E[\Delta^2]_{t-1} + \epsilon}}{\sqrt{E[g^2]_t + \epsilon}}\, g_t, \qquad
      E[\Delta^2]_t = \rho E[\Delta^2]_{t-1} + (1-\rho) u_t^2

    Matches `optax.scale_by_adadelta` and nnabla's `Adadelta` (whose defaults are `rho=0.95`).

    Args:
      rho: :math:`\rho` in [0, 1), decay of both running averages.
      eps: :math:`\epsilon` >= 0.

    Returns:
      A `GradientTransformation` with state `ScaleByAdadeltaState(e_g, e_x)`.

    Reference: Zeiler, "ADADELTA: An Adaptive Learning Rate Method" (arXiv:1212.5701, 2012).
    """
    who = "scale_by_adadelta"
    check_in_range(who, "rho", rho, 0.0, 1.0, high_open=True)
    check_non_negative(who, "eps", eps)

    def init(params):
        return ScaleByAdadeltaState(e_g=zeros_like_params(params), e_x=zeros_like_params(params))

    def update(updates, state, params=None, **extra_args):
        del params, extra_args
        assert_same_structure(who, updates=updates, **{"state.e_g": state.e_g})

        def leaf(g, eg, ex):
            g32 = widen(g)
            ex32 = ex.astype(g32.dtype)
            eg_buf, eg_new = stored(ema(rho, abs_sq(g32), eg.astype(g32.dtype)), eg)
            u = jnp.sqrt(ex32 + eps) / jnp.sqrt(eg_new + eps) * g32
            return u.astype(g.dtype), eg_buf, ema(rho, abs_sq(u), ex32).astype(ex.dtype)

        updates, e_g, e_x = map_split(leaf, 3, updates, state.e_g, state.e_x)
        return updates, ScaleByAdadeltaState(e_g=e_g, e_x=e_x)

    return GradientTransformation(init, update)


def scale_by_grad_variance(
    beta1: ArrayLike = 0.9,
    beta2: ArrayLike = 0.999,
    eps: ArrayLike = 1e-8,
    *,
    mu_dtype: Any = None,
    nu_dtype: Any = None,
) -> GradientTransformation:
    r"""Shrink each gradient entry where it deviates from its mean more than usual.

    .. math::

      m_t = \beta_1 m_{t-1} + (1-\beta_1) g_t, \qquad \sigma_t^2 = (g_t - m_t)^2, \qquad
      v_t = \beta_2 v_{t-1} + (1-\beta_2)\, \sigma_t^2, \\
      u_t = g_t \min\!\left(\frac{v_t}{\sigma_t^2 + \epsilon},\ 1\right)

    with the new :math:`m_t`. RETURNN's `GradVarianceScaledOptimizer`. (RETURNN's TF updater
    injects `epsilon=1e-16` from its `optimizer_epsilon` setting; pass `eps=1e-16` to match a
    config run.)

    Args:
      beta1: :math:`\beta_1` in [0, 1), decay of the running mean :math:`m`.
      beta2: :math:`\beta_2` in [0, 1), decay of the running variance :math:`v`.
      eps: :math:`\epsilon` >= 0 added to :math:`\sigma_t^2`.
      mu_dtype: dtype of :math:`m` (default: the params' dtype).
      nu_dtype: dtype of :math:`v` (default: the params' dtype).

    Returns:
      A `GradientTransformation` with state `ElementwiseState(count, slots={"m": ..., "v": ...})`.

    Reference: RETURNN `GradVarianceScaledOptimizer` (`returnn/tf/updater.py`).
    """
    return _grad_variance(beta1=beta1, beta2=beta2, eps=eps, mu_dtype=mu_dtype, nu_dtype=nu_dtype)


@rule(
    "scale_by_grad_variance",
    ElementwiseState,
    slots={"m": slot(dtype="mu_dtype"), "v": slot(dtype="nu_dtype", signed=False)},
    checks={"beta1": decay, "beta2": decay, "eps": non_negative},
)
def _grad_variance(t, *, beta1, beta2, eps):
    def leaf(g, s):
        m = ema(beta1, g, widen(s.m))
        var = abs_sq(g - m)
        v = ema(beta2, var, widen(s.v))
        s.keep("m", m)
        s.keep("v", v)
        # Where var + eps is 0 (eps = 0 and g equal to its mean) the factor's limit is 1.
        den = var + eps
        return g * jnp.where(den > 0, jnp.minimum(v / jnp.where(den > 0, den, 1.0), 1.0), 1.0)

    return leaf


__all__ = [
    "ScaleByAdadeltaState",
    "ScaleByRmsState",
    "ScaleByRssState",
    "ScaleByStddevState",
    "scale_by_adadelta",
    "scale_by_grad_variance",
    "scale_by_rms",
    "scale_by_rss",
    "scale_by_stddev",
]
