"""Type aliases shared by the whole package (the public ones under Optax's names)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
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

# The names below say what a factory argument takes, so that a config knows how to give it
# (gradtx/config/_kinds.py reads the kind of every argument from its annotation).
DType: TypeAlias = jax.typing.DTypeLike
"""A dtype: a name such as `"bfloat16"`, a scalar type such as `jnp.float32`, or a `numpy.dtype`
(a config gives its name)."""
Mask: TypeAlias = PyTree | Callable[[Params], PyTree] | str | Sequence[str]
"""Which parameters a transformation applies to: a tree of bools (a prefix of the params), a
function of the params giving one, or glob patterns on the parameter paths (docs/patterns.md;
`"!"` negates)."""
Seed: TypeAlias = int | Array
"""An integer seed or a PRNG key (`jax.random.key(0)`, or a legacy `jax.random.PRNGKey(0)`)."""
