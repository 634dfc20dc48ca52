"""MADGRAD (momentumized, adaptive, dual-averaged gradients) against Optax 0.2.8's
`optax.contrib.madgrad` over 100 steps, eager and jit; x0 taken at the first update, signatures,
validation."""

from __future__ import annotations

import jax
import optax.contrib as oc
import pytest

import gradtx
from gradtx import contrib as gc

from ..helpers import assert_trees_close, grad_sequence, mixed_params
from ..optax_reference import with_modes
from .common import (
    LR,
    SMALL_LR,
    assert_construction_raises,
    assert_signature_matches_optax,
    check_plain_against_optax,
)

# A looser absolute tolerance, as Optax's own eager and jit runs differ by as much: the update
# is x_new - x of two O(1) numbers, so a one-ulp difference in x_new (rounded differently
# eagerly and fused) is ~2.4e-7; Optax eager vs jit: 4.8e-7.
ATOL = {
    "madgrad": 1e-6,
    "madgrad_wd": 1e-6,
    "scale_by_madgrad": 1e-6,
}


PLAIN = [
    ("madgrad", lambda: gc.madgrad(LR), lambda: oc.madgrad(LR)),
    (
        "scale_by_madgrad",
        lambda: gc.scale_by_madgrad(SMALL_LR, 0.5, 1e-4),
        lambda: oc.scale_by_madgrad(SMALL_LR, 0.5, 1e-4),
    ),
    (
        "madgrad_wd",
        lambda: gc.madgrad(SMALL_LR, 0.5, 1e-2, 1e-4),
        lambda: oc.madgrad(SMALL_LR, 0.5, 1e-2, 1e-4),
    ),
]


@pytest.mark.across_versions
@pytest.mark.parametrize(
    ("name", "ours", "reference", "jit"),
    with_modes(PLAIN, eager={"madgrad"}),
)
def test_plain_against_optax(name, ours, reference, jit):
    check_plain_against_optax(__name__, name, ours, reference, jit, ATOL.get(name, 1e-7))


def test_madgrad_takes_x0_from_the_first_update_and_inits_from_shapes():
    params = mixed_params()
    structs = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), params)
    tx = gc.madgrad(0.1)
    abstract = tx.init(structs)  # no values needed: x0 is taken at the first update
    concrete = tx.init(params)
    assert jax.tree.structure(abstract) == jax.tree.structure(concrete)
    g = grad_sequence(params, 1)[0]
    _, state = tx.update(g, abstract, params)
    assert_trees_close(gradtx.tree.get(state, "x0"), params, 0, 0)
    primitive = gc.scale_by_madgrad(0.1)
    with pytest.raises(ValueError, match=r"^scale_by_madgrad needs the current parameters"):
        primitive.update(g, primitive.init(params), None)


SIGNATURES = [
    (gc.madgrad, oc.madgrad),
    (gc.scale_by_madgrad, oc.scale_by_madgrad),
]


@pytest.mark.parametrize(("ours", "theirs"), SIGNATURES, ids=[s[0].__name__ for s in SIGNATURES])
def test_signature_matches_optax(ours, theirs):
    assert_signature_matches_optax(ours, theirs)


INVALID = [
    (gc.madgrad, {"learning_rate": 0.1, "momentum": 1.0}, "madgrad: scale_by_madgrad: momentum"),
    (gc.madgrad, {"learning_rate": -1.0}, "madgrad: scale_by_madgrad: learning_rate"),
]  # fmt: skip


@pytest.mark.parametrize(("factory", "kwargs", "message"), INVALID)
def test_invalid_hyperparameters_raise_at_construction(factory, kwargs, message):
    assert_construction_raises(factory, kwargs, message)
