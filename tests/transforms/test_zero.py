"""`set_to_zero` and `zero_nans` against Optax: shapes, dtypes, state and the non-finite option."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gradtx
from gradtx import transforms

from ..helpers import assert_trees_close, grad_sequence, mixed_params
from ..optax_reference import with_modes
from .common import (
    check_matches_optax,
    describe,
    first_update,
    same_state,
    small_params,
    states_along,
)

# -- set_to_zero ------------------------------------------------------------------------------

# (id, ours, Optax's, params or None for the mixed default)
MATCHES_OPTAX = [
    ("set_to_zero", lambda: gradtx.set_to_zero(), lambda: optax.set_to_zero(), None),
]
_EAGER = {"set_to_zero"}


@pytest.mark.parametrize(
    ("name", "ours", "reference", "params", "jit"), with_modes(MATCHES_OPTAX, eager=_EAGER)
)
def test_matches_optax(name, ours, reference, params, jit):
    check_matches_optax(__name__, name, ours, reference, params, jit)


@pytest.mark.parametrize("name", ["set_to_zero"])
def test_signature_is_optaxs(name):
    """Argument names, order, kinds and defaults are Optax 0.2.8's."""
    assert describe(getattr(gradtx, name)) == describe(getattr(optax, name))


def test_set_to_zero_keeps_shapes_and_dtypes():
    params = mixed_params(dtype=jnp.bfloat16)
    updates = first_update(gradtx.set_to_zero(), params)
    for u, p in zip(jax.tree.leaves(updates), jax.tree.leaves(params), strict=True):
        assert (u.shape, u.dtype) == (p.shape, p.dtype)
        assert not bool(jnp.any(u))


# -- zero_nans --------------------------------------------------------------------------------


def test_zero_nans_matches_optax():
    params = small_params()
    grads = grad_sequence(params, 3)
    # NaNs in some leaves at some steps, and an infinity (kept, as in Optax)
    grads[0]["w"] = grads[0]["w"].at[1, 2].set(jnp.nan)
    grads[1]["b"][0] = grads[1]["b"][0].at[0].set(jnp.nan).at[1].set(jnp.inf)
    ours, ref = transforms.zero_nans(), optax.zero_nans()
    same_state(ours.init(params), ref.init(params), 0, 0)
    assert isinstance(ours.init(params), transforms.ZeroNansState)
    step = jax.jit(ours.update)
    for (u, s), (ue, se) in zip(
        states_along(ours, params, grads), states_along(ref, params, grads), strict=True
    ):
        assert_trees_close(u, ue, 0, 0)
        same_state(s, se, 0, 0)
    u, state = step(grads[1], ours.init(params), params)
    assert bool(state.found_nan["b"][0]) and not bool(state.found_nan["w"])
    np.testing.assert_array_equal(u["b"][0][:2], [0.0, np.inf])


def test_zero_nans_non_finite_option():
    tx = transforms.zero_nans(non_finite=True)
    g = {"a": jnp.array([1.0, jnp.inf, -jnp.inf]), "b": jnp.array([jnp.nan], jnp.bfloat16)}
    u, state = tx.update(g, tx.init(g))
    np.testing.assert_array_equal(u["a"], [1.0, 0.0, 0.0])
    assert u["b"].dtype == jnp.bfloat16 and float(u["b"][0]) == 0.0
    assert bool(state.found_nan["a"]) and bool(state.found_nan["b"])
    with pytest.raises(gradtx.HyperparameterError, match=r"zero_nans.*non_finite"):
        transforms.zero_nans(non_finite=1)
