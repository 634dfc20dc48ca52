"""Optax's transform- and core-level names: monitor / snapshot, unitwise_norm / unitwise_clip,
keep_params_nonnegative, zero_nans, flatten, selective_transform, incremental_update,
periodic_update, init_empty_state, stateless_with_tree_map, with_extra_args_support and
scale_gradient, each checked against the installed Optax."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gradtx
from gradtx import core, transforms
from gradtx.wrappers._selective import selective_transform

from ..helpers import assert_trees_close, grad_sequence, mixed_params
from ..optax_reference import compare_to_optax

RTOL, ATOL = 1e-5, 1e-7


def small_params():
    """A small tree (fewer shapes than `mixed_params`, for the eager state checks)."""
    rng = np.random.default_rng(0)
    return {
        "w": jnp.asarray(rng.normal(size=(2, 3)), jnp.float32),
        "b": [jnp.asarray(rng.normal(size=3), jnp.float32), None],
    }


def _same_state(got, expected, rtol=RTOL, atol=ATOL):
    """Two states with the same class name and fields (Optax's and ours are different classes)
    and close leaves, in order."""
    assert type(got).__name__ == type(expected).__name__
    assert getattr(got, "_fields", None) == getattr(expected, "_fields", None)
    got_leaves, expected_leaves = jax.tree.leaves(got), jax.tree.leaves(expected)
    assert len(got_leaves) == len(expected_leaves)
    for a, b in zip(got_leaves, expected_leaves, strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=rtol, atol=atol)


def _states_along(tx, params, grads, extra=None):
    """The (updates, state) after each step of `tx` on `grads` (the params stay fixed)."""
    state = tx.init(params)
    out = []
    for g in grads:
        u, state = tx.update(g, state, params, **(extra or {}))
        out.append((u, state))
    return out


# -- unitwise_norm / unitwise_clip ----------------------------------------------------------------


_UNIT_CASES = [
    ((), None),
    ((5,), None),
    ((1, 4), None),
    ((3, 4), None),
    ((2, 3, 4), None),
    ((2, 2, 3, 4), None),
    ((2, 1, 2, 3, 2), None),
    ((3, 4), 1),
    ((2, 3, 4), (1, 2)),
]


def test_unitwise_norm_matches_optax():
    rng = np.random.default_rng(0)
    xs = [jnp.asarray(rng.normal(size=shape), jnp.float32) for shape, _ in _UNIT_CASES]
    axes = [axis for _, axis in _UNIT_CASES]
    norms = lambda fn: jax.jit(lambda xs: [fn(x, axis=a) for x, a in zip(xs, axes, strict=True)])
    got, expected = norms(transforms.unitwise_norm)(xs), norms(optax.transforms.unitwise_norm)(xs)
    for x, g, e in zip(xs, got, expected, strict=True):
        assert g.shape == x.shape and g.dtype == jnp.float32
        np.testing.assert_allclose(g, e, rtol=RTOL, atol=ATOL)


def test_unitwise_norm_keeps_dtype_and_rejects_unknown_ranks():
    x = jnp.full((4, 3), 300.0, jnp.bfloat16)  # the squares' sum overflows nothing in float32
    got = transforms.unitwise_norm(x)
    assert got.dtype == jnp.bfloat16
    np.testing.assert_allclose(np.asarray(got, np.float32), 600.0, rtol=1e-2)
    with pytest.raises(ValueError, match=r"unitwise_norm: .*shape \(1, 2, 1, 2, 1, 2\).*axis="):
        transforms.unitwise_norm(jnp.ones((1, 2, 1, 2, 1, 2)))
    # with axis= any rank works
    assert transforms.unitwise_norm(jnp.ones((1, 2, 1, 2, 1, 2)), axis=5).shape == (1, 2) * 3


def test_unitwise_clip_matches_optax():
    rng = np.random.default_rng(1)
    for _ in range(4):
        g = jnp.asarray(rng.normal(size=(3, 4)), jnp.float32)
        g_norm = optax.transforms.unitwise_norm(g)
        max_norm = jnp.asarray(rng.uniform(0.5, 2.5, size=(1, 4)).repeat(3, 0), jnp.float32)
        got = transforms.unitwise_clip(g_norm, max_norm, g)
        expected = optax.transforms.unitwise_clip(g_norm, max_norm, g)
        np.testing.assert_allclose(got, expected, rtol=RTOL)
        got = transforms.unitwise_clip(g_norm, max_norm, g, div_eps=1e-3)
        expected = optax.transforms.unitwise_clip(g_norm, max_norm, g, div_eps=1e-3)
        np.testing.assert_allclose(got, expected, rtol=RTOL)
    # zero gradients stay zero (the floor of the divisor is never reached)
    z = jnp.zeros(3)
    np.testing.assert_array_equal(transforms.unitwise_clip(z, z, z), z)


def test_unitwise_clip_errors():
    with pytest.raises(ValueError, match=r"unitwise_clip: .*same shape.*\(3,\).*\(2,\)"):
        transforms.unitwise_clip(jnp.ones(3), jnp.ones(2), jnp.ones(3))
    with pytest.raises(gradtx.HyperparameterError, match=r"unitwise_clip.*div_eps"):
        transforms.unitwise_clip(jnp.ones(3), jnp.ones(3), jnp.ones(3), div_eps=0.0)


# -- keep_params_nonnegative / zero_nans ---------------------------------------------------------


def test_keep_params_nonnegative_matches_optax():
    params = jax.tree.map(jnp.abs, small_params())
    compare_to_optax(
        gradtx.chain(gradtx.sgd(0.4), transforms.keep_params_nonnegative()),
        optax.chain(optax.sgd(0.4), optax.keep_params_nonnegative()),
        jit=True,
        steps=20,
        params=params,
    )
    tx = transforms.keep_params_nonnegative()
    p = jnp.array([1.0, 0.5, -1.0, 0.0])
    u, state = tx.update(jnp.array([-0.5, -2.0, -1.0, 3.0]), tx.init(p), p)
    np.testing.assert_array_equal(u, [-0.5, -0.5, 1.0, 3.0])  # to 0 if it would go below
    assert state == transforms.NonNegativeParamsState() == gradtx.EmptyState()
    # bf16 updates stay bf16 with float32 params
    u, _ = tx.update(jnp.array([-2.0], jnp.bfloat16), state, jnp.array([1.0]))
    assert u.dtype == jnp.bfloat16 and float(u[0]) == -1.0


def test_keep_params_nonnegative_errors():
    tx = transforms.keep_params_nonnegative()
    with pytest.raises(ValueError, match="keep_params_nonnegative needs the current parameters"):
        tx.update(jnp.ones(2), tx.init(jnp.ones(2)))
    with pytest.raises(ValueError, match="keep_params_nonnegative"):
        tx.update({"a": jnp.ones(2)}, gradtx.EmptyState(), {"b": jnp.ones(2)})


def test_zero_nans_matches_optax():
    params = small_params()
    grads = grad_sequence(params, 3)
    # NaNs in some leaves at some steps, and an infinity (kept, as in Optax)
    grads[0]["w"] = grads[0]["w"].at[1, 2].set(jnp.nan)
    grads[1]["b"][0] = grads[1]["b"][0].at[0].set(jnp.nan).at[1].set(jnp.inf)
    ours, ref = transforms.zero_nans(), optax.zero_nans()
    _same_state(ours.init(params), ref.init(params), 0, 0)
    assert isinstance(ours.init(params), transforms.ZeroNansState)
    step = jax.jit(ours.update)
    for (u, s), (ue, se) in zip(
        _states_along(ours, params, grads), _states_along(ref, params, grads), strict=True
    ):
        assert_trees_close(u, ue, 0, 0)
        _same_state(s, se, 0, 0)
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


# -- flatten ---------------------------------------------------------------------------------------


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


# -- snapshot / monitor ---------------------------------------------------------------------------


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
    _same_state(ours.init(params)[1], ref.init(params)[1])
    for (u, s), (ue, se) in zip(
        _states_along(ours, params, grads), _states_along(ref, params, grads), strict=True
    ):
        assert_trees_close(u, ue, RTOL, ATOL)
        _same_state(s[1], se[1])
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
        zip(_states_along(ours, params, grads), _states_along(ref, params, grads), strict=True)
    )
    for (u, s), (ue, se) in steps:
        assert_trees_close(u, ue, RTOL, ATOL)
        assert isinstance(s[1], transforms.MonitorState)
        _same_state(s[1], se[1])
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


# -- selective_transform --------------------------------------------------------------------------


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


# -- incremental_update / periodic_update ---------------------------------------------------------


def test_incremental_and_periodic_update_match_optax():
    rng = np.random.default_rng(3)
    new = {"w": jnp.asarray(rng.normal(size=(3, 2)), jnp.float32), "s": jnp.float32(2.0)}
    old = {"w": jnp.asarray(rng.normal(size=(3, 2)), jnp.float32), "s": jnp.float32(-1.0)}
    for tau in (0.0, 0.01, 0.5, 1.0):
        got = core.incremental_update(new, old, tau)
        assert_trees_close(got, optax.incremental_update(new, old, tau), RTOL, ATOL)
    traced = jax.jit(core.incremental_update)(new, old, 0.3)
    assert_trees_close(traced, optax.incremental_update(new, old, 0.3), RTOL, ATOL)
    for step in range(6):
        got = gradtx.periodic_update(new, old, step, 3)
        assert_trees_close(got, optax.periodic_update(new, old, step, 3), 0, 0)
    # None leaves pass through; the average keeps its dtype
    got = core.incremental_update(
        {"a": jnp.ones(2), "n": None}, {"a": jnp.zeros(2, jnp.bfloat16), "n": None}, 0.5
    )
    assert got["n"] is None and got["a"].dtype == jnp.bfloat16


def test_incremental_update_errors():
    with pytest.raises(gradtx.HyperparameterError, match=r"incremental_update.*step_size.*\[0"):
        core.incremental_update({"a": 1.0}, {"a": 0.0}, 1.5)
    with pytest.raises(ValueError, match=r"incremental_update.*'b'"):
        core.incremental_update({"a": jnp.ones(1)}, {"b": jnp.ones(1)}, 0.5)


# -- base helpers ----------------------------------------------------------------------------------


def test_init_empty_state_and_stateless_with_tree_map():
    assert core.init_empty_state({"a": jnp.ones(2)}) == gradtx.EmptyState()
    params = mixed_params()
    f = lambda g, p: g * 2.0 if p is None else g * p
    compare_to_optax(
        core.stateless_with_tree_map(f),
        optax.stateless_with_tree_map(f),
        jit=False,
        steps=3,
        params=params,
        reference_jit=False,
    )
    ours, ref = core.stateless_with_tree_map(f), optax.stateless_with_tree_map(f)
    g = grad_sequence(params, 1)[0]
    u, state = ours.update(g, ours.init(params))  # no params: f gets None
    assert_trees_close(u, ref.update(g, ref.init(params))[0], RTOL, ATOL)
    assert state == gradtx.EmptyState()
    with pytest.raises(TypeError, match="stateless_with_tree_map: f must be callable"):
        core.stateless_with_tree_map(3)
    with pytest.raises(ValueError, match="stateless_with_tree_map"):
        ours.update({"a": jnp.ones(1)}, gradtx.EmptyState(), {"b": jnp.ones(1)})


def test_with_extra_args_support():
    tx = gradtx.adam(1e-3)
    assert core.with_extra_args_support(tx) is tx  # already accepts **extra_args
    plain = optax.sgd(0.1)  # an update without **extra_args
    wrapped = core.with_extra_args_support(plain)
    params = {"w": jnp.ones(2)}
    u, _ = wrapped.update(params, wrapped.init(params), params, value=1.0, other="x")
    ref = optax.with_extra_args_support(plain)
    ue, _ = ref.update(params, ref.init(params), params, value=1.0)
    assert_trees_close(u, ue, 0, 0)
    with pytest.raises(TypeError, match="with_extra_args_support: tx must be"):
        core.with_extra_args_support(optax.sgd)


# -- scale_gradient --------------------------------------------------------------------------------


@pytest.mark.parametrize("scale", [0.5, -1.0, 0.0, 1.0, 3.0])
def test_scale_gradient_matches_optax(scale):
    x = {"a": jnp.array([1.0, -2.0, 3.0]), "b": jnp.float32(0.5)}

    def loss(fn, x):
        y = fn(x, scale)
        return jnp.sum(y["a"] ** 2) + jnp.sin(y["b"])

    value, grad = jax.value_and_grad(lambda x: loss(transforms.scale_gradient, x))(x)
    ref_value, ref_grad = jax.value_and_grad(lambda x: loss(optax.scale_gradient, x))(x)
    np.testing.assert_allclose(value, ref_value, rtol=RTOL)
    assert_trees_close(grad, ref_grad, RTOL, ATOL)


def test_scale_gradient_traced_scale_dtypes_and_errors():
    x = jnp.array([1.0, 2.0], jnp.bfloat16)

    @jax.jit
    def grad_at(x, scale):
        return jax.grad(lambda x: jnp.sum(transforms.scale_gradient(x, scale)))(x)

    g = grad_at(x, jnp.float32(0.25))
    assert g.dtype == jnp.bfloat16
    np.testing.assert_array_equal(np.asarray(g, np.float32), [0.25, 0.25])
    np.testing.assert_array_equal(transforms.scale_gradient(x, 0.25), x)  # identity forward
    with pytest.raises(gradtx.HyperparameterError, match=r"scale_gradient.*scale.*scalar"):
        transforms.scale_gradient(x, jnp.ones(2))
