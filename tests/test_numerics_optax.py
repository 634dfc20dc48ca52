"""Optax's top-level numerics and linear algebra (safe_norm, safe_increment, power_iteration,
matrix_inverse_pth_root, nnls, multi_normal, ...) against the installed Optax."""

from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from gradtx._base import _linalg as la
from gradtx._base import _numerics as num

RTOL = 1e-5


def _spd(n: int, seed: int, cond: float = 20.0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    q, _ = np.linalg.qr(rng.normal(size=(n, n)))
    ev = np.geomspace(1.0, cond, n)
    return ((q * ev) @ q.T).astype(np.float32)


# ---------------------------------------------------------------------------------- safe_norm


@pytest.mark.parametrize(
    ("ord_", "axis", "keepdims"),
    [(None, None, False), (None, 1, True), (1, 1, False), (np.inf, 0, True), ("nuc", None, False)],
)
def test_safe_norm_matches_optax_values_and_gradients(ord_, axis, keepdims):
    x = jnp.asarray(np.random.default_rng(0).normal(size=(3, 4)), jnp.float32)
    x = x.at[1].set(0.0)  # one slice with norm 0 (below min_norm)
    for min_norm in (0.0, 0.5):
        ours = num.safe_norm(x, min_norm, ord_, axis, keepdims)
        ref = optax.safe_norm(x, min_norm, ord_, axis, keepdims)
        assert ours.shape == ref.shape
        np.testing.assert_allclose(ours, ref, rtol=RTOL, atol=1e-6)

    def loss(fn):
        return lambda v: jnp.sum(fn(v, 0.5, ord=ord_, axis=axis, keepdims=keepdims))

    g_ours, g_ref = jax.grad(loss(num.safe_norm))(x), jax.grad(loss(optax.safe_norm))(x)
    assert np.isfinite(g_ours).all()
    np.testing.assert_allclose(g_ours, g_ref, rtol=RTOL, atol=1e-6)


def test_safe_norm_gradient_is_zero_at_zero_and_nan_propagates():
    for ord_ in (None, 1, np.inf):
        g = jax.grad(lambda v, o=ord_: num.safe_norm(v, 0.0, o))(jnp.zeros(3))
        np.testing.assert_array_equal(g, np.zeros(3))
    assert np.isnan(num.safe_norm(jnp.array([1.0, np.nan]), 0.0, 1))
    assert np.isnan(num.safe_norm(jnp.array([1.0, np.nan]), 0.0))
    # Default min_norm (gradtx's internal callers) and float32 for low-precision inputs.
    np.testing.assert_allclose(num.safe_norm(jnp.array([3.0, 4.0])), 5.0)
    assert num.safe_norm(jnp.ones(4, jnp.bfloat16), 0.0, 1).dtype == jnp.float32
    z = jnp.asarray([3 + 4j, 1j], jnp.complex64)
    for ord_ in (None, 1):
        np.testing.assert_allclose(num.safe_norm(z, 0.0, ord_), optax.safe_norm(z, 0.0, ord_), RTOL)


def test_safe_root_mean_squares_matches_optax():
    x = jnp.asarray(np.random.default_rng(1).normal(size=(5,)), jnp.float32)
    for v in (x, jnp.zeros(5)):
        for min_rms in (0.0, 0.3):
            np.testing.assert_allclose(
                num.safe_root_mean_squares(v, min_rms),
                optax.safe_root_mean_squares(v, min_rms),
                rtol=RTOL,
            )
            f_ours = jax.grad(lambda u, m=min_rms: num.safe_root_mean_squares(u, m))
            f_ref = jax.grad(lambda u, m=min_rms: optax.safe_root_mean_squares(u, m))
            np.testing.assert_allclose(f_ours(v), f_ref(v), rtol=RTOL, atol=1e-7)


# ------------------------------------------------------------------------------ increments


@pytest.mark.parametrize("dtype", [jnp.int32, jnp.int8, jnp.uint8, jnp.float32, jnp.bfloat16])
def test_safe_increment_matches_optax_for_int_and_float_dtypes(dtype):
    info = jnp.iinfo(dtype) if jnp.issubdtype(dtype, jnp.integer) else jnp.finfo(dtype)
    for value in (0, 5, info.max):
        c = jnp.asarray(value, dtype)
        ours, ref = num.safe_increment(c), optax.safe_increment(c)
        assert ours.dtype == ref.dtype == jnp.dtype(dtype)
        np.testing.assert_array_equal(np.asarray(ours, np.float64), np.asarray(ref, np.float64))
    assert num.safe_int32_increment is num.safe_increment
    assert int(num.safe_int32_increment(jnp.int32(2**31 - 1))) == 2**31 - 1
    assert int(num.safe_increment(3)) == 4


def test_safe_increment_rejects_bool_and_complex():
    for bad in (jnp.asarray(True), jnp.asarray(1 + 1j)):
        with pytest.raises(ValueError, match="integer or floating dtype"):
            num.safe_increment(bad)


# ------------------------------------------------------------------------------ global_norm


def test_global_norm_matches_optax_and_warns():
    tree = {"a": jnp.arange(3.0), "b": [jnp.ones((2, 2)), jnp.asarray(1 + 2j, jnp.complex64)]}
    with pytest.warns(DeprecationWarning, match="tree.norm"):
        ours = la.global_norm(tree)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        ref = optax.global_norm(tree)
    np.testing.assert_allclose(ours, ref, rtol=RTOL)
    with pytest.warns(DeprecationWarning, match="deprecated"):
        low = la.global_norm({"x": jnp.ones(2, jnp.bfloat16)})
    assert low.dtype == jnp.float32
    with pytest.warns(DeprecationWarning, match="deprecated"):
        empty = la.global_norm({})
    assert float(empty) == 0.0


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


@pytest.mark.parametrize("p", [1, 2, 4, 8])
def test_matrix_inverse_pth_root_matches_optax(p):
    m = jnp.asarray(_spd(5, p))
    root, err = la.matrix_inverse_pth_root(m, p)
    root_ref, err_ref = optax.matrix_inverse_pth_root(m, p)
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
    loc = jnp.asarray([0.5, -1.0, 2.0])
    log_scale = jnp.asarray([0.1, -0.3, 0.0])
    ours, ref = la.multi_normal(loc, log_scale), optax.multi_normal(loc, log_scale)
    key = jax.random.PRNGKey(0)
    s = ours.sample((4,), key)
    assert s.shape == (4, 3)
    np.testing.assert_allclose(s, ref.sample((4,), key), rtol=RTOL)
    np.testing.assert_allclose(ours.log_prob(s), ref.log_prob(s), rtol=RTOL)
    np.testing.assert_array_equal(ours.log_scale, log_scale)
    for x, y in zip(ours.params, ref.params, strict=True):
        np.testing.assert_array_equal(x, y)
    # A scalar log_scale broadcasts over loc; the gradient flows through log_prob.
    bcast, bref = la.multi_normal(loc, 0.2), optax.multi_normal(loc, 0.2)
    np.testing.assert_allclose(bcast.log_prob(loc + 1), bref.log_prob(loc + 1), rtol=RTOL)
    g = jax.grad(lambda m: la.multi_normal(m, log_scale).log_prob(s).sum())(loc)
    g_ref = jax.grad(lambda m: optax.multi_normal(m, log_scale).log_prob(s).sum())(loc)
    np.testing.assert_allclose(g, g_ref, rtol=1e-4, atol=1e-6)
