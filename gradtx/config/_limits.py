"""The bounds every config document is held to, checked once as it is read.

A config is small: a few sections, a few levels deep, plain numbers. `check_document` walks a
parsed document (a dict, or what YAML / JSON / nnabla's text format gave) without recursion and
refuses, naming the config path:

- nesting deeper than `MAX_DEPTH` levels (validation and building recurse per level);
- more than `MAX_VALUES` values, counting a value each time it is reached (a YAML alias bomb
  of under 1 KB expands to gigabytes; aliases themselves stay allowed);
- floats that are not finite (`inf`, `nan`, `1e999`) and integers beyond 64 bits (`10**400`),
  and integer literals too long to read at all (`OversizedInt`, what the parsers give for them).

Range checks of the values themselves (int32 step counts, > 0, ...) are the schema's and the
factories'.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ._errors import ConfigError, digits, join, shown

MAX_DEPTH = 32
MAX_VALUES = 100_000
MAX_FILE_BYTES = 16 * 2**20
# integer literals longer than this are not converted (Python refuses above 4300 digits)
MAX_INT_LITERAL = 1_000
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1


class OversizedInt:
    """An integer literal of a config text too long to convert; `check_document` names it."""

    def __init__(self, text: str) -> None:
        self.digits = sum(c.isdigit() for c in text)

    def __repr__(self) -> str:
        return f"<an integer of {self.digits} digits>"


def int_literal(text: str) -> int | OversizedInt:
    """`int(text)`, or an `OversizedInt` for a literal too long to convert."""
    return OversizedInt(text) if len(text) > MAX_INT_LITERAL else int(text)


def _scalar(value: Any, path: str) -> None:
    if isinstance(value, bool):
        return
    if isinstance(value, OversizedInt):
        raise ConfigError(f"out of range: an integer of {value.digits} digits", path)
    if isinstance(value, int) and not -(2**63) <= value < 2**64:
        raise ConfigError(f"out of range: an integer of {digits(value)} digits", path)
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"must be a finite number, got {shown(value)}", path)


def check_document(data: Any, path: str = "") -> None:
    """Raise a `ConfigError` naming the path where `data` breaks the bounds above."""
    stack: list[tuple[Any, str, int]] = [(data, path, 0)]
    count = 0
    while stack:
        value, where, depth = stack.pop()
        count += 1
        if count > MAX_VALUES:
            raise ConfigError(
                f"too large: the config holds more than {MAX_VALUES} values (counting each "
                "value every time a YAML alias repeats it)",
                where,
            )
        if isinstance(value, Mapping):
            items = list(value.items())
        elif isinstance(value, list | tuple):
            items = list(enumerate(value))
        else:
            _scalar(value, where)
            continue
        if depth >= MAX_DEPTH:
            raise ConfigError(f"nested deeper than {MAX_DEPTH} levels", where)
        for key, _ in items:
            if isinstance(value, Mapping):
                _scalar(key, join(where, key))
        stack.extend((item, join(where, key), depth + 1) for key, item in reversed(items))


__all__ = [
    "INT32_MAX",
    "INT32_MIN",
    "MAX_DEPTH",
    "MAX_FILE_BYTES",
    "MAX_VALUES",
    "OversizedInt",
    "check_document",
    "int_literal",
]
