"""How each factory argument is given in a config: its kind, read from its annotation.

A kind says what a config may hold for an argument and how it is normalized (`_schema.check_value`)
and built (`_build`): `learning_rate: {name: cosine_decay, ...}` is a schedule block because
`learning_rate` is annotated `ScalarOrSchedule`, `mask: "!**/bias"` a pattern because `mask` is
annotated `Mask`. The annotation is the declaration (`kind_of`):

- `ScalarOrSchedule` -> scalar_or_schedule, `Schedule` (a function of one step count giving a
  number) -> schedule, `Sequence[Schedule]` -> schedule_list;
- `ArrayLike`, `float` (or `int | float`) -> number, `int` -> int, `bool` -> bool, `str` and a
  `Literal` of strings -> str, `Seed` (an integer seed or a PRNG key; a config gives the seed)
  -> int;
- `DType`, `MomentDType` (a dtype or `gradtx.quantized()`) -> dtype, `Mask` / `MaskOrFn` -> mask;
- a `GradientTransformation` -> optimizer, `Sequence[int]` -> int_list, a `Mapping` -> mapping;
- `X | None` -> X, and the argument takes null (so does one whose default is None);
- any other type (a tuple, a callable that is not a schedule, a class) -> any: handed to the factory
  unchecked, which checks it itself; `Any` or no annotation says nothing.

`EXPLICIT` holds what an annotation does not say, with the reason. A factory that users
`register` is read the same way; an argument its annotation says nothing of takes its `kinds=`,
else the kind that gradtx's own factories give that argument name (`_catalog.by_name`), else
"any". Every argument of every factory of the catalog (`_catalog.SECTIONS`) has a kind from its
annotation or `EXPLICIT`: tests/config/test_kinds.py holds it (and lists the arguments still
annotated `Any`, which take their name's kind until their files are retyped).
"""

from __future__ import annotations

import functools
import inspect
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, Union

from .._base._typing import (
    Array,
    ArrayLike,
    DType,
    Mask,
    MaskOrFn,
    ScalarOrSchedule,
    Schedule,
    Seed,
)
from ..core import GradientTransformation
from ..state._quantize import MomentDType

# kind -> what a config holds for it
KINDS: dict[str, str] = {
    "number": "a number (a string such as YAML's '1e-3' is read as a float)",
    "int": "an integer",
    "bool": "true or false",
    "str": "a string",
    "dtype": "a dtype name such as 'float32' or 'bfloat16'",
    "scalar_or_schedule": "a number or a schedule block {name: ..., ...}",
    "schedule": "a schedule block {name: ..., ...}",
    "schedule_list": "a list of schedule blocks",
    "optimizer": "an optimizer block {name: ..., ...}",
    "mask": "a glob pattern or a list of patterns (docs/patterns.md), or true / false",
    "int_list": "a list of integers",
    "mapping": "a mapping (integer strings as keys become integers)",
    "rules": "a mapping {pattern: multiplier}",
    "any": "anything, handed to the factory unchecked",
}

# gradtx's named annotations and their kinds, compared by equality (a union equals any union of
# the same members, so `MomentDType` spelled out member by member is recognized as well)
_NAMED: tuple[tuple[Any, str], ...] = (
    (ScalarOrSchedule, "scalar_or_schedule"),
    (Schedule, "schedule"),
    (ArrayLike, "number"),
    (DType, "dtype"),
    (MomentDType, "dtype"),
    (Mask, "mask"),
    (MaskOrFn, "mask"),
    (Seed, "int"),
)
_PLAIN = {bool: "bool", int: "int", float: "number", str: "str"}
_NUMBERS = (ArrayLike, Array, float)  # what a schedule gives
_SEQUENCES = (list, tuple, Sequence)
_MAPPINGS = (dict, Mapping)

# What an annotation does not say. catalog kind -> factory (its catalog name, prefix included) ->
# {argument: kind}.
EXPLICIT: dict[str, dict[str, dict[str, str]]] = {
    "optimizer": {
        # annotated `ArrayLike` but takes a schedule too (until gradtx/contrib/_dion.py, owned by
        # another change, annotates it `ScalarOrSchedule`)
        "contrib.dion": {"weight_decay": "scalar_or_schedule"},
    },
    "schedule": {},
}


def _members(annotation: Any) -> tuple[Any, ...]:
    if typing.get_origin(annotation) in (Union, types.UnionType):
        return typing.get_args(annotation)
    return (annotation,)


def _named(members: tuple[Any, ...]) -> str | None:
    """The kind of the named annotation with these members, if any."""
    try:
        given = set(members)
        return next((k for named, k in _NAMED if given == set(_members(named))), None)
    except TypeError:  # an unhashable member: no annotation of ours
        return None


def _kind(annotation: Any) -> str | None:
    """The kind of one member of an annotation (not a union); None for `Any`."""
    if annotation is Any:
        return None
    named = _named((annotation,))
    if named is not None:
        return named
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is None and isinstance(annotation, type):
        if annotation in _PLAIN:
            return _PLAIN[annotation]
        if issubclass(annotation, GradientTransformation):
            return "optimizer"
        return "mapping" if issubclass(annotation, _MAPPINGS) else "any"
    if origin is Literal:
        kinds = {_PLAIN.get(type(a), "any") for a in args}
        return kinds.pop() if len(kinds) == 1 else "any"
    if origin in _MAPPINGS:
        return "mapping"
    if origin is Callable:  # a function of one argument giving a number: `step -> value`
        one = len(args) == 2 and isinstance(args[0], list) and len(args[0]) == 1
        return "schedule" if one and any(args[1] == n for n in _NUMBERS) else "any"
    if origin in _SEQUENCES:
        if origin is tuple and not (len(args) == 2 and args[1] is Ellipsis):
            return "any"  # a fixed-length tuple
        item = _kind(args[0]) if args else None
        return {"int": "int_list", "schedule": "schedule_list"}.get(item or "", "any")
    return "any"


def _union_kind(members: tuple[Any, ...]) -> str:
    kinds = {_kind(m) or "any" for m in members}
    if kinds <= {"number", "int"}:  # `int | float`
        return "number"
    if "schedule" in kinds and kinds <= {"number", "int", "schedule"}:  # `float | Schedule`
        return "scalar_or_schedule"
    return kinds.pop() if len(kinds) == 1 else "any"


def kind_of(annotation: Any) -> tuple[str | None, bool]:
    """`(kind, takes null)` of a (resolved) annotation; the kind is None where the annotation
    says nothing (`Any`, none): `ScalarOrSchedule | None` is `("scalar_or_schedule", True)`."""
    if annotation is inspect.Parameter.empty or isinstance(annotation, str):
        return None, False  # none, or text that names what cannot be resolved
    members = _members(annotation)
    rest = tuple(m for m in members if m is not type(None))
    nullable = len(rest) < len(members)
    named = _named(members) or _named(rest)
    if named is not None or not rest:
        return named, nullable
    return (_kind(rest[0]) if len(rest) == 1 else _union_kind(rest)), nullable


@functools.cache
def signature(factory: Callable[..., Any]) -> inspect.Signature:
    return inspect.signature(factory)


def params_of(factory: Callable[..., Any]) -> tuple[dict[str, inspect.Parameter], bool]:
    """The factory's named parameters, and whether it takes `**kwargs`."""
    params, var_kw = {}, False
    for p in signature(factory).parameters.values():
        if p.kind is inspect.Parameter.VAR_KEYWORD:
            var_kw = True
        elif p.kind is not inspect.Parameter.VAR_POSITIONAL:
            params[p.name] = p
    return params, var_kw


def _params(factory: Callable[..., Any]) -> dict[str, inspect.Parameter]:
    try:
        return params_of(factory)[0]
    except (TypeError, ValueError):  # no signature to read: every argument is "any"
        return {}


def resolved(factory: Callable[..., Any], annotation: Any) -> Any:
    """An annotation written as text (`from __future__ import annotations`) evaluated in the
    factory's module, as `typing.get_type_hints` does; the text itself where that fails."""
    if not isinstance(annotation, str):
        return annotation
    namespace = getattr(inspect.unwrap(factory), "__globals__", {})
    try:
        return eval(annotation, namespace)
    except Exception:
        return annotation


@functools.cache
def _annotated(factory: Callable[..., Any]) -> dict[str, tuple[str | None, bool]]:
    """`{argument: (kind, takes null)}` read from the factory's annotations and defaults."""
    out = {}
    for name, p in _params(factory).items():
        kind, nullable = kind_of(resolved(factory, p.annotation))
        out[name] = (kind, nullable or p.default is None)
    return out


def own(kind: str, name: str, factory: Callable[..., Any]) -> dict[str, str | None]:
    """`{argument: kind}` that the factory's annotations and `EXPLICIT` say (None: nothing)."""
    table = EXPLICIT.get(kind, {}).get(name, {})
    return {a: table.get(a) or k for a, (k, _) in _annotated(factory).items()}


def undeclared(kind: str, name: str, factory: Callable[..., Any]) -> list[str]:
    """The arguments of the catalog factory `name` whose annotation says no kind (and that
    `EXPLICIT` does not give one)."""
    return [a for a, k in own(kind, name, factory).items() if k is None]


def declared(
    kind: str,
    name: str,
    factory: Callable[..., Any],
    given: Mapping[str, str] | None = None,
    names: Mapping[str, str] | None = None,
) -> tuple[dict[str, str], frozenset[str]]:
    """`({argument: kind}, nullable arguments)` of a factory registered as `name`.

    The kinds are `given` (a user's `register(..., kinds=...)`), else `EXPLICIT`'s, else the
    annotation's, else the argument name's in `names` (`_catalog.by_name()`), else "any".
    """
    given, names = given or {}, names or {}
    kinds = {
        a: given.get(a) or k or names.get(a, "any") for a, k in own(kind, name, factory).items()
    }
    nullable = frozenset(a for a, (_, null) in _annotated(factory).items() if null)
    return kinds, nullable


__all__ = [
    "EXPLICIT",
    "KINDS",
    "declared",
    "kind_of",
    "own",
    "params_of",
    "resolved",
    "signature",
    "undeclared",
]
