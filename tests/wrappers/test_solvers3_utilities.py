"""Optax's utilities under Optax's names: ema, measure_with_ema, apply_every, periodic_update,
conditionally_transform / conditionally_mask, skip_not_finite / skip_large_updates, partition,
per_example_global_norm_clip / per_example_layer_norm_clip. Each is checked against Optax 0.2.8
over 100 steps on the mixed pytrees (eager and jit), with a learning rate that starts at one."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gradtx

from ..helpers import (
    assert_trees_close,
    grad_sequence,
    mixed_params,
    random_like,
    run,
)
from ..optax_reference import compare_to_optax, with_modes

STEPS = 100


def _lr(lib):
    """A learning rate that starts at one (so an error in its use shows at full size)."""
    return lib.linear_schedule(1.0, 0.05, 60)


def _adam(lib):
    return lib.adam(_lr(lib))


def _momentum(lib):
    return lib.sgd(_lr(lib), momentum=0.9)


# --------------------------------------------------------------------------------------------
# transformations compared with compare_to_optax
# --------------------------------------------------------------------------------------------

CASES = [
    ("ema", lambda lib: lib.chain(lib.ema(0.9), lib.scale_by_learning_rate(_lr(lib)))),
    ("ema_no_debias", lambda lib: lib.chain(lib.ema(0.8, debias=False), lib.sgd(_lr(lib)))),
    ("ema_f32_acc", lambda lib: lib.ema(0.95, accumulator_dtype=jnp.float32)),
    ("apply_every", lambda lib: lib.chain(_momentum(lib), lib.apply_every(3))),
    ("apply_every_1", lambda lib: lib.chain(lib.apply_every(1), _adam(lib))),
    (
        "conditionally_transform",
        lambda lib: lib.conditionally_transform(_adam(lib), lambda step: step % 3 != 1),
    ),
    (
        "conditionally_mask",
        lambda lib: lib.conditionally_mask(_momentum(lib), lambda step: step % 4 != 0),
    ),
    (
        "conditionally_mask_warmup",
        lambda lib: lib.conditionally_mask(_adam(lib), lambda step: step >= 10),
    ),
]


@pytest.mark.parametrize(
    ("name", "make", "use_jit"),
    with_modes(
        CASES, eager={"ema", "apply_every", "conditionally_transform", "conditionally_mask"}
    ),
)
def test_matches_optax(name, make, use_jit):
    compare_to_optax(make(gradtx), make(optax), jit=use_jit, reference_key=f"{__name__}:{name}")


def test_ema_state_matches_optax_and_keeps_dtypes():
    params = mixed_params()
    grads = grad_sequence(params, 5)
    _, ours, _ = run(gradtx.ema(0.9), params, grads)
    _, ref, _ = run(optax.ema(0.9), params, grads)
    assert int(ours.count) == int(ref.count) == 5
    assert_trees_close(ours.ema, ref.ema, 1e-6, 1e-7)
    bf16 = mixed_params(dtype=jnp.bfloat16)
    tx = gradtx.ema(0.9, accumulator_dtype=jnp.float32)
    updates, state, _ = run(tx, bf16, grad_sequence(bf16, 3))
    assert {x.dtype for x in jax.tree.leaves(updates[-1])} == {jnp.dtype(jnp.bfloat16)}
    assert {x.dtype for x in jax.tree.leaves(state.ema)} == {jnp.dtype(jnp.float32)}


# --------------------------------------------------------------------------------------------
# measure_with_ema: the output is the averaged measurement (not an update to apply)
# --------------------------------------------------------------------------------------------


def _measurements(tx, grads, params, use_jit):
    update = jax.jit(tx.update) if use_jit else tx.update
    state = tx.init(params)
    out = []
    for g in grads:
        m, state = update(g, state, params)
        out.append(m)
    return out, state


@pytest.mark.parametrize("use_jit", [False, True], ids=["eager", "jit"])
@pytest.mark.parametrize(
    "measure",
    [
        pytest.param(lambda u: optax.tree.norm(u), id="norm"),
        pytest.param(lambda u: optax.tree.norm(u) > 4.0, id="predicate"),
        pytest.param(lambda u: {"max": optax.tree.max(u), "sum": optax.tree.sum(u)}, id="tree"),
    ],
)
def test_measure_with_ema_matches_optax(measure, use_jit):
    params = mixed_params()
    grads = grad_sequence(params, STEPS)
    ours, state = _measurements(gradtx.measure_with_ema(measure, 0.9), grads, params, use_jit)
    ref, _ = _measurements(optax.measure_with_ema(measure, 0.9), grads, params, use_jit)
    for i, (a, b) in enumerate(zip(ours, ref, strict=True)):
        # atol 1e-6: the "tree" measure's sum cancels (terms ~1, sum ~6e-3), so its rounding
        # error is that of the terms, not of the sum
        assert_trees_close(a, b, 1e-5, 1e-6, msg=f"step {i}")
    # a boolean measurement is averaged in float32 from init on (Optax's init buffer is bool)
    init_state = gradtx.measure_with_ema(measure, 0.9).init(params)
    assert jax.tree.map(lambda x: x.dtype, init_state) == jax.tree.map(lambda x: x.dtype, state)


def test_measure_with_ema_abstract_init():
    params = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), mixed_params())
    state = gradtx.measure_with_ema(gradtx.tree.norm, 0.5).init(params)
    assert jax.tree.leaves(state)[-1].shape == ()


# --------------------------------------------------------------------------------------------
# periodic_update
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("use_jit", [False, True], ids=["eager", "jit"])
def test_periodic_update_matches_optax(use_jit):
    online = mixed_params()
    ours = ref = jax.tree.map(jnp.zeros_like, online)
    fns = (gradtx.periodic_update, optax.periodic_update)
    if use_jit:
        fns = tuple(jax.jit(f, static_argnums=3) for f in fns)
    refreshed = 0
    for step, g in enumerate(grad_sequence(online, STEPS)):
        online = jax.tree.map(lambda p, d: p - 0.1 * d, online, g)
        ours = fns[0](online, ours, jnp.asarray(step, jnp.int32), 7)
        ref = fns[1](online, ref, jnp.asarray(step, jnp.int32), 7)
        assert_trees_close(ours, ref, 0, 0, msg=f"step {step}")
        refreshed += step % 7 == 0
    assert refreshed == 15


def _compare_with_extra_args(ours, reference, extra_args, use_jit):
    """Like `compare_transformations` with per-step extra arguments, the reference always jitted
    (eagerly, Optax's `lax.cond` would compile anew at every step)."""
    params = mixed_params()
    grads = grad_sequence(params, len(extra_args))
    got, _, _ = run(ours, params, grads, jit=use_jit, extra_args=extra_args)
    want, _, _ = run(reference, params, grads, jit=True, extra_args=extra_args)
    for i, (a, b) in enumerate(zip(got, want, strict=True)):
        assert_trees_close(a, b, 1e-5, 1e-7, msg=f"step {i}")


# --------------------------------------------------------------------------------------------
# conditionally_*: extra arguments reach the condition with forward_extra_args
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("use_jit", [False, True], ids=["eager", "jit"])
@pytest.mark.parametrize("kind", ["conditionally_transform", "conditionally_mask"])
def test_conditional_forward_extra_args_matches_optax(kind, use_jit):
    cond = lambda step, value: jnp.logical_and(value < 0.5, step > 2)
    values = [{"value": jnp.float32(v)} for v in np.random.default_rng(3).uniform(size=STEPS)]
    ours = getattr(gradtx, kind)(_momentum(gradtx), cond, forward_extra_args=True)
    ref = getattr(optax, kind)(_momentum(optax), cond, forward_extra_args=True)
    _compare_with_extra_args(ours, ref, values, use_jit)


def test_conditional_state_counts_calls_and_keeps_inner_state():
    params = mixed_params()
    tx = gradtx.conditionally_mask(gradtx.adam(0.1), lambda step: step % 2 == 1)
    updates, state, _ = run(tx, params, grad_sequence(params, 5))
    assert int(state.step) == 5
    assert int(gradtx.tree.get(state.inner_state, "0/count")) == 2
    zeros = jax.tree.map(jnp.zeros_like, params)
    assert_trees_close(updates[0], zeros, 0, 0)


def test_conditional_keeps_bf16_updates_when_inner_widens():
    params = mixed_params(dtype=jnp.bfloat16)
    widening = optax.scale_by_adam(mu_dtype=jnp.float32)  # Optax returns float32 updates here
    tx = gradtx.conditionally_transform(widening, lambda step: step % 2 == 0)
    updates, _, _ = run(tx, params, grad_sequence(params, 3))
    assert {x.dtype for u in updates for x in jax.tree.leaves(u)} == {jnp.dtype(jnp.bfloat16)}


def test_conditional_rejects_non_scalar_condition():
    tx = gradtx.conditionally_mask(gradtx.sgd(0.1), lambda step: jnp.ones(3, bool))
    params = {"w": jnp.ones(2)}
    with pytest.raises(ValueError, match="conditionally_mask: should_transform_fn must return"):
        tx.update(params, tx.init(params), params)


# --------------------------------------------------------------------------------------------
# skip_not_finite / skip_large_updates: should-skip functions for gradient accumulation
# --------------------------------------------------------------------------------------------


def _spoiled_grads(params, steps, seed=5):
    """Random gradients, some with a NaN or an infinity, and some much larger than the rest."""
    rng = np.random.default_rng(seed)
    grads = []
    for i in range(steps):
        g = random_like(params, rng, scale=4.0 if i % 5 == 2 else 1.0)
        if i % 7 == 3:
            g["dense"]["kernel"] = g["dense"]["kernel"].at[1, 2].set(jnp.nan)
        if i % 11 == 6:
            g["layers"][1]["w"] = g["layers"][1]["w"].at[0, 1].set(jnp.inf)
            g["layers"][0] = g["layers"][0].at[3].set(-jnp.inf)
        grads.append(g)
    return grads


SKIPS = [
    ("not_finite", gradtx.skip_not_finite, optax.skip_not_finite),
    (
        "large",
        functools.partial(gradtx.skip_large_updates, max_squared_norm=45.0),
        functools.partial(optax.skip_large_updates, max_squared_norm=45.0),
    ),
]


@pytest.mark.parametrize(("name", "ours", "theirs"), SKIPS, ids=[s[0] for s in SKIPS])
def test_skip_functions_drive_multisteps_like_optax(name, ours, theirs):
    # jit only: eagerly, optax.MultiSteps compiles its lax.cond anew at every step (the
    # functions themselves are compared eagerly and under jit below)
    use_jit = True
    params = mixed_params()
    grads = _spoiled_grads(params, STEPS)
    runs = []
    for fn in (ours, theirs):
        tx = optax.MultiSteps(_adam(optax), 3, should_skip_update_fn=fn)
        runs.append(run(tx.gradient_transformation(), params, grads, jit=use_jit))
    (got, got_state, got_params), (want, want_state, want_params) = runs
    skipped = 0
    for i, (a, b) in enumerate(zip(got, want, strict=True)):
        # compare where finite; a NaN step that is not skipped (large-only) is NaN in both
        assert_trees_close(a, b, 1e-5, 1e-7, msg=f"micro-step {i}")
    assert_trees_close(got_params, want_params, 1e-5, 1e-6)
    assert jax.tree.structure(got_state.skip_state) == jax.tree.structure(want_state.skip_state)
    assert_trees_close(got_state.skip_state, want_state.skip_state, 1e-5, 0)
    should_skip = jax.jit(lambda g: ours(g, 0, None)[0])
    for g in grads:
        skipped += bool(should_skip(g))
    assert 0 < skipped < STEPS


@pytest.mark.parametrize("use_jit", [False, True], ids=["eager", "jit"])
def test_skip_function_outputs_match_optax(use_jit):
    params = mixed_params()
    for i, g in enumerate(_spoiled_grads(params, 30)):
        for name, ours, theirs in SKIPS:
            ours_fn = jax.jit(ours) if use_jit else ours
            skip, info = ours_fn(g, jnp.int32(i), params)
            ref_skip, ref_info = theirs(g, jnp.int32(i), params)
            assert skip.dtype == jnp.bool_ and skip.shape == ()
            assert bool(skip) == bool(ref_skip), (name, i)
            assert set(info) == set(ref_info)
            for key in info:
                np.testing.assert_allclose(info[key], ref_info[key], rtol=1e-6, err_msg=key)


# --------------------------------------------------------------------------------------------
# partition
# --------------------------------------------------------------------------------------------

ADAM_PATHS = ("dense/kernel", "layers/1/w", "pair/b/1")


def _label_tree(params):
    return gradtx.tree.map_with_path(lambda p, _: "adam" if p in ADAM_PATHS else "sgd", params)


def _prefix_labels(params):
    pair = type(params["pair"])("sgd", "adam")
    return {"dense": "adam", "layers": "sgd", "pair": pair, "empty": {}, "none": None}


def _partition(lib, labels, **kw):
    return lib.partition({"adam": _adam(lib), "sgd": _momentum(lib)}, labels, **kw)


PARTITIONS = [
    ("tree", lambda lib: _partition(lib, _label_tree(mixed_params()))),
    ("callable", lambda lib: _partition(lib, _label_tree)),
    ("prefix", lambda lib: _partition(lib, _prefix_labels(mixed_params()))),
    ("unused_label", lambda lib: lib.partition({"a": _adam(lib), "b": lib.sgd(1.0)}, "a")),
]


@pytest.mark.parametrize(
    ("name", "make", "use_jit"),
    with_modes(PARTITIONS, eager={"tree", "prefix"}, jit={"callable", "unused_label"}),
)
def test_partition_matches_optax(name, make, use_jit):
    # atol 1e-6: heavy-ball sums of O(1) terms cancel to ~1e-3 in places, where float32 rounding
    # (eager against a fused jitted step) leaves ~1e-7 absolute; rtol stays 1e-5
    compare_to_optax(
        make(gradtx), make(optax), jit=use_jit, atol=1e-6, reference_key=f"{__name__}:p-{name}"
    )


def test_partition_label_dict_is_a_tree_not_patterns():
    # a dict whose keys look like glob patterns is still a tree of labels for partition
    params = {"*": jnp.ones(3), "w": jnp.ones(2)}
    labels = {"*": "sgd", "w": "adam"}
    compare_to_optax(
        _partition(gradtx, labels), _partition(optax, labels), jit=True, params=params, steps=20
    )


def _scaled_by_tree():
    """A transformation scaling the updates by an extra argument shaped like them."""

    def init(params):
        return optax.EmptyState()

    def update(updates, state, params=None, *, scales=None):
        return jax.tree.map(lambda u, s: u * s, updates, scales), state

    return optax.GradientTransformationExtraArgs(init, update)


@pytest.mark.parametrize("use_jit", [False, True], ids=["eager", "jit"])
def test_partition_masks_compatible_extra_args_like_optax(use_jit):
    params = mixed_params()
    rng = np.random.default_rng(2)
    extra = [{"scales": random_like(params, rng)} for _ in range(20)]

    def make(lib):
        return lib.partition(
            {"adam": lib.chain(_scaled_by_tree(), _adam(lib)), "sgd": _scaled_by_tree()},
            _label_tree,
            mask_compatible_extra_args=True,
        )

    _compare_with_extra_args(make(gradtx), make(optax), extra, use_jit)


def test_partition_unknown_label_names_partition():
    tx = gradtx.partition({"adam": gradtx.adam(0.1)}, {"w": "adma"})
    with pytest.raises(ValueError, match=r"^partition: .*'adma'"):
        tx.init({"w": jnp.ones(2)})


# --------------------------------------------------------------------------------------------
# per-example clipping
# --------------------------------------------------------------------------------------------


def _per_example_grads(seed, batch=6):
    params = mixed_params(seed)
    rng = np.random.default_rng(seed + 10)
    return jax.tree.map(
        lambda x: jnp.asarray(
            rng.normal(size=(batch, *np.shape(x))) * rng.uniform(0.1, 3.0), x.dtype
        ),
        params,
    )


CLIPS = [0.0, 0.5, 2.0, 5.0, np.inf]


@pytest.mark.parametrize("use_jit", [False, True], ids=["eager", "jit"])
def test_per_example_global_norm_clip_matches_optax(use_jit):
    fn = (
        jax.jit(gradtx.per_example_global_norm_clip)
        if use_jit
        else gradtx.per_example_global_norm_clip
    )
    for seed in range(4):
        grads = _per_example_grads(seed)
        grads["dense"]["bias"] = grads["dense"]["bias"].at[2].set(0.0)
        for clip in CLIPS:
            total, count = fn(grads, clip)
            ref_total, ref_count = optax.per_example_global_norm_clip(grads, clip)
            assert_trees_close(total, ref_total, 1e-5, 1e-6, msg=f"clip {clip}")
            assert int(count) == int(ref_count)
    example = [jnp.array([[0, 0, 0], [0, 3, 4], [4, 0, 3], [3, 4, 0]])]
    total, count = gradtx.per_example_global_norm_clip(example, 1.25)
    np.testing.assert_allclose(total[0], [1.75, 1.75, 1.75], rtol=1e-6)
    assert int(count) == 3


@pytest.mark.parametrize("use_jit", [False, True], ids=["eager", "jit"])
@pytest.mark.parametrize("uniform", [True, False])
def test_per_example_layer_norm_clip_matches_optax(uniform, use_jit):
    fn = functools.partial(gradtx.per_example_layer_norm_clip, uniform=uniform)
    fn = jax.jit(fn) if use_jit else fn
    for seed in range(4):
        grads = _per_example_grads(seed)
        for clip in CLIPS:
            total, counts = fn(grads, clip)
            ref_total, ref_counts = optax.per_example_layer_norm_clip(grads, clip, uniform)
            assert_trees_close(total, ref_total, 1e-5, 1e-6, msg=f"clip {clip}")
            assert_trees_close(counts, ref_counts, 0, 0, msg=f"clip {clip}")


def test_per_example_clip_needs_a_batch_axis():
    with pytest.raises(ValueError, match="per_example_global_norm_clip: every array"):
        gradtx.per_example_global_norm_clip([jnp.ones((3, 2)), jnp.ones((4,))], 1.0)
    with pytest.raises(ValueError, match="per_example_layer_norm_clip: every array"):
        gradtx.per_example_layer_norm_clip({"a": jnp.ones(())}, 1.0)


# --------------------------------------------------------------------------------------------
# invalid arguments raise at construction, naming the function, the argument and the value
# --------------------------------------------------------------------------------------------

_ok = gradtx.sgd(0.1)
_cond = lambda step: step > 0
_batched = [jnp.ones((2, 3))]

BAD = [
    ("ema", lambda: gradtx.ema(1.5), ValueError, "ema: decay must be in [0.0, 1.0), got 1.5"),
    (
        "ema_debias_1",
        lambda: gradtx.ema(1.0),
        ValueError,
        "ema: decay must be in [0.0, 1.0), got 1.0",
    ),
    ("ema_debias_flag", lambda: gradtx.ema(0.9, debias="yes"), ValueError, "ema: debias must be"),
    (
        "measure_with_ema",
        lambda: gradtx.measure_with_ema(gradtx.tree.norm, -0.1),
        ValueError,
        "measure_with_ema: ema: decay must be in [0.0, 1.0), got -0.1",
    ),
    ("measure_fn", lambda: gradtx.measure_with_ema(3, 0.9), TypeError, "measure_with_ema: measure"),
    (
        "apply_every_0",
        lambda: gradtx.apply_every(0),
        ValueError,
        "apply_every: k must be an integer >= 1, got 0",
    ),
    (
        "apply_every_float",
        lambda: gradtx.apply_every(2.5),
        ValueError,
        "apply_every: k must be an integer >= 1, got 2.5",
    ),
    (
        "periodic_update",
        lambda: gradtx.periodic_update(_batched, _batched, 3, 0),
        ValueError,
        "periodic_update: update_period must be an integer >= 1, got 0",
    ),
    (
        "periodic_structure",
        lambda: gradtx.periodic_update({"a": 1.0}, {"b": 1.0}, 3, 2),
        ValueError,
        "periodic_update:",
    ),
    (
        "cond_transform_fn",
        lambda: gradtx.conditionally_transform(_ok, 3),
        TypeError,
        "conditionally_transform: should_transform_fn must be a function",
    ),
    (
        "cond_mask_inner",
        lambda: gradtx.conditionally_mask(gradtx.sgd, _cond),
        TypeError,
        "conditionally_mask: inner must be a GradientTransformation",
    ),
    (
        "cond_forward",
        lambda: gradtx.conditionally_mask(_ok, _cond, forward_extra_args="yes"),
        ValueError,
        "conditionally_mask: forward_extra_args must be True or False, got 'yes'",
    ),
    (
        "skip_large",
        lambda: gradtx.skip_large_updates(_batched, 0, None, max_squared_norm=-1.0),
        ValueError,
        "skip_large_updates: max_squared_norm must be >= 0, got -1.0",
    ),
    (
        "partition_empty",
        lambda: gradtx.partition({}, "a"),
        ValueError,
        "partition: transforms must be",
    ),
    (
        "partition_flag",
        lambda: gradtx.partition({"a": _ok}, "a", mask_compatible_extra_args=1),
        ValueError,
        "partition: mask_compatible_extra_args must be True or False, got 1",
    ),
    (
        "partition_tx",
        lambda: gradtx.partition({"a": 0.1}, "a"),
        TypeError,
        "partition: transforms['a'] must be a GradientTransformation",
    ),
    (
        "global_clip",
        lambda: gradtx.per_example_global_norm_clip(_batched, -1.0),
        ValueError,
        "per_example_global_norm_clip: l2_norm_clip must be >= 0, got -1.0",
    ),
    (
        "layer_clip",
        lambda: gradtx.per_example_layer_norm_clip(_batched, -2.0),
        ValueError,
        "per_example_layer_norm_clip: global_l2_norm_clip must be >= 0, got -2.0",
    ),
    (
        "layer_uniform",
        lambda: gradtx.per_example_layer_norm_clip(_batched, 1.0, uniform="no"),
        ValueError,
        "per_example_layer_norm_clip: uniform must be True or False, got 'no'",
    ),
]


@pytest.mark.parametrize(("name", "build", "error", "message"), BAD, ids=[b[0] for b in BAD])
def test_invalid_arguments_raise_with_name_and_value(name, build, error, message):
    with pytest.raises(error) as info:
        build()
    assert str(info.value).startswith(message), str(info.value)


# --------------------------------------------------------------------------------------------
# house rules: bf16 in -> bf16 out, state dtypes stable, init from shapes alone
# --------------------------------------------------------------------------------------------

HOUSE = [
    ("ema", lambda: gradtx.ema(0.9)),
    ("apply_every", lambda: gradtx.apply_every(2)),
    ("conditionally_transform", lambda: gradtx.conditionally_transform(_adam(gradtx), _cond)),
    ("conditionally_mask", lambda: gradtx.conditionally_mask(_momentum(gradtx), _cond)),
    ("partition", lambda: _partition(gradtx, _label_tree)),
]


@pytest.mark.parametrize(("name", "make"), HOUSE, ids=[h[0] for h in HOUSE])
def test_bf16_updates_stable_state_and_abstract_init(name, make):
    params = mixed_params(dtype=jnp.bfloat16)
    tx = make()
    state = tx.init(params)
    shapes = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), params)
    abstract = tx.init(shapes)
    assert jax.tree.structure(abstract) == jax.tree.structure(state)
    assert jax.tree.map(lambda x: x.dtype, abstract) == jax.tree.map(lambda x: x.dtype, state)
    updates, new_state, _ = run(tx, params, grad_sequence(params, 3))
    assert {x.dtype for u in updates for x in jax.tree.leaves(u)} == {jnp.dtype(jnp.bfloat16)}
    assert jax.tree.structure(new_state) == jax.tree.structure(state)
    assert jax.tree.map(lambda x: x.dtype, new_state) == jax.tree.map(lambda x: x.dtype, state)
