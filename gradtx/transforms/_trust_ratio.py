"""Updates scaled relative to the size of the parameters: trust ratios (LARS, LAMB) and
parameter-block scaling (Adafactor)."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from .._base._checks import check_non_negative, check_positive, concrete
from .._base._numerics import safe_increment, safe_norm, safe_rms, value_at, widen, zero_count
from .._base._recipe import recorded
from .._base._typing import ArrayLike, ScalarOrSchedule
from ..core._transformation import GradientTransformation, require_params, stateless_with_params
from ..tree import assert_same_structure
from ..tree._patterns import MaskOrFn


@recorded
def scale_by_trust_ratio(
    min_norm: ArrayLike = 0.0,
    trust_coefficient: ArrayLike = 1.0,
    eps: ArrayLike = 0.0,
    *,
    mask: MaskOrFn | None = None,
) -> GradientTransformation:
    r"""Scale each leaf's update by the ratio of its parameter norm to its update norm.

    .. math::

      u = \begin{cases}
        \eta_{tc}\, \dfrac{\max(\|w\|, n_0)}{\max(\|g\|, n_0) + \epsilon}\, g
          & \text{if both norms are nonzero} \\
        g & \text{otherwise}
      \end{cases}

    Norms are L2 norms over one leaf (one parameter tensor), computed in float32. Matches
    `optax.scale_by_trust_ratio`; in `lamb` it follows Adam and weight decay, in `lars` it
    follows weight decay.

    nnabla's `Lars` uses :math:`\|g\| + \lambda\|w\|` as denominator and keeps the learning rate
    inside its momentum; nnabla's `Lamb` clips :math:`\|w\|` to `[gamma_l, gamma_u]`. Those are
    `scale_by_lars_trust_ratio` and `scale_by_lamb_trust_ratio`.

    Args:
      min_norm: :math:`n_0` >= 0, a lower bound for both norms.
      trust_coefficient: :math:`\eta_{tc}` > 0, multiplies the ratio.
      eps: :math:`\epsilon` >= 0 added to the denominator.
      mask: which leaves are scaled (the others pass unchanged): a boolean tree (or prefix), a
        callable `params -> boolean tree`, or glob pattern(s) on parameter paths (see
        `gradtx.tree.match`). None scales every leaf.

    Returns:
      A stateless `GradientTransformation` (state `EmptyState`); it needs `params`.

    Reference: You et al., "Large Batch Training of Convolutional Networks" (arXiv:1708.03888,
    2017); You et al., "Large Batch Optimization for Deep Learning: Training BERT in 76 minutes"
    (ICLR 2020).
    """
    who = "scale_by_trust_ratio"
    check_non_negative(who, "min_norm", min_norm)
    check_positive(who, "trust_coefficient", trust_coefficient)
    check_non_negative(who, "eps", eps)

    def scale_leaf(g, p):
        p_norm = safe_norm(p, min_norm)
        g_norm = safe_norm(g, min_norm)
        trivial = (p_norm == 0) | (g_norm == 0)
        denominator = jnp.where(trivial, 1.0, g_norm + eps)
        ratio = jnp.where(trivial, 1.0, trust_coefficient * p_norm / denominator)
        return (g * ratio).astype(g.dtype)

    return stateless_with_params(who, scale_leaf, mask)


def _scale_by_param_size(who: str, size_fn, min_scale: ArrayLike) -> GradientTransformation:
    check_non_negative(who, "min_scale", min_scale)
    return stateless_with_params(who, lambda g, p: (g * size_fn(p, min_scale)).astype(g.dtype))


@recorded
def scale_by_param_block_rms(min_scale: ArrayLike = 1e-3) -> GradientTransformation:
    r"""Multiply each leaf's update by the root mean square of its parameters.

    .. math::  u = \max\big(\mathrm{rms}(w), s_{min}\big)\, g

    Adafactor's "relative step size" (`multiply_by_parameter_scale`). The RMS is taken over one
    leaf, in float32. Matches `optax.scale_by_param_block_rms`.

    Args:
      min_scale: :math:`s_{min}` >= 0, a lower bound for the scale (so that zero-initialised
        parameters still move).

    Returns:
      A stateless `GradientTransformation` (state `EmptyState`); it needs `params`.

    Reference: Shazeer & Stern, "Adafactor" (ICML 2018), section 8.
    """
    return _scale_by_param_size("scale_by_param_block_rms", safe_rms, min_scale)


@recorded
def scale_by_param_block_norm(min_scale: ArrayLike = 1e-3) -> GradientTransformation:
    r"""Multiply each leaf's update by the L2 norm of its parameters.

    .. math::  u = \max\big(\|w\|, s_{min}\big)\, g

    The norm is taken over one leaf, in float32. Matches `optax.scale_by_param_block_norm`.

    Args:
      min_scale: :math:`s_{min}` >= 0, a lower bound for the scale.

    Returns:
      A stateless `GradientTransformation` (state `EmptyState`); it needs `params`.
    """
    return _scale_by_param_size("scale_by_param_block_norm", safe_norm, min_scale)


class ScaleByLarsTrustRatioState(NamedTuple):
    """State of `scale_by_lars_trust_ratio`."""

    count: jax.Array  # type: ignore[assignment]  # int32, saturating (for a decay schedule)


@recorded
def scale_by_lars_trust_ratio(
    weight_decay: ScalarOrSchedule = 0.0,
    coefficient: ArrayLike = 1e-3,
    eps: ArrayLike = 1e-6,
) -> GradientTransformation:
    r"""nnabla's LARS step direction: coupled decay scaled by a per-tensor trust ratio.

    For each parameter tensor :math:`w` with gradient :math:`g`:

    .. math::

      x = \|g\| + \lambda \|w\| \ (+\,\epsilon \text{ if it is } < \epsilon), \qquad
      r = \begin{cases} 1 & \|w\| < \epsilon \\ c\, \|w\| / x & \text{otherwise} \end{cases},
      \qquad u = r\, (g + \lambda w)

    Followed by `trace_with_lr(lr, momentum)` it is nnabla's `Lars`,
    :math:`v = \gamma v + \eta r (g + \lambda w);\ w \mathrel{-}= v` (see `nnabla.lars`). It
    differs from `scale_by_trust_ratio` (Optax's, used by `lars`) in the denominator
    :math:`\|g\| + \lambda\|w\|` instead of :math:`\|g + \lambda w\|`, and in skipping the
    coefficient when :math:`\|w\| < \epsilon`.

    Args:
      weight_decay: :math:`\lambda` >= 0, a float or a schedule (nnabla resets it to 0 after
        every update unless set again, so a schedule is the way to vary it).
      coefficient: the trust coefficient :math:`c` > 0.
      eps: :math:`\epsilon` > 0.

    Returns:
      A `GradientTransformation` with state `ScaleByLarsTrustRatioState(count)`; it needs
      `params`.

    Reference: nnabla `Lars` (`src/nbla/solver/generic/lars.cpp`); You, Gitman & Ginsburg,
    "Large Batch Training of Convolutional Networks" (arXiv:1708.03888, 2017).
    """
    who = "scale_by_lars_trust_ratio"
    check_non_negative(who, "weight_decay", weight_decay)
    check_positive(who, "coefficient", coefficient)
    check_positive(who, "eps", eps)

    def init(params):
        del params
        return ScaleByLarsTrustRatioState(count=zero_count())

    def update(updates, state, params=None, **extra_args):
        del extra_args
        params = require_params(who, params)
        assert_same_structure(who, updates=updates, params=params)
        lam = value_at(weight_decay, state.count, who=who, name="weight_decay")

        def leaf(g, w):
            gw, ww = widen(g), widen(jnp.asarray(w))
            w_norm, g_norm = safe_norm(ww), safe_norm(gw)
            x = g_norm + lam * w_norm
            x = jnp.where(x < eps, x + eps, x)
            ratio = jnp.where(w_norm < eps, 1.0, coefficient * w_norm / x)
            return (ratio * (gw + lam * ww)).astype(g.dtype)

        updates = jax.tree.map(leaf, updates, params)
        return updates, ScaleByLarsTrustRatioState(count=safe_increment(state.count))

    return GradientTransformation(init, update)


@recorded
def scale_by_lamb_trust_ratio(
    gamma_l: ArrayLike = 0.0, gamma_u: ArrayLike = 10.0, eps: ArrayLike = 1e-6
) -> GradientTransformation:
    r"""nnabla's LAMB trust ratio: the clipped parameter norm over the update norm.

    For each parameter tensor :math:`w` with incoming update :math:`r`:

    .. math::

      \varphi = \mathrm{clip}(\|w\|, \gamma_l, \gamma_u), \qquad
      u = \begin{cases} (\varphi / \|r\|)\, r & \|r\| > \epsilon \\ r & \text{otherwise}
        \end{cases}

    In nnabla's `Lamb`, :math:`r` is the Adam direction plus :math:`\lambda w` (see
    `nnabla.lamb`). With the default :math:`\gamma_l = 0` a tensor whose norm is 0 gets
    :math:`\varphi = 0` and never moves (zero-initialised biases stay at 0, as in nnabla); pass a
    small positive `gamma_l` to let them move. Optax's `scale_by_trust_ratio` (used by `lamb`)
    leaves such tensors at ratio 1 instead and does not clip.

    Args:
      gamma_l: :math:`\gamma_l` >= 0, lower clip of the parameter norm.
      gamma_u: :math:`\gamma_u` >= `gamma_l`, upper clip of the parameter norm.
      eps: :math:`\epsilon` >= 0, the update norm below which the ratio is 1.

    Returns:
      A stateless `GradientTransformation` (state `EmptyState`); it needs `params`.

    Reference: nnabla `Lamb` (`src/nbla/solver/generic/lamb.cpp`); You et al., "Large Batch
    Optimization for Deep Learning: Training BERT in 76 minutes" (ICLR 2020).
    """
    who = "scale_by_lamb_trust_ratio"
    check_non_negative(who, "gamma_l", gamma_l)
    check_non_negative(who, "gamma_u", gamma_u)
    check_non_negative(who, "eps", eps)
    low, high = concrete(gamma_l), concrete(gamma_u)
    if low is not None and high is not None and not bool((low <= high).all()):
        raise ValueError(
            f"{who}: gamma_l must be <= gamma_u, got gamma_l={gamma_l!r} and gamma_u={gamma_u!r}"
        )

    def leaf(r, w):
        rw = widen(r)
        phi = jnp.clip(safe_norm(jnp.asarray(w)), gamma_l, gamma_u)
        r_norm = safe_norm(rw)
        big = r_norm > eps
        ratio = jnp.where(big, phi / jnp.where(big, r_norm, 1.0), 1.0)
        return (ratio * rw).astype(r.dtype)

    return stateless_with_params(who, leaf)


__all__ = [
    "ScaleByLarsTrustRatioState",
    "scale_by_lamb_trust_ratio",
    "scale_by_lars_trust_ratio",
    "scale_by_param_block_norm",
    "scale_by_param_block_rms",
    "scale_by_trust_ratio",
]
