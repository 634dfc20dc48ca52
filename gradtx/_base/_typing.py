"""Type aliases shared by the whole package (the public ones under Optax's names)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeAlias

import jax

ArrayLike: TypeAlias = jax.typing.ArrayLike
Array: TypeAlias = jax.Array
PyTree: TypeAlias = Any
Params: TypeAlias = Any
"""A pytree of arrays (leaves may be None)."""
Updates: TypeAlias = Any
"""A pytree with the structure of `Params`."""
OptState: TypeAlias = Any
"""An optimizer state: a pytree of arrays."""
Schedule: TypeAlias = Callable[[ArrayLike], ArrayLike]
"""A function of the step count giving a hyperparameter's value."""
if TYPE_CHECKING:  # type checkers accept any array-like number (NumPy scalars and arrays too)
    ScalarOrSchedule: TypeAlias = float | ArrayLike | Schedule
else:
    ScalarOrSchedule: TypeAlias = float | Array | Schedule
"""A number or a `Schedule`. At run time Optax's exact alias (equal to `optax.ScalarOrSchedule`,
so code that checks a signature's annotation against it, as Optax's tests do, sees the same
type); for type checkers it admits every array-like number, as gradtx's checks do."""
MaskOrFn: TypeAlias = Any | Callable[[Params], Any] | None
"""A mask (a tree of bools, or a function of the params giving one), or None."""
