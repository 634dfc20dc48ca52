"""Trust ratio (LARS / LAMB) and parameter-block scaling against Optax."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gradtx
from gradtx._base._numerics import safe_norm, safe_rms

from ..helpers import grad_sequence, kernel_mask, mixed_params
from ..optax_reference import compare_to_optax, with_modes

MATCHES_OPTAX = [
    ("trust_ratio", lambda: gradtx.scale_by_trust_ratio(), lambda: optax.scale_by_trust_ratio()),
    (
        "trust_ratio_custom",
        lambda: gradtx.scale_by_trust_ratio(0.5, 0.01, 1e-3),
        lambda: optax.scale_by_trust_ratio(0.5, 0.01, 1e-3),
    ),
    (
        "param_block_rms",
        lambda: gradtx.scale_by_param_block_rms(),
        lambda: optax.scale_by_param_block_rms(),
    ),
    (
        "param_block_norm",
        lambda: gradtx.scale_by_param_block_norm(0.1),
        lambda: optax.scale_by_param_block_norm(0.1),
    ),
]


@pytest.mark.parametrize(
    ("key", "ours", "reference", "jit"),
    with_modes(
        MATCHES_OPTAX,
        eager={"trust_ratio", "param_block_norm"},
        jit={"trust_ratio_custom", "param_block_rms", "param_block_norm"},
    ),
)
def test_matches_optax(key, ours, reference, jit):
    # Small gradients: the parameter-scaled steps would otherwise grow the parameters without
    # bound over 100 steps. The eager reference matters for the default trust ratio: it scales
    # the scalar leaf's update to +-|p|, so that parameter cancels to exactly zero or to a
    # rounding residue depending on how the step is compiled (and the next step takes the
    # param_norm == 0 branch or not).
    compare_to_optax(
        ours(),
        reference(),
        jit=jit,
        reference_key=f"{__name__}:{key}",
        grad_scale=0.01,
        reference_jit=False,
    )


def _all_but_dense_bias(params):
    return {
        "dense": {"kernel": True, "bias": False},
        "layers": [True, {"w": True, "frozen": None}],
        "pair": type(params["pair"])(a=True, b=(True, True)),
        "empty": {},
        "none": None,
    }


@pytest.mark.parametrize(
    ("mask", "expected"),
    [
        (kernel_mask, kernel_mask),
        ("!**/bias", _all_but_dense_bias),
        (["dense/kernel", "layers/1/w", "pair/a", "pair/b/1"], kernel_mask),
    ],
    ids=["callable", "glob", "glob_list"],
)
def test_mask_matches_optax_masked(mask, expected):
    reference = optax.masked(optax.scale_by_trust_ratio(), expected(mixed_params()))
    # Which leaves are scaled is settled at the first step; a few eager steps show it.
    compare_to_optax(
        gradtx.scale_by_trust_ratio(mask=mask),
        reference,
        steps=5,
        grad_scale=0.01,
        jit=False,
        reference_jit=False,
    )


def test_masked_out_leaves_pass_unchanged():
    params = {"w": jnp.full(3, 10.0), "b": jnp.full(2, 10.0)}
    grads = {"w": jnp.ones(3), "b": jnp.ones(2)}
    tx = gradtx.scale_by_trust_ratio(mask={"w": True, "b": False})
    updates, _ = tx.update(grads, tx.init(params), params)
    np.testing.assert_array_equal(updates["b"], grads["b"])
    np.testing.assert_allclose(updates["w"], np.full(3, 10.0), rtol=1e-6)  # |w| / |g| = 10


def test_zero_parameter_or_update_norm_leaves_the_update_unchanged():
    params = {"zero_p": jnp.zeros(3), "zero_g": jnp.ones(2)}
    grads = {"zero_p": jnp.array([1.0, -2.0, 3.0]), "zero_g": jnp.zeros(2)}
    tx = gradtx.scale_by_trust_ratio()
    updates, _ = tx.update(grads, tx.init(params), params)
    np.testing.assert_array_equal(updates["zero_p"], grads["zero_p"])
    np.testing.assert_array_equal(updates["zero_g"], grads["zero_g"])


def test_norms_are_computed_in_float32_for_float16_leaves():
    # |w|^2 = 4 * 300^2 overflows float16 (max 65504); the ratio must still be |w| / |g| = 600.
    params = {"w": jnp.full(4, 300.0, jnp.float16)}
    grads = {"w": jnp.full(4, 0.5, jnp.float16)}
    tx = gradtx.scale_by_trust_ratio()
    updates, _ = tx.update(grads, tx.init(params), params)
    assert updates["w"].dtype == jnp.float16
    np.testing.assert_allclose(np.asarray(updates["w"], np.float32), np.full(4, 300.0), rtol=1e-3)


def test_nan_parameters_propagate_instead_of_being_hidden():
    # Regression: safe_norm / safe_rms returned their minimum for a NaN input, so a diverged
    # parameter silently produced finite updates.
    assert bool(jnp.isnan(safe_norm(jnp.array([1.0, jnp.nan]), 1e-3)))
    assert bool(jnp.isnan(safe_rms(jnp.array([1.0, jnp.nan]), 1e-3)))
    params = {"w": jnp.array([1.0, jnp.nan])}
    grads = {"w": jnp.array([0.5, 0.5])}
    for tx in (gradtx.scale_by_trust_ratio(0.1), gradtx.scale_by_param_block_norm()):
        updates, _ = tx.update(grads, tx.init(params), params)
        assert bool(jnp.all(jnp.isnan(updates["w"])))


def test_safe_norm_keeps_a_zero_gradient_at_zero():
    # The NaN fix above must not bring back the NaN gradient of the norm at 0.
    for fn in (safe_norm, safe_rms):
        grad = jax.grad(lambda x, fn=fn: fn(x, 0.0))(jnp.zeros(3))
        np.testing.assert_array_equal(grad, np.zeros(3))


@pytest.mark.parametrize(
    "make",
    [
        lambda: gradtx.scale_by_trust_ratio(),
        lambda: gradtx.scale_by_param_block_rms(),
        lambda: gradtx.scale_by_param_block_norm(),
    ],
    ids=["trust_ratio", "param_block_rms", "param_block_norm"],
)
def test_needs_params(make):
    tx = make()
    params = mixed_params()
    g = grad_sequence(params, 1)[0]
    with pytest.raises(ValueError, match="needs the current parameters"):
        tx.update(g, tx.init(params))


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (
            lambda: gradtx.scale_by_trust_ratio(min_norm=-1.0),
            "scale_by_trust_ratio: min_norm must be >= 0, got -1.0",
        ),
        (
            lambda: gradtx.scale_by_trust_ratio(trust_coefficient=0.0),
            "scale_by_trust_ratio: trust_coefficient must be > 0, got 0.0",
        ),
        (
            lambda: gradtx.scale_by_trust_ratio(eps=-1e-3),
            "scale_by_trust_ratio: eps must be >= 0, got -0.001",
        ),
        (
            lambda: gradtx.scale_by_param_block_rms(-1e-3),
            "scale_by_param_block_rms: min_scale must be >= 0, got -0.001",
        ),
        (
            lambda: gradtx.scale_by_param_block_norm(-1),
            "scale_by_param_block_norm: min_scale must be >= 0, got -1",
        ),
    ],
)
def test_invalid_hyperparameters_raise(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_traced_trust_coefficient_is_accepted():
    params = mixed_params()
    g = grad_sequence(params, 1)[0]

    def step(coefficient):
        tx = gradtx.scale_by_trust_ratio(trust_coefficient=coefficient)
        return tx.update(g, tx.init(params), params)[0]

    for a, b in zip(jax.tree.leaves(jax.jit(step)(0.02)), jax.tree.leaves(step(0.02)), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6)
