"""Gradient accumulation: one inner step every `k` micro-steps.

Design and measurement. The accumulator is written first, in one fused pass per leaf that
overwrites it on the first micro-step of a cycle and adds to it otherwise (so it never needs a
separate reset pass). A `lax.cond` then runs the inner update only on the k-th micro-step. Its
operands are the new accumulator and the inner state, and its branches return a value for each:
the skip branch passes both through untouched (XLA writes nothing), the inner-step branch writes
the inner state and *the inner updates into the accumulator's buffer* (the sum is no longer
needed once it has been applied). The emitted updates are `where(emit, accumulator, 0)`, which XLA
fuses into the caller's `apply_updates`. So every output of the step lives in a donated input
buffer and the compiled step has no scratch array (`temp_size_in_bytes` 260 bytes on the donated
1x16M Adam step, was 64 MB).

The previous design returned the updates from the cond, with `zeros` from the skip branch: the
updates then need a buffer of their own, a fresh 64 MB scratch allocation per call on that tree
(the CPU runtime maps it anew each call and the kernel zeroes its pages), filled with zeros, then
read by `apply_updates`. Median time per micro-step, donated 1x16M tree, k = 4, same process
(2 shared CPU cores at load ~8, so ratios are noisy to about +-0.1):

    plain Adam step                                              1.00
    this design                                                  0.81
    the cond returning the updates (zeros when skipping)         2.71
    inner update every micro-step, `jnp.where` on the parity     1.75-2.07 (earlier run)
    optax.MultiSteps                                             7.7

A skip micro-step moves 24 bytes per parameter (read g and the accumulator, write it; read the
params and the accumulator, write the params) against Adam's 28; the params are still read and
written because the caller adds the (zero) updates. Where the accumulator's dtype cannot hold the
updates exactly (a bf16 accumulator for float32 gradients), that leaf's updates come out of the
cond separately, as before. On accelerators a `lax.cond` may cost a device-to-host read of the
predicate; the benchmarks in benchmarks/ are the source of truth there.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple, Protocol

import jax
import jax.numpy as jnp

from .._base._checks import check_bool, check_int, error_context, expect_state
from .._base._introspect import counts_run_steps
from .._base._numerics import safe_increment, widen, zero_count
from .._base._recipe import recorded
from .._base._typing import ArrayLike, DType, OptState, Params, Updates
from ..core._transformation import GradientTransformation, as_transformation, forward_extra_args
from ..state._buffers import check_float_dtype
from ..tree import assert_same_structure, cast_like, zeros_like
from ._common import register_wrapper


@counts_run_steps("gradient_step")
class AccumulateState(NamedTuple):
    micro_step: jax.Array  # int32: micro-steps accumulated since the last inner step (< k)
    grad_sum: Updates  # sum of this cycle's gradients (accumulator dtype); see accumulate_k_steps
    inner_state: OptState  # advances once every k micro-steps
    gradient_step: jax.Array  # int32: inner steps taken (Optax's MultiStepsState.gradient_step)
    skip_state: Any = ()  # what `should_skip_update_fn` returned last (() without one)


@recorded
def accumulate_k_steps(
    tx: GradientTransformation,
    k: int,
    *,
    average: bool = True,
    accumulator_dtype: DType | None = None,
    should_skip_update_fn: Callable[[Updates, jax.Array, Any], tuple[Any, Any]] | None = None,
) -> GradientTransformation:
    r"""Accumulate gradients over `k` micro-steps and apply `tx` once on their mean (or sum).

    .. math::

      a_j = \sum_{i=1}^{j} g_i, \qquad
      u_j = \begin{cases} 0 & j < k \\ \mathrm{tx}(a_k / k) & j = k \end{cases}

    (:math:`a_k` instead of :math:`a_k/k` with `average=False`); the accumulator then restarts.
    The inner state advances once per `k` micro-steps, so `k` micro-steps on gradients
    :math:`g_1..g_k` equal one step of `tx` on their mean. Extra arguments (`value=loss`) and
    `params` of the k-th micro-step are forwarded to `tx`. Works inside `chain`, under `jit`,
    `pmap` and sharded `jit`. After an inner step `state.micro_step` is 0 again and
    `state.grad_sum` holds the updates just emitted (their buffer, see the module notes); the next
    micro-step overwrites it. Emitted updates have the gradients' dtype.

    Args:
      tx: the transformation to apply every `k` micro-steps.
      k: the number of micro-steps per inner step, an int >= 1. With `k = 1` every call is an
        inner step; the state has the same layout for every `k`, so a checkpoint survives a change
        of `k`: a state restored under a smaller `k` whose cycle already holds `k - 1` or more
        micro-steps takes its inner step on the next micro-step, on the mean (or sum) of all the
        gradients it holds.
      average: pass the mean of the `k` gradients to `tx` (True) or their sum (False; RETURNN's
        and nnabla's behaviour, `optax.MultiSteps(use_grad_mean=False)`).
      accumulator_dtype: dtype of the accumulator (default: the params' dtype). float32 keeps bf16
        gradients from losing precision in the sum.
      should_skip_update_fn: `fn(updates, gradient_step, params) -> (skip, skip_state)`, called
        on every micro-step's gradients, as in `optax.MultiSteps`: when `skip` (a boolean
        scalar) is true, that micro-step is dropped (nothing is accumulated, the micro-step does
        not count, the updates are zeros) and only `state.skip_state` changes. E.g.
        `gradtx.skip_not_finite` (one NaN micro-step no longer spoils its whole window) or
        `gradtx.skip_large_updates`.

    Returns:
      A `GradientTransformation` with state `AccumulateState(micro_step, grad_sum, inner_state,
      gradient_step, skip_state)`: one extra buffer per parameter leaf.

    Examples:
      >>> import jax.numpy as jnp, gradtx
      >>> tx = gradtx.accumulate_k_steps(gradtx.sgd(1.0), k=2)
      >>> params = {"w": jnp.zeros(2)}
      >>> state = tx.init(params)
      >>> u1, state = tx.update({"w": jnp.array([1.0, 3.0])}, state, params)
      >>> u2, state = tx.update({"w": jnp.array([3.0, 1.0])}, state, params)
      >>> u1["w"], u2["w"]  # nothing, then one SGD step on the mean gradient
      (Array([0., 0.], dtype=float32), Array([-2., -2.], dtype=float32))

    Reference: nnabla's `update_interval`, RETURNN's `accum_grad_multiple_step`,
    `optax.MultiSteps(opt, k)`.
    """
    who = "accumulate_k_steps"
    tx = as_transformation(tx, who, "tx")
    check_int(who, "k", k, minimum=1)
    check_float_dtype(who, "accumulator_dtype", accumulator_dtype)
    check_bool(who, "average", average)
    if should_skip_update_fn is not None and not callable(should_skip_update_fn):
        raise TypeError(
            f"{who}: should_skip_update_fn must be a callable (updates, gradient_step, params) -> "
            f"(skip, skip_state), e.g. gradtx.skip_not_finite; got {should_skip_update_fn!r}"
        )
    inner_update = forward_extra_args(tx.update)

    def init(params):
        skip_state: Any = ()
        if should_skip_update_fn is not None:
            # the skip state's structure, from a call on zeros (it must not change over steps)
            zeros = zeros_like(params)
            _, skip_state = jax.tree.map(
                jnp.zeros_like, jax.eval_shape(should_skip_update_fn, zeros, zero_count(), params)
            )
        return AccumulateState(
            micro_step=zero_count(),
            grad_sum=zeros_like(params, accumulator_dtype),
            inner_state=tx.init(params),
            gradient_step=zero_count(),
            skip_state=skip_state,
        )

    def update(updates, state, params=None, **extra_args):
        expect_state(who, state, AccumulateState)
        assert_same_structure(who, updates=updates, **{"state.grad_sum": state.grad_sum})
        skip_state = state.skip_state
        # `>=`: a state restored under a smaller k (micro_step >= k - 1) steps at once
        full = state.micro_step >= k - 1
        if should_skip_update_fn is None:
            emit = full
            first = state.micro_step == 0
            grad_sum = jax.tree.map(
                lambda a, g: jnp.where(first, g, a + g).astype(a.dtype), state.grad_sum, updates
            )
        else:
            dropped, skip_state = should_skip_update_fn(updates, state.gradient_step, params)
            dropped = _check_skip(who, dropped)
            emit = full & ~dropped
            first = state.micro_step == 0
            grad_sum = jax.tree.map(
                lambda a, g: jnp.where(dropped, a, jnp.where(first, g, a + g)).astype(a.dtype),
                state.grad_sum,
                updates,
            )
        # Leaves whose accumulator holds the updates exactly carry them in its buffer; the others
        # (an accumulator narrower than the gradients) get a separate output.
        g_leaves, treedef = jax.tree.flatten(updates)
        folded = [
            jnp.promote_types(a.dtype, g.dtype) == a.dtype
            for a, g in zip(treedef.flatten_up_to(grad_sum), g_leaves, strict=True)
        ]

        # the micro-steps summed (k, or more in a state restored under a smaller k)
        summed = state.micro_step + 1

        def inner_step(grad_sum, inner_state):
            grads = jax.tree.map(
                lambda a, g: (a / summed.astype(a.dtype) if average else a).astype(g.dtype),
                grad_sum,
                updates,
            )
            with error_context(who):
                out, inner_state = inner_update(grads, inner_state, params, **extra_args)
            out = treedef.flatten_up_to(cast_like(out, updates))  # updates keep the grads' dtypes
            sums = treedef.flatten_up_to(grad_sum)
            carried = [
                u.astype(a.dtype) if f else a for u, a, f in zip(out, sums, folded, strict=True)
            ]
            apart = [u for u, f in zip(out, folded, strict=True) if not f]
            return treedef.unflatten(carried), apart, inner_state

        def skip(grad_sum, inner_state):
            apart = [jnp.zeros_like(g) for g, f in zip(g_leaves, folded, strict=True) if not f]
            return grad_sum, apart, inner_state

        if k == 1 and should_skip_update_fn is None:  # every call is an inner step: no cond
            grad_sum, apart, inner_state = inner_step(grad_sum, state.inner_state)
        else:
            grad_sum, apart, inner_state = jax.lax.cond(
                emit, inner_step, skip, grad_sum, state.inner_state
            )
        apart_iter = iter(apart)
        new_updates = treedef.unflatten(
            [
                jnp.where(emit, a, 0).astype(g.dtype) if f else next(apart_iter)
                for a, g, f in zip(treedef.flatten_up_to(grad_sum), g_leaves, folded, strict=True)
            ]
        )
        counted = (
            state.micro_step + 1 if should_skip_update_fn is None else state.micro_step + ~dropped
        )
        micro_step = jnp.where(emit, 0, counted).astype(state.micro_step.dtype)
        gradient_step = (state.gradient_step + emit).astype(state.gradient_step.dtype)
        return new_updates, AccumulateState(
            micro_step, grad_sum, inner_state, gradient_step, skip_state
        )

    return register_wrapper(GradientTransformation(init, update), tx, report=_accumulation_report)


def _accumulation_report(state: Any) -> dict[str, jax.Array]:
    """What `gradtx.metrics` shows of an accumulation state: the micro-steps of the current
    cycle and the inner steps taken."""
    micro = state.micro_step if hasattr(state, "micro_step") else state.mini_step
    return {"micro_step": micro, "gradient_step": state.gradient_step}


def _check_skip(who: str, skip: Any) -> jax.Array:
    skip = jnp.asarray(skip)
    if skip.shape != () or skip.dtype != jnp.bool_:
        raise ValueError(
            f"{who}: should_skip_update_fn must return (skip, skip_state) with skip a boolean "
            f"scalar, got skip of shape {skip.shape} and dtype {skip.dtype}"
        )
    return skip


# --------------------------------------------------------------------------------------------
# MultiSteps: Optax's class, its state layout and its accumulator semantics
# --------------------------------------------------------------------------------------------


class ShouldSkipUpdateFunction(Protocol):
    """The type of a *should-skip function* (`MultiSteps`' and `accumulate_k_steps`'
    `should_skip_update_fn`), e.g. `gradtx.skip_not_finite`.

    Called as `fn(updates, gradient_step, params)` on every micro-step's gradients (with
    `gradient_step` the inner steps taken so far, and the params or None), it returns
    `(should_skip, skip_state)`: a boolean scalar array (True drops the micro-step) and any pytree
    (of a fixed structure), stored as the wrapper's `skip_state`. Optax's protocol of that name.
    """

    def __call__(
        self, updates: Updates, gradient_step: ArrayLike, params: Params | None
    ) -> tuple[ArrayLike, Any]: ...


@counts_run_steps("gradient_step")
class MultiStepsState(NamedTuple):
    """State of `MultiSteps` (Optax's layout and field names)."""

    mini_step: jax.Array  # int32: micro-steps accumulated since the last inner step
    gradient_step: jax.Array  # int32, saturating: inner steps taken so far
    inner_opt_state: OptState  # the wrapped optimizer's state (advances on inner steps only)
    acc_grads: Updates  # running mean (use_grad_mean) or sum of this cycle's gradients; 0 after
    skip_state: Any = ()  # what `should_skip_update_fn` returned last (() without one)


class MultiSteps:
    r"""Accumulate gradients over `every_k_schedule` micro-steps, then take one step of `opt`.

    .. math::

      a_j = \frac{1}{j}\sum_{i=1}^{j} g_i \ \text{(or the sum)}, \qquad
      u_j = \begin{cases} 0 & j < k \\ \mathrm{opt}(a_k) & j = k \end{cases}

    after which the accumulator is zero again. The mean is kept by Welford's update
    :math:`a_j = a_{j-1} + (g_j - a_{j-1}) / j`, in float32 or wider, stored in
    `accumulator_dtype`. `k` may change over training: `every_k_schedule(gradient_step)`. The
    inner step runs under a `lax.cond` only on the micro-steps that emit (Optax computes it on
    every micro-step and multiplies the unused result by 0, so an infinite update on a held
    micro-step is a NaN there and 0 here). A state restored under a smaller `k`, whose
    `mini_step` is already `k - 1` or more, takes its inner step on the next micro-step, on all
    the gradients it holds (Optax counts modulo `k` there: it restarts the mean, or carries the
    sum into the next cycle). `accumulate_k_steps` is the faster form for a fixed
    `k` (its accumulator doubles as the buffer of the emitted updates); its state is
    `AccumulateState`, which is not Optax's.

    Args:
      opt: the wrapped optimizer.
      every_k_schedule: micro-steps per inner step: an int >= 1, or a function
        `gradient_step -> int` (traceable) that may vary the effective batch size.
      use_grad_mean: pass the mean of the accumulated gradients to `opt` (True) or their sum.
      should_skip_update_fn: a `ShouldSkipUpdateFunction` (e.g. `gradtx.skip_not_finite`, or
        `functools.partial(gradtx.skip_large_updates, max_squared_norm=42.0)`): a micro-step it
        rejects leaves the state as it was (only `skip_state` changes) and gives zero updates.
      accumulator_dtype: dtype of `acc_grads` (default float32, as Optax; None: the params').

    `init` / `update` give and take a `MultiStepsState(mini_step, gradient_step,
    inner_opt_state, acc_grads, skip_state)`; `gradient_transformation()` returns them as a
    `GradientTransformation` (a `MultiSteps` is also accepted directly by `gradtx.chain`).
    Emitted updates have the gradients' dtype; extra arguments of `update` (`value=loss`) reach
    `opt` on the emitting micro-step.

    Examples:
      >>> import jax.numpy as jnp, gradtx
      >>> ms = gradtx.wrappers.MultiSteps(gradtx.sgd(1.0), every_k_schedule=2)
      >>> params = {"w": jnp.zeros(2)}
      >>> state = ms.init(params)
      >>> u1, state = ms.update({"w": jnp.array([1.0, 3.0])}, state, params)
      >>> u2, state = ms.update({"w": jnp.array([3.0, 1.0])}, state, params)
      >>> u2["w"], bool(ms.has_updated(state))
      (Array([-2., -2.], dtype=float32), True)

    Reference: `optax.MultiSteps` (same arguments, state and accumulator values).
    """

    def __init__(
        self,
        opt: GradientTransformation,
        every_k_schedule: int | Callable[[ArrayLike], ArrayLike],
        use_grad_mean: bool = True,
        should_skip_update_fn: ShouldSkipUpdateFunction | None = None,
        accumulator_dtype: DType = jnp.float32,
    ) -> None:
        who = "MultiSteps"
        self._opt = as_transformation(opt, who, "opt")
        self._inner_update = forward_extra_args(self._opt.update)
        if callable(every_k_schedule):
            self._every_k_schedule = every_k_schedule
        else:
            check_int(who, "every_k_schedule", every_k_schedule, minimum=1)
            k = int(every_k_schedule)
            self._every_k_schedule = lambda step: k
        check_bool(who, "use_grad_mean", use_grad_mean)
        if should_skip_update_fn is not None and not callable(should_skip_update_fn):
            raise TypeError(
                f"{who}: should_skip_update_fn must be a callable (updates, gradient_step, "
                f"params) -> (skip, skip_state), e.g. gradtx.skip_not_finite; got "
                f"{should_skip_update_fn!r}"
            )
        check_float_dtype(who, "accumulator_dtype", accumulator_dtype)
        self._use_grad_mean = bool(use_grad_mean)
        self._should_skip_update_fn = should_skip_update_fn
        self._accumulator_dtype = accumulator_dtype
        # Registered once, for `gradtx.metrics` and `with_metrics`: they look a transformation
        # up by its `update`, and every `self.update` is a new bound method equal to this one,
        # so the MultiSteps object itself is seen as this wrapper (its counters, the inner
        # optimizer's schedules) for as long as it lives.
        self.as_transformation = register_wrapper(
            GradientTransformation(self.init, self.update),
            self._opt,
            "inner_opt_state",
            report=_accumulation_report,
        )

    @property
    def inner_opt(self) -> GradientTransformation:
        """The wrapped optimizer."""
        return self._opt

    def init(self, params: Params) -> MultiStepsState:
        """The initial `MultiStepsState`: zero counters and accumulator, `opt.init(params)`."""
        gradient_step = zero_count()
        skip_state: Any = ()
        if self._should_skip_update_fn is not None:  # as Optax: its value on zero updates
            _, skip_state = self._should_skip_update_fn(zeros_like(params), gradient_step, params)
        return MultiStepsState(
            mini_step=zero_count(),
            gradient_step=gradient_step,
            inner_opt_state=self._opt.init(params),
            acc_grads=zeros_like(params, self._accumulator_dtype),
            skip_state=skip_state,
        )

    def update(
        self,
        updates: Updates,
        state: MultiStepsState,
        params: Params | None = None,
        **extra_args: Any,
    ) -> tuple[Updates, MultiStepsState]:
        """Accumulate `updates`; on the k-th micro-step return `opt`'s updates (else zeros)."""
        who = "MultiSteps"
        expect_state(who, state, MultiStepsState)
        assert_same_structure(who, updates=updates, **{"state.acc_grads": state.acc_grads})
        k = self._every_k_schedule(state.gradient_step)
        skip_state = state.skip_state
        dropped: Any = False
        if self._should_skip_update_fn is not None:
            dropped, skip_state = self._should_skip_update_fn(updates, state.gradient_step, params)
            dropped = _check_skip(who, dropped)
        n = state.mini_step
        mean = self._use_grad_mean

        def accumulate(a, g):
            a32, g32 = widen(a), widen(g)
            return a32 + (g32 - a32) / (n + 1).astype(a32.dtype) if mean else a32 + g32

        acc = jax.tree.map(accumulate, state.acc_grads, updates)
        # `>=`: a state restored under a smaller k (mini_step >= k - 1) steps at once, on all
        # the gradients it holds (Optax compares with `==` and counts modulo k, which restarts
        # the mean there or carries the sum into the next cycle)
        emit = (n >= k - 1) & ~jnp.asarray(dropped)

        def inner_step(acc, inner_state):
            with error_context(who):
                out, new_state = self._inner_update(
                    cast_like(acc, updates), inner_state, params, **extra_args
                )
            # both branches of the cond must agree: the inner state keeps its dtypes (as Optax's)
            return cast_like(out, updates), cast_like(new_state, inner_state)

        def hold(acc, inner_state):
            return jax.tree.map(jnp.zeros_like, updates), inner_state

        if isinstance(emit, jax.core.Tracer):
            new_updates, inner_state = jax.lax.cond(
                emit, inner_step, hold, acc, state.inner_opt_state
            )
        else:  # eagerly: run only the branch taken (a cond would compile both at every step)
            branch = inner_step if bool(emit) else hold
            new_updates, inner_state = branch(acc, state.inner_opt_state)
        acc_grads = jax.tree.map(
            lambda old, new: jnp.where(emit, 0, jnp.where(dropped, old, new)).astype(old.dtype),
            state.acc_grads,
            acc,
        )
        mini_step = jnp.where(dropped, n, jnp.where(emit, 0, safe_increment(n))).astype(n.dtype)
        gradient_step = jnp.where(
            emit, safe_increment(state.gradient_step), state.gradient_step
        ).astype(state.gradient_step.dtype)
        return new_updates, MultiStepsState(
            mini_step=mini_step,
            gradient_step=gradient_step,
            inner_opt_state=inner_state,
            acc_grads=acc_grads,
            skip_state=skip_state,
        )

    def has_updated(self, state: MultiStepsState | Any) -> jax.Array:
        """Whether the `update` that returned `state` emitted an inner step."""
        return jnp.logical_and(state.mini_step == 0, state.gradient_step > 0)

    def gradient_transformation(self) -> GradientTransformation:
        """`init` and `update` as a `GradientTransformation`."""
        return self.as_transformation


__all__ = [
    "AccumulateState",
    "MultiSteps",
    "MultiStepsState",
    "ShouldSkipUpdateFunction",
    "accumulate_k_steps",
]
