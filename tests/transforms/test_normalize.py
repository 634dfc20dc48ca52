"""Update-norm normalisation (`normalize_by_update_norm`) against Optax 0.2.8, and validation."""

from __future__ import annotations

import optax
import pytest

import gradtx

from ..optax_reference import with_modes
from .common import (
    assert_raises_with_message,
    assert_signature_is_optaxs,
    check_matches_optax,
    invalid_ids,
)

# (id, ours, Optax's, params or None for the mixed default)
MATCHES_OPTAX = [
    (
        "normalize_by_update_norm",
        lambda: gradtx.normalize_by_update_norm(-0.1),
        lambda: optax.normalize_by_update_norm(-0.1),
        None,
    ),
    (
        "normalize_by_update_norm_eps",
        lambda: gradtx.normalize_by_update_norm(2.0, eps=0.5),
        lambda: optax.normalize_by_update_norm(2.0, eps=0.5),
        None,
    ),
]
# The base configuration runs eagerly; the other under jit.
_EAGER = {"normalize_by_update_norm"}


@pytest.mark.parametrize(
    ("name", "ours", "reference", "params", "jit"), with_modes(MATCHES_OPTAX, eager=_EAGER)
)
def test_matches_optax(name, ours, reference, params, jit):
    check_matches_optax(__name__, name, ours, reference, params, jit)


@pytest.mark.parametrize("name", ["normalize_by_update_norm"])
def test_signature_is_optaxs(name):
    assert_signature_is_optaxs(name)


INVALID = [
    (
        lambda: gradtx.normalize_by_update_norm(eps=-1.0),
        "normalize_by_update_norm: eps must be >= 0, got -1.0",
    ),
]


@pytest.mark.parametrize(("build", "message"), INVALID, ids=invalid_ids(INVALID))
def test_invalid_hyperparameters_raise_at_construction(build, message):
    assert_raises_with_message(build, message)
