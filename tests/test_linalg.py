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
    m = _spd(6, 0)
    # An explicit v0, a key, a capped number of iterations.
    v0 = np.arange(1.0, 7.0, dtype=np.float32)

    @jax.jit  # one program for every case
    def both(m):
        kws = ({}, {"v0": v0, "num_iters": 3}, {"key": jax.random.PRNGKey(3), "num_iters": 5})
        return [(la.power_iteration(m, **kw), optax.power_iteration(m, **kw)) for kw in kws]

    (ours, ref), *others = both(m)
    np.testing.assert_allclose(ours[0], ref[0], rtol=RTOL)
    np.testing.assert_allclose(ours[1], ref[1], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(ours[0], np.linalg.eigvalsh(m).max(), rtol=1e-4)
    for ours, ref in others:
        np.testing.assert_allclose(ours[0], ref[0], rtol=RTOL)
        np.testing.assert_allclose(ours[1], ref[1], rtol=1e-4, atol=1e-5)


def test_power_iteration_matrix_free_on_a_pytree():
    @jax.jit  # one program for both sides
    def both(m1, m2, v0):
        mvp = lambda t: {"a": m1 @ t["a"], "b": m2 @ t["b"]}
        return la.power_iteration(mvp, v0=v0), optax.power_iteration(mvp, v0=v0)

    m1, m2 = _spd(3, 1), _spd(2, 2, cond=5.0)
    ours, ref = both(m1, m2, {"a": np.ones(3, np.float32), "b": np.ones(2, np.float32)})
    np.testing.assert_allclose(ours[0], ref[0], rtol=RTOL)
    for k in ("a", "b"):
        np.testing.assert_allclose(ours[1][k], ref[1][k], rtol=1e-4, atol=1e-5)
    # the argument errors, eager (device arrays: no conversion compiled)
    m1, m2 = jax.device_put((m1, m2))
    with pytest.raises(ValueError, match="v0 is required"):
        la.power_iteration(lambda t: {"a": m1 @ t["a"], "b": m2 @ t["b"]})
    with pytest.raises(ValueError, match="square 2-D"):
        la.power_iteration(jax.device_put(np.ones((2, 3), np.float32)))


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
    @jax.jit  # one program: p = 3 static and traced, and the 1x1 case on both sides
    def roots(m, p, one):
        return {
            "static": la.matrix_inverse_pth_root(m, 3)[0],
            "traced": la.matrix_inverse_pth_root(m, p)[0],
            "one": (
                la.matrix_inverse_pth_root(one, 2)[0],
                optax.matrix_inverse_pth_root(one, 2)[0],
            ),
        }

    m = _spd(4, 7, cond=4.0)
    w, v = np.linalg.eigh(np.asarray(m, np.float64))
    out = roots(m, np.int32(3), np.asarray([[4.0]], np.float32))
    root = out["static"]
    np.testing.assert_allclose(root, (v * w ** (-1 / 3)) @ v.T, rtol=1e-3, atol=1e-4)
    np.testing.assert_allclose(out["traced"], root, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(*out["one"], RTOL)
    # the argument errors, eager (device arrays: no conversion compiled)
    m = jax.device_put(m)
    for bad in (0, -2, 2.5, True):
        with pytest.raises(ValueError, match="p must be a positive integer"):
            la.matrix_inverse_pth_root(m, bad)
    with pytest.raises(ValueError, match="square 2-D"):
        la.matrix_inverse_pth_root(jax.device_put(np.ones(3, np.float32)), 2)


# ------------------------------------------------------------------------------------- nnls


def test_nnls_matches_optax_and_scipy():
    @jax.jit  # one program for every value below
    def values(a, b, bk, zeros_a, ones_b):
        kw = {"unroll": 2, "L": 50.0}
        return {
            "x": (la.nnls(a, b, 500), optax.nnls(a, b, 500)),
            # Several right-hand sides, an explicit L, unroll, and an all-zero A.
            "several": (la.nnls(a, bk, 20, **kw), optax.nnls(a, bk, 20, **kw)),
            "zero_a": la.nnls(zeros_a, ones_b, 5),
            "no_iters": la.nnls(a, b, 0),
        }

    rng = np.random.default_rng(4)
    a = rng.normal(size=(8, 5)).astype(np.float32)
    b = rng.normal(size=(8,)).astype(np.float32)
    bk = rng.normal(size=(8, 2)).astype(np.float32)
    out = values(a, b, bk, np.zeros((3, 2), np.float32), np.ones(3, np.float32))
    x, x_ref = out["x"]
    np.testing.assert_allclose(x, x_ref, rtol=1e-4, atol=1e-5)
    assert (np.asarray(x) >= 0).all()
    try:
        from scipy.optimize import nnls as scipy_nnls
    except ImportError:  # pragma: no cover
        pass
    else:
        np.testing.assert_allclose(
            x, scipy_nnls(np.asarray(a, np.float64), np.asarray(b, np.float64))[0], atol=1e-4
        )
    np.testing.assert_allclose(*out["several"], rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(out["zero_a"], np.zeros(2))
    np.testing.assert_array_equal(out["no_iters"], np.zeros(5))


def test_nnls_errors_name_the_argument():
    # eager, on device arrays (put there from NumPy: no conversion compiled)
    ones = lambda *shape: jax.device_put(np.ones(shape, np.float32))
    a, b = ones(3, 2), ones(3)
    with pytest.raises(ValueError, match="A must be a 2-D"):
        la.nnls(ones(3), b, 5)
    with pytest.raises(ValueError, match="b must be an"):
        la.nnls(a, ones(3, 1, 1), 5)
    with pytest.raises(ValueError, match="b has 4 rows but A has 3"):
        la.nnls(a, ones(4), 5)
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
    @jax.jit  # one program per case: the draws and the solve
    def solve():
        a = jax.random.normal(jax.random.key(0), (6, 4), dtype=dtype)
        b = jax.random.normal(jax.random.key(1), (6, *k), dtype=dtype)
        return gradtx.nnls(a, b, iters=5)

    x = solve()
    assert x.dtype == dtype
    assert x.shape == (4, *k)
    assert bool((np.asarray(x, np.float32) >= 0).all())


def test_nnls_integer_inputs_give_a_float_result():
    a, b = np.array([[1, 2], [3, 4]], np.int32), np.array([5, 6], np.int32)
    x = jax.jit(lambda a, b: gradtx.nnls(a, b, iters=1000))(a, b)
    assert jnp.issubdtype(x.dtype, jnp.floating)
    np.testing.assert_allclose(np.asarray(x), [0.0, 1.7], atol=1e-2)
