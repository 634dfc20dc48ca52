"""Mechanic (`mechanize`): a learned scale for any base optimizer's updates, against Optax
0.2.8's `optax.contrib.mechanize`; the parameters it needs, and validation.

The alias runs against Optax eagerly and under jit (`with_modes`); variants run under jit.
"""

from __future__ import annotations

import optax
import optax.contrib as oc
import pytest

import gradtx
from gradtx import contrib as gc

from ..optax_reference import compare_to_optax, with_modes
from .common import assert_needs_params, described, sched

CASES = [
    # id, ours, Optax, atol
    (
        "mechanize",
        lambda: gc.mechanize(gradtx.adam(sched)),
        lambda: oc.mechanize(optax.adam(sched)),
        1e-7,
    ),
    (
        "mechanize_sgd",
        lambda: gc.mechanize(
            gradtx.sgd(sched, momentum=0.9), weight_decay=0.0, s_init=1e-4, num_betas=3
        ),
        lambda: oc.mechanize(
            optax.sgd(sched, momentum=0.9), weight_decay=0.0, s_init=1e-4, num_betas=3
        ),
        1e-7,
    ),
]

# The alias once eagerly.
EAGER = {"mechanize"}


@pytest.mark.across_versions
@pytest.mark.parametrize(("name", "ours", "ref", "atol", "jit"), with_modes(CASES, EAGER))
def test_matches_optax(name, ours, ref, atol, jit):
    compare_to_optax(ours(), ref(), jit=jit, atol=atol, reference_key=f"{__name__}:{name}")


SAME_SIGNATURE = [(gc.mechanize, oc.mechanize)]


@pytest.mark.parametrize(("ours", "ref"), SAME_SIGNATURE, ids=lambda f: f.__name__)
def test_optax_names_argument_names_and_defaults(ours, ref):
    assert described(ours) == described(ref)


@pytest.mark.parametrize(("make", "who"), [(lambda: gc.mechanize(gradtx.sgd(1.0)), "mechanize")])
def test_needs_params(make, who):
    assert_needs_params(make, who)


# -- invalid hyperparameters raise at construction, naming the function, argument and value --

BAD = [
    (lambda: gc.mechanize(gradtx.sgd(1.0), num_betas=0), "num_betas must be >= 1, got 0"),
    (lambda: gc.mechanize(gradtx.sgd(1.0), s_init=0.0), "mechanize: s_init must be > 0"),
    (lambda: gc.mechanize(gradtx.sgd(1.0), weight_decay=-1.0), "weight_decay must be .*>= 0"),
]


@pytest.mark.parametrize(("make", "message"), BAD, ids=range(len(BAD)))
def test_invalid_hyperparameters_raise_at_construction(make, message):
    with pytest.raises(ValueError, match=message):
        make()
