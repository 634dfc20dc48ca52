"""Clipping by value, per-leaf norm, global norm, block RMS and unit-wise (AGC), and the
unit-wise helpers `unitwise_norm` / `unitwise_clip` against Optax; clipping thresholds: an
infinite one leaves the updates unchanged (even when the norm overflows), a finite one still
clips, and a NaN norm stays NaN."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gradtx
from gradtx import transforms

from ..helpers import compare_to_numpy, grad_sequence, mixed_params
from ..optax_reference import compare_to_optax, with_modes
from .common import ATOL, RTOL

# The gradients of mixed_params (39 elements, standard normal) have a global norm near 6 and
# leaf RMS near 1: these thresholds clip on some steps and leaves and not on others.
MATCHES_OPTAX = [
    ("clip", lambda: gradtx.clip(0.8), lambda: optax.clip(0.8)),
    (
        "global_norm",
        lambda: gradtx.clip_by_global_norm(6.0),
        lambda: optax.clip_by_global_norm(6.0),
    ),
    ("block_rms", lambda: gradtx.clip_by_block_rms(0.9), lambda: optax.clip_by_block_rms(0.9)),
    (
        "agc",
        lambda: gradtx.adaptive_grad_clip(0.5, eps=0.1),
        lambda: optax.adaptive_grad_clip(0.5, eps=0.1),
    ),
]


@pytest.mark.parametrize(
    ("key", "ours", "reference", "jit"),
    with_modes(MATCHES_OPTAX, eager={"clip", "global_norm", "block_rms", "agc"}),
)
def test_matches_optax(key, ours, reference, jit):
    compare_to_optax(ours(), reference(), jit=jit, reference_key=f"{__name__}:{key}")


def _floats(tree):
    """`tree` with float32 device arrays for leaves, put there from NumPy (`jnp.array` compiles a
    conversion per shape)."""
    return jax.device_put(jax.tree.map(lambda x: np.asarray(x, np.float32), tree))


def _per_leaf_norm_clip(max_norm):
    """RETURNN's gradient_clip_norm / nnabla's clip_grad_by_norm: g * c / max(|g|, c)."""

    def make():
        def ref(grads, params):
            return [g * max_norm / max(np.linalg.norm(g), max_norm) for g in grads]

        return ref

    return make


def test_clip_by_norm_matches_numpy(use_jit):
    compare_to_numpy(gradtx.clip_by_norm(2.0), _per_leaf_norm_clip(2.0), jit=use_jit)


def test_clip_by_norm_clips_each_leaf_on_its_own():
    grads = _floats({"big": np.array([30.0, 40.0]), "small": np.array([0.3, 0.4])})
    tx = gradtx.clip_by_norm(5.0)
    updates, _ = jax.jit(lambda g: tx.update(g, tx.init(g)))(grads)
    np.testing.assert_allclose(updates["big"], [3.0, 4.0], rtol=1e-6)
    np.testing.assert_array_equal(updates["small"], grads["small"])


def test_global_norm_is_one_norm_over_all_leaves():
    grads = _floats({"a": np.array([3.0, 0.0]), "b": np.array([[0.0], [4.0]])})  # global norm 5
    tx = gradtx.clip_by_global_norm(1.0)

    @jax.jit
    def clipped(grads):
        updates, _ = tx.update(grads, tx.init(grads))
        unchanged, _ = gradtx.clip_by_global_norm(5.5).update(grads, ())
        return updates, unchanged

    updates, unchanged = clipped(grads)
    np.testing.assert_allclose(updates["a"], [0.6, 0.0], rtol=1e-6)
    np.testing.assert_allclose(updates["b"], [[0.0], [0.8]], rtol=1e-6)
    for k in grads:
        np.testing.assert_array_equal(unchanged[k], grads[k])


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16], ids=str)
def test_global_norm_of_low_precision_gradients_is_taken_in_float32(dtype):
    params = mixed_params(dtype=dtype)
    grads = grad_sequence(params, 1, scale=300.0)[0]  # squares overflow float16
    tx = gradtx.clip_by_global_norm(10.0)

    @jax.jit
    def clipped(grads, params):
        grads32 = gradtx.tree.cast(grads, jnp.float32)
        low, _ = tx.update(grads, tx.init(params))
        full, _ = tx.update(grads32, tx.init(grads32))
        return low, full, gradtx.tree.norm(low)

    low, full, low_norm = clipped(grads, params)
    for a, b in zip(jax.tree.leaves(low), jax.tree.leaves(full), strict=True):
        assert a.dtype == dtype
        np.testing.assert_allclose(np.asarray(a, np.float32), b, rtol=1e-2, atol=1e-3)
    assert abs(float(low_norm) - 10.0) < 0.1


@pytest.mark.parametrize(
    "tx",
    [gradtx.clip_by_global_norm(1.0), gradtx.clip_by_norm(1.0)],
    ids=["global_norm", "per_leaf_norm"],
)
def test_clipping_has_finite_gradients_at_zero(tx):
    # Differentiating through the clipping (e.g. for meta-gradients) at an all-zero gradient.
    grads = _floats({"a": np.zeros(3), "b": np.zeros((2, 2))})
    d = jax.jit(jax.grad(lambda g: gradtx.tree.sum(tx.update(g, tx.init(g))[0])))(grads)
    for leaf in jax.tree.leaves(d):
        np.testing.assert_array_equal(leaf, np.ones_like(leaf))


def test_agc_with_explicit_axis_matches_optax():
    rng = np.random.default_rng(0)
    params = _floats({"kernel": rng.normal(size=(3, 4)), "heads": rng.normal(size=(2, 3, 5))})
    compare_to_optax(
        gradtx.adaptive_grad_clip(0.2, axis=-1),
        optax.adaptive_grad_clip(0.2, axis=-1),
        jit=True,
        params=params,
        steps=100,
    )


def test_agc_needs_params_and_names_unsupported_ranks():
    tx = gradtx.adaptive_grad_clip(0.1)
    with pytest.raises(ValueError, match="adaptive_grad_clip needs the current parameters"):
        tx.update({"w": jnp.ones(3)}, tx.init({"w": jnp.ones(3)}))
    big = _floats({"w": np.ones((2,) * 6)})
    with pytest.raises(
        ValueError, match=r"adaptive_grad_clip: .*shape \(2, 2, 2, 2, 2, 2\).*axis="
    ):
        tx.update(big, tx.init(big), big)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: gradtx.clip(0.0), "clip: max_delta must be > 0, got 0.0"),
        (lambda: gradtx.clip(-1), "clip: max_delta must be > 0, got -1"),
        (lambda: gradtx.clip_by_norm(0), "clip_by_norm: max_norm must be > 0, got 0"),
        (
            lambda: gradtx.clip_by_global_norm(-1.0),
            "clip_by_global_norm: max_norm must be > 0, got -1.0",
        ),
        (
            lambda: gradtx.clip_by_block_rms(0.0),
            "clip_by_block_rms: threshold must be > 0, got 0.0",
        ),
        (
            lambda: gradtx.adaptive_grad_clip(0.0),
            "adaptive_grad_clip: clipping must be > 0, got 0.0",
        ),
        (
            lambda: gradtx.adaptive_grad_clip(0.1, eps=-1e-3),
            "adaptive_grad_clip: eps must be >= 0, got -0.001",
        ),
    ],
)
def test_invalid_thresholds_raise(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_traced_thresholds_are_accepted():
    params = mixed_params()
    g = grad_sequence(params, 1)[0]

    def step(c):
        tx = gradtx.chain(
            gradtx.clip(c),
            gradtx.clip_by_norm(c),
            gradtx.clip_by_block_rms(c),
            gradtx.adaptive_grad_clip(c),
            gradtx.clip_by_global_norm(c),
        )
        return tx.update(g, tx.init(params), params)[0]

    # both compiled: 0.7 traced, and 0.7 a Python float, concrete while the step is traced
    traced, concrete = jax.jit(step)(0.7), jax.jit(lambda: step(0.7))()
    for a, b in zip(jax.tree.leaves(traced), jax.tree.leaves(concrete), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6)


# -- unitwise_norm / unitwise_clip -------------------------------------------------------------


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
    xs = [rng.normal(size=shape).astype(np.float32) for shape, _ in _UNIT_CASES]
    axes = [axis for _, axis in _UNIT_CASES]
    norms = lambda fn: jax.jit(lambda xs: [fn(x, axis=a) for x, a in zip(xs, axes, strict=True)])
    got, expected = norms(transforms.unitwise_norm)(xs), norms(optax.transforms.unitwise_norm)(xs)
    for x, g, e in zip(xs, got, expected, strict=True):
        assert g.shape == x.shape and g.dtype == jnp.float32
        np.testing.assert_allclose(g, e, rtol=RTOL, atol=ATOL)


def test_unitwise_norm_keeps_dtype_and_rejects_unknown_ranks():
    x = np.full((4, 3), 300.0, jnp.bfloat16)  # the squares' sum overflows nothing in float32
    got = jax.jit(transforms.unitwise_norm)(x)
    assert got.dtype == jnp.bfloat16
    np.testing.assert_allclose(np.asarray(got, np.float32), 600.0, rtol=1e-2)
    rank6 = jax.ShapeDtypeStruct((1, 2, 1, 2, 1, 2), jnp.float32)
    with pytest.raises(ValueError, match=r"unitwise_norm: .*shape \(1, 2, 1, 2, 1, 2\).*axis="):
        jax.eval_shape(transforms.unitwise_norm, rank6)
    # with axis= any rank works
    assert jax.eval_shape(lambda x: transforms.unitwise_norm(x, axis=5), rank6).shape == (1, 2) * 3


def test_unitwise_clip_matches_optax():
    rng = np.random.default_rng(1)

    @jax.jit  # one compilation for all cases
    def clipped(g, max_norm):
        g_norm = optax.transforms.unitwise_norm(g)
        ours, theirs = transforms.unitwise_clip, optax.transforms.unitwise_clip
        return [
            (ours(g_norm, max_norm, g), theirs(g_norm, max_norm, g)),
            (ours(g_norm, max_norm, g, div_eps=1e-3), theirs(g_norm, max_norm, g, div_eps=1e-3)),
        ]

    for _ in range(4):
        g = rng.normal(size=(3, 4)).astype(np.float32)
        max_norm = rng.uniform(0.5, 2.5, size=(1, 4)).repeat(3, 0).astype(np.float32)
        for got, expected in clipped(g, max_norm):
            np.testing.assert_allclose(got, expected, rtol=RTOL)
    # zero gradients stay zero (the floor of the divisor is never reached)
    z = np.zeros(3, np.float32)
    np.testing.assert_array_equal(jax.jit(transforms.unitwise_clip)(z, z, z), z)


def test_unitwise_clip_errors():
    with pytest.raises(ValueError, match=r"unitwise_clip: .*same shape.*\(3,\).*\(2,\)"):
        transforms.unitwise_clip(jnp.ones(3), jnp.ones(2), jnp.ones(3))
    with pytest.raises(gradtx.HyperparameterError, match=r"unitwise_clip.*div_eps"):
        transforms.unitwise_clip(jnp.ones(3), jnp.ones(3), jnp.ones(3), div_eps=0.0)


# --------------------------------------------------------------------------------------------
# clipping thresholds: infinite, finite, and a NaN norm
# --------------------------------------------------------------------------------------------

GRADS = {
    "a": np.array([3.0, -1e30], np.float32),
    "b": np.array([4.0], np.float32),
    "c": np.zeros((2, 2), np.float32),
}


def _first_update(tx, grads):
    """The first update of `tx` on `grads`, compiled."""
    return jax.jit(lambda g: tx.update(g, tx.init(g))[0])(_floats(grads))


@pytest.mark.parametrize("name", ["clip_by_global_norm", "clip_by_norm"])
def test_an_infinite_clipping_threshold_leaves_the_updates_unchanged(name):
    """Even when the norm itself overflows to inf (the 1e30 leaf): inf / inf would be NaN."""
    out = _first_update(getattr(gradtx, name)(math.inf), GRADS)
    for key in GRADS:
        np.testing.assert_array_equal(out[key], GRADS[key])


def test_an_infinite_global_norm_threshold_matches_optax_on_ordinary_gradients():
    grads = _floats({"a": np.array([3.0, -2.0]), "b": np.array([4.0])})
    tx = gradtx.clip_by_global_norm(math.inf)
    out, reference = jax.jit(
        lambda g: (
            tx.update(g, tx.init(g))[0],
            optax.clip_by_global_norm(math.inf).update(g, optax.EmptyState())[0],
        )
    )(grads)
    for key in grads:
        np.testing.assert_array_equal(out[key], reference[key])


@pytest.mark.parametrize("name", ["clip_by_global_norm", "clip_by_norm"])
def test_a_finite_threshold_still_clips_and_a_nan_norm_stays_nan(name):
    tx = getattr(gradtx, name)(1.0)
    out = _first_update(tx, {"a": np.array([3.0, 4.0])})
    np.testing.assert_allclose(out["a"], [0.6, 0.8], rtol=1e-6)
    out = _first_update(tx, {"a": np.array([np.nan, 1.0])})
    assert np.isnan(np.asarray(out["a"])).all()


def _optimized_lines(make, leaves: int) -> int:
    """Lines of the optimized HLO of one update step on `leaves` small leaves."""
    params = {f"p{i}": jax.ShapeDtypeStruct((16 + i,), jnp.float32) for i in range(leaves)}
    tx = make()
    f = jax.jit(lambda p, g, s: tx.update(g, s, p))
    return f.lower(params, params, jax.eval_shape(tx.init, params)).compile().as_text().count("\n")


@pytest.mark.parametrize(
    "make",
    [
        lambda: gradtx.chain(gradtx.clip_by_global_norm(1.0), gradtx.adamw(1e-3)),
        lambda: gradtx.with_metrics(gradtx.adamw(1e-3)),
        lambda: gradtx.stateless(lambda u, p: gradtx.projections.projection_l2_sphere(u)),
    ],
    ids=["clip_by_global_norm", "with_metrics", "projection_l2_sphere"],
)
def test_a_global_norm_is_computed_once_not_per_leaf(make):
    """Was: the clip's test `sq <= 0` on the sum of squares (a chain of one scalar add per leaf)
    let XLA fuse the whole chain into every leaf's update: N^2 instructions, so 100 leaves
    compiled in 1.6 s (Optax: 0.4 s) and 1,000 took over ten minutes. The optimized program
    must grow linearly with the leaves: 4x the leaves, < 4.5x the instructions (6x before)."""
    small, large = _optimized_lines(make, 8), _optimized_lines(make, 32)
    assert large < 4.5 * small, (small, large)
