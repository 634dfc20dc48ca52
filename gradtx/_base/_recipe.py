"""How a transformation or schedule was built: the public factory and the arguments it was called
with, so that `gradtx.hyperparameters` can read its numbers and `gradtx.with_hyperparameters`
can build it again with other (traced) ones.

A factory's result carries its `Recipe` as an attribute of a function it owns: a
transformation's `update`, a schedule itself. The outermost factory call wins: `adamw(...)`
builds a `chain` (which records itself) and then records `adamw` over it, so the numbers read
back are adamw's arguments, under adamw's names. Objects that take no attributes (a bound
method, an Optax transformation) carry none and are opaque: their numbers stay constants.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar, overload

_ATTRIBUTE = "__gradtx_recipe__"
#: set on a factory whose results carry their `Recipe` (`recorded`, `alias_errors`)
RECORDS = "__gradtx_records__"


@dataclass(frozen=True, eq=False)
class Recipe:
    """A factory call: `factory(*args, **kwargs)` built the object that carries it.

    `schedule` says the result is a schedule `count -> value`, whose integer arguments (warm-up
    and decay steps, boundaries) are hyperparameters too; a transformation's integer arguments
    annotated `int` (periods, sizes) are structure.
    """

    factory: Callable[..., Any]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    schedule: bool = False


def _holder(obj: Any) -> Any:
    update = getattr(obj, "update", None)
    if callable(getattr(obj, "init", None)) and callable(update):
        return update
    return obj if callable(obj) else None


def remember(obj: Any, recipe: Recipe) -> Any:
    """Attach `recipe` to `obj` (a transformation or a schedule) and return `obj`."""
    holder = _holder(obj)
    if holder is not None:
        # an object without attributes (a bound method) stays opaque: its numbers are constants
        with contextlib.suppress(AttributeError, TypeError):
            setattr(holder, _ATTRIBUTE, (id(holder), recipe))
    return obj


def recipe_of(obj: Any) -> Recipe | None:
    """The `Recipe` `obj` was built by, or None. A record copied onto another function (by
    `functools.wraps`, which copies a function's attributes to its wrapper) is not the
    wrapper's: the record names the object it was attached to."""
    holder = _holder(obj)
    owner, recipe = getattr(holder, _ATTRIBUTE, (None, None))
    return recipe if owner == id(holder) else None


def _passed_through(result: Any, arguments: Any) -> bool:
    """Whether `result` carries its record on an object one of `arguments` holds (a factory
    that returns its argument, or a transformation with the argument's `update`): recording
    there would overwrite the argument's own record with one that contains it."""
    holder = _holder(result)
    if holder is None:
        return False
    pending = [arguments]
    while pending:
        value = pending.pop()
        if isinstance(value, list | tuple) and not _holder(value):
            pending.extend(value)
        elif isinstance(value, dict):
            pending.extend(value.values())
        elif _holder(value) is holder:
            return True
    return False


_F = TypeVar("_F", bound=Callable[..., Any])


@overload
def recorded(factory: _F, /) -> _F: ...


@overload
def recorded(*, schedule: bool = False) -> Callable[[_F], _F]: ...


def recorded(factory: _F | None = None, /, *, schedule: bool = False) -> Any:
    """Decorate a public factory so that what it returns carries its `Recipe`.

    `@recorded` on a transformation factory, `@recorded(schedule=True)` on a schedule factory.
    The signature and docstring are kept; nothing is added to what the result computes.
    """

    def decorate(fn: _F) -> _F:
        @functools.wraps(fn)
        def build(*args: Any, **kwargs: Any) -> Any:
            result = fn(*args, **kwargs)
            if _passed_through(result, (args, kwargs)):
                return result  # an argument given back (or its `update`): it keeps its own
            return remember(result, Recipe(build, args, kwargs, schedule))

        setattr(build, RECORDS, True)
        return build  # type: ignore[return-value]

    return decorate if factory is None else decorate(factory)


__all__ = ["RECORDS", "Recipe", "recipe_of", "recorded", "remember"]
