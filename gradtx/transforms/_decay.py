"""Weight decay: adding `rate * param` to the updates."""

from __future__ import annotations

from typing import NamedTuple

import jax

from .._checks import check_non_negative
from .._core import GradientTransformation, require_params
from .._masking import MaskOrFn, resolve_mask
from .._numerics import safe_increment, value_at, zero_count
from .._typing import ScalarOrSchedule
from ..tree import assert_same_structure


class WeightDecayState(NamedTuple):
    count: jax.Array  # type: ignore[assignment]  # int32, saturating


def weight_decay(rate: ScalarOrSchedule, mask: MaskOrFn | None = None) -> GradientTransformation:
    r"""Add the decayed parameters to the updates.

    .. math::  u_t = g_t + \lambda_t \, w_{t-1}

    Where it sits in a chain decides the kind of decay: *before* a preconditioner (e.g.
    `chain(weight_decay(1e-4), scale_by_adam(), scale_by_learning_rate(lr))`) it is coupled L2
    regularisation, whose decay is rescaled by the preconditioner; *after* it and before the
    learning rate it is decoupled weight decay as in AdamW (Loshchilov & Hutter, 2019), the form
    `optax.add_decayed_weights` gives.

    Args:
      rate: :math:`\lambda` >= 0, a float or a schedule `count -> rate`.
      mask: which parameters decay: a boolean tree (or prefix of the params tree), a callable
        `params -> boolean tree`, or a glob pattern / list of patterns on parameter paths, e.g.
        `"!**/bias"` (see `gradtx.tree.match`). None decays every parameter.

    Returns:
      A `GradientTransformation` with state `WeightDecayState(count)`; it needs `params`.
    """
    check_non_negative("weight_decay", "rate", rate)

    def init(params):
        del params
        return WeightDecayState(count=zero_count())

    def update(updates, state, params=None, **extra_args):
        del extra_args
        params = require_params("weight_decay", params)
        assert_same_structure("weight_decay", updates=updates, params=params)
        lam = value_at(rate, state.count)
        selected = (
            jax.tree.map(lambda _: True, params)
            if mask is None
            else resolve_mask("weight_decay", mask, params)
        )
        updates = jax.tree.map(
            lambda g, p, on: (g + lam * p).astype(g.dtype) if on else g,
            updates,
            params,
            selected,
        )
        return updates, WeightDecayState(count=safe_increment(state.count))

    return GradientTransformation(init, update)


__all__ = ["WeightDecayState", "weight_decay"]
