"""gradtx.projections against optax.projections, a float64 NumPy reference, and edge cases."""

from __future__ import annotations

import functools
import inspect

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from gradtx import projections as gp

from .helpers import mixed_params

op = optax.projections

RTOL, ATOL = 1e-5, 1e-6
SEEDS = [0, 1, 2]
SCALED = [  # (name, scales): functions of (tree, scale)
    ("projection_simplex", [1, 0.3, 7.0]),
    ("projection_l1_sphere", [1, 0.3, 7.0]),
    ("projection_l1_ball", [1, 0.3, 40.0]),
    ("projection_l2_sphere", [1, 0.3, 7.0]),
    ("projection_l2_ball", [1, 0.3, 40.0]),
    ("projection_linf_ball", [1, 0.3, 7.0]),
]


def _tree(seed, spread=1.0):
    """`mixed_params(seed)` times `spread`, scaled in NumPy and put on the device (an eager
    multiply would compile one program per leaf shape)."""
    return jax.tree.map(lambda x: jax.device_put(spread * np.asarray(x)), mixed_params(seed))


def _leaves64(tree):
    return [np.asarray(x, np.float64) for x in jax.tree.leaves(tree)]


def _flat64(tree):
    return np.concatenate([np.ravel(x) for x in _leaves64(tree)])


def assert_trees_close(ours, theirs, rtol=RTOL, atol=ATOL):
    assert jax.tree.structure(ours) == jax.tree.structure(theirs)
    for a, b in zip(jax.tree.leaves(ours), jax.tree.leaves(theirs), strict=True):
        assert a.shape == b.shape and a.dtype == b.dtype
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=rtol, atol=atol)


def simplex_reference(v, s):
    """The projection onto {p >= 0, sum p = s} in float64, by bisection on the threshold."""
    v = np.asarray(v, np.float64)
    lo, hi = v.min() - s - 1.0, v.max()
    for _ in range(200):
        tau = 0.5 * (lo + hi)
        lo, hi = (tau, hi) if np.maximum(v - tau, 0).sum() > s else (lo, tau)
    return np.maximum(v - 0.5 * (lo + hi), 0)


# --------------------------------------------------------------------------------------------
# Agreement with Optax on random trees
# --------------------------------------------------------------------------------------------


ALL = [n for n in dir(op) if n.startswith("projection_")]


def test_every_optax_projection_with_its_signature():
    assert sorted(gp.__all__) == sorted(ALL) and len(ALL) == 12
    for name in ALL:
        ours, theirs = inspect.signature(getattr(gp, name)), inspect.signature(getattr(op, name))
        assert [(p.name, p.default, p.kind) for p in ours.parameters.values()] == [
            (p.name, p.default, p.kind) for p in theirs.parameters.values()
        ], name


def _in_set(name, x, p, s):
    """`p` (flat float64) lies in `name`'s set of scale `s`, and is `x` when `x` is in it."""
    tol = 1e-5 * max(s, 1e-3)
    inside = {
        "projection_simplex": lambda v: np.all(v >= 0) and abs(v.sum() - s) <= tol,
        "projection_l1_sphere": lambda v: abs(np.abs(v).sum() - s) <= tol,
        "projection_l1_ball": lambda v: np.abs(v).sum() <= s + tol,
        "projection_l2_sphere": lambda v: abs(np.linalg.norm(v) - s) <= tol,
        "projection_l2_ball": lambda v: np.linalg.norm(v) <= s + tol,
        "projection_linf_ball": lambda v: np.all(np.abs(v) <= np.float32(s)),
    }[name]
    assert inside(p), (name, s)
    if inside(x) and name.endswith("_ball"):
        np.testing.assert_array_equal(p, x)  # already inside: unchanged, to the bit


@pytest.mark.parametrize(("name", "scales"), SCALED, ids=[n for n, _ in SCALED])
def test_scaled_projections_match_optax(name, scales):
    # one program for both sides, compiled for an int and a float scale: the trees share a
    # structure and the scale is traced
    ours, theirs = getattr(gp, name), getattr(op, name)
    both = jax.jit(lambda tree, s: (ours(tree, s), theirs(tree, s)))
    for seed in SEEDS:
        for spread in (0.01, 1.0, 3.0):  # inside and outside the sets
            tree = _tree(seed, spread)
            for s in scales:
                out, expected = both(tree, s)
                assert_trees_close(out, expected)
                _in_set(name, _flat64(tree), _flat64(out), s)


def test_separable_projections_match_optax():
    @jax.jit  # one program for the three seeds (their trees share a structure)
    def per_seed(tree, lower, upper):
        zeros = jax.tree.map(jnp.zeros_like, upper)
        return [
            (gp.projection_non_negative(tree), op.projection_non_negative(tree)),
            (gp.projection_box(tree, lower, upper), op.projection_box(tree, lower, upper)),
            (gp.projection_hypercube(tree, upper), op.projection_box(tree, zeros, upper)),
        ]

    for seed in SEEDS:
        tree = _tree(seed, 2.0)
        rng = np.random.default_rng(seed)
        lower = jax.tree.map(lambda x: rng.uniform(-1, 0, x.shape).astype(x.dtype), tree)
        upper = jax.tree.map(lambda x: rng.uniform(0, 1, x.shape).astype(x.dtype), tree)
        for ours, theirs in per_seed(tree, lower, upper):  # relu, box, hypercube
            assert_trees_close(ours, theirs)

    # optax broadcasts scalar bounds onto a single array only (its tree.map needs the bounds'
    # structure); gradtx broadcasts them onto every leaf of a tree too
    @jax.jit  # one program for the scalar bounds
    def scalar_bounds(leaf):
        tree = {"a": leaf, "b": -leaf[0]}
        return [
            (gp.projection_box(leaf, -0.5, 0.2), op.projection_box(leaf, -0.5, 0.2)),
            *[
                (gp.projection_hypercube(leaf, s), op.projection_hypercube(leaf, s))
                for s in (1, 0.4)
            ],
            (
                gp.projection_box(tree, -0.5, 0.2),
                jax.tree.map(lambda x: jnp.clip(x, -0.5, 0.2), tree),
            ),
            (
                gp.projection_hypercube(tree, 0.4),
                jax.tree.map(lambda x: jnp.clip(x, 0.0, 0.4), tree),
            ),
        ]

    for ours, theirs in scalar_bounds(_tree(0, 2.0)["dense"]["kernel"]):
        assert_trees_close(ours, theirs)


@pytest.mark.parametrize("name", ["projection_hyperplane", "projection_halfspace"])
def test_affine_projections_match_optax(name):
    ours, theirs = jax.jit(getattr(gp, name)), jax.jit(getattr(op, name))
    vdot = jax.jit(optax.tree.vdot)  # one program (an eager vdot compiles one per leaf shape)
    for seed in SEEDS:
        x, a = _tree(seed), _tree(seed + 10)
        inner = float(vdot(x, a))
        for b in (inner - 2.0, inner + 0.5, 0.0, 3.0):
            out = ours(x, a, b)
            assert_trees_close(out, theirs(x, a, b))
            on = float(np.dot(_flat64(a), _flat64(out)))
            if name == "projection_hyperplane" or b < inner:
                np.testing.assert_allclose(on, b, atol=1e-4)
            else:  # inside the halfspace: unchanged, to the bit
                np.testing.assert_array_equal(_flat64(out), _flat64(x))


def test_projection_vector_matches_optax():
    ours, theirs = jax.jit(gp.projection_vector), jax.jit(op.projection_vector)
    for seed in SEEDS:
        x, a = _tree(seed), _tree(seed + 10)
        assert_trees_close(ours(x, a), theirs(x, a))
        assert_trees_close(ours(x, x), x)  # x is on its own line


def test_simplex_is_the_exact_projection():
    rng = np.random.default_rng(3)
    fn = jax.jit(gp.projection_simplex)
    for n, s, spread in [(1, 1.0, 1.0), (50, 1.0, 0.1), (50, 2.5, 3.0), (50, 0.01, 1.0)]:
        v = rng.normal(size=n) * spread
        p = np.asarray(fn(jnp.asarray(v, jnp.float32), s), np.float64)
        np.testing.assert_allclose(p, simplex_reference(v, s), rtol=1e-5, atol=1e-6)


# --------------------------------------------------------------------------------------------
# Gradients (Optax differentiates all of these)
# --------------------------------------------------------------------------------------------


def _loss(projection, weights):
    """A scalar loss of a projection whose gradient is a dense tree."""
    return lambda *args: optax.tree.vdot(weights, projection(*args))


@pytest.mark.parametrize(("name", "scales"), SCALED, ids=[n for n, _ in SCALED])
def test_gradients_match_optax(name, scales):
    tree, weights = _tree(0, 0.7), _tree(5)
    ours_grad = jax.jit(jax.grad(_loss(getattr(gp, name), weights), argnums=(0, 1)))
    theirs_grad = jax.jit(jax.grad(_loss(getattr(op, name), weights), argnums=(0, 1)))
    for s in scales[:2]:
        ours, theirs = ours_grad(tree, float(s)), theirs_grad(tree, float(s))
        assert_trees_close(ours, theirs, rtol=1e-4, atol=1e-5)


def test_gradients_of_the_other_projections_match_optax():
    @jax.jit  # one program for every case, both sides
    def grads(x, a, w):
        b = optax.tree.vdot(x, a) - 1.0  # x outside the halfspace
        lower = jax.tree.map(lambda t: jnp.full_like(t, -0.5), x)
        upper = jax.tree.map(lambda t: jnp.full_like(t, 0.5), x)
        cases = [
            ("projection_hyperplane", (x, a, b), (0, 1, 2)),
            ("projection_halfspace", (x, a, b), (0, 1, 2)),
            ("projection_vector", (x, a), (0, 1)),
            ("projection_non_negative", (x,), 0),
            ("projection_box", (x, lower, upper), 0),
        ]
        return [
            tuple(
                jax.grad(_loss(getattr(lib, name), w), argnums=argnums)(*args) for lib in (gp, op)
            )
            for name, args, argnums in cases
        ]

    rng = np.random.default_rng(0)
    x, a, w = (
        {
            "u": rng.normal(size=3).astype(np.float32),
            "v": rng.normal(size=(2, 2)).astype(np.float32),
        }
        for _ in range(3)
    )
    for ours, theirs in grads(x, a, w):
        assert_trees_close(ours, theirs, rtol=1e-4, atol=1e-5)


def test_jit_vmap_and_traced_scale():
    batch = jnp.asarray(np.random.default_rng(0).normal(size=(4, 6)), jnp.float32)
    scales = jnp.asarray([0.5, 1.0, 2.0, 0.0], jnp.float32)
    ours = jax.jit(jax.vmap(gp.projection_simplex))(batch, scales)
    for row, s, p in zip(np.asarray(batch), np.asarray(scales), np.asarray(ours), strict=True):
        np.testing.assert_allclose(p, simplex_reference(row, s), rtol=1e-5, atol=1e-6)
    # a traced negative scale is not checked (no error at trace time)
    jax.jit(gp.projection_l2_ball)(batch, jnp.float32(-1.0))


# --------------------------------------------------------------------------------------------
# Edge cases
# --------------------------------------------------------------------------------------------


def test_simplex_ties():
    cases = [
        ([1.0, 1.0, 1.0, 1.0], 1.0, [0.25] * 4),
        ([2.0, 2.0, 0.0, 0.0], 1.0, [0.5, 0.5, 0.0, 0.0]),
        ([0.5, 0.5, 0.5, -1.0], 1.0, [1 / 3] * 3 + [0.0]),
        ([3.0, 1.0, 1.0, 1.0], 1.0, [1.0, 0.0, 0.0, 0.0]),  # ties exactly at the threshold
        ([0.0, 0.0, 0.0, 0.0], 1.0, [0.25] * 4),
        ([2.0, 2.0, 0.0, -5.0], 3.0, [1.5, 1.5, 0.0, 0.0]),
    ]
    # values and Jacobians (in the vector and the scale), one compilation per side
    ours_fn = jax.jit(
        lambda v, s: (
            (gp.projection_simplex(v, s), *jax.jacfwd(gp.projection_simplex, (0, 1))(v, s))
        )
    )
    theirs_fn = jax.jit(
        lambda v, s: (
            (op.projection_simplex(v, s), *jax.jacfwd(op.projection_simplex, (0, 1))(v, s))
        )
    )
    for v, s, expected in cases:
        v = jnp.asarray(v, jnp.float32)
        ours, theirs = ours_fn(v, s), theirs_fn(v, s)
        np.testing.assert_allclose(np.asarray(ours[0]), expected, rtol=1e-6, atol=1e-7)
        for a, b in zip(ours, theirs, strict=True):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-6)


def test_zero_vector():
    @jax.jit  # one program for every value below
    def values(zero, x):
        balls = (gp.projection_l1_ball, gp.projection_l2_ball, gp.projection_linf_ball)
        return {
            "balls": [fn(zero, 2.0) for fn in balls],
            "simplex": gp.projection_simplex(zero, 2.0),
            "l2_sphere": gp.projection_l2_sphere(zero, 2.0),
            "l1_sphere": gp.projection_l1_sphere(zero, 2.0),
            "optax_l2_sphere": op.projection_l2_sphere(zero, 2.0),
            "grad": jax.grad(lambda t: optax.tree.sum(gp.projection_l2_ball(t, 1.0)))(zero),
            "vector": gp.projection_vector(x, zero),
        }

    zero = {"a": np.zeros(3, np.float32), "b": np.zeros((2, 2), np.float32)}
    out = values(zero, jax.tree.map(np.ones_like, zero))
    leaves = lambda t: np.concatenate([np.ravel(x) for x in jax.tree.leaves(t)])
    for ball in out["balls"]:  # l1, l2, linf
        np.testing.assert_array_equal(leaves(ball), 0.0)
    np.testing.assert_allclose(leaves(out["simplex"]), 2.0 / 7)
    # every point of a sphere is a projection of 0; optax 0.2.8 returns NaN (l2) or 0 (l1, off
    # the sphere): gradtx returns the point with equal elements
    np.testing.assert_allclose(leaves(out["l2_sphere"]), 2.0 / np.sqrt(7))
    np.testing.assert_allclose(leaves(out["l1_sphere"]), 2.0 / 7)
    assert np.all(np.isnan(leaves(out["optax_l2_sphere"])))
    # the gradient of the l2 ball at 0 is the identity, and finite
    np.testing.assert_array_equal(leaves(out["grad"]), 1.0)
    # projection onto the line spanned by a = 0 is the point 0 (optax: NaN)
    np.testing.assert_array_equal(leaves(out["vector"]), 0.0)


def test_affine_sets_with_a_zero_normal():
    @jax.jit  # one program for every value below
    def values(x, zero, a):
        hyper, half = gp.projection_hyperplane, gp.projection_halfspace
        return {
            "whole": [hyper(x, zero, 0.0), half(x, zero, 0.0), half(x, zero, 1.0)],
            "empty": [hyper(x, zero, 1.0), half(x, zero, -1.0)],
            "grad": jax.grad(lambda a: optax.tree.sum(half(x, a, 0.5)))(a),
        }

    x = {"a": np.asarray([1.0, -2.0], np.float32)}
    out = values(x, {"a": np.zeros(2, np.float32)}, {"a": np.asarray([1.0, 1.0], np.float32)})
    # the whole space: x itself (optax returns NaN for b = 0)
    for p in out["whole"]:  # hyperplane b = 0, halfspace b = 0 and 1
        np.testing.assert_array_equal(p["a"], x["a"])
    # an empty set: no projection exists, NaN
    for p in out["empty"]:  # hyperplane b = 1, halfspace b = -1
        assert np.all(np.isnan(p["a"]))
    # a gradient through a non-degenerate case stays finite
    assert np.all(np.isfinite(out["grad"]["a"]))


def test_l1_sphere_with_zero_elements_inside_the_ball():
    # optax keeps sign(0) = 0 and lands off the sphere ([0.55, 0]); either sign is optimal
    x = np.asarray([0.1, 0.0], np.float32)
    both = jax.jit(lambda x: (gp.projection_l1_sphere(x, 1.0), op.projection_l1_sphere(x, 1.0)))
    ours, theirs = (np.asarray(p) for p in both(x))
    np.testing.assert_allclose(ours, [0.55, 0.45], rtol=1e-6)
    np.testing.assert_allclose(theirs, [0.55, 0.0], rtol=1e-6)  # |.|_1 = 0.55: not on the sphere
    # the nearest point of the sphere |y1| + |y2| = 1, by brute force over its 4 edges
    t = np.linspace(0.0, 1.0, 20001)
    sphere = np.concatenate(
        [np.stack([sx * t, sy * (1 - t)], 1) for sx in (1, -1) for sy in (1, -1)]
    )
    best = np.min(np.sum((sphere - np.asarray(x)) ** 2, axis=1))
    np.testing.assert_allclose(np.sum((ours - np.asarray(x)) ** 2), best, rtol=1e-6)


def test_scale_zero_gives_zeros():
    tree = {"a": np.asarray([1.0, -2.0, 3.0], np.float32), "b": np.asarray(-0.5, np.float32)}
    names = [name for name, _ in SCALED]
    outs = jax.jit(lambda t: [getattr(gp, name)(t, 0.0) for name in names])(tree)  # one program
    for name, out in zip(names, outs, strict=True):
        assert all(np.all(np.asarray(x) == 0) for x in jax.tree.leaves(out)), name


def test_dtypes_and_structure_are_kept():
    x, a = _tree(0), _tree(1)
    tree = jax.tree.map(lambda y: jax.ShapeDtypeStruct(y.shape, jnp.bfloat16), x)
    shape = jax.eval_shape  # structure and dtypes without compiling
    outs = [shape(functools.partial(getattr(gp, n), scale=0.5), tree) for n, _ in SCALED]
    outs += [shape(gp.projection_non_negative, tree)]
    outs += [shape(functools.partial(gp.projection_box, lower=-0.1, upper=0.1), tree)]
    outs += [shape(gp.projection_hypercube, tree)]
    outs += [shape(gp.projection_vector, tree, tree)]
    outs += [shape(functools.partial(gp.projection_hyperplane, b=1.0), tree, tree)]
    outs += [shape(functools.partial(gp.projection_halfspace, b=1.0), tree, tree)]
    for out in outs:
        assert jax.tree.structure(out) == jax.tree.structure(tree)
        assert all(y.dtype == jnp.bfloat16 for y in jax.tree.leaves(out))
    for fn in (gp.projection_hyperplane, gp.projection_halfspace):
        assert jax.tree.structure(shape(fn, x, a, 0.0)) == jax.tree.structure(x)
    # integer input to a non-separable projection comes back as float32
    p = jax.jit(gp.projection_simplex)(np.asarray([3, 1, 0], np.int32))
    assert p.dtype == jnp.float32
    np.testing.assert_allclose(np.asarray(p), [1.0, 0.0, 0.0])
    # an empty tree
    assert gp.projection_simplex({}) == {}
    assert gp.projection_l2_sphere({"e": None}) == {"e": None}


# --------------------------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", [n for n, _ in SCALED])
def test_negative_or_non_scalar_scale_is_refused(name):
    fn = functools.partial(getattr(gp, name), _tree(0))
    with pytest.raises(ValueError, match=rf"{name}: scale must be >= 0, got -1.0"):
        fn(-1.0)
    with pytest.raises(ValueError, match=rf"{name}: scale must be"):
        fn(jax.device_put(np.asarray([1.0, 2.0], np.float32)))
    with pytest.raises(ValueError, match=rf"{name}: scale must be"):
        fn(float("nan"))
    if name != "projection_linf_ball":  # inf means no constraint there
        with pytest.raises(ValueError, match=rf"{name}: scale must be finite"):
            fn(float("inf"))
    else:
        assert_trees_close(fn(float("inf")), _tree(0))


def test_other_bad_inputs():
    tree = {"a": jnp.ones(3), "b": jnp.ones(2)}
    with pytest.raises(ValueError, match=r"projection_box: lower must be <= upper, got lower=1.0"):
        gp.projection_box(tree, 1.0, 0.0)
    with pytest.raises(ValueError, match=r"projection_box: bounds must not be NaN"):
        gp.projection_box(tree, float("nan"), 0.0)
    with pytest.raises(ValueError, match=r"projection_box: tree and upper differ at the root"):
        gp.projection_box(tree, 0.0, {"a": 1.0})
    with pytest.raises(ValueError, match=r"projection_hypercube: scale must be >= 0, got -2"):
        gp.projection_hypercube(tree, {"a": 1.0, "b": -2.0})
    with pytest.raises(ValueError, match=r"projection_vector: x and a differ"):
        gp.projection_vector(tree, {"a": jnp.ones(3)})
    with pytest.raises(ValueError, match=r"projection_hyperplane: b must be a scalar"):
        gp.projection_hyperplane(tree, tree, jnp.ones(2))
    with pytest.raises(ValueError, match=r"projection_halfspace: x and a differ"):
        gp.projection_halfspace(tree, {"a": jnp.ones(3), "c": jnp.ones(2)}, 0.0)
