"""Fromage: its step (`scale_by_learning_rate_and_shrink`) against a NumPy transcription of its
rule, and the `fromage` alias against Optax 0.2.8, with its validation."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gradtx

from ..helpers import compare_to_numpy
from ..optax_reference import with_modes
from .common import (
    LR,
    assert_raises_with_message,
    assert_signature_is_optaxs,
    check_matches_optax,
    invalid_ids,
)


def _reference(lr_at):
    """u_t = -(lr m g + (1 - m) w), m = 1 / sqrt(1 + lr^2), Bernstein et al. (2020), Alg. 1."""
    count = [0]

    def ref(grads, params):
        lr = lr_at(count[0])
        count[0] += 1
        m = 1.0 / np.sqrt(1.0 + lr**2)
        return [-(lr * m * g + (1.0 - m) * w) for g, w in zip(grads, params, strict=True)]

    return lambda: ref


@pytest.mark.parametrize(
    ("learning_rate", "lr_at"),
    [
        (0.01, lambda t: 0.01),
        (0.5, lambda t: 0.5),
        (lambda t: 0.1 / (1.0 + t), lambda t: 0.1 / (1.0 + t)),
        (np.float32(0.2), lambda t: float(np.float32(0.2))),
    ],
    ids=["small", "large", "schedule", "numpy_scalar"],
)
def test_matches_the_published_rule(learning_rate, lr_at):
    compare_to_numpy(
        gradtx.scale_by_learning_rate_and_shrink(learning_rate), _reference(lr_at), steps=60
    )


def test_a_zero_learning_rate_leaves_the_parameters_alone():
    params = {"w": jnp.array([3.0, 4.0])}
    tx = gradtx.scale_by_learning_rate_and_shrink(lambda t: 0.0 * t)
    u, _ = tx.update({"w": jnp.array([1.0, 2.0])}, tx.init(params), params)
    assert np.all(np.asarray(u["w"]) == 0.0)  # no 0 / 0 in the coupled decay


def test_an_orthogonal_step_as_long_as_the_params_keeps_their_norm():
    params = {"w": jnp.array([3.0, 4.0])}
    g = {"w": jnp.array([-4.0, 3.0])}  # orthogonal to w, same norm (after a trust ratio)
    tx = gradtx.scale_by_learning_rate_and_shrink(0.3)
    u, _ = tx.update(g, tx.init(params), params)
    new = gradtx.apply_updates(params, u)
    np.testing.assert_allclose(np.linalg.norm(new["w"]), 5.0, rtol=1e-6)
    np.testing.assert_allclose(
        np.asarray(new["w"]),
        (np.array([3.0, 4.0]) - 0.3 * np.array([-4.0, 3.0])) / np.sqrt(1.09),
        rtol=1e-6,
    )


def test_flip_sign_false_negates_the_update():
    params = {"w": jnp.array([1.0, -2.0])}
    g = {"w": jnp.array([0.5, 0.25])}
    down = gradtx.scale_by_learning_rate_and_shrink(0.1)
    up = gradtx.scale_by_learning_rate_and_shrink(0.1, flip_sign=False)
    a, _ = down.update(g, down.init(params), params)
    b, _ = up.update(g, up.init(params), params)
    np.testing.assert_array_equal(np.asarray(a["w"]), -np.asarray(b["w"]))


def test_keeps_the_update_dtype_and_a_count_state_under_jit():
    params = {"w": jnp.ones(3, jnp.bfloat16)}
    tx = gradtx.scale_by_learning_rate_and_shrink(lambda t: 0.1 + 0.0 * t)
    state = tx.init(params)
    u, state = jax.jit(tx.update)({"w": jnp.ones(3, jnp.bfloat16)}, state, params)
    assert u["w"].dtype == jnp.bfloat16
    assert int(state.count) == 1


def test_needs_params_and_validates_eagerly():
    tx = gradtx.scale_by_learning_rate_and_shrink(0.1)
    with pytest.raises(ValueError, match=r"^scale_by_learning_rate_and_shrink"):
        tx.update({"w": jnp.ones(2)}, tx.init({"w": jnp.ones(2)}))
    with pytest.raises(
        ValueError, match=r"scale_by_learning_rate_and_shrink: learning_rate must be >= 0"
    ):
        gradtx.scale_by_learning_rate_and_shrink(-0.1)
    with pytest.raises(ValueError, match=r"scale_by_learning_rate_and_shrink: flip_sign"):
        gradtx.scale_by_learning_rate_and_shrink(0.1, flip_sign=1)  # type: ignore[arg-type]


# -- the fromage alias against Optax ------------------------------------------------------------

# (id, ours, Optax's, params or None for the mixed default)
MATCHES_OPTAX = [
    ("fromage", lambda: gradtx.fromage(0.01), lambda: optax.fromage(0.01), None),
    ("fromage_schedule", lambda: gradtx.fromage(LR), lambda: optax.fromage(LR), None),
]
# One configuration runs eagerly; the other under jit.
_EAGER = {"fromage_schedule"}

# A schedule evaluated eagerly (its cos) rounds differently from the same schedule jitted, and
# where an update nearly cancels (Fromage's step against its shrinkage) Optax's own eager and
# jitted runs differ by up to 1.9x the tolerance. There, our eager run is compared with Optax's
# eager run (and our jitted run with Optax's jitted one).
_EAGER_REFERENCE = {"fromage_schedule"}


@pytest.mark.across_versions
@pytest.mark.parametrize(
    ("name", "ours", "reference", "params", "jit"), with_modes(MATCHES_OPTAX, eager=_EAGER)
)
def test_matches_optax(name, ours, reference, params, jit):
    check_matches_optax(__name__, name, ours, reference, params, jit, name in _EAGER_REFERENCE)


@pytest.mark.parametrize("name", ["fromage"])
def test_signature_is_optaxs(name):
    assert_signature_is_optaxs(name)


INVALID = [
    (lambda: gradtx.fromage(-0.1), "fromage: learning_rate must be >= 0, got -0.1"),
    (
        lambda: gradtx.fromage(0.1, min_norm=-1.0),
        "fromage: scale_by_trust_ratio: min_norm must be >= 0, got -1.0",
    ),
]


@pytest.mark.parametrize(("build", "message"), INVALID, ids=invalid_ids(INVALID))
def test_invalid_hyperparameters_raise_at_construction(build, message):
    assert_raises_with_message(build, message)
