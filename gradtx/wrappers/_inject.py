"""Hyperparameters kept in the optimizer state, readable and changeable between steps."""

from __future__ import annotations

import inspect
import re
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .._base._checks import did_you_mean, error_context, expect_state
from .._base._numerics import safe_increment, zero_count
from .._base._typing import ArrayLike, OptState, ScalarOrSchedule, Schedule
from ..core._transformation import GradientTransformation, _as_transformation, forward_extra_args


class InjectHyperparamsState(NamedTuple):
    count: jax.Array  # type: ignore[assignment]  # int32, saturating: the step schedules see
    hyperparams: dict[str, jax.Array]  # current values (hyperparam_dtype), by argument name
    inner_state: OptState


# Evaluated annotations, by the name they are written with (the aliases are unions, which
# `str()` would spell out member by member).
_ALIAS_NAMES = (
    (ScalarOrSchedule, "ScalarOrSchedule"),
    (Schedule, "Schedule"),
    (ArrayLike, "ArrayLike"),
    (jax.Array, "Array"),
    (type(None), "None"),
)


def _type_text(ann: Any) -> str:
    """An evaluated annotation as source text: `float | None`, `ScalarOrSchedule | None`."""
    for alias, name in _ALIAS_NAMES:
        if ann is alias or (not isinstance(ann, type) and ann == alias):
            return name
    if isinstance(ann, types.UnionType) or typing.get_origin(ann) is typing.Union:
        args = typing.get_args(ann)
        for alias, name in _ALIAS_NAMES[:3]:  # a union that contains a whole alias
            members = typing.get_args(alias)
            if members and all(m in args for m in members):
                rest = [a for a in args if a not in members]
                return " | ".join([name, *(_type_text(a) for a in rest)])
        return " | ".join(_type_text(a) for a in args)
    return str(getattr(ann, "__name__", ann))


def _annotation_text(param: inspect.Parameter | None) -> str:
    if param is None or param.annotation is inspect.Parameter.empty:
        return ""
    ann = param.annotation
    return ann if isinstance(ann, str) else _type_text(ann)


def _wants_int(annotation: str) -> bool:
    """Whether an annotation asks for an integer and nothing else numeric (`int | None`)."""
    return bool(re.search(r"\bint\b", annotation)) and not re.search(
        r"float|ArrayLike|Array|Schedule|Numeric|Scalar|complex", annotation
    )


_NUMBER_TYPES = frozenset(
    {"ArrayLike", "jax.typing.ArrayLike", "Array", "jax.Array", "float", "int", "complex"}
    | {"Numeric", "Scalar", "None"}
)


def _numbers_only(annotation: str) -> bool:
    """Whether an annotation (`ArrayLike`, `float | None`) admits numbers and nothing else."""
    return all(part.strip() in _NUMBER_TYPES for part in annotation.split("|"))


def _is_key(value: Any) -> bool:
    """Whether `value` is a typed PRNG key (`jax.random.key(0)`): passed through, never stored."""
    dtype = getattr(value, "dtype", None)
    return dtype is not None and jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key)


def _is_number(value: Any) -> bool:
    if isinstance(value, bool | np.bool_) or _is_key(value):
        return False
    if isinstance(value, int | float | np.integer | np.floating):
        return True
    if isinstance(value, np.ndarray | jax.Array):
        return bool(jnp.issubdtype(value.dtype, jnp.number))  # bf16 included
    return False


def _stored_dtype(value: Any, hyperparam_dtype: Any) -> Any:
    """The dtype a hyperparameter is stored in, from its (first) value.

    Integers keep their dtype (int32 for a Python int, as in Optax: a seed stays a seed). Floats
    become `hyperparam_dtype` when it is given; otherwise an array of a float dtype (bf16
    included) keeps it, and a Python float (or a weakly typed value) becomes float32.
    """
    dtype = jnp.asarray(value).dtype
    if not jnp.issubdtype(dtype, jnp.floating):
        return dtype
    if hyperparam_dtype is not None:
        return hyperparam_dtype
    typed = isinstance(value, np.ndarray | np.generic | jax.Array)
    return dtype if typed and not getattr(value, "weak_type", False) else jnp.dtype(jnp.float32)


def _plain(value: jax.Array) -> Any:
    """A concrete scalar as a Python number (for validation messages), arrays unchanged."""
    return value.item() if value.ndim == 0 else value


def _kind(name: str, value: Any, param: inspect.Parameter | None, static: set[str]) -> str:
    """'static', 'schedule' or 'numeric' for one factory argument."""
    if name in static or value is None:
        return "static"
    annotation = _annotation_text(param)
    if callable(value) and not isinstance(value, jax.Array):
        # A callable is a schedule unless the annotation says the argument may be something
        # else (a mask function: `MaskOrFn`, `Any`); unannotated callables are schedules, as in
        # Optax, and so are callables for an argument that takes only numbers (`scale`'s
        # step_size: ArrayLike).
        schedule = not annotation or "Schedule" in annotation or _numbers_only(annotation)
        return "schedule" if schedule else "static"
    if not _is_number(value):
        return "static"  # bools, strings, dtypes, PRNG keys, masks, trees, ...
    if isinstance(value, int | np.integer) and _wants_int(annotation):
        return "static"  # e.g. a period or a count the factory uses as a Python int
    return "numeric"


def inject_hyperparams(
    inner_factory: Callable[..., GradientTransformation],
    static_args: str | Iterable[str] = (),
    hyperparam_dtype: Any = None,
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
    keep the factory's defaults and are not stored (Optax stores those too).

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
      state is `InjectHyperparamsState(count, hyperparams, inner_state)`.

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

    Reference: `optax.inject_hyperparams` (same state fields; schedules are stored as the value
    used at the step); RETURNN's `Updater.set_learning_rate`.
    """
    who = "inject_hyperparams"
    factory = inner_factory
    if not callable(factory):
        raise TypeError(f"{who}: inner_factory must be callable, got {type(factory).__name__}")
    if hyperparam_dtype is not None:
        try:
            hyperparam_dtype = jnp.dtype(hyperparam_dtype)
        except TypeError:
            hyperparam_dtype = None
        if hyperparam_dtype is None or not jnp.issubdtype(hyperparam_dtype, jnp.floating):
            raise TypeError(
                f"{who}: hyperparam_dtype must be a floating dtype (e.g. jnp.float32) or None"
            )
    static = {static_args} if isinstance(static_args, str) else set(static_args)
    try:
        signature: inspect.Signature | None = inspect.signature(factory)
    except (TypeError, ValueError):
        signature = None
    factory_name = getattr(factory, "__name__", type(factory).__name__)

    def _check_names(signature: inspect.Signature, kwargs: Mapping[str, Any]) -> None:
        """A `TypeError` suggesting the factory's argument for a misspelt (or torch-named) one."""
        params = signature.parameters
        if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
            return
        named = [
            n
            for n, p in params.items()
            if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
        ]
        for name in kwargs:
            if name not in named:
                raise TypeError(
                    f"{who}({factory_name}): {factory_name} has no argument {name!r}"
                    f"{did_you_mean(name, named)}; its arguments are {named}"
                )

    def wrapped(*args: Any, **kwargs: Any) -> GradientTransformation:
        if signature is not None:
            _check_names(signature, kwargs)
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
        takes_any = signature is None or any(
            p.kind is inspect.Parameter.VAR_KEYWORD for p in signature.parameters.values()
        )
        if not takes_any and signature is not None:
            missing = static - set(signature.parameters)
            if missing:
                raise ValueError(
                    f"{who}({factory_name}): static_args names {sorted(missing)} that the factory "
                    f"does not take; its arguments are {list(signature.parameters)}"
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
        _as_transformation(factory(**fixed, **numeric, **firsts), who, f"{factory_name}(...)")

        def values_at(count, current):
            values = {n: jnp.asarray(v, dtypes[n]) for n, v in current.items()}
            for n, fn in schedules.items():
                values[n] = jnp.asarray(fn(count), dtypes[n])
            return values

        def build(values):
            return _as_transformation(factory(**fixed, **values), who, f"{factory_name}(...)")

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

        return GradientTransformation(init, update)

    wrapped.__name__ = f"inject_hyperparams({factory_name})"
    wrapped.__doc__ = f"`{factory_name}` with its numeric hyperparameters kept in the state."
    return wrapped


__all__ = ["InjectHyperparamsState", "inject_hyperparams"]
