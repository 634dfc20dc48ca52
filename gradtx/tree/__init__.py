"""Pytree helpers: arithmetic on whole trees, global norms, key paths, state access by name, and
the glob patterns that select parameters; a drop-in for `optax.tree` (same names, arguments and
defaults).

Every function here treats `None` leaves as absent (they pass through unchanged), accepts
`jax.ShapeDtypeStruct` leaves where only shapes and dtypes are needed (`zeros_like`, `size`), and
names tree positions with '/'-joined key paths (`"encoder/layers/0/kernel"`): dict keys, NamedTuple
and dataclass field names, and sequence indices, joined by '/'.

The arithmetic lives in `_math.py`; paths and structure checks in `_paths.py`; the pattern
language and prefix broadcasting in `_patterns.py` (docs/patterns.md). This module holds reading
and replacing state by name (`get`, `get_all_with_path`, `set`, `map_params`), where a name is a
field or key name, a NamedTuple's class name (`"ScaleByAdamState"`), or a '/'-joined suffix of
them (`"ScaleByAdamState/mu"`, `"0/count"`).
"""

from __future__ import annotations

import builtins
import dataclasses
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import jax
from jax import tree_util as jtu

from .._base._checks import did_you_mean
from .._base._typing import PyTree
from ._math import add as add
from ._math import add_scale as add_scale
from ._math import allclose as allclose
from ._math import batch_shape as batch_shape
from ._math import bias_correction as bias_correction
from ._math import cast as cast
from ._math import cast_like as cast_like
from ._math import clip as clip
from ._math import conj as conj
from ._math import div as div
from ._math import dtype as dtype
from ._math import full_like as full_like
from ._math import map_split as map_split
from ._math import max as max
from ._math import min as min
from ._math import mul as mul
from ._math import norm as norm
from ._math import ones_like as ones_like
from ._math import random_like as random_like
from ._math import real as real
from ._math import scale as scale
from ._math import size as size
from ._math import split_key_like as split_key_like
from ._math import sub as sub
from ._math import sum as sum
from ._math import unwrap_random_key_data as unwrap_random_key_data
from ._math import update_infinity_moment as update_infinity_moment
from ._math import update_moment as update_moment
from ._math import update_moment_per_elem_norm as update_moment_per_elem_norm
from ._math import vdot as vdot
from ._math import where as where
from ._math import zeros_like as zeros_like
from ._nonfinite import NonfiniteLocation as NonfiniteLocation
from ._nonfinite import first_nonfinite as first_nonfinite
from ._paths import _children, _is_tree_leaf, _key_name, _replacement, _tier
from ._paths import assert_same_structure as assert_same_structure
from ._paths import map_with_path as map_with_path
from ._paths import path_str as path_str
from ._paths import paths as paths
from ._patterns import broadcast_prefix as broadcast_prefix
from ._patterns import glob_matches as glob_matches
from ._patterns import match as match

__all__ = [
    "NamedTupleKey",
    "NonfiniteLocation",
    "add",
    "add_scale",
    "allclose",
    "assert_same_structure",
    "batch_shape",
    "bias_correction",
    "broadcast_prefix",
    "cast",
    "cast_like",
    "clip",
    "conj",
    "div",
    "dtype",
    "first_nonfinite",
    "full_like",
    "get",
    "get_all_with_path",
    "glob_matches",
    "map_params",
    "map_split",
    "map_with_path",
    "match",
    "max",
    "min",
    "mul",
    "norm",
    "ones_like",
    "path_str",
    "paths",
    "random_like",
    "real",
    "scale",
    "set",
    "size",
    "split_key_like",
    "sub",
    "sum",
    "unwrap_random_key_data",
    "update_infinity_moment",
    "update_moment",
    "update_moment_per_elem_norm",
    "vdot",
    "where",
    "zeros_like",
]

# --------------------------------------------------------------------------------------------
# Finding nodes by name
# --------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class NamedTupleKey:
    """The key of a NamedTuple's field in the paths that a `filtering(path, value)` callable of
    `get` / `get_all_with_path` / `set` receives (Optax's `NamedTupleKey`): the tuple's class
    name and the field name, so a filter can tell apart fields of the same name in different
    states (`path[-1].tuple_name == "ScaleByAdamState"`)."""

    tuple_name: str
    name: str

    def __str__(self) -> str:
        return f"{self.tuple_name}.{self.name}"


Filtering = Callable[[tuple, Any], bool]
_MISSING: Any = object()


class _AmbiguousKeyError(KeyError, ValueError):
    """A name found more than once: a `ValueError` (gradtx) and a `KeyError` (what Optax
    raises), with a plain message."""

    def __str__(self) -> str:
        return str(self.args[0])


def _is_named_tuple(node: Any) -> bool:
    return isinstance(node, tuple) and hasattr(node, "_fields")


def _walk_chains(node: Any, path: tuple = (), chain: tuple = ()) -> Iterator[tuple[tuple, tuple]]:
    """Pre-order (key path, nodes along it) for every node below `node`."""
    for key, child in _children(node):
        p, c = (*path, key), (*chain, child)
        yield p, c
        yield from _walk_chains(child, p, c)


def _optax_path(path: tuple, parents: tuple) -> tuple:
    """The key path with a NamedTuple's fields as `NamedTupleKey`s (what Optax's filters see)."""
    out = []
    for key, parent in zip(path, parents, strict=True):
        if _is_named_tuple(parent) and isinstance(key, jtu.GetAttrKey):
            out.append(NamedTupleKey(type(parent).__name__, key.name))
        else:
            out.append(key)
    return tuple(out)


def _match_tier(want: list[str], keys: tuple, nodes: tuple) -> int | None:
    """The tier of the match of `want` on the last entries of (keys, nodes), or None.

    An entry matches a component by its key name (tier of its key kind) or, for a NamedTuple
    node, by its class name (tier 0, with field names); the root entry (key None) only by class.
    """
    if len(want) > len(keys):
        return None
    tier = None
    for part, key, node in zip(want, keys[-len(want) :], nodes[-len(want) :], strict=True):
        tiers = []
        if key is not None and _key_name(key) == part:
            tiers.append(_tier(key))
        if _is_named_tuple(node) and type(node).__name__ == part:
            tiers.append(0)
        if not tiers:
            return None
        tier = builtins.min(tiers)
    return tier


def _find(tree: PyTree, key: Any, filtering: Filtering | None) -> list[tuple[tuple, Any]]:
    """Nodes whose path ends with `key` ('/'-separated names), best tier only, outermost only."""
    want = str(key).split("/")
    found: list[tuple[tuple, Any, int]] = []
    candidates = [((), ())]
    candidates += list(_walk_chains(tree))
    for path, chain in candidates:
        node = chain[-1] if chain else tree
        tier = _match_tier(want, (None, *path), (tree, *chain))
        if tier is None:
            continue
        if filtering is not None and not filtering(_optax_path(path, (tree, *chain[:-1])), node):
            continue
        found.append((path, node, tier))
    if not found:
        return []
    best = builtins.min([t for _, _, t in found])
    kept = [(p, n) for p, n, t in found if t == best]
    return [
        (p, n) for p, n in kept if not any(len(q) < len(p) and p[: len(q)] == q for q, _ in kept)
    ]


def _available_names(tree: PyTree) -> list[str]:
    names: list[str] = []
    nodes = [tree] + [chain[-1] for _, chain in _walk_chains(tree)]
    keys = [None] + [path[-1] for path, _ in _walk_chains(tree)]
    for key, node in zip(keys, nodes, strict=True):
        for name in (
            _key_name(key) if key is not None and _tier(key) < 2 else None,
            type(node).__name__ if _is_named_tuple(node) else None,
        ):
            if name is not None and name not in names:
                names.append(name)
    return names


def _not_found(who: str, tree: PyTree, key: Any, filtering: Filtering | None) -> KeyError:
    names = _available_names(tree)
    given = " that the filtering accepts" if filtering is not None else ""
    return KeyError(
        f"{who}: no field or key {key!r} (nor NamedTuple of that name){given} in the tree"
        f"{did_you_mean(str(key), names)}; names present: {names}"
    )


# --------------------------------------------------------------------------------------------
# get / get_all_with_path / set / map_params
# --------------------------------------------------------------------------------------------


def get_all_with_path(
    tree: PyTree, key: Any, filtering: Filtering | None = None
) -> list[tuple[str, Any]]:
    """Every `(path, value)` whose key path ends with `key`; `[]` when there is none.

    `key` is a field or key name (`"mu"`, `"count"`, `"learning_rate"`), a NamedTuple's class
    name (`"ScaleByAdamState"`, which finds the state itself), or a '/'-joined path suffix of
    these (`"0/count"`, `"ScaleByAdamState/mu"`). NamedTuple/dataclass fields and class names are
    preferred over dict keys, and matches nested inside another match are not reported.
    `filtering(path, value) -> bool`, when given, keeps only the matches it accepts; its `path`
    is the JAX key path with a NamedTuple's fields as `NamedTupleKey`s (as in Optax).

    The paths returned are '/'-joined strings (`"adam/count"`), "" for the root.
    """
    return [(path_str(p), n) for p, n in _find(tree, key, filtering)]


def get(tree: PyTree, key: Any, default: Any = _MISSING, filtering: Filtering | None = None) -> Any:
    """The value of the field, key or NamedTuple called `key` anywhere in `tree` (e.g. an
    optimizer state), as `get_all_with_path` finds it.

    Raises:
      KeyError: `key` is not present (and no `default` was given); lists the names there are.
      ValueError: `key` is present more than once (it is also a `KeyError`, as in Optax); lists
        the paths, any of which (or a long enough suffix of one) can be passed instead.
    """
    found = _find(tree, key, filtering)
    if not found:
        if default is not _MISSING:
            return default
        raise _not_found("get", tree, key, filtering)
    if len(found) > 1:
        raise _AmbiguousKeyError(
            f"get: {key!r} is ambiguous, it occurs at {[path_str(p) for p, _ in found]}; "
            "pass one of these paths (or a unique suffix of one), or a filtering, instead"
        )
    return found[0][1]


def set(
    tree: PyTree,
    filtering: Filtering | Mapping[str, Any] | None = None,
    /,
    **kwargs: Any,
) -> PyTree:
    """A copy of `tree` with the fields, keys or NamedTuples called `name` replaced, for each
    `name=value`.

    Every match of a name is replaced (e.g. `set(state, count=0)` resets every counter in a
    chain); the second argument is either Optax's `filtering(path, value) -> bool` (only the
    matches it accepts are replaced) or a mapping of names to values, for path suffixes that are
    not identifiers (`set(state, {"0/count": 0})`). An array leaf keeps its dtype and shape (a
    float replacing a float32 learning rate stays float32, so a jitted step does not retrace); a
    replaced subtree (`set(state, ScaleByAdamState=new)`) must keep its structure.

    Raises:
      KeyError: a name is not present (or the filtering accepts none of its matches).
    """
    if isinstance(filtering, Mapping):
        updates, filtering = {**filtering, **kwargs}, None
    elif filtering is None or callable(filtering):
        updates = dict(kwargs)
    else:
        raise TypeError(
            "set: the second argument must be a filtering(path, value) -> bool or a mapping of "
            f"names to values, got {filtering!r}"
        )
    targets: dict[tuple, Any] = {}
    for name, value in updates.items():
        found = _find(tree, name, filtering)
        if not found:
            raise _not_found("set", tree, name, filtering)
        for path, old in found:
            targets[path] = _replacement(old, value, path_str(path) or str(name))

    def rebuild(node: Any, path: tuple) -> Any:
        if path in targets:
            return targets[path]
        if _is_tree_leaf(node):
            return node
        flat, treedef = jax.tree.flatten(node, is_leaf=lambda y: y is not node)
        keys = [k for k, _ in _children(node)]
        return treedef.unflatten(
            [rebuild(child, (*path, k)) for k, child in zip(keys, flat, strict=True)]
        )

    return rebuild(tree, ())


@jtu.register_pytree_node_class
class _ParamsPlaceholder:
    """Stands for the params in `map_params`: a pytree node with no leaves."""

    def tree_flatten(self) -> tuple[tuple, None]:
        return (), None

    @classmethod
    def tree_unflatten(cls, aux: Any, children: Any) -> _ParamsPlaceholder:
        del aux, children
        return cls()


def map_params(
    initable: Any,
    f: Callable[..., Any],
    state: PyTree,
    /,
    *rest: Any,
    transform_non_params: Callable[..., Any] | None = None,
    is_leaf: Callable[[Any], bool] | None = None,
) -> PyTree:
    """`f` mapped over every copy of the params inside an optimizer state (e.g. to build the
    state's partition specs from the params').

    Args:
      initable: the transformation (anything with an `init`), or an `init` function.
      f: called per leaf of each params-shaped subtree, with the matching leaves of `rest`.
      state: the state to map over, made by `initable`'s `init`.
      *rest: trees shaped like the params, passed to `f`.
      transform_non_params: applied to every other part of the state (default: kept).
      is_leaf: passed to `jax.tree.map` over the params-shaped subtrees.

    The params-shaped parts are found by calling `init` on a placeholder for the params, so a
    state buffer that is not a copy of the params' structure counts as "non params".
    """
    init = getattr(initable, "init", initable)
    skeleton = init(_ParamsPlaceholder())

    def per_part(marker: Any, value: Any) -> Any:
        if isinstance(marker, _ParamsPlaceholder):
            return jax.tree.map(f, value, *rest, is_leaf=is_leaf)
        if transform_non_params is not None:
            return transform_non_params(value)
        return value

    return jax.tree.map(
        per_part, skeleton, state, is_leaf=lambda v: isinstance(v, _ParamsPlaceholder)
    )
