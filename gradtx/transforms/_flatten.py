"""Changing the layout a transformation sees: `flatten` runs it on one concatenated vector."""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp

from .._base._recipe import recorded
from .._base._typing import PyTree
from ..core._transformation import GradientTransformation, as_transformation, forward_extra_args


def _concatenated(tree: PyTree) -> jax.Array:
    """All leaves of `tree`, raveled and concatenated (in their promoted dtype) into one vector;
    an empty float32 vector for a tree without leaves."""
    leaves = [jnp.ravel(jnp.asarray(x)) for x in jax.tree.leaves(tree)]
    if not leaves:
        return jnp.zeros((0,), jnp.float32)
    return jnp.concatenate(leaves)


def _split_like(like: PyTree, flat: jax.Array) -> PyTree:
    """`flat` cut into the leaves of `like`, each reshaped to and cast back to its leaf."""
    leaves, treedef = jax.tree.flatten(like)
    out: list[Any] = []
    start = 0
    for leaf in leaves:
        shape, dtype = jnp.shape(leaf), jnp.result_type(leaf)
        size = math.prod(shape)
        out.append(jnp.reshape(flat[start : start + size], shape).astype(dtype))
        start += size
    return jax.tree.unflatten(treedef, out)


@recorded
def flatten(inner: GradientTransformation) -> GradientTransformation:
    r"""Run `inner` on one vector: all updates (and params) raveled and concatenated.

    .. math::  u = \mathrm{unflatten}\big(\mathrm{inner}(\mathrm{concat}(\mathrm{vec}(g_i)))\big)

    This reduces the overhead of many small leaves (one fused operation instead of one per
    leaf), at the cost of a copy of the updates. The vector has the promoted dtype of the
    leaves; each returned update is cast back to its gradient's dtype. `inner` sees one array:
    per-leaf rules (per-leaf norms, factored moments) then act on the whole vector. Extra
    arguments of `update` are forwarded to `inner`.

    Args:
      inner: the transformation to run on the flattened vector.

    Returns:
      A `GradientTransformation` whose state is `inner`'s state for one vector (of size the
      number of parameter elements).

    Examples:
      >>> import jax.numpy as jnp, gradtx
      >>> tx = gradtx.transforms.flatten(gradtx.scale_by_adam())
      >>> params = {"w": jnp.ones((2, 2)), "b": jnp.zeros(3)}
      >>> tx.init(params).mu.shape
      (7,)

    Reference: matches `optax.flatten`.
    """
    inner = as_transformation(inner, "flatten", "inner")
    inner_update = forward_extra_args(inner.update)

    def init(params):
        leaves = jax.tree.leaves(params)
        if any(isinstance(x, jax.ShapeDtypeStruct) for x in leaves):  # abstract params
            size = sum(math.prod(jnp.shape(x)) for x in leaves)
            dtype = jnp.result_type(*[x.dtype for x in leaves]) if leaves else jnp.float32
            return inner.init(jax.ShapeDtypeStruct((size,), dtype))
        return inner.init(_concatenated(params))

    def update(updates, state, params=None, **extra_args):
        flat_params = None if params is None else _concatenated(params)
        flat, state = inner_update(_concatenated(updates), state, flat_params, **extra_args)
        return _split_like(updates, flat), state

    return GradientTransformation(init, update)


__all__ = ["flatten"]
