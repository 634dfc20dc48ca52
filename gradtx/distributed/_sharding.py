"""Deriving an optimizer state's shardings from its params' shardings (internal).

The state of every gradtx transformation is built from the params: moments are trees with the
params' structure (`mu`, `nu`, `grad_sum`, ...), sometimes with a small subtree in place of each
parameter (SM3's per-dimension accumulators, Adafactor's row and column factors), next to scalars
(counters, hyperparameters). The derivation walks the state from the top and, at the first node
that has the params' tree structure as a prefix, pairs every parameter with the state leaves under
it. A paired leaf takes its parameter's `PartitionSpec` when the shapes agree, and a spec fitted
to its shape otherwise (a leading history axis, a factored axis of size 1 or removed, a matrix
optimizer's factor or projection of one axis: rows like that axis; Shampoo's blocked factors:
the block grid like the parameter's last two axes); every other leaf is
replicated, as are the fields a state class names with `replicated_fields` (a matrix method's
factor that every device computes whole). Entries whose axis size does not divide the dimension
are dropped (replicated), so every derived sharding is valid for `jax.device_put` and `jit`.

ZeRO stage 1 then shards each non-scalar leaf (but those replicated by design) along the
optimizer-state axis too, on the largest
dimension that is not yet sharded and divides by the axis size (or, failing that, by extending a
dimension's existing axes), and reports the leaves where no dimension divides.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, NamedTuple

import jax
import numpy as np
from jax import tree_util as jtu
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from .._base._typing import PyTree
from ..tree import path_str

Entry = Any  # None, an axis name, or a tuple of axis names


class Row(NamedTuple):
    """One state leaf's placement (made public as `gradtx.LeafSharding`)."""

    path: str
    shape: tuple[int, ...]
    dtype: Any
    spec: PartitionSpec
    source: str
    note: str


def _axes(entry: Entry) -> tuple[str, ...]:
    if entry is None:
        return ()
    if isinstance(entry, str):
        return (entry,)
    return tuple(entry)


def _entry(axes: Sequence[str]) -> Entry:
    axes = tuple(axes)
    if not axes:
        return None
    return axes[0] if len(axes) == 1 else axes


def _axes_size(mesh: Mesh, axes: Sequence[str]) -> int:
    return math.prod(int(mesh.shape[a]) for a in axes)


def _padded(spec: PartitionSpec, ndim: int) -> list[Entry]:
    entries = list(spec)[:ndim]
    return entries + [None] * (ndim - len(entries))


def _fit(
    pspec: list[Entry], pshape: tuple[int, ...], shape: tuple[int, ...], ordinal: int = 0
) -> tuple[list, str]:
    """A spec for a leaf of `shape` paired with a parameter of `pshape` sharded as `pspec`;
    `ordinal` counts the earlier leaves of the same shape in the parameter's subtree."""
    nd, pd = len(shape), len(pshape)
    if shape == pshape:
        return list(pspec), "like its parameter"
    if nd == 0:
        return [], "scalar: replicated"
    if nd > pd and shape[nd - pd :] == pshape:
        return [None] * (nd - pd) + list(pspec), "like its parameter, leading axes replicated"
    if nd == pd and all(s in (p, 1) for s, p in zip(shape, pshape, strict=True)):
        spec = [e if s == p else None for e, s, p in zip(pspec, shape, pshape, strict=True)]
        return spec, "like its parameter, size-1 axes replicated"
    if nd == pd - 1:
        for d in reversed(range(pd)):
            if shape == pshape[:d] + pshape[d + 1 :]:
                return pspec[:d] + pspec[d + 1 :], f"like its parameter without axis {d}"
    blocked = _block_grid(pshape, shape, ordinal)
    if blocked is not None:
        return (
            [*pspec[: pd - 2], pspec[pd - 2], pspec[pd - 1], None, None],
            f"blocked factor of its parameter's axis {blocked} ({shape[-1]}-blocks): the block "
            "grid like the parameter's last two axes, the blocks replicated",
        )
    factor = _factor_dim(pshape, shape, ordinal)
    if factor is not None:
        nb, d = factor
        kind = "factor" if shape[-1] == shape[-2] else "projection"
        return (
            [*pspec[:nb], pspec[d], None],
            f"{kind} of its parameter's axis {d}: rows like that axis, columns replicated",
        )
    return [None] * nd, "shape unrelated to its parameter: replicated"


def _block_grid(pshape: tuple[int, ...], shape: tuple[int, ...], ordinal: int) -> int | None:
    """The parameter axis that `shape` preconditions when it is a blocked Kronecker factor of the
    parameter's last two axes (Shampoo's): `(*batch, n_r, n_c, b, b)` with `n_r = ceil(rows / b_r)`
    and `n_c = ceil(cols / b_c)`, `b` the side of the rows' blocks (`L`) or of the columns'
    (`R`); the batch axes are the parameter's leading ones. When both axes fit (equal block
    sides), the `ordinal`-th factor of that shape takes the `ordinal`-th axis (`L`, then `R`)."""
    pd = len(pshape)
    if pd < 2 or len(shape) != pd + 2 or shape[: pd - 2] != pshape[: pd - 2]:
        return None
    (rows, cols), (n_r, n_c, b, b2) = pshape[-2:], shape[-4:]
    if b != b2 or not (1 <= n_r <= rows and 1 <= n_c <= cols):
        return None
    axes = [
        axis
        for axis, size, n in ((pd - 2, rows, n_r), (pd - 1, cols, n_c))
        if 1 <= b <= size and n == -(-size // b)
    ]
    return axes[ordinal % len(axes)] if axes else None


def _factor_dim(
    pshape: tuple[int, ...], shape: tuple[int, ...], ordinal: int
) -> tuple[int, int] | None:
    """`(batch axes, parameter axis)` when `shape` is a matrix optimizer's factor of one of the
    parameter's axes: `(*batch, k, k)` (a Kronecker factor, an eigenbasis) or `(*batch, k, r)`
    (a low-rank projection), the batch axes a prefix of the parameter's shape and `k` the size of
    a later axis. When several axes have size `k`, the `ordinal`-th factor of that size in the
    parameter's subtree takes the `ordinal`-th of them (the factors of `(n, n)` are left, right)."""
    nb = len(shape) - 2
    if nb < 0 or shape[:nb] != pshape[:nb]:
        return None
    k = shape[-2]
    dims = [d for d in range(nb, len(pshape)) if pshape[d] == k]
    if not dims:
        return None
    return nb, dims[ordinal % len(dims)]


def _divisible(mesh: Mesh, spec: list[Entry], shape: tuple[int, ...]) -> list[Entry]:
    return [
        e if n % _axes_size(mesh, _axes(e)) == 0 else None for e, n in zip(spec, shape, strict=True)
    ]


def _zero1(
    mesh: Mesh, spec: list[Entry], shape: tuple[int, ...], zero_axes: tuple[str, ...]
) -> tuple[list[Entry], str]:
    used = {a for e in spec for a in _axes(e)}
    free = tuple(a for a in zero_axes if a not in used)
    if not shape or not free:
        return spec, ""
    size = _axes_size(mesh, free)
    open_dims = [d for d, e in enumerate(spec) if e is None and shape[d] % size == 0]
    if open_dims:
        d = max(open_dims, key=lambda i: (shape[i], -i))  # the largest, the first on ties
        out = list(spec)
        out[d] = _entry(free)
        return out, f"; ZeRO-1 over {free} on axis {d}"
    for d, e in enumerate(spec):
        if e is not None and shape[d] % (_axes_size(mesh, _axes(e)) * size) == 0:
            out = list(spec)
            out[d] = _entry(_axes(e) + free)
            return out, f"; ZeRO-1 over {free} on axis {d} (with {_axes(e)})"
    return spec, f"; not split over {free}: no dimension of {shape} divides by {size}"


def _param_spec(who: str, path: str, leaf: Any, sharding: Any, mesh: Mesh | None) -> tuple:
    """(mesh, spec) of one parameter, from its explicit sharding, spec or array sharding."""
    if sharding is None:
        sharding = getattr(leaf, "sharding", None)
    if isinstance(sharding, PartitionSpec):
        if mesh is None:
            raise ValueError(f"{who}: the parameter {path!r} has a PartitionSpec; pass mesh=")
        return mesh, sharding
    if isinstance(sharding, NamedSharding):
        if not isinstance(sharding.mesh, Mesh):
            if mesh is None:
                raise ValueError(
                    f"{who}: the parameter {path!r} has an abstract mesh; pass the concrete mesh="
                )
            return mesh, sharding.spec
        return sharding.mesh, sharding.spec
    if sharding is not None and mesh is not None and sharding.is_fully_replicated:
        return mesh, PartitionSpec()
    if sharding is None and mesh is not None:
        return mesh, PartitionSpec()
    raise ValueError(
        f"{who}: cannot tell how the parameter {path!r} is sharded (got "
        f"{type(sharding).__name__}); give params NamedShardings (jax.device_put(params, "
        "NamedSharding(mesh, spec))), ShapeDtypeStructs with sharding=, or param_shardings= "
        "and mesh="
    )


def _param_specs(
    who: str, params: PyTree, param_shardings: PyTree | None, mesh: Mesh | None
) -> tuple[Mesh, Any, list[tuple[str, tuple[int, ...], list[Entry], PartitionSpec]]]:
    leaves_with_path, treedef = jtu.tree_flatten_with_path(params)
    if param_shardings is None:
        given: list[Any] = [None] * len(leaves_with_path)
    else:
        given = _flatten_up_to(treedef, param_shardings)
    found_mesh = mesh
    out = []
    for (key_path, leaf), sharding in zip(leaves_with_path, given, strict=True):
        path = path_str(key_path)
        leaf_mesh, spec = _param_spec(who, path, leaf, sharding, mesh)
        if found_mesh is None:
            found_mesh = leaf_mesh
        elif leaf_mesh != found_mesh:
            raise ValueError(
                f"{who}: the parameter {path!r} is on mesh {dict(leaf_mesh.shape)}, others on "
                f"{dict(found_mesh.shape)}; all parameters must share one mesh"
            )
        shape = tuple(int(d) for d in np.shape(leaf))
        out.append((path, shape, _padded(spec, len(shape)), spec))
    if found_mesh is None:
        raise ValueError(f"{who}: params has no array leaves; pass mesh= to shard the state")
    return found_mesh, treedef, out


def plan(
    who: str,
    abstract_state: PyTree,
    params: PyTree,
    *,
    mesh: Mesh | None,
    param_shardings: PyTree | None,
    zero_axis: str | Sequence[str] | None,
) -> tuple[Mesh, jtu.PyTreeDef, list[Row]]:
    """The mesh, the state's treedef and one `Row` per state leaf (flattening order)."""
    mesh, ptreedef, pinfo = _param_specs(who, params, param_shardings, mesh)
    zero_axes: tuple[str, ...] = ()
    if zero_axis is not None:
        zero_axes = (zero_axis,) if isinstance(zero_axis, str) else tuple(zero_axis)
        unknown = [a for a in zero_axes if a not in mesh.shape]
        if unknown or not zero_axes:
            raise ValueError(
                f"{who}: zero_axis must name axes of the mesh {tuple(mesh.shape)}, "
                f"got {zero_axis!r}"
            )
    pairing: dict[int, int] = {}  # id of a state leaf's position -> parameter index
    siblings: dict[int, list[int]] = {}  # position -> the positions paired with it, in order

    replicated: dict[int, str] = {}  # position -> the state field replicated by design

    def visit(node: Any, positions: list[int]) -> None:
        # positions: the flat indices (in the whole state) of `node`'s leaves, in order
        whole = getattr(type(node), "REPLICATED", ())  # `replicated_fields` of a state class
        if whole and isinstance(node, tuple):
            where = getattr(type(node), "REPLICATED_WHERE", None)
            mask = None if where is None else where(node)
            start = 0
            for name, child in zip(node._fields, node, strict=True):  # type: ignore[attr-defined]
                group = positions[start : start + len(jax.tree.leaves(child))]
                start += len(group)
                chosen = [name in whole] * len(group)
                if name in whole and mask is not None:
                    chosen = _leaf_mask(mask, child)
                if not all(chosen):
                    visit(child, group)
                for pos, replicate in zip(group, chosen, strict=True):
                    if replicate:
                        replicated[pos] = f"{type(node).__name__}.{name}"
                        pairing.pop(pos, None)
            return
        try:
            subtrees = _flatten_up_to(ptreedef, node)
        except (ValueError, TypeError):
            subtrees = None
        if subtrees is not None and ptreedef.num_leaves > 0:
            start = 0
            for i, sub in enumerate(subtrees):
                n = len(jax.tree.leaves(sub))
                group = positions[start : start + n]
                for pos in group:
                    pairing[pos] = i
                    siblings[pos] = group
                start += n
            return
        children = _children(node)
        start = 0
        for child in children:
            n = len(jax.tree.leaves(child))
            visit(child, positions[start : start + n])
            start += n

    state_leaves_with_path, treedef = jtu.tree_flatten_with_path(abstract_state)
    visit(abstract_state, list(range(len(state_leaves_with_path))))
    state_leaves = [leaf for _, leaf in state_leaves_with_path]
    rows = []
    for pos, (key_path, leaf) in enumerate(state_leaves_with_path):
        shape = tuple(int(d) for d in np.shape(leaf))
        original = None
        if pos in pairing:
            ppath, pshape, pspec, original = pinfo[pairing[pos]]
            ordinal = sum(
                1 for q in siblings[pos] if q < pos and np.shape(state_leaves[q]) == shape
            )
            spec, note = _fit(pspec, pshape, shape, ordinal)
            if shape != pshape:
                original = None
        else:
            ppath, spec = "", [None] * len(shape)
            note = "scalar: replicated" if not shape else "not paired with a parameter: replicated"
            if pos in replicated:
                note = f"{replicated[pos]}: computed whole on every device, replicated"
        spec = _divisible(mesh, spec, shape)
        if zero_axes and pos in replicated:  # sharded for storage, it would be gathered per step
            note += "; not sharded by ZeRO-1 either"
        elif zero_axes:
            spec, zero_note = _zero1(mesh, spec, shape, zero_axes)
            note += zero_note
        rows.append(
            Row(
                path=path_str(key_path),
                shape=shape,
                dtype=getattr(leaf, "dtype", None),
                spec=original if original is not None and spec == pspec else _trimmed(spec),
                source=ppath,
                note=note,
            )
        )
    return mesh, treedef, rows


def _leaf_mask(mask: Any, tree: Any) -> list[bool]:
    """`mask`, a tree of bools that is a prefix of `tree`, as one bool per leaf of `tree`."""
    parts = _flatten_up_to(jax.tree.structure(mask), tree)
    flags = jax.tree.leaves(mask)
    return [bool(f) for f, part in zip(flags, parts, strict=True) for _ in jax.tree.leaves(part)]


def _flatten_up_to(treedef: Any, tree: Any) -> list[Any]:
    """The subtrees of `tree` at the leaves of `treedef` (ValueError if it is not a prefix)."""
    return list(treedef.flatten_up_to(tree))


def _trimmed(spec: list[Entry]) -> PartitionSpec:
    """The spec without trailing Nones (`P("data")` rather than `P("data", None)`)."""
    spec = list(spec)
    while spec and spec[-1] is None:
        spec.pop()
    return PartitionSpec(*spec)


def _children(node: Any) -> list[Any]:
    if node is None:
        return []
    leaves_or_nodes, _ = jtu.tree_flatten(node, is_leaf=lambda x: x is not node)
    return leaves_or_nodes if not (len(leaves_or_nodes) == 1 and leaves_or_nodes[0] is node) else []
