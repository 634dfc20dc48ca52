"""Guards against non-finite gradients: skip the step, or filter the bad elements."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from .._base._checks import check_int, error_context, expect_state
from .._base._numerics import safe_increment, zero_count
from .._base._typing import OptState
from ..core._transformation import (
    GradientTransformation,
    _as_transformation,
    forward_extra_args,
)
from ..tree import cast_like


class ApplyIfFiniteState(NamedTuple):
    notfinite_count: jax.Array  # int32: consecutive non-finite steps so far (0 after a good one)
    last_finite: jax.Array  # bool: whether the latest gradients were all finite
    total_notfinite: jax.Array  # int32, saturating: non-finite steps since init (never reset)
    inner_state: OptState


def _all_finite(tree) -> jax.Array:
    ok = jnp.asarray(True)
    for x in jax.tree.leaves(tree):
        ok = jnp.logical_and(ok, jnp.all(jnp.isfinite(x)))
    return ok


def apply_if_finite(
    tx: GradientTransformation, max_consecutive_errors: int
) -> GradientTransformation:
    r"""Skip the whole step when any gradient element is NaN or ±Inf.

    On a step whose gradients are all finite, `tx` runs as usual and `notfinite_count` returns to
    0. On a step with a NaN/Inf, the updates are zero and the inner state is returned untouched
    (bit for bit); only the counters change. After more than `max_consecutive_errors`
    *consecutive* bad steps the wrapper gives up protecting: the step is passed to `tx` as is
    (as in Optax), so the failure shows in the parameters instead of silently stalling training.

    To stop training instead (RETURNN's limit on consecutive invalid steps), check the state
    before applying the updates: `new_state.notfinite_count > max_consecutive_errors` is True
    exactly on the steps where the wrapper gave up; keep the previous params and state and stop.
    The counters are plain int32/bool arrays, so they survive checkpoints.

    Args:
      tx: the transformation to protect.
      max_consecutive_errors: how many consecutive non-finite steps are skipped, an int >= 0.

    Returns:
      A `GradientTransformation` with state
      `ApplyIfFiniteState(notfinite_count, last_finite, total_notfinite, inner_state)`.

    Examples:
      >>> import jax.numpy as jnp, gradtx
      >>> tx = gradtx.apply_if_finite(gradtx.sgd(1.0), max_consecutive_errors=2)
      >>> params = {"w": jnp.zeros(2)}
      >>> state = tx.init(params)
      >>> updates, state = tx.update({"w": jnp.array([jnp.nan, 1.0])}, state, params)
      >>> updates["w"], int(state.notfinite_count)  # skipped
      (Array([0., 0.], dtype=float32), 1)
      >>> updates, state = tx.update({"w": jnp.array([1.0, 1.0])}, state, params)
      >>> updates["w"], int(state.notfinite_count)
      (Array([-1., -1.], dtype=float32), 0)

    Reference: `optax.apply_if_finite` (same state and give-up rule); nnabla's
    `Solver.check_inf_or_nan_grad` used to skip an update; RETURNN's
    `num_allowed_consec_invalid_gradient_steps`.
    """
    who = "apply_if_finite"
    tx = _as_transformation(tx, who, "tx")
    check_int(who, "max_consecutive_errors", max_consecutive_errors, minimum=0)
    inner_update = forward_extra_args(tx.update)

    def init(params):
        return ApplyIfFiniteState(
            notfinite_count=zero_count(),
            last_finite=jnp.asarray(True),
            total_notfinite=zero_count(),
            inner_state=tx.init(params),
        )

    def update(updates, state, params=None, **extra_args):
        expect_state(who, state, ApplyIfFiniteState)
        finite = _all_finite(updates)
        notfinite_count = jnp.where(
            finite, jnp.zeros_like(state.notfinite_count), safe_increment(state.notfinite_count)
        )
        total = jnp.where(finite, state.total_notfinite, safe_increment(state.total_notfinite))
        apply = jnp.logical_or(finite, notfinite_count > max_consecutive_errors)

        def run(inner_state):
            with error_context(who):
                out, inner_state = inner_update(updates, inner_state, params, **extra_args)
            # both branches of the cond must agree on dtypes: updates keep the gradients' dtype
            return cast_like(out, updates), inner_state

        def skip(inner_state):
            return jax.tree.map(jnp.zeros_like, updates), inner_state

        new_updates, inner_state = jax.lax.cond(apply, run, skip, state.inner_state)
        return new_updates, ApplyIfFiniteState(
            notfinite_count=notfinite_count,
            last_finite=finite,
            total_notfinite=total,
            inner_state=inner_state,
        )

    return GradientTransformation(init, update)


__all__ = ["ApplyIfFiniteState", "apply_if_finite"]
