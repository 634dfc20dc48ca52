"""ema_params and lookahead."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gradtx

from ..helpers import assert_trees_close, grad_sequence, mixed_params


@pytest.mark.parametrize("debias", [True, False])
def test_ema_params_matches_optax_ema_of_the_parameter_sequence(debias):
    params = mixed_params()
    tx = gradtx.chain(gradtx.adam(0.05), gradtx.ema_params(0.9, debias=debias))
    ref = optax.ema(0.9, debias=debias)
    state, ref_state = tx.init(params), ref.init(params)
    step, ref_step = jax.jit(tx.update), jax.jit(ref.update)
    for i, g in enumerate(grad_sequence(params, 50)):
        updates, state = step(g, state, params)
        params = gradtx.apply_updates(params, updates)
        expected, ref_state = ref_step(params, ref_state)
        assert_trees_close(gradtx.tree.get(state, "ema"), expected, 1e-5, 1e-6, msg=f"step {i}")
        if i == 0 and debias:
            # the debiased average starts at the parameters (up to XLA fusing differently)
            assert_trees_close(gradtx.tree.get(state, "ema"), params, 1e-6, 1e-8)


def test_ema_params_passes_updates_through_and_keeps_dtypes():
    params = mixed_params(dtype=jnp.bfloat16)
    tx = gradtx.ema_params(0.99, dtype=jnp.float32)
    state = tx.init(params)
    g = grad_sequence(params, 1)[0]
    u, state = jax.jit(tx.update)(g, state, params)
    assert _same(u, g)
    assert all(x.dtype == jnp.float32 for x in jax.tree.leaves(state.ema))
    with pytest.raises(ValueError, match=r"ema_params needs the current parameters"):
        tx.update(g, state)
    with pytest.raises(ValueError, match=r"ema_params: decay must be in \[0.0, 1.0\), got 1.0"):
        gradtx.ema_params(1.0)


def _same(a, b):
    return all(
        np.array_equal(x, y) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True)
    )


@pytest.mark.parametrize("reset_state", [False, True])
def test_lookahead_on_plain_params_matches_optax_fast_and_slow(reset_state):
    params = mixed_params()
    fast = lambda: optax.chain(optax.scale_by_adam(), optax.scale(-0.05))
    ours = gradtx.lookahead(fast(), 4, 0.5, reset_state=reset_state)
    ref = optax.lookahead(fast(), 4, 0.5, reset_state=reset_state)
    ref_params = optax.LookaheadParams.init_synced(params)
    state, ref_state = ours.init(params), ref.init(ref_params)
    step, ref_step = jax.jit(ours.update), jax.jit(ref.update)
    for i, g in enumerate(grad_sequence(params, 21)):
        updates, state = step(g, state, params)
        params = gradtx.apply_updates(params, updates)
        ref_updates, ref_state = ref_step(g, ref_state, ref_params)
        ref_params = optax.apply_updates(ref_params, ref_updates)
        assert_trees_close(params, ref_params.fast, 1e-5, 1e-6, msg=f"fast, step {i}")
        assert_trees_close(gradtx.tree.get(state, "slow"), ref_params.slow, 1e-5, 1e-6, msg=f"{i}")
        if i % 4 == 3:  # right after a sync the params are the slow weights
            assert_trees_close(params, gradtx.tree.get(state, "slow"), 1e-6, 1e-7)


def test_lookahead_abstract_init_and_validation():
    params = mixed_params()
    tx = gradtx.lookahead(gradtx.sgd(0.1), 3, 0.5)
    structs = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), params)
    for got in (tx.init(structs), jax.eval_shape(tx.init, structs)):
        assert jax.tree.structure(got) == jax.tree.structure(tx.init(params))
    with pytest.raises(ValueError, match=r"lookahead: sync_period must be >= 1, got 0"):
        gradtx.lookahead(gradtx.sgd(0.1), 0, 0.5)
    with pytest.raises(ValueError, match=r"lookahead: slow_step_size must be in \[0.0, 1.0\]"):
        gradtx.lookahead(gradtx.sgd(0.1), 2, 1.5)
    with pytest.raises(ValueError, match=r"lookahead needs the current parameters"):
        tx.update(params, tx.init(params))
