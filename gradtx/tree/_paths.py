"""Key paths of pytrees (internal; public as `gradtx.tree.*`): '/'-joined leaf paths, structure
checks whose errors name the first differing path, and reading / replacing fields by name.

A path names a tree position by its keys from the root: dict keys, NamedTuple and dataclass field
names, and sequence indices, joined by '/' (`"encoder/layers/0/kernel"`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import tree_util as jtu

from .._base._typing import PyTree

# --------------------------------------------------------------------------------------------
# Paths
# --------------------------------------------------------------------------------------------


def _key_name(key: Any) -> str:
    if isinstance(key, jtu.DictKey):
        return str(key.key)
    if isinstance(key, jtu.GetAttrKey):
        return key.name
    if isinstance(key, jtu.SequenceKey):
        return str(key.idx)
    if isinstance(key, jtu.FlattenedIndexKey):
        return str(key.key)
    return str(key)


def path_str(key_path: Sequence[Any]) -> str:
    """A JAX key path as a '/'-joined string: `(DictKey('a'), SequenceKey(0))` -> `"a/0"`."""
    return "/".join(_key_name(k) for k in key_path)


def paths(tree: PyTree) -> list[str]:
    """The '/'-joined key path of every (non-None) leaf, in flattening order."""
    return [path_str(p) for p, _ in jtu.tree_flatten_with_path(tree)[0]]


def named_leaves(
    who: str,
    tree: PyTree,
    *,
    root: str = "",
    error: type[ValueError] = ValueError,
    is_leaf: Callable[[Any], bool] | None = None,
) -> tuple[list[tuple[str, Any]], Any]:
    """`(path, leaf)` pairs in flattening order and the treedef, with every path unique.

    Two leaves can share a '/'-joined path (a dict key holding '/', or `{"a/b": x, "a": {"b":
    y}}`); where paths are names (state dicts, checkpoints, orbax keys, `migrate`'s matching)
    that is an `error` naming the path, both leaves by their key paths (`['a/b']` and
    `['a']['b']`) and the fix. A leaf at the root is named `root`.
    """
    with_path, treedef = jtu.tree_flatten_with_path(tree, is_leaf=is_leaf)
    items: list[tuple[str, Any]] = []
    seen: dict[str, Any] = {}
    for key_path, leaf in with_path:
        key = path_str(key_path) or root
        if key in seen:
            raise error(
                f"{who}: two leaves have the path {key!r}; rename the dict key that contains "
                f"'/' or that repeats a sibling's name (the leaves at {jtu.keystr(seen[key])} "
                f"and {jtu.keystr(key_path)})"
            )
        seen[key] = key_path
        items.append((key, leaf))
    return items, treedef


def map_with_path(
    f: Callable[..., Any], tree: PyTree, *rest: PyTree, is_leaf: Callable[[Any], bool] | None = None
) -> PyTree:
    """`jax.tree.map` where `f(path, leaf, *rest_leaves)` also gets the '/'-joined leaf path."""
    return jtu.tree_map_with_path(
        lambda kp, x, *r: f(path_str(kp), x, *r), tree, *rest, is_leaf=is_leaf
    )


def _is_tree_leaf(node: Any) -> bool:
    return node is None or jtu.treedef_is_leaf(jax.tree.structure(node))


def _children(node: Any) -> list[tuple[Any, Any]]:
    """The (key, child) pairs one level below `node` (None children included)."""
    if _is_tree_leaf(node):
        return []
    flat, _ = jtu.tree_flatten_with_path(node, is_leaf=lambda y: y is not node)
    return [(kp[0], child) for kp, child in flat]


def _walk(node: Any, path: tuple = ()) -> Iterator[tuple[tuple, Any]]:
    """Pre-order (key path, node) for every node below the root (subtrees and leaves)."""
    for key, child in _children(node):
        p = (*path, key)
        yield p, child
        yield from _walk(child, p)


# --------------------------------------------------------------------------------------------
# Structure checks with errors that name the first difference
# --------------------------------------------------------------------------------------------


def _kind(x: Any) -> str:
    if x is None:
        return "None"
    if _is_tree_leaf(x):
        if hasattr(x, "shape") and hasattr(x, "dtype"):
            return f"a leaf {jnp.dtype(x.dtype).name}{list(x.shape)}"
        return f"a leaf of type {type(x).__name__}"
    keys = [_key_name(k) for k, _ in _children(x)]
    if isinstance(x, dict):
        return f"a dict with keys {keys}"
    if isinstance(x, tuple) and hasattr(x, "_fields"):
        return f"a {type(x).__name__} with fields {keys}"
    if isinstance(x, list | tuple):
        return f"a {type(x).__name__} of length {len(x)}"
    return f"a {type(x).__name__} with children {keys}"


def _first_difference(a: Any, b: Any, path: tuple = ()) -> tuple[tuple, Any, Any] | None:
    a_leaf, b_leaf = _is_tree_leaf(a), _is_tree_leaf(b)
    if a_leaf and b_leaf:
        return None if (a is None) == (b is None) else (path, a, b)
    if a_leaf != b_leaf or type(a) is not type(b):
        return path, a, b
    ca, cb = _children(a), _children(b)
    if [k for k, _ in ca] != [k for k, _ in cb] or (
        jax.tree.structure(a, is_leaf=lambda y: y is not a)
        != jax.tree.structure(b, is_leaf=lambda y: y is not b)
    ):
        return path, a, b
    for (key, xa), (_, xb) in zip(ca, cb, strict=True):
        found = _first_difference(xa, xb, (*path, key))
        if found is not None:
            return found
    return None


def assert_same_structure(who: str, **trees: PyTree) -> None:
    """Raise a `ValueError` unless all `trees` have the same structure.

    The error names `who` (the transformation), the first differing key path and what each tree
    has there, e.g. ``trace: updates and state.trace differ at 'dense/bias': updates has None,
    state.trace has a leaf float32[4]``. The check costs one treedef comparison when the trees
    match, and runs at trace time only under `jax.jit`.
    """
    items = list(trees.items())
    if len(items) < 2:
        return
    name0, tree0 = items[0]
    def0 = jax.tree.structure(tree0)
    for name, other in items[1:]:
        if jax.tree.structure(other) == def0:
            continue
        diff = _first_difference(tree0, other)
        if diff is None:  # same nesting, different leaf kinds the walk does not distinguish
            raise ValueError(
                f"{who}: {name0} and {name} have different tree structures: "
                f"{def0} vs {jax.tree.structure(other)}"
            )
        path, xa, xb = diff
        where_ = f"'{path_str(path)}'" if path else "the root"
        detail = ""
        if not (_is_tree_leaf(xa) or _is_tree_leaf(xb)):
            ka = [_key_name(k) for k, _ in _children(xa)]
            kb = [_key_name(k) for k, _ in _children(xb)]
            only_a, only_b = [k for k in ka if k not in kb], [k for k in kb if k not in ka]
            if only_a or only_b:
                detail = f" (only in {name0}: {only_a}; only in {name}: {only_b})"
        raise ValueError(
            f"{who}: {name0} and {name} differ at {where_}: {name0} has {_kind(xa)}, "
            f"{name} has {_kind(xb)}{detail}. They must have the same tree structure (same keys, "
            "same nesting, None in the same places)."
        )


# --------------------------------------------------------------------------------------------
# Reading and replacing state fields by name
# --------------------------------------------------------------------------------------------

# Field names of NamedTuples/dataclasses are preferred over dict keys, and both over sequence
# indices, so `get(state, "mu")` finds the Adam moment even when a parameter is called "mu".
_TIERS = (jtu.GetAttrKey, jtu.DictKey, jtu.SequenceKey, jtu.FlattenedIndexKey)


def _tier(key: Any) -> int:
    for i, kind in enumerate(_TIERS):
        if isinstance(key, kind):
            return i
    return len(_TIERS)


def _replacement(old: Any, new: Any, where_: str) -> Any:
    if old is not None and _is_tree_leaf(old) and hasattr(old, "dtype"):
        if jnp.issubdtype(old.dtype, jnp.integer) and not isinstance(new, jax.core.Tracer):
            given = np.asarray(new)
            if jnp.issubdtype(given.dtype, jnp.inexact) and not np.all(np.mod(given, 1) == 0):
                raise ValueError(
                    f"set: {where_!r} holds integers ({np.dtype(old.dtype).name}); the value "
                    f"{new!r} would be truncated. An integer-valued hyperparameter was injected "
                    "as an int: give it as a float (e.g. 1.0) to inject_hyperparams"
                )
        value = jnp.asarray(new, dtype=old.dtype)
        if value.shape != jnp.shape(old):
            raise ValueError(
                f"set: the value for {where_!r} has shape {value.shape}, expected {jnp.shape(old)}"
            )
        return value
    assert_same_structure("set", **{f"current {where_}": old, f"new {where_}": new})
    return new


__all__ = [
    "assert_same_structure",
    "map_with_path",
    "path_str",
    "paths",
]
