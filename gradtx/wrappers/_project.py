"""Projections: adjust the update so that `params + update` lies in a constraint set."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from .._base._checks import check_positive
from .._base._recipe import recorded
from .._base._typing import ArrayLike, Params, PyTree
from ..core._transformation import GradientTransformation, require_params, stateless
from ..projections._projections import bound_tree, check_bounds, clip_leaf, projection_l2_ball
from ..tree import assert_same_structure


def _candidate(p: Any, u: jax.Array) -> jax.Array:
    """`params + update` exactly as `apply_updates` computes it."""
    p = jnp.asarray(p)
    return (p + u).astype(p.dtype)


def _projection(who: str, leaf_fn: Callable[..., Any]) -> GradientTransformation:
    """A stateless transformation whose update is `leaf_fn(params, updates) -> new updates`."""

    def fn(updates, params):
        params = require_params(who, params)
        assert_same_structure(who, updates=updates, params=params)
        return leaf_fn(params, updates)

    return stateless(fn)


@recorded
def project(fn: Callable[[Params], Params]) -> GradientTransformation:
    r"""Replace each update so that the new parameters are the projection of `params + update`.

    .. math::  u' = \Pi(w + u) - w

    Leaves already in the set (where :math:`\Pi` returns its input) keep their update unchanged.
    Place it last in a chain (after the learning rate). The result lies in the set up to the
    rounding of `params + u'`; `box` and `non_negative` correct that rounding so their bounds hold
    exactly.

    Args:
      fn: the projection, a function from a params-shaped tree to a tree of the same structure
        (None leaves stay None), e.g. one of `gradtx.projections`:
        `functools.partial(gradtx.projections.projection_l1_ball, scale=2.0)`.

    Returns:
      A stateless `GradientTransformation` (state `EmptyState()`); it needs `params`.

    Reference: projected gradient descent; `gradtx.projections` (`optax.projections`); the
    clipping of quantizer parameters into their valid ranges after each solver update in
    quantization-aware training.
    """
    who = "project"
    if not callable(fn):
        raise TypeError(f"{who}: fn must be callable (params -> projected params), got {fn!r}")
    return _project(who, fn)


def _project(who: str, fn: Callable[[Params], Params]) -> GradientTransformation:
    """`project(fn)` whose errors name `who`."""

    def apply(params, updates):
        candidate = jax.tree.map(_candidate, params, updates)
        target = fn(candidate)
        assert_same_structure(who, **{"params": candidate, "fn(params + updates)": target})
        return jax.tree.map(
            lambda c, t, p, u: jnp.where(c == t, u, (jnp.asarray(t, c.dtype) - p).astype(u.dtype)),
            candidate,
            target,
            params,
            updates,
        )

    return _projection(who, apply)


def _box_leaf(p: Any, u: jax.Array, lo: Any, hi: Any) -> jax.Array:
    p = jnp.asarray(p)
    lo = jnp.asarray(lo, p.dtype)
    hi = jnp.asarray(hi, p.dtype)
    cand = _candidate(p, u)
    inside = (cand >= lo) & (cand <= hi)
    v = (clip_leaf(cand, lo, hi) - p).astype(u.dtype)
    # p + v can round past a bound by one unit in the last place (when |v| >> |bound|); one step
    # of v toward the inside fixes it, a second guards the mixed-dtype case.
    for _ in range(2):
        real = _candidate(p, v)
        v = jnp.where(real > hi, jnp.nextafter(v, jnp.asarray(-jnp.inf, v.dtype)), v)
        v = jnp.where(real < lo, jnp.nextafter(v, jnp.asarray(jnp.inf, v.dtype)), v)
    return jnp.where(inside, u, v)


def _box(who: str, lower: Any, upper: Any) -> GradientTransformation:
    check_bounds(who, lower, upper)

    def apply(params, updates):
        lo = bound_tree(who, "lower", lower, params)
        hi = bound_tree(who, "upper", upper, params)
        return jax.tree.map(_box_leaf, params, updates, lo, hi)

    return _projection(who, apply)


@recorded
def box(lower: ArrayLike | PyTree, upper: ArrayLike | PyTree) -> GradientTransformation:
    r"""Keep every parameter element within `[lower, upper]`.

    .. math::  u' = \mathrm{clip}(w + u, l, h) - w

    Updates that keep a parameter inside are unchanged; the others are shortened (or reversed, for
    a parameter that starts outside) to land on the bound. The bounds hold exactly after
    `apply_updates` (the rounding of `params + u'` is corrected).

    Args:
      lower: the lower bound: a scalar, an array broadcastable to each leaf, or a tree with the
        params' structure (e.g. one bound per quantizer parameter). `-jnp.inf` for none.
      upper: the upper bound, likewise; must be >= `lower`.

    Returns:
      A stateless `GradientTransformation`; it needs `params`. Bounds are compared in each
      parameter's dtype.

    Reference: projected gradient descent onto a box; `gradtx.projections.projection_box`.
    """
    return _box("box", lower, upper)


@recorded
def non_negative() -> GradientTransformation:
    r"""Keep every parameter element >= 0: :math:`u' = \max(w + u, 0) - w`.

    Returns:
      A stateless `GradientTransformation`; it needs `params`.

    Reference: `gradtx.projections.projection_non_negative`; `optax.keep_params_nonnegative`.
    """
    return _box("non_negative", 0.0, jnp.inf)


@recorded
def l2_ball(radius: ArrayLike = 1.0) -> GradientTransformation:
    r"""Keep the parameters (all leaves together) within the L2 ball of `radius` around 0.

    .. math::  u' = w' - w, \qquad w' = (w + u) \min(1, r / \lVert w + u \rVert_2)

    The norm is the global norm over all leaves, computed in float32; the result is inside the
    ball up to rounding (relative 1e-6 in float32).

    Args:
      radius: :math:`r` > 0.

    Returns:
      A stateless `GradientTransformation`; it needs `params`.

    Reference: `gradtx.projections.projection_l2_ball` (`optax.projections.projection_l2_ball`).
    """
    who = "l2_ball"
    check_positive(who, "radius", radius)
    return _project(who, lambda tree: projection_l2_ball(tree, radius))


__all__ = ["box", "l2_ball", "non_negative", "project"]
