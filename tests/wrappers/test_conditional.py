"""conditionally_transform / conditionally_mask, ConditionFn, and the should-skip functions
skip_not_finite / skip_large_updates, against Optax 0.2.8 (100 steps on the mixed pytrees,
eager and jit, a learning rate that starts at one); argument errors, bf16 updates."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gradtx
from gradtx import wrappers as gw

from ..helpers import assert_trees_close, grad_sequence, mixed_params, random_like, run
from ..optax_reference import compare_to_optax, with_modes
from .common import (
    RTOL,
    STEPS,
    adam_from_one,
    assert_bf16_updates_stable_state_and_abstract_init,
    assert_close,
    assert_raises_starting_with,
    compare_with_extra_args,
    momentum_from_one,
    normal_grads,
    small_tree,
)

CASES = [
    (
        "conditionally_transform",
        lambda lib: lib.conditionally_transform(adam_from_one(lib), lambda step: step % 3 != 1),
    ),
    (
        "conditionally_mask",
        lambda lib: lib.conditionally_mask(momentum_from_one(lib), lambda step: step % 4 != 0),
    ),
    (
        "conditionally_mask_warmup",
        lambda lib: lib.conditionally_mask(adam_from_one(lib), lambda step: step >= 10),
    ),
]


@pytest.mark.parametrize(
    ("name", "make", "use_jit"),
    with_modes(CASES, eager={"conditionally_mask", "conditionally_transform"}),
)
def test_matches_optax(name, make, use_jit):
    compare_to_optax(make(gradtx), make(optax), jit=use_jit, reference_key=f"{__name__}:{name}")


# --------------------------------------------------------------------------------------------
# extra arguments reach the condition with forward_extra_args
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("use_jit", [False, True], ids=["eager", "jit"])
@pytest.mark.parametrize("kind", ["conditionally_transform", "conditionally_mask"])
def test_conditional_forward_extra_args_matches_optax(kind, use_jit):
    cond = lambda step, value: jnp.logical_and(value < 0.5, step > 2)
    values = [{"value": jnp.float32(v)} for v in np.random.default_rng(3).uniform(size=STEPS)]
    ours = getattr(gradtx, kind)(momentum_from_one(gradtx), cond, forward_extra_args=True)
    ref = getattr(optax, kind)(momentum_from_one(optax), cond, forward_extra_args=True)
    compare_with_extra_args(ours, ref, values, use_jit)


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


def test_condition_fn_typed_predicate_matches_optax():
    every_other: gw.ConditionFn = lambda step: step % 2 == 0
    params = small_tree()
    ours = gradtx.conditionally_transform(gradtx.scale(3.0), every_other)
    theirs = optax.conditionally_transform(optax.scale(3.0), every_other)
    s, r = ours.init(params), theirs.init(params)
    for g in normal_grads(params, 3, seed=13):
        u, s = ours.update(g, s, params)
        v, r = theirs.update(g, r, params)
        assert_close(u, v)
    assert hasattr(optax, "ConditionFn") or hasattr(optax.transforms, "ConditionFn")


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
        tx = optax.MultiSteps(adam_from_one(optax), 3, should_skip_update_fn=fn)
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
# invalid arguments raise at construction, naming the function, the argument and the value
# --------------------------------------------------------------------------------------------

_ok = gradtx.sgd(0.1)
_cond = lambda step: step > 0
_batched = [jnp.ones((2, 3))]

BAD = [
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
]


@pytest.mark.parametrize(("name", "build", "error", "message"), BAD, ids=[b[0] for b in BAD])
def test_invalid_arguments_raise_with_name_and_value(name, build, error, message):
    assert_raises_starting_with(build, error, message)


# --------------------------------------------------------------------------------------------
# bf16 in -> bf16 out, state dtypes stable, init from shapes alone
# --------------------------------------------------------------------------------------------

HOUSE = [
    (
        "conditionally_transform",
        lambda: gradtx.conditionally_transform(adam_from_one(gradtx), _cond),
    ),
    ("conditionally_mask", lambda: gradtx.conditionally_mask(momentum_from_one(gradtx), _cond)),
]


@pytest.mark.parametrize(("name", "make"), HOUSE, ids=[h[0] for h in HOUSE])
def test_bf16_updates_stable_state_and_abstract_init(name, make):
    assert_bf16_updates_stable_state_and_abstract_init(make)
