"""Generic tests that every optimizer in the shared table must pass."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradtx

from .helpers import grad_sequence, mixed_params, state_dtypes
from .optimizer_table import CASES, OptCase

pytestmark = pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])


def _quadratic_problem():
    params = mixed_params(seed=3)
    rng = np.random.default_rng(4)
    curv = jax.tree.map(lambda x: jnp.asarray(rng.uniform(0.5, 2.0, np.shape(x)), x.dtype), params)
    target = jax.tree.map(lambda x: jnp.asarray(rng.normal(size=np.shape(x)), x.dtype), params)

    def loss(p):
        terms = jax.tree.map(lambda x, a, b: 0.5 * jnp.sum(a * (x - b) ** 2), p, curv, target)
        return sum(jax.tree.leaves(terms))

    return params, loss


def _rosenbrock(p):
    x, y = p["xy"][0], p["xy"][1]
    return (1.0 - x) ** 2 + 100.0 * (y - x**2) ** 2


def _minimize(tx, loss, params, steps):
    """Run `steps` jitted steps in one fori_loop; `value=loss` is passed to every update."""

    @jax.jit
    def go(params):
        state = tx.init(params)

        def body(_, carry):
            p, s = carry
            value, grads = jax.value_and_grad(loss)(p)
            updates, s = tx.update(grads, s, p, value=value)
            return gradtx.apply_updates(p, updates), s

        p, _ = jax.lax.fori_loop(0, steps, body, (params, state))
        return loss(p)

    return float(go(params))


def test_converges_on_quadratic(case: OptCase):
    params, loss = _quadratic_problem()
    start = float(loss(params))
    final = _minimize(case.make_quadratic(), loss, params, case.quadratic_steps)
    assert np.isfinite(final)
    assert final < case.quadratic_tol * start, (start, final)


def test_converges_on_rosenbrock(case: OptCase):
    if case.rosenbrock_tol is None:
        pytest.skip(case.rosenbrock_skip)
    params = {"xy": jnp.array([-1.0, 1.0], jnp.float32)}
    final = _minimize(case.make_rosenbrock(), _rosenbrock, params, case.rosenbrock_steps)
    assert np.isfinite(final)
    assert final < case.rosenbrock_tol, final


# float32 is checked by test_state_is_stable_through_scan (a scan's carry keeps its dtypes).
@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16], ids=str)
def test_dtypes_are_preserved(case: OptCase, dtype):
    if not case.low_precision:
        pytest.skip(f"{case.name} is documented as float32-only")
    tx = case.make()
    params = mixed_params(dtype=dtype)
    state = tx.init(params)
    init_dtypes = state_dtypes(state)
    step = jax.jit(lambda g, s, p: tx.update(g, s, p, value=jnp.asarray(1.0, dtype)))
    for g in grad_sequence(params, 3, scale=0.1):
        updates, state = step(g, state, params)
        for u, p in zip(jax.tree.leaves(updates), jax.tree.leaves(params), strict=True):
            assert u.dtype == p.dtype, (u.dtype, p.dtype)
            assert bool(jnp.all(jnp.isfinite(u.astype(jnp.float32))))
        params = gradtx.apply_updates(params, updates)
        assert state_dtypes(state) == init_dtypes
    assert all(x.dtype == dtype for x in jax.tree.leaves(params))


def test_init_from_shape_dtype_struct(case: OptCase):
    tx = case.make()
    params = mixed_params()
    structs = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), params)
    expected = tx.init(params)
    abstract = jax.eval_shape(tx.init, structs)
    direct = tx.init(structs)
    for got in (abstract, direct):
        assert jax.tree.structure(got) == jax.tree.structure(expected)
        for a, e in zip(jax.tree.leaves(got), jax.tree.leaves(expected), strict=True):
            assert (a.shape, a.dtype) == (e.shape, e.dtype)


def test_no_retrace_on_second_call(case: OptCase):
    tx = case.make()
    params = mixed_params()
    traces = []

    @jax.jit
    def step(g, s, p):
        traces.append(1)
        updates, s = tx.update(g, s, p, value=jnp.float32(1.0))
        return gradtx.apply_updates(p, updates), s

    state = tx.init(params)
    for g in grad_sequence(params, 3):
        params, state = step(g, state, params)
    assert len(traces) == 1


def test_state_is_stable_through_scan(case: OptCase):
    tx = case.make()
    params = mixed_params()
    grads = jax.tree.map(lambda *xs: jnp.stack(xs), *grad_sequence(params, 4))

    def body(carry, g):
        p, s = carry
        updates, s = tx.update(g, s, p, value=jnp.float32(1.0))
        return (gradtx.apply_updates(p, updates), s), updates

    # scan itself requires the state's structure and dtypes not to change
    (p, s), updates = jax.lax.scan(body, (params, tx.init(params)), grads)
    assert jax.tree.structure(s) == jax.tree.structure(tx.init(params))
    for u, x in zip(jax.tree.leaves(updates), jax.tree.leaves(params), strict=True):
        assert u.dtype == x.dtype, (u.dtype, x.dtype)  # float32 updates for float32 params
        assert bool(jnp.all(jnp.isfinite(u)))
    assert all(bool(jnp.all(jnp.isfinite(x))) for x in jax.tree.leaves(p))


def test_accepts_and_ignores_unknown_extra_args(case: OptCase):
    tx = case.make()
    params = mixed_params()
    g = grad_sequence(params, 1)[0]
    a, _ = tx.update(g, tx.init(params), params, value=jnp.float32(1.0))
    b, _ = tx.update(g, tx.init(params), params, value=jnp.float32(1.0), some_unused_arg=3)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
