"""accumulate_k_steps: k micro-steps equal one inner step on the mean (or sum) of the gradients;
MultiSteps (Optax's class) and MultiStepsState against the installed Optax."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.sharding import Mesh, NamedSharding, PartitionSpec

import gradtx
from gradtx import wrappers as gw

from ..helpers import assert_trees_close, grad_sequence, mixed_params, run
from .common import adam_01, adam_moments, assert_close, normal_grads, small_tree

K, N = 3, 12  # k micro-steps per inner step, n inner steps


def _adam():
    return gradtx.chain(gradtx.scale_by_adam(), gradtx.scale_by_learning_rate(0.05))


def _mean_groups(grads, k, average=True):
    """The mean (or sum) of each group of `k` gradients, summed in order in float32 by NumPy."""
    groups = [jax.tree.map(np.asarray, grads[i : i + k]) for i in range(0, len(grads), k)]
    combine = (lambda *xs: sum(xs) / np.float32(k)) if average else (lambda *xs: sum(xs))
    return [jax.device_put(jax.tree.map(combine, *g)) for g in groups]


def _run_together(params, *runs):
    """Drive each `(tx, grads)` of `runs` from `params` (each applying its own updates), all in
    one compiled program (a `lax.scan` per run, `init` included): per run, the list of its
    updates at each step, its final state and its final params."""
    stacked = [jax.tree.map(lambda *xs: np.stack([np.asarray(x) for x in xs]), *g) for _, g in runs]

    @jax.jit
    def drive(params, stacked):
        out = []
        for (tx, _), grads in zip(runs, stacked, strict=True):

            def body(carry, g, tx=tx):
                p, s = carry
                u, s = tx.update(g, s, p)
                return (gradtx.apply_updates(p, u), s), u

            (p, s), updates = jax.lax.scan(body, (params, tx.init(params)), grads)
            out.append((updates, s, p))
        return out

    results = jax.tree.map(np.asarray, drive(params, stacked))
    return [
        ([jax.tree.map(lambda x, i=i: x[i], updates) for i in range(len(grads))], state, p)
        for (updates, state, p), (_, grads) in zip(results, runs, strict=True)
    ]


@pytest.mark.parametrize("average", [True, False], ids=["mean", "sum"])
def test_k_micro_steps_equal_one_inner_step(average):
    params = mixed_params()
    grads = grad_sequence(params, K * N)
    (ours, _, ours_params), (ref, _, ref_params) = _run_together(
        params,
        (gradtx.accumulate_k_steps(_adam(), K, average=average), grads),
        (_adam(), _mean_groups(grads, K, average)),
    )
    zeros = jax.tree.map(np.zeros_like, params)
    for i, u in enumerate(ours):
        if i % K == K - 1:
            assert_trees_close(u, ref[i // K], 1e-6, 1e-6, msg=f"micro-step {i}")
        else:
            assert_trees_close(u, zeros, 0, 0, msg=f"micro-step {i} must be exactly zero")
    assert_trees_close(ours_params, ref_params, 1e-6, 1e-6)


def test_matches_optax_multisteps():
    params = mixed_params()
    grads = grad_sequence(params, K * 6)
    (ours, _, _), (ref, _, _) = _run_together(
        params,
        (gradtx.accumulate_k_steps(optax.adam(0.05), K), grads),
        (optax.MultiSteps(optax.adam(0.05), K), grads),
    )
    for i, (a, b) in enumerate(zip(ours, ref, strict=True)):
        assert_trees_close(a, b, 1e-6, 1e-7, msg=f"micro-step {i}")


def test_k1_wraps_the_inner_transformation_with_the_same_state_layout():
    # k = 1 wraps `tx` too (returning `tx` itself would make the state tree depend on k)
    tx = _adam()
    params = mixed_params()
    one, four = gradtx.accumulate_k_steps(tx, 1), gradtx.accumulate_k_steps(tx, 4)
    assert one is not tx
    assert jax.tree.structure(one.init(params)) == jax.tree.structure(four.init(params))


def test_state_holds_one_extra_buffer_per_leaf():
    params = mixed_params()
    tx = _adam()
    acc = gradtx.accumulate_k_steps(tx, 4)
    state = acc.init(params)
    n_params = len(jax.tree.leaves(params))
    # the accumulator, the micro-step and the inner-step counter
    assert len(jax.tree.leaves(state)) == len(jax.tree.leaves(tx.init(params))) + n_params + 2
    assert jax.tree.structure(state.grad_sum) == jax.tree.structure(params)
    assert state.micro_step.dtype == jnp.int32


def test_accumulator_dtype_and_update_dtype():
    params = mixed_params(dtype=jnp.bfloat16)
    acc = gradtx.accumulate_k_steps(_adam(), 2, accumulator_dtype=jnp.float32)
    state = acc.init(params)
    assert all(x.dtype == jnp.float32 for x in jax.tree.leaves(state.grad_sum))
    step = jax.jit(acc.update)
    for g in grad_sequence(params, 4):
        updates, state = step(g, state, params)
        assert all(u.dtype == jnp.bfloat16 for u in jax.tree.leaves(updates))
        assert all(x.dtype == jnp.float32 for x in jax.tree.leaves(state.grad_sum))


class _TimesValue(gradtx.GradientTransformation):
    """Scales updates by the `value` extra argument and counts its calls (test helper)."""

    def __new__(cls):
        def init(params):
            del params
            return jnp.zeros([], jnp.int32)

        def update(updates, state, params=None, *, value):
            del params
            return jax.tree.map(lambda u: u * value, updates), state + 1

        return super().__new__(cls, init, update)


def test_inside_chain_forwards_extra_args_on_the_kth_step():
    params = {"w": jnp.ones(3)}
    tx = gradtx.chain(gradtx.zero_nans(), gradtx.accumulate_k_steps(_TimesValue(), 2))
    state = tx.init(params)
    step = jax.jit(lambda g, s, v: tx.update(g, s, params, value=v))
    u1, state = step({"w": jnp.full(3, 2.0)}, state, 10.0)
    u2, state = step({"w": jnp.full(3, 4.0)}, state, 5.0)
    np.testing.assert_array_equal(u1["w"], np.zeros(3))
    np.testing.assert_array_equal(u2["w"], np.full(3, 15.0))  # mean 3, times the 2nd value
    assert int(state[1].inner_state) == 1  # the inner transformation ran once


def test_under_pmap():
    devices = jax.devices("cpu")[:8]
    params = {"w": np.linspace(-1.0, 1.0, 6, dtype=np.float32), "b": np.zeros(2, np.float32)}
    rng = np.random.default_rng(0)
    # micro-batch gradients per device: [step, device, ...]
    per_device = [
        jax.tree.map(lambda x: rng.normal(size=(8, *x.shape)).astype(x.dtype), params)
        for _ in range(K * 4)
    ]
    acc = gradtx.accumulate_k_steps(_adam(), K)

    def step(g, s, p):
        g = jax.lax.pmean(g, axis_name="batch")
        u, s = acc.update(g, s, p)
        return gradtx.apply_updates(p, u), s

    pstep = jax.pmap(step, axis_name="batch", devices=devices)
    rep = lambda t: jax.tree.map(lambda x: np.stack([np.asarray(x)] * 8), t)
    p, s = rep(params), rep(acc.init(params))
    for g in per_device:
        p, s = pstep(g, s, p)
    mean_grads = [jax.tree.map(lambda x: x.mean(0), g) for g in per_device]
    _, _, ref_params = run(_adam(), jax.device_put(params), _mean_groups(mean_grads, K))
    p = jax.tree.map(np.asarray, p)
    for d in range(8):
        assert_trees_close(jax.tree.map(lambda x: x[d], p), ref_params, 1e-6, 1e-6, msg=f"dev {d}")


def test_under_sharded_jit():
    mesh = Mesh(np.array(jax.devices("cpu")[:8]), ("data",))
    sharded = NamedSharding(mesh, PartitionSpec("data"))
    host = {
        "w": np.linspace(-1.0, 1.0, 16, dtype=np.float32).reshape(8, 2),
        "b": np.zeros(8, np.float32),
    }
    params = jax.device_put(host)
    grads = grad_sequence(params, K * 3)
    acc = gradtx.accumulate_k_steps(_adam(), K)
    p = jax.device_put(host, sharded)  # from the host: no resharding program
    s = acc.init(p)
    step = jax.jit(lambda g, s, p: acc.update(g, s, p))
    for g in grads:
        u, s = step(jax.device_put(g, sharded), s, p)
        p = gradtx.apply_updates(p, u)
    assert p["w"].sharding.is_equivalent_to(sharded, 2)
    _, _, ref_params = run(_adam(), params, _mean_groups(grads, K))
    assert_trees_close(p, ref_params, 1e-6, 1e-6)


def test_bad_arguments_name_the_wrapper():
    with pytest.raises(ValueError, match=r"accumulate_k_steps: k must be >= 1, got 0"):
        gradtx.accumulate_k_steps(_adam(), 0)
    with pytest.raises(ValueError, match=r"accumulate_k_steps: k must be an integer, got 2.0"):
        gradtx.accumulate_k_steps(_adam(), 2.0)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="accumulate_k_steps: tx must be a GradientTransformation"):
        gradtx.accumulate_k_steps(gradtx.sgd, 2)  # type: ignore[arg-type]


def test_mismatched_tree_names_wrapper_and_path():
    acc = gradtx.accumulate_k_steps(_adam(), 2)
    state = acc.init({"a": jnp.zeros(2), "b": jnp.zeros(3)})
    with pytest.raises(ValueError, match=r"accumulate_k_steps: updates and state.grad_sum differ"):
        acc.update({"a": jnp.zeros(2), "c": jnp.zeros(3)}, state)


def _with_bad_micro_steps(grads, bad):
    """`grads` with a NaN (or an infinity) in one leaf at each micro-step index in `bad`."""
    out = []
    for i, g in enumerate(grads):
        if i in bad:
            leaves, treedef = jax.tree.flatten(g)
            leaf = np.array(leaves[i % len(leaves)])  # a writable copy
            leaf[(0,) * leaf.ndim] = np.nan if i % 2 else np.inf
            leaves[i % len(leaves)] = jax.device_put(leaf)
            g = treedef.unflatten(leaves)
        out.append(g)
    return out


@pytest.mark.parametrize("k", [1, 3])
@pytest.mark.parametrize(
    "skip_fn",
    [gradtx.skip_not_finite, lambda u, s, p: gradtx.skip_large_updates(u, s, p, 1e4)],
    ids=["not_finite", "large"],
)
def test_should_skip_update_fn_matches_optax_multisteps(k, skip_fn):
    # A skipped micro-step leaves accumulator, counters and inner state as if it never happened
    # (before, one NaN micro-step spoiled its whole window), exactly as optax.MultiSteps does.
    params = mixed_params()
    grads = _with_bad_micro_steps(grad_sequence(params, 14), {1, 4, 5, 9})
    if skip_fn is not gradtx.skip_not_finite:  # large, finite gradients instead of NaN / inf
        large = lambda x: jax.device_put(np.where(np.isfinite(x), x, np.float32(1e3)))
        grads = [jax.tree.map(large, g) for g in grads]
    (ours, ours_state, ours_params), (ref, ref_state, ref_params) = _run_together(
        params,
        (gradtx.accumulate_k_steps(optax.adam(0.05), k, should_skip_update_fn=skip_fn), grads),
        (optax.MultiSteps(optax.adam(0.05), k, should_skip_update_fn=skip_fn), grads),
    )
    for i, (a, b) in enumerate(zip(ours, ref, strict=True)):
        assert_trees_close(a, b, 1e-6, 1e-7, msg=f"micro-step {i}")
    assert_trees_close(ours_params, ref_params, 1e-6, 1e-7)
    assert all(np.all(np.isfinite(np.asarray(x))) for x in jax.tree.leaves(ours_params))
    assert int(ours_state.micro_step) == int(ref_state.mini_step)
    assert int(ours_state.gradient_step) == int(ref_state.gradient_step) == (14 - 4) // k
    assert_trees_close(ours_state.skip_state, ref_state.skip_state, 0, 0)


def test_should_skip_update_fn_is_checked():
    with pytest.raises(TypeError, match="should_skip_update_fn must be a callable"):
        gradtx.accumulate_k_steps(_adam(), 2, should_skip_update_fn=True)
    params = {"w": jnp.ones(3)}
    tx = gradtx.accumulate_k_steps(
        _adam(), 2, should_skip_update_fn=lambda u, s, p: (jnp.isnan(u["w"]), {})
    )
    with pytest.raises(ValueError, match="skip a boolean scalar, got skip of shape"):
        tx.update(params, tx.init(params), params)


# --------------------------------------------------------------------------------------------
# MultiSteps (Optax's class) and MultiStepsState, against the installed Optax
# --------------------------------------------------------------------------------------------


def _multisteps_step(ms):
    """One step of MultiSteps `ms`: (updates, state, has_updated, params with the updates)."""

    def step(g, s, p):
        u, s = ms.update(g, s, p)
        return u, s, ms.has_updated(s), optax.apply_updates(p, u)

    return step


def _run_multisteps(ours, theirs, grads, params, jit, extra_check=None):
    """Step both MultiSteps on `grads`; compare updates, every state field and has_updated.
    Optax's runs jitted (eagerly its `lax.cond` compiles at every step); ours too, in the same
    program, with `jit`, and eagerly otherwise."""
    ours_step, ref_step = _multisteps_step(ours), _multisteps_step(theirs)
    if jit:
        s_ours, s_ref = jax.jit(lambda p: (ours.init(p), theirs.init(p)))(params)
        both = jax.jit(lambda g, so, sr, po, pr: (ours_step(g, so, po), ref_step(g, sr, pr)))
    else:
        s_ours, s_ref = ours.init(params), jax.jit(theirs.init)(params)
        ref_step = jax.jit(ref_step)
        both = lambda g, so, sr, po, pr: (ours_step(g, so, po), ref_step(g, sr, pr))
    p_ours = p_ref = params
    for i, g in enumerate(grads):
        (u, s_ours, ours_updated, p_next), (v, s_ref, ref_updated, p_ref) = both(
            g, s_ours, s_ref, p_ours, p_ref
        )
        msg = f"step {i}"
        assert_close(u, v, msg)
        assert int(s_ours.mini_step) == int(s_ref.mini_step), msg
        assert int(s_ours.gradient_step) == int(s_ref.gradient_step), msg
        assert_close(s_ours.acc_grads, s_ref.acc_grads, msg)
        assert_close(adam_moments(s_ours.inner_opt_state), adam_moments(s_ref.inner_opt_state), msg)
        assert_close(s_ours.skip_state, s_ref.skip_state, msg)
        assert bool(ours_updated) == bool(ref_updated), msg
        if extra_check is not None:
            extra_check(i, u, s_ours)
        p_ours = p_next
    assert_close(p_ours, p_ref, "final params")
    return s_ours


@pytest.mark.parametrize(
    ("use_grad_mean", "jit", "lib"),
    [(True, True, "adam"), (False, True, "adam"), (True, False, "sgd")],
    ids=["mean-jit", "sum-jit", "mean-eager"],
)
def test_multisteps_matches_optax(use_grad_mean, jit, lib):
    params = small_tree()
    inner = {"adam": adam_01, "sgd": lambda m: m.sgd(0.1, momentum=0.9)}[lib]
    ours = gw.MultiSteps(inner(gradtx), 3, use_grad_mean=use_grad_mean)
    theirs = optax.MultiSteps(inner(optax), 3, use_grad_mean=use_grad_mean)
    state = _run_multisteps(ours, theirs, normal_grads(params, 7), params, jit)
    assert type(state) is gw.MultiStepsState
    assert int(state.gradient_step) == 2 and int(state.mini_step) == 1


def test_multisteps_state_layout_and_attributes():
    assert gw.MultiStepsState._fields == optax.MultiStepsState._fields
    assert gw.MultiStepsState._field_defaults == {"skip_state": ()}
    inner = adam_01(gradtx)
    ms = gw.MultiSteps(inner, every_k_schedule=2)
    assert ms.inner_opt is inner
    state = ms.init(small_tree())
    ref = optax.MultiSteps(adam_01(optax), 2).init(small_tree())
    assert jax.tree.structure(state.acc_grads) == jax.tree.structure(ref.acc_grads)
    assert all(x.dtype == jnp.float32 for x in jax.tree.leaves(state.acc_grads))
    assert state.mini_step.dtype == state.gradient_step.dtype == jnp.int32
    assert not bool(ms.has_updated(state))
    # the transformation form, alone and inside both chains
    tx = ms.gradient_transformation()
    assert isinstance(tx, gradtx.GradientTransformation)
    params, grads = small_tree(), normal_grads(small_tree(), 2)
    ms = gw.MultiSteps(gradtx.sgd(0.1), every_k_schedule=2)
    for chained in (gradtx.chain(ms), optax.chain(ms.gradient_transformation())):
        s = chained.init(params)
        for g in grads:
            u, s = chained.update(g, s, params)
        want = jax.tree.map(lambda a, b: -0.1 * (a + b) / 2, *grads)
        assert_close(u, want)


def test_multisteps_with_a_schedule_of_k_under_jit():
    params = small_tree()
    k = lambda step: jnp.where(step < 2, 1, 3)  # batch size grows after 2 steps
    ours = gw.MultiSteps(adam_01(gradtx), k)
    theirs = optax.MultiSteps(adam_01(optax), k)
    state = _run_multisteps(ours, theirs, normal_grads(params, 8, seed=3), params, jit=True)
    assert int(state.gradient_step) == 4


def test_multisteps_skip_not_finite_matches_optax_and_drops_the_micro_step():
    params = small_tree()
    grads = normal_grads(params, 7, seed=4)
    grads = jax.tree.map(np.array, grads)  # writable copies
    for g in jax.tree.leaves(grads[1]):
        g[..., 0] = np.nan
    grads[4]["b"]["c"][1] = np.inf
    grads = jax.device_put(grads)
    ours = gw.MultiSteps(adam_01(gradtx), 2, should_skip_update_fn=gradtx.skip_not_finite)
    theirs = optax.MultiSteps(adam_01(optax), 2, should_skip_update_fn=optax.skip_not_finite)

    def check(i, u, s):
        if i in (1, 4):
            assert bool(s.skip_state["should_skip"])
            assert all(np.all(np.asarray(x) == 0) for x in jax.tree.leaves(u))
        assert all(np.all(np.isfinite(np.asarray(x))) for x in jax.tree.leaves(u))

    state = _run_multisteps(ours, theirs, grads, params, jit=True, extra_check=check)
    assert int(state.skip_state["num_not_finite"]) == 0
    assert int(state.gradient_step) == 2 and int(state.mini_step) == 1  # 5 micro-steps kept


def test_multisteps_skip_large_updates_under_jit():
    params = small_tree()
    grads = normal_grads(params, 6, seed=5, scale=1.0)
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
    params = jax.device_put(jax.tree.map(lambda p: np.asarray(p, jnp.bfloat16), small_tree()))
    grads = normal_grads(params, 4, seed=6)
    ours = gw.MultiSteps(gradtx.sgd(1.0), 2)
    theirs = optax.MultiSteps(optax.sgd(1.0), 2)
    state = _run_multisteps(ours, theirs, grads, params, jit=True)
    assert all(x.dtype == jnp.float32 for x in jax.tree.leaves(state.acc_grads))
    u, _ = jax.eval_shape(ours.update, grads[0], ours.init(params), params)
    assert all(x.dtype == jnp.bfloat16 for x in jax.tree.leaves(u))
    none = gw.MultiSteps(gradtx.sgd(1.0), 2, accumulator_dtype=None).init(params)
    assert all(x.dtype == jnp.bfloat16 for x in jax.tree.leaves(none.acc_grads))


def test_multisteps_state_is_stable_through_scan_and_inits_from_shapes():
    params = small_tree()
    ms = gw.MultiSteps(adam_01(gradtx), 2, should_skip_update_fn=gradtx.skip_not_finite)
    shapes = jax.tree.map(lambda p: jax.ShapeDtypeStruct(p.shape, p.dtype), params)
    state = ms.init(shapes)
    assert jax.tree.structure(state) == jax.tree.structure(ms.init(params))
    grads = jax.tree.map(lambda *g: np.stack(g), *normal_grads(params, 4, seed=14))

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
    params = small_tree()
    state = ms.init(params)
    for i, g in enumerate(normal_grads(params, 4)):
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
    params = small_tree()
    ms = gw.MultiSteps(tx, 2, should_skip_update_fn=lambda u, s, p: (jnp.zeros(2, bool), ()))
    with pytest.raises(ValueError, match="boolean scalar"):
        ms.update(params, ms.init(params), params)
    with pytest.raises(ValueError, match="MultiSteps: expected a MultiStepsState"):
        gw.MultiSteps(tx, 2).update(params, gradtx.EmptyState(), params)


# --------------------------------------------------------------------------------------------
# a state restored under a smaller period (k changed between save and restore)
# --------------------------------------------------------------------------------------------


_PARAMS, _G = {"w": np.zeros(2, np.float32)}, {"w": np.array([1.0, 2.0], np.float32)}


def _accumulate_sgd(k, average, skip):
    skip_fn = gradtx.skip_not_finite if skip else None
    return gradtx.accumulate_k_steps(
        gradtx.sgd(1.0), k, average=average, should_skip_update_fn=skip_fn
    )


@functools.cache
def _saved_under_k4(average, skip):
    """The state after 3 micro-steps on `_G` under k = 4, in one compiled program (shared by the
    eager and the jit test)."""
    tx = _accumulate_sgd(4, average, skip)

    @jax.jit
    def steps(params, g):
        state = tx.init(params)
        for _ in range(3):
            _, state = tx.update(g, state, params)
        return state

    return steps(_PARAMS, _G)


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
@pytest.mark.parametrize("average", [True, False], ids=["mean", "sum"])
@pytest.mark.parametrize("skip", [False, True], ids=["plain", "should_skip"])
def test_accumulate_state_restored_under_a_smaller_k_steps_at_once(average, skip, jit):
    # 3 micro-steps saved under k = 4, restored (by migrate) under k = 2 or k = 1: the cycle is
    # already full, so the next micro-step is an inner step on the mean (sum) of all 4 gradients,
    # and the period of the new k follows.
    params, g = jax.device_put((_PARAMS, _G))
    make = lambda k: _accumulate_sgd(k, average, skip)
    saved = _saved_under_k4(average, skip)
    total = 1.0 if average else 4.0
    for k in (2, 1):
        tx = make(k)
        state, _ = gradtx.migrate(saved, tx, params)
        assert int(state.micro_step) == 3
        update = jax.jit(tx.update) if jit else tx.update
        u, state = update(g, state, params)
        np.testing.assert_allclose(u["w"], -total * g["w"], rtol=1e-6)
        assert int(state.micro_step) == 0 and int(state.gradient_step) == 1
        for i in range(2 * k):
            u, state = update(g, state, params)
            emits = i % k == k - 1
            want = -(1.0 if average else k) * g["w"] if emits else np.zeros(2)
            np.testing.assert_allclose(u["w"], want, rtol=1e-6, err_msg=f"k={k}, call {i}")
        assert int(state.gradient_step) == 3


@pytest.mark.parametrize("use_grad_mean", [True, False], ids=["mean", "sum"])
def test_multisteps_state_restored_under_a_smaller_k_steps_at_once(use_grad_mean):
    # as accumulate_k_steps: an inner step on all the accumulated gradients, at once (counting
    # the micro-step modulo k instead would drop the 4 gradients of the mean, or carry the sum
    # into the next cycle)
    params = {"w": jnp.zeros(2)}
    make = lambda k: gw.MultiSteps(gradtx.sgd(1.0), k, use_grad_mean=use_grad_mean)
    grads = [{"w": jnp.array([1.0, 2.0]) * (i + 1)} for i in range(4)]
    state = make(4).init(params)
    for g in grads[:3]:
        _, state = make(4).update(g, state, params)
    tx = make(2)
    u, state = tx.update(grads[3], state, params)
    total = sum(g["w"] for g in grads)
    np.testing.assert_allclose(u["w"], -(total / 4 if use_grad_mean else total), rtol=1e-6)
    assert int(state.mini_step) == 0 and int(state.gradient_step) == 1
    assert bool(tx.has_updated(state))
    u, state = tx.update(grads[0], state, params)
    np.testing.assert_array_equal(u["w"], np.zeros(2))
    u, state = tx.update(grads[1], state, params)
    want = (grads[0]["w"] + grads[1]["w"]) / (2 if use_grad_mean else 1)
    np.testing.assert_allclose(u["w"], -want, rtol=1e-6)
