"""Sign-based preconditioners: the sign of the gradient (signSGD) and Lion."""

from __future__ import annotations

from typing import Any, Literal, NamedTuple

import jax
import jax.numpy as jnp

from .._base._checks import check_one_of, check_positive
from .._base._numerics import widen
from .._base._recipe import recorded
from .._base._typing import ArrayLike, Updates
from ..core._transformation import GradientTransformation
from ..state._quantize import MomentDType
from ._building_blocks import ema, stateless
from ._elementwise import ElementwiseState
from ._rule import decay, non_negative, rule, slot

LION_MODES = ("hard", "smooth", "refined")


class ScaleByLionState(NamedTuple):
    """State of `scale_by_lion`."""

    count: jax.Array  # type: ignore[assignment]  # int32, saturating
    mu: Updates  # the momentum (EMA of g with decay b2), dtype mu_dtype or the params'


@recorded
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


@recorded
def scale_by_lion(
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.99,
    *,
    mu_dtype: MomentDType | None = None,
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
    return _lion(b1=b1, b2=b2, mode=mode, smooth_beta=smooth_beta, mu_dtype=mu_dtype)


def _squash(mode: str, smooth_beta: ArrayLike, c: Any) -> Any:
    if mode == "hard":
        return jnp.sign(c)
    if mode == "smooth":
        return jnp.tanh(smooth_beta * c)
    return jnp.where(jnp.abs(c) < 1.0, c, jnp.sign(c))


@rule(
    "scale_by_lion",
    ScaleByLionState,
    slots={"mu": slot(dtype="mu_dtype")},
    checks={
        "b1": decay,
        "b2": decay,
        "mode": lambda who, name, value: check_one_of(who, name, value, LION_MODES),
        "smooth_beta": lambda who, name, value: check_positive(who, name, value),
    },
)
def _lion(t, *, b1, b2, mode, smooth_beta):
    def leaf(g, s):
        m = s.mu  # the update reads the old momentum
        s.keep("mu", ema(b2, g, m))
        return _squash(mode, smooth_beta, ema(b1, g, m))

    return leaf


@recorded
def scale_by_sign_agreement(
    beta1: ArrayLike = 0.9, decrease_factor: ArrayLike = 0.1, *, mu_dtype: MomentDType | None = None
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
    return _sign_agreement(beta1=beta1, decrease_factor=decrease_factor, mu_dtype=mu_dtype)


@rule(
    "scale_by_sign_agreement",
    ElementwiseState,
    slots={"m": slot(dtype="mu_dtype")},
    checks={"beta1": decay, "decrease_factor": non_negative},
)
def _sign_agreement(t, *, beta1, decrease_factor):
    def leaf(g, s):
        m = ema(beta1, g, widen(s.m))
        s.keep("m", m)  # the sign is the unrounded mean's
        return jnp.where(jnp.sign(g) == jnp.sign(m), g, decrease_factor * g)

    return leaf


__all__ = [
    "LION_MODES",
    "ScaleByLionState",
    "scale_by_lion",
    "scale_by_sign",
    "scale_by_sign_agreement",
]
