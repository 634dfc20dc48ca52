"""`add_decayed_weights` (Optax's name for coupled weight decay) against Optax 0.2.8, with
schedules, masks and globs, and its validation."""

from __future__ import annotations

import numpy as np
import optax
import pytest

import gradtx

from ..helpers import kernel_mask, mixed_params
from ..optax_reference import with_modes
from .common import (
    LR,
    assert_raises_with_message,
    assert_signature_is_optaxs,
    check_matches_optax,
    first_update,
    invalid_ids,
)

# (id, ours, Optax's, params or None for the mixed default)
MATCHES_OPTAX = [
    (
        "add_decayed_weights_schedule_mask",
        lambda: gradtx.add_decayed_weights(LR, kernel_mask(mixed_params())),
        lambda: optax.add_decayed_weights(LR, kernel_mask(mixed_params())),
        None,
    ),
    (
        "add_decayed_weights",
        lambda: gradtx.add_decayed_weights(0.1),
        lambda: optax.add_decayed_weights(0.1),
        None,
    ),
]
# One configuration runs eagerly; the other under jit.
_EAGER = {"add_decayed_weights_schedule_mask"}

# A schedule evaluated eagerly (its cos) rounds differently from the same schedule jitted, and
# where an update nearly cancels (a gradient against its decay) Optax's own eager and jitted
# runs differ by up to 1.9x the tolerance. There, our eager run is compared with Optax's eager
# run (and our jitted run with Optax's jitted one).
_EAGER_REFERENCE = {"add_decayed_weights_schedule_mask"}


@pytest.mark.parametrize(
    ("name", "ours", "reference", "params", "jit"), with_modes(MATCHES_OPTAX, eager=_EAGER)
)
def test_matches_optax(name, ours, reference, params, jit):
    check_matches_optax(__name__, name, ours, reference, params, jit, name in _EAGER_REFERENCE)


@pytest.mark.parametrize("name", ["add_decayed_weights"])
def test_signature_is_optaxs(name):
    assert_signature_is_optaxs(name)


def test_add_decayed_weights_is_weight_decay_with_globs():
    tx = gradtx.add_decayed_weights(0.5, mask="**/kernel")
    params = mixed_params()
    assert isinstance(tx.init(params), gradtx.WeightDecayState)
    updates = first_update(tx, params)
    expected_kernel = 1.0 + 0.5 * np.asarray(params["dense"]["kernel"])
    np.testing.assert_allclose(np.asarray(updates["dense"]["kernel"]), expected_kernel, rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(updates["dense"]["bias"]), np.ones(4))


INVALID = [
    (
        lambda: gradtx.add_decayed_weights(-0.1),
        "add_decayed_weights: weight_decay must be >= 0, got -0.1 (from weight_decay: rate",
    ),
]


@pytest.mark.parametrize(("build", "message"), INVALID, ids=invalid_ids(INVALID))
def test_invalid_hyperparameters_raise_at_construction(build, message):
    assert_raises_with_message(build, message)
