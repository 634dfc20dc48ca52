"""Dimension numbers: which axes of a parameter form the matrix that a matrix method (Muon,
SOAP, Shampoo, Dion, Scion, GaLore) works on, and the one resolver from a user's spec to the
dimension numbers of each leaf.

`MuonDimensionNumbers` and `GaLoreDimensionNumbers` are two names of the same shape
(`reduction_axis`, `output_axis`), as in Optax; every method reads them (and Optax's) through
`per_leaf_dimension_numbers` and `matrix_axes`. A spec of None (or `infer_matrix_axes(...)`)
infers each leaf's axes (gradtx/contrib/_matrix_axes.py); an alias decides once per leaf,
in its labels, and hands its matrix branch those decisions (`alias_axes`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, cast

import jax
import numpy as np

from ..tree import broadcast_prefix
from ._matrix_axes import (
    Decision,
    MatrixAxes,
    NamedDecisions,
    ambiguous_error,
    decisions,
    format_table,
    infer_matrix_axes,
    log_once,
)

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


class _Remembered:
    """The spec an alias hands its matrix branch: the decisions its labels made, by leaf path
    and shape (the branch sees the same leaves, less the fallback's; `nnx.Optimizer` passes
    boxed params to `init` and plain arrays to `update`, so metadata read at `init` holds)."""

    def __init__(self, spec: MatrixAxes | None):
        self.spec = spec
        self.memo: dict[tuple[str, tuple[int, ...]], Any] = {}


def _inferred(who: str, spec: MatrixAxes | _Remembered | None, tree: Any) -> list[Any]:
    remembered = spec.memo if isinstance(spec, _Remembered) else None
    base = spec.spec if isinstance(spec, _Remembered) else spec
    found = decisions(who, base, tree, strict=remembered is None)
    if remembered is None:
        log_once(who, explain_table(who, found))
    return [remembered.get((d.path, d.shape), d.dims) if remembered else d.dims for d in found]


def per_leaf_dimension_numbers(who: str, spec: Any, tree: Any) -> list[Any]:
    """The dimension numbers (or None) of each leaf of `tree`, in flattening order, from
    `spec`: None or `infer_matrix_axes(...)` (inferred per leaf; None for a leaf that is not a
    matrix or is ambiguous, which a transformation that needs a matrix reports), one
    dimension-numbers tuple (or None) for every leaf, a tree (or prefix) of them and Nones, or
    a callable of `tree` returning one of those."""
    if spec is None or isinstance(spec, MatrixAxes | _Remembered):
        return _inferred(who, spec, tree)
    if callable(spec) and not is_dimension_numbers(spec):
        spec = spec(tree)
    if _is_spec_leaf(spec):
        return [spec] * len(jax.tree.leaves(tree))
    wrapped = jax.tree.map(_Spec, spec, is_leaf=_is_spec_leaf)
    try:
        spread = broadcast_prefix(wrapped, tree, who=who, what="the weight dimension numbers")
    except ValueError as e:
        if isinstance(spec, dict) and any(isinstance(k, str) and "*" in k for k in spec):
            raise ValueError(
                f"{e}. A dict of dimension numbers is a (prefix) tree of the params; to give "
                f"them by glob patterns, pass gradtx.contrib.infer_matrix_axes({spec!r})"
            ) from None
        raise
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


class AliasAxes:
    """An alias's matrix axes: which leaves its matrix branch takes (`per_leaf`, `labels`) and
    the spec that branch gets (`branch_spec`). Inferring (a spec of None or
    `infer_matrix_axes(...)`), an ambiguous leaf is an error here, at `init`; the decisions are
    logged once and remembered for the branch."""

    def __init__(self, who: str, spec: Any):
        self.who = who
        self.spec = spec
        self.inferring = spec is None or isinstance(spec, MatrixAxes)
        self._remembered = _Remembered(spec) if self.inferring else None
        self._named = NamedDecisions()

    @property
    def branch_spec(self) -> Any:
        return self._remembered if self._remembered is not None else self.spec

    def per_leaf(self, params: Any, *, needed: Sequence[bool] | None = None) -> list[Any]:
        """The dimension numbers of each leaf of `params`, None for the fallback's leaves; an
        ambiguous leaf raises unless `needed` says its axes are not needed (then None)."""
        if not self.inferring:
            return per_leaf_dimension_numbers(self.who, self.spec, params)
        # decided from axis names before (nnx.Optimizer: boxed state at `init`, plain arrays
        # at `update`): that decision holds
        found = self._named.hold(decisions(self.who, self.spec, params))
        log_once(self.who, explain_table(self.who, found))
        assert self._remembered is not None
        memo = self._remembered.memo
        out = []
        for i, d in enumerate(found):
            if d.ambiguous is not None and (needed is None or needed[i]):
                raise ambiguous_error(self.who, d)
            memo[(d.path, d.shape)] = d.dims
            out.append(d.dims)
        return out

    def labels(self, matrix: str) -> Callable[[Any], Any]:
        """The `multi_transform` labels: `matrix` for the leaves with dimension numbers,
        "adam" for the others."""

        def labels(params: Any) -> Any:
            treedef = jax.tree.structure(params)
            dims = self.per_leaf(params)
            return treedef.unflatten(["adam" if d is None else matrix for d in dims])

        return labels


def alias_axes(who: str, spec: Any) -> AliasAxes:
    """The matrix axes of an alias named `who` from its user's spec (see `AliasAxes`)."""
    return AliasAxes(who, spec)


def matrix_labels(who: str, spec: Any, matrix: str) -> Callable[[Any], Any]:
    """The `multi_transform` labels of a matrix method's alias: the leaves with dimension
    numbers (inferred without `spec`: the 2-D leaves, stacks, conv kernels) are `matrix`, the
    rest "adam"."""
    return alias_axes(who, spec).labels(matrix)


def tensor_batch_axes(who: str, d: Decision) -> tuple[int, ...]:
    """A leaf's batch axes for a method that takes tensors of any rank (Kron: a factor per
    other axis), from its decision: a matrix's batch axes (neither reduction nor output axes);
    else the axes that names marked as stacked (a stack of vectors, or a leaf whose other axes
    form no matrix); else none (rank < 2, a fallback override, names that say nothing)."""
    if d.dims is not None:
        return matrix_axes(who, d.shape, d.dims)[0]
    return d.stacked


def inferred_batch_axes(
    who: str, spec: MatrixAxes | None, tree: Any, named: NamedDecisions
) -> list[tuple[int, ...]]:
    """The batch axes of each leaf of `tree` (flattening order) that a tensor method infers
    from `spec` (None or `infer_matrix_axes(...)`), by the matrix optimizers' decisions; those
    made from axis names are kept in `named` (a state's layout is fixed at `init`). Logged once."""
    found = named.hold(decisions(who, spec, tree))
    log_once(who, explain_table(who, found, kron=True))
    return [tensor_batch_axes(who, d) for d in found]


def _cell(axes: Sequence[int]) -> str:
    return ",".join(str(a) for a in axes) if axes else "-"


def _kron_row(who: str, d: Decision) -> tuple[str, tuple, str, str, str, str]:
    batch = _cell(tensor_batch_axes(who, d))
    if d.dims is not None:
        _, red, out = matrix_axes(who, d.shape, d.dims)
        return (d.path, d.shape, batch, _cell(red), _cell(out), d.why)
    why = (
        f"not a matrix, a factor per other axis ({d.ambiguous})"
        if d.ambiguous is not None
        else d.why
    )
    return (d.path, d.shape, batch, "-", "-", why)


def _decision_row(who: str, d: Decision) -> tuple[str, tuple, str, str, str, str]:
    if d.ambiguous is not None:
        return (d.path, d.shape, "?", "?", "?", f"ambiguous: {d.ambiguous}")
    if d.dims is None or len(d.shape) < 2:
        what = "not a matrix" if len(d.shape) < 2 else "fallback"
        return (d.path, d.shape, "-", "-", "-", f"{what} ({d.why})")
    batch, red, out = matrix_axes(who, d.shape, d.dims)
    return (d.path, d.shape, _cell(batch), _cell(red), _cell(out), d.why)


def explain_table(who: str, found: list[Decision], *, kron: bool = False) -> str:
    row = _kron_row if kron else _decision_row
    return format_table([row(who, d) for d in found])


def explain_matrix_axes(
    params: Any, weight_dimension_numbers: Any = None, *, kron: bool = False
) -> str:
    """A table of how the matrix optimizers (or, with `kron`, PSGD-Kron) treat each leaf of
    `params`.

    One row per leaf: its path, shape, batch / reduction / output axes (or "not a matrix",
    "fallback", "ambiguous") and why ("2-D default", "axis names (...)", "path names [...]",
    "conv kernel", "override '...'", "given"). The same table is logged (logger
    "gradtx.contrib", INFO) once, when an optimizer first resolves these params. An ambiguous
    leaf is shown here; an optimizer raises for it.

    Args:
      params: the parameters (arrays, `jax.ShapeDtypeStruct`, Flax boxed params or nnx state).
      weight_dimension_numbers: the spec an optimizer would get: None or
        `infer_matrix_axes(...)` (inferred), or dimension numbers as a tree, prefix or callable.
      kron: show the batch axes that `kron` / `scale_by_kron` infer (`batch_axes` None or
        `infer_matrix_axes(...)`, the spec here): a matrix's batch axes, a stack of vectors'
        stacked axes, and none for a leaf of rank < 2 or one whose names say nothing (no
        error: Kron has a factor per axis and needs no matrix).

    Returns:
      The table, as a string.

    Example:
      >>> import jax.numpy as jnp, gradtx
      >>> params = {"layers": {"w": jnp.ones((4, 3, 5))}, "b": jnp.ones(5)}
      >>> print(gradtx.contrib.explain_matrix_axes(params))
      path      shape      batch  reduction  output  why
      b         (5,)       -      -          -       not a matrix (rank < 2)
      layers/w  (4, 3, 5)  0      1          2       path names ['layers']: leading batch axes
    """
    who = "explain_matrix_axes"
    spec = weight_dimension_numbers
    if kron and not (spec is None or isinstance(spec, MatrixAxes)):
        raise ValueError(
            f"{who}: with kron=True the spec is the batch_axes kron infers from: None or "
            f"gradtx.contrib.infer_matrix_axes(...), got {type(spec).__name__}; batch axes "
            "given by hand are used as given"
        )
    if spec is None or isinstance(spec, MatrixAxes):
        found = decisions(who, spec, params)
        if kron:
            return explain_table(who, found, kron=True)
    else:
        from ._matrix_axes import _records

        dims = per_leaf_dimension_numbers(who, spec, params)
        found = [
            Decision(path, shape, d, "given")
            for (_, path, shape, _), d in zip(_records(who, params, None), dims, strict=True)
        ]
    return explain_table(who, found)


__all__ = [
    "AliasAxes",
    "alias_axes",
    "explain_matrix_axes",
    "infer_matrix_axes",
    "inferred_batch_axes",
    "is_dimension_numbers",
    "matrix_axes",
    "matrix_labels",
    "per_leaf_dimension_numbers",
    "untranspose",
]
