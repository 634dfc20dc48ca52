r"""The per-leaf building blocks that transformations are written with, in one place.

One home for what the update rules do again and again, so that each is written (and tested) once:

- `ema(decay, g, m)`: :math:`(1-\beta) g + \beta m`, one rounding convention (Optax's order:
  `decay * m` rounds in `m`'s dtype; `g` already widened);
- `bias_correction(decay, count)` (:math:`1-\beta^t`, float32) and `adam_step_size(b1, b2, count)`
  (:math:`\sqrt{1-\beta_2^t}/(1-\beta_1^t)`);
- `moment_buffers(...)`: a moment buffer like the params, a plain array of any float dtype or
  block-wise 8-bit for a `gradtx.quantized()` spec; `buffer_value` / `into_buffer` /
  `into_buffer_and_value` / `as_read_back` dispatch on it (`gradtx.state._buffers`);
- `copy_params`: a fresh copy of the params (or zeros for `jax.ShapeDtypeStruct`s) that shares
  no buffer with them, so both can be donated (zeros: `gradtx.tree.zeros_like`);
- `scalar_dtype(params)`: the dtype of a method's scalar statistics (float32, float64 for
  float64 params);
- `loss_value(who, extra_args)`: the one reader of the loss passed as `value=`;
- `stateless` / `stateless_with_params` / `stateless_with_extra_args` (for rules that read an
  extra argument such as the loss): stateless pairs;
- the arithmetic helpers of `gradtx._base._numerics` (`ema`, `bias_correction`, `safe_divide`,
  ...), re-exported.

Internal (public inside the package): transformations import these from here, never from each
other.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from .._base._numerics import (
    abs_sq,
    adam_step_size,
    bias_correction,
    ema,
    safe_divide,
    safe_increment,
    value_at,
    wide_float,
    widen,
    zero_count,
)
from .._base._typing import ArrayLike, Params
from ..core._transformation import monitored_value as loss_value
from ..core._transformation import (
    require_params,
    stateless,
    stateless_with_extra_args,
    stateless_with_params,
)
from ..state import _quantize
from ..state._buffers import (
    as_read_back,
    buffer_value,
    check_float_dtype,
    check_moment_dtype,
    into_buffer,
    into_buffer_and_value,
)
from ..tree import full_like


def moment_buffers(
    params: Params, dtype: Any = None, *, fill_value: ArrayLike = 0.0, signed: bool = True
) -> Any:
    """Moment buffers like `params` (arrays or `jax.ShapeDtypeStruct`s), filled with
    `fill_value`: plain arrays of `dtype` (default each leaf's own), or block-wise 8-bit ones for
    a `gradtx.quantized()` spec (`signed` for first moments, unsigned for second moments)."""
    if _quantize.is_quantized_dtype(dtype):
        return _quantize.buffers_like(params, dtype, signed=signed, fill_value=fill_value)
    return full_like(params, fill_value, dtype)


def _copy_leaf(x: Any, dtype: Any) -> jax.Array:
    if isinstance(x, jax.ShapeDtypeStruct):  # shapes only (abstract init): no values to copy
        return jnp.zeros(x.shape, dtype or x.dtype, device=getattr(x, "sharding", None))
    x = jnp.asarray(x)
    return jnp.array(x, dtype=dtype or x.dtype, copy=True)


def copy_params(params: Params, dtype: Any = None) -> Params:
    """A copy of `params` (in `dtype`, default each leaf's own) that shares no buffer with them,
    so that both can be donated to a jitted step. `jax.ShapeDtypeStruct` leaves give zeros."""
    return jax.tree.map(lambda x: _copy_leaf(x, dtype), params)


def scalar_dtype(params: Params) -> jnp.dtype:
    """The dtype of a method's scalar statistics: float32, or float64 for float64 params."""
    return wide_float(*(jnp.result_type(x) for x in jax.tree.leaves(params)))


__all__ = [
    "abs_sq",
    "adam_step_size",
    "as_read_back",
    "bias_correction",
    "buffer_value",
    "check_float_dtype",
    "check_moment_dtype",
    "copy_params",
    "ema",
    "into_buffer",
    "into_buffer_and_value",
    "loss_value",
    "loss_value_in",
    "moment_buffers",
    "require_params",
    "safe_divide",
    "safe_increment",
    "scalar_dtype",
    "stateless",
    "stateless_with_extra_args",
    "stateless_with_params",
    "value_at",
    "wide_float",
    "widen",
    "zero_count",
]


def loss_value_in(who: str, extra_args: dict[str, Any], dtype: Any) -> jax.Array:
    """`loss_value` (the checked `value=` scalar, with its error when missing) in `dtype`, read
    from the value as given, so that float64 statistics keep a float64 loss."""
    loss_value(who, extra_args)
    return jnp.asarray(extra_args["value"]).astype(dtype)
