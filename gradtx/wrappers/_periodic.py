"""Periodic updates: emit accumulated gradients every `k` steps, refresh a slow copy of tensors."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .._base._checks import HyperparameterError, concrete, expect_state
from .._base._numerics import safe_increment, widen, zero_count
from .._base._recipe import recorded
from .._base._typing import ArrayLike, Params, Updates
from ..core._transformation import GradientTransformation
from ..tree import assert_same_structure, map_split, zeros_like


def _check_period(who: str, name: str, value: Any) -> None:
    """`value` is an integer >= 1 when it can be inspected (not traced)."""
    if isinstance(value, bool | np.bool_):
        raise HyperparameterError(who, name, value, "an integer >= 1", got=repr(value))
    arr = concrete(value)
    if arr is None:
        return
    if arr.ndim != 0 or not np.issubdtype(arr.dtype, np.integer) or int(arr) < 1:
        shown = repr(arr.item()) if arr.ndim == 0 else repr(value)
        raise HyperparameterError(who, name, value, "an integer >= 1", got=shown)


class ApplyEvery(NamedTuple):
    """State of `apply_every`: the position in the cycle and the running sum of gradients
    (Optax's name for it; `ApplyEveryState` is the same class)."""

    count: jax.Array  # type: ignore[assignment]  # int32: steps since the last emit (< k)
    grad_acc: Updates  # sum of this cycle's gradients (dtype of the params)


ApplyEveryState = ApplyEvery  # gradtx's earlier name of the same class


@recorded
def apply_every(k: ArrayLike = 1) -> GradientTransformation:
    r"""Sum the gradients over `k` steps and emit the sum every `k`-th step (zeros otherwise).

    .. math::

      a_j = \sum_{i=1}^{j} g_i, \qquad
      u_j = \begin{cases} 0 & j < k \\ a_k & j = k \end{cases}

    after which the sum restarts. Unlike `accumulate_k_steps`, which wraps an optimizer so that
    its state advances once per `k` micro-steps, this sits inside a chain: the transformations
    before it still run at every step. Updates keep the gradients' dtype; the sum is computed in
    float32 (or wider) and stored in the params' dtype.

    Args:
      k: the period, an integer >= 1 (may be a traced integer under `jit`). A state restored
        under a smaller `k` that holds `k - 1` or more steps emits their sum on the next step.

    Returns:
      A `GradientTransformation` with state `ApplyEvery(count, grad_acc)` (also named
      `ApplyEveryState`).

    Reference: matches `optax.apply_every` (same state type name and fields).
    """
    who = "apply_every"
    _check_period(who, "k", k)

    def init(params):
        return ApplyEvery(count=zero_count(), grad_acc=zeros_like(params))

    def update(updates, state, params=None, **extra_args):
        del params, extra_args
        expect_state(who, state, ApplyEvery)
        assert_same_structure(who, updates=updates, **{"state.grad_acc": state.grad_acc})
        # `>=`: a state restored under a smaller k emits at once, the sum of all it holds
        restart = state.count == 0
        emit = state.count >= k - 1

        def leaf(g, a):
            g = jnp.asarray(g)
            total = jnp.where(restart, widen(g), widen(a) + widen(g))
            out = jnp.where(emit, total, jnp.zeros_like(total))
            return out.astype(g.dtype), total.astype(a.dtype)

        new_updates, grad_acc = map_split(leaf, 2, updates, state.grad_acc)
        count = jnp.where(emit, 0, safe_increment(state.count)).astype(state.count.dtype)
        return new_updates, ApplyEvery(count=count, grad_acc=grad_acc)

    return GradientTransformation(init, update)


def periodic_update(
    new_tensors: Params, old_tensors: Params, steps: ArrayLike, update_period: ArrayLike
) -> Params:
    r"""A slow copy of some tensors, refreshed to their latest values every `update_period` steps.

    .. math::

      \text{result} = \begin{cases} \text{new} & \text{steps} \bmod T = 0 \\
      \text{old} & \text{otherwise} \end{cases}

    Typical use: the target network of TD learning, or the teacher of self-distillation,
    `target = gradtx.periodic_update(online, target, step, 100)`. Works under `jit` with a traced
    `steps`; each result leaf keeps the dtype of the matching leaf of `old_tensors`.

    Args:
      new_tensors: the latest values (e.g. the online parameters).
      old_tensors: the slow copy, with the structure of `new_tensors`.
      steps: the number of steps taken so far on the online tensors (an integer).
      update_period: :math:`T`, refresh every this many steps, an integer >= 1.

    Returns:
      `new_tensors` on the steps that are multiples of `update_period`, else `old_tensors`.

    Reference: matches `optax.periodic_update`; Mnih et al., "Human-level control through deep
    reinforcement learning" (Nature 2015); Grill et al., "Bootstrap your own latent" (2020).
    """
    who = "periodic_update"
    _check_period(who, "update_period", update_period)
    assert_same_structure(who, new_tensors=new_tensors, old_tensors=old_tensors)
    refresh = jnp.asarray(steps) % update_period == 0
    return jax.tree.map(
        lambda n, o: jnp.where(refresh, jnp.asarray(n), jnp.asarray(o)).astype(
            jnp.asarray(o).dtype
        ),
        new_tensors,
        old_tensors,
    )


__all__ = ["ApplyEvery", "ApplyEveryState", "apply_every", "periodic_update"]
