"""What `inject_hyperparams` does with each factory argument: injected (a number, stored in the
state), a schedule (evaluated every step), or static (passed as it is); shared by
`inject_hyperparams` and `inject_stateful_hyperparams`."""

from __future__ import annotations

import inspect
import re
import types
import typing
from collections.abc import Iterable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .._base._checks import did_you_mean
from .._base._typing import ArrayLike, ScalarOrSchedule, Schedule

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


def _is_stateful_schedule(value: Any) -> bool:
    """Whether `value` is a stateful schedule (`init()`, `update(state)`, `__call__(state)`),
    as `optax.StatefulSchedule` (`gradtx.StatefulSchedule`)."""
    return (
        callable(value)
        and not isinstance(value, jax.Array)
        and callable(getattr(value, "init", None))
        and callable(getattr(value, "update", None))
    )


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


def check_factory(
    who: str, factory: Any, static_args: str | Iterable[str], hyperparam_dtype: Any
) -> tuple[Any, set[str], inspect.Signature | None, str]:
    """The construction checks both injection wrappers share (as Optax makes them at once):
    returns (hyperparam_dtype as a dtype or None, the static names, the factory's signature or
    None when it has none, its name)."""
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
    if signature is not None and not any(
        p.kind is inspect.Parameter.VAR_KEYWORD for p in signature.parameters.values()
    ):
        missing = static - set(signature.parameters)
        if missing:  # checked here, as in Optax, not only when the wrapped factory is called
            raise ValueError(
                f"{who}({factory_name}): static_args names {sorted(missing)} that the factory "
                f"does not take; its arguments are {list(signature.parameters)}"
            )
    return hyperparam_dtype, static, signature, factory_name


def check_argument_names(
    prefix: str, factory: str, signature: inspect.Signature, kwargs: Any
) -> None:
    """A `TypeError` suggesting the factory's argument for a misspelt (or torch-named) keyword:
    "`prefix`: `factory` has no argument 'x' (did you mean ...); its arguments are [...]"."""
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
                f"{prefix}: {factory} has no argument {name!r}{did_you_mean(name, named)}; "
                f"its arguments are {named}"
            )
