"""The monitored value (`value=`): it reaches gradtx transformations inside `optax.chain`
through `as_optax`, and a missing one is a TypeError, as Optax's required keyword
(optax transform_test), and a ValueError."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gradtx

LOSS_USERS = [
    ("eve", lambda: gradtx.eve(0.1)),
    ("reduce_on_plateau", lambda: gradtx.reduce_on_plateau(patience=1)),
    ("newbob", lambda: gradtx.newbob()),
]


@pytest.mark.parametrize(("name", "make"), LOSS_USERS, ids=[n for n, _ in LOSS_USERS])
def test_value_reaches_gradtx_inside_optax_chain_through_as_optax(name, make):
    params = {"w": jnp.ones(3)}
    grads = {"w": jnp.full(3, 0.5)}
    losses = [3.0, 2.0, 2.5, 2.6, 2.7]
    ours = gradtx.chain(gradtx.clip(1.0), make())
    theirs = optax.chain(optax.clip(1.0), gradtx.as_optax(make()))
    s_ours, s_theirs = ours.init(params), theirs.init(params)
    for loss in losses:
        value = jnp.asarray(loss)
        u_ours, s_ours = ours.update(grads, s_ours, params, value=value)
        u_theirs, s_theirs = theirs.update(grads, s_theirs, params, value=value)
        np.testing.assert_array_equal(u_ours["w"], u_theirs["w"])
    # without the adapter Optax drops `value`, and the transformation says what to do
    plain = optax.chain(optax.clip(1.0), make())
    with pytest.raises(ValueError, match=r"needs the monitored value.*gradtx.as_optax"):
        plain.update(grads, plain.init(params), params, value=jnp.asarray(1.0))


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
