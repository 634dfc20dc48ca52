"""`flatten`: an inner transformation run on one flat vector of all the leaves, against Optax;
its state layout, dtypes, None leaves, extra arguments and errors."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gradtx
from gradtx import transforms

from ..optax_reference import compare_to_optax
from .common import RTOL


def test_flatten_matches_optax():
    compare_to_optax(
        transforms.flatten(gradtx.adam(1e-2)), optax.flatten(optax.adam(1e-2)), jit=True, steps=50
    )


def test_flatten_state_dtypes_and_edge_cases():
    params = {"w": jnp.ones((2, 2)), "b": jnp.zeros(3, jnp.bfloat16), "none": None}
    tx = transforms.flatten(gradtx.chain(gradtx.add_decayed_weights(0.1), gradtx.scale(2.0)))
    updates, _ = tx.update(params, tx.init(params), params)
    assert updates["b"].dtype == jnp.bfloat16 and updates["none"] is None
    np.testing.assert_allclose(updates["w"], 2.2 * np.ones((2, 2)), rtol=RTOL)
    # the inner state is that of one vector; abstract params give the same layout
    adam = transforms.flatten(gradtx.scale_by_adam())
    assert adam.init(params).mu.shape == (7,)
    abstract = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), params)
    assert adam.init(abstract).mu.shape == (7,)
    # a tree without leaves
    u, _ = adam.update({}, adam.init({}), {})
    assert u == {}
    # extra arguments reach the inner transformation
    seen = {}

    def inner_update(updates, state, params=None, *, value=None):
        seen["value"] = value
        return updates, state

    inner = gradtx.GradientTransformation(lambda p: gradtx.EmptyState(), inner_update)
    transforms.flatten(inner).update(params, gradtx.EmptyState(), value=3.0, other=1)
    assert seen == {"value": 3.0}
    with pytest.raises(TypeError, match="flatten: inner must be a GradientTransformation"):
        transforms.flatten(gradtx.adam)
