"""Helpers shared by the wrappers (internal).

(Pruned trees, the part of the tree an inner transformation of `masked` / `multi_transform` /
`freeze` sees, are made in `_partition.py`: the leaves it does not own are `MaskedNode()`, as in
Optax, so the inner state holds no buffer for them.)
"""

from __future__ import annotations

from typing import Any

from .._base._checks import error_context
from ..core._transformation import GradientTransformation


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
