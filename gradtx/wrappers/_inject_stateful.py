"""Hyperparameters driven by stateful schedules, kept in the optimizer state (Optax's names)."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping
from typing import Any, NamedTuple, Protocol, runtime_checkable

import jax
import jax.numpy as jnp

from .._base._checks import error_context, expect_state
from .._base._introspect import counts_run_steps, register
from .._base._numerics import safe_increment, zero_count
from .._base._typing import ArrayLike, DType, OptState, Schedule
from ..core._transformation import GradientTransformation, as_transformation, forward_extra_args
from ._common import injected_report
from ._inject_kinds import _kind, _plain, _stored_dtype, check_argument_names, check_factory

ScheduleState = Any  # whatever a stateful schedule keeps (a pytree of arrays)


@runtime_checkable
class StatefulSchedule(Protocol):
    """A schedule with a state of its own: `init()`, `update(state, **extra_args)` and
    `__call__(state, **extra_args) -> value`, as `optax.StatefulSchedule`.

    The value used at a step is `schedule(state)` with the state before that step's `update`;
    both receive the step's extra arguments (e.g. `value=loss`), so a schedule can react to the
    training signal.
    """

    def init(self) -> ScheduleState:
        """The schedule's initial state."""
        ...

    def update(self, state: ScheduleState, **extra_args: Any) -> ScheduleState:
        """The schedule's state after one more step."""
        ...

    def __call__(self, state: ScheduleState, **extra_args: Any) -> ArrayLike:
        """The schedule's value in `state`."""
        ...


class WrappedScheduleState(NamedTuple):
    count: jax.Array  # type: ignore[assignment]  # int32, saturating: the step the schedule sees


class WrappedSchedule:
    """A plain schedule `count -> value` as a `StatefulSchedule` whose state is its step count."""

    def __init__(self, schedule_fn: Schedule):
        if not callable(schedule_fn):
            raise TypeError(
                f"WrappedSchedule: schedule_fn must be callable, got {type(schedule_fn).__name__}"
            )
        self.schedule_fn = schedule_fn

    def init(self) -> WrappedScheduleState:
        return WrappedScheduleState(count=zero_count())

    def update(self, state: WrappedScheduleState, **extra_args: Any) -> WrappedScheduleState:
        del extra_args
        return WrappedScheduleState(count=safe_increment(state.count))

    def __call__(self, state: WrappedScheduleState, **extra_args: Any) -> ArrayLike:
        del extra_args
        return self.schedule_fn(state.count)


@counts_run_steps("count")
class InjectStatefulHyperparamsState(NamedTuple):
    count: jax.Array  # type: ignore[assignment]  # int32, saturating: steps taken
    hyperparams: dict[str, jax.Array]  # the values used at the last step, by argument name
    hyperparams_states: dict[str, ScheduleState]  # each schedule's own state, by argument name
    inner_state: OptState


def _accepted(fn: Callable[..., Any], extra_args: Mapping[str, Any]) -> dict[str, Any]:
    """The extra arguments `fn` declares (all of them when it takes `**kwargs`)."""
    if not extra_args:
        return {}
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return dict(extra_args)
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return dict(extra_args)
    names = {
        n
        for n, p in params.items()
        if p.kind in (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    }
    return {k: v for k, v in extra_args.items() if k in names}


def _bind(who: str, signature: inspect.Signature, args: tuple, kwargs: dict) -> dict[str, Any]:
    """Every argument of the factory by name, defaults included (as Optax stores them)."""
    params = signature.parameters
    check_argument_names(who, "the factory", signature, kwargs)
    try:
        bound = signature.bind(*args, **kwargs)
    except TypeError as e:
        raise TypeError(f"{who}: {e}") from None
    bound.apply_defaults()
    arguments: dict[str, Any] = {}
    for name, value in bound.arguments.items():
        kind = params[name].kind
        if kind is inspect.Parameter.VAR_POSITIONAL:
            if value:
                raise ValueError(
                    f"{who}: pass hyperparameters by keyword; the factory's *args cannot be named"
                )
        elif kind is inspect.Parameter.VAR_KEYWORD:
            arguments.update(value)
        else:
            arguments[name] = value
    return arguments


def inject_stateful_hyperparams(
    inner_factory: Callable[..., GradientTransformation],
    static_args: str | Iterable[str] = (),
    hyperparam_dtype: DType | None = None,
) -> Callable[..., GradientTransformation]:
    r"""Like `inject_hyperparams`, but a hyperparameter may follow a stateful schedule.

    `inject_stateful_hyperparams(inner_factory)(**hparams)` behaves like
    `inner_factory(**hparams)` with the hyperparameters kept in the state. Each argument is one of

    - a `StatefulSchedule` (`init()`, `update(state, **extra_args)`,
      `__call__(state, **extra_args)`): at each step its value in its current state is used, then
      its state advances; both calls get the step's extra arguments (e.g. `value=loss`), those
      the schedule declares;
    - a plain schedule `count -> value`, wrapped as a `WrappedSchedule` (its state is its count);
    - a number or numeric array, stored in `state.hyperparams` and changeable between steps
      (`gradtx.tree.set(state, b2=0.95)`);
    - static (passed unchanged): None, bools, strings, dtypes, keys, trees, ints the factory
      annotates `int`, callables whose annotation admits non-schedules, names in `static_args`.

    As in `inject_hyperparams` (and Optax), the factory's defaults are stored too. The
    value of every schedule at the last step is in `state.hyperparams` (overwritten by the
    schedule at the next step); their states are in `state.hyperparams_states`, under the same
    names (so `gradtx.tree.set` / `get` address a scheduled value by its path,
    `"hyperparams/learning_rate"`). Stored float dtypes follow `inject_hyperparams`' rule
    (`hyperparam_dtype`, else a float array's own dtype, else float32, where Optax uses the
    params' widest dtype); a schedule's value is converted by that rule at every step, so an
    integer value stays an integer, as in Optax.

    Args:
      inner_factory: a function returning a `GradientTransformation`.
      static_args: names to pass through unchanged although they look numeric or like schedules.
      hyperparam_dtype: a floating dtype for the stored float values, or None.

    Returns:
      A function with `inner_factory`'s arguments returning a `GradientTransformation` whose
      state is `InjectStatefulHyperparamsState(count, hyperparams, hyperparams_states,
      inner_state)`.

    Reference: `optax.inject_stateful_hyperparams` (deprecated in Optax 0.2.8 in favour of its
    `inject_hyperparams`, which there takes stateful schedules; gradtx's `inject_hyperparams`
    takes them too, and builds this state for them, but keeps the three-field state for plain
    schedules, so this one, which always builds it, is not deprecated).
    """
    who = "inject_stateful_hyperparams"
    factory = inner_factory
    hyperparam_dtype, static, signature, factory_name = check_factory(
        who, factory, static_args, hyperparam_dtype
    )
    context = f"{who}({factory_name})"

    def wrapped(*args: Any, **kwargs: Any) -> GradientTransformation:
        if signature is not None:
            arguments = _bind(context, signature, args, kwargs)
            params: Mapping[str, inspect.Parameter] = signature.parameters
        elif args:
            raise ValueError(
                f"{context}: the factory's signature is unknown, so pass hyperparameters by keyword"
            )
        else:
            arguments, params = dict(kwargs), {}

        fixed: dict[str, Any] = {}
        schedules: dict[str, Any] = {}
        numeric: dict[str, Any] = {}
        for name, value in arguments.items():
            if name not in static and isinstance(value, StatefulSchedule):
                schedules[name] = value
                continue
            kind = _kind(name, value, params.get(name), static)
            if kind == "schedule":
                schedules[name] = WrappedSchedule(value)
            elif kind == "numeric":
                numeric[name] = value
            else:
                fixed[name] = value
        # A number keeps the dtype of its first value; a schedule's value is converted at each
        # step (as in Optax: a float becomes the float dtype, an integer stays an integer).
        dtypes = {n: _stored_dtype(v, hyperparam_dtype) for n, v in numeric.items()}

        def scheduled(value):
            return jnp.asarray(value, _stored_dtype(value, hyperparam_dtype))

        # Validate with the values as stored (a default rounded to bf16 is checked as rounded),
        # a schedule standing in as its value in its initial state.
        first = {n: scheduled(s(s.init())) for n, s in schedules.items()}
        stored = {n: _plain(jnp.asarray(v, dtypes[n])) for n, v in numeric.items()}
        stored.update({n: _plain(v) for n, v in first.items()})
        with error_context(context):
            as_transformation(factory(**fixed, **stored), who, f"{factory_name}(...)")

        def build(values):
            return as_transformation(factory(**fixed, **values), who, f"{factory_name}(...)")

        def init(params):
            states = {n: s.init() for n, s in schedules.items()}
            values = {n: jnp.asarray(v, dtypes[n]) for n, v in numeric.items()}
            for n, s in schedules.items():
                values[n] = scheduled(s(states[n]))
            with error_context(context):
                inner_state = build(values).init(params)
            return InjectStatefulHyperparamsState(
                count=zero_count(),
                hyperparams=values,
                hyperparams_states=states,
                inner_state=inner_state,
            )

        def update(updates, state, params=None, **extra_args):
            expect_state(context, state, InjectStatefulHyperparamsState)
            expected = set(numeric) | set(schedules)
            if set(state.hyperparams) != expected:
                raise ValueError(
                    f"{context}: state.hyperparams has {sorted(state.hyperparams)}, "
                    f"expected {sorted(expected)}"
                )
            if set(state.hyperparams_states) != set(schedules):
                raise ValueError(
                    f"{context}: state.hyperparams_states has {sorted(state.hyperparams_states)}, "
                    f"expected {sorted(schedules)}"
                )
            values = {n: jnp.asarray(state.hyperparams[n], dtypes[n]) for n in numeric}
            states = {}
            for n, s in schedules.items():
                current = state.hyperparams_states[n]
                values[n] = scheduled(s(current, **_accepted(s, extra_args)))
                states[n] = s.update(current, **_accepted(s.update, extra_args))
            with error_context(context):
                inner = build(values)
                new_updates, inner_state = forward_extra_args(inner.update)(
                    updates, state.inner_state, params, **extra_args
                )
            return new_updates, InjectStatefulHyperparamsState(
                count=safe_increment(state.count),
                hyperparams=values,
                hyperparams_states=states,
                inner_state=inner_state,
            )

        return register(GradientTransformation(init, update), "wrapper", report=injected_report)

    wrapped.__name__ = f"inject_stateful_hyperparams({factory_name})"
    wrapped.__doc__ = (
        f"`{factory_name}` with its hyperparameters (and their schedules) in the state."
    )
    return wrapped


__all__ = [
    "InjectStatefulHyperparamsState",
    "StatefulSchedule",
    "WrappedSchedule",
    "WrappedScheduleState",
    "inject_stateful_hyperparams",
]
