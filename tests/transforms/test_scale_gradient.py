"""`scale_gradient`: the identity forward, its gradient scaled, against Optax; traced scales,
dtypes and errors."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gradtx
from gradtx import transforms

from ..helpers import assert_trees_close
from .common import ATOL, RTOL


@pytest.mark.parametrize("scale", [0.5, -1.0, 0.0, 1.0, 3.0])
def test_scale_gradient_matches_optax(scale):
    x = {"a": jnp.array([1.0, -2.0, 3.0]), "b": jnp.float32(0.5)}

    def loss(fn, x):
        y = fn(x, scale)
        return jnp.sum(y["a"] ** 2) + jnp.sin(y["b"])

    value, grad = jax.value_and_grad(lambda x: loss(transforms.scale_gradient, x))(x)
    ref_value, ref_grad = jax.value_and_grad(lambda x: loss(optax.scale_gradient, x))(x)
    np.testing.assert_allclose(value, ref_value, rtol=RTOL)
    assert_trees_close(grad, ref_grad, RTOL, ATOL)


def test_scale_gradient_traced_scale_dtypes_and_errors():
    x = jnp.array([1.0, 2.0], jnp.bfloat16)

    @jax.jit
    def grad_at(x, scale):
        return jax.grad(lambda x: jnp.sum(transforms.scale_gradient(x, scale)))(x)

    g = grad_at(x, jnp.float32(0.25))
    assert g.dtype == jnp.bfloat16
    np.testing.assert_array_equal(np.asarray(g, np.float32), [0.25, 0.25])
    np.testing.assert_array_equal(transforms.scale_gradient(x, 0.25), x)  # identity forward
    with pytest.raises(gradtx.HyperparameterError, match=r"scale_gradient.*scale.*scalar"):
        transforms.scale_gradient(x, jnp.ones(2))
