"""Conditional application: run an inner transformation only on the steps a condition selects,
and the predicates that decide whether an accumulated micro-step is skipped."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple, Protocol

import jax
import jax.numpy as jnp

from .._base._checks import check_bool, check_non_negative, error_context, expect_state
from .._base._introspect import counts_run_steps
from .._base._numerics import safe_increment, zero_count
from .._base._recipe import recorded
from .._base._typing import ArrayLike, OptState, Params, Updates
from ..core._transformation import GradientTransformation, as_transformation
from ..core._transformation import forward_extra_args as _accepting_extra_args
from ..tree import cast_like
from ..tree import norm as tree_norm
from ._common import register_wrapper


class ConditionFn(Protocol):
    """The type of `should_transform_fn` of `conditionally_transform` / `conditionally_mask`
    (Optax's protocol of that name): `fn(step, **extra_args) -> bool scalar`, with `step` an
    int32 scalar counting the previous calls of `update` (the extra arguments only with
    `forward_extra_args=True`)."""

    def __call__(self, step: ArrayLike, **extra_args: Any) -> ArrayLike: ...


@counts_run_steps("step")
class ConditionallyTransformState(NamedTuple):
    """State of `conditionally_transform`: the inner state and the number of calls so far."""

    inner_state: OptState
    step: jax.Array  # int32, saturating: calls of update so far


@counts_run_steps("step")
class ConditionallyMaskState(NamedTuple):
    """State of `conditionally_mask`: the number of calls so far and the inner state."""

    step: jax.Array  # int32, saturating: calls of update so far
    inner_state: OptState


def _check_args(who: str, inner: Any, should_transform_fn: Any, forward_extra_args: Any) -> Any:
    inner = as_transformation(inner, who, "inner")
    if not callable(should_transform_fn):
        raise TypeError(
            f"{who}: should_transform_fn must be a function step -> bool, "
            f"got {type(should_transform_fn).__name__}"
        )
    check_bool(who, "forward_extra_args", forward_extra_args)
    return inner


def _condition(who: str, fn: Callable[..., Any], step: jax.Array, kwargs: dict) -> jax.Array:
    cond = jnp.asarray(fn(step, **kwargs))
    if cond.shape != ():
        raise ValueError(
            f"{who}: should_transform_fn must return a scalar boolean, got an array of shape "
            f"{cond.shape} and dtype {cond.dtype}"
        )
    return cond.astype(bool)


def _conditional(who: str, inner, should_transform_fn, forward_extra_args: bool, mask: bool):
    inner = _check_args(who, inner, should_transform_fn, forward_extra_args)
    inner_update = _accepting_extra_args(inner.update)
    state_cls = ConditionallyMaskState if mask else ConditionallyTransformState

    def init(params):
        return state_cls(inner_state=inner.init(params), step=zero_count())

    def update(updates, state, params=None, **extra_args):
        expect_state(who, state, state_cls)
        cond = _condition(
            who, should_transform_fn, state.step, extra_args if forward_extra_args else {}
        )

        def run(inner_state):
            with error_context(who):
                out, inner_state = inner_update(updates, inner_state, params, **extra_args)
            # both branches of the cond must agree on dtypes: updates keep the gradients' dtype
            return cast_like(out, updates), inner_state

        def skip(inner_state):
            out = jax.tree.map(jnp.zeros_like, updates) if mask else updates
            return out, inner_state

        if isinstance(cond, jax.core.Tracer):
            new_updates, inner_state = jax.lax.cond(cond, run, skip, state.inner_state)
        else:  # eagerly: run only the branch taken (a cond would compile both at every step)
            new_updates, inner_state = (run if bool(cond) else skip)(state.inner_state)
        return new_updates, state_cls(inner_state=inner_state, step=safe_increment(state.step))

    return register_wrapper(GradientTransformation(init, update), inner)


@recorded
def conditionally_transform(
    inner: GradientTransformation,
    should_transform_fn: ConditionFn | Callable[..., ArrayLike],
    forward_extra_args: bool = False,
) -> GradientTransformation:
    r"""Run `inner` only on the steps where `should_transform_fn(step)` is True; on the other
    steps the updates pass through unchanged and the inner state is kept as it is.

    .. math::

      u_t = \begin{cases} \mathrm{inner}(g_t) & c(t) \\ g_t & \text{otherwise} \end{cases},
      \qquad t = 0, 1, 2, \dots \ \text{(calls of update so far)}

    Args:
      inner: the transformation to run conditionally.
      should_transform_fn: `step -> bool scalar` (`step` an int32 scalar counting the previous
        calls of `update`, starting at 0), e.g. `lambda step: step % 4 == 0`. It may be traced.
      forward_extra_args: also pass the extra arguments of `update` (e.g. `value=loss`) to
        `should_transform_fn` as keyword arguments (they always reach `inner`).

    Returns:
      A `GradientTransformation` with state `ConditionallyTransformState(inner_state, step)`.
      The updates keep the gradients' dtype.

    Reference: matches `optax.conditionally_transform` (same state fields). See
    `conditionally_mask` to zero the updates instead.
    """
    return _conditional(
        "conditionally_transform", inner, should_transform_fn, forward_extra_args, mask=False
    )


@recorded
def conditionally_mask(
    inner: GradientTransformation,
    should_transform_fn: ConditionFn | Callable[..., ArrayLike],
    forward_extra_args: bool = False,
) -> GradientTransformation:
    r"""Run `inner` only on the steps where `should_transform_fn(step)` is True; on the other
    steps the updates are zero and the inner state is kept as it is.

    .. math::

      u_t = \begin{cases} \mathrm{inner}(g_t) & c(t) \\ 0 & \text{otherwise} \end{cases},
      \qquad t = 0, 1, 2, \dots \ \text{(calls of update so far)}

    Args:
      inner: the transformation to run conditionally.
      should_transform_fn: `step -> bool scalar` (`step` an int32 scalar counting the previous
        calls of `update`, starting at 0), e.g. `lambda step: step >= 100` for a warm start.
      forward_extra_args: also pass the extra arguments of `update` (e.g. `value=loss`) to
        `should_transform_fn` as keyword arguments (they always reach `inner`).

    Returns:
      A `GradientTransformation` with state `ConditionallyMaskState(step, inner_state)`.
      The updates keep the gradients' dtype.

    Reference: matches `optax.conditionally_mask` (same state fields). See
    `conditionally_transform` to pass the updates through instead.
    """
    return _conditional(
        "conditionally_mask", inner, should_transform_fn, forward_extra_args, mask=True
    )


# --------------------------------------------------------------------------------------------
# should-skip predicates for gradient accumulation (accumulate_k_steps' should_skip_update_fn)
# --------------------------------------------------------------------------------------------


def skip_not_finite(
    updates: Updates, gradient_step: ArrayLike, params: Params | None
) -> tuple[jax.Array, dict[str, jax.Array]]:
    r"""Whether a micro-step's updates contain a NaN or an infinity (then it should be skipped).

    .. math::  \text{skip} = \#\{i : \lnot \mathrm{isfinite}(g_i)\} > 0

    A *should-skip function* for gradient accumulation: pass it as
    `gradtx.accumulate_k_steps(tx, k, should_skip_update_fn=gradtx.skip_not_finite)` (or to
    `optax.MultiSteps`); a skipped micro-step leaves the accumulator and the inner state as if it
    never happened.

    Args:
      updates: the micro-step's gradients.
      gradient_step: the number of inner steps taken so far (unused).
      params: the current parameters (unused; may be None).

    Returns:
      `(should_skip, info)`: a bool scalar, and a dict with `"should_skip"` and
      `"num_not_finite"` (int32: how many elements are NaN or infinite), stored by the wrapper
      as its skip state.

    Reference: matches `optax.skip_not_finite`.
    """
    del gradient_step, params
    count = jnp.zeros([], jnp.int32)
    for leaf in jax.tree.leaves(updates):
        count = count + jnp.sum(~jnp.isfinite(leaf)).astype(jnp.int32)
    should_skip = count > 0
    return should_skip, {"should_skip": should_skip, "num_not_finite": count}


def skip_large_updates(
    updates: Updates,
    gradient_step: ArrayLike,
    params: Params | None,
    max_squared_norm: ArrayLike,
) -> tuple[jax.Array, dict[str, jax.Array]]:
    r"""Whether a micro-step's updates are too large (or not finite), so it should be skipped.

    .. math::  \text{skip} = \lnot\left(\lVert g \rVert_2^2 < \text{max\_squared\_norm}\right)

    (so a NaN norm is skipped too). A *should-skip function* for gradient accumulation; bind the
    threshold first: `functools.partial(gradtx.skip_large_updates, max_squared_norm=42.0)`.

    Args:
      updates: the micro-step's gradients.
      gradient_step: the number of inner steps taken so far (unused).
      params: the current parameters (unused; may be None).
      max_squared_norm: the largest squared global L2 norm accepted, >= 0.

    Returns:
      `(should_skip, info)`: a bool scalar, and a dict with `"should_skip"` and
      `"norm_squared"` (the squared global norm, accumulated in float32).

    Reference: matches `optax.skip_large_updates`.
    """
    del gradient_step, params
    check_non_negative("skip_large_updates", "max_squared_norm", max_squared_norm)
    norm_sq = tree_norm(updates, squared=True)
    should_skip = jnp.logical_not(norm_sq < max_squared_norm)
    return should_skip, {"should_skip": should_skip, "norm_squared": norm_sq}


__all__ = [
    "ConditionFn",
    "ConditionallyMaskState",
    "ConditionallyTransformState",
    "conditionally_mask",
    "conditionally_transform",
    "skip_large_updates",
    "skip_not_finite",
]
