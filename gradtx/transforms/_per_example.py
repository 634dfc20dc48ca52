"""Per-example gradient clipping (differential privacy): clip each example's gradient, then sum."""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp

from .._base._checks import check_bool, check_non_negative
from .._base._numerics import widen
from .._base._typing import ArrayLike, PyTree
from ..tree import norm as tree_norm


def _check_batched(who: str, grads: PyTree) -> list[jax.Array]:
    leaves = [jnp.asarray(g) for g in jax.tree.leaves(grads)]
    if not leaves:
        raise ValueError(f"{who}: grads must hold at least one array, got {grads!r}")
    batch = leaves[0].shape[0] if leaves[0].ndim >= 1 else None
    if batch is None or any(g.ndim < 1 or g.shape[0] != batch for g in leaves):
        raise ValueError(
            f"{who}: every array of grads must have the same batch dimension on axis 0 "
            f"(one gradient per example); got shapes {[tuple(g.shape) for g in leaves]}"
        )
    return leaves


def _clip_and_sum(grads: PyTree, l2_norm_clip: ArrayLike) -> tuple[PyTree, jax.Array]:
    norms = jax.vmap(tree_norm)(grads)  # float32 (or wider): one global norm per example
    factors = jnp.nan_to_num(jnp.minimum(l2_norm_clip / norms, 1.0), nan=1.0)
    num_clipped = jnp.sum(factors < 1.0).astype(jnp.int32)

    def leaf(g):
        total = jnp.tensordot(factors.astype(widen(g).dtype), widen(g), axes=1)
        dtype = g.dtype if jnp.issubdtype(g.dtype, jnp.inexact) else total.dtype
        return total.astype(dtype)

    return jax.tree.map(leaf, grads), num_clipped


def per_example_global_norm_clip(
    grads: PyTree, l2_norm_clip: ArrayLike
) -> tuple[PyTree, jax.Array]:
    r"""Clip each example's gradient to a global L2 norm, then sum over the examples.

    .. math::

      \bar g = \sum_{n} g_n \min\!\left(1, \frac{C}{\lVert g_n \rVert_2}\right)

    with :math:`\lVert g_n \rVert_2` the norm of example :math:`n`'s gradient over all leaves
    (a zero gradient keeps factor 1). The building block of DP-SGD's aggregation.

    Args:
      grads: a pytree of per-example gradients: every leaf has the batch on axis 0.
      l2_norm_clip: :math:`C`, the largest per-example norm kept, >= 0.

    Returns:
      `(clipped_sum, num_clipped)`: the sum over examples of the clipped gradients (the
      gradients' structure without the batch axis; floating leaves keep their dtype, integer
      ones give float32), and the int32 number of examples whose gradient was scaled down.

    Reference: Abadi et al., "Deep Learning with Differential Privacy" (CCS 2016); matches
    `optax.per_example_global_norm_clip` (norms accumulated in float32 here).
    """
    who = "per_example_global_norm_clip"
    check_non_negative(who, "l2_norm_clip", l2_norm_clip)
    _check_batched(who, grads)
    return _clip_and_sum(grads, l2_norm_clip)


def per_example_layer_norm_clip(
    grads: PyTree, global_l2_norm_clip: ArrayLike, uniform: bool = True
) -> tuple[PyTree, PyTree]:
    r"""Clip each example's gradient layer by layer (each leaf on its own), then sum.

    .. math::

      \bar g^{(i)} = \sum_n g^{(i)}_n \min\!\left(1, \frac{C_i}{\lVert g^{(i)}_n \rVert_2}\right),
      \qquad C_i = \begin{cases} C/\sqrt{K} & \text{uniform} \\
      C \sqrt{D_i / D} & \text{otherwise} \end{cases}

    for the :math:`K` leaves :math:`i` with :math:`D_i` elements per example
    (:math:`D = \sum_i D_i`); so :math:`\sum_i C_i^2 = C^2` and the clipped example's global
    norm is at most :math:`C`. With a single leaf this is `per_example_global_norm_clip`.

    Args:
      grads: a pytree of per-example gradients: every leaf has the batch on axis 0.
      global_l2_norm_clip: :math:`C`, the overall clip norm, >= 0.
      uniform: split :math:`C` equally between the leaves (True) or in proportion to the
        square root of their sizes (False).

    Returns:
      `(clipped_sum, num_clipped)`: two trees with the structure of `grads`: the per-leaf sums
      of the clipped gradients, and per leaf the int32 number of examples that were clipped.

    Reference: McMahan et al., "Learning Differentially Private Recurrent Language Models"
    (ICLR 2018); matches `optax.per_example_layer_norm_clip`.
    """
    who = "per_example_layer_norm_clip"
    check_non_negative(who, "global_l2_norm_clip", global_l2_norm_clip)
    check_bool(who, "uniform", uniform)
    leaves = _check_batched(who, grads)
    total = sum(math.prod(g.shape[1:]) for g in leaves)

    def clip_norm(g: Any) -> Any:
        if uniform:
            return global_l2_norm_clip * (1.0 / len(leaves)) ** 0.5
        return global_l2_norm_clip * (math.prod(jnp.shape(g)[1:]) / max(total, 1)) ** 0.5

    sums, counts = [], []
    treedef = jax.tree.structure(grads)
    for g in leaves:
        s, c = _clip_and_sum(g, clip_norm(g))
        sums.append(s)
        counts.append(c)
    return jax.tree.unflatten(treedef, sums), jax.tree.unflatten(treedef, counts)


__all__ = ["per_example_global_norm_clip", "per_example_layer_norm_clip"]
