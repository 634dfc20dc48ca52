"""Helpers shared by the wrappers (internal): pruned trees.

A wrapper that runs an inner transformation on part of the tree hands it a *pruned* tree: the
leaves it does not own are replaced by `None`. gradtx treats `None` as an absent leaf everywhere
(`tree.zeros_like`, `apply_updates`, `assert_same_structure`), and so does Optax, so the inner
state holds no buffer for a pruned leaf.
"""

from __future__ import annotations

from typing import Any

import jax

from .._base._checks import error_context
from .._base._typing import PyTree
from ..core._transformation import GradientTransformation
from ..tree._paths import _is_tree_leaf


def is_leaf_value(x: Any) -> bool:
    """Whether `x` is a single leaf (not a container) for `jax.tree`; None counts as one."""
    return _is_tree_leaf(x)


def prune(tree: PyTree, keep: PyTree) -> PyTree:
    """`tree` with every leaf whose `keep` flag is False replaced by None."""
    return jax.tree.map(lambda x, k: x if k else None, tree, keep)


def pick(keep: PyTree, inner: PyTree, outer: PyTree) -> PyTree:
    """Leaf by leaf: `inner` where `keep` is True, else `outer` (`inner` may be pruned)."""
    return jax.tree.map(lambda k, a, b: a if k else b, keep, inner, outer)


__all__ = [
    "is_leaf_value",
    "pick",
    "prune",
]


def errors_named(who: str, tx: GradientTransformation) -> GradientTransformation:
    """`tx` with the errors of its `init` and `update` prefixed by `who` (a wrapper built from
    other wrappers reports under its own name)."""

    def init(params: Any) -> Any:
        with error_context(who):
            return tx.init(params)

    def update(updates, state, params=None, **extra_args):
        with error_context(who):
            return tx.update(updates, state, params, **extra_args)

    return GradientTransformation(init, update)
