"""COCOB (coin betting, learning-rate free) against Optax 0.2.8's `optax.contrib`: the alias
and the primitive, the parameters each update needs, and validation.

The alias runs against Optax eagerly and under jit (`with_modes`); variants run under jit.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax.contrib as oc
import pytest

import gradtx
from gradtx import contrib as gc

from ..optax_reference import compare_to_optax, with_modes
from .common import assert_needs_params, decay_mask, described, sched

# A looser absolute tolerance where Optax's own eager and jitted runs differ (measured on these
# cases, beyond rtol 1e-5): updates that are differences of parameter-sized values carry the
# rounding of |params| (x_0 + ... - x_t with |x| ~ 1: 1.2e-7).
_COCOB_ATOL = 2.5e-7

CASES = [
    # id, ours, Optax, atol
    ("cocob", lambda: gc.cocob(sched), lambda: oc.cocob(sched), _COCOB_ATOL),
    (
        "cocob_decay",
        lambda: gc.cocob(sched, alpha=10.0, weight_decay=1e-3, mask=decay_mask),
        lambda: oc.cocob(sched, alpha=10.0, weight_decay=1e-3, mask=decay_mask),
        _COCOB_ATOL,
    ),
    (
        "scale_by_cocob",
        lambda: gc.scale_by_cocob(eps=1e-6),
        lambda: oc.scale_by_cocob(eps=1e-6),
        _COCOB_ATOL,
    ),
]

# The alias once eagerly.
EAGER = {"cocob"}


@pytest.mark.across_versions
@pytest.mark.parametrize(("name", "ours", "ref", "atol", "jit"), with_modes(CASES, EAGER))
def test_matches_optax(name, ours, ref, atol, jit):
    compare_to_optax(ours(), ref(), jit=jit, atol=atol, reference_key=f"{__name__}:{name}")


SAME_SIGNATURE = [
    (gc.cocob, oc.cocob),
    (gc.scale_by_cocob, oc.scale_by_cocob),
]


@pytest.mark.parametrize(("ours", "ref"), SAME_SIGNATURE, ids=lambda f: f.__name__)
def test_optax_names_argument_names_and_defaults(ours, ref):
    assert described(ours) == described(ref)


@pytest.mark.parametrize(
    ("make", "who"),
    [
        (lambda: gc.cocob(), "weight_decay"),
        (lambda: gc.scale_by_cocob(), "scale_by_cocob"),
    ],
)
def test_needs_params(make, who):
    assert_needs_params(make, who)


# -- invalid hyperparameters raise at construction, naming the function, argument and value --

BAD = [
    (lambda: gc.cocob(alpha=0.0), "cocob: scale_by_cocob: alpha must be > 0, got 0.0"),
    (lambda: gc.cocob(weight_decay=-1.0), "cocob: weight_decay must be .*>= 0, got -1.0"),
    (lambda: gc.scale_by_cocob(eps=-1e-8), "scale_by_cocob: eps must be > 0, got -1e-08"),
]


@pytest.mark.parametrize(("make", "message"), BAD, ids=range(len(BAD)))
def test_invalid_hyperparameters_raise_at_construction(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_the_starting_point_is_a_copy_of_the_params_in_their_dtypes():
    # the rule's "params" slot: a copy that shares no buffer (both may be donated), in each
    # leaf's dtype, zeros for shapes only; a copy is never rounded to 8 bits
    params = {"w": jnp.array([1.0, -2.0]), "b": jnp.array([0.5], jnp.bfloat16)}
    state = gc.scale_by_cocob().init(params)
    for k, p in params.items():
        x0 = state.init_particles[k]
        assert x0.dtype == p.dtype and (x0 == p).all()
        assert x0.unsafe_buffer_pointer() != p.unsafe_buffer_pointer()
        assert state.scale[k].dtype == p.dtype and (state.scale[k] == 1e-8).all()
    shapes = jax.tree.map(lambda p: jax.ShapeDtypeStruct(p.shape, p.dtype), params)
    abstract = gc.scale_by_cocob().init(shapes)
    assert all((x == 0).all() for x in jax.tree.leaves(abstract.init_particles))
    assert gradtx.slot("params", dtype="mu_dtype").quantizable is False
