"""trace (heavy-ball and Nesterov momentum) against Optax."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
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


@pytest.mark.parametrize("nesterov", [False, True])
def test_float16_trace_is_optax_bit_for_bit(nesterov):
    # The float path is the 8-bit path's one-buffer step: the widened gradient plus `mu * m` in
    # the buffer's dtype, stored once; Optax computes all of it in float16, to the same bits.
    compare_transformations(
        gradtx.trace(0.9, nesterov=nesterov),
        optax.trace(0.9, nesterov=nesterov),
        params=mixed_params(dtype=jnp.float16),
        steps=50,
        rtol=0.0,
        atol=0.0,
    )


def _rms_error(updates, exact):
    diffs = [
        np.asarray(a, np.float64) - e
        for u, x in zip(updates, exact, strict=True)
        for a, e in zip(jax.tree.leaves(u), x, strict=True)
    ]
    return np.sqrt(np.mean(np.concatenate([d.ravel() ** 2 for d in diffs])))


@pytest.mark.parametrize("nesterov", [False, True])
def test_bfloat16_trace_is_as_accurate_as_optax(nesterov):
    # In bf16 the sum is float32 here and bf16 in Optax, and under jit XLA rounds the bf16
    # product differently in the two programs: the bits differ by about an ulp, which a trace
    # accumulates; both stay as close to the exact (float64) momentum.
    params = mixed_params(dtype=jnp.bfloat16)
    grads = grad_sequence(params, 50)
    ours, _, _ = run(gradtx.trace(0.9, nesterov=nesterov), params, grads)
    theirs, _, _ = run(optax.trace(0.9, nesterov=nesterov), params, grads)
    exact, trace = [], [np.zeros(np.shape(x)) for x in jax.tree.leaves(params)]
    for g in grads:
        g64 = [np.asarray(x, np.float64) for x in jax.tree.leaves(g)]
        trace = [x + 0.9 * t for x, t in zip(g64, trace, strict=True)]
        exact.append([x + 0.9 * t for x, t in zip(g64, trace, strict=True)] if nesterov else trace)
    assert _rms_error(ours, exact) <= 1.1 * _rms_error(theirs, exact)
