"""ema_params and lookahead (on plain params, and on Optax's LookaheadParams: fast and slow
params, against the installed Optax)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gradtx
from gradtx import wrappers as gw

from ..helpers import assert_trees_close, grad_sequence, mixed_params
from .common import adam_01, adam_moments, assert_close, normal_grads, small_tree


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


# --------------------------------------------------------------------------------------------
# lookahead: LookaheadParams (Optax's form) and plain params (gradtx's)
# --------------------------------------------------------------------------------------------


def test_lookahead_params_init_synced():
    params = small_tree()
    both = gw.LookaheadParams.init_synced(params)
    assert both.fast is params and both.slow is params
    assert gw.LookaheadParams._fields == optax.LookaheadParams._fields


@pytest.mark.parametrize(
    ("reset_state", "jit"), [(False, False), (True, True)], ids=["eager", "reset-jit"]
)
def test_lookahead_with_lookahead_params_matches_optax(reset_state, jit):
    params = small_tree()
    ours = gradtx.lookahead(adam_01(gradtx), 3, 0.4, reset_state=reset_state)
    theirs = optax.lookahead(adam_01(optax), 3, 0.4, reset_state=reset_state)
    p_ours = gw.LookaheadParams.init_synced(params)
    p_ref = optax.LookaheadParams.init_synced(params)
    s_ours, s_ref = ours.init(p_ours), theirs.init(p_ref)
    assert s_ours.slow == ()  # no slow copy: it is in the params
    up_ours, up_ref = ours.update, theirs.update
    if jit:
        up_ours, up_ref = jax.jit(up_ours), jax.jit(up_ref)
    for i, g in enumerate(normal_grads(params, 8, seed=8)):
        u, s_ours = up_ours(g, s_ours, p_ours)
        v, s_ref = up_ref(g, s_ref, p_ref)
        assert type(u) is gw.LookaheadParams
        assert_close(u.fast, v.fast, f"fast, step {i}")
        assert_close(u.slow, v.slow, f"slow, step {i}")
        assert_close(
            adam_moments(s_ours.fast_state), adam_moments(s_ref.fast_state), f"state, step {i}"
        )
        assert int(s_ours.steps_since_sync) == int(s_ref.steps_since_sync)
        p_ours = gradtx.apply_updates(p_ours, u)
        p_ref = optax.apply_updates(p_ref, v)
        assert_close(p_ours.fast, p_ref.fast)
        assert_close(p_ours.slow, p_ref.slow)
        if i % 3 == 2:  # right after a sync fast and slow agree
            assert_close(p_ours.fast, p_ours.slow)


def test_lookahead_plain_params_track_optax_fast_and_slow():
    params = small_tree()
    ours = gradtx.lookahead(adam_01(gradtx), 2, 0.5)
    theirs = optax.lookahead(adam_01(optax), 2, 0.5)
    p_ours, p_ref = params, optax.LookaheadParams.init_synced(params)
    s_ours, s_ref = ours.init(p_ours), theirs.init(p_ref)
    for i, g in enumerate(normal_grads(params, 6, seed=9)):
        u, s_ours = ours.update(g, s_ours, p_ours)
        v, s_ref = theirs.update(g, s_ref, p_ref)
        p_ours, p_ref = gradtx.apply_updates(p_ours, u), optax.apply_updates(p_ref, v)
        assert_close(p_ours, p_ref.fast, f"fast, step {i}")
        assert_close(s_ours.slow, p_ref.slow, f"slow, step {i}")
        assert_close(adam_moments(s_ours.inner_state), adam_moments(s_ref.fast_state))


def test_lookahead_state_from_plain_init_accepts_lookahead_params():
    # Optax allows init on the fast params alone, then update on LookaheadParams
    params = small_tree()
    ours = gradtx.lookahead(gradtx.sgd(0.3), 2, 0.5)
    theirs = optax.lookahead(optax.sgd(0.3), 2, 0.5)
    s_ours, s_ref = ours.init(params), theirs.init(params)
    p = gw.LookaheadParams.init_synced(params)
    for g in normal_grads(params, 4, seed=10):
        u, s_ours = ours.update(g, s_ours, p)
        v, s_ref = theirs.update(g, s_ref, optax.LookaheadParams(*p))
        assert_close(u, v)
        p = gradtx.apply_updates(p, u)


def test_lookahead_errors():
    params = small_tree()
    tx = gradtx.lookahead(gradtx.sgd(0.1), 2, 0.5)
    state = tx.init(gw.LookaheadParams.init_synced(params))
    with pytest.raises(ValueError, match="lookahead: the state was made by init on Lookahead"):
        tx.update(params, state, params)
    with pytest.raises(ValueError, match="lookahead"):
        tx.update(params, state, None)
    with pytest.raises(ValueError, match="lookahead: sync_period"):
        gradtx.lookahead(gradtx.sgd(0.1), 0, 0.5)
    with pytest.raises(ValueError, match="lookahead: reset_state"):
        gradtx.lookahead(gradtx.sgd(0.1), 2, 0.5, reset_state=1)
    with pytest.raises(ValueError, match="lookahead: expected a LookaheadState"):
        tx.update(params, optax.lookahead(optax.sgd(0.1), 2, 0.5).init(params), params)


@pytest.mark.parametrize("pair", [False, True], ids=["plain", "LookaheadParams"])
def test_lookahead_state_restored_under_a_smaller_sync_period_syncs_at_once(pair):
    # saved after 4 fast steps under sync_period = 5, restored (by migrate) under 2: the
    # period is over, so the next step synchronises, and then every second one
    params = {"w": jnp.zeros(2)}
    g = {"w": jnp.ones(2)}
    wrap = gw.LookaheadParams.init_synced if pair else (lambda p: p)
    old = gradtx.lookahead(gradtx.sgd(1.0), 5, 0.5)
    p = wrap(params)
    state = old.init(p)
    for _ in range(4):
        u, state = old.update(g, state, p)
        p = gradtx.apply_updates(p, u)
    new = gradtx.lookahead(gradtx.sgd(1.0), 2, 0.5)
    if not pair:
        state, _ = gradtx.migrate(state, new, p)
    assert int(state.steps_since_sync) == 4
    fast = lambda p: (p.fast if pair else p)["w"]
    for i, want in enumerate([-2.5, -3.5, -3.5, -4.5, -4.5]):  # slow: -2.5, -3.5, -4.5
        u, state = new.update(g, state, p)
        p = gradtx.apply_updates(p, u)
        np.testing.assert_allclose(fast(p), [want, want], err_msg=f"step {i}")
        assert int(state.steps_since_sync) == (0 if i % 2 == 0 else 1)
