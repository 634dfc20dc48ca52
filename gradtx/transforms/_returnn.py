"""RETURNN's custom TF optimizers as gradtx primitives, written with `elementwise`.

`normalize` (NormalizedSGD), `scale_by_sign_agreement` (NeuralOptimizer1) and
`scale_by_grad_variance` (GradVarianceScaledOptimizer). In RETURNN each is a
`BaseCustomOptimizer` that also applies the learning rate; here the learning rate is a separate
`scale_by_learning_rate` (see the aliases in `gradtx.optimizers`). Slots start at zero and nothing
is bias-corrected, as in RETURNN.
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp

from .._checks import check_in_range, check_non_negative, check_positive
from .._core import GradientTransformation
from .._numerics import abs_sq
from .._typing import ArrayLike
from ._elementwise import elementwise


def normalize(eps: ArrayLike = 1e-12) -> GradientTransformation:
    r"""Divide each gradient leaf by its L2 norm.

    .. math::  u = \frac{g}{\sqrt{\max(\sum_i |g_i|^2,\ \epsilon)}}

    The norm is taken over one leaf (one parameter tensor), in float32, as `tf.nn.l2_normalize`
    does in RETURNN's `NormalizedSGD`; :math:`\epsilon` only keeps a zero gradient at zero.

    Args:
      eps: :math:`\epsilon` > 0, the smallest squared norm divided by.

    Returns:
      A `GradientTransformation` with state `ElementwiseState(count, slots={})`.

    Reference: RETURNN `NormalizedSGD` (`returnn/tf/updater.py`), after
    https://github.com/kmkolasinski/deep-learning-notes/tree/master/max-normed-optimizer.
    """
    who = "normalize"
    check_positive(who, "eps", eps)

    def rule(g, t):
        del t
        return g / jnp.sqrt(jnp.maximum(jnp.sum(abs_sq(g)), eps))

    return elementwise(rule, name=who)


def scale_by_sign_agreement(
    beta1: ArrayLike = 0.9, decrease_factor: ArrayLike = 0.1, *, mu_dtype: Any = None
) -> GradientTransformation:
    r"""Keep the gradient where its sign agrees with its running mean, shrink it elsewhere.

    .. math::

      m_t = \beta_1 m_{t-1} + (1-\beta_1) g_t, \qquad
      u_t = \begin{cases} g_t & \mathrm{sign}(g_t) = \mathrm{sign}(m_t) \\
                          \delta\, g_t & \text{otherwise} \end{cases}

    with the *new* :math:`m_t` and :math:`\mathrm{sign}(0) = 0`. RETURNN's `NeuralOptimizer1`,
    a cheap stand-in for the rule :math:`g\, e^{\mathrm{sign}(g)\mathrm{sign}(m)}` found by neural
    optimizer search (whose factor on disagreement is :math:`e^{-2} \approx 0.135`).

    Args:
      beta1: :math:`\beta_1` in [0, 1), decay of the running mean.
      decrease_factor: :math:`\delta` >= 0, the factor where the signs disagree.
      mu_dtype: dtype of the running mean (default: the params' dtype).

    Returns:
      A `GradientTransformation` with state `ElementwiseState(count, slots={"m": ...})`.

    Reference: RETURNN `NeuralOptimizer1` (`returnn/tf/updater.py`); Bello et al., "Neural
    Optimizer Search with Reinforcement Learning" (ICML 2017).
    """
    who = "scale_by_sign_agreement"
    check_in_range(who, "beta1", beta1, 0.0, 1.0, high_open=True)
    check_non_negative(who, "decrease_factor", decrease_factor)

    def rule(g, m, t):
        del t
        m = beta1 * m + (1 - beta1) * g
        return jnp.where(jnp.sign(g) == jnp.sign(m), g, decrease_factor * g), m

    return elementwise(rule, {"m": 0.0}, slot_dtype=mu_dtype, name=who)


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
    who = "scale_by_grad_variance"
    check_in_range(who, "beta1", beta1, 0.0, 1.0, high_open=True)
    check_in_range(who, "beta2", beta2, 0.0, 1.0, high_open=True)
    check_non_negative(who, "eps", eps)

    def rule(g, m, v, t):
        del t
        m = beta1 * m + (1 - beta1) * g
        var = abs_sq(g - m)
        v = beta2 * v + (1 - beta2) * var
        # Where var + eps is 0 (eps = 0 and g equal to its mean) the factor's limit is 1.
        den = var + eps
        factor = jnp.where(den > 0, jnp.minimum(v / jnp.where(den > 0, den, 1.0), 1.0), 1.0)
        return g * factor, m, v

    return elementwise(
        rule, {"m": 0.0, "v": 0.0}, slot_dtype={"m": mu_dtype, "v": nu_dtype}, name=who
    )


__all__ = ["normalize", "scale_by_grad_variance", "scale_by_sign_agreement"]
