"""Adafactor's factored second moment (`scale_by_factored_rms`) against Optax."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gradtx

from ..helpers import grad_sequence, mixed_params, run, state_dtypes
from ..optax_reference import compare_to_optax, with_modes


def _capped(step, rate):
    return jnp.minimum(0.95, 1.0 - (jnp.asarray(step, jnp.float32) + 1.0) ** (-rate))


# mixed_params has leaves of shape (3, 4), (2, 3), (1, 3), (2, 2, 2), vectors and a scalar.
MATCHES_OPTAX = [
    (
        "factored",
        lambda: gradtx.scale_by_factored_rms(min_dim_size_to_factor=2),
        lambda: optax.scale_by_factored_rms(min_dim_size_to_factor=2),
    ),
    (
        # min size 1 also factors the (1, 3) leaf; the offset shifts a custom (capped) schedule.
        "factored_offset_capped",
        lambda: gradtx.scale_by_factored_rms(True, 0.5, 3, 1, 1e-20, decay_rate_fn=_capped),
        lambda: optax.scale_by_factored_rms(True, 0.5, 3, 1, 1e-20, decay_rate_fn=_capped),
    ),
    (
        # Also the path of every leaf under the default min_dim_size_to_factor (128).
        "not_factored",
        lambda: gradtx.scale_by_factored_rms(False, min_dim_size_to_factor=1),
        lambda: optax.scale_by_factored_rms(False, min_dim_size_to_factor=1),
    ),
]


@pytest.mark.parametrize(
    ("key", "ours", "reference", "jit"),
    with_modes(MATCHES_OPTAX, eager={"factored"}, jit={"factored_offset_capped", "not_factored"}),
)
def test_matches_optax(key, ours, reference, jit):
    compare_to_optax(
        ours(), reference(), jit=jit, reference_key=f"{__name__}:{key}", reference_jit=False
    )


def test_axis_choice_matches_optax_when_the_largest_axis_comes_first():
    # (4, 2, 3): rows are axis 2, columns axis 0 (d1 > d0); (5, 3): the larger axis first.
    rng = np.random.default_rng(0)
    params = {
        "a": jnp.asarray(rng.normal(size=(4, 2, 3)), jnp.float32),
        "b": jnp.asarray(rng.normal(size=(5, 3)), jnp.float32),
    }
    compare_to_optax(
        gradtx.scale_by_factored_rms(min_dim_size_to_factor=2),
        optax.scale_by_factored_rms(min_dim_size_to_factor=2),
        jit=True,
        params=params,
        steps=100,
    )


def test_state_keeps_row_and_column_statistics_only_for_factored_leaves():
    params = {"m": jnp.zeros((3, 4)), "v": jnp.zeros(5), "small": jnp.zeros((1, 6))}
    state = gradtx.scale_by_factored_rms(min_dim_size_to_factor=2).init(params)
    assert state.v_row["m"].shape == (3,)  # mean over the largest axis (columns, 4)
    assert state.v_col["m"].shape == (4,)
    assert state.v["m"].shape == (1,)
    for name in ("v", "small"):
        assert state.v[name].shape == params[name].shape
        assert state.v_row[name].shape == state.v_col[name].shape == (1,)


def test_update_does_not_need_params():
    tx = gradtx.scale_by_factored_rms(min_dim_size_to_factor=2)
    params = mixed_params()
    g = grad_sequence(params, 1)[0]
    without, _ = tx.update(g, tx.init(params))
    with_params, _ = tx.update(g, tx.init(params), params)
    for a, b in zip(jax.tree.leaves(without), jax.tree.leaves(with_params), strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16], ids=str)
def test_low_precision_stays_finite_with_the_tiny_default_epsilon(dtype):
    # eps = 1e-30 underflows in float16; the statistics are computed in float32.
    tx = gradtx.scale_by_factored_rms(min_dim_size_to_factor=2)
    params = mixed_params(dtype=dtype)
    grads = grad_sequence(params, 4, scale=1e-3)
    grads[1] = jax.tree.map(jnp.zeros_like, grads[1])  # an all-zero gradient
    init = tx.init(params)
    updates, state, _ = run(tx, params, grads, jit=False)
    assert state_dtypes(state) == state_dtypes(init)
    for u in updates:
        for leaf in jax.tree.leaves(u):
            assert leaf.dtype == dtype
            assert bool(jnp.all(jnp.isfinite(leaf.astype(jnp.float32))))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"decay_rate": -0.8}, "scale_by_factored_rms: decay_rate must be >= 0, got -0.8"),
        ({"step_offset": -1}, "scale_by_factored_rms: step_offset must be >= 0, got -1"),
        (
            {"min_dim_size_to_factor": 2.5},
            "scale_by_factored_rms: min_dim_size_to_factor must be an integer, got 2.5",
        ),
        (
            {"min_dim_size_to_factor": -1},
            "scale_by_factored_rms: min_dim_size_to_factor must be >= 0, got -1",
        ),
        ({"epsilon": -1e-30}, "scale_by_factored_rms: epsilon must be >= 0, got -1e-30"),
        ({"decay_rate_fn": 0.8}, "scale_by_factored_rms: decay_rate_fn must be a callable"),
    ],
)
def test_invalid_hyperparameters_raise(kwargs, message):
    with pytest.raises(ValueError, match=message):
        gradtx.scale_by_factored_rms(**kwargs)


def test_traced_decay_rate_is_accepted():
    params = mixed_params()
    grads = grad_sequence(params, 2)

    def two_steps(rate):
        tx = gradtx.scale_by_factored_rms(decay_rate=rate, min_dim_size_to_factor=2)
        state = tx.init(params)
        _, state = tx.update(grads[0], state)
        return tx.update(grads[1], state)[0]

    traced = jax.jit(two_steps)(0.6)
    for a, b in zip(jax.tree.leaves(traced), jax.tree.leaves(two_steps(0.6)), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6)
