"""`add_decayed_weights`: Optax's name and signature for `gradtx.weight_decay`."""

from __future__ import annotations

from .._base._checks import alias_errors
from .._base._typing import Mask, ScalarOrSchedule
from ..core._transformation import GradientTransformation
from ._decay import weight_decay as weight_decay_tx


@alias_errors(renamed={"weight_decay: rate": "weight_decay"})
def add_decayed_weights(
    weight_decay: ScalarOrSchedule = 0.0, mask: Mask | None = None
) -> GradientTransformation:
    r"""Add the decayed parameters to the updates: `gradtx.weight_decay` under Optax's name.

    .. math::  u_t = g_t + \lambda_t\, w_{t-1}

    Returns `weight_decay(weight_decay, mask)`, so its state is always
    `WeightDecayState(count)` (Optax's is `EmptyState` for a constant rate and a masked state
    with a mask; gradtx keeps one layout for both). Matches `optax.add_decayed_weights`.

    Args:
      weight_decay: :math:`\lambda` >= 0, a float or a schedule `count -> rate`.
      mask: which parameters decay: a boolean tree (or prefix of the params tree), a callable
        `params -> boolean tree`, or glob pattern(s) on parameter paths (see
        `gradtx.tree.match`); None decays every parameter.

    Returns:
      A `GradientTransformation` with state `WeightDecayState(count)`; it needs `params`.

    Example:
      >>> import jax.numpy as jnp, gradtx
      >>> tx = gradtx.add_decayed_weights(0.1)
      >>> params = {"w": jnp.array([1.0, -2.0])}
      >>> updates, _ = tx.update({"w": jnp.zeros(2)}, tx.init(params), params)
      >>> updates["w"]
      Array([ 0.1, -0.2], dtype=float32)
    """
    return weight_decay_tx(weight_decay, mask)


__all__ = ["add_decayed_weights"]
