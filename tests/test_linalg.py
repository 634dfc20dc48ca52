"""Optax's linear algebra (power_iteration, matrix_inverse_pth_root, nnls, multi_normal)
against the installed Optax, SciPy and the eigendecomposition."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gradtx
from gradtx._base import _linalg as la

RTOL = 1e-5


def _spd(n: int, seed: int, cond: float = 20.0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    q, _ = np.linalg.qr(rng.normal(size=(n, n)))
    ev = np.geomspace(1.0, cond, n)
    return ((q * ev) @ q.T).astype(np.float32)


# -------------------------------------------------------------------------- power_iteration


def test_power_iteration_matches_optax_on_spd_matrices():
    m = jnp.asarray(_spd(6, 0))
    ev_ours, vec_ours = la.power_iteration(m)
    ev_ref, vec_ref = optax.power_iteration(m)
    np.testing.assert_allclose(ev_ours, ev_ref, rtol=RTOL)
    np.testing.assert_allclose(vec_ours, vec_ref, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(ev_ours, np.linalg.eigvalsh(np.asarray(m)).max(), rtol=1e-4)
    # An explicit v0, a key, a capped number of iterations, under jit.
    v0 = jnp.arange(1.0, 7.0)
    for kw in ({"v0": v0, "num_iters": 3}, {"key": jax.random.PRNGKey(3), "num_iters": 5}):
        ours = jax.jit(lambda a, kw=kw: la.power_iteration(a, **kw))(m)
        ref = optax.power_iteration(m, **kw)
        np.testing.assert_allclose(ours[0], ref[0], rtol=RTOL)
        np.testing.assert_allclose(ours[1], ref[1], rtol=1e-4, atol=1e-5)


def test_power_iteration_matrix_free_on_a_pytree():
    m1, m2 = jnp.asarray(_spd(3, 1)), jnp.asarray(_spd(2, 2, cond=5.0))
    mvp = lambda t: {"a": m1 @ t["a"], "b": m2 @ t["b"]}
    v0 = {"a": jnp.ones(3), "b": jnp.ones(2)}
    ours, ref = la.power_iteration(mvp, v0=v0), optax.power_iteration(mvp, v0=v0)
    np.testing.assert_allclose(ours[0], ref[0], rtol=RTOL)
    for k in ("a", "b"):
        np.testing.assert_allclose(ours[1][k], ref[1][k], rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match="v0 is required"):
        la.power_iteration(mvp)
    with pytest.raises(ValueError, match="square 2-D"):
        la.power_iteration(jnp.ones((2, 3)))


# ------------------------------------------------------------------ matrix_inverse_pth_root


ROOT_PS = [1, 2, 4, 8]


@functools.cache
def _roots():
    """Ours and Optax's inverse p-th roots (and errors) of `_spd(5, p)` for every p of ROOT_PS:
    one jitted program for the table."""
    program = jax.jit(
        lambda ms: [
            (la.matrix_inverse_pth_root(m, p), optax.matrix_inverse_pth_root(m, p))
            for m, p in zip(ms, ROOT_PS, strict=True)
        ]
    )
    return dict(zip(ROOT_PS, program([_spd(5, p) for p in ROOT_PS]), strict=True))


@pytest.mark.parametrize("p", ROOT_PS)
def test_matrix_inverse_pth_root_matches_optax(p):
    m = _spd(5, p)
    (root, err), (root_ref, err_ref) = _roots()[p]
    np.testing.assert_allclose(root, root_ref, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(err, err_ref, atol=1e-5)
    assert root.dtype == jnp.float32
    # And against the eigendecomposition.
    w, v = np.linalg.eigh(np.asarray(m, np.float64))
    exact = (v * w ** (-1.0 / p)) @ v.T
    np.testing.assert_allclose(root, exact, rtol=1e-3, atol=1e-4)


def test_matrix_inverse_pth_root_any_integer_p_and_size_one():
    # Optax maps p=3 onto the 4th power of its Newton step (its switch over 1, 2, 4, 8); the
    # root here is the true inverse cube root, and a traced p gives the same.
    m = jnp.asarray(_spd(4, 7, cond=4.0))
    w, v = np.linalg.eigh(np.asarray(m, np.float64))
    root, _ = la.matrix_inverse_pth_root(m, 3)
    np.testing.assert_allclose(root, (v * w ** (-1 / 3)) @ v.T, rtol=1e-3, atol=1e-4)
    traced, _ = jax.jit(la.matrix_inverse_pth_root)(m, jnp.int32(3))
    np.testing.assert_allclose(traced, root, rtol=1e-4, atol=1e-5)
    one = jnp.asarray([[4.0]])
    np.testing.assert_allclose(
        la.matrix_inverse_pth_root(one, 2)[0], optax.matrix_inverse_pth_root(one, 2)[0], RTOL
    )
    for bad in (0, -2, 2.5, True):
        with pytest.raises(ValueError, match="p must be a positive integer"):
            la.matrix_inverse_pth_root(m, bad)
    with pytest.raises(ValueError, match="square 2-D"):
        la.matrix_inverse_pth_root(jnp.ones(3), 2)


# ------------------------------------------------------------------------------------- nnls


def test_nnls_matches_optax_and_scipy():
    rng = np.random.default_rng(4)
    a = jnp.asarray(rng.normal(size=(8, 5)), jnp.float32)
    b = jnp.asarray(rng.normal(size=(8,)), jnp.float32)
    x = la.nnls(a, b, 500)
    np.testing.assert_allclose(x, optax.nnls(a, b, 500), rtol=1e-4, atol=1e-5)
    assert (np.asarray(x) >= 0).all()
    try:
        from scipy.optimize import nnls as scipy_nnls
    except ImportError:  # pragma: no cover
        pass
    else:
        np.testing.assert_allclose(
            x, scipy_nnls(np.asarray(a, np.float64), np.asarray(b, np.float64))[0], atol=1e-4
        )
    # Several right-hand sides, an explicit L, unroll, and an all-zero A.
    bk = jnp.asarray(rng.normal(size=(8, 2)), jnp.float32)
    kw = {"unroll": 2, "L": 50.0}
    np.testing.assert_allclose(
        la.nnls(a, bk, 20, **kw), optax.nnls(a, bk, 20, **kw), rtol=1e-4, atol=1e-5
    )
    np.testing.assert_array_equal(la.nnls(jnp.zeros((3, 2)), jnp.ones(3), 5), np.zeros(2))
    np.testing.assert_array_equal(la.nnls(a, b, 0), np.zeros(5))


def test_nnls_errors_name_the_argument():
    a, b = jnp.ones((3, 2)), jnp.ones(3)
    with pytest.raises(ValueError, match="A must be a 2-D"):
        la.nnls(jnp.ones(3), b, 5)
    with pytest.raises(ValueError, match="b must be an"):
        la.nnls(a, jnp.ones((3, 1, 1)), 5)
    with pytest.raises(ValueError, match="b has 4 rows but A has 3"):
        la.nnls(a, jnp.ones(4), 5)
    with pytest.raises(ValueError, match="iters must be a non-negative int"):
        la.nnls(a, b, 2.5)


# ------------------------------------------------------------------------------ multi_normal


def test_multi_normal_matches_optax():
    @jax.jit  # one program for every value below
    def values(loc, log_scale, key):
        ours, ref = la.multi_normal(loc, log_scale), optax.multi_normal(loc, log_scale)
        s = ours.sample((4,), key)
        # A scalar log_scale broadcasts over loc; the gradient flows through log_prob.
        bcast, bref = la.multi_normal(loc, 0.2), optax.multi_normal(loc, 0.2)
        grad = lambda mn: jax.grad(lambda m: mn(m, log_scale).log_prob(s).sum())(loc)
        return {
            "samples": (s, ref.sample((4,), key)),
            "log_prob": (ours.log_prob(s), ref.log_prob(s)),
            "log_scale": ours.log_scale,
            "params": (ours.params, ref.params),
            "broadcast": (bcast.log_prob(loc + 1), bref.log_prob(loc + 1)),
            "grad": (grad(la.multi_normal), grad(optax.multi_normal)),
        }

    log_scale = np.asarray([0.1, -0.3, 0.0], np.float32)
    out = values(np.asarray([0.5, -1.0, 2.0], np.float32), log_scale, jax.random.PRNGKey(0))
    s, s_ref = out["samples"]
    assert s.shape == (4, 3)
    np.testing.assert_allclose(s, s_ref, rtol=RTOL)
    np.testing.assert_allclose(*out["log_prob"], rtol=RTOL)
    np.testing.assert_array_equal(out["log_scale"], log_scale)
    for x, y in zip(*out["params"], strict=True):
        np.testing.assert_array_equal(x, y)
    np.testing.assert_allclose(*out["broadcast"], rtol=RTOL)
    np.testing.assert_allclose(*out["grad"], rtol=1e-4, atol=1e-6)


# -- nnls keeps the inputs' float dtype (optax linear_algebra_test::test_nnls) ----------------


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float32])
@pytest.mark.parametrize("k", [(), (3,)])
def test_nnls_keeps_the_input_dtype(dtype, k):
    a = jax.random.normal(jax.random.key(0), (6, 4), dtype=dtype)
    b = jax.random.normal(jax.random.key(1), (6, *k), dtype=dtype)
    x = gradtx.nnls(a, b, iters=5)
    assert x.dtype == dtype
    assert x.shape == (4, *k)
    assert bool((x >= 0).all())


def test_nnls_integer_inputs_give_a_float_result():
    x = gradtx.nnls(jnp.array([[1, 2], [3, 4]]), jnp.array([5, 6]), iters=1000)
    assert jnp.issubdtype(x.dtype, jnp.floating)
    np.testing.assert_allclose(np.asarray(x), [0.0, 1.7], atol=1e-2)
