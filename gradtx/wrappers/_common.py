"""Helpers shared by the wrappers (internal): pruned trees, per-leaf rules, error context.

A wrapper that runs an inner transformation on part of the tree hands it a *pruned* tree: the
leaves it does not own are replaced by `None`. gradtx treats `None` as an absent leaf everywhere
(`tree.zeros_like`, `apply_updates`, `assert_same_structure`), and so does Optax, so the inner
state holds no buffer for a pruned leaf.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import jax
from jax import tree_util as jtu

from .. import tree as gtree
from .._checks import did_you_mean
from .._typing import PyTree

NO_DEFAULT: Any = object()


@contextlib.contextmanager
def error_context(who: str) -> Iterator[None]:
    """Prefix `who: ` to a `ValueError` raised inside (e.g. by an inner transformation), so nested
    wrappers report the whole path: ``apply_if_finite: accumulate_k_steps: scale_by_adam: ...``."""
    try:
        yield
    except ValueError as e:
        raise ValueError(f"{who}: {e}") from e


def is_leaf_value(x: Any) -> bool:
    """Whether `x` is a single leaf (not a container) for `jax.tree`."""
    return x is None or jtu.treedef_is_leaf(jax.tree.structure(x))


def prune(tree: PyTree, keep: PyTree) -> PyTree:
    """`tree` with every leaf whose `keep` flag is False replaced by None."""
    return jax.tree.map(lambda x, k: x if k else None, tree, keep)


def pick(keep: PyTree, inner: PyTree, outer: PyTree) -> PyTree:
    """Leaf by leaf: `inner` where `keep` is True, else `outer` (`inner` may be pruned)."""
    return jax.tree.map(lambda k, a, b: a if k else b, keep, inner, outer)


def broadcast_prefix(who: str, what: str, prefix: Any, tree: PyTree) -> PyTree:
    """A tree shaped like `tree` holding, at each leaf, the value of `prefix` above it.

    `prefix` is `tree`'s structure or a prefix of it (e.g. `{"encoder": "adam", "head": "sgd"}`).
    None leaves of `tree` stay None.
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
        where = f"'{gtree.path_str(found[0])}'" if found and found[0] else "the root"
        detail = f": {what} has {found[1]}, params have {found[2]}" if found else ""
        raise ValueError(
            f"{who}: {what} must have the params' tree structure or be a prefix of it; they "
            f"differ at {where}{detail}"
        ) from None


def _children(node: Any) -> list[tuple[Any, Any]]:
    flat, _ = jtu.tree_flatten_with_path(node, is_leaf=lambda y: y is not node)
    return [(kp[0], child) for kp, child in flat]


def _describe(node: Any) -> str:
    if is_leaf_value(node):
        return "None" if node is None else f"a leaf ({type(node).__name__})"
    keys = [gtree.path_str((k,)) for k, _ in _children(node)]
    return f"a {type(node).__name__} with keys {keys}"


def _prefix_difference(prefix: Any, tree: Any, path: tuple) -> tuple[tuple, str, str] | None:
    """The first place where `prefix` is not a prefix of `tree`: (path, prefix has, tree has)."""
    if is_leaf_value(prefix):
        return None
    kids_p, kids_t = _children(prefix), _children(tree) if not is_leaf_value(tree) else []
    same_kind = type(prefix) is type(tree) or (
        isinstance(prefix, Mapping) and isinstance(tree, Mapping)
    )
    if not same_kind or [k for k, _ in kids_p] != [k for k, _ in kids_t]:
        return path, _describe(prefix), _describe(tree)
    for (key, a), (_, b) in zip(kids_p, kids_t, strict=True):
        found = _prefix_difference(a, b, (*path, key))
        if found is not None:
            return found
    return None


def _shown(paths: list[str]) -> list[str]:
    return paths[:40] + (["..."] if len(paths) > 40 else [])


def resolve_rules(
    who: str,
    what: str,
    rules: Mapping[str, Any],
    tree: PyTree,
    *,
    default: Any = NO_DEFAULT,
    strict: bool = True,
) -> PyTree:
    """The value of the first glob pattern (in `rules`' order) matching each leaf's path.

    Patterns follow `gradtx.tree.match` (`*`, `**`, `?`, `[abc]`, a leading `!` negates).

    Raises:
      ValueError: naming `who`, when a leaf matches no pattern and there is no `default` (lists
        the unmatched paths), or, with `strict`, when a pattern matches no leaf or only leaves
        that earlier patterns already took (lists the available paths).
    """
    all_paths = gtree.paths(tree)
    assigned: dict[str, Any] = {}
    for pattern, value in rules.items():
        if not isinstance(pattern, str):
            raise ValueError(
                f"{who}: the keys of {what} must be glob patterns (strings), got {pattern!r}"
            )
        selected = jax.tree.leaves(gtree.match(pattern, tree))
        hits = [p for p, on in zip(all_paths, selected, strict=True) if on]
        taken = [p for p in hits if p not in assigned]
        if strict and not taken:
            if hits:
                raise ValueError(
                    f"{who}: pattern {pattern!r} in {what} only matches paths that earlier "
                    f"patterns already took ({_shown(hits)}); the first matching pattern wins, so "
                    "put the more specific pattern first (or pass strict=False)"
                )
            raise ValueError(
                f"{who}: pattern {pattern!r} in {what} matches no parameter"
                f"{did_you_mean(pattern, all_paths)}; available paths: {_shown(all_paths)} "
                "(pass strict=False to allow patterns that match nothing)"
            )
        for p in taken:
            assigned[p] = value
    missing = [p for p in all_paths if p not in assigned]
    if missing and default is NO_DEFAULT:
        raise ValueError(
            f"{who}: no pattern in {what} matches {_shown(missing)}; add a pattern for them "
            f"(e.g. '**' last as a catch-all) or pass a default. Patterns: {list(rules)}"
        )
    return gtree.map_with_path(lambda path, _: assigned.get(path, default), tree)


def leaf_values(
    who: str,
    what: str,
    spec: Any,
    tree: PyTree,
    *,
    default: Any = NO_DEFAULT,
    strict: bool = True,
    is_rules: Callable[[Any, PyTree], bool] | None = None,
) -> PyTree:
    """Per-leaf values from a dict of glob patterns, a (prefix) tree, or a callable of `tree`."""
    if callable(spec) and not isinstance(spec, Mapping):
        spec = spec(tree)
    if isinstance(spec, Mapping) and (is_rules is None or is_rules(spec, tree)):
        return resolve_rules(who, what, spec, tree, default=default, strict=strict)
    return broadcast_prefix(who, what, spec, tree)


__all__ = [
    "NO_DEFAULT",
    "broadcast_prefix",
    "error_context",
    "is_leaf_value",
    "leaf_values",
    "pick",
    "prune",
    "resolve_rules",
]
