"""lamb and lars: against Optax, against their chains, validation."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gradtx

from ..helpers import grad_sequence, mixed_params
from ..optax_reference import compare_to_optax, with_modes


def _lr(count):
    """A cosine decay from 0.02 over 100 steps (jit-compatible)."""
    return 0.01 * (1.0 + jnp.cos(jnp.pi * jnp.minimum(count, 100) / 100.0))


def _decay(count):
    return 0.05 / (1.0 + 0.05 * count)


def _no_bias(params):
    return jax.tree.map(lambda _: True, params) | {"dense": {"kernel": True, "bias": False}}


LARS_OPTIONS = {
    "weight_decay": _decay,
    "weight_decay_mask": _no_bias,
    "trust_coefficient": 0.01,
    "eps": 1e-6,
    "trust_ratio_mask": _no_bias,
    "momentum": 0.8,
    "nesterov": True,
}
MATCHES_OPTAX = [
    ("lamb", lambda: gradtx.lamb(0.01), lambda: optax.lamb(0.01)),
    (
        "lamb_schedules_mask",
        lambda: gradtx.lamb(_lr, 0.8, 0.99, 1e-5, 1e-8, weight_decay=_decay, mask=_no_bias),
        lambda: optax.lamb(_lr, 0.8, 0.99, 1e-5, 1e-8, weight_decay=_decay, mask=_no_bias),
    ),
    ("lars", lambda: gradtx.lars(0.5), lambda: optax.lars(0.5)),
    (
        "lars_schedules_masks",
        lambda: gradtx.lars(_lr, **LARS_OPTIONS),
        lambda: optax.lars(_lr, **LARS_OPTIONS),
    ),
]


@pytest.mark.across_versions
@pytest.mark.parametrize(
    ("key", "ours", "reference", "jit"),
    with_modes(
        MATCHES_OPTAX, eager={"lamb", "lars"}, jit={"lamb_schedules_mask", "lars_schedules_masks"}
    ),
)
def test_matches_optax(key, ours, reference, jit):
    compare_to_optax(
        ours(), reference(), jit=jit, reference_key=f"{__name__}:{key}", reference_jit=False
    )


def test_lars_trust_ratio_mask_exempts_leaves():
    # A masked-out leaf takes a plain momentum-SGD step (no trust ratio).
    params = {"w": jnp.full(2, 4.0), "b": jnp.full(2, 4.0)}
    grads = {"w": jnp.ones(2), "b": jnp.ones(2)}
    tx = gradtx.lars(0.1, trust_ratio_mask={"w": True, "b": False})
    updates, _ = tx.update(grads, tx.init(params), params)
    np.testing.assert_allclose(updates["b"], np.full(2, -0.1), rtol=1e-6)
    np.testing.assert_allclose(updates["w"], np.full(2, -0.1 * 1e-3 * 4.0), rtol=1e-5)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: gradtx.lamb(-1e-3), "lamb: learning_rate must be >= 0, got -0.001"),
        (lambda: gradtx.lamb(1e-3, b1=1.0), r"lamb: b1 must be in \[0.0, 1.0\), got 1.0"),
        (lambda: gradtx.lamb(1e-3, b2=-0.5), r"lamb: b2 must be in \[0.0, 1.0\), got -0.5"),
        (lambda: gradtx.lamb(1e-3, eps=-1e-6), "lamb: eps must be >= 0, got -1e-06"),
        (lambda: gradtx.lamb(1e-3, eps_root=-1.0), "lamb: eps_root must be >= 0, got -1.0"),
        (
            lambda: gradtx.lamb(1e-3, weight_decay=-0.1),
            "lamb: weight_decay must be >= 0, got -0.1",
        ),
        (lambda: gradtx.lars(-1.0), "lars: learning_rate must be >= 0, got -1.0"),
        (lambda: gradtx.lars(1.0, weight_decay=-1e-4), "lars: weight_decay must be >= 0"),
        (
            lambda: gradtx.lars(1.0, trust_coefficient=0.0),
            "lars: trust_coefficient must be > 0, got 0.0",
        ),
        (lambda: gradtx.lars(1.0, eps=-1.0), "lars: eps must be >= 0, got -1.0"),
        (
            lambda: gradtx.lars(1.0, momentum=1.1),
            r"lars: momentum must be in \[0.0, 1.0\], got 1.1",
        ),
    ],
)
def test_invalid_hyperparameters_raise_naming_argument_and_value(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_traced_hyperparameters_are_accepted_under_jit():
    params = mixed_params()
    grads = grad_sequence(params, 2)

    def two_steps(lr, b1, decay, coefficient):
        out = []
        for tx in (
            gradtx.lamb(lr, b1, weight_decay=decay),
            gradtx.lars(lr, decay, trust_coefficient=coefficient, momentum=b1),
        ):
            state = tx.init(params)
            _, state = tx.update(grads[0], state, params)
            out.append(tx.update(grads[1], state, params)[0])
        return out

    traced = jax.jit(two_steps)(0.01, 0.8, 1e-3, 0.02)
    eager = two_steps(0.01, 0.8, 1e-3, 0.02)
    for a, b in zip(jax.tree.leaves(traced), jax.tree.leaves(eager), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-8)
