"""Interoperability with Optax and Flax in both directions."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from flax.training import train_state

import gradtx

from .helpers import compare_transformations, grad_sequence, mixed_params


def _mlp_apply(params, x):
    h = jnp.tanh(x @ params["w1"] + params["b1"])
    return h @ params["w2"]


def _mlp_params():
    rng = np.random.default_rng(0)
    return {
        "w1": jnp.asarray(rng.normal(size=(3, 8)), jnp.float32),
        "b1": jnp.zeros(8),
        "w2": jnp.asarray(rng.normal(size=(8, 1)), jnp.float32),
    }


def test_gradtx_optimizer_drives_a_flax_train_state():
    x = jnp.asarray(np.random.default_rng(1).normal(size=(16, 3)), jnp.float32)
    y = jnp.sum(x, axis=1, keepdims=True)

    def loss(params):
        return jnp.mean((_mlp_apply(params, x) - y) ** 2)

    state = train_state.TrainState.create(
        apply_fn=_mlp_apply, params=_mlp_params(), tx=gradtx.sgd(0.05, momentum=0.9)
    )

    @jax.jit
    def step(state):
        return state.apply_gradients(grads=jax.grad(loss)(state.params))

    # The same steps by hand with gradtx alone.
    tx = gradtx.sgd(0.05, momentum=0.9)
    params, opt_state = _mlp_params(), tx.init(_mlp_params())
    start = float(loss(params))
    for _ in range(20):
        state = step(state)
        updates, opt_state = tx.update(jax.grad(loss)(params), opt_state, params)
        params = gradtx.apply_updates(params, updates)
    assert int(state.step) == 20
    for a, b in zip(jax.tree.leaves(state.params), jax.tree.leaves(params), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    assert float(loss(state.params)) < 0.5 * start


def test_gradtx_optimizer_drives_nnx_optimizer():
    model = nnx.Linear(3, 1, rngs=nnx.Rngs(0))
    optimizer = nnx.Optimizer(model, gradtx.sgd(0.1, momentum=0.9), wrt=nnx.Param)
    x = jnp.asarray(np.random.default_rng(2).normal(size=(32, 3)), jnp.float32)
    y = x @ jnp.array([[1.0], [-2.0], [0.5]])

    def loss(m):
        return jnp.mean((m(x) - y) ** 2)

    start = float(loss(model))
    for _ in range(50):
        grads = nnx.grad(loss)(model)
        optimizer.update(model, grads)
    assert float(loss(model)) < 1e-2 * start


def test_gradtx_transformation_inside_optax_chain():
    gx = optax.chain(gradtx.scale_by_adam(), optax.scale(-1e-2))
    compare_transformations(gx, optax.adam(1e-2), steps=100)


def test_optax_transformation_inside_gradtx_chain_and_named_chain():
    tx = gradtx.chain(optax.clip_by_global_norm(1.0), gradtx.sgd(0.1, momentum=0.9))
    ref = optax.chain(optax.clip_by_global_norm(1.0), optax.sgd(0.1, momentum=0.9))
    compare_transformations(tx, ref, steps=100, extra_args=[{"value": 0.0}] * 100)
    named = gradtx.named_chain(("adam", optax.scale_by_adam()), ("lr", optax.scale(-1e-3)))
    compare_transformations(named, optax.adam(1e-3), steps=100)


def test_gradtx_state_works_with_optax_tree_utilities():
    tx = gradtx.scale_by_adam()
    params = mixed_params()
    state = tx.init(params)
    g = grad_sequence(params, 1)[0]
    _, state = tx.update(g, state)
    assert int(optax.tree_utils.tree_get(state, "count")) == 1
