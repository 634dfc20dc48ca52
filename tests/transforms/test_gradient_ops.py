"""Annealed gradient noise (`add_noise`) and gradient centralization (`centralize`); the
`noisy_sgd` alias (SGD with `add_noise`) against Optax 0.2.8."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gradtx

from ..helpers import assert_trees_close, grad_sequence, mixed_params, run
from ..optax_reference import compare_to_optax, with_modes
from .common import (
    LR,
    assert_raises_with_message,
    assert_signature_is_optaxs,
    check_matches_optax,
    first_update,
    invalid_ids,
)

MATCHES_OPTAX = [
    # The same random stream as Optax's from the same seed (the other key forms are checked
    # against the integer seed below).
    ("noise", lambda: gradtx.add_noise(0.3, 0.55, 3), lambda: optax.add_noise(0.3, 0.55, 3)),
    ("centralize", lambda: gradtx.centralize(), lambda: optax.centralize()),
]


@pytest.mark.parametrize(
    ("key", "ours", "reference", "jit"), with_modes(MATCHES_OPTAX, eager={"noise", "centralize"})
)
def test_matches_optax(key, ours, reference, jit):
    compare_to_optax(
        ours(), reference(), jit=jit, reference_key=f"{__name__}:{key}", reference_jit=False
    )


def _first_updates(tx, steps=3):
    params = {"a": jnp.zeros((4, 3)), "b": jnp.zeros(5)}
    grads = grad_sequence(params, steps)
    updates, _, _ = run(tx, params, grads, jit=False)
    return np.concatenate([np.ravel(x) for u in updates for x in jax.tree.leaves(u)])


def test_noise_is_reproducible_from_the_seed_in_any_form():
    by_int = _first_updates(gradtx.add_noise(0.1, 0.55, 5))
    for same in (
        gradtx.add_noise(0.1, 0.55, 5),
        gradtx.add_noise(0.1, 0.55, key=5),
        gradtx.add_noise(0.1, 0.55, jax.random.key(5)),
        gradtx.add_noise(0.1, 0.55, jax.random.PRNGKey(5)),
    ):
        np.testing.assert_array_equal(_first_updates(same), by_int)
    assert not np.allclose(_first_updates(gradtx.add_noise(0.1, 0.55, 6)), by_int)


def test_noise_standard_deviation_is_annealed():
    eta, gamma = 0.5, 0.55
    tx = gradtx.add_noise(eta, gamma, 0)
    zeros = {"w": jnp.zeros(20_000)}
    state = tx.init(zeros)
    step = jax.jit(tx.update)
    for t in range(1, 101):
        noise, state = step(zeros, state)
        if t in (1, 100):
            expected = np.sqrt(eta / t**gamma)
            assert abs(float(jnp.std(noise["w"])) / expected - 1.0) < 0.03, t
            assert abs(float(jnp.mean(noise["w"]))) < 0.03 * expected


def test_noise_state_is_plain_arrays_and_survives_scan():
    tx = gradtx.add_noise(0.1, 0.55, 1)
    params = {"dense": {"kernel": jnp.zeros((3, 2)), "bias": jnp.zeros(2)}}
    state = tx.init(params)
    assert isinstance(state, gradtx.AddNoiseState)
    assert state.rng_key.dtype == jnp.uint32  # raw key data: serialisable like any array
    grads = jax.tree.map(lambda *xs: jnp.stack(xs), *grad_sequence(params, 4))
    final, noisy = jax.lax.scan(lambda s, g: tx.update(g, s)[::-1], state, grads)
    assert jax.tree.structure(final) == jax.tree.structure(state)
    assert int(final.count) == 4
    # Each step draws fresh noise: the four steps' noise differs.
    diffs = jax.tree.map(lambda n, g: n - g, noisy, grads)
    first = np.asarray(diffs["dense"]["kernel"])
    assert not np.allclose(first[0], first[1])


def test_noise_keeps_low_precision_dtypes():
    params = {"w": jnp.zeros((2, 3), jnp.bfloat16), "b": jnp.zeros(3, jnp.float16)}
    tx = gradtx.add_noise(0.01, 0.55, 0)
    updates, _, _ = run(tx, params, grad_sequence(params, 2), jit=False)
    for u in updates:
        assert (u["w"].dtype, u["b"].dtype) == (jnp.bfloat16, jnp.float16)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: gradtx.add_noise(-0.1, 0.55), "add_noise: eta must be >= 0, got -0.1"),
        (lambda: gradtx.add_noise(0.1, -1), "add_noise: gamma must be >= 0, got -1"),
        (lambda: gradtx.add_noise(0.1, 0.5, 1, key=2), "add_noise: give either seed or key"),
        (lambda: gradtx.add_noise(0.1, 0.5, 1.5), "add_noise: seed must be an integer seed or"),
        (lambda: gradtx.add_noise(0.1, 0.5, True), "add_noise: seed must be an integer seed or"),
        (lambda: gradtx.add_noise(0.1, truncation=0.0), "add_noise: truncation must be > 0, got"),
    ],
)
def test_invalid_arguments_raise(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_truncated_noise_stays_within_c_standard_deviations():
    """RETURNN's `gradient_noise`: a normal of standard deviation sigma redrawn beyond 2 sigma."""
    sigma, c = 0.3, 2.0
    tx = gradtx.add_noise(sigma**2, 0.0, 7, truncation=c)
    zeros = {"w": jnp.zeros(50_000)}
    noise = np.asarray(tx.update(zeros, tx.init(zeros))[0]["w"], np.float64)
    assert np.abs(noise).max() <= c * sigma * (1 + 1e-6)
    assert np.abs(noise).max() > 0.99 * c * sigma  # the bound is reached, not a narrower one
    # The standard deviation of a standard normal truncated to [-c, c].
    phi = np.exp(-(c**2) / 2) / np.sqrt(2 * np.pi)
    inside = math.erf(c / np.sqrt(2))
    expected = sigma * np.sqrt(1 - 2 * c * phi / inside)  # 0.880 sigma
    assert abs(noise.std() / expected - 1) < 0.02
    assert abs(noise.mean()) < 0.02 * sigma
    # The same seed without truncation draws a plain normal: wider, and a different stream.
    plain = gradtx.add_noise(sigma**2, 0.0, 7)
    untruncated = np.asarray(plain.update(zeros, plain.init(zeros))[0]["w"])
    assert np.abs(untruncated).max() > 3.5 * sigma


def test_gamma_defaults_to_the_papers_value_in_code_and_config():
    from gradtx.config import from_config

    np.testing.assert_array_equal(
        _first_updates(gradtx.add_noise(0.1, seed=2)),
        _first_updates(gradtx.add_noise(0.1, 0.55, 2)),
    )
    configured = from_config(
        {"optimizer": {"name": "sgd", "learning_rate": 1.0}, "noise": {"eta": 0.1}}
    )
    by_hand = gradtx.chain(gradtx.add_noise(0.1, 0.55, 0), gradtx.sgd(1.0))
    np.testing.assert_array_equal(_first_updates(configured), _first_updates(by_hand))


def test_traced_eta_and_seed_are_accepted():
    params = {"w": jnp.zeros((2, 3)), "b": jnp.zeros(3)}
    g = grad_sequence(params, 1)[0]

    def step(eta, seed):
        tx = gradtx.add_noise(eta, 0.55, seed)
        return tx.update(g, tx.init(params))[0]

    traced = jax.jit(step)(0.2, 4)
    for a, b in zip(jax.tree.leaves(traced), jax.tree.leaves(step(0.2, 4)), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)


def test_centralize_subtracts_the_mean_over_all_but_the_first_axis():
    g = {
        "matrix": jnp.array([[1.0, 2.0, 6.0], [4.0, 4.0, 4.0]], jnp.bfloat16),
        "vector": jnp.array([1.0, 2.0]),
        "scalar": jnp.array(3.0),
    }
    tx = gradtx.centralize()
    out, _ = tx.update(g, tx.init(g))
    assert out["matrix"].dtype == jnp.bfloat16
    np.testing.assert_array_equal(np.asarray(out["matrix"], np.float32), [[-2, -1, 3], [0, 0, 0]])
    np.testing.assert_array_equal(out["vector"], g["vector"])
    np.testing.assert_array_equal(out["scalar"], g["scalar"])


# -- noisy_sgd --------------------------------------------------------------------------------

# (id, ours, Optax's, params or None for the mixed default)
NOISY_SGD_MATCHES_OPTAX = [
    (
        "noisy_sgd_schedule",
        lambda: gradtx.noisy_sgd(LR, eta=0.1, key=3),
        lambda: optax.noisy_sgd(LR, eta=0.1, key=3),
        None,
    ),
]
_NOISY_SGD_EAGER = {"noisy_sgd_schedule"}


@pytest.mark.across_versions
@pytest.mark.parametrize(
    ("name", "ours", "reference", "params", "jit"),
    with_modes(NOISY_SGD_MATCHES_OPTAX, eager=_NOISY_SGD_EAGER),
)
def test_noisy_sgd_matches_optax(name, ours, reference, params, jit):
    check_matches_optax(__name__, name, ours, reference, params, jit)


@pytest.mark.parametrize("name", ["noisy_sgd"])
def test_signature_is_optaxs(name):
    assert_signature_is_optaxs(name)


def test_noisy_sgd_is_reproducible_from_its_key_or_seed():
    params = mixed_params()
    a = first_update(gradtx.noisy_sgd(0.1, key=5), params)
    assert_trees_close(a, first_update(gradtx.noisy_sgd(0.1, key=5), params), 0.0, 0.0)
    assert_trees_close(a, first_update(gradtx.noisy_sgd(0.1, seed=5), params), 0.0, 0.0)
    typed = first_update(gradtx.noisy_sgd(0.1, key=jax.random.key(5)), params)
    assert_trees_close(a, typed, 0.0, 0.0)
    other = first_update(gradtx.noisy_sgd(0.1, key=6), params)
    assert not np.allclose(np.asarray(a["dense"]["kernel"]), np.asarray(other["dense"]["kernel"]))


INVALID = [
    (lambda: gradtx.noisy_sgd(0.1, eta=-1.0), "noisy_sgd: add_noise: eta must be >= 0, got -1.0"),
    (lambda: gradtx.noisy_sgd(0.1, key=1, seed=2), "noisy_sgd: add_noise: give either seed or key"),
]


@pytest.mark.parametrize(("build", "message"), INVALID, ids=invalid_ids(INVALID))
def test_invalid_hyperparameters_raise_at_construction(build, message):
    assert_raises_with_message(build, message)
