"""scale, scale_by_learning_rate, scale_by_schedule against Optax."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax
import pytest

import gradtx

from ..helpers import compare_transformations, mixed_params


def _schedule(t):
    return 0.1 * 0.97 ** jnp.asarray(t, jnp.float32)


def test_scale(use_jit):
    compare_transformations(gradtx.scale(-0.3), optax.scale(-0.3), jit=use_jit, steps=100)


@pytest.mark.parametrize("lr", [0.1, _schedule], ids=["constant", "schedule"])
def test_scale_by_learning_rate(use_jit, lr):
    compare_transformations(
        gradtx.scale_by_learning_rate(lr), optax.scale_by_learning_rate(lr), jit=use_jit, steps=100
    )
    compare_transformations(
        gradtx.scale_by_learning_rate(lr, flip_sign=False),
        optax.scale_by_learning_rate(lr, flip_sign=False),
        jit=use_jit,
        steps=100,
    )


def test_scale_by_schedule(use_jit):
    compare_transformations(
        gradtx.scale_by_schedule(_schedule), optax.scale_by_schedule(_schedule), jit=use_jit
    )


def test_constant_and_schedule_give_the_same_state_layout():
    params = mixed_params()
    a = gradtx.scale_by_learning_rate(0.1).init(params)
    b = gradtx.scale_by_learning_rate(_schedule).init(params)
    assert jax.tree.structure(a) == jax.tree.structure(b)


def test_invalid_arguments_are_rejected_at_construction():
    with pytest.raises(
        ValueError, match=r"scale_by_learning_rate: learning_rate must be >= 0, got -0\.1"
    ):
        gradtx.scale_by_learning_rate(-0.1)
    with pytest.raises(TypeError, match="scale_by_schedule"):
        gradtx.scale(_schedule)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="must be callable"):
        gradtx.scale_by_schedule(0.1)  # type: ignore[arg-type]


def test_traced_learning_rate_is_accepted_under_jit():
    params = {"w": jnp.ones(3)}

    @jax.jit
    def step(lr):
        tx = gradtx.scale_by_learning_rate(lr)
        return tx.update(params, tx.init(params))[0]

    assert float(step(jnp.float32(0.5))["w"][0]) == -0.5
