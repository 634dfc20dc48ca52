"""trace (heavy-ball and Nesterov momentum) against Optax."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax
import pytest

import gradtx

from ..helpers import compare_transformations, grad_sequence, mixed_params, run


@pytest.mark.parametrize("nesterov", [False, True])
def test_trace_matches_optax(use_jit, nesterov):
    compare_transformations(
        gradtx.trace(0.9, nesterov=nesterov),
        optax.trace(0.9, nesterov=nesterov),
        jit=use_jit,
        steps=100,
    )


def test_momentum_schedule_equals_constant_when_schedule_is_constant():
    compare_transformations(gradtx.trace(lambda t: 0.8 + 0.0 * t), optax.trace(0.8), steps=100)


def test_momentum_schedule_follows_the_step():
    # mu_t = 0 for the first 3 steps then 0.5: the trace restarts from the raw gradient.
    params = {"w": jnp.zeros(2)}
    grads = grad_sequence(params, 6)
    updates, _, _ = run(gradtx.trace(lambda t: jnp.where(t < 3, 0.0, 0.5)), params, grads)
    for i in range(3):
        assert jnp.allclose(updates[i]["w"], grads[i]["w"])
    assert jnp.allclose(updates[3]["w"], grads[3]["w"] + 0.5 * grads[2]["w"])


def test_accumulator_dtype_is_held():
    params = mixed_params()
    tx = gradtx.trace(0.9, accumulator_dtype=jnp.bfloat16)
    _, state, _ = run(tx, params, grad_sequence(params, 3))
    assert all(x.dtype == jnp.bfloat16 for x in jax.tree.leaves(state.trace))


@pytest.mark.parametrize("decay", [-0.1, 1.5])
def test_invalid_decay(decay):
    with pytest.raises(ValueError, match=rf"trace: decay must be in \[0.0, 1.0\], got {decay}"):
        gradtx.trace(decay)
