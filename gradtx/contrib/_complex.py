"""Complex parameters optimized as pairs of real ones (`optax.contrib.split_real_and_imaginary`).

The wrapped transformation sees every complex leaf as a `SplitRealAndImaginaryArrays(real,
imaginary)` pair of real leaves, so it treats `z = x + iy` exactly as the two real parameters
`x` and `y`; its updates are merged back into complex ones. Real leaves pass through unchanged.

JAX's gradient of a real loss with respect to a complex parameter is the conjugate of the
steepest-ascent direction (PyTorch's convention differs): conjugate it (`jnp.conj`) between
`jax.grad` and `update` so that the real and imaginary parts are the partial derivatives.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from .._base._recipe import recorded
from .._base._typing import OptState
from ..core._transformation import GradientTransformation, as_transformation, forward_extra_args


class SplitRealAndImaginaryArrays(NamedTuple):
    """The real and imaginary parts of one complex leaf, as two real arrays."""

    real: Any
    imaginary: Any


class SplitRealAndImaginaryState(NamedTuple):
    inner_state: OptState


def _is_complex(x: Any) -> bool:
    dtype = getattr(x, "dtype", None)
    return dtype is not None and jnp.issubdtype(dtype, jnp.complexfloating)


def _split(x: Any) -> Any:
    """A complex leaf as a real pair; real leaves (and None) unchanged."""
    if not _is_complex(x):
        return x
    if isinstance(x, jax.ShapeDtypeStruct):  # init from shapes only
        part = jax.ShapeDtypeStruct(x.shape, jnp.finfo(x.dtype).dtype, sharding=x.sharding)
        return SplitRealAndImaginaryArrays(part, part)
    return SplitRealAndImaginaryArrays(jnp.real(x), jnp.imag(x))


def _merge(x: Any) -> Any:
    """A real pair back as one complex leaf (exact, also for inf parts); other leaves unchanged."""
    if not isinstance(x, SplitRealAndImaginaryArrays):
        return x
    real, imaginary = jnp.asarray(x.real), jnp.asarray(x.imaginary)
    dtype = jnp.result_type(real.dtype, imaginary.dtype, jnp.complex64)
    part = jnp.finfo(dtype).dtype
    return jax.lax.complex(real.astype(part), imaginary.astype(part))


def _is_pair(x: Any) -> bool:
    return isinstance(x, SplitRealAndImaginaryArrays)


@recorded
def split_real_and_imaginary(inner: GradientTransformation) -> GradientTransformation:
    r"""Run `inner` on the real and imaginary parts of complex updates as separate real leaves.

    For a complex leaf :math:`z = x + iy` with update :math:`g = g_x + i g_y`, `inner` receives
    the real leaves :math:`(x, y)` and :math:`(g_x, g_y)` (a `SplitRealAndImaginaryArrays`) and
    its updates :math:`(u_x, u_y)` are returned as :math:`u_x + i u_y`. Real leaves are passed
    to `inner` unchanged. Extra arguments (`value=loss`, ...) are forwarded to `inner`.

    Args:
      inner: the transformation for the real problem.

    Returns:
      A `GradientTransformation` with state `SplitRealAndImaginaryState(inner_state)`, where
      `inner_state` is laid out over the split tree.

    Reference: `optax.contrib.split_real_and_imaginary` (same state; Optax merges with
    `real + imaginary * 1j`, which turns an infinite imaginary part into a NaN real part; gradtx
    merges exactly).
    """
    inner = as_transformation(inner, "split_real_and_imaginary", "inner")
    inner_update = forward_extra_args(inner.update)

    def init(params):
        return SplitRealAndImaginaryState(inner.init(jax.tree.map(_split, params)))

    def update(updates, state, params=None, **extra_args):
        new_updates, inner_state = inner_update(
            jax.tree.map(_split, updates),
            state.inner_state,
            None if params is None else jax.tree.map(_split, params),
            **extra_args,
        )
        new_updates = jax.tree.map(_merge, new_updates, is_leaf=_is_pair)
        return new_updates, SplitRealAndImaginaryState(inner_state)

    return GradientTransformation(init, update)


__all__ = ["SplitRealAndImaginaryArrays", "SplitRealAndImaginaryState", "split_real_and_imaginary"]
