"""Prodigy: AdamW with a learning rate estimated from the distance travelled, against Optax
0.2.8's `optax.contrib.prodigy`; all-zero first gradients (Optax: NaN forever), validation.

The alias runs against Optax eagerly and under jit (`with_modes`); variants run under jit.
"""

from __future__ import annotations

import optax.contrib as oc
import pytest

from gradtx import contrib as gc

from ..optax_reference import compare_to_optax, with_modes
from .common import (
    assert_needs_params,
    assert_zero_first_gradients_keep_the_estimate,
    described,
    sched,
)

CASES = [
    # id, ours, Optax, atol
    ("prodigy", lambda: gc.prodigy(sched), lambda: oc.prodigy(sched), 1e-7),
    (
        "prodigy_safeguard_decay",
        lambda: gc.prodigy(
            sched, beta3=0.99, safeguard_warmup=True, weight_decay=0.01, estim_lr_coef=2.0
        ),
        lambda: oc.prodigy(
            sched, beta3=0.99, safeguard_warmup=True, weight_decay=0.01, estim_lr_coef=2.0
        ),
        1e-7,
    ),
]

# The alias once eagerly.
EAGER = {"prodigy"}


@pytest.mark.across_versions
@pytest.mark.parametrize(("name", "ours", "ref", "atol", "jit"), with_modes(CASES, EAGER))
def test_matches_optax(name, ours, ref, atol, jit):
    compare_to_optax(ours(), ref(), jit=jit, atol=atol, reference_key=f"{__name__}:{name}")


SAME_SIGNATURE = [(gc.prodigy, oc.prodigy)]


@pytest.mark.parametrize(("ours", "ref"), SAME_SIGNATURE, ids=lambda f: f.__name__)
def test_optax_names_argument_names_and_defaults(ours, ref):
    assert described(ours) == described(ref)


@pytest.mark.parametrize(("ours", "ref"), [(gc.prodigy, oc.prodigy)], ids=["prodigy"])
def test_zero_first_gradients_keep_the_estimate(ours, ref):
    assert_zero_first_gradients_keep_the_estimate(ours, ref)


@pytest.mark.parametrize(("make", "who"), [(lambda: gc.prodigy(), "prodigy")])
def test_needs_params(make, who):
    assert_needs_params(make, who)


# -- invalid hyperparameters raise at construction, naming the function, argument and value --

BAD = [
    (lambda: gc.prodigy(betas=(0.9, 1.0)), r"prodigy: betas\[1\] must be in \[0.0, 1.0\)"),
    (lambda: gc.prodigy(beta3=-0.1), r"prodigy: beta3 must be in \[0.0, 1.0\), got -0.1"),
    (lambda: gc.prodigy(estim_lr0=0.0), "prodigy: estim_lr0 must be > 0, got 0.0"),
    (lambda: gc.prodigy(weight_decay=-1e-3), "prodigy: weight_decay must be .*>= 0, got -0.001"),
]


@pytest.mark.parametrize(("make", "message"), BAD, ids=range(len(BAD)))
def test_invalid_hyperparameters_raise_at_construction(make, message):
    with pytest.raises(ValueError, match=message):
        make()
