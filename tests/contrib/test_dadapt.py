"""D-Adaptation (`dadapt_adamw`): AdamW with a learning rate estimated from the gradients,
against Optax 0.2.8's `optax.contrib`; all-zero first gradients (Optax: NaN forever), validation.

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
    ("dadapt_adamw", lambda: gc.dadapt_adamw(sched), lambda: oc.dadapt_adamw(sched), 1e-7),
    (
        "dadapt_adamw_decay",
        lambda: gc.dadapt_adamw(sched, betas=(0.8, 0.99), weight_decay=0.01, estim_lr0=1e-4),
        lambda: oc.dadapt_adamw(sched, betas=(0.8, 0.99), weight_decay=0.01, estim_lr0=1e-4),
        1e-7,
    ),
]

# The alias once eagerly.
EAGER = {"dadapt_adamw"}


@pytest.mark.across_versions
@pytest.mark.parametrize(("name", "ours", "ref", "atol", "jit"), with_modes(CASES, EAGER))
def test_matches_optax(name, ours, ref, atol, jit):
    compare_to_optax(ours(), ref(), jit=jit, atol=atol, reference_key=f"{__name__}:{name}")


SAME_SIGNATURE = [(gc.dadapt_adamw, oc.dadapt_adamw)]


@pytest.mark.parametrize(("ours", "ref"), SAME_SIGNATURE, ids=lambda f: f.__name__)
def test_optax_names_argument_names_and_defaults(ours, ref):
    assert described(ours) == described(ref)


@pytest.mark.parametrize(
    ("ours", "ref"), [(gc.dadapt_adamw, oc.dadapt_adamw)], ids=["dadapt_adamw"]
)
def test_zero_first_gradients_keep_the_estimate(ours, ref):
    assert_zero_first_gradients_keep_the_estimate(ours, ref)


@pytest.mark.parametrize(("make", "who"), [(lambda: gc.dadapt_adamw(), "dadapt_adamw")])
def test_needs_params(make, who):
    assert_needs_params(make, who)


# -- invalid hyperparameters raise at construction, naming the function, argument and value --

BAD = [
    (lambda: gc.dadapt_adamw(betas=(1.2, 0.9)), r"dadapt_adamw: betas\[0\] must be in"),
    (lambda: gc.dadapt_adamw(eps=-1.0), "dadapt_adamw: eps must be .*>= 0, got -1.0"),
]


@pytest.mark.parametrize(("make", "message"), BAD, ids=range(len(BAD)))
def test_invalid_hyperparameters_raise_at_construction(make, message):
    with pytest.raises(ValueError, match=message):
        make()
