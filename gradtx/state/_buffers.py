"""How state buffers are held: plain float (any dtype, bf16 included) or 8-bit quantized.

Every moment-like buffer is read through `buffer_value` and written through `into_buffer` (or
`as_read_back`, the value a buffer will read back, and `into_buffer_and_value`, both at once),
which dispatch on `QuantizedArray`; the dtype checks say which buffers may be quantized.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .._base._checks import HyperparameterError
from .._base._numerics import widen
from ._quantize import decode, encode, is_quantized, is_quantized_dtype


def as_read_back(x: jax.Array, buffer: jax.Array) -> jax.Array:
    """`x` rounded to `buffer`'s dtype (as it will be stored), then widened for computing.

    Update rules compute the update from the moments *as stored*. For float32 buffers this is a
    no-op. For bf16 buffers it makes the update a function of the saved state alone and lets XLA
    write the new moment in place: reading the unrounded value instead forces a copy of the old
    buffer (measured 1.9x slower on a donated 16M-parameter Adam step). float16 buffers are not
    read back: their narrow range would store a small second moment (e.g. (1 - b2) g^2 for
    g ~ 1e-3) as 0 and the update would overflow.
    """
    if is_quantized(buffer):
        return decode(into_buffer(x, buffer))
    if jnp.dtype(buffer.dtype) == jnp.float16:
        return widen(x)
    return widen(x.astype(buffer.dtype))


def into_buffer_and_value(x: jax.Array, buffer) -> tuple:
    """`(new_buffer, value)`: `x` stored like `buffer` (`into_buffer`) and the widened value it now
    holds (`as_read_back`), computed once."""
    if is_quantized(buffer):
        new = into_buffer(x, buffer)
        return new, decode(new)
    value = as_read_back(x, buffer)
    return value.astype(buffer.dtype), value


def buffer_value(buffer) -> jax.Array:
    """A state buffer's value for computing: a quantized buffer decoded (float32), a float8
    buffer widened (JAX computes nothing in float8 beside float32), any other buffer as it is
    (so that `decay * buffer` rounds in the buffer's dtype, as Optax's does)."""
    if is_quantized(buffer):
        return decode(buffer)
    if jnp.dtype(buffer.dtype).itemsize == 1 and jnp.issubdtype(buffer.dtype, jnp.floating):
        return buffer.astype(jnp.float32)
    return buffer


def into_buffer(x: jax.Array, buffer):
    """`x` as the new value of state buffer `buffer`: cast to its dtype, or quantized with the
    same block size and code when `buffer` is a `QuantizedArray`."""
    if is_quantized(buffer):
        return encode(x, block_size=buffer.block_size, signed=buffer.signed, codec=buffer.codec)
    return x.astype(buffer.dtype)


def check_float_dtype(who: str, name: str, dtype: Any) -> None:
    """`dtype` is None (the params' dtype) or a floating-point dtype (a state buffer's dtype).

    An integer buffer would silently truncate the moments to integers (training then stalls or
    diverges); quantized storage is a separate, explicit feature.
    """
    if dtype is None:
        return
    requirement = "a floating-point dtype"
    if is_quantized_dtype(dtype):
        raise HyperparameterError(
            who,
            name,
            dtype,
            requirement,
            got=repr(dtype),
            note=": 8-bit storage is for the moment buffers that take it (mu_dtype / nu_dtype "
            "of the moment-based optimizers), not for sums or copies, which it would round at "
            "every step; jnp.bfloat16 halves this buffer instead",
        )
    try:
        np.dtype(dtype)
    except TypeError:
        raise HyperparameterError(who, name, dtype, requirement, got=repr(dtype)) from None
    if not jnp.issubdtype(np.dtype(dtype), jnp.inexact):  # float, bfloat16, float8, complex
        raise HyperparameterError(
            who,
            name,
            dtype,
            f"{requirement} (e.g. jnp.float32 or jnp.bfloat16)",
            got=np.dtype(dtype).name,
            note=": an integer buffer would truncate the state",
        )


def check_moment_dtype(who: str, name: str, dtype: Any) -> None:
    """`dtype` is None, a floating-point dtype, or a `gradtx.quantized(...)` spec (block-wise
    8-bit storage, the explicit way to store a buffer in integers)."""
    if is_quantized_dtype(dtype):
        return
    try:
        check_float_dtype(who, name, dtype)
    except HyperparameterError as error:
        note = f"{error.note}; for 8-bit storage pass {name}=gradtx.quantized() instead"
        raise error.replace(note=note) from None
