"""masked / freeze / multi_transform against Optax's masking behaviour: the pruned layout
(`MaskedNode()` per pruned subtree, one for a prefix mask's False) and `map_params`' placeholder
passing through the wrappers (Optax's transforms/_masking_test.py)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax

import gradtx


def _params():
    return {
        "a": [jnp.ones(1), (jnp.ones(2), jnp.ones(3))],
        "b": {"c": jnp.ones(4), "d": jnp.ones(5)},
    }


def test_masked_state_layout_is_optax_with_masked_nodes_per_prefix():
    mask = {"a": [True, (True, False)], "b": False}
    ours = gradtx.masked(gradtx.trace(0.0), mask).init(_params())
    theirs = optax.masked(optax.trace(0.0), mask).init(_params())
    assert isinstance(ours.inner_state.trace["b"], gradtx.MaskedNode)
    assert isinstance(ours.inner_state.trace["a"][1][1], gradtx.MaskedNode)
    names = lambda t: str(jax.tree.structure(t)).replace("optax", "").replace("gradtx", "")
    assert names(ours.inner_state.trace) == names(theirs.inner_state.trace)


def test_masked_prefix_mask_updates_and_nested_masks():
    params = {"a": jnp.ones(2), "b": {"f": jnp.ones(2)}, "c": {"d": jnp.ones(1), "e": jnp.ones(3)}}
    mask = {"a": True, "b": False, "c": {"d": False, "e": True}}
    tx = gradtx.masked(gradtx.sgd(1.0, momentum=0.0), mask)
    state = jax.jit(tx.init)(params)
    u, state = jax.jit(tx.update)(params, state, params)
    np.testing.assert_allclose(u["a"], -1.0)
    np.testing.assert_allclose(u["b"]["f"], 1.0)
    np.testing.assert_allclose(u["c"]["e"], -1.0)
    outer = gradtx.masked(tx, lambda p: jax.tree.map(lambda x: x.shape[0] > 1, p))
    u, _ = outer.update(params, outer.init(params), params)
    np.testing.assert_allclose(u["c"]["d"], 1.0)
    np.testing.assert_allclose(u["a"], -1.0)


def test_map_params_reaches_through_masked_freeze_and_multi_transform():
    params = {"w": jnp.zeros((1, 2)), "b": jnp.zeros((3,))}
    mask = {"w": True, "b": False}
    for tx in (
        gradtx.masked(gradtx.sgd(1.0, momentum=0.9), mask),
        gradtx.freeze(mask, tx=gradtx.sgd(1.0, momentum=0.9)),
        gradtx.freeze(mask),
        gradtx.lr_multipliers({"b": 0.0}, tx=gradtx.sgd(1.0, momentum=0.9)),
        gradtx.lr_multipliers({"b": 2.0}),
        gradtx.multi_transform(
            {"x": gradtx.sgd(1.0, momentum=0.9), "y": gradtx.adam(1.0)},
            mask and {"w": "x", "b": "y"},
        ),
    ):
        state = tx.init(params)
        out = gradtx.tree.map_params(tx, lambda v: v + 1, state)
        assert jax.tree.structure(out) == jax.tree.structure(state)
    tx = gradtx.masked(gradtx.sgd(1.0, momentum=0.9), mask)
    specs = gradtx.tree.map_params(
        tx,
        lambda p, axis: None if isinstance(p, gradtx.MaskedNode) else axis,
        tx.init(params),
        {"w": 1, "b": 2},
        is_leaf=lambda v: isinstance(v, gradtx.MaskedNode),
        transform_non_params=lambda _: None,
    )
    assert gradtx.tree.get(specs, "trace") == {"w": 1, "b": None}
