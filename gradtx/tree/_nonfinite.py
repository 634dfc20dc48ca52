"""Where the NaNs are: `first_nonfinite` names the first leaf of a pytree holding a NaN or ±Inf,
as device values (no host callback), so it runs under `jit`, `pmap` and sharded `jit`."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import tree_util as jtu

from .._base._numerics import INT32_MAX
from .._base._typing import PyTree
from ._paths import path_str

_CHILDREN = ("index", "count", "total")


class NonfiniteLocation:
    """Where the first non-finite value of a pytree is (from `first_nonfinite`).

    A pytree whose children are three int32 arrays and whose static part is the tree's leaf
    paths, so it can be returned from `jit`, carried in an optimizer state and checkpointed
    (its `state_dict` keys end in `index`, `count` and `total`).

    Attributes:
      index: position of the first leaf (in `jax.tree.leaves` order) holding a NaN or ±Inf;
        -1 when every leaf is finite.
      count: the number of non-finite elements in that leaf; 0 when there is none.
      total: the number of non-finite elements in the whole tree (saturating at 2**31 - 1).
      leaf_paths: the '/'-joined path of every leaf of the tree (static).
    """

    __slots__ = ("count", "index", "leaf_paths", "total")

    def __init__(self, index: Any, count: Any, total: Any, leaf_paths: tuple[str, ...]) -> None:
        # no conversion here: JAX rebuilds pytrees with placeholders (tracers, None, specs)
        self.index = index
        self.count = count
        self.total = total
        self.leaf_paths = tuple(leaf_paths)

    @property
    def path(self) -> Any:
        """The path of the first non-finite leaf (`"dense/kernel"`), or None when all are finite.

        Read on the host, from concrete values. For a batched location (the output of `pmap` or
        `vmap`, one answer per device or example) it is a nested list of the same shape.

        Raises:
          TypeError: the location is traced (inside `jit`, `scan`, ...) or abstract: return it
            out of the jitted function first, then read `.path`.
        """
        if isinstance(self.index, jax.core.Tracer | jax.ShapeDtypeStruct):
            raise TypeError(
                "NonfiniteLocation.path: the location is traced/abstract (inside jax.jit, "
                "lax.scan, ...), so its leaf cannot be named here; return the location out of "
                "the jitted function first and read .path on the result (or use .index, an "
                "int32 array, inside)"
            )
        index = np.asarray(self.index)
        if index.ndim == 0:
            return self._name(int(index))
        return np.vectorize(self._name, otypes=[object])(index).tolist()

    def _name(self, i: int) -> str | None:
        if i < 0:
            return None
        if i >= len(self.leaf_paths):
            raise ValueError(
                f"NonfiniteLocation.path: index {i} is out of range for a tree of "
                f"{len(self.leaf_paths)} leaves (was the location rebuilt with other leaf paths?)"
            )
        return self.leaf_paths[i]

    def __repr__(self) -> str:
        try:
            path = self.path
            values = [np.asarray(getattr(self, n)) for n in _CHILDREN]
        except (TypeError, ValueError):
            inner = ", ".join(f"{n}={getattr(self, n)!r}" for n in _CHILDREN)
            return f"NonfiniteLocation({inner}, leaves={len(self.leaf_paths)})"
        shown = [v.item() if v.ndim == 0 else v.tolist() for v in values]
        inner = ", ".join(f"{n}={v}" for n, v in zip(_CHILDREN, shown, strict=True))
        return f"NonfiniteLocation(path={path!r}, {inner})"


def _flatten_with_keys(loc: NonfiniteLocation) -> tuple[tuple, tuple[str, ...]]:
    return tuple((jtu.GetAttrKey(n), getattr(loc, n)) for n in _CHILDREN), loc.leaf_paths


def _flatten(loc: NonfiniteLocation) -> tuple[tuple, tuple[str, ...]]:
    return tuple(getattr(loc, n) for n in _CHILDREN), loc.leaf_paths


def _unflatten(leaf_paths: tuple[str, ...], children: Any) -> NonfiniteLocation:
    index, count, total = children
    return NonfiniteLocation(index, count, total, leaf_paths)


jtu.register_pytree_with_keys(NonfiniteLocation, _flatten_with_keys, _unflatten, _flatten)


def _nonfinite_count(leaf: Any) -> jax.Array:
    """int32 number of NaN/±Inf elements of one leaf (0 for integer, bool and key leaves)."""
    dtype = getattr(leaf, "dtype", None)
    if dtype is None:
        leaf = jnp.asarray(leaf)
        dtype = leaf.dtype
    if not jnp.issubdtype(dtype, jnp.inexact):
        return jnp.zeros([], jnp.int32)
    return jnp.sum(jnp.logical_not(jnp.isfinite(leaf)), dtype=jnp.int32)


def first_nonfinite(tree: PyTree) -> NonfiniteLocation:
    """Locate the first leaf of `tree` holding a NaN or ±Inf, and count them.

    Computed with array operations only (no host callback), so it works eagerly and under
    `jax.jit`, `jax.lax.scan`, `jax.vmap`, `jax.pmap` (each device locates in its own tree) and
    sharded `jit` (a leaf's count includes every shard). The leaf is named on the host with
    `.path`, from the returned value. Integer, bool and PRNG-key leaves count as finite; None
    leaves are absent (as in `jax.tree.leaves`).

    Args:
      tree: a pytree of arrays (gradients, params, an optimizer state).

    Returns:
      A `NonfiniteLocation` with int32 scalars `index` (first non-finite leaf, in
      `jax.tree.leaves` order, or -1), `count` (its non-finite elements, or 0) and `total`
      (non-finite elements in the whole tree), and `.path`, that leaf's '/'-joined path or None.

    Example:
      >>> import jax, jax.numpy as jnp, gradtx
      >>> grads = {"dense": {"bias": jnp.zeros(2), "kernel": jnp.array([1.0, jnp.nan, jnp.inf])}}
      >>> loc = jax.jit(gradtx.tree.first_nonfinite)(grads)
      >>> loc.path, int(loc.index), int(loc.count), int(loc.total)
      ('dense/kernel', 1, 2, 2)
    """
    with_path = jtu.tree_flatten_with_path(tree)[0]
    leaf_paths = tuple(path_str(p) for p, _ in with_path)
    if not with_path:
        minus_one, zero = jnp.full([], -1, jnp.int32), jnp.zeros([], jnp.int32)
        return NonfiniteLocation(minus_one, zero, zero, leaf_paths)
    counts = jnp.stack([_nonfinite_count(x) for _, x in with_path])
    first = jnp.argmax(counts > 0).astype(jnp.int32)  # 0 when there is none: counts[0] is 0 then
    count = counts[first]
    index = jnp.where(count > 0, first, jnp.int32(-1))
    # a saturating total: the float32 sum is close enough to tell whether int32 would wrap
    overflow = jnp.sum(counts, dtype=jnp.float32) >= float(INT32_MAX)
    total = jnp.where(overflow, jnp.int32(INT32_MAX), jnp.sum(counts, dtype=jnp.int32))
    return NonfiniteLocation(index, count, total, leaf_paths)


__all__ = ["NonfiniteLocation", "first_nonfinite"]
