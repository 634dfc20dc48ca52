"""apply_if_finite and zero_nans."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gradtx

from ..helpers import grad_sequence, mixed_params


def _adam():
    return gradtx.chain(gradtx.clip_by_global_norm(1.0), gradtx.adam(0.05))


def _poison(tree, value=np.nan):
    """`tree` with one element of its first leaf set to `value`."""
    leaves, treedef = jax.tree.flatten(tree)
    leaves[0] = leaves[0].reshape(-1).at[0].set(value).reshape(leaves[0].shape)
    return jax.tree.unflatten(treedef, leaves)


def _bits(tree):
    return [np.asarray(x).tobytes() for x in jax.tree.leaves(tree)]


def test_bad_step_leaves_params_and_inner_state_bit_identical():
    tx = gradtx.apply_if_finite(_adam(), max_consecutive_errors=3)
    params = mixed_params()
    grads = grad_sequence(params, 12)
    bad_steps = {7: np.nan, 9: np.inf, 10: -np.inf}
    for i, value in bad_steps.items():
        grads[i] = _poison(grads[i], value)
    step = jax.jit(
        lambda g, s, p: (lambda u, s: (u, s, gradtx.apply_updates(p, u)))(*tx.update(g, s, p))
    )
    state = tx.init(params)
    for i, g in enumerate(grads):
        before_params, before_inner = params, state.inner_state
        updates, state, params = step(g, state, params)
        if i in bad_steps:
            assert _bits(params) == _bits(before_params), i
            assert _bits(state.inner_state) == _bits(before_inner), i
            assert all(np.all(np.asarray(u) == 0) for u in jax.tree.leaves(updates))
            assert not bool(state.last_finite)
        else:
            assert _bits(params) != _bits(before_params)
            assert bool(state.last_finite)
        assert int(state.notfinite_count) == {7: 1, 9: 1, 10: 2}.get(i, 0)
    assert int(state.total_notfinite) == 3
    assert all(np.all(np.isfinite(x)) for x in jax.tree.leaves(params))


def test_give_up_rule_and_counters_match_optax():
    params = {"w": jnp.ones(3), "b": jnp.zeros(2)}
    grads = grad_sequence(params, 14)
    bad_steps = {2, 3, 5, 6, 7, 8, 9, 11}  # a run of 5 bad steps exceeds the limit of 2
    grads = [_poison(g) if i in bad_steps else g for i, g in enumerate(grads)]
    ours = gradtx.apply_if_finite(gradtx.adam(0.1), 2)
    ref = optax.apply_if_finite(optax.adam(0.1), 2)
    s, r = ours.init(params), ref.init(params)
    step, ref_step = jax.jit(ours.update), jax.jit(ref.update)
    gave_up = []
    for g in grads:
        u, s = step(g, s, params)
        v, r = ref_step(g, r, params)
        for a, b in zip(jax.tree.leaves(u), jax.tree.leaves(v), strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7, equal_nan=True)
        assert int(s.notfinite_count) == int(r.notfinite_count)
        assert int(s.total_notfinite) == int(r.total_notfinite)
        assert bool(s.last_finite) == bool(r.last_finite)
        gave_up.append(bool(s.notfinite_count > 2))
    # it gives up (passes the bad update through) on the 3rd, 4th and 5th consecutive bad steps
    assert [i for i, x in enumerate(gave_up) if x] == [7, 8, 9]
    assert int(s.notfinite_count) == 0 and int(s.total_notfinite) == len(bad_steps)


def test_counters_survive_a_checkpoint_round_trip():
    tx = gradtx.apply_if_finite(_adam(), 5)
    params = mixed_params()
    grads = grad_sequence(params, 8)
    for i in (2, 3, 4, 6):
        grads[i] = _poison(grads[i])
    step = jax.jit(tx.update)

    def go(state, gs):
        out = []
        for g in gs:
            u, state = step(g, state, params)
            out.append((u, int(state.notfinite_count)))
        return out, state

    _, mid = go(tx.init(params), grads[:4])
    assert (int(mid.notfinite_count), int(mid.total_notfinite)) == (2, 2)
    leaves, treedef = jax.tree.flatten(mid)
    saved = [np.array(x) for x in leaves]  # e.g. written to disk with np.savez
    restored = jax.tree.unflatten(treedef, [jnp.asarray(x) for x in saved])
    assert isinstance(restored, gradtx.ApplyIfFiniteState)
    assert restored.notfinite_count.dtype == jnp.int32 and restored.last_finite.dtype == jnp.bool_
    resumed_updates, resumed = go(restored, grads[4:])
    straight_updates, straight = go(mid, grads[4:])
    assert _bits(resumed) == _bits(straight)
    assert _bits(resumed_updates) == _bits(straight_updates)
    # the restored consecutive count (2) carries on: 3 at step 4, reset by step 5
    assert [c for _, c in resumed_updates] == [3, 0, 1, 0]
    assert int(resumed.total_notfinite) == 4


def test_apply_if_finite_validation():
    with pytest.raises(ValueError, match=r"apply_if_finite: max_consecutive_errors must be >= 0"):
        gradtx.apply_if_finite(gradtx.sgd(0.1), -1)
    with pytest.raises(ValueError, match=r"max_consecutive_errors must be an integer, got 2.5"):
        gradtx.apply_if_finite(gradtx.sgd(0.1), 2.5)  # type: ignore[arg-type]


def test_zero_nans_non_finite_filters_nan_and_inf():
    g = {"a": jnp.array([1.0, np.nan, np.inf, -np.inf, -2.0]), "b": jnp.array([3.0], jnp.bfloat16)}
    tx = gradtx.zero_nans(non_finite=True)
    u, state = jax.jit(tx.update)(g, tx.init(g))
    np.testing.assert_array_equal(u["a"], [1.0, 0.0, 0.0, 0.0, -2.0])
    assert u["b"].dtype == jnp.bfloat16 and float(u["b"][0]) == 3.0
    assert isinstance(state, gradtx.ZeroNansState)
    assert bool(state.found_nan["a"]) and not bool(state.found_nan["b"])
