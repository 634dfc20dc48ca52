"""`selective_transform`: an optimizer applied to the leaves a freeze mask leaves trainable,
against Optax; static and prefix masks, no state for frozen leaves, errors."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gradtx
from gradtx.wrappers._selective import selective_transform

from ..helpers import assert_trees_close
from ..optax_reference import compare_to_optax
from ..transforms.common import ATOL, RTOL


def test_selective_transform_matches_optax():
    params = {"a": jnp.ones(3), "b": {"c": jnp.arange(4.0), "d": jnp.full((2, 2), 2.0)}}
    mask = {"a": True, "b": {"c": False, "d": True}}
    compare_to_optax(
        selective_transform(gradtx.adam(1e-2), freeze_mask=mask),
        optax.selective_transform(optax.adam(1e-2), freeze_mask=mask),
        jit=True,
        steps=20,
        params=params,
    )
    for flag in (True, False, jnp.bool_(True)):
        ours = selective_transform(gradtx.sgd(0.1), freeze_mask=flag)
        ref = optax.selective_transform(optax.sgd(0.1), freeze_mask=flag)
        u, _ = ours.update(params, ours.init(params), params)
        ue, _ = ref.update(params, ref.init(params), params)
        assert_trees_close(u, ue, RTOL, ATOL)
    # a prefix mask; no optimizer state for the frozen leaves
    tx = selective_transform(gradtx.adam(1e-2), freeze_mask={"a": False, "b": True})
    state = tx.init(params)
    sizes = sorted(np.size(x) for x in jax.tree.leaves(state.inner_states["train"]))
    assert max(sizes) == 3  # buffers for "a" only


def test_selective_transform_errors():
    with pytest.raises(ValueError, match="selective_transform: freeze_mask must be a static bool"):
        selective_transform(gradtx.sgd(0.1), freeze_mask={"a": jnp.array([True, False])})
    with pytest.raises(ValueError, match="selective_transform: freeze_mask"):
        selective_transform(gradtx.sgd(0.1), freeze_mask={"a": "yes"})
    with pytest.raises(TypeError, match="selective_transform: optimizer must be"):
        selective_transform(gradtx.sgd, freeze_mask=True)
    tx = selective_transform(gradtx.sgd(0.1), freeze_mask={"a": True, "b": False})
    with pytest.raises(ValueError, match=r"selective_transform: .*param_labels"):
        tx.init({"x": jnp.ones(2)})
