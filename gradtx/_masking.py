"""Masks: which parameters a transformation applies to (internal).

A mask is given as a boolean tree (the params' structure, or a prefix of it), a callable
`params -> boolean tree`, or a glob pattern / list of patterns on '/'-joined parameter paths (see
`gradtx.tree.match`). It is resolved to a tree of Python bools with the params' structure, so the
selection happens at trace time and unselected leaves cost nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeAlias, cast

import jax
import numpy as np

from . import tree as gtree
from ._typing import Params

MaskOrFn: TypeAlias = Any | Callable[[Params], Any] | str | Sequence[str]


def _is_patterns(mask: Any) -> bool:
    return isinstance(mask, str) or (
        isinstance(mask, list | tuple) and bool(mask) and all(isinstance(m, str) for m in mask)
    )


def _as_bool(who: str, value: Any, path: str) -> bool:
    if isinstance(value, jax.core.Tracer):
        raise ValueError(
            f"{who}: the mask value at {path!r} is traced; a mask must be known at trace time "
            "(Python bools, or a function of the params' paths, shapes and dtypes)"
        )
    arr = np.asarray(value)
    if arr.dtype != np.bool_ or arr.ndim != 0:
        raise ValueError(
            f"{who}: mask leaves must be booleans, got {arr.dtype}{list(arr.shape)} at {path!r}"
        )
    return bool(arr)


def resolve_mask(who: str, mask: MaskOrFn, params: Params, *, strict: bool = True) -> Any:
    """The mask as a tree of Python bools shaped like `params` (None leaves stay None).

    Args:
      who: the transformation, for error messages.
      mask: boolean tree (or prefix), callable of params, or glob pattern(s).
      params: the parameters (or updates) the mask refers to.
      strict: for patterns, a positive pattern that matches nothing raises a `ValueError` listing
        the available paths.
    """
    if _is_patterns(mask):
        try:
            return gtree.match(cast(Sequence[str], mask), params, strict=strict)
        except ValueError as e:
            raise ValueError(f"{who}: {e}") from None
    if callable(mask):
        mask = mask(params)
    if not _is_prefix_bool_tree(mask):
        gtree.assert_same_structure(who, params=params, mask=mask)
        return gtree.map_with_path(lambda path, m: _as_bool(who, m, path), mask)
    # A tree of Python bools, possibly a prefix of params: spread each bool over its subtree (a
    # None in the mask over parameters leaves them out).
    spread = gtree.broadcast_prefix(mask, params, who=who, what="mask")
    return jax.tree.map(lambda _, m: bool(m), params, spread)


def _is_prefix_bool_tree(mask: Any) -> bool:
    leaves = jax.tree.leaves(mask)
    return all(isinstance(x, bool | np.bool_) for x in leaves)
