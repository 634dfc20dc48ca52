"""Shampoo's `inverse_root="newton"`: the coupled Newton inverse fourth root against a float64
eigendecomposition (random SPD stacks from well- to ill-conditioned, rank-deficient, bf16
storage, the zero matrix, huge and tiny scales, NaN, a non-PSD factor), and Shampoo with it
against Shampoo with "eigh" over many steps; the option's errors and state layout."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradtx.contrib._newton_root as newton_root
from gradtx.contrib._newton_root import newton_inverse_root
from gradtx.contrib._shampoo import _inverse_root, scale_by_shampoo, shampoo


def _root64(a: np.ndarray, eps: float) -> np.ndarray:
    """`(A + eps I)^{-1/4}` in float64 (eigenvalues clamped at 0; 0 stays 0: pseudo-inverse)."""
    a = np.asarray(a, np.float64)
    w, v = np.linalg.eigh(0.5 * (a + np.swapaxes(a, -1, -2)))
    w = np.maximum(w, 0.0) + eps
    inv = np.where(w > 0, np.where(w > 0, w, 1.0) ** -0.25, 0.0)
    return (v * inv[..., None, :]) @ np.swapaxes(v, -1, -2)


def _spd(rng, n: int, cond: float, count: int) -> np.ndarray:
    """`count` matrices Q diag(s) Q^T, s log-spaced over [1/cond, 1] (random order), random
    orthogonal Q, times a random scale in [0.1, 10]."""
    q = np.linalg.qr(rng.normal(size=(count, n, n)))[0]
    s = np.stack([rng.permutation(np.geomspace(1.0, 1.0 / cond, n)) for _ in range(count)])
    scale = 10.0 ** rng.uniform(-1, 1, size=(count, 1, 1))
    return scale * (q * s[:, None, :]) @ np.swapaxes(q, -1, -2)


def _rel(x, ref) -> np.ndarray:
    """Relative Frobenius error of each matrix of a stack."""
    x = np.asarray(x, np.float64)
    return np.linalg.norm(x - ref, axis=(-2, -1)) / np.linalg.norm(ref, axis=(-2, -1))


_newton = jax.jit(newton_inverse_root)


# Tolerance per condition number (relative Frobenius error against float64, float32 input):
# measured 4.3e-7, 3.1e-6, 1.8e-4, 1.5e-2 (the worst over n and the draws) at condition
# numbers 1, 1e2, 1e4, 1e6; the float32 eigendecomposition's own errors on the same matrices
# are 4e-7, 2e-6, 4e-4, 3.4e-2 (its eigenvalues carry ~1e-7 lambda_max absolute errors,
# amplified in the root by the conditioning; Newton's shift eps_32 b is of that size).
CONDITIONED = [(1.0, 2e-6), (1e2, 1e-5), (1e4, 5e-4), (1e6, 3e-2)]


@pytest.mark.parametrize("n", [1, 2, 7, 32])
@pytest.mark.parametrize(("cond", "tol"), CONDITIONED, ids=[f"cond{c:g}" for c, _ in CONDITIONED])
def test_newton_root_matches_float64_eigh(n, cond, tol):
    rng = np.random.default_rng(n)
    a = _spd(rng, n, cond, 16).astype(np.float32)
    eps = 1e-7 * float(np.abs(a).max())  # below the smallest eigenvalue: the conditioning stays
    root, ok = _newton(jnp.asarray(a), eps)
    assert root.dtype == jnp.float32 and bool(np.all(ok))
    err = _rel(root, _root64(a, eps))
    assert err.max() < tol, err.max()


def test_acceleration_reaches_condition_1e6_in_12_steps(monkeypatch):
    """The unaccelerated coupled Newton iteration needs ~20 steps at condition number 1e6 (a
    factor 2.44 per step near 0); the accelerated one 10-12: stopped after 12 it has converged
    and gives the root of 20 steps."""
    a = jnp.asarray(_spd(np.random.default_rng(1), 48, 1e6, 8).astype(np.float32))
    full, _ = newton_inverse_root(a, 0.0)
    monkeypatch.setattr(newton_root, "NEWTON_MAX_ITERATIONS", 12)
    root, ok = newton_inverse_root(a, 0.0)
    assert bool(np.all(ok))
    np.testing.assert_allclose(root, full, rtol=1e-5, atol=1e-5 * float(np.abs(full).max()))


def test_rank_deficient_factors_and_matrix_eps():
    """Gram matrices of fewer columns than rows (Shampoo's early factors) plus matrix_eps: the
    root is that of eigh with the same eps (the shift max(eps, eps_32 max|S|) is eps here)."""
    rng = np.random.default_rng(3)
    g = rng.normal(size=(12, 24, 5))
    a = (g @ np.swapaxes(g, -1, -2)).astype(np.float32)
    root, ok = _newton(jnp.asarray(a), 1e-3)
    assert bool(np.all(ok))
    assert _rel(root, _root64(a, 1e-3)).max() < 1e-3  # measured 2.4e-4, eigh's 5.5e-4


def test_zero_eps_on_a_singular_factor_is_finite_and_exact_on_its_range():
    """matrix_eps = 0 on a rank-3 (16, 16) factor: on its range the root is the pseudo-inverse
    root; on its null space (eigenvalues of float32 rounding, +-3e-7 here) about the root of
    the floor eps_32 min(||S||_F, ||S||_inf) (eigh's pseudo-inverse gives 0 there)."""
    g = np.random.default_rng(4).normal(size=(16, 3))
    a = (g @ g.T).astype(np.float32)
    root, ok = _newton(jnp.asarray(a), 0.0)
    root = np.asarray(root, np.float64)
    assert bool(np.all(ok)) and np.isfinite(root).all()
    w, v = np.linalg.eigh(a.astype(np.float64))
    top = v[:, -3:]
    pinv = (top * w[-3:] ** -0.25) @ top.T
    proj = top @ top.T
    np.testing.assert_allclose(proj @ root @ proj, pinv, atol=1e-4 * np.abs(pinv).max())
    bound = min(np.linalg.norm(a), np.abs(a).sum(axis=1).max())
    floor_root = (float(np.finfo(np.float32).eps) * bound) ** -0.25
    null_roots = np.linalg.eigvalsh(v[:, :-3].T @ root @ v[:, :-3])
    assert (np.abs(null_roots / floor_root - 1) < 0.1).all(), null_roots / floor_root


def test_zero_matrix():
    """S = 0: eps^{-1/4} I with eps > 0, and 0 with eps = 0 (the pseudo-inverse), as eigh."""
    zeros = jnp.zeros((3, 5, 5))
    root, ok = _newton(zeros, 1e-6)
    np.testing.assert_allclose(root, np.broadcast_to(1e-6**-0.25 * np.eye(5), (3, 5, 5)), rtol=1e-5)
    assert bool(np.all(ok))
    root, ok = _newton(zeros, 0.0)
    assert bool(np.all(ok)) and (np.asarray(root) == 0).all()


@pytest.mark.parametrize("scale", [1e-30, 1e30], ids=["tiny", "huge"])
def test_huge_and_tiny_factors_are_homogeneous(scale):
    """(c S + c eps I)^{-1/4} = c^{-1/4} (S + eps I)^{-1/4}: the matrix is normalised by its
    largest entry before the products, so S ~ 1e30 (S^4 would overflow float32) or 1e-30 gives
    the same root, scaled."""
    a = _spd(np.random.default_rng(5), 6, 1e3, 4)
    base, _ = _newton(jnp.asarray(a.astype(np.float32)), 1e-4)
    big, ok = _newton(jnp.asarray((scale * a).astype(np.float32)), 1e-4 * scale)
    assert bool(np.all(ok)) and np.isfinite(np.asarray(big)).all()
    np.testing.assert_allclose(
        np.asarray(big, np.float64) * scale**0.25, base, rtol=1e-4, atol=1e-4
    )


def test_nan_and_non_psd_blocks_keep_their_previous_root():
    """A NaN block gives a NaN root, a block with a negative eigenvalue beyond the shift makes
    the iteration diverge (not converged): both keep the previous root in `_inverse_root`; the
    other blocks of the stack are computed (and its loop ends)."""
    good = _spd(np.random.default_rng(6), 4, 10.0, 1)[0]
    nan = np.full((4, 4), np.nan)
    indefinite = np.diag([1.0, 0.5, 0.2, -0.3])
    stat = jnp.asarray(np.stack([good, nan, indefinite]).astype(np.float32))
    _, ok = _newton(stat, 0.0)
    assert np.asarray(ok).ravel().tolist() == [True, False, False]
    old = jnp.asarray(np.stack([2.0 * np.eye(4)] * 3).astype(np.float32))
    root = np.asarray(_inverse_root(stat, old, 0.0, "newton"))
    np.testing.assert_allclose(root[0], _root64(good, 0.0), rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(root[1:], np.asarray(old)[1:])


def test_bfloat16_storage():
    """bf16 factors in, bf16 roots out (computed in float32): within bf16's rounding (2^-9
    relative per entry) of the float64 root of the rounded factor."""
    a = _spd(np.random.default_rng(7), 8, 1e2, 6)
    stat = jnp.asarray(a, jnp.bfloat16)
    old = jnp.zeros(stat.shape, jnp.bfloat16)
    root = _inverse_root(stat, old, 1e-6, "newton")
    assert root.dtype == jnp.bfloat16
    ref = _root64(np.asarray(stat, np.float64), 1e-6)
    assert _rel(np.asarray(root, np.float64), ref).max() < 1e-2  # measured 3e-3


# -- Shampoo with "newton" against "eigh" -------------------------------------------------------


def _problem(seed: int, steps: int = 60, shape=(10, 7)):
    """Gradients with fixed row / column scales over [0.5, 2] and a per-step scale; a (5,) leaf
    and a (3, 6, 4) leaf with batch axis 0."""
    rng = np.random.default_rng(seed)
    dr = np.geomspace(0.5, 2.0, shape[0])[:, None]
    dc = np.geomspace(2.0, 0.5, shape[1])[None, :]
    s = np.exp(0.5 * rng.normal(size=(steps, 1, 1)))
    return {
        "w": (s * dr * rng.normal(size=(steps, *shape)) * dc).astype(np.float32),
        "b": (s[:, :, 0] * rng.normal(size=(steps, 5))).astype(np.float32),
        "stack": (s[..., None] * rng.normal(size=(steps, 3, 6, 4))).astype(np.float32),
    }


@functools.partial(jax.jit, static_argnums=(0, 1, 2, 3))
def _run(method, graft, block, pdtype, grads, meps):
    from gradtx.contrib import ShampooDimensionNumbers

    tx = scale_by_shampoo(
        b2=0.99, matrix_eps=meps, block_size=block, precondition_frequency=3,
        start_preconditioning_step=2, graft_type=graft, preconditioner_dtype=pdtype,
        weight_dimension_numbers={"w": None, "b": None, "stack": ShampooDimensionNumbers(1, 2)},
        inverse_root=method,
    )  # fmt: skip

    def body(s, g):
        u, s = tx.update(g, s)
        return s, u

    return jax.lax.scan(body, tx.init(jax.tree.map(lambda x: x[0], grads)), grads)


# Tolerances, relative to the largest update over 60 steps: against the float64 published rule
# (test_shampoo's NumPy transcription, the (10, 7) leaf) and against "eigh" (the (3, 6, 4)
# leaf with a batch axis). Measured (newton | eigh against float64; newton against eigh):
# adam 1.4e-6 | 1.1e-6, 4.8e-7; none 6.6e-7 | 9.1e-7, 7.7e-7; sgd with matrix_eps 1e-6,
# where the early rank-deficient factors have condition numbers ~1e6, 2.4e-4 | 4.3e-3, 2.3e-4
# (the float32 eigendecomposition is the less accurate there); bf16 factors and roots 3.8e-3
# | 3.8e-3 (bf16 rounding), 4e-8.
MANY_STEPS = [
    ("adam", 4, jnp.float32, 1e-3, 1e-5, 1e-5),
    ("none", 64, jnp.float32, 1e-3, 1e-5, 1e-5),
    ("sgd", 3, jnp.float32, 1e-6, 1e-3, 1e-3),
    ("adam", 4, jnp.bfloat16, 1e-3, 1e-2, 1e-3),
]


@pytest.mark.parametrize(("graft", "block", "pdtype", "meps", "tol_ref", "tol_eigh"), MANY_STEPS)
def test_shampoo_newton_follows_the_rule_and_eigh_over_many_steps(
    graft, block, pdtype, meps, tol_ref, tol_eigh
):
    reference = pytest.importorskip("tests.contrib.test_shampoo")._reference
    grads = _problem(seed=block)
    s_eigh, u_eigh = _run("eigh", graft, block, pdtype, grads, meps)
    s_newton, u_newton = _run("newton", graft, block, pdtype, grads, meps)
    assert jax.tree.structure(s_eigh) == jax.tree.structure(s_newton)
    got = {k: np.asarray(v, np.float32) for k, v in u_newton.items()}
    assert all(np.isfinite(v).all() for v in got.values())
    expected = reference(
        grads["w"], b1=0.9, b2=0.99, eps=1e-8, meps=meps, block=block, start=2, freq=3,
        graft=graft,
    )  # fmt: skip
    err = np.abs(got["w"] - expected).max() / np.abs(expected).max()
    ours_eigh = np.asarray(u_eigh["w"], np.float32)
    eigh_err = np.abs(ours_eigh - expected).max() / np.abs(expected).max()
    # within tol_ref, or no further from the float64 rule than float32 eigh is (sgd's factors
    # at condition ~1e6: newton 2.4e-4 / 2.2e-3 with the classic emitter, eigh 4.3e-3)
    assert err < max(tol_ref, eigh_err), (err, eigh_err)
    eigh = np.asarray(u_eigh["stack"], np.float32)
    diff = np.abs(got["stack"] - eigh).max() / np.abs(eigh).max()
    assert diff < tol_eigh, diff
    np.testing.assert_array_equal(u_newton["b"], u_eigh["b"])  # the 1-D leaf: the graft alone


def test_huge_gradients_keep_roots_finite_with_newton():
    """|g| = 1e30 overflows the factors: the roots stay the identities, as with eigh."""
    grads = jax.tree.map(lambda x: np.full_like(x, 1e30), _problem(seed=9, steps=6))
    state, u = _run("newton", "sgd", 4, jnp.float32, grads, 1e-3)
    np.testing.assert_array_equal(state.roots["w"][0][0, 0], np.eye(4))
    assert all(np.isfinite(np.asarray(x)).all() for x in jax.tree.leaves(u))


def test_unknown_inverse_root_raises_at_construction():
    with pytest.raises(ValueError, match=r"inverse_root must be one of .*'eigh'.*'newton'"):
        scale_by_shampoo(inverse_root="svd")
    with pytest.raises(ValueError, match=r"shampoo: .*inverse_root must be one of"):
        shampoo(1e-3, inverse_root="qr")
