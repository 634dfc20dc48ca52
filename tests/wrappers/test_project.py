"""project, box, non_negative, l2_ball: params + update lands in the set."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradtx

from ..helpers import mixed_params

STEPS = 100


def _push(direction):
    """A constant gradient that drives every parameter toward `direction` (+1 up, -1 down)."""
    return lambda params: jax.tree.map(lambda x: -direction * jnp.ones_like(x), params)


def _run_pushed(tx, params, direction):
    step = jax.jit(
        lambda p, s: (lambda u, s: (gradtx.apply_updates(p, u), s))(
            *tx.update(_push(direction)(p), s, p)
        )
    )
    state = jax.jit(tx.init)(params)
    history = []
    for _ in range(STEPS):
        params, state = step(params, state)
        history.append(params)
    return history


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16], ids=str)
@pytest.mark.parametrize("direction", [1, -1], ids=["up", "down"])
def test_box_keeps_params_inside_for_100_steps(dtype, direction):
    params = mixed_params(dtype=dtype)
    # a tree of bounds, put on the device from NumPy (jnp.full_like compiles per shape)
    lower = jax.tree.map(lambda x: jax.device_put(np.full(x.shape, -0.3, x.dtype)), params)
    tx = gradtx.chain(gradtx.adam(0.05), gradtx.box(lower, 0.7))
    low, high = (np.float32(np.asarray(b, dtype)) for b in (-0.3, 0.7))  # rounded to dtype
    for p in _run_pushed(tx, params, direction):
        for x in jax.tree.leaves(p):
            x = np.asarray(x, np.float32)
            assert np.all(x >= low)
            assert np.all(x <= high)
    final = np.concatenate([np.ravel(np.asarray(x, np.float32)) for x in jax.tree.leaves(p)])
    np.testing.assert_allclose(final, 0.7 if direction > 0 else -0.3, rtol=1e-2)


def test_box_bounds_hold_exactly_from_far_outside():
    # p + (0.1 - p) rounds above 0.1 for about a quarter of these values without the correction
    rng = np.random.default_rng(0)
    params = {"q": rng.uniform(1.0, 100.0, 4096).astype(np.float32)}
    tx = gradtx.box(-0.1, 0.1)

    @jax.jit  # one program: a zero gradient's update, applied
    def step(params):
        updates, _ = tx.update(jax.tree.map(jnp.zeros_like, params), tx.init(params), params)
        return gradtx.apply_updates(params, updates)

    q = params["q"]
    naive = q + (np.float32(0.1) - q)
    assert np.sum(naive > np.float32(0.1)) > 100  # the case the correction is for
    new = np.asarray(step(params)["q"])
    assert np.all(new <= np.float32(0.1))
    assert np.all(new >= np.float32(0.1) - 2 * np.spacing(q))  # as close as float32 allows


def test_updates_inside_the_box_are_unchanged():
    params = {"a": np.array([0.0, 0.5, 0.9], np.float32), "b": np.array([2.0], np.float32)}
    g = {"a": np.array([0.1, -0.2, 0.5], np.float32), "b": np.array([0.3], np.float32)}
    update = jax.jit(lambda g, p: gradtx.box(-1.0, 1.0).update(g, gradtx.EmptyState(), p)[0])
    u = jax.tree.map(np.asarray, update(g, params))  # the sums below in NumPy, float32
    np.testing.assert_array_equal(u["a"][:2], g["a"][:2])
    np.testing.assert_allclose(params["a"][2] + u["a"][2], 1.0)
    np.testing.assert_allclose(params["b"] + u["b"], [1.0])  # pulled back in


def test_non_negative_for_100_steps():
    params = mixed_params()
    tx = gradtx.chain(gradtx.sgd(0.2, momentum=0.9), gradtx.non_negative())
    for p in _run_pushed(tx, params, -1):
        assert all(np.all(np.asarray(x) >= 0) for x in jax.tree.leaves(p))
    assert all(np.all(np.asarray(x) == 0) for x in jax.tree.leaves(p))


def test_l2_ball_for_100_steps():
    params = jax.tree.map(lambda x: jax.device_put(0.1 * np.asarray(x)), mixed_params())
    tx = gradtx.chain(gradtx.adam(0.1), gradtx.l2_ball(2.0))
    norm = jax.jit(gradtx.tree.norm)  # one program (eager, one per operation and shape)
    norms = [float(norm(p)) for p in _run_pushed(tx, params, 1)]
    assert max(norms) <= 2.0 * (1 + 1e-6)
    assert norms[-1] == pytest.approx(2.0, rel=1e-5)  # pushed to the boundary


def test_project_with_a_custom_set_and_errors():
    # the probability simplex for one leaf, via sorting (Duchi et al. 2008)
    def simplex(tree):
        def leaf(v):
            s = jnp.sort(v)[::-1]
            css = jnp.cumsum(s) - 1.0
            k = jnp.arange(1, v.size + 1)
            rho = jnp.max(jnp.where(s - css / k > 0, k, 0))
            return jnp.maximum(v - css[rho - 1] / rho, 0.0)

        return jax.tree.map(leaf, tree)

    params = {"w": jax.device_put(np.full(4, 0.25, np.float32))}
    tx = gradtx.chain(gradtx.sgd(0.3), gradtx.project(simplex))
    rng = np.random.default_rng(0)
    state = tx.init(params)

    @jax.jit  # one program for the 20 steps
    def step(g, state, params):
        u, state = tx.update(g, state, params)
        return gradtx.apply_updates(params, u), state

    for _ in range(20):
        params, state = step({"w": rng.normal(size=4).astype(np.float32)}, state, params)
        assert np.all(np.asarray(params["w"]) >= 0)
        assert float(np.sum(np.asarray(params["w"]))) == pytest.approx(1.0, abs=1e-6)
    with pytest.raises(ValueError, match=r"box: lower must be <= upper, got lower=1.0, upper=0.0"):
        gradtx.box(1.0, 0.0)
    with pytest.raises(ValueError, match=r"l2_ball: radius must be > 0, got 0.0"):
        gradtx.l2_ball(0.0)
    with pytest.raises(ValueError, match=r"non_negative needs the current parameters"):
        gradtx.non_negative().update(params, gradtx.EmptyState())
    with pytest.raises(ValueError, match=r"project: params and fn\(params \+ updates\) differ"):
        gradtx.project(lambda p: {"v": p["w"]}).update(params, gradtx.EmptyState(), params)


def test_wrappers_land_on_the_projections_of_gradtx_and_optax():
    import functools

    import optax

    from gradtx import projections

    params, raw = mixed_params(1), mixed_params(2)
    cases = [
        (gradtx.box(-0.4, 0.6), optax.projections.projection_box, (-0.4, 0.6)),
        (gradtx.non_negative(), optax.projections.projection_non_negative, ()),
        (gradtx.l2_ball(2.0), optax.projections.projection_l2_ball, (2.0,)),
        (
            gradtx.project(functools.partial(projections.projection_l1_ball, scale=1.5)),
            optax.projections.projection_l1_ball,
            (1.5,),
        ),
        (
            gradtx.project(projections.projection_simplex),
            optax.projections.projection_simplex,
            (),
        ),
    ]

    @jax.jit  # every case, ours and the reference, in one program
    def land(params, raw):
        updates = jax.tree.map(lambda x: 3.0 * x + 1.0, raw)
        candidate = gradtx.apply_updates(params, updates)
        out = []
        for tx, reference, args in cases:
            u, _ = tx.update(updates, tx.init(params), params)
            new = gradtx.apply_updates(params, u)
            if reference is optax.projections.projection_box:  # optax needs per-leaf bounds
                args = tuple(
                    jax.tree.map(lambda x, b=b: jnp.full_like(x, b), candidate) for b in args
                )
            out.append((new, reference(candidate, *args)))
        return out

    for new, expected in land(params, raw):
        for a, b in zip(jax.tree.leaves(new), jax.tree.leaves(expected), strict=True):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)
