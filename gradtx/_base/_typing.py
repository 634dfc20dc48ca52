"""Type aliases shared by the whole package."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeAlias

import jax

ArrayLike: TypeAlias = jax.typing.ArrayLike
Array: TypeAlias = jax.Array
PyTree: TypeAlias = Any
Params: TypeAlias = Any  # a pytree of arrays (leaves may be None)
Updates: TypeAlias = Any  # a pytree with the structure of Params
OptState: TypeAlias = Any  # a pytree of arrays
Schedule: TypeAlias = Callable[[ArrayLike], ArrayLike]  # step count -> value
ScalarOrSchedule: TypeAlias = float | ArrayLike | Schedule
