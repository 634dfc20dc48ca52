"""Adan (`scale_by_adan` and the `adan` alias) against Optax 0.2.8, and its validation."""

from __future__ import annotations

import inspect

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
    describe,
    invalid_ids,
)

# (id, ours, Optax's, params or None for the mixed default)
MATCHES_OPTAX = [
    ("scale_by_adan", lambda: gradtx.scale_by_adan(), lambda: optax.scale_by_adan(), None),
    (
        "scale_by_adan_custom",
        lambda: gradtx.scale_by_adan(0.9, 0.8, 0.95, eps=1e-6, eps_root=1e-8),
        lambda: optax.scale_by_adan(0.9, 0.8, 0.95, eps=1e-6, eps_root=1e-8),
        None,
    ),
    ("adan", lambda: gradtx.adan(0.01), lambda: optax.adan(0.01), None),
    (
        "adan_schedule_decay_mask",
        lambda: gradtx.adan(LR, weight_decay=0.1, mask=kernel_mask(mixed_params())),
        lambda: optax.adan(LR, weight_decay=0.1, mask=kernel_mask(mixed_params())),
        None,
    ),
]
# One configuration runs eagerly (the alias's eager run also runs its primitive eagerly); the
# others under jit.
_EAGER = {"adan_schedule_decay_mask"}


@pytest.mark.across_versions
@pytest.mark.parametrize(
    ("name", "ours", "reference", "params", "jit"), with_modes(MATCHES_OPTAX, eager=_EAGER)
)
def test_matches_optax(name, ours, reference, params, jit):
    check_matches_optax(__name__, name, ours, reference, params, jit)


@pytest.mark.parametrize("name", ["adan"])
def test_signature_is_optaxs(name):
    assert_signature_is_optaxs(name)


def test_scale_by_adan_signature_is_optaxs_plus_keyword_only_moment_dtypes():
    ours = describe(gradtx.scale_by_adan)
    extra = [(n, inspect.Parameter.KEYWORD_ONLY, None) for n in ("mu_dtype", "nu_dtype")]
    assert ours == describe(optax.scale_by_adan) + extra


INVALID = [
    (lambda: gradtx.scale_by_adan(b1=1.0), "scale_by_adan: b1 must be in [0.0, 1.0), got 1.0"),
    (lambda: gradtx.adan(0.1, b3=-0.1), "adan: scale_by_adan: b3 must be in [0.0, 1.0), got -0.1"),
    (
        lambda: gradtx.adan(0.1, weight_decay=-1.0),
        "adan: weight_decay must be >= 0, got -1.0 (from weight_decay: rate must be >= 0",
    ),
    (
        lambda: gradtx.adan(-0.1),
        "adan: scale_by_learning_rate: learning_rate must be >= 0, got -0.1",
    ),
]


@pytest.mark.parametrize(("build", "message"), INVALID, ids=invalid_ids(INVALID))
def test_invalid_hyperparameters_raise_at_construction(build, message):
    assert_raises_with_message(build, message)
