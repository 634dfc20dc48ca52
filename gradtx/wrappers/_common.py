"""Helpers shared by the wrappers (internal).

(Pruned trees, the part of the tree an inner transformation of `masked` / `multi_transform` /
`freeze` sees, are made in `_partition.py`: the leaves it does not own are `MaskedNode()`, as in
Optax, so the inner state holds no buffer for them.)
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from jax.tree_util import GetAttrKey

from .._base._checks import error_context
from .._base._introspect import copy_description, register
from .._base._numerics import cond
from ..core._transformation import GradientTransformation
from ..tree import cast_like


def register_wrapper(
    tx: GradientTransformation, inner: Any, field: str = "inner_state", report: Any = None
) -> GradientTransformation:
    """Register `tx` as a wrapper of `inner`, whose state is `tx`'s state field `field`, for
    `gradtx.metrics` (which then sees inner schedules and counters); return `tx`."""
    return register(tx, "wrapper", children=[((GetAttrKey(field),), inner)], report=report)


def run_or_skip(
    who: str,
    apply: Any,
    inner_update: Any,
    updates: Any,
    inner_state: Any,
    params: Any,
    extra_args: dict[str, Any],
) -> tuple[Any, Any]:
    """The inner update where `apply` holds; else zero updates and the inner state as it was
    (bit for bit). A `lax.cond` under a tracer, only the branch taken eagerly.

    (Measured on the health benchmark, `python -m benchmarks --health`: an element-wise select
    of both outcomes instead of the cond costs more on CPU, +42% step time against +35%, since
    XLA then copies the moments the select and the update both read.)
    """

    def run(inner_state):
        with error_context(who):
            out, inner_state = inner_update(updates, inner_state, params, **extra_args)
        # both branches of the cond must agree on dtypes: updates keep the gradients' dtype
        return cast_like(out, updates), inner_state

    def skip(inner_state):
        return jax.tree.map(jnp.zeros_like, updates), inner_state

    return cond(apply, run, skip, inner_state)


def injected_report(state: Any) -> dict[str, Any]:
    """The injected hyperparameters of an `inject_hyperparams` state that are scalars (the
    values its latest update used), for `gradtx.metrics`."""
    return {
        name: value
        for name, value in state.hyperparams.items()
        if getattr(value, "shape", None) == () or isinstance(value, int | float)
    }


def errors_named(who: str, tx: GradientTransformation) -> GradientTransformation:
    """`tx` with the errors of its `init` and `update` prefixed by `who` (a wrapper built from
    other wrappers reports under its own name)."""

    def init(params: Any) -> Any:
        with error_context(who):
            return tx.init(params)

    def update(updates, state, params=None, **extra_args):
        with error_context(who):
            return tx.update(updates, state, params, **extra_args)

    return copy_description(GradientTransformation(init, update), tx)
