"""Normalisation of the whole update by its global norm."""

from __future__ import annotations

import jax

from .._base._checks import check_non_negative, check_scalar
from .._base._numerics import widen
from .._base._recipe import recorded
from .._base._typing import ArrayLike
from ..core._transformation import GradientTransformation, stateless
from ..tree import norm


@recorded
def normalize_by_update_norm(
    scale_factor: ArrayLike = 1.0, eps: ArrayLike = 1e-6
) -> GradientTransformation:
    r"""Divide the updates by their global L2 norm (all leaves together), times a factor.

    .. math::  u_t = s\, \frac{g_t}{\|g_t\| + \epsilon}

    The norm is accumulated in float32; updates keep their dtype (Optax's come out in float32
    for bf16/f16 gradients). With a negative
    :math:`s` this is normalised gradient descent with step :math:`|s|`. Matches
    `optax.normalize_by_update_norm`. (`gradtx.normalize` is RETURNN's per-leaf variant.)

    Args:
      scale_factor: :math:`s`, the length of the resulting update (a scalar; may be traced).
      eps: :math:`\epsilon` >= 0 added to the norm, so that a zero update stays zero.

    Returns:
      A stateless `GradientTransformation` (state `EmptyState`).
    """
    check_scalar("normalize_by_update_norm", "scale_factor", scale_factor)
    check_non_negative("normalize_by_update_norm", "eps", eps)

    def normalize(updates, params):
        divisor = (norm(updates) + eps) / scale_factor
        return jax.tree.map(lambda g: (widen(g) / divisor).astype(g.dtype), updates)

    return stateless(normalize)


__all__ = ["normalize_by_update_norm"]
