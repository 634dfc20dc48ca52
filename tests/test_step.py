"""`gradtx.jit_step`: the jitted, donating training step (donation, loss functions, the guard
against shared donated buffers, its lowering). Every table optimizer's `jit_step` is checked
against the plain step in tests/test_generic.py."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradtx

VALUE = jnp.float32(1.0)


def _plain_step(tx):
    @jax.jit
    def step(params, state, grads):
        updates, state = tx.update(grads, state, params, value=VALUE)
        return gradtx.apply_updates(params, updates), state

    return step


def test_jit_step_donates_params_and_state():
    tx = gradtx.adam(0.1)
    params = {"w": jnp.ones(4), "b": jnp.zeros(2)}
    state = tx.init(params)
    new_params, new_state = gradtx.jit_step(tx)(params, state, jax.tree.map(jnp.ones_like, params))
    assert params["w"].is_deleted() and gradtx.tree.get(state, "mu")["w"].is_deleted()
    assert not new_params["w"].is_deleted()
    np.testing.assert_allclose(np.asarray(new_params["w"]), 0.9, rtol=1e-6)
    assert jax.tree.structure(new_state) == jax.tree.structure(tx.init(params))


def test_jit_step_without_donation_keeps_inputs():
    tx = gradtx.sgd(0.5)
    params = {"w": jnp.ones(3)}
    state = tx.init(params)
    new_params, _ = gradtx.jit_step(tx, donate=False)(params, state, {"w": jnp.ones(3)})
    assert not params["w"].is_deleted()
    np.testing.assert_allclose(np.asarray(new_params["w"]), 0.5)


def test_jit_step_with_loss_fn_and_aux():
    tx = gradtx.sgd(0.25)

    def loss_fn(p, x):
        loss = jnp.sum((p["w"] - x) ** 2)
        return loss, {"residual": p["w"] - x}

    step = gradtx.jit_step(tx, loss_fn, has_aux=True)
    params = {"w": jnp.zeros(2)}
    state = tx.init(params)
    params, state, loss, aux = step(params, state, jnp.ones(2))
    assert float(loss) == pytest.approx(2.0)
    np.testing.assert_allclose(np.asarray(aux["residual"]), -1.0)
    # w <- w - 0.25 * 2 (w - x) = 0.5
    np.testing.assert_allclose(np.asarray(params["w"]), 0.5)


def test_jit_step_passes_the_loss_as_value():
    seen = []

    def record(updates, state, params=None, **extra_args):
        seen.append(extra_args.get("value"))
        return updates, state

    tx = gradtx.GradientTransformation(lambda p: gradtx.EmptyState(), record)
    step = gradtx.jit_step(tx, lambda p: jnp.sum(p["w"] ** 2))
    step({"w": jnp.ones(2)}, tx.init(None))
    assert len(seen) == 1 and seen[0] is not None


def test_jit_step_names_a_shared_donated_buffer():
    tx = gradtx.sgd(0.1)
    w = jnp.ones(3)
    params = {"w": w}
    with pytest.raises(ValueError, match=r"params\['w'\] and grads\['w'\] are the same array"):
        gradtx.jit_step(tx)(params, tx.init(params), {"w": w})


def test_jit_step_exposes_lowering():
    tx = gradtx.adam(0.1)
    params = {"w": jnp.ones(3)}
    step = gradtx.jit_step(tx)
    text = step.lower(params, tx.init(params), params).as_text()
    assert "tf.aliasing_output" in text or "jax.buffer_donor" in text


def test_jit_step_rejects_bad_arguments():
    with pytest.raises(TypeError, match="did you pass a factory"):
        gradtx.jit_step(gradtx.adam)
    with pytest.raises(TypeError, match="loss_fn must be callable"):
        gradtx.jit_step(gradtx.adam(0.1), loss_fn=3)
    with pytest.raises(ValueError, match="has_aux=True needs a loss_fn"):
        gradtx.jit_step(gradtx.adam(0.1), has_aux=True)
