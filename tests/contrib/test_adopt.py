"""ADOPT (Adam with the current gradient kept out of its own second moment) against Optax
0.2.8's `optax.contrib.adopt` over 100 steps, eager and jit; dtypes, signature, validation."""

from __future__ import annotations

import jax.numpy as jnp
import optax.contrib as oc
import pytest

from gradtx import contrib as gc

from ..optax_reference import with_modes
from .common import (
    LR,
    assert_construction_raises,
    assert_mu_dtype_is_kept,
    assert_signature_matches_optax,
    check_plain_against_optax,
)

PLAIN = [
    ("adopt", lambda: gc.adopt(LR), lambda: oc.adopt(LR)),
    (
        "adopt_nesterov_noclip",
        lambda: gc.adopt(0.1, 0.8, 0.99, 1e-4, nesterov=True, use_clipping=False),
        lambda: oc.adopt(0.1, 0.8, 0.99, 1e-4, nesterov=True, use_clipping=False),
    ),
    (
        "scale_by_adopt_clip_fn",
        lambda: gc.scale_by_adopt(0.8, clip_value_fn=lambda c: 0.5 * c**0.5),
        lambda: oc.scale_by_adopt(0.8, clip_value_fn=lambda c: 0.5 * c**0.5),
    ),
]


@pytest.mark.across_versions
@pytest.mark.parametrize(
    ("name", "ours", "reference", "jit"),
    with_modes(PLAIN, eager={"adopt"}),
)
def test_plain_against_optax(name, ours, reference, jit):
    check_plain_against_optax(__name__, name, ours, reference, jit)


@pytest.mark.parametrize("make", [lambda: gc.adopt(0.1, mu_dtype=jnp.bfloat16)], ids=["adopt"])
def test_mu_dtype_is_kept(make):
    assert_mu_dtype_is_kept(make)


SIGNATURES = [
    (gc.adopt, oc.adopt),
    (gc.scale_by_adopt, oc.scale_by_adopt),
]


@pytest.mark.parametrize(("ours", "theirs"), SIGNATURES, ids=[s[0].__name__ for s in SIGNATURES])
def test_signature_matches_optax(ours, theirs):
    assert_signature_matches_optax(ours, theirs)


INVALID = [
    (gc.adopt, {"learning_rate": 0.1, "b1": 1.0}, "adopt: scale_by_adopt: b1 must be in"),
    (gc.adopt, {"learning_rate": -0.1}, "adopt: scale_by_learning_rate: learning_rate"),
]  # fmt: skip


@pytest.mark.parametrize(("factory", "kwargs", "message"), INVALID)
def test_invalid_hyperparameters_raise_at_construction(factory, kwargs, message):
    assert_construction_raises(factory, kwargs, message)
