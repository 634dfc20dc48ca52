"""Regressions of Optax's hyperparameter issues, on gradtx: #412 (adafactor under
`inject_hyperparams` cannot be jitted) and #1532 (`inject_hyperparams` makes Adam's trajectory
drift from the plain optimizer's)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradtx

from ..helpers import assert_trees_bitwise_equal


def _mlp_problem():
    """#1532's setting: a small MLP fitting random data."""
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.uniform(-3, 3, (100, 1)), jnp.float32)
    y = jnp.sin(x) + 0.1 * jnp.asarray(rng.normal(size=(100, 1)), jnp.float32)
    sizes = [(1, 32), (32, 32), (32, 1)]
    params = [
        {"w": jnp.asarray(rng.normal(size=s) / np.sqrt(s[0]), jnp.float32), "b": jnp.zeros(s[1])}
        for s in sizes
    ]

    def loss(p):
        h = x
        for i, layer in enumerate(p):
            h = h @ layer["w"] + layer["b"]
            if i < len(p) - 1:
                h = jax.nn.relu(h)
        return jnp.mean((h - y) ** 2)

    return params, loss


def _train(tx, params, loss, steps):
    @jax.jit
    def step(p, s):
        g = jax.grad(loss)(p)
        u, s = tx.update(g, s, p)
        return gradtx.apply_updates(p, u), s

    s = tx.init(params)
    for _ in range(steps):
        params, s = step(params, s)
    return params


@pytest.mark.parametrize("factory", [gradtx.adam, gradtx.amsgrad], ids=["adam", "amsgrad"])
def test_optax_1532_inject_hyperparams_keeps_the_trajectory_bit_for_bit(factory):
    params, loss = _mlp_problem()
    plain = _train(factory(1e-2), params, loss, 300)
    injected = _train(gradtx.inject_hyperparams(factory)(learning_rate=1e-2), params, loss, 300)
    assert_trees_bitwise_equal(injected, plain, "inject_hyperparams against the plain optimizer")
    # With every number traced (with_hyperparameters) a step equals the plain step to float32
    # rounding of the hyperparameters, not bit for bit: the plain optimizer's Python floats are
    # combined in float64 before XLA sees them (1 - b2 = 0.001), traced ones in float32
    # (1 - float32(0.999) = 0.00099998713, 1.3e-5 relative). On this MLP such differences grow
    # over hundreds of steps (as in #1532), so the steps are compared one by one.
    tx = factory(1e-2)
    hp = gradtx.hyperparameters(tx)

    @jax.jit
    def both(p, s, hp):
        g = jax.grad(loss)(p)
        return tx.update(g, s, p), gradtx.with_hyperparameters(tx, hp).update(g, s, p)

    p, s = params, tx.init(params)
    for _ in range(50):
        (u, s_plain), (u_traced, _) = both(p, s, hp)
        for a, b in zip(jax.tree.leaves(u_traced), jax.tree.leaves(u), strict=True):
            np.testing.assert_allclose(a, b, rtol=2e-5, atol=1e-9)
        p, s = gradtx.apply_updates(p, u), s_plain


def test_optax_412_adafactor_with_injected_hyperparameters_jits():
    params = {"w": jnp.ones((256, 4)), "b": jnp.ones(4)}
    grads = jax.tree.map(lambda x: 0.1 * x, params)
    for tx in (
        gradtx.inject_hyperparams(gradtx.adafactor)(learning_rate=0.1),
        gradtx.inject_hyperparams(gradtx.adafactor)(
            learning_rate=0.1, min_dim_size_to_factor=128, decay_rate=0.8
        ),
    ):
        state = jax.jit(tx.init)(params)
        updates, state = jax.jit(tx.update)(grads, state, params)
        assert np.all(np.isfinite(updates["w"]))
    # and with every number of adafactor as data: one compile for three decay rates
    tx = gradtx.adafactor(0.1, min_dim_size_to_factor=128)
    hp = gradtx.hyperparameters(tx)
    assert "min_dim_size_to_factor" not in hp  # a size: structure, not a number to trace
    update = jax.jit(lambda g, s, p, hp: gradtx.with_hyperparameters(tx, hp).update(g, s, p))
    state = tx.init(params)
    expected, _ = tx.update(grads, state, params)
    for rate in (0.8, 0.7, 0.9):
        out, _ = update(grads, state, params, {**hp, "decay_rate": rate})
        if rate == 0.8:
            for a, b in zip(jax.tree.leaves(out), jax.tree.leaves(expected), strict=True):
                np.testing.assert_allclose(a, b, rtol=1e-6)
    assert update._cache_size() == 1


def test_optax_577_a_sweep_compiles_one_program_for_every_value():
    """#577: a learning-rate sweep recompiles (and, run as separate jobs, never hits the
    persistent compilation cache), because each value is a constant of its program. With the
    numbers as data, every member of a sweep lowers to the same program text, the key of the
    persistent cache; built with Python floats, each value is another program."""
    params = {"w": jnp.ones((4, 3))}

    def program(tx, hp=None):
        def step(p, s, hp):
            tx_hp = tx if hp is None else gradtx.with_hyperparameters(tx, hp)
            u, s = tx_hp.update(p, s, p)
            return gradtx.apply_updates(p, u), s

        return jax.jit(step).lower(params, tx.init(params), hp).as_text()

    tx = gradtx.adamw(gradtx.warmup_cosine_decay_schedule(0.0, 1e-3, 10, 100), weight_decay=0.1)
    hp = gradtx.hyperparameters(tx)
    other = {
        **hp,
        "weight_decay": 0.3,
        "learning_rate": {**hp["learning_rate"], "peak_value": 3e-3},
    }
    assert program(tx, hp) == program(tx, other)
    plain = [gradtx.adamw(lr, weight_decay=0.1) for lr in (1e-3, 3e-3)]
    assert program(plain[0]) != program(plain[1])
