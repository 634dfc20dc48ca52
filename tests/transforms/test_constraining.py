"""`keep_params_nonnegative`: updates that would take a parameter below zero stop at zero, as
in Optax; its state, dtypes and errors."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gradtx
from gradtx import transforms

from ..optax_reference import compare_to_optax
from .common import small_params


def test_keep_params_nonnegative_matches_optax():
    params = jax.tree.map(jnp.abs, small_params())
    compare_to_optax(
        gradtx.chain(gradtx.sgd(0.4), transforms.keep_params_nonnegative()),
        optax.chain(optax.sgd(0.4), optax.keep_params_nonnegative()),
        jit=True,
        steps=20,
        params=params,
    )
    tx = transforms.keep_params_nonnegative()
    p = jnp.array([1.0, 0.5, -1.0, 0.0])
    u, state = tx.update(jnp.array([-0.5, -2.0, -1.0, 3.0]), tx.init(p), p)
    np.testing.assert_array_equal(u, [-0.5, -0.5, 1.0, 3.0])  # to 0 if it would go below
    assert state == transforms.NonNegativeParamsState() == gradtx.EmptyState()
    # bf16 updates stay bf16 with float32 params
    u, _ = tx.update(jnp.array([-2.0], jnp.bfloat16), state, jnp.array([1.0]))
    assert u.dtype == jnp.bfloat16 and float(u[0]) == -1.0


def test_keep_params_nonnegative_errors():
    tx = transforms.keep_params_nonnegative()
    with pytest.raises(ValueError, match="keep_params_nonnegative needs the current parameters"):
        tx.update(jnp.ones(2), tx.init(jnp.ones(2)))
    with pytest.raises(ValueError, match="keep_params_nonnegative"):
        tx.update({"a": jnp.ones(2)}, gradtx.EmptyState(), {"b": jnp.ones(2)})
