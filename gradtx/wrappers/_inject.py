"""Hyperparameters kept in the optimizer state, readable and changeable between steps."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from .._base._checks import error_context, expect_state
from .._base._introspect import counts_run_steps, register
from .._base._numerics import safe_increment, zero_count
from .._base._typing import DType, OptState
from ..core._transformation import GradientTransformation, as_transformation, forward_extra_args
from ._common import injected_report
from ._inject_kinds import (
    _is_stateful_schedule,
    _kind,
    _plain,
    _stored_dtype,
    check_argument_names,
    check_factory,
)
from ._inject_stateful import inject_stateful_hyperparams


@counts_run_steps("count")
class InjectHyperparamsState(NamedTuple):
    count: jax.Array  # type: ignore[assignment]  # int32, saturating: the step schedules see
    hyperparams: dict[str, jax.Array]  # current values (hyperparam_dtype), by argument name
    inner_state: OptState


def inject_hyperparams(
    inner_factory: Callable[..., GradientTransformation],
    static_args: str | Iterable[str] = (),
    hyperparam_dtype: DType | None = None,
) -> Callable[..., GradientTransformation]:
    r"""Make a factory's numeric hyperparameters part of the state, so they can change per step.

    `inject_hyperparams(inner_factory)(**hparams)` behaves like `inner_factory(**hparams)`, but
    every numeric argument (a number or a numeric array) is stored in `state.hyperparams`, and
    every schedule (a callable `count -> value`) is evaluated at the wrapper's own step count and
    its value stored there before each step. The inner transformation is rebuilt from the stored
    values inside `update`, so

    - `gradtx.tree.get(state, "learning_rate")` reads the current value, and
    - `state = gradtx.tree.set(state, learning_rate=0.01)` changes it for the next step without
      recompiling a jitted step (RETURNN's `set_learning_rate`); a scheduled value set this way
      is overwritten by the schedule at the next step.

    Stored dtypes: integers keep theirs (a Python int is int32, as in Optax, so `key=0` stays a
    seed; write `1.0`, not `1`, for a float hyperparameter you mean to change). Floats are
    `hyperparam_dtype` when it is given; otherwise a float array keeps its dtype (bf16
    included) and a Python float is float32 whatever the params' dtype (Optax uses the params'
    widest dtype), so b2 = 0.999 stays 0.999 with bf16 params. A schedule's dtype follows the
    same rule from its value at step 0.

    Which arguments are static (passed to the factory unchanged, never stored): None, bools,
    strings, dtypes, PRNG keys (`jax.random.key(0)`), trees such as masks, ints whose parameter
    is annotated `int` (periods, counts), callables whose annotation admits something other than
    numbers and schedules (mask functions), and every name in `static_args`. Arguments not passed
    keep the factory's defaults and are not stored (Optax stores those too), so that
    `inject_hyperparams(adam)(lr)` computes exactly what `adam(lr)` does and states saved by
    earlier gradtx versions load; pass an argument to make it injectable.

    A stateful schedule (`gradtx.StatefulSchedule`: `init()`, `update(state, **extra_args)`,
    `__call__(state, **extra_args)`, as `optax.StatefulSchedule`) may be given for any numeric
    argument; the state is then Optax's `InjectStatefulHyperparamsState`, with each schedule's
    own state in `hyperparams_states` (see `inject_stateful_hyperparams`, which builds it).
    Without one the state is `InjectHyperparamsState`.

    The factory is called once at construction to validate the arguments, with each schedule's
    value at step 0 in its place, so a schedule may be given for an argument that only takes
    numbers (`inject_hyperparams(gradtx.scale)(step_size=lambda count: 0.1)`).

    Args:
      inner_factory: a function returning a `GradientTransformation` (e.g. `gradtx.adam`). Its
        state layout must not depend on hyperparameter values (true of every gradtx
        transformation).
      static_args: names to pass through unchanged even though they look numeric or like schedules.
      hyperparam_dtype: a floating dtype for the stored float values, or None (see above).

    Returns:
      A function with `inner_factory`'s arguments returning a `GradientTransformation` whose
      state is `InjectHyperparamsState(count, hyperparams, inner_state)` (with a stateful
      schedule among the arguments, `InjectStatefulHyperparamsState`).

    Raises:
      ValueError: at once, when `static_args` names an argument the factory does not take.

    Examples:
      >>> import jax, jax.numpy as jnp, gradtx
      >>> tx = gradtx.inject_hyperparams(gradtx.sgd)(learning_rate=0.1)
      >>> params = {"w": jnp.zeros(2)}
      >>> state = tx.init(params)
      >>> step = jax.jit(tx.update)
      >>> updates, state = step({"w": jnp.ones(2)}, state, params)
      >>> state = gradtx.tree.set(state, learning_rate=0.01)  # same shapes: no recompilation
      >>> updates, state = step({"w": jnp.ones(2)}, state, params)
      >>> updates["w"]
      Array([-0.01, -0.01], dtype=float32)

    Reference: `optax.inject_hyperparams` (the same `hyperparams`, apart from the defaults; Optax
    0.2.8 always uses the four-field state, wrapping plain schedules in `WrappedSchedule`,
    gradtx only when a stateful schedule needs it, so a plain schedule's step is the wrapper's
    `count`); RETURNN's `Updater.set_learning_rate`.
    """
    who = "inject_hyperparams"
    factory = inner_factory
    hyperparam_dtype, static, signature, factory_name = check_factory(
        who, factory, static_args, hyperparam_dtype
    )

    def wrapped(*args: Any, **kwargs: Any) -> GradientTransformation:
        if signature is not None:
            check_argument_names(f"{who}({factory_name})", factory_name, signature, kwargs)
            try:
                bound = signature.bind(*args, **kwargs)
            except TypeError as e:
                raise TypeError(f"{who}({factory_name}): {e}") from None
            arguments: dict[str, Any] = {}
            for name, value in bound.arguments.items():
                kind = signature.parameters[name].kind
                if kind is inspect.Parameter.VAR_POSITIONAL:
                    if value:
                        raise ValueError(
                            f"{who}({factory_name}): pass hyperparameters by keyword; the "
                            "factory's *args cannot be named"
                        )
                elif kind is inspect.Parameter.VAR_KEYWORD:
                    arguments.update(value)
                else:
                    arguments[name] = value
            params: Mapping[str, inspect.Parameter] = signature.parameters
        elif args:
            raise ValueError(
                f"{who}({factory_name}): the factory's signature is unknown, so pass "
                "hyperparameters by keyword"
            )
        else:
            arguments, params = dict(kwargs), {}
        if any(_is_stateful_schedule(v) for n, v in arguments.items() if n not in static):
            # A schedule with a state of its own needs a place for that state: Optax's
            # four-field state (InjectStatefulHyperparamsState), built by
            # inject_stateful_hyperparams. Plain schedules keep the three-field state.
            return inject_stateful_hyperparams(factory, tuple(static), hyperparam_dtype)(
                *args, **kwargs
            )
        kinds = {n: _kind(n, v, params.get(n), static) for n, v in arguments.items()}
        fixed = {n: v for n, v in arguments.items() if kinds[n] == "static"}
        schedules = {n: v for n, v in arguments.items() if kinds[n] == "schedule"}
        numeric = {n: v for n, v in arguments.items() if kinds[n] == "numeric"}
        # A schedule's dtype (and its construction-time check) comes from its value at step 0.
        first = {n: fn(zero_count()) for n, fn in schedules.items()}
        dtypes = {n: _stored_dtype(v, hyperparam_dtype) for n, v in {**numeric, **first}.items()}
        # Validate eagerly, with numbers: a schedule stands in as its value at the first step, so
        # a factory whose argument only takes numbers (`scale`'s step_size) accepts a schedule.
        firsts = {n: _plain(jnp.asarray(v, dtypes[n])) for n, v in first.items()}
        as_transformation(factory(**fixed, **numeric, **firsts), who, f"{factory_name}(...)")

        def values_at(count, current):
            values = {n: jnp.asarray(v, dtypes[n]) for n, v in current.items()}
            for n, fn in schedules.items():
                values[n] = jnp.asarray(fn(count), dtypes[n])
            return values

        def build(values):
            return as_transformation(factory(**fixed, **values), who, f"{factory_name}(...)")

        def init(params):
            count = zero_count()
            values = values_at(count, numeric)
            with error_context(f"{who}({factory_name})"):
                inner_state = build(values).init(params)
            return InjectHyperparamsState(count=count, hyperparams=values, inner_state=inner_state)

        def update(updates, state, params=None, **extra_args):
            expect_state(f"{who}({factory_name})", state, InjectHyperparamsState)
            expected = set(numeric) | set(schedules)
            if set(state.hyperparams) != expected:
                raise ValueError(
                    f"{who}({factory_name}): state.hyperparams has {sorted(state.hyperparams)}, "
                    f"expected {sorted(expected)}"
                )
            values = values_at(state.count, state.hyperparams)
            with error_context(f"{who}({factory_name})"):
                inner = build(values)
                new_updates, inner_state = forward_extra_args(inner.update)(
                    updates, state.inner_state, params, **extra_args
                )
            return new_updates, InjectHyperparamsState(
                count=safe_increment(state.count), hyperparams=values, inner_state=inner_state
            )

        # the inner transformation is rebuilt from the state's values at every step, so
        # `gradtx.metrics` reads the injected values (those used by the latest update) only
        return register(GradientTransformation(init, update), "wrapper", report=injected_report)

    wrapped.__name__ = f"inject_hyperparams({factory_name})"
    wrapped.__doc__ = f"`{factory_name}` with its numeric hyperparameters kept in the state."
    return wrapped


__all__ = ["InjectHyperparamsState", "inject_hyperparams"]
