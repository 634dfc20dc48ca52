"""Optax's wrapper-level names: MultiSteps / MultiStepsState / ShouldSkipUpdateFunction,
ApplyEvery, LookaheadParams (lookahead on fast and slow params), PartitionState, ConditionFn,
freeze's MaskedState layout and MaskedNode, each checked against the installed Optax."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gradtx
from gradtx import wrappers as gw

RTOL, ATOL = 2e-5, 1e-6


def _params():
    return {"w": jnp.arange(6.0).reshape(2, 3) / 7.0, "b": {"c": jnp.array([0.5, -1.0])}}


def _grads(params, n, seed=0, scale=1.0):
    rng = np.random.default_rng(seed)
    return [
        jax.tree.map(lambda p: jnp.asarray(scale * rng.normal(size=p.shape), p.dtype), params)
        for _ in range(n)
    ]


def _close(a, b, msg=""):
    la, lb = jax.tree.leaves(a), jax.tree.leaves(b)
    assert len(la) == len(lb), msg
    for x, y in zip(la, lb, strict=True):
        np.testing.assert_allclose(
            np.asarray(x, np.float64), np.asarray(y, np.float64), RTOL, ATOL, err_msg=msg
        )


def _adam(lib):
    return lib.adam(0.1)


def _moments(state):
    """count, mu and nu of the Adam states in `state` (gradtx's and Optax's chains differ in
    their stateless parts)."""
    found = jax.tree.leaves(state, is_leaf=lambda x: hasattr(x, "mu"))
    return [(x.count, x.mu, x.nu) for x in found if hasattr(x, "mu")]


# --------------------------------------------------------------------------------------------
# MultiSteps
# --------------------------------------------------------------------------------------------


def _run_multisteps(ours, theirs, grads, params, jit, extra_check=None):
    """Step both MultiSteps on `grads`; compare updates, every state field and has_updated.
    Optax's runs jitted (eagerly its `lax.cond` compiles at every step); ours as `jit` says."""
    s_ours, s_ref = ours.init(params), theirs.init(params)
    up_ours, up_ref = ours.update, jax.jit(theirs.update)
    if jit:
        up_ours = jax.jit(up_ours)
    p_ours = p_ref = params
    for i, g in enumerate(grads):
        u, s_ours = up_ours(g, s_ours, p_ours)
        v, s_ref = up_ref(g, s_ref, p_ref)
        msg = f"step {i}"
        _close(u, v, msg)
        assert int(s_ours.mini_step) == int(s_ref.mini_step), msg
        assert int(s_ours.gradient_step) == int(s_ref.gradient_step), msg
        _close(s_ours.acc_grads, s_ref.acc_grads, msg)
        _close(_moments(s_ours.inner_opt_state), _moments(s_ref.inner_opt_state), msg)
        _close(s_ours.skip_state, s_ref.skip_state, msg)
        assert bool(ours.has_updated(s_ours)) == bool(theirs.has_updated(s_ref)), msg
        if extra_check is not None:
            extra_check(i, u, s_ours)
        p_ours, p_ref = optax.apply_updates(p_ours, u), optax.apply_updates(p_ref, v)
    _close(p_ours, p_ref, "final params")
    return s_ours


@pytest.mark.parametrize(
    ("use_grad_mean", "jit", "lib"),
    [(True, True, "adam"), (False, True, "adam"), (True, False, "sgd")],
    ids=["mean-jit", "sum-jit", "mean-eager"],
)
def test_multisteps_matches_optax(use_grad_mean, jit, lib):
    params = _params()
    inner = {"adam": _adam, "sgd": lambda m: m.sgd(0.1, momentum=0.9)}[lib]
    ours = gw.MultiSteps(inner(gradtx), 3, use_grad_mean=use_grad_mean)
    theirs = optax.MultiSteps(inner(optax), 3, use_grad_mean=use_grad_mean)
    state = _run_multisteps(ours, theirs, _grads(params, 7), params, jit)
    assert type(state) is gw.MultiStepsState
    assert int(state.gradient_step) == 2 and int(state.mini_step) == 1


def test_multisteps_state_layout_and_attributes():
    assert gw.MultiStepsState._fields == optax.MultiStepsState._fields
    assert gw.MultiStepsState._field_defaults == {"skip_state": ()}
    inner = _adam(gradtx)
    ms = gw.MultiSteps(inner, every_k_schedule=2)
    assert ms.inner_opt is inner
    state = ms.init(_params())
    ref = optax.MultiSteps(_adam(optax), 2).init(_params())
    assert jax.tree.structure(state.acc_grads) == jax.tree.structure(ref.acc_grads)
    assert all(x.dtype == jnp.float32 for x in jax.tree.leaves(state.acc_grads))
    assert state.mini_step.dtype == state.gradient_step.dtype == jnp.int32
    assert not bool(ms.has_updated(state))
    # the transformation form, alone and inside both chains
    tx = ms.gradient_transformation()
    assert isinstance(tx, gradtx.GradientTransformation)
    params, grads = _params(), _grads(_params(), 2)
    ms = gw.MultiSteps(gradtx.sgd(0.1), every_k_schedule=2)
    for chained in (gradtx.chain(ms), optax.chain(ms.gradient_transformation())):
        s = chained.init(params)
        for g in grads:
            u, s = chained.update(g, s, params)
        want = jax.tree.map(lambda a, b: -0.1 * (a + b) / 2, *grads)
        _close(u, want)


def test_multisteps_with_a_schedule_of_k_under_jit():
    params = _params()
    k = lambda step: jnp.where(step < 2, 1, 3)  # batch size grows after 2 steps
    ours = gw.MultiSteps(_adam(gradtx), k)
    theirs = optax.MultiSteps(_adam(optax), k)
    state = _run_multisteps(ours, theirs, _grads(params, 8, seed=3), params, jit=True)
    assert int(state.gradient_step) == 4


def test_multisteps_skip_not_finite_matches_optax_and_drops_the_micro_step():
    params = _params()
    grads = _grads(params, 7, seed=4)
    grads[1] = jax.tree.map(lambda g: g.at[..., 0].set(jnp.nan), grads[1])
    grads[4]["b"]["c"] = grads[4]["b"]["c"].at[1].set(jnp.inf)
    ours = gw.MultiSteps(_adam(gradtx), 2, should_skip_update_fn=gradtx.skip_not_finite)
    theirs = optax.MultiSteps(_adam(optax), 2, should_skip_update_fn=optax.skip_not_finite)

    def check(i, u, s):
        if i in (1, 4):
            assert bool(s.skip_state["should_skip"])
            assert all(np.all(np.asarray(x) == 0) for x in jax.tree.leaves(u))
        assert all(np.all(np.isfinite(np.asarray(x))) for x in jax.tree.leaves(u))

    state = _run_multisteps(ours, theirs, grads, params, jit=True, extra_check=check)
    assert int(state.skip_state["num_not_finite"]) == 0
    assert int(state.gradient_step) == 2 and int(state.mini_step) == 1  # 5 micro-steps kept


def test_multisteps_skip_large_updates_under_jit():
    params = _params()
    grads = _grads(params, 6, seed=5, scale=1.0)
    grads[2] = jax.tree.map(lambda g: 100.0 * g, grads[2])
    ours = gw.MultiSteps(
        gradtx.sgd(0.1),
        2,
        should_skip_update_fn=functools.partial(gradtx.skip_large_updates, max_squared_norm=50.0),
    )
    theirs = optax.MultiSteps(
        optax.sgd(0.1),
        2,
        should_skip_update_fn=functools.partial(optax.skip_large_updates, max_squared_norm=50.0),
    )
    _run_multisteps(ours, theirs, grads, params, jit=True)


def test_multisteps_bf16_gradients_keep_their_dtype_with_a_float32_accumulator():
    params = jax.tree.map(lambda p: p.astype(jnp.bfloat16), _params())
    grads = _grads(params, 4, seed=6)
    ours = gw.MultiSteps(gradtx.sgd(1.0), 2)
    theirs = optax.MultiSteps(optax.sgd(1.0), 2)
    state = _run_multisteps(ours, theirs, grads, params, jit=True)
    assert all(x.dtype == jnp.float32 for x in jax.tree.leaves(state.acc_grads))
    u, _ = ours.update(grads[0], ours.init(params), params)
    assert all(x.dtype == jnp.bfloat16 for x in jax.tree.leaves(u))
    none = gw.MultiSteps(gradtx.sgd(1.0), 2, accumulator_dtype=None).init(params)
    assert all(x.dtype == jnp.bfloat16 for x in jax.tree.leaves(none.acc_grads))


def test_multisteps_state_is_stable_through_scan_and_inits_from_shapes():
    params = _params()
    ms = gw.MultiSteps(_adam(gradtx), 2, should_skip_update_fn=gradtx.skip_not_finite)
    shapes = jax.tree.map(lambda p: jax.ShapeDtypeStruct(p.shape, p.dtype), params)
    state = ms.init(shapes)
    assert jax.tree.structure(state) == jax.tree.structure(ms.init(params))
    grads = jax.tree.map(lambda *g: jnp.stack(g), *_grads(params, 4, seed=14))

    def body(state, g):
        u, state = ms.update(g, state, params)
        return state, u

    state, _ = jax.lax.scan(body, state, grads)
    assert int(state.gradient_step) == 2 and bool(ms.has_updated(state))


def test_multisteps_forwards_extra_args_on_the_emitting_micro_step():
    seen = []

    def inner_update(updates, state, params=None, *, value):
        seen.append(float(value))
        return updates, state

    inner = gradtx.GradientTransformation(lambda p: gradtx.EmptyState(), inner_update)
    ms = gw.MultiSteps(inner, 2)
    params = _params()
    state = ms.init(params)
    for i, g in enumerate(_grads(params, 4)):
        _, state = ms.update(g, state, params, value=jnp.asarray(float(i)))
    assert seen == [1.0, 3.0]  # eagerly, only the emitting micro-steps run the inner update


def test_multisteps_errors():
    tx = gradtx.sgd(0.1)
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match="MultiSteps: every_k_schedule"):
            gw.MultiSteps(tx, bad)
    with pytest.raises(ValueError, match="MultiSteps: use_grad_mean"):
        gw.MultiSteps(tx, 2, use_grad_mean="yes")
    with pytest.raises(TypeError, match="MultiSteps: should_skip_update_fn"):
        gw.MultiSteps(tx, 2, should_skip_update_fn=3)
    with pytest.raises(TypeError, match="MultiSteps: opt"):
        gw.MultiSteps(gradtx.sgd, 2)
    with pytest.raises(ValueError, match="MultiSteps: accumulator_dtype"):
        gw.MultiSteps(tx, 2, accumulator_dtype=jnp.int32)
    params = _params()
    ms = gw.MultiSteps(tx, 2, should_skip_update_fn=lambda u, s, p: (jnp.zeros(2, bool), ()))
    with pytest.raises(ValueError, match="boolean scalar"):
        ms.update(params, ms.init(params), params)
    with pytest.raises(ValueError, match="MultiSteps: expected a MultiStepsState"):
        gw.MultiSteps(tx, 2).update(params, gradtx.EmptyState(), params)


def test_should_skip_predicates_match_optax():
    hook: gw.ShouldSkipUpdateFunction = gradtx.skip_not_finite
    assert callable(hook)
    inputs = [
        {"a": jnp.ones(3), "b": jnp.array([2.0, -1.0])},
        {"a": jnp.array([1.0, jnp.nan, jnp.inf]), "b": jnp.array([-jnp.inf, 0.0])},
        {"a": jnp.full(3, 2.0), "b": jnp.zeros(2)},  # squared norm exactly 12
    ]
    for u in inputs:
        for ours, theirs in [
            (gradtx.skip_not_finite, optax.skip_not_finite),
            (
                functools.partial(gradtx.skip_large_updates, max_squared_norm=12.0),
                functools.partial(optax.skip_large_updates, max_squared_norm=12.0),
            ),
        ]:
            a, sa = jax.jit(ours)(u, jnp.zeros([], jnp.int32), None)
            b, sb = jax.jit(theirs)(u, jnp.zeros([], jnp.int32), None)
            assert bool(a) == bool(b) and sa.keys() == sb.keys()
            for key in sa:
                np.testing.assert_allclose(np.asarray(sa[key]), np.asarray(sb[key]), RTOL)


# --------------------------------------------------------------------------------------------
# ApplyEvery
# --------------------------------------------------------------------------------------------


def test_apply_every_state_is_optax_apply_every():
    assert gw.ApplyEvery is gw.ApplyEveryState
    assert gw.ApplyEvery.__name__ == "ApplyEvery"
    assert gw.ApplyEvery._fields == optax.ApplyEvery._fields
    params = _params()
    ours, theirs = gradtx.apply_every(3), optax.apply_every(3)
    s, r = ours.init(params), theirs.init(params)
    assert type(s) is gw.ApplyEvery
    for g in _grads(params, 7, seed=7):
        u, s = ours.update(g, s, params)
        v, r = theirs.update(g, r, params)
        _close(u, v)
        assert int(s.count) == int(r.count)
        _close(s.grad_acc, r.grad_acc)


# --------------------------------------------------------------------------------------------
# lookahead: LookaheadParams (Optax's form) and plain params (gradtx's)
# --------------------------------------------------------------------------------------------


def test_lookahead_params_init_synced():
    params = _params()
    both = gw.LookaheadParams.init_synced(params)
    assert both.fast is params and both.slow is params
    assert gw.LookaheadParams._fields == optax.LookaheadParams._fields


@pytest.mark.parametrize(
    ("reset_state", "jit"), [(False, False), (True, True)], ids=["eager", "reset-jit"]
)
def test_lookahead_with_lookahead_params_matches_optax(reset_state, jit):
    params = _params()
    ours = gradtx.lookahead(_adam(gradtx), 3, 0.4, reset_state=reset_state)
    theirs = optax.lookahead(_adam(optax), 3, 0.4, reset_state=reset_state)
    p_ours = gw.LookaheadParams.init_synced(params)
    p_ref = optax.LookaheadParams.init_synced(params)
    s_ours, s_ref = ours.init(p_ours), theirs.init(p_ref)
    assert s_ours.slow == ()  # no slow copy: it is in the params
    up_ours, up_ref = ours.update, theirs.update
    if jit:
        up_ours, up_ref = jax.jit(up_ours), jax.jit(up_ref)
    for i, g in enumerate(_grads(params, 8, seed=8)):
        u, s_ours = up_ours(g, s_ours, p_ours)
        v, s_ref = up_ref(g, s_ref, p_ref)
        assert type(u) is gw.LookaheadParams
        _close(u.fast, v.fast, f"fast, step {i}")
        _close(u.slow, v.slow, f"slow, step {i}")
        _close(_moments(s_ours.fast_state), _moments(s_ref.fast_state), f"state, step {i}")
        assert int(s_ours.steps_since_sync) == int(s_ref.steps_since_sync)
        p_ours = gradtx.apply_updates(p_ours, u)
        p_ref = optax.apply_updates(p_ref, v)
        _close(p_ours.fast, p_ref.fast)
        _close(p_ours.slow, p_ref.slow)
        if i % 3 == 2:  # right after a sync fast and slow agree
            _close(p_ours.fast, p_ours.slow)


def test_lookahead_plain_params_track_optax_fast_and_slow():
    params = _params()
    ours = gradtx.lookahead(_adam(gradtx), 2, 0.5)
    theirs = optax.lookahead(_adam(optax), 2, 0.5)
    p_ours, p_ref = params, optax.LookaheadParams.init_synced(params)
    s_ours, s_ref = ours.init(p_ours), theirs.init(p_ref)
    for i, g in enumerate(_grads(params, 6, seed=9)):
        u, s_ours = ours.update(g, s_ours, p_ours)
        v, s_ref = theirs.update(g, s_ref, p_ref)
        p_ours, p_ref = gradtx.apply_updates(p_ours, u), optax.apply_updates(p_ref, v)
        _close(p_ours, p_ref.fast, f"fast, step {i}")
        _close(s_ours.slow, p_ref.slow, f"slow, step {i}")
        _close(_moments(s_ours.inner_state), _moments(s_ref.fast_state))


def test_lookahead_state_from_plain_init_accepts_lookahead_params():
    # Optax allows init on the fast params alone, then update on LookaheadParams
    params = _params()
    ours = gradtx.lookahead(gradtx.sgd(0.3), 2, 0.5)
    theirs = optax.lookahead(optax.sgd(0.3), 2, 0.5)
    s_ours, s_ref = ours.init(params), theirs.init(params)
    p = gw.LookaheadParams.init_synced(params)
    for g in _grads(params, 4, seed=10):
        u, s_ours = ours.update(g, s_ours, p)
        v, s_ref = theirs.update(g, s_ref, optax.LookaheadParams(*p))
        _close(u, v)
        p = gradtx.apply_updates(p, u)


def test_lookahead_errors():
    params = _params()
    tx = gradtx.lookahead(gradtx.sgd(0.1), 2, 0.5)
    state = tx.init(gw.LookaheadParams.init_synced(params))
    with pytest.raises(ValueError, match="lookahead: the state was made by init on Lookahead"):
        tx.update(params, state, params)
    with pytest.raises(ValueError, match="lookahead"):
        tx.update(params, state, None)
    with pytest.raises(ValueError, match="lookahead: sync_period"):
        gradtx.lookahead(gradtx.sgd(0.1), 0, 0.5)
    with pytest.raises(ValueError, match="lookahead: reset_state"):
        gradtx.lookahead(gradtx.sgd(0.1), 2, 0.5, reset_state=1)
    with pytest.raises(ValueError, match="lookahead: expected a LookaheadState"):
        tx.update(params, optax.lookahead(optax.sgd(0.1), 2, 0.5).init(params), params)


# --------------------------------------------------------------------------------------------
# PartitionState, freeze's MaskedState, MaskedNode, ConditionFn
# --------------------------------------------------------------------------------------------


def test_partition_state_is_optax_partition_state():
    assert gw.PartitionState is gw.MultiTransformState
    assert gw.PartitionState.__name__ == "PartitionState"
    assert gw.PartitionState._fields == optax.PartitionState._fields
    params = _params()
    labels = {"w": "adam", "b": "sgd"}
    ours = gradtx.partition({"adam": _adam(gradtx), "sgd": gradtx.sgd(0.1)}, labels)
    theirs = optax.partition({"adam": _adam(optax), "sgd": optax.sgd(0.1)}, labels)
    s, r = ours.init(params), theirs.init(params)
    assert type(s) is gw.PartitionState and set(s.inner_states) == set(r.inner_states)
    assert type(gradtx.multi_transform({"a": gradtx.sgd(1.0)}, "a").init(params)) is (
        gw.PartitionState
    )
    for g in _grads(params, 3, seed=11):
        u, s = ours.update(g, s, params)
        v, r = theirs.update(g, r, params)
        _close(u, v)


@pytest.mark.parametrize("mask", [{"w": True, "b": False}, True, False], ids=str)
def test_freeze_state_is_optax_masked_state(mask):
    params = _params()
    ours, theirs = gradtx.freeze(mask), optax.freeze(mask)
    s, r = ours.init(params), theirs.init(params)
    assert type(s) is gradtx.MaskedState and type(s.inner_state) is gradtx.EmptyState
    assert type(r).__name__ == "MaskedState" and type(r.inner_state).__name__ == "EmptyState"
    assert gradtx.MaskedState._fields == type(r)._fields
    for g in _grads(params, 2, seed=12):
        u, s = ours.update(g, s, params)
        v, r = theirs.update(g, r, params)
        jax.tree.map(np.testing.assert_array_equal, u, v)
    assert type(s) is gradtx.MaskedState
    # a state from before (EmptyState) still works: the state holds no buffers
    u, legacy = ours.update(params, gradtx.EmptyState(), params)
    assert legacy == gradtx.EmptyState()
    jax.tree.map(np.testing.assert_array_equal, u, ours.update(params, s, params)[0])


def test_masked_node_is_an_empty_tree_in_pruned_states():
    assert jax.tree.leaves(gw.MaskedNode()) == []
    assert type(optax.MaskedNode()).__name__ == gw.MaskedNode.__name__
    state = gradtx.masked(gradtx.adam(0.1), False).init(jnp.ones(2))
    nodes = jax.tree.leaves(state, is_leaf=lambda x: isinstance(x, gw.MaskedNode))
    assert any(isinstance(x, gw.MaskedNode) for x in nodes)


def test_condition_fn_typed_predicate_matches_optax():
    every_other: gw.ConditionFn = lambda step: step % 2 == 0
    params = _params()
    ours = gradtx.conditionally_transform(gradtx.scale(3.0), every_other)
    theirs = optax.conditionally_transform(optax.scale(3.0), every_other)
    s, r = ours.init(params), theirs.init(params)
    for g in _grads(params, 3, seed=13):
        u, s = ours.update(g, s, params)
        v, r = theirs.update(g, r, params)
        _close(u, v)
    assert hasattr(optax, "ConditionFn") or hasattr(optax.transforms, "ConditionFn")
