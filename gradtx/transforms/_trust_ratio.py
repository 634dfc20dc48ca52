"""Updates scaled relative to the size of the parameters: trust ratios (LARS, LAMB) and
parameter-block scaling (Adafactor)."""

from __future__ import annotations

import jax.numpy as jnp

from .._checks import check_non_negative, check_positive
from .._core import GradientTransformation, stateless_with_params
from .._masking import MaskOrFn
from .._numerics import safe_norm, safe_rms
from .._typing import ArrayLike


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


__all__ = ["scale_by_param_block_norm", "scale_by_param_block_rms", "scale_by_trust_ratio"]
