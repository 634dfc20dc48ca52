"""AdEMAMix and simplified AdEMAMix (a mixture of a fast and a slow momentum) against Optax
0.2.8's `optax.contrib` over 100 steps, eager and jit; dtypes, signatures, validation."""

from __future__ import annotations

import jax.numpy as jnp
import optax.contrib as oc
import pytest

from gradtx import contrib as gc

from ..optax_reference import compare_to_optax, with_modes
from .common import LR, MASK, SMALL_LR, assert_mu_dtype_is_kept, assert_signature_matches_optax

_TENTH_LR = lambda count: 0.1 * LR(count)
_B3 = lambda count: 0.999 - 0.09 / (1.0 + 0.1 * count)
_ALPHA = lambda count: jnp.minimum(5.0, 0.1 * count)


PLAIN = [
    ("ademamix", lambda: gc.ademamix(LR), lambda: oc.ademamix(LR)),
    (
        "ademamix_schedules_wd",
        lambda: gc.ademamix(SMALL_LR, 0.8, 0.99, _B3, _ALPHA, 1e-3, 1e-4, None, 0.1, MASK),
        lambda: oc.ademamix(SMALL_LR, 0.8, 0.99, _B3, _ALPHA, 1e-3, 1e-4, None, 0.1, MASK),
    ),
    (
        "scale_by_ademamix",
        lambda: gc.scale_by_ademamix(b3=0.99),
        lambda: oc.scale_by_ademamix(b3=0.99),
    ),
    # Its momentum is an undamped sum (~100 g for b1=0.99): a learning rate of one would move
    # the params by ~100 per step, so the schedule is scaled down.
    (
        "simplified_ademamix",
        lambda: gc.simplified_ademamix(_TENTH_LR),
        lambda: oc.simplified_ademamix(_TENTH_LR),
    ),
    (
        "simplified_ademamix_alpha_wd",
        lambda: gc.simplified_ademamix(SMALL_LR, 0.9, 0.99, _ALPHA, 1e-3, 1e-4, 0.1, MASK),
        lambda: oc.simplified_ademamix(SMALL_LR, 0.9, 0.99, _ALPHA, 1e-3, 1e-4, 0.1, MASK),
    ),
    (
        "scale_by_simplified_ademamix",
        lambda: gc.scale_by_simplified_ademamix(0.9, 0.99, 2.0, 1e-3),
        lambda: oc.scale_by_simplified_ademamix(0.9, 0.99, 2.0, 1e-3),
    ),
]


@pytest.mark.across_versions
@pytest.mark.parametrize(
    ("name", "ours", "reference", "jit"),
    with_modes(PLAIN, eager={"ademamix", "simplified_ademamix"}),
)
def test_plain_against_optax(name, ours, reference, jit):
    atol = 1e-7
    compare_to_optax(ours(), reference(), jit=jit, atol=atol, reference_key=f"{__name__}:{name}")


@pytest.mark.parametrize(
    "make", [lambda: gc.ademamix(0.1, mu_dtype=jnp.bfloat16)], ids=["ademamix"]
)
def test_mu_dtype_is_kept(make):
    assert_mu_dtype_is_kept(make)


SIGNATURES = [
    (gc.ademamix, oc.ademamix),
    (gc.scale_by_ademamix, oc.scale_by_ademamix),
    (gc.simplified_ademamix, oc.simplified_ademamix),
    (gc.scale_by_simplified_ademamix, oc.scale_by_simplified_ademamix),
]


@pytest.mark.parametrize(("ours", "theirs"), SIGNATURES, ids=[s[0].__name__ for s in SIGNATURES])
def test_signature_matches_optax(ours, theirs):
    assert_signature_matches_optax(ours, theirs)


INVALID = [
    (gc.ademamix, {"learning_rate": 0.1, "b3": 1.5}, "ademamix: scale_by_ademamix: b3"),
    (gc.ademamix, {"learning_rate": 0.1, "weight_decay": -1.0}, "ademamix: weight_decay must"),
    (gc.simplified_ademamix, {"learning_rate": 0.1, "eps": -1.0}, "simplified_ademamix: .*eps"),
]  # fmt: skip


@pytest.mark.parametrize(("factory", "kwargs", "message"), INVALID)
def test_invalid_hyperparameters_raise_at_construction(factory, kwargs, message):
    with pytest.raises((ValueError, TypeError), match=message):
        factory(**kwargs)
