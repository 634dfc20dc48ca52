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
    """Whether `x` is a single leaf (not a container) for `jax.tree`; None counts as one."""
    return gtree._is_tree_leaf(x)


def prune(tree: PyTree, keep: PyTree) -> PyTree:
    """`tree` with every leaf whose `keep` flag is False replaced by None."""
    return jax.tree.map(lambda x, k: x if k else None, tree, keep)


def pick(keep: PyTree, inner: PyTree, outer: PyTree) -> PyTree:
    """Leaf by leaf: `inner` where `keep` is True, else `outer` (`inner` may be pruned)."""
    return jax.tree.map(lambda k, a, b: a if k else b, keep, inner, outer)


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
    return gtree.broadcast_prefix(spec, tree, who=who, what=what)


__all__ = [
    "NO_DEFAULT",
    "error_context",
    "is_leaf_value",
    "leaf_values",
    "pick",
    "prune",
    "resolve_rules",
]
