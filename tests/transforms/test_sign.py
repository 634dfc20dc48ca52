"""`scale_by_sign` and `scale_by_lion` against Optax, plus validation and traced values; the
`signum` alias (sign of a momentum, via `scale_by_lion`) against Optax 0.2.8."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gradtx

from ..helpers import grad_sequence, mixed_params
from ..optax_reference import compare_to_optax, with_modes
from .common import (
    LR,
    assert_raises_with_message,
    assert_signature_is_optaxs,
    check_matches_optax,
    invalid_ids,
)

MATCHES_OPTAX = [
    ("sign", lambda: gradtx.scale_by_sign(), lambda: optax.scale_by_sign(), (False, True)),
    ("lion", lambda: gradtx.scale_by_lion(), lambda: optax.scale_by_lion(), (False, True)),
    (
        "lion_custom_mu_bf16",
        lambda: gradtx.scale_by_lion(0.5, 0.9, mu_dtype=jnp.bfloat16),
        lambda: optax.scale_by_lion(0.5, 0.9, mu_dtype=jnp.bfloat16),
        (True,),
    ),
    (
        "lion_smooth",
        lambda: gradtx.scale_by_lion(mode="smooth", smooth_beta=3.0),
        lambda: optax.scale_by_lion(mode="smooth", smooth_beta=3.0),
        (True,),
    ),
    (
        "lion_refined",
        lambda: gradtx.scale_by_lion(mode="refined"),
        lambda: optax.scale_by_lion(mode="refined"),
        (True,),
    ),
]


@pytest.mark.parametrize(
    ("ours", "reference", "jit"),
    [
        pytest.param(ours, ref, jit, id=f"{'jit' if jit else 'eager'}-{name}")
        for name, ours, ref, modes in MATCHES_OPTAX
        for jit in modes
    ],
)
def test_matches_optax(ours, reference, jit):
    compare_to_optax(ours(), reference(), jit=jit)


def test_sign_of_zero_is_zero_and_state_is_empty():
    tx = gradtx.scale_by_sign()
    state = tx.init({"w": jnp.zeros(4)})
    updates, new_state = tx.update({"w": jnp.array([0.0, -2.0, 3e-30, -0.0])}, state)
    np.testing.assert_array_equal(np.asarray(updates["w"]), [0.0, -1.0, 1.0, 0.0])
    assert new_state == gradtx.EmptyState()


def test_lion_uses_the_old_momentum_and_decays_with_b2():
    tx = gradtx.scale_by_lion(b1=0.9, b2=0.5)
    params = {"w": jnp.zeros(2)}
    _, state = tx.update({"w": jnp.array([1.0, -1.0])}, tx.init(params))
    np.testing.assert_allclose(np.asarray(state.mu["w"]), [0.5, -0.5])
    # c = 0.9 * 0.5 + 0.1 * (-4) = 0.05 > 0: the old momentum still wins the sign.
    updates, state = tx.update({"w": jnp.array([-4.0, 4.0])}, state)
    np.testing.assert_array_equal(np.asarray(updates["w"]), [1.0, -1.0])
    np.testing.assert_allclose(np.asarray(state.mu["w"]), [-1.75, 1.75])


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"b1": 1.0}, "scale_by_lion: b1 must be in [0.0, 1.0), got 1.0"),
        ({"b2": -0.5}, "scale_by_lion: b2 must be in [0.0, 1.0), got -0.5"),
        ({"smooth_beta": 0.0}, "scale_by_lion: smooth_beta must be > 0, got 0.0"),
        (
            {"mode": "hrad"},
            "scale_by_lion: mode must be one of ['hard', 'smooth', 'refined'], got 'hrad' "
            "(did you mean 'hard'?)",
        ),
    ],
)
def test_invalid_lion_hyperparameters_raise(kwargs, message):
    with pytest.raises(ValueError) as info:
        gradtx.scale_by_lion(**kwargs)
    assert str(info.value) == message


def test_traced_lion_hyperparameters_are_accepted():
    params = mixed_params()
    g1, g2 = grad_sequence(params, 2)

    def two_steps(b1, b2):
        tx = gradtx.scale_by_lion(b1, b2, mode="smooth", smooth_beta=b1 + 1.0)
        _, state = tx.update(g1, tx.init(params))
        return tx.update(g2, state)[0]

    traced = jax.jit(two_steps)(jnp.float32(0.7), jnp.float32(0.8))
    concrete = two_steps(0.7, 0.8)
    for a, b in zip(jax.tree.leaves(traced), jax.tree.leaves(concrete), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5)


def test_lion_keeps_dtypes():
    params = mixed_params(dtype=jnp.bfloat16)
    tx = gradtx.scale_by_lion(mu_dtype=jnp.float32)
    updates, state = jax.jit(tx.update)(grad_sequence(params, 1)[0], tx.init(params))
    assert {u.dtype for u in jax.tree.leaves(updates)} == {jnp.dtype(jnp.bfloat16)}
    assert {m.dtype for m in jax.tree.leaves(state.mu)} == {jnp.dtype(jnp.float32)}
    assert state.count.dtype == jnp.int32


# -- signum -----------------------------------------------------------------------------------

# (id, ours, Optax's, params or None for the mixed default)
SIGNUM_MATCHES_OPTAX = [
    ("signum_schedule", lambda: gradtx.signum(LR), lambda: optax.signum(LR), None),
    (
        "signum_bf16_accumulator",
        lambda: gradtx.signum(0.1, beta=0.5, accumulator_dtype=jnp.bfloat16),
        lambda: optax.signum(0.1, beta=0.5, accumulator_dtype=jnp.bfloat16),
        None,
    ),
]
# One configuration runs eagerly; the other under jit.
_SIGNUM_EAGER = {"signum_schedule"}


@pytest.mark.across_versions
@pytest.mark.parametrize(
    ("name", "ours", "reference", "params", "jit"),
    with_modes(SIGNUM_MATCHES_OPTAX, eager=_SIGNUM_EAGER),
)
def test_signum_matches_optax(name, ours, reference, params, jit):
    check_matches_optax(__name__, name, ours, reference, params, jit)


@pytest.mark.parametrize("name", ["signum"])
def test_signature_is_optaxs(name):
    assert_signature_is_optaxs(name)


INVALID = [
    (
        lambda: gradtx.signum(0.1, beta=1.0),
        "signum: beta must be in [0.0, 1.0), got 1.0 (from scale_by_lion: b1 must be in",
    ),
]


@pytest.mark.parametrize(("build", "message"), INVALID, ids=invalid_ids(INVALID))
def test_invalid_hyperparameters_raise_at_construction(build, message):
    assert_raises_with_message(build, message)
