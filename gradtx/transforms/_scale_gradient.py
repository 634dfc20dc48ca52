"""Scaling the gradient that flows back through a value: `scale_gradient` (identity forward)."""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from .._base._checks import check_scalar, concrete
from .._base._typing import ArrayLike, PyTree


@jax.custom_vjp
def _scaled_backward(inputs: PyTree, scale: Any) -> PyTree:
    del scale  # used by the backward pass only
    return inputs


def _forward(inputs: PyTree, scale: Any) -> tuple[PyTree, Any]:
    return inputs, scale


def _backward(scale: Any, cotangent: PyTree) -> tuple[PyTree, None]:
    # each cotangent keeps its dtype (a float32 scale does not promote a bf16 cotangent)
    return jax.tree.map(lambda g: (g * scale).astype(g.dtype), cotangent), None


_scaled_backward.defvjp(_forward, _backward)


def scale_gradient(inputs: PyTree, scale: ArrayLike) -> PyTree:
    r"""The identity on `inputs`, with the gradient flowing back through it scaled by `scale`.

    .. math::  y = x, \qquad \frac{\partial L}{\partial x} = s \, \frac{\partial L}{\partial y}

    For e.g. slowing down the learning of a sub-network or reversing a gradient (`scale=-1`,
    gradient reversal). A concrete `scale` of 1 returns `inputs` as they are and a concrete 0
    is `jax.lax.stop_gradient`; a traced `scale` (e.g. from a schedule under `jit`) works too.

    Args:
      inputs: a pytree of arrays.
      scale: :math:`s`, a scalar.

    Returns:
      `inputs` (the same values), whose gradient is multiplied by `scale`.

    Examples:
      >>> import jax, jax.numpy as jnp, gradtx
      >>> f = lambda x: jnp.sum(gradtx.transforms.scale_gradient(x, 0.5) ** 2)
      >>> jax.grad(f)(jnp.array([1.0, 2.0]))
      Array([1., 2.], dtype=float32)

    Reference: matches `optax.scale_gradient`.
    """
    check_scalar("scale_gradient", "scale", scale)
    value = concrete(scale)
    if value is not None and np.all(value == 1.0):
        return inputs
    if value is not None and np.all(value == 0.0):
        return jax.lax.stop_gradient(inputs)
    return _scaled_backward(inputs, scale)


__all__ = ["scale_gradient"]
