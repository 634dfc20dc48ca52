"""Which axes of each parameter form a matrix optimizer's matrix, inferred when not written.

Without dimension numbers (`weight_dimension_numbers=None`, or `infer_matrix_axes(...)` for
path overrides and axis names), each leaf is decided once, in this order:

1. **Override**: the first glob pattern of `infer_matrix_axes(overrides)` that matches the
   leaf's '/'-joined path (the pattern language of `gradtx.tree.match`) gives its dimension
   numbers, or None (not a matrix: the alias's fallback).
2. **Rank < 2**: not a matrix.
3. **Axis names** (Flax metadata: linen `nn.Partitioned` / `LogicallyPartitioned` boxes, nnx
   `Variable` sharding metadata, or the `axis_names` tree of `infer_matrix_axes`): every axis
   named in `STACK_AXIS_NAMES` is a batch axis.
4. **Path names** (no such axis name): each path component equal to a name of
   `STACK_AXIS_NAMES` (any case), or named `Scan…` (linen's name of an unnamed `nn.scan`), and
   not followed by a list index, marks one more leading batch axis; applied to leaves of rank
   >= 3 and to 2-D leaves named `bias` or `scale` (a scanned LayerNorm's scale is a stack of
   vectors, a 2-D kernel stays a matrix).
5. The axes left: fewer than 2, not a matrix (a stack of vectors); 2, a matrix (rows = the
   first, columns = the second); more, a convolution kernel if a path component says `Conv`
   (Flax's layout `(*spatial, c_in, c_out)`: the spatial axes and `c_in` are the reduction
   axes, `c_out` the output axis, as Muon flattens conv filters), unless its batch axes came
   from path names alone (then a layer axis and a spatial axis cannot be told apart).
6. Anything else of rank >= 3 is **ambiguous**: an error naming the leaf and the override.

A boxed parameter's path is the box's (`layers/Dense_0/kernel`, not `.../kernel/value`).
PSGD-Kron reads only the batch axes of these decisions (`Decision.stacked` where the axes left
form no matrix; see `tensor_batch_axes`): it needs no matrix, so an ambiguous leaf is no error.
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import Mapping
from typing import Any, NamedTuple

import jax
import numpy as np
from jax import tree_util as jtu

from ..tree._paths import path_str
from ..tree._patterns import resolve_rules

_log = logging.getLogger("gradtx.contrib")

#: Axis names (and path components) that mark a batch axis: a stack of layers, scan steps,
#: pipeline stages or experts, each one holding its own matrix.
STACK_AXIS_NAMES = (
    "layers",
    "layer",
    "stack",
    "stacked",
    "scan",
    "scanned",
    "blocks",
    "repeat",
    "repeats",
    "stage",
    "stages",
    "experts",
    "expert",
    "exp",
)
_STACK = frozenset(STACK_AXIS_NAMES)
#: Names of 2-D leaves that the path rule reads as a stack of vectors.
VECTOR_LEAF_NAMES = ("bias", "scale")
_SCAN_MODULE = re.compile(r"Scan[A-Z0-9_]")
_CONV = re.compile(r"(?<![A-Za-z])[Cc]onv|(?<=[a-z])Conv")


class InferredDimensionNumbers(NamedTuple):
    """The dimension numbers that inference gives a leaf (the fields of
    `MuonDimensionNumbers`, read by every matrix optimizer)."""

    reduction_axis: tuple[int, ...]
    output_axis: tuple[int, ...]


class MatrixAxes(NamedTuple):
    """`infer_matrix_axes`' spec: path overrides and a tree of axis names (see there)."""

    overrides: Mapping[str, Any]
    axis_names: Any
    strict: bool = True


class Decision(NamedTuple):
    """How one leaf is treated: `dims` (None: not a matrix), why, and for an ambiguous leaf
    the reason it cannot be decided (`dims` is then None)."""

    path: str
    shape: tuple[int, ...]
    dims: Any
    why: str
    ambiguous: str | None = None
    # its batch axes were decided by axis names (Flax metadata or `axis_names`)
    from_names: bool = False
    # the batch axes that axis or path names marked (sorted), kept also where the axes left form
    # no matrix (a stack of vectors, an ambiguous leaf): what a tensor method (Kron) reads
    stacked: tuple[int, ...] = ()


def infer_matrix_axes(
    overrides: Mapping[str, Any] | None = None, *, axis_names: Any = None, strict: bool = True
) -> MatrixAxes:
    """Matrix axes inferred per leaf, with glob-pattern overrides and optional axis names.

    Pass the result as a matrix optimizer's `weight_dimension_numbers` (`muon`'s
    `muon_weight_dimension_numbers`); `weight_dimension_numbers=None` is
    `infer_matrix_axes()`. The rules are in docs/matrix-optimizers.md ("Which axes form the
    matrix"); `explain_matrix_axes(params, spec)` shows each leaf's decision.

    A dict of patterns is wrapped (not passed as is) because a dict is already a valid
    `weight_dimension_numbers`: a prefix tree keyed by parameter names, and a key may hold '/'
    (Haiku's module names do).

    Args:
      overrides: glob pattern -> dimension numbers (any `...DimensionNumbers`), or None (not a
        matrix: the alias's fallback, e.g. AdamW). The first matching pattern wins (in dict
        order, as `gradtx.labels_by_pattern`), so put the specific patterns first; a pattern
        that matches no parameter, or only parameters that earlier ones took, is an error
        naming the available paths (unless `strict` is False). Unmatched leaves are inferred.
      axis_names: a tree with the params' structure (or a prefix of it) whose leaves are the
        axis names of each parameter: a `PartitionSpec` (e.g. from `nn.get_partition_spec`) or a
        tuple of names and Nones; used where a leaf carries no Flax metadata of its own.
      strict: whether a pattern that matches nothing is an error (False: one spec for several
        models, e.g. a config shared by runs whose params differ).

    Returns:
      A `MatrixAxes` spec.

    Example:
      >>> import jax.numpy as jnp, gradtx
      >>> from gradtx.contrib import MuonDimensionNumbers, infer_matrix_axes
      >>> spec = infer_matrix_axes({"moe/wi": MuonDimensionNumbers(1, 2), "head": None})
      >>> tx = gradtx.contrib.muon(0.02, muon_weight_dimension_numbers=spec)
      >>> params = {"moe": {"wi": jnp.ones((4, 3, 5))}, "head": jnp.ones((3, 2))}
      >>> _ = tx.init(params)
    """
    who = "infer_matrix_axes"
    overrides = {} if overrides is None else overrides
    if not isinstance(overrides, Mapping):
        raise ValueError(
            f"{who}: overrides must be a dict of glob pattern -> dimension numbers or None, "
            f"got {type(overrides).__name__}"
        )
    for pattern, value in overrides.items():
        if not isinstance(pattern, str):
            raise ValueError(f"{who}: override keys must be glob patterns, got {pattern!r}")
        if value is not None and not _is_dims(value):
            raise ValueError(
                f"{who}: override {pattern!r} must map to dimension numbers (e.g. "
                f"MuonDimensionNumbers(reduction_axis=1, output_axis=2)) or None, got {value!r}"
            )
    return MatrixAxes(dict(overrides), axis_names, bool(strict))


def _is_dims(x: Any) -> bool:
    return isinstance(x, tuple) and getattr(x, "_fields", None) == (
        "reduction_axis",
        "output_axis",
    )


# --------------------------------------------------------------------------------------------
# Leaves with their paths and axis names
# --------------------------------------------------------------------------------------------


def _box_names(node: Any) -> tuple | None:
    """The axis names a Flax box carries: () for a box without them, None for no box. Flax is
    only looked up where it is already imported (a tree cannot hold its boxes otherwise)."""
    meta = sys.modules.get("flax.core.meta")
    if meta is not None and isinstance(node, meta.AxisMetadata):
        names = getattr(node, "names", None)
        return () if names is None else tuple(names)
    variables = sys.modules.get("flax.nnx.variablelib")
    if variables is not None and isinstance(node, variables.Variable):
        found = node.get_metadata()
        for key in ("out_sharding", "sharding_names", "sharding"):
            if found.get(key) is not None:
                return tuple(found[key])
        return ()
    return None


def _is_box(node: Any) -> bool:
    return _box_names(node) is not None


class _Names:
    """A leaf wrapper for a tuple of axis names (a tuple would be a subtree)."""

    def __init__(self, names: tuple | None):
        self.names = names


def _is_names(x: Any) -> bool:
    if x is None or isinstance(x, jax.sharding.PartitionSpec):
        return True
    return isinstance(x, tuple) and all(n is None or isinstance(n, str | tuple) for n in x)


def _records(who: str, tree: Any, axis_names: Any) -> list[tuple[tuple, str, tuple, tuple | None]]:
    """(key path, path, shape, axis names or None) per leaf of `tree`, in flattening order."""
    spread: list[Any] | None = None
    if axis_names is not None:
        from ..tree._patterns import broadcast_prefix

        wrapped = jax.tree.map(
            lambda n: _Names(None if n is None else tuple(n)), axis_names, is_leaf=_is_names
        )
        full = broadcast_prefix(wrapped, tree, who=who, what="axis_names")
        spread = [w.names for w in jax.tree.leaves(full, is_leaf=lambda x: isinstance(x, _Names))]
    out: list[tuple[tuple, str, tuple, tuple | None]] = []
    for key_path, node in jtu.tree_flatten_with_path(tree, is_leaf=_is_box)[0]:
        boxed = _box_names(node)
        for leaf in jax.tree.leaves(node) if boxed is not None else [node]:
            names = boxed or None
            if names is None and spread is not None:
                names = spread[len(out)]
            out.append((key_path, path_str(key_path), tuple(np.shape(leaf)), names))
    if spread is not None and len(spread) != len(out):
        raise ValueError(f"{who}: axis_names gives {len(spread)} leaves, the params {len(out)}")
    return out


# --------------------------------------------------------------------------------------------
# The rules
# --------------------------------------------------------------------------------------------


def _is_index(key: Any) -> bool:
    if isinstance(key, jtu.SequenceKey):
        return True
    return isinstance(key, jtu.DictKey) and isinstance(key.key, int)


def _stack_components(key_path: tuple, *, leaf: bool = False) -> list[str]:
    """The path components that mark a stack axis: the modules above the leaf, and with `leaf`
    the leaf's own name too (`{"experts": (E, d, f)}`)."""
    found = []
    for i, key in enumerate(key_path if leaf else key_path[:-1]):
        name = path_str((key,))
        # `layers/0/...`: a list of separate modules
        listed = i + 1 < len(key_path) and _is_index(key_path[i + 1])
        if not listed and (name.lower() in _STACK or _SCAN_MODULE.match(name)):
            found.append(name)
    return found


def _is_stack_name(name: Any) -> bool:
    """Whether one axis's name (a string, None, or a tuple of mesh axes) marks a batch axis."""
    names = name if isinstance(name, tuple) else (name,)
    return any(isinstance(n, str) and n.lower() in _STACK for n in names)


def _matrix(rest: list[int], why: str, path: str, shape: tuple) -> Decision:
    return Decision(path, shape, InferredDimensionNumbers((rest[0],), (rest[1],)), why)


def _decide(key_path: tuple, path: str, shape: tuple, names: tuple | None) -> Decision:
    rank = len(shape)
    if rank < 2:
        return Decision(path, shape, None, "rank < 2")
    if names is not None and len(names) != rank:
        names = None  # metadata of another rank (a transform that did not record its axis)
    stacked = [a for a, n in enumerate(names or ()) if _is_stack_name(n)]
    by_path = False
    if stacked:
        why = f"axis names {tuple(names or ())}"
        decided = _by_rest(path, shape, stacked, why, key_path, by_path=False)
        return decided._replace(from_names=True, stacked=tuple(stacked))
    else:
        # a leaf of rank >= 3 named like a stack is one; a 2-D one may be a matrix so named
        components = _stack_components(key_path, leaf=rank >= 3)
        leaf_name = path_str(key_path[-1:]) if key_path else ""
        if components and (rank >= 3 or leaf_name in VECTOR_LEAF_NAMES):
            stacked = list(range(min(len(components), rank)))
            by_path = True
            why = f"path names {components}: leading batch axes"
        elif rank == 2:
            return _matrix([0, 1], "2-D default", path, shape)
        else:
            why = f"axis names {names}" if names is not None else "no axis or path names"
    decided = _by_rest(path, shape, stacked, why, key_path, by_path=by_path)
    return decided._replace(stacked=tuple(stacked))


def _by_rest(
    path: str, shape: tuple, stacked: list[int], why: str, key_path: tuple, *, by_path: bool
) -> Decision:
    """The decision once the batch axes `stacked` are known, by the axes left."""
    rest = [a for a in range(len(shape)) if a not in stacked]
    if len(rest) < 2:
        return Decision(path, shape, None, f"{why}; a stack of vectors, not a matrix")
    if len(rest) == 2:
        return _matrix(rest, why, path, shape)
    conv = [path_str((k,)) for k in key_path[:-1] if _CONV.search(path_str((k,)))]
    if conv and not by_path:
        dims = InferredDimensionNumbers(tuple(rest[:-1]), (rest[-1],))
        kernel = f"conv name {conv[-1]!r}: a kernel (*spatial, c_in, c_out)"
        return Decision(path, shape, dims, kernel if not stacked else f"{why}; {kernel}")
    if conv:
        reason = (
            f"{why}, and a conv name: a layer axis and a spatial axis cannot be told apart "
            "without axis names"
        )
    else:
        reason = f"{why}; {len(rest)} axes left and no conv name"
    return Decision(path, shape, None, why, ambiguous=reason)


def decisions(who: str, spec: MatrixAxes | None, tree: Any, *, strict: bool = True) -> list:
    """The `Decision` of each leaf of `tree` (flattening order) under `spec` (None: no
    overrides, no axis names); `strict` reports overrides that match nothing."""
    spec = spec or MatrixAxes({}, None)
    strict = strict and spec.strict
    records = _records(who, tree, spec.axis_names)
    chosen: list[Any] = [None] * len(records)
    if spec.overrides:
        rules = {p: _Override(p, v) for p, v in spec.overrides.items()}
        # Matched on the records' paths (a boxed parameter's is its box's), as a flat dict.
        by_path = resolve_rules(
            who,
            "the matrix axes overrides",
            rules,
            {path: 0 for _, path, _, _ in records},
            default=None,
            strict=strict,
        )
        chosen = [by_path[path] for _, path, _, _ in records]
    out = []
    for (key_path, path, shape, names), override in zip(records, chosen, strict=True):
        if override is not None:
            out.append(Decision(path, shape, override.dims, f"override {override.pattern!r}"))
        else:
            out.append(_decide(key_path, path, shape, names))
    return out


class _Override(NamedTuple):
    pattern: str
    dims: Any


class NamedDecisions:
    """The decisions made from axis names, kept by leaf path and shape, so that they hold when
    the same transformation sees those leaves again without their metadata: `nnx.Optimizer`
    passes boxed params to `init` and plain arrays to `update`, and a state's layout is fixed
    at `init`."""

    def __init__(self) -> None:
        self._kept: dict[tuple[str, tuple[int, ...]], Decision] = {}

    def hold(self, found: list[Decision]) -> list[Decision]:
        """`found`, each decision not made from axis names replaced by the one that was, for
        the same leaf, before; the decisions made from axis names are kept."""
        out = []
        for d in found:
            key = (d.path, d.shape)
            if d.from_names:
                self._kept[key] = d
            elif key in self._kept:
                d = self._kept[key]
            out.append(d)
        return out


# --------------------------------------------------------------------------------------------
# Reporting
# --------------------------------------------------------------------------------------------

_DIMS_CLASS = {
    "soap": "SoapDimensionNumbers",
    "shampoo": "ShampooDimensionNumbers",
    "dion": "DionDimensionNumbers",
    "galore": "GaLoreDimensionNumbers",
    "apollo": "GaLoreDimensionNumbers",
    "fira": "GaLoreDimensionNumbers",
}
_ARGUMENT = {"muon": "muon_weight_dimension_numbers"}


def ambiguous_error(who: str, decision: Decision) -> ValueError:
    """The error for a leaf whose matrix axes cannot be inferred: names it, says why, and
    shows the override."""
    base = who.removeprefix("scale_by_")
    dims_class = _DIMS_CLASS.get(base, "MuonDimensionNumbers")
    argument = _ARGUMENT.get(who, "weight_dimension_numbers")
    rank = len(decision.shape)
    example = "reduction_axis=1, output_axis=2"  # a (batch, rows, columns) stack
    if rank == 4:
        example = "reduction_axis=(0, 1, 2), output_axis=3"  # a conv kernel
    return ValueError(
        f"{who}: cannot tell which axes of {decision.path!r} (shape {decision.shape}) form the "
        f"matrix ({decision.ambiguous}); a {rank}-D leaf is never flattened silently. Say it: "
        f"{argument}=gradtx.contrib.infer_matrix_axes({{{decision.path!r}: "
        f"gradtx.contrib.{dims_class}({example})}}) (the other axes are batch axes), or "
        f"{{{decision.path!r}: None}} to leave it out (the alias's AdamW); "
        "gradtx.contrib.explain_matrix_axes(params) shows every leaf's decision"
    )


def format_table(rows: list[tuple[str, tuple, str, str, str, str]]) -> str:
    """A plain-text table of (path, shape, batch, reduction, output, why) rows."""
    header = ("path", "shape", "batch", "reduction", "output", "why")
    body = [(p, str(s), b, r, o, w) for p, s, b, r, o, w in rows]
    widths = [max(len(row[i]) for row in [header, *body]) for i in range(5)]
    lines = []
    for row in [header, *body]:
        cells = [row[i].ljust(widths[i]) for i in range(5)]
        lines.append("  ".join([*cells, row[5]]).rstrip())
    return "\n".join(lines)


_LOGGED: set[tuple[str, str]] = set()


def log_once(who: str, table: str) -> None:
    """Log a table of matrix-axes decisions at INFO level, once per process for each
    (transformation, table)."""
    if (who, table) in _LOGGED or len(_LOGGED) > 1024:
        return
    _LOGGED.add((who, table))
    _log.info("%s: which axes form each matrix\n%s", who, table)


__all__ = [
    "STACK_AXIS_NAMES",
    "VECTOR_LEAF_NAMES",
    "Decision",
    "InferredDimensionNumbers",
    "MatrixAxes",
    "NamedDecisions",
    "ambiguous_error",
    "decisions",
    "format_table",
    "infer_matrix_axes",
    "log_once",
]
