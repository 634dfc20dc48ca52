"""Per-coordinate adaptive preconditioners: RMSprop (plain and centered), Adagrad and Adadelta."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from .._base._recipe import recorded
from .._base._typing import ArrayLike, DType, Updates
from ..core._transformation import GradientTransformation
from ..state._quantize import MomentDType
from ._building_blocks import (
    abs_sq,
    check_moment_dtype,
    ema,
    widen,
)
from ._building_blocks import (
    bias_correction as _bias_correction,  # `bias_correction` is a flag here
)
from ._elementwise import ElementwiseState
from ._rule import decay, non_negative, rule, slot

# --------------------------------------------------------------------------------------------
# RMSprop
# --------------------------------------------------------------------------------------------


class ScaleByRmsState(NamedTuple):
    count: jax.Array  # type: ignore[assignment]  # int32, saturating
    nu: Updates  # EMA of |g|^2, dtype nu_dtype or the params'


class ScaleByStddevState(NamedTuple):
    count: jax.Array  # type: ignore[assignment]  # int32, saturating
    mu: Updates  # EMA of g, dtype mu_dtype or the params'
    nu: Updates  # EMA of |g|^2, dtype nu_dtype or the params'


#: RMSprop's hyperparameter checks (plain and centered).
RMS_CHECKS = {"decay": decay, "eps": non_negative, "initial_scale": non_negative}


def _inverse_root(x: jax.Array, eps: ArrayLike, eps_in_sqrt: bool) -> jax.Array:
    return jax.lax.rsqrt(x + eps) if eps_in_sqrt else 1.0 / (jnp.sqrt(x) + eps)


@recorded
def scale_by_rms(
    decay: ArrayLike = 0.9,
    eps: ArrayLike = 1e-8,
    initial_scale: ArrayLike = 0.0,
    *,
    eps_in_sqrt: bool = True,
    bias_correction: bool = False,
    centered: bool = False,
    mu_dtype: MomentDType | None = None,
    nu_dtype: MomentDType | None = None,
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
      mu_dtype: dtype of the moving average of the gradient, kept only when `centered`
        (default: the params' dtype), or `gradtx.quantized()` for block-wise 8-bit storage.
      nu_dtype: dtype of :math:`\nu` (default: the params' dtype), or `gradtx.quantized()`.

    Returns:
      A `GradientTransformation` with state `ScaleByRmsState(count, nu)`
      (`ScaleByStddevState(count, mu, nu)` when centered).

    Reference: Tieleman & Hinton, Lecture 6.5 of "Neural Networks for Machine Learning" (2012).
    """
    if centered:
        return scale_by_stddev(
            decay,
            eps,
            initial_scale,
            eps_in_sqrt=eps_in_sqrt,
            bias_correction=bias_correction,
            mu_dtype=mu_dtype,
            nu_dtype=nu_dtype,
        )
    check_moment_dtype("scale_by_rms", "mu_dtype", mu_dtype)  # unused, but not unchecked
    return _rms(
        decay=decay,
        eps=eps,
        initial_scale=initial_scale,
        eps_in_sqrt=eps_in_sqrt,
        corrected=bias_correction,
        nu_dtype=nu_dtype,
    )


@rule(
    "scale_by_rms",
    ScaleByRmsState,
    slots={"nu": slot("initial_scale", "nu_dtype", signed=False)},
    checks=RMS_CHECKS,
)
def _rms(t, *, decay, eps, initial_scale, eps_in_sqrt, corrected):
    c = _bias_correction(decay, t) if corrected else None

    def leaf(g, s):
        # the buffer widened first, so that `decay * nu` rounds in float32, not in bf16
        v = s.keep("nu", ema(decay, abs_sq(g), widen(s.nu)))
        v_hat = v / c.astype(v.dtype) if c is not None else v
        return g * _inverse_root(v_hat, eps, eps_in_sqrt)

    return leaf


@recorded
def scale_by_stddev(
    decay: ArrayLike = 0.9,
    eps: ArrayLike = 1e-8,
    initial_scale: ArrayLike = 0.0,
    *,
    eps_in_sqrt: bool = True,
    bias_correction: bool = False,
    mu_dtype: MomentDType | None = None,
    nu_dtype: MomentDType | None = None,
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
      mu_dtype: dtype of :math:`\mu` (default: the params' dtype), or `gradtx.quantized()` for
        block-wise 8-bit storage.
      nu_dtype: dtype of :math:`\nu` (default: the params' dtype), or `gradtx.quantized()`.

    Returns:
      A `GradientTransformation` with state `ScaleByStddevState(count, mu, nu)`.

    Reference: Graves, "Generating Sequences With Recurrent Neural Networks" (2013), eq. 38-40.
    """
    tx = _stddev(
        decay=decay,
        eps=eps,
        initial_scale=initial_scale,
        eps_in_sqrt=eps_in_sqrt,
        mu_dtype=mu_dtype,
        nu_dtype=nu_dtype,
    )
    if bias_correction:
        raise ValueError(
            "scale_by_stddev: bias_correction=True is not supported with centering: after the "
            "first step the bias-corrected variance of a single gradient is exactly 0 "
            "(m_hat = g, v_hat = g^2), so the first update is g / sqrt(eps), about 1/sqrt(eps) "
            "times the gradient; use bias_correction=False (centered RMSprop as in Graves 2013, "
            "PyTorch and Optax's default), or centered=False to keep the bias correction"
        )
    return tx


@rule(
    "scale_by_stddev",
    ScaleByStddevState,
    slots={"mu": slot(dtype="mu_dtype"), "nu": slot("initial_scale", "nu_dtype", signed=False)},
    checks=RMS_CHECKS,
)
def _stddev(t, *, decay, eps, initial_scale, eps_in_sqrt):
    def leaf(g, s):
        m = s.keep("mu", ema(decay, g, widen(s.mu)))
        v = s.keep("nu", ema(decay, abs_sq(g), widen(s.nu)))
        # v - |m|^2 is a variance: >= 0 exactly, but rounding (bf16 buffers, a constant
        # gradient) can make the difference negative, and sqrt would give NaN.
        variance = jnp.maximum(v - abs_sq(m), 0.0)
        return g * _inverse_root(variance, eps, eps_in_sqrt)

    return leaf


# --------------------------------------------------------------------------------------------
# Adagrad
# --------------------------------------------------------------------------------------------


class ScaleByRssState(NamedTuple):
    sum_of_squares: Updates  # running sum of |g|^2, dtype of the params


@recorded
def scale_by_rss(
    initial_accumulator_value: ArrayLike = 0.1,
    eps: ArrayLike = 1e-7,
    *,
    eps_in_sqrt: bool = True,
    nu_dtype: DType | None = None,
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
      nu_dtype: float dtype of :math:`G` (default: the params' dtype); a sum, so not 8-bit.

    Returns:
      A `GradientTransformation` with state `ScaleByRssState(sum_of_squares)`.

    Reference: Duchi, Hazan & Singer, "Adaptive Subgradient Methods for Online Learning and
    Stochastic Optimization" (JMLR 2011).
    """
    return _rss(
        initial_accumulator_value=initial_accumulator_value,
        eps=eps,
        eps_in_sqrt=eps_in_sqrt,
        nu_dtype=nu_dtype,
    )


@rule(
    "scale_by_rss",
    ScaleByRssState,
    slots={
        "sum_of_squares": slot(
            "initial_accumulator_value", "nu_dtype", signed=False, quantizable=False
        )
    },
    checks={"initial_accumulator_value": non_negative, "eps": non_negative},
)
def _rss(t, *, initial_accumulator_value, eps, eps_in_sqrt):
    def leaf(g, s):
        total = s.keep("sum_of_squares", widen(s.sum_of_squares) + abs_sq(g))
        positive = total > 0
        safe = jnp.where(positive, total, 1.0)  # keeps the discarded branch finite
        return jnp.where(positive, g * _inverse_root(safe, eps, eps_in_sqrt), 0.0)

    return leaf


# --------------------------------------------------------------------------------------------
# Adadelta
# --------------------------------------------------------------------------------------------


class ScaleByAdadeltaState(NamedTuple):
    e_g: Updates  # EMA of squared gradients, dtype of the params
    e_x: Updates  # EMA of squared (unit-free) updates, dtype of the params


@recorded
def scale_by_adadelta(
    rho: ArrayLike = 0.9, eps: ArrayLike = 1e-6, *, nu_dtype: MomentDType | None = None
) -> GradientTransformation:
    r"""Rescale updates by the ratio of running RMS of past updates and of gradients (Adadelta).

    .. math::

      E[g^2]_t = \rho E[g^2]_{t-1} + (1-\rho) g_t^2, \qquad
      u_t = \frac{\sqrt{E[\Delta^2]_{t-1} + \epsilon}}{\sqrt{E[g^2]_t + \epsilon}}\, g_t, \qquad
      E[\Delta^2]_t = \rho E[\Delta^2]_{t-1} + (1-\rho) u_t^2

    Matches `optax.scale_by_adadelta` and nnabla's `Adadelta` (whose defaults are `rho=0.95`).

    Args:
      rho: :math:`\rho` in [0, 1), decay of both running averages.
      eps: :math:`\epsilon` >= 0.
      nu_dtype: dtype of both running averages (default: the params' dtype), or
        `gradtx.quantized()` for block-wise 8-bit storage.

    Returns:
      A `GradientTransformation` with state `ScaleByAdadeltaState(e_g, e_x)`.

    Reference: Zeiler, "ADADELTA: An Adaptive Learning Rate Method" (arXiv:1212.5701, 2012).
    """
    return _adadelta(rho=rho, eps=eps, nu_dtype=nu_dtype)


@rule(
    "scale_by_adadelta",
    ScaleByAdadeltaState,
    slots={
        "e_g": slot(dtype="nu_dtype", signed=False),
        "e_x": slot(dtype="nu_dtype", signed=False),
    },
    checks={"rho": decay, "eps": non_negative},
)
def _adadelta(t, *, rho, eps):
    def leaf(g, s):
        ex = widen(s.e_x)
        eg = s.keep("e_g", ema(rho, abs_sq(g), widen(s.e_g)))
        u = jnp.sqrt(ex + eps) / jnp.sqrt(eg + eps) * g
        s.keep("e_x", ema(rho, abs_sq(u), ex))
        return u

    return leaf


@recorded
def scale_by_grad_variance(
    beta1: ArrayLike = 0.9,
    beta2: ArrayLike = 0.999,
    eps: ArrayLike = 1e-8,
    *,
    mu_dtype: MomentDType | None = None,
    nu_dtype: MomentDType | None = None,
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
