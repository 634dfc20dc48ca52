"""Pytree helpers: arithmetic on whole trees, global norms, state access by name, path globs.

Every function here treats `None` leaves as absent (they pass through unchanged), accepts
`jax.ShapeDtypeStruct` leaves where only shapes and dtypes are needed (`zeros_like`, `size`), and
names tree positions with '/'-joined key paths (`"encoder/layers/0/kernel"`): dict keys, NamedTuple
and dataclass field names, and sequence indices, joined by '/'.
"""

from __future__ import annotations

import builtins
import functools
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
from jax import tree_util as jtu

from ._checks import did_you_mean
from ._numerics import wide_float
from ._typing import ArrayLike, PyTree

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
    return wide_float(*(x.dtype for x in leaves))


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
    """Inner product of two trees: the sum over leaves of `vdot(x, y)`, in float32 or wider."""
    xs, ys = _leaves(tree_x), _leaves(tree_y)
    if len(xs) != len(ys):
        raise ValueError(f"vdot: trees have {len(xs)} and {len(ys)} leaves")
    dtype = _acc_dtype(xs + ys)
    total = jnp.zeros([], dtype)
    for x, y in zip(xs, ys, strict=True):
        total = total + jnp.vdot(x.astype(dtype), y.astype(dtype)).real.astype(dtype)
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


def map_with_path(
    f: Callable[..., Any], tree: PyTree, *rest: PyTree, is_leaf: Callable[[Any], bool] | None = None
) -> PyTree:
    """`jax.tree.map` where `f(path, leaf, *rest_leaves)` also gets the '/'-joined leaf path."""
    return jtu.tree_map_with_path(
        lambda kp, x, *r: f(path_str(kp), x, *r), tree, *rest, is_leaf=is_leaf
    )


def map_split(f: Callable[..., tuple], n: int, tree: PyTree, *rest: PyTree) -> tuple:
    """`jax.tree.map` for an `f` that returns an `n`-tuple per leaf: returns `n` trees.

    Lets a transformation compute its new update and its new state buffers in one pass per leaf.
    """
    out = jax.tree.map(f, tree, *rest)
    return tuple(jax.tree.map(lambda _, o, i=i: o[i], tree, out) for i in range(n))


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


def broadcast_prefix(
    prefix: Any, tree: PyTree, *, who: str = "broadcast_prefix", what: str = "prefix"
) -> PyTree:
    """A tree shaped like `tree` holding, at each leaf, the value of `prefix` above it.

    `prefix` has `tree`'s structure or is a prefix of it: each of its leaves stands for the whole
    subtree of `tree` below it (e.g. `{"encoder": False, "head": True}` for a mask, or
    `{"encoder": "adam", "head": "sgd"}` for labels). None leaves of `tree` stay None.

    Raises:
      ValueError: naming `who`, `what` (the prefix's role, e.g. "mask") and the first path where
        `prefix` is not a prefix of `tree`, with what each has there, e.g. ``multi_transform:
        labels must have the params' tree structure or be a prefix of it; they differ at 'head':
        labels has a dict with keys ['w'], params have a dict with keys ['b', 'w']``.

    Example:
      >>> import gradtx
      >>> gradtx.tree.broadcast_prefix({"a": 1, "b": 2}, {"a": {"x": 0.0, "y": 0.0}, "b": 0.0})
      {'a': {'x': 1, 'y': 1}, 'b': 2}
    """
    try:
        return jax.tree.map(
            lambda v, sub: jax.tree.map(lambda _: v, sub),
            prefix,
            tree,
            is_leaf=lambda x: x is None,
        )
    except ValueError:
        found = _prefix_difference(prefix, tree, ())
        where_ = f"'{path_str(found[0])}'" if found and found[0] else "the root"
        detail = f": {what} has {_kind(found[1])}, params have {_kind(found[2])}" if found else ""
        raise ValueError(
            f"{who}: {what} must have the params' tree structure or be a prefix of it; they "
            f"differ at {where_}{detail}"
        ) from None


def _prefix_difference(prefix: Any, tree: Any, path: tuple) -> tuple[tuple, Any, Any] | None:
    """The first place where `prefix` is not a prefix of `tree`: (path, prefix's node, tree's)."""
    if _is_tree_leaf(prefix):
        return None
    kids_p, kids_t = _children(prefix), _children(tree)
    same_kind = type(prefix) is type(tree) or (
        isinstance(prefix, Mapping) and isinstance(tree, Mapping)
    )
    if not same_kind or [k for k, _ in kids_p] != [k for k, _ in kids_t]:
        return path, prefix, tree
    for (key, a), (_, b) in zip(kids_p, kids_t, strict=True):
        found = _prefix_difference(a, b, (*path, key))
        if found is not None:
            return found
    return None


# --------------------------------------------------------------------------------------------
# Reading and replacing state fields by name
# --------------------------------------------------------------------------------------------

_MISSING = object()
# Field names of NamedTuples/dataclasses are preferred over dict keys, and both over sequence
# indices, so `get(state, "mu")` finds the Adam moment even when a parameter is called "mu".
_TIERS = (jtu.GetAttrKey, jtu.DictKey, jtu.SequenceKey, jtu.FlattenedIndexKey)


def _tier(key: Any) -> int:
    for i, kind in enumerate(_TIERS):
        if isinstance(key, kind):
            return i
    return len(_TIERS)


def _find(tree: PyTree, name: str) -> list[tuple[tuple, Any]]:
    """Nodes whose path ends with `name` ('/'-separated), best tier only, outermost only."""
    want = name.split("/")
    found = []
    for path, node in _walk(tree):
        if len(path) >= len(want) and [_key_name(k) for k in path[-len(want) :]] == want:
            found.append((path, node))
    if not found:
        return []
    best = min(_tier(p[-1]) for p, _ in found)
    found = [(p, n) for p, n in found if _tier(p[-1]) == best]
    outer = []
    for p, n in found:
        if not any(len(q) < len(p) and p[: len(q)] == q for q, _ in found):
            outer.append((p, n))
    return outer


def _available_names(tree: PyTree) -> list[str]:
    names: list[str] = []
    for path, _ in _walk(tree):
        if _tier(path[-1]) < 2 and _key_name(path[-1]) not in names:
            names.append(_key_name(path[-1]))
    return names


def get_all_with_path(tree: PyTree, name: str) -> list[tuple[str, Any]]:
    """Every `(path, value)` whose key path ends with `name`; `[]` when there is none.

    `name` is a field or key name (`"mu"`, `"count"`, `"learning_rate"`) or a '/'-joined path
    suffix (`"0/count"`). NamedTuple/dataclass fields are preferred over dict keys, and matches
    nested inside another match are not reported.
    """
    return [(path_str(p), n) for p, n in _find(tree, name)]


def get(tree: PyTree, name: str, default: Any = _MISSING) -> Any:
    """The value of the field or key called `name` anywhere in `tree` (e.g. an optimizer state).

    Raises:
      KeyError: `name` is not present (and no `default` was given); lists the names there are.
      ValueError: `name` is present more than once; lists the paths, any of which (or a long
        enough suffix of one) can be passed instead.
    """
    found = _find(tree, name)
    if not found:
        if default is not _MISSING:
            return default
        names = _available_names(tree)
        raise KeyError(
            f"get: no field or key {name!r} in the tree{did_you_mean(name, names)}; "
            f"names present: {names}"
        )
    if len(found) > 1:
        raise ValueError(
            f"get: {name!r} is ambiguous, it occurs at {[path_str(p) for p, _ in found]}; "
            "pass one of these paths (or a unique suffix of one) instead"
        )
    return found[0][1]


def _replacement(old: Any, new: Any, where_: str) -> Any:
    if old is not None and _is_tree_leaf(old) and hasattr(old, "dtype"):
        value = jnp.asarray(new, dtype=old.dtype)
        if value.shape != jnp.shape(old):
            raise ValueError(
                f"set: the value for {where_!r} has shape {value.shape}, expected {jnp.shape(old)}"
            )
        return value
    assert_same_structure("set", **{f"current {where_}": old, f"new {where_}": new})
    return new


def set(tree: PyTree, values: Mapping[str, Any] | None = None, /, **kwargs: Any) -> PyTree:
    """A copy of `tree` with the fields or keys called `name` replaced, for each `name=value`.

    Every match of a name is replaced (e.g. `set(state, count=0)` resets every counter in a chain);
    pass a path suffix in `values` (`set(state, {"0/count": 0})`) to pick one. An array leaf keeps
    its dtype and shape (a float replacing a float32 learning rate stays float32, so a jitted step
    does not retrace); a replaced subtree must keep its structure.

    Raises:
      KeyError: a name is not present; lists the names there are.
    """
    updates = {**(values or {}), **kwargs}
    targets: dict[tuple, Any] = {}
    for name, value in updates.items():
        found = _find(tree, name)
        if not found:
            names = _available_names(tree)
            raise KeyError(
                f"set: no field or key {name!r} in the tree{did_you_mean(name, names)}; "
                f"names present: {names}"
            )
        for path, old in found:
            targets[path] = _replacement(old, value, path_str(path))

    def rebuild(node: Any, path: tuple) -> Any:
        if path in targets:
            return targets[path]
        if _is_tree_leaf(node):
            return node
        flat, treedef = jax.tree.flatten(node, is_leaf=lambda y: y is not node)
        keys = [key for key, _ in _children(node)]
        return treedef.unflatten(
            [rebuild(child, (*path, key)) for key, child in zip(keys, flat, strict=True)]
        )

    return rebuild(tree, ())


# --------------------------------------------------------------------------------------------
# Glob patterns on paths
# --------------------------------------------------------------------------------------------


def _component_regex(part: str) -> str:
    out, i = [], 0
    while i < len(part):
        c = part[i]
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[":
            j = part.find("]", i + 2)
            if j == -1:
                out.append(re.escape(c))
            else:
                body = part[i + 1 : j]
                if body.startswith("!"):
                    body = "^" + body[1:]
                out.append("[" + body.replace("\\", "\\\\") + "]")
                i = j
        else:
            out.append(re.escape(c))
        i += 1
    return "".join(out)


@functools.lru_cache(maxsize=1024)
def _glob_regex(pattern: str) -> re.Pattern:
    parts = pattern.strip("/").split("/")
    rx = ""
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        if part == "**":
            if last:
                rx = rx[:-1] + "(?:/.*)?" if rx else ".*"
            else:
                rx += "(?:[^/]+/)*"
        else:
            rx += _component_regex(part) + ("" if last else "/")
    return re.compile(rx)


def glob_matches(pattern: str, path: str) -> bool:
    """Whether the '/'-joined `path` matches the glob `pattern` (no '!' handling)."""
    return _glob_regex(pattern).fullmatch(path) is not None


def match(pattern: str | Sequence[str], tree: PyTree, *, strict: bool = False) -> PyTree:
    """A boolean tree: True where a leaf's '/'-joined key path matches the glob `pattern`.

    Patterns match the whole path. `*` matches within one path component, `**` any number of
    components (including none), `?` one character and `[abc]` a character class; a leading `!`
    negates. A list of patterns selects the leaves matched by any positive pattern and by no
    negated one (with only negated patterns, everything else is selected).

    Examples: `"encoder/*/kernel"`, `"**/bias"` (any bias at any depth), `"!**/bias"` (all but
    biases), `["**", "!embed/**"]`.

    Args:
      pattern: a glob or a list of globs.
      tree: the tree whose leaves are matched (e.g. params).
      strict: raise a `ValueError` listing the available paths when a positive pattern matches
        no leaf (catches typos in parameter names).
    """
    patterns = [pattern] if isinstance(pattern, str) else list(pattern)
    if not patterns or not builtins.all(isinstance(p, str) for p in patterns):
        raise ValueError(f"match: pattern must be a glob string or a list of them, got {pattern!r}")
    positive = [p for p in patterns if not p.startswith("!")]
    negative = [p[1:] for p in patterns if p.startswith("!")]
    all_paths = paths(tree)
    if strict:
        for p in positive:
            if not builtins.any(glob_matches(p, q) for q in all_paths):
                shown = all_paths[:40] + (["..."] if len(all_paths) > 40 else [])
                raise ValueError(
                    f"match: pattern {p!r} matches no parameter{did_you_mean(p, all_paths)}; "
                    f"available paths: {shown}"
                )

    def selected(path: str) -> bool:
        hit = builtins.any(glob_matches(p, path) for p in positive) if positive else True
        return hit and not builtins.any(glob_matches(p, path) for p in negative)

    return map_with_path(lambda path, _: selected(path), tree)
