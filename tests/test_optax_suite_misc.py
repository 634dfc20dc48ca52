"""Behaviours matched to Optax's own tests (linear_algebra, transform, update, _adding)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradtx

# -- nnls keeps the inputs' float dtype (optax linear_algebra_test::test_nnls) ----------------


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float32])
@pytest.mark.parametrize("k", [(), (3,)])
def test_nnls_keeps_the_input_dtype(dtype, k):
    a = jax.random.normal(jax.random.key(0), (6, 4), dtype=dtype)
    b = jax.random.normal(jax.random.key(1), (6, *k), dtype=dtype)
    x = gradtx.nnls(a, b, iters=5)
    assert x.dtype == dtype
    assert x.shape == (4, *k)
    assert bool((x >= 0).all())


def test_nnls_integer_inputs_give_a_float_result():
    x = gradtx.nnls(jnp.array([[1, 2], [3, 4]]), jnp.array([5, 6]), iters=1000)
    assert jnp.issubdtype(x.dtype, jnp.floating)
    np.testing.assert_allclose(np.asarray(x), [0.0, 1.7], atol=1e-2)


# -- a missing value= is a TypeError, as Optax's required keyword (transform_test) ------------


def test_missing_value_is_a_type_error_and_a_value_error():
    tx = gradtx.scale_by_polyak()
    params = jnp.array([1.0, -1.0])
    state = tx.init(params)
    with pytest.raises(TypeError, match="scale_by_polyak needs the monitored value"):
        tx.update(params, state, params)
    with pytest.raises(ValueError, match="scale_by_polyak needs the monitored value"):
        tx.update(params, state, params)
    value, grad = jax.value_and_grad(lambda x: jnp.abs(x).sum())(params)
    updates, _ = tx.update(grad, state, params, value=value)
    assert float(jnp.abs(params - updates).sum()) < 1e-10


# -- a None on the driving tree covers the other tree's subtree (update_test, _adding_test) ---


def test_apply_updates_with_none_params_is_none():
    x = jnp.array([1.0, 2.0, 3.0])
    assert gradtx.apply_updates(None, x) is None
    out = gradtx.apply_updates({"a": None, "b": x}, {"a": {"c": x}, "b": x})
    assert out["a"] is None
    np.testing.assert_array_equal(np.asarray(out["b"]), [2.0, 4.0, 6.0])


def test_apply_updates_still_reports_other_differences():
    x = jnp.ones(2)
    with pytest.raises(ValueError, match="params and updates differ at the root"):
        gradtx.apply_updates({"a": x}, None)
    with pytest.raises(ValueError, match=r"only in params: \['b'\]; only in updates: \['c'\]"):
        gradtx.apply_updates({"a": x, "b": x}, {"a": x, "c": x})
    with pytest.raises(ValueError, match="params and updates differ at 'a'"):
        gradtx.apply_updates({"a": x, "b": None}, {"a": None, "b": x})


def test_incremental_update_with_none_new_tensors_is_none():
    x = jnp.array([1.0, 2.0, 3.0])
    assert gradtx.incremental_update(None, x, 1) is None
    out = gradtx.incremental_update((None, x), ((x, x), jnp.zeros(3)), 0.5)
    assert out[0] is None
    np.testing.assert_allclose(np.asarray(out[1]), [0.5, 1.0, 1.5])


def test_add_decayed_weights_with_none_updates():
    weights = (jnp.ones(2), {"a": jnp.ones(2), "b": jnp.ones(2)})
    tx = gradtx.add_decayed_weights(0.1)
    state = tx.init(weights)
    updates, new_state = tx.update(None, state, weights)
    assert updates is None
    assert int(new_state.count) == 1
    updates, _ = tx.update((None, {"a": jnp.zeros(2), "b": None}), state, weights)
    assert updates[0] is None and updates[1]["b"] is None
    np.testing.assert_allclose(np.asarray(updates[1]["a"]), [0.1, 0.1])


def test_weight_decay_names_a_wrong_state():
    weights = {"w": jnp.ones(2)}
    tx = gradtx.add_decayed_weights(0.1)
    with pytest.raises(ValueError, match=r"expected a WeightDecayState .* got int"):
        tx.update(weights, 0, weights)
