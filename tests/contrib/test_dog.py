"""DoG and DoWG (distance over gradients, and its weighted form) against Optax 0.2.8's
`optax.contrib`: the aliases and primitives, DoG's initial distance, the parameters each update
needs, and validation.

Every alias runs against Optax eagerly and under jit (`with_modes`); variants run under jit.
"""

from __future__ import annotations

import jax.numpy as jnp
import optax.contrib as oc
import pytest
from optax.contrib import _dog as optax_dog

from gradtx import contrib as gc

from ..optax_reference import compare_to_optax, with_modes
from .common import assert_needs_params, decay_mask, described, sched

CASES = [
    # id, ours, Optax, atol
    ("dog", lambda: gc.dog(sched), lambda: oc.dog(sched), 1e-7),
    (
        "dog_distance_decay",
        lambda: gc.dog(sched, ("distance", 1e-3), weight_decay=1e-3, mask=decay_mask),
        lambda: oc.dog(sched, ("distance", 1e-3), weight_decay=1e-3, mask=decay_mask),
        1e-7,
    ),
    (
        "scale_by_dog_learning_rate",
        lambda: gc.scale_by_dog(("learning_rate", 1e-2)),
        lambda: optax_dog.scale_by_dog(("learning_rate", 1e-2)),
        1e-7,
    ),
    ("dowg", lambda: gc.dowg(sched), lambda: oc.dowg(sched), 1e-7),
    (
        "dowg_init_decay",
        lambda: gc.dowg(sched, init_estim_sq_dist=1e-3, weight_decay=1e-3),
        lambda: oc.dowg(sched, init_estim_sq_dist=1e-3, weight_decay=1e-3),
        1e-7,
    ),
    (
        "scale_by_dowg",
        lambda: gc.scale_by_dowg(eps=1e-3),
        lambda: optax_dog.scale_by_dowg(eps=1e-3),
        1e-7,
    ),
]

# Each alias once eagerly.
EAGER = {"dog", "dowg"}


@pytest.mark.across_versions
@pytest.mark.parametrize(("name", "ours", "ref", "atol", "jit"), with_modes(CASES, EAGER))
def test_matches_optax(name, ours, ref, atol, jit):
    compare_to_optax(ours(), ref(), jit=jit, atol=atol, reference_key=f"{__name__}:{name}")


SAME_SIGNATURE = [
    (gc.dog, oc.dog),
    (gc.dowg, oc.dowg),
    (gc.scale_by_dog, optax_dog.scale_by_dog),
    (gc.scale_by_dowg, optax_dog.scale_by_dowg),
]


@pytest.mark.parametrize(("ours", "ref"), SAME_SIGNATURE, ids=lambda f: f.__name__)
def test_optax_names_argument_names_and_defaults(ours, ref):
    assert described(ours) == described(ref)


# -- DoG's initial distance, and params checks ---------------------------------------------------


def test_dog_heuristic_initial_distance():
    params = {"w": jnp.array([3.0, 4.0])}
    state = gc.scale_by_dog(("heuristic", 0.5)).init(params)
    assert float(state.max_dist) == pytest.approx(0.5 * (1.0 + 5.0))
    state = gc.scale_by_dog(("distance", 0.25)).init(params)
    assert float(state.max_dist) == pytest.approx(0.25)


@pytest.mark.parametrize(
    ("make", "who"),
    [
        (lambda: gc.dog(), "scale_by_dog"),
        (lambda: gc.dowg(), "scale_by_dowg"),
    ],
)
def test_needs_params(make, who):
    assert_needs_params(make, who)


# -- invalid hyperparameters raise at construction, naming the function, argument and value --

BAD = [
    (lambda: gc.dog(init_step=("magic", 1.0)), r"dog: scale_by_dog: init_step\[0\] must be one"),
    (lambda: gc.dog(init_step=("distance", 0.0)), r"init_step\[1\] must be > 0, got 0.0"),
    (lambda: gc.dog(init_step=1e-6), "init_step must be a pair"),
    (lambda: gc.dog(weight_decay=-1.0), "dog: weight_decay must be .*>= 0, got -1.0"),
    (lambda: gc.dowg(eps=0.0), "scale_by_dowg: eps .* must be > 0, got 0.0"),
    (lambda: gc.dowg(init_estim_sq_dist=-1.0), "init_estim_sq_dist must be > 0, got -1.0"),
]


@pytest.mark.parametrize(("make", "message"), BAD, ids=range(len(BAD)))
def test_invalid_hyperparameters_raise_at_construction(make, message):
    with pytest.raises(ValueError, match=message):
        make()
