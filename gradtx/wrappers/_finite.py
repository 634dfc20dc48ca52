"""Guards against non-finite gradients: skip the step, or filter the bad elements."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from .._base._checks import check_bool, check_int, expect_state
from .._base._introspect import register
from .._base._numerics import safe_increment, zero_count
from .._base._recipe import recorded
from .._base._typing import OptState
from ..core._transformation import (
    GradientTransformation,
    as_transformation,
    forward_extra_args,
)
from ..tree import paths
from ..tree._nonfinite import NonfiniteLocation, first_nonfinite
from ._common import run_or_skip


class ApplyIfFiniteState(NamedTuple):
    notfinite_count: jax.Array  # int32: consecutive non-finite steps so far (0 after a good one)
    last_finite: jax.Array  # bool: whether the latest gradients were all finite
    total_notfinite: jax.Array  # int32, saturating: non-finite steps since init (never reset)
    inner_state: OptState


class ApplyIfFiniteLocatedState(NamedTuple):
    """`ApplyIfFiniteState` with where the latest NaN/Inf was (`locate_nonfinite=True`)."""

    notfinite_count: jax.Array  # int32: consecutive non-finite steps so far (0 after a good one)
    last_finite: jax.Array  # bool: whether the latest gradients were all finite
    total_notfinite: jax.Array  # int32, saturating: non-finite steps since init (never reset)
    inner_state: OptState
    first_nonfinite: NonfiniteLocation  # of the latest non-finite gradients (index -1: none yet)


def _all_finite(tree) -> jax.Array:
    ok = jnp.asarray(True)
    for x in jax.tree.leaves(tree):
        ok = jnp.logical_and(ok, jnp.all(jnp.isfinite(x)))
    return ok


@recorded
def apply_if_finite(
    tx: GradientTransformation, max_consecutive_errors: int, *, locate_nonfinite: bool = False
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

    With `locate_nonfinite=True` the state also says *where* the latest NaN/Inf was: its
    `first_nonfinite` is a `NonfiniteLocation` of the gradients of the most recent non-finite
    step (kept as is on finite steps; index -1 until the first one), computed on the device in
    the same pass that decides finiteness. Read it on the host:
    `state.first_nonfinite.path` -> `"dense/kernel"`, `.count` -> its NaN/Inf elements;
    `gradtx.inspect_state(state)` shows it too. The gradients must have the params' leaf paths.

    Args:
      tx: the transformation to protect.
      max_consecutive_errors: how many consecutive non-finite steps are skipped, an int >= 0.
      locate_nonfinite: also record the location of the latest non-finite gradient leaf (this
        changes the state's type, so the default keeps Optax's state layout).

    Returns:
      A `GradientTransformation` with state
      `ApplyIfFiniteState(notfinite_count, last_finite, total_notfinite, inner_state)`, or with
      `locate_nonfinite=True`, `ApplyIfFiniteLocatedState(notfinite_count, last_finite,
      total_notfinite, inner_state, first_nonfinite)`.

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
      >>> tx = gradtx.apply_if_finite(gradtx.sgd(1.0), 2, locate_nonfinite=True)
      >>> params = {"b": jnp.zeros(2), "w": jnp.zeros(2)}
      >>> _, state = tx.update({"b": jnp.ones(2), "w": jnp.array([jnp.inf, 1.0])},
      ...                      tx.init(params), params)
      >>> state.first_nonfinite.path, int(state.first_nonfinite.count)
      ('w', 1)

    Reference: `optax.apply_if_finite` (same state and give-up rule); nnabla's
    `Solver.check_inf_or_nan_grad` used to skip an update; RETURNN's
    `num_allowed_consec_invalid_gradient_steps`.
    """
    who = "apply_if_finite"
    tx = as_transformation(tx, who, "tx")
    check_int(who, "max_consecutive_errors", max_consecutive_errors, minimum=0)
    check_bool(who, "locate_nonfinite", locate_nonfinite)
    locate = bool(locate_nonfinite)
    inner_update = forward_extra_args(tx.update)
    state_cls = ApplyIfFiniteLocatedState if locate else ApplyIfFiniteState

    def init(params):
        counters = dict(
            notfinite_count=zero_count(),
            last_finite=jnp.asarray(True),
            total_notfinite=zero_count(),
            inner_state=tx.init(params),
        )
        if not locate:
            return ApplyIfFiniteState(**counters)
        minus_one, zero = jnp.full([], -1, jnp.int32), jnp.zeros([], jnp.int32)
        none_yet = NonfiniteLocation(minus_one, zero, zero, tuple(paths(params)))
        return ApplyIfFiniteLocatedState(**counters, first_nonfinite=none_yet)

    def update(updates, state, params=None, **extra_args):
        expect_state(who, state, state_cls)
        if locate:
            located = first_nonfinite(updates)
            _check_paths(who, state.first_nonfinite.leaf_paths, located.leaf_paths)
            finite = located.total == 0
        else:
            finite = _all_finite(updates)
        notfinite_count = jnp.where(
            finite, jnp.zeros_like(state.notfinite_count), safe_increment(state.notfinite_count)
        )
        total = jnp.where(finite, state.total_notfinite, safe_increment(state.total_notfinite))
        apply = jnp.logical_or(finite, notfinite_count > max_consecutive_errors)

        new_updates, inner_state = run_or_skip(
            who, apply, inner_update, updates, state.inner_state, params, extra_args
        )
        counters = dict(
            notfinite_count=notfinite_count,
            last_finite=finite,
            total_notfinite=total,
            inner_state=inner_state,
        )
        if not locate:
            return new_updates, ApplyIfFiniteState(**counters)
        latest = jax.tree.map(
            lambda old, new: jnp.where(finite, old, new), state.first_nonfinite, located
        )
        return new_updates, ApplyIfFiniteLocatedState(**counters, first_nonfinite=latest)

    def report(state):
        out = {"notfinite_count": state.notfinite_count, "total_notfinite": state.total_notfinite}
        if locate:
            out["nonfinite_index"] = state.first_nonfinite.index
            out["nonfinite_count"] = state.first_nonfinite.count
        return out

    return register(
        GradientTransformation(init, update),
        "wrapper",
        children=[((jax.tree_util.GetAttrKey("inner_state"),), tx)],
        report=report,
    )


def _check_paths(who: str, expected: tuple[str, ...], got: tuple[str, ...]) -> None:
    """The gradients' leaf paths are the params' (those the location was initialised with)."""
    if expected == got:
        return
    first = next(
        (i for i, (a, b) in enumerate(zip(expected, got, strict=False)) if a != b),
        min(len(expected), len(got)),
    )
    ours = repr(expected[first]) if first < len(expected) else "no more leaves"
    theirs = repr(got[first]) if first < len(got) else "no more leaves"
    raise ValueError(
        f"{who}: the updates' leaves differ from the params' given to init (locate_nonfinite=True "
        f"names leaves by the params' paths): leaf {first} is {theirs} in the updates and {ours} "
        "in the params; pass gradients with the params' tree structure"
    )


__all__ = ["ApplyIfFiniteLocatedState", "ApplyIfFiniteState", "apply_if_finite"]
