"""Eager validation of hyperparameters at construction time (internal).

Every check names the transformation, the argument, the received value and what is allowed, so
the error tells the user the fix. Values that cannot be inspected in Python (traced values inside
`jax.jit`, schedules, which are checked when called) are accepted without a check.
"""

from __future__ import annotations

import copy
import difflib
import functools
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar, overload

import jax
import numpy as np


def concrete(value: Any) -> np.ndarray | None:
    """`value` as a NumPy array, or None when it is a schedule, a tracer or not numeric."""
    if value is None or callable(value) or isinstance(value, jax.core.Tracer):
        return None
    try:
        return np.asarray(value)
    except Exception:  # e.g. abstract values: nothing to check eagerly
        return None


def _fmt(value: Any) -> str:
    arr = concrete(value)
    if arr is not None and arr.ndim == 0:
        return repr(arr.item())
    return repr(value)


def _fail(who: str, name: str, requirement: str, value: Any) -> None:
    raise ValueError(f"{who}: {name} must be {requirement}, got {_fmt(value)}")


def check_scalar(who: str, name: str, value: Any) -> None:
    """`value` is a scalar (or a schedule): hyperparameters never broadcast into the params.

    Traced values are checked too (their shape is known); a schedule's result is checked when it
    is called (`_numerics.value_at`).
    """
    if value is None or callable(value):
        return
    try:
        shape = np.shape(value)
    except Exception:  # not array-like: the range checks report it
        return
    if shape != ():
        raise ValueError(
            f"{who}: {name} must be a scalar (or a schedule returning one), got an array of "
            f"shape {shape}; hyperparameters are not broadcast into the parameters (for "
            "per-parameter values use multi_transform / masked / lr_multipliers)"
        )


def check_positive(who: str, name: str, value: Any) -> None:
    """`value` is a scalar > 0."""
    check_scalar(who, name, value)
    arr = concrete(value)
    if arr is not None and not np.all(arr > 0):
        _fail(who, name, "> 0", value)


def check_non_negative(who: str, name: str, value: Any) -> None:
    """`value` is a scalar >= 0."""
    check_scalar(who, name, value)
    arr = concrete(value)
    if arr is not None and not np.all(arr >= 0):
        _fail(who, name, ">= 0", value)


def check_in_range(
    who: str,
    name: str,
    value: Any,
    low: float,
    high: float,
    *,
    low_open: bool = False,
    high_open: bool = False,
) -> None:
    """`value` is a scalar with `low <= value <= high`, either end optionally excluded."""
    check_scalar(who, name, value)
    arr = concrete(value)
    if arr is None:
        return
    ok_low = arr > low if low_open else arr >= low
    ok_high = arr < high if high_open else arr <= high
    if not np.all(ok_low & ok_high):
        interval = f"{'(' if low_open else '['}{low}, {high}{')' if high_open else ']'}"
        _fail(who, name, f"in {interval}", value)


def check_int(who: str, name: str, value: Any, *, minimum: int | None = None) -> None:
    """`value` is a Python/NumPy integer (not a bool), optionally >= `minimum`."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise ValueError(f"{who}: {name} must be an integer, got {value!r}")
    if minimum is not None and value < minimum:
        _fail(who, name, f">= {minimum}", value)


def check_bool(who: str, name: str, value: Any) -> None:
    """`value` is `True` or `False` (a flag; not 0 / 1, not a string, not an array)."""
    if not isinstance(value, bool | np.bool_):
        raise ValueError(f"{who}: {name} must be True or False, got {value!r}")


def check_one_of(who: str, name: str, value: Any, allowed: Iterable[Any]) -> None:
    """`value` is one of `allowed`; the error lists them and the closest match."""
    allowed = list(allowed)
    if value in allowed:
        return
    hint = ""
    if isinstance(value, str):
        close = difflib.get_close_matches(value, [str(a) for a in allowed], n=1)
        if close:
            hint = f" (did you mean {close[0]!r}?)"
    raise ValueError(f"{who}: {name} must be one of {allowed}, got {value!r}{hint}")


def expect_state(who: str, state: Any, cls: type) -> None:
    """`state` is a `cls` (from this transformation's own `init`); the error names both kinds."""
    if not isinstance(state, cls):
        raise ValueError(
            f"{who}: expected a {cls.__name__} (from this transformation's init), got "
            f"{type(state).__name__}; was the state made by a differently configured "
            "transformation (e.g. amsgrad=True vs False)?"
        )


def did_you_mean(name: str, candidates: Iterable[str]) -> str:
    """' (did you mean 'x'?)' for the closest candidate, or ''."""
    close = difflib.get_close_matches(name, list(candidates), n=3)
    if not close:
        return ""
    return " (did you mean " + " or ".join(repr(c) for c in close) + "?)"


_F = TypeVar("_F", bound=Callable[..., Any])


@overload
def alias_errors(fn: _F, /) -> _F: ...
@overload
def alias_errors(
    *, renamed: Mapping[str, str] | None = None, name: str | None = None
) -> Callable[[_F], _F]: ...
def alias_errors(
    fn: Any = None, /, *, renamed: Mapping[str, str] | None = None, name: str | None = None
) -> Any:
    """Decorate an optimizer alias so that the errors raised while building it name the alias.

    The user called `adam`, not `scale_by_adam`: a `ValueError` or `TypeError` raised inside the
    alias is raised again, of the same type and with the original as its `__cause__`, with the
    alias's name in front::

        adam: scale_by_adam: b1 must be in [0.0, 1.0), got 1.0

    Where a primitive calls the argument differently, `renamed` maps the start of the primitive's
    message, `"<primitive>: <its argument>"`, to the alias's argument, and the message names that
    first::

        adamw: weight_decay must be >= 0, got -1 (from weight_decay: rate must be >= 0, got -1)

    A message that already starts with the alias's name (its own checks) is left as it is. The
    signature and docstring are kept (`functools.wraps`). `name` replaces the function's name in
    the messages, for aliases in a namespace (`name="nnabla.adam"`). Only construction is
    covered: errors raised later by `update` name the primitive that raised them.

    Usage::

        @alias_errors
        def adam(learning_rate, b1=0.9, ...): ...

        @alias_errors(renamed={"weight_decay: rate": "weight_decay"})
        def adamw(learning_rate, ..., weight_decay=1e-4, mask=None): ...
    """
    renames = dict(renamed or {})

    def decorate(alias: _F) -> _F:
        who = name or alias.__name__

        @functools.wraps(alias)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            try:
                return alias(*args, **kwargs)
            except (ValueError, TypeError) as e:
                message = str(e)
                if message.startswith((f"{who}:", f"{who}(")):
                    raise
                raise _with_message(e, _alias_message(who, message, renames)) from e

        return wrapper  # type: ignore[return-value]

    return decorate if fn is None else decorate(fn)


def _alias_message(who: str, message: str, renames: Mapping[str, str]) -> str:
    for inner, argument in renames.items():
        if message.startswith(f"{inner} "):
            return f"{who}: {argument}{message[len(inner) :]} (from {message})"
    return f"{who}: {message}"


def _with_message(error: BaseException, message: str) -> BaseException:
    """A copy of `error` (same type, same attributes) whose message is `message`."""
    new = copy.copy(error)
    new.args = (message, *error.args[1:])
    return new
