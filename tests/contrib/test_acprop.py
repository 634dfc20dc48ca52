"""ACProp (asynchronous centering of the second moment) against Optax 0.2.8's
`optax.contrib.acprop` over 100 steps, eager and jit; the float32 second moment of float16
params, signatures, validation."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax.contrib as oc
import pytest

import gradtx
from gradtx import contrib as gc

from ..optax_reference import with_modes
from .common import (
    LR,
    MASK,
    SMALL_LR,
    assert_construction_raises,
    assert_signature_matches_optax,
    check_plain_against_optax,
)

PLAIN = [
    ("acprop", lambda: gc.acprop(LR), lambda: oc.acprop(LR)),
    (
        "scale_by_acprop",
        lambda: gc.scale_by_acprop(0.8, 0.99, 1e-3, 1e-6),
        lambda: oc.scale_by_acprop(0.8, 0.99, 1e-3, 1e-6),
    ),
    (
        "acprop_wd",
        lambda: gc.acprop(SMALL_LR, 0.8, 0.99, 1e-3, 1e-6, 0.1, MASK),
        lambda: oc.acprop(SMALL_LR, 0.8, 0.99, 1e-3, 1e-6, 0.1, MASK),
    ),
]


@pytest.mark.across_versions
@pytest.mark.parametrize(
    ("name", "ours", "reference", "jit"),
    with_modes(PLAIN, eager={"acprop"}),
)
def test_plain_against_optax(name, ours, reference, jit):
    check_plain_against_optax(__name__, name, ours, reference, jit)


SIGNATURES = [
    (gc.acprop, oc.acprop),
    (gc.scale_by_acprop, oc.scale_by_acprop),
]


@pytest.mark.parametrize(("ours", "theirs"), SIGNATURES, ids=[s[0].__name__ for s in SIGNATURES])
def test_signature_matches_optax(ours, theirs):
    assert_signature_matches_optax(ours, theirs)


INVALID = [
    (gc.acprop, {"learning_rate": 0.1, "b2": -0.1}, "acprop: scale_by_acprop: b2"),
]  # fmt: skip


@pytest.mark.parametrize(("factory", "kwargs", "message"), INVALID)
def test_invalid_hyperparameters_raise_at_construction(factory, kwargs, message):
    assert_construction_raises(factory, kwargs, message)


def test_acprop_keeps_a_float32_second_moment_for_float16_params():
    # A float16 second moment underflows to 0 for small gradients; ACProp divides the next
    # gradient by it (plus eps=1e-16), which overflowed float16 to inf before.
    params = {"w": jnp.zeros(4, jnp.float16)}
    tiny = {"w": jnp.asarray([1e-4, -1e-4, 2e-4, 3e-4], jnp.float16)}
    tx = gc.acprop(0.1)
    state = tx.init(params)
    assert gradtx.tree.get(state, "nu")["w"].dtype == jnp.float32
    for g in (tiny, tiny, jax.tree.map(lambda x: 2 * x, tiny)):
        updates, state = tx.update(g, state, params)
        assert updates["w"].dtype == jnp.float16
        assert bool(jnp.all(jnp.isfinite(updates["w"])))
    explicit = gc.scale_by_acprop(nu_dtype=jnp.float16).init(params)
    assert explicit.nu["w"].dtype == jnp.float16
