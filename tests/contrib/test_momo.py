"""Momo and Momo-Adam (momentum model-based step sizes, the loss given as `value=`) against
Optax 0.2.8's `optax.contrib` over 100 steps, eager and jit; what each update needs,
signatures, validation."""

from __future__ import annotations

import optax.contrib as oc
import pytest

from gradtx import contrib as gc

from ..helpers import grad_sequence, mixed_params
from ..optax_reference import with_modes
from .common import LR, assert_signature_matches_optax, compare_with_extra, loss

# A looser absolute tolerance, as Optax's own eager and jit runs differ by as much: with an
# adaptive lower bound, the bound and the step size switch on comparisons of nearly equal
# numbers; Optax eager vs jit differs by up to 4e-5 of a leaf's scale (about 2e-6 on these
# leaves of scale ~0.05). Jitted, these cases also allow twice Optax's own float32 noise against
# its float64 run (`float64_noise`). Measured against float64, each jax version's CPU arithmetic
# lands elsewhere inside that spread: jax 0.6.2 1.07e-6 (momo, step 97), jax 0.12.0 ~1.3e-6 at
# step 71, jax 0.12.1 1.53e-6 (momo_adam, step 70: 2.4x Optax's own noise there).
ATOL = {
    "momo_schedule_wd_adaptive": 2e-6,
    "momo_adam_schedule_wd_adaptive": 2e-6,
}


_VALUE = lambda p: {"value": loss(p)}

MOMO = [
    ("momo", lambda: gc.momo(), lambda: oc.momo()),
    (
        "momo_schedule_wd_adaptive",
        lambda: gc.momo(LR, 0.8, 0.5, 0.1, True),
        lambda: oc.momo(LR, 0.8, 0.5, 0.1, True),
    ),
    ("momo_adam", lambda: gc.momo_adam(), lambda: oc.momo_adam()),
    (
        "momo_adam_schedule_wd_adaptive",
        lambda: gc.momo_adam(LR, 0.8, 0.99, 1e-3, 0.5, 0.1, True),
        lambda: oc.momo_adam(LR, 0.8, 0.99, 1e-3, 0.5, 0.1, True),
    ),
]


@pytest.mark.across_versions
@pytest.mark.parametrize(
    ("name", "ours", "reference", "jit"), with_modes(MOMO, eager={"momo", "momo_adam"})
)
def test_momo_against_optax(name, ours, reference, jit):
    compare_with_extra(
        ours(),
        reference(),
        jit=jit,
        extra=_VALUE,
        atol=ATOL.get(name, 1e-7),
        float64_noise=jit and name in ATOL,
    )


@pytest.mark.parametrize("factory", [gc.momo, gc.momo_adam], ids=["momo", "momo_adam"])
def test_momo_needs_the_loss_and_the_params(factory):
    tx = factory()
    params = mixed_params()
    g = grad_sequence(params, 1)[0]
    with pytest.raises(
        ValueError,
        match=rf"^{factory.__name__} needs the monitored value \(e\.g\. the loss\): call "
        r"update\(grads, state, params, value=loss\)",
    ):
        tx.update(g, tx.init(params), params)
    with pytest.raises(ValueError, match=rf"^{factory.__name__} needs the current parameters"):
        tx.update(g, tx.init(params), None, value=1.0)


SIGNATURES = [
    (gc.momo, oc.momo),
    (gc.momo_adam, oc.momo_adam),
]


@pytest.mark.parametrize(("ours", "theirs"), SIGNATURES, ids=[s[0].__name__ for s in SIGNATURES])
def test_signature_matches_optax(ours, theirs):
    assert_signature_matches_optax(ours, theirs)


INVALID = [
    (gc.momo, {"beta": 1.0}, "momo: beta must be in"),
    (gc.momo, {"weight_decay": -1.0}, "momo: weight_decay must be >= 0"),
    (gc.momo_adam, {"b2": 2.0}, "momo_adam: b2 must be in"),
    (gc.momo_adam, {"lower_bound": float("nan")}, "momo_adam: lower_bound must be finite"),
]  # fmt: skip


@pytest.mark.parametrize(("factory", "kwargs", "message"), INVALID)
def test_invalid_hyperparameters_raise_at_construction(factory, kwargs, message):
    with pytest.raises((ValueError, TypeError), match=message):
        factory(**kwargs)
