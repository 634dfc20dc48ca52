"""A None on the driving tree covers the other tree's subtree, as in Optax (update_test,
_adding_test): apply_updates, incremental_update, add_decayed_weights."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

import gradtx


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
