"""Zeroing the updates (to freeze parameters, e.g. inside a partition)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ..core._transformation import GradientTransformation, stateless


def set_to_zero() -> GradientTransformation:
    r"""Replace every update by zeros of its shape and dtype, so the parameters stay unchanged.

    .. math::  u_t = 0

    Used with `multi_transform` / `masked` to keep some parameters fixed (see also
    `gradtx.freeze`); under `jax.jit` the computation of the discarded updates is dropped.
    Matches `optax.set_to_zero`.

    Returns:
      A stateless `GradientTransformation` (state `EmptyState`).
    """
    return stateless(lambda updates, params: jax.tree.map(jnp.zeros_like, updates))


__all__ = ["set_to_zero"]
