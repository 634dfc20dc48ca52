"""Pytree helpers: arithmetic on whole trees, global norms, key paths, state access by name, and
the glob patterns that select parameters.

Every function here treats `None` leaves as absent (they pass through unchanged), accepts
`jax.ShapeDtypeStruct` leaves where only shapes and dtypes are needed (`zeros_like`, `size`), and
names tree positions with '/'-joined key paths (`"encoder/layers/0/kernel"`): dict keys, NamedTuple
and dataclass field names, and sequence indices, joined by '/'.

This module holds the arithmetic; paths, structure checks and get/set by name live in
`gradtx/_tree_paths.py`, the pattern language and prefix broadcasting in `gradtx/_masking.py`
(docs/patterns.md), and are re-exported here.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
from jax import tree_util as jtu

from .._base._numerics import wide_float
from .._base._typing import ArrayLike, PyTree
from ._paths import assert_same_structure as assert_same_structure
from ._paths import get as get
from ._paths import get_all_with_path as get_all_with_path
from ._paths import map_with_path as map_with_path
from ._paths import path_str as path_str
from ._paths import paths as paths
from ._paths import set as set
from ._patterns import broadcast_prefix as broadcast_prefix
from ._patterns import glob_matches as glob_matches
from ._patterns import match as match

__all__ = [
    "add",
    "add_scale",
    "assert_same_structure",
    "broadcast_prefix",
    "cast",
    "cast_like",
    "full_like",
    "get",
    "get_all_with_path",
    "glob_matches",
    "map_split",
    "map_with_path",
    "match",
    "mul",
    "norm",
    "ones_like",
    "path_str",
    "paths",
    "scale",
    "set",
    "size",
    "sub",
    "sum",
    "vdot",
    "where",
    "zeros_like",
]

# --------------------------------------------------------------------------------------------
# Creation and casting
# --------------------------------------------------------------------------------------------


def _is_abstract(x: Any) -> bool:
    return isinstance(x, jax.ShapeDtypeStruct)


def full_like(tree: PyTree, fill_value: ArrayLike, dtype: Any = None) -> PyTree:
    """A tree like `tree` filled with `fill_value` (in `dtype`, default each leaf's dtype).

    Leaves may be arrays, Python scalars or `jax.ShapeDtypeStruct` (then concrete arrays of that
    shape and dtype are created, on the struct's sharding when it has one).
    """

    def fill(x):
        if _is_abstract(x):
            sharding = getattr(x, "sharding", None)
            return jnp.full(x.shape, fill_value, dtype or x.dtype, device=sharding)
        return jnp.full_like(x, fill_value, dtype=dtype)

    return jax.tree.map(fill, tree)


def zeros_like(tree: PyTree, dtype: Any = None) -> PyTree:
    """A tree of zeros like `tree` (see `full_like`)."""
    return full_like(tree, 0, dtype)


def ones_like(tree: PyTree, dtype: Any = None) -> PyTree:
    """A tree of ones like `tree` (see `full_like`)."""
    return full_like(tree, 1, dtype)


def cast(tree: PyTree, dtype: Any) -> PyTree:
    """Every leaf cast to `dtype`; `dtype=None` returns `tree` unchanged."""
    if dtype is None:
        return tree
    return jax.tree.map(lambda x: jnp.asarray(x).astype(dtype), tree)


def cast_like(tree: PyTree, other: PyTree) -> PyTree:
    """Every leaf of `tree` cast to the dtype of the matching leaf of `other`."""
    return jax.tree.map(lambda x, o: jnp.asarray(x).astype(o.dtype), tree, other)


# --------------------------------------------------------------------------------------------
# Arithmetic (results keep the dtype of the first tree's leaves)
# --------------------------------------------------------------------------------------------


def add(*trees: PyTree) -> PyTree:
    """Leaf-wise sum of one or more trees of the same structure."""
    if not trees:
        raise ValueError("add: needs at least one tree")
    return jax.tree.map(
        lambda x, *rest: functools.reduce(lambda a, b: a + b, rest, x).astype(jnp.result_type(x)),
        *trees,
    )


def sub(tree_x: PyTree, tree_y: PyTree) -> PyTree:
    """Leaf-wise `x - y`."""
    return jax.tree.map(lambda x, y: (x - y).astype(jnp.result_type(x)), tree_x, tree_y)


def mul(tree_x: PyTree, tree_y: PyTree) -> PyTree:
    """Leaf-wise `x * y`."""
    return jax.tree.map(lambda x, y: (x * y).astype(jnp.result_type(x)), tree_x, tree_y)


def scale(scalar: ArrayLike, tree: PyTree) -> PyTree:
    """Every leaf multiplied by `scalar`, keeping its dtype."""
    return jax.tree.map(lambda x: (scalar * x).astype(jnp.result_type(x)), tree)


def add_scale(tree_x: PyTree, scalar: ArrayLike, tree_y: PyTree) -> PyTree:
    """Leaf-wise `x + scalar * y`, keeping the dtype of `x`."""
    return jax.tree.map(lambda x, y: (x + scalar * y).astype(jnp.result_type(x)), tree_x, tree_y)


def where(condition: Any, tree_x: PyTree, tree_y: PyTree) -> PyTree:
    """Leaf-wise `jnp.where`; `condition` is a scalar (applied to every leaf) or a tree."""
    if jtu.treedef_is_leaf(jax.tree.structure(condition)) and condition is not None:
        return jax.tree.map(lambda x, y: jnp.where(condition, x, y), tree_x, tree_y)
    return jax.tree.map(lambda c, x, y: jnp.where(c, x, y), condition, tree_x, tree_y)


# --------------------------------------------------------------------------------------------
# Reductions (accumulated in float32, or float64 when a leaf is float64)
# --------------------------------------------------------------------------------------------


def _leaves(tree: PyTree) -> list[jax.Array]:
    return [jnp.asarray(x) for x in jax.tree.leaves(tree)]


def _acc_dtype(leaves: Sequence[jax.Array]) -> Any:
    """float32, or float64 when a leaf is float64 or complex128 (a complex leaf counts by the
    dtype of its real part)."""
    return wide_float(*(_real_dtype(x.dtype) for x in leaves))


def _real_dtype(dtype: Any) -> Any:
    return jnp.finfo(dtype).dtype if jnp.issubdtype(dtype, jnp.complexfloating) else dtype


def _real(x: jax.Array, dtype: Any) -> jax.Array:
    return jnp.abs(x).astype(dtype) if jnp.iscomplexobj(x) else x.astype(dtype)


def sum(tree: PyTree) -> jax.Array:
    """Sum of all elements of all leaves, accumulated in float32 (0.0 for an empty tree)."""
    leaves = _leaves(tree)
    dtype = _acc_dtype(leaves)
    return functools.reduce(
        lambda acc, x: acc + jnp.sum(x.astype(dtype)), leaves, jnp.zeros([], dtype)
    )


def vdot(tree_x: PyTree, tree_y: PyTree) -> jax.Array:
    r"""Real inner product of two trees, :math:`\operatorname{Re} \sum_{leaves} \bar x \cdot y`,
    in float32 or wider (float64 when a leaf is float64 or complex128).

    Complex leaves are multiplied in their complex dtype, so the imaginary parts count:
    :math:`\operatorname{Re} \langle x, y \rangle = \sum \operatorname{Re} x
    \operatorname{Re} y + \operatorname{Im} x \operatorname{Im} y` (the inner product of
    :math:`\mathbb{C}^n` as :math:`\mathbb{R}^{2n}`, which L-BFGS and line searches need)."""
    xs, ys = _leaves(tree_x), _leaves(tree_y)
    if len(xs) != len(ys):
        raise ValueError(f"vdot: trees have {len(xs)} and {len(ys)} leaves")
    dtype = _acc_dtype(xs + ys)
    total = jnp.zeros([], dtype)
    for x, y in zip(xs, ys, strict=True):
        wide = jnp.promote_types(jnp.promote_types(x.dtype, y.dtype), dtype)
        total = total + jnp.vdot(x.astype(wide), y.astype(wide)).real.astype(dtype)
    return total


def norm(tree: PyTree, ord: int | float | str | None = 2, squared: bool = False) -> jax.Array:
    """Global norm of all leaves together, accumulated in float32 even for bf16 leaves.

    Args:
      tree: a pytree of arrays.
      ord: 2 (or None / "fro") for the L2 norm, 1 for the sum of magnitudes, `jnp.inf` for the
        largest magnitude.
      squared: return the squared L2 norm (only for ord=2).

    Returns:
      A float32 scalar (float64 when a leaf is float64); 0 for an empty tree.
    """
    leaves = _leaves(tree)
    dtype = _acc_dtype(leaves)
    zero = jnp.zeros([], dtype)
    if ord in (2, None, "fro"):
        sq = functools.reduce(
            lambda acc, x: acc + jnp.sum(jnp.square(_real(x, dtype))), leaves, zero
        )
        return sq if squared else jnp.sqrt(sq)
    if squared:
        raise ValueError(f"norm: squared=True needs ord=2, got ord={ord!r}")
    if ord == 1:
        return functools.reduce(
            lambda acc, x: acc + jnp.sum(jnp.abs(_real(x, dtype))), leaves, zero
        )
    if ord in (jnp.inf, float("inf"), "inf"):
        return functools.reduce(
            lambda acc, x: jnp.maximum(acc, jnp.max(jnp.abs(_real(x, dtype)), initial=0)),
            leaves,
            zero,
        )
    raise ValueError(f"norm: ord must be 1, 2 or inf, got {ord!r}")


def size(tree: PyTree) -> int:
    """Total number of elements in all leaves (works on `jax.ShapeDtypeStruct` leaves too)."""
    total = 0
    for x in jax.tree.leaves(tree):
        shape = x.shape if hasattr(x, "shape") else jnp.shape(x)
        n = 1
        for d in shape:
            n *= int(d)
        total += n
    return total


def map_split(f: Callable[..., tuple], n: int, tree: PyTree, *rest: PyTree) -> tuple:
    """`jax.tree.map` for an `f` that returns an `n`-tuple per leaf: returns `n` trees.

    Lets a transformation compute its new update and its new state buffers in one pass per leaf.
    """
    out = jax.tree.map(f, tree, *rest)
    return tuple(jax.tree.map(lambda _, o, i=i: o[i], tree, out) for i in range(n))
