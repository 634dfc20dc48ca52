"""Schedules are accepted wherever a hyperparameter is, with the state layout of a constant."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gradtx
from gradtx import schedules as S

from ..helpers import compare_transformations, mixed_params


def layout(state):
    """Structure, shapes and dtypes of a state (what a checkpoint depends on)."""
    leaves, treedef = jax.tree.flatten(state)
    return treedef, [(jnp.shape(x), jnp.asarray(x).dtype) for x in leaves]


def test_sgd_with_schedules_keeps_the_constant_layout():
    params = mixed_params()
    lr = S.warmup_cosine_decay(0.0, 0.1, 5, 50)
    momentum = S.linear(0.5, 0.9, 20)
    with_schedules = gradtx.sgd(lr, momentum=momentum).init(params)
    with_constants = gradtx.sgd(0.1, momentum=0.9).init(params)
    assert layout(with_schedules) == layout(with_constants)


def test_weight_decay_with_a_schedule_keeps_the_constant_layout():
    params = mixed_params()
    assert layout(gradtx.weight_decay(S.exponential_decay(1e-4, 10, 0.5)).init(params)) == (
        layout(gradtx.weight_decay(1e-4).init(params))
    )


@pytest.mark.across_versions
def test_sgd_with_a_scheduled_learning_rate_matches_optax():
    compare_transformations(
        gradtx.sgd(S.warmup_cosine_decay(0.0, 0.1, 5, 40), momentum=0.9),
        optax.sgd(optax.warmup_cosine_decay_schedule(0.0, 0.1, 5, 40), momentum=0.9),
        steps=60,
    )


def test_sgd_with_scheduled_momentum_matches_the_rule():
    compare_transformations(
        gradtx.sgd(S.warmup_cosine_decay(0.0, 0.1, 5, 40), momentum=S.linear(0.5, 0.9, 20)),
        _optax_sgd_with_scheduled_momentum(),
        steps=60,
    )


def _optax_sgd_with_scheduled_momentum():
    """Optax's sgd takes no momentum schedule; the same rule, chained by hand."""
    momentum = optax.linear_schedule(0.5, 0.9, 20)

    def init(params):
        return (
            optax.ScaleByScheduleState(count=jnp.zeros([], jnp.int32)),
            jax.tree.map(jnp.zeros_like, params),
        )

    def update(updates, state, params=None):
        del params
        count_state, trace = state
        mu = momentum(count_state.count)
        trace = jax.tree.map(lambda g, t: g + mu * t, updates, trace)
        lr = optax.warmup_cosine_decay_schedule(0.0, 0.1, 5, 40)(count_state.count)
        updates = jax.tree.map(lambda t: -lr * t, trace)
        return updates, (optax.ScaleByScheduleState(count=count_state.count + 1), trace)

    return optax.GradientTransformation(init, update)


def test_schedule_in_a_jitted_training_loop_uses_the_step_count():
    lr = S.piecewise_constant(1.0, {3: 0.1})
    tx = gradtx.sgd(lr)
    params = {"w": jnp.zeros(2)}

    @jax.jit
    def step(params, state):
        updates, state = tx.update({"w": jnp.ones(2)}, state)
        return gradtx.apply_updates(params, updates), state

    state = tx.init(params)
    trajectory = []
    for _ in range(5):
        params, state = step(params, state)
        trajectory.append(float(params["w"][0]))
    np.testing.assert_allclose(trajectory, [-1.0, -2.0, -3.0, -3.1, -3.2], rtol=1e-6)
