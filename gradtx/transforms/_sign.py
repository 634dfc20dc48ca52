"""Sign-based preconditioners: the sign of the gradient (signSGD) and Lion."""

from __future__ import annotations

from typing import Any, Literal, NamedTuple

import jax
import jax.numpy as jnp

from .._base._checks import check_in_range, check_non_negative, check_one_of, check_positive
from .._base._typing import ArrayLike, Updates
from ..core._transformation import GradientTransformation
from ..state import _quantize
from ..tree import assert_same_structure
from ._elementwise import elementwise
from ._moments import packs_leaves, step_buffer
from ._tier import (
    check_float_dtype,
    check_moment_dtype,
    ema,
    moment_buffers,
    safe_increment,
    stateless,
    zero_count,
)

LION_MODES = ("hard", "smooth", "refined")


class ScaleByLionState(NamedTuple):
    """State of `scale_by_lion`."""

    count: jax.Array  # type: ignore[assignment]  # int32, saturating
    mu: Updates  # the momentum (EMA of g with decay b2), dtype mu_dtype or the params'


def scale_by_sign() -> GradientTransformation:
    r"""Replace every update by its sign.

    .. math::  u_t = \mathrm{sign}(g_t) \in \{-1, 0, 1\}

    (:math:`g/|g|` for complex entries). Matches `optax.scale_by_sign`.

    Returns:
      A stateless `GradientTransformation` (state `EmptyState`).

    Reference: Bernstein et al., "signSGD: Compressed Optimisation for Non-Convex Problems"
    (ICML 2018).
    """
    return stateless(lambda updates, params: jax.tree.map(jnp.sign, updates))


def scale_by_lion(
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.99,
    *,
    mu_dtype: Any = None,
    mode: Literal["hard", "smooth", "refined"] = "hard",
    smooth_beta: ArrayLike = 1.0,
) -> GradientTransformation:
    r"""Rescale updates by Lion: the sign of an interpolation of momentum and gradient.

    .. math::

      c_t = \beta_1 m_{t-1} + (1-\beta_1) g_t, \qquad u_t = \mathrm{sign}(c_t), \qquad
      m_t = \beta_2 m_{t-1} + (1-\beta_2) g_t

    The update uses the *old* momentum, interpolated with :math:`\beta_1`; the momentum itself
    decays with :math:`\beta_2`. `mode` picks the sign function: "hard" (:math:`\mathrm{sign}`,
    the paper's), "smooth" (:math:`\tanh(\beta_s c)`) or "refined" (:math:`c` where
    :math:`|c| < 1`, else :math:`\mathrm{sign}(c)`). Matches `optax.scale_by_lion`, nnabla's
    `Lion` and RETURNN's `returnn.torch.optim.lion.Lion` (all three with sign(0) = 0).

    Args:
      b1: :math:`\beta_1` in [0, 1), weight of the momentum in the update.
      b2: :math:`\beta_2` in [0, 1), decay of the momentum.
      mu_dtype: dtype of the momentum buffer (default: the params' dtype), or
        `gradtx.quantized()` for block-wise 8-bit storage (signed code).
      mode: "hard", "smooth" or "refined".
      smooth_beta: :math:`\beta_s` > 0, the sharpness of the "smooth" mode.

    Returns:
      A `GradientTransformation` with state `ScaleByLionState(count, mu)`.

    Reference: Chen et al., "Symbolic Discovery of Optimization Algorithms" (NeurIPS 2023).
    """
    who = "scale_by_lion"
    check_in_range(who, "b1", b1, 0.0, 1.0, high_open=True)
    check_in_range(who, "b2", b2, 0.0, 1.0, high_open=True)
    check_one_of(who, "mode", mode, LION_MODES)
    check_moment_dtype(who, "mu_dtype", mu_dtype)
    check_positive(who, "smooth_beta", smooth_beta)

    def squash(c):
        if mode == "hard":
            return jnp.sign(c)
        if mode == "smooth":
            return jnp.tanh(smooth_beta * c)
        return jnp.where(jnp.abs(c) < 1.0, c, jnp.sign(c))

    def init(params):
        return ScaleByLionState(
            count=zero_count(), mu=moment_buffers(params, mu_dtype, signed=True)
        )

    def update(updates, state, params=None, **extra_args):
        del params, extra_args
        assert_same_structure(who, updates=updates, **{"state.mu": _quantize.as_leaves(state.mu)})

        def rule(g, m):  # the update reads the old momentum
            return ema(b2, g, m), lambda _: squash(ema(b1, g, m))

        updates, mu = step_buffer(rule, updates, state.mu, pack=packs_leaves(mu_dtype))
        return updates, ScaleByLionState(count=safe_increment(state.count), mu=mu)

    return GradientTransformation(init, update)


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
    check_float_dtype(who, "mu_dtype", mu_dtype)
    check_in_range(who, "beta1", beta1, 0.0, 1.0, high_open=True)
    check_non_negative(who, "decrease_factor", decrease_factor)

    def rule(g, m, t):
        del t
        m = ema(beta1, g, m)
        return jnp.where(jnp.sign(g) == jnp.sign(m), g, decrease_factor * g), m

    return elementwise(rule, {"m": 0.0}, slot_dtype=mu_dtype, name=who)


__all__ = [
    "LION_MODES",
    "ScaleByLionState",
    "scale_by_lion",
    "scale_by_sign",
    "scale_by_sign_agreement",
]
