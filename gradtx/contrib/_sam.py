"""SAM (sharpness-aware minimisation) as a wrapper of an outer and an adversarial optimizer.

Every `sync_period` calls, `sync_period - 1` adversarial steps (ascent, by default a normalised
gradient step of size rho) are followed by one outer step taken from the cached outer params
with the gradient at the adversarial point.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from .._base._checks import check_int
from .._base._numerics import widen
from .._base._recipe import recorded
from .._base._typing import OptState, Params
from ..core._transformation import (
    EmptyState,
    GradientTransformation,
    forward_extra_args,
    require_params,
)
from ..transforms._building_blocks import stateless
from ..tree import assert_same_structure, norm, where, zeros_like

NormalizeState = EmptyState


class SAMState(NamedTuple):
    """State of `sam` (Optax's fields)."""

    steps_since_sync: jax.Array  # int32: calls since the period began (< sync_period)
    opt_state: OptState  # the outer optimizer's state
    adv_state: OptState  # the adversarial optimizer's state
    cache: Params | None  # the outer params (None in opaque mode)


@recorded
def normalize() -> GradientTransformation:
    r"""Divide the updates by their global L2 norm.

    .. math::  u = g / \|g\|_2

    The norm is computed in float32; a zero gradient stays zero (Optax's `normalize` returns
    NaN there). Otherwise matches `optax.contrib.normalize`, SAM's adversarial direction.

    Returns:
      A stateless `GradientTransformation` (state `NormalizeState`, i.e. `EmptyState`).
    """

    def normalized(updates, params):
        del params
        total = norm(updates)
        safe = jnp.where(total > 0, total, 1.0)
        return jax.tree.map(lambda g: (widen(g) / safe).astype(g.dtype), updates)

    return stateless(normalized)


@recorded
def sam(
    optimizer: GradientTransformation,
    adv_optimizer: GradientTransformation,
    sync_period: int = 2,
    reset_state: bool = True,
    opaque_mode: bool = False,
    batch_axis_name: str | None = None,
) -> GradientTransformation:
    r"""SAM: take `sync_period - 1` adversarial steps, then one outer step from the saved params
    with the gradient at the adversarial point.

    .. math::

      \tilde w = w + \rho \frac{\nabla f(w)}{\|\nabla f(w)\|}, \qquad
      w \leftarrow w - \eta\, \nabla f(\tilde w)

    for `optimizer = sgd(eta)`, `adv_optimizer = chain(normalize(), sgd(rho))`,
    `sync_period=2`. The adversarial optimizer's updates are negated (it ascends).

    In the default (transparent) mode every call is one step: calls
    :math:`0, \dots, k-2` of each period of :math:`k` = `sync_period` return adversarial
    updates, call :math:`k-1` returns the update that moves the params from where they are to
    the outer step from the cached params. With `opaque_mode=True` one call runs the whole
    period: `update(grads, state, params, grad_fn=grad_fn)`, where `grad_fn(params, i)` returns
    the gradient at the `i`-th adversarial point (averaged over `batch_axis_name` if given).

    Matches `optax.contrib.sam` for `sync_period` >= 2; with `sync_period=1` (no adversarial
    step) this is the outer optimizer, where Optax's transparent mode steps from a stale cache.

    Args:
      optimizer: the outer optimizer.
      adv_optimizer: the adversarial optimizer (its updates are subtracted).
      sync_period: k >= 1, calls per outer step. A state restored under a smaller
        `sync_period` that has taken `sync_period - 1` or more adversarial steps takes its outer
        step on the next call.
      reset_state: re-initialise the adversarial optimizer after each outer step.
      opaque_mode: run the adversarial steps inside each `update` (needs `grad_fn=`).
      batch_axis_name: in opaque mode, the axis name to `pmean` the adversarial gradients over.

    Returns:
      A `GradientTransformation` with state `SAMState(steps_since_sync, opt_state, adv_state,
      cache)`; it needs the params.

    Example:
      >>> import jax.numpy as jnp, gradtx
      >>> from gradtx import contrib
      >>> tx = contrib.sam(gradtx.sgd(0.1), gradtx.chain(contrib.normalize(), gradtx.sgd(0.05)))
      >>> params = {"w": jnp.ones(3)}
      >>> updates, state = tx.update({"w": jnp.ones(3)}, tx.init(params), params)

    Reference: Foret et al., "Sharpness-Aware Minimization for Efficiently Improving
    Generalization" (ICLR 2021).
    """
    who = "sam"
    check_int(who, "sync_period", sync_period, minimum=1)
    for name, tx in (("optimizer", optimizer), ("adv_optimizer", adv_optimizer)):
        if not (callable(getattr(tx, "init", None)) and callable(getattr(tx, "update", None))):
            raise TypeError(
                f"{who}: {name} must be a GradientTransformation, got {type(tx).__name__}"
            )
    opt_update = forward_extra_args(optimizer.update)
    adv_update = forward_extra_args(adv_optimizer.update)

    def init(params):
        return SAMState(
            steps_since_sync=jnp.zeros([], jnp.int32),
            opt_state=optimizer.init(params),
            adv_state=adv_optimizer.init(params),
            cache=None if opaque_mode else zeros_like(params),
        )

    def transparent_update(updates, state, params=None, *, grad_fn=None, **extra_args):
        del grad_fn
        params = require_params(who, params)
        assert_same_structure(who, updates=updates, params=params)
        first = state.steps_since_sync == 0
        # `>=`: a state restored under a smaller sync_period takes its outer step at once
        last = state.steps_since_sync >= sync_period - 1
        # The outer params: saved at the first call of a period (the initial cache is unused).
        cache = where(first, params, state.cache)
        adv_updates, adv_state = adv_update(updates, state.adv_state, params, **extra_args)
        adv_updates = jax.tree.map(lambda u: -u, adv_updates)
        opt_updates, opt_state = opt_update(updates, state.opt_state, cache, **extra_args)
        opt_updates = jax.tree.map(
            lambda c, p, u: (widen(c) - widen(p) + widen(u)).astype(u.dtype),
            cache,
            params,
            opt_updates,
        )
        new_updates = where(last, opt_updates, adv_updates)
        if reset_state:
            adv_state = where(last, adv_optimizer.init(params), adv_state)
        else:
            adv_state = where(last, state.adv_state, adv_state)
        opt_state = where(last, opt_state, state.opt_state)
        steps = jnp.where(last, 0, state.steps_since_sync + 1)
        return new_updates, SAMState(
            steps_since_sync=steps.astype(jnp.int32),
            opt_state=opt_state,
            adv_state=adv_state,
            cache=cache,
        )

    def opaque_update(
        updates,
        state,
        params=None,
        *,
        grad_fn: Callable[[Params, int], Any] | None = None,
        **extra_args,
    ):
        params = require_params(who, params)
        if grad_fn is None:
            raise ValueError(
                f"{who}: opaque_mode=True needs update(grads, state, params, grad_fn=grad_fn), "
                "where grad_fn(params, i) returns the gradient at the i-th adversarial point"
            )
        adv_params, adv_grads, adv_state = params, updates, state.adv_state
        for i in range(sync_period - 1):
            adv_updates, adv_state = adv_update(adv_grads, adv_state, adv_params, **extra_args)
            adv_params = jax.tree.map(
                lambda p, u: (widen(p) - widen(u)).astype(p.dtype), adv_params, adv_updates
            )
            adv_grads = grad_fn(adv_params, i)
            if batch_axis_name is not None:
                adv_grads = jax.lax.pmean(adv_grads, axis_name=batch_axis_name)
        if reset_state:
            adv_state = adv_optimizer.init(params)
        new_updates, opt_state = opt_update(adv_grads, state.opt_state, params, **extra_args)
        return new_updates, SAMState(
            steps_since_sync=jnp.zeros([], jnp.int32),
            opt_state=opt_state,
            adv_state=adv_state,
            cache=None,
        )

    return GradientTransformation(init, opaque_update if opaque_mode else transparent_update)


__all__ = ["NormalizeState", "SAMState", "normalize", "sam"]
