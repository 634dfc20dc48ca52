"""Dimension numbers: which axes of a parameter form the matrix that a matrix method (Muon,
GaLore) works on, and the one resolver from a user's spec to the dimension numbers of each leaf.

`MuonDimensionNumbers` and `GaLoreDimensionNumbers` are two names of the same shape
(`reduction_axis`, `output_axis`), as in Optax; both methods read them (and Optax's) through
`per_leaf_dimension_numbers` and `matrix_axes`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, cast

import jax
import numpy as np

from ..tree import broadcast_prefix

_FIELDS = ("reduction_axis", "output_axis")


def is_dimension_numbers(x: Any) -> bool:
    """Whether `x` is a dimension-numbers tuple: ours (Muon's or GaLore's) or any named tuple
    with the same fields (e.g. `optax.contrib.MuonDimensionNumbers`)."""
    return isinstance(x, tuple) and getattr(x, "_fields", None) == _FIELDS


def _is_spec_leaf(x: Any) -> bool:
    return x is None or is_dimension_numbers(x)


class _Spec:
    """A leaf wrapper, so that dimension numbers (a tuple) or None survive a tree map."""

    def __init__(self, value: Any):
        self.value = value


def per_leaf_dimension_numbers(who: str, spec: Any, tree: Any) -> list[Any]:
    """The dimension numbers (or None) of each leaf of `tree`, in flattening order, from `spec`:
    one dimension-numbers tuple (or None) for every leaf, a tree (or prefix) of them and Nones,
    or a callable of `tree` returning one of those."""
    if callable(spec) and not is_dimension_numbers(spec):
        spec = spec(tree)
    if _is_spec_leaf(spec):
        return [spec] * len(jax.tree.leaves(tree))
    wrapped = jax.tree.map(_Spec, spec, is_leaf=_is_spec_leaf)
    spread = broadcast_prefix(wrapped, tree, who=who, what="the weight dimension numbers")
    return [cast(_Spec, s).value for s in jax.tree.leaves(spread)]


def _normalized(who: str, axes: Sequence[int] | int, shape: tuple[int, ...]) -> tuple[int, ...]:
    ndim = len(shape)
    axes = (axes,) if isinstance(axes, int | np.integer) else tuple(axes)
    bad = [a for a in axes if not -ndim <= int(a) < ndim]
    if bad:
        raise ValueError(f"{who}: axis {bad[0]} is out of range for a leaf of shape {shape}")
    return tuple(int(a) % ndim for a in axes)


def matrix_axes(
    who: str, shape: tuple[int, ...], dims: Any
) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """`(batch, reduction, output)` axes of a leaf of `shape` under `dims` (negative axes count
    from the end); reduction and output axes must be non-empty and disjoint, every other axis is
    a batch axis."""
    red = _normalized(who, dims.reduction_axis, shape)
    out = _normalized(who, dims.output_axis, shape)
    if set(red) & set(out) or not red or not out:
        raise ValueError(
            f"{who}: reduction axes {red} and output axes {out} must be non-empty and disjoint, "
            f"got {dims} for a leaf of shape {shape}"
        )
    batch = tuple(a for a in range(len(shape)) if a not in red and a not in out)
    return batch, red, out


def untranspose(x: jax.Array, order: Sequence[int], shape: tuple[int, ...]) -> jax.Array:
    """A leaf of `shape` back from its matrix view: `x` holds `transpose(leaf, order)` in any
    shape of the same size (a stack of matrices); the inverse of that transpose and reshape."""
    x = x.reshape(tuple(shape[a] for a in order))
    return jax.numpy.transpose(x, tuple(int(i) for i in np.argsort(order)))


def matrix_labels(who: str, spec: Any, matrix: str) -> Callable[[Any], Any]:
    """The `multi_transform` labels of a matrix method's alias (Muon's rule): without `spec`
    every 2-D leaf is a matrix (labelled `matrix`) and the rest "adam"; with it, the leaves whose
    dimension numbers are not None."""

    def labels(params: Any) -> Any:
        if spec is None:
            return jax.tree.map(lambda x: matrix if len(np.shape(x)) == 2 else "adam", params)
        treedef = jax.tree.structure(params)
        dims = per_leaf_dimension_numbers(who, spec, params)
        return treedef.unflatten(["adam" if d is None else matrix for d in dims])

    return labels


__all__ = [
    "is_dimension_numbers",
    "matrix_axes",
    "matrix_labels",
    "per_leaf_dimension_numbers",
    "untranspose",
]
