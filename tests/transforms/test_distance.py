"""Distance over gradients (`scale_by_distance_over_gradients`, DoG's primitive in Optax's
transform-level form) against Optax 0.2.8, its rank-0 updates, and validation."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gradtx

from ..helpers import mixed_params
from ..optax_reference import with_modes
from .common import (
    assert_raises_with_message,
    assert_signature_is_optaxs,
    check_matches_optax,
    first_update,
    invalid_ids,
    without_scalars,
)

# (id, ours, Optax's, params or None for the mixed default)
MATCHES_OPTAX = [
    (
        "scale_by_distance_over_gradients",
        lambda: gradtx.scale_by_distance_over_gradients(global_scale=-1.0),
        lambda: optax.scale_by_distance_over_gradients(global_scale=-1.0),
        without_scalars(mixed_params()),
    ),
    (
        "scale_by_distance_over_gradients_custom",
        lambda: gradtx.scale_by_distance_over_gradients(1e-4, eps=1e-6, global_scale=-0.5),
        lambda: optax.scale_by_distance_over_gradients(1e-4, eps=1e-6, global_scale=-0.5),
        without_scalars(mixed_params()),
    ),
]
# The base configuration runs eagerly; the other under jit.
_EAGER = {"scale_by_distance_over_gradients"}


@pytest.mark.parametrize(
    ("name", "ours", "reference", "params", "jit"), with_modes(MATCHES_OPTAX, eager=_EAGER)
)
def test_matches_optax(name, ours, reference, params, jit):
    check_matches_optax(__name__, name, ours, reference, params, jit)


@pytest.mark.parametrize("name", ["scale_by_distance_over_gradients"])
def test_signature_is_optaxs(name):
    assert_signature_is_optaxs(name)


def test_distance_over_gradients_needs_params_and_keeps_rank_0_updates():
    tx = gradtx.scale_by_distance_over_gradients(global_scale=-1.0)
    params = {"s": jnp.asarray(2.0), "v": jnp.ones(3)}
    with pytest.raises(ValueError, match="scale_by_distance_over_gradients needs the current"):
        tx.update(params, tx.init(params))
    updates = first_update(tx, params)
    assert updates["s"].shape == ()
    # r_0 = 1e-6 (1 + |w_0|), G_1 = |g|^2: u = -r_0 / sqrt(1 + 1e-8) * g
    np.testing.assert_allclose(float(updates["s"]), -3e-6 / np.sqrt(1 + 1e-8), rtol=1e-6)


INVALID = [
    (
        lambda: gradtx.scale_by_distance_over_gradients(reps_rel=0.0),
        "scale_by_distance_over_gradients: reps_rel must be > 0, got 0.0",
    ),
    (
        lambda: gradtx.scale_by_distance_over_gradients(param_dtype=jnp.int32),
        "scale_by_distance_over_gradients: param_dtype must be a floating-point dtype",
    ),
]


@pytest.mark.parametrize(("build", "message"), INVALID, ids=invalid_ids(INVALID))
def test_invalid_hyperparameters_raise_at_construction(build, message):
    assert_raises_with_message(build, message)
