"""Monitoring: `snapshot` and `monitor` record measurements of the updates in the state, against
Optax; a fixed state structure (for `lax.scan`), extra arguments and errors."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gradtx
from gradtx import transforms

from ..helpers import assert_trees_close, grad_sequence
from .common import ATOL, RTOL, same_state, small_params, states_along


def test_snapshot_matches_optax():
    params = small_params()
    grads = grad_sequence(params, 4)
    measure = gradtx.tree.norm
    ours = gradtx.chain(
        gradtx.sgd(0.1, momentum=0.9), transforms.snapshot("norm", measure), gradtx.scale(0.5)
    )
    ref = optax.chain(
        optax.sgd(0.1, momentum=0.9), optax.snapshot("norm", optax.tree.norm), optax.scale(0.5)
    )
    assert isinstance(ours.init(params)[1], transforms.SnapshotState)
    same_state(ours.init(params)[1], ref.init(params)[1])
    for (u, s), (ue, se) in zip(
        states_along(ours, params, grads), states_along(ref, params, grads), strict=True
    ):
        assert_trees_close(u, ue, RTOL, ATOL)
        same_state(s[1], se[1])
        np.testing.assert_allclose(gradtx.tree.get(s, "norm"), optax.tree.get(se, "norm"))
    abstract = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), params)
    assert transforms.snapshot("n", measure).init(abstract).measurement["n"].shape == ()


def test_monitor_matches_optax():
    params = small_params()
    grads = grad_sequence(params, 5)
    threshold = 0.3  # the sgd updates' norm crosses it on some steps

    def ours_measures():
        return {
            "norm": gradtx.tree.norm,
            "clipped": gradtx.measure_with_ema(lambda u: gradtx.tree.norm(u) > threshold, 0.9),
        }

    ours = gradtx.chain(
        gradtx.sgd(0.1, momentum=0.9),
        transforms.monitor(ours_measures()),
        gradtx.clip_by_global_norm(threshold),
    )
    ref = optax.chain(
        optax.sgd(0.1, momentum=0.9),
        optax.monitor(
            {
                "norm": optax.tree.norm,
                "clipped": optax.measure_with_ema(lambda u: optax.tree.norm(u) > threshold, 0.9),
            }
        ),
        optax.clip_by_global_norm(threshold),
    )
    steps = list(
        zip(states_along(ours, params, grads), states_along(ref, params, grads), strict=True)
    )
    for (u, s), (ue, se) in steps:
        assert_trees_close(u, ue, RTOL, ATOL)
        assert isinstance(s[1], transforms.MonitorState)
        same_state(s[1], se[1])
    assert len({round(float(s[1].measurements["clipped"]), 6) for (_, s), _ in steps}) > 2

    # the state keeps one structure from init on (Optax's init has no measurements yet), so a
    # lax.scan over the steps works
    tx = transforms.monitor(ours_measures())
    state0 = tx.init(params)
    assert set(state0.measurements) == {"norm", "clipped"}
    stacked = jax.tree.map(lambda *xs: jnp.stack(xs), *grads)

    def body(state, g):
        _, state = tx.update(g, state, params)
        return state, state.measurements["norm"]

    _, norms = jax.jit(lambda s, gs: jax.lax.scan(body, s, gs))(state0, stacked)
    np.testing.assert_allclose(norms, [optax.tree.norm(g) for g in grads], rtol=RTOL)


def test_monitor_extra_args_and_errors():
    def needs_value(updates, state, params=None, *, value):
        return value * 2.0, state

    measure = gradtx.GradientTransformation(lambda p: gradtx.EmptyState(), needs_value)
    tx = transforms.monitor({"twice": measure})
    state = tx.init(jnp.ones(2))
    assert state.measurements == {}  # cannot be measured at init: Optax's layout
    u, state = tx.update(jnp.ones(2), state, value=jnp.float32(1.5))
    np.testing.assert_array_equal(u, jnp.ones(2))
    assert float(state.measurements["twice"]) == 3.0
    with pytest.raises(TypeError, match="monitor: measures must be a dict"):
        transforms.monitor([gradtx.tree.norm])
    with pytest.raises(TypeError, match=r"monitor: measures\['x'\] must be a GradientTrans"):
        transforms.monitor({"x": 3})
    with pytest.raises(ValueError, match="monitor: expected a MonitorState"):
        transforms.monitor({"n": gradtx.tree.norm}).update(jnp.ones(2), gradtx.EmptyState())
    with pytest.raises(TypeError, match="snapshot: measure must be callable"):
        transforms.snapshot("n", None)
    with pytest.raises(TypeError, match="snapshot: measure_name must be a string"):
        transforms.snapshot(1, gradtx.tree.norm)
