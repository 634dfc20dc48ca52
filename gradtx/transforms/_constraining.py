"""Constraining the parameters through their updates: keep them non-negative."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from .._base._recipe import recorded
from ..core._transformation import EmptyState, GradientTransformation, require_params
from ..tree import assert_same_structure

NonNegativeParamsState = EmptyState
"""The state of `keep_params_nonnegative` (it has none): `EmptyState`, as in Optax."""


def _nonnegative_leaf(p, u):
    if p is None:
        return None
    p = jnp.asarray(p)
    return jnp.where(p + u < 0, -p, u).astype(u.dtype)


@recorded
def keep_params_nonnegative() -> GradientTransformation:
    r"""Change the updates so that the parameters stay >= 0 once they are applied.

    .. math::  u = \begin{cases} -p & \text{if } p + g < 0 \\ g & \text{otherwise} \end{cases}

    An update that would take a parameter below zero takes it to exactly zero instead. Put it
    last in a chain (after the learning rate). A parameter that is already negative is moved to
    zero by its first update that would keep it negative. Updates keep their dtype; `None`
    parameters pass through.

    Returns:
      A stateless `GradientTransformation` (state `NonNegativeParamsState()`, an
      `EmptyState`); it needs `params`.

    Examples:
      >>> import jax.numpy as jnp, gradtx
      >>> tx = gradtx.transforms.keep_params_nonnegative()
      >>> params = jnp.array([1.0, 0.5])
      >>> updates, _ = tx.update(jnp.array([-0.3, -2.0]), tx.init(params), params)
      >>> updates
      Array([-0.3, -0.5], dtype=float32)

    Reference: matches `optax.keep_params_nonnegative`; see also `gradtx.non_negative`
    (a projection of the parameters).
    """
    who = "keep_params_nonnegative"

    def init(params):
        del params
        return NonNegativeParamsState()

    def update(updates, state, params=None, **extra_args):
        del extra_args
        params = require_params(who, params)
        assert_same_structure(who, updates=updates, params=params)
        new = jax.tree.map(_nonnegative_leaf, params, updates, is_leaf=lambda x: x is None)
        return new, state

    return GradientTransformation(init, update)


__all__ = ["NonNegativeParamsState", "keep_params_nonnegative"]
