"""Linear algebra under Optax's top-level names: global norm, power iteration, inverse p-th
roots, non-negative least squares, and the diagonal Gaussian of the evolution strategies.

Part of the base layer: it imports nothing else of gradtx, so the few pytree reductions it needs
are written here with `jax.tree` directly.
"""

from __future__ import annotations

import operator
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ._typing import ArrayLike

_HIGHEST = lax.Precision.HIGHEST


# --------------------------------------------------------------------------------------------
# Pytree reductions (for matrix-free power iteration)
# --------------------------------------------------------------------------------------------


def _tree_sq_norm(tree: Any) -> jax.Array:
    leaves = [jnp.asarray(x) for x in jax.tree.leaves(tree)]
    sq = [jnp.sum(jnp.real(x * jnp.conj(x)) if jnp.iscomplexobj(x) else x * x) for x in leaves]
    return jnp.sum(jnp.stack(sq)) if sq else jnp.zeros([], jnp.float32)


def _tree_vdot(a: Any, b: Any) -> jax.Array:
    def leaf(x, y):
        x, y = jnp.asarray(x), jnp.asarray(y)
        if x.shape != y.shape:
            raise ValueError(f"power_iteration: vectors of shapes {x.shape} and {y.shape} differ")
        x = jnp.conj(x) if jnp.iscomplexobj(x) else x
        return jnp.tensordot(x, y, x.ndim, precision=_HIGHEST)

    return jnp.asarray(jax.tree.reduce(operator.add, jax.tree.map(leaf, a, b), initializer=0))


def _tree_normalize(tree: Any) -> Any:
    inv = 1.0 / jnp.sqrt(_tree_sq_norm(tree))
    return jax.tree.map(lambda x: (inv * x).astype(jnp.result_type(x, inv)), tree)


def global_norm(updates: Any) -> jax.Array:
    """The L2 norm of all leaves of `updates` together, accumulated in float32 at least.

    Deprecated, as `optax.global_norm` is: use `gradtx.tree.norm(updates)` (the same value).

    Args:
      updates: a pytree of arrays.
    """
    warnings.warn(
        "global_norm is deprecated, as optax.global_norm is: use gradtx.tree.norm(updates)",
        DeprecationWarning,
        stacklevel=2,
    )
    total = jnp.zeros([], jnp.float32)
    for x in jax.tree.leaves(updates):
        x = jnp.asarray(x)
        acc = jnp.promote_types(jnp.real(x).dtype, jnp.float32)
        x = x if jnp.iscomplexobj(x) else x.astype(acc)
        total = total.astype(jnp.promote_types(total.dtype, acc))
        total = total + jnp.sum(jnp.real(x * jnp.conj(x))).astype(total.dtype)
    return jnp.sqrt(total)


# --------------------------------------------------------------------------------------------
# Decompositions one at a time
# --------------------------------------------------------------------------------------------


def after(x: jax.Array, done: jax.Array | None) -> jax.Array:
    """`x`, bit for bit, as a value that XLA computes only once the floating-point `done` is.

    XLA:CPU runs independent ops concurrently, and its batched LAPACK calls (eigh, QR and
    triangular solves seen hanging; SVD treated alike) each block a thread of the intra-op pool
    until the batch tasks they queued on that same pool are done: as many of them running at
    once as the pool has threads (2 on a 2-core host) wait on each other forever (jaxlib
    0.10.2). Feeding each decomposition's input through `after(input, previous result)` runs
    them one at a time; an `optimization_barrier` does not (it aliases its operands, and
    XLA:CPU orders its thunks by the buffers they use).
    The link is one entry of `done` per matrix of `x` where their batch axes agree (so it
    moves nothing between devices when both are sharded alike), else (and for an `x` of
    fewer than 2 dimensions) one entry in all.
    """
    if done is None:
        return x
    lead = x.shape[:-2]
    if x.ndim >= 2 and done.shape[: len(lead)] == lead:
        entry = done[(Ellipsis,) + (0,) * (done.ndim - len(lead))][..., None, None]
    else:
        entry = done[(0,) * done.ndim]
    # never true (not for NaN or inf either), but XLA cannot know it: `x` waits for `entry`
    return jnp.where(entry > jnp.inf, jnp.zeros_like(x), x)


# --------------------------------------------------------------------------------------------
# Power iteration and inverse p-th roots
# --------------------------------------------------------------------------------------------


def _square_matrix(who: str, matrix: ArrayLike) -> jax.Array:
    m = jnp.asarray(matrix)
    if m.ndim != 2 or m.shape[0] != m.shape[1]:
        raise ValueError(f"{who}: matrix must be a square 2-D array, got shape {m.shape}")
    return m


def power_iteration(
    matrix: ArrayLike | Callable[[Any], Any],
    *,
    v0: Any = None,
    num_iters: ArrayLike = 100,
    error_tolerance: ArrayLike = 1e-6,
    precision: lax.Precision = _HIGHEST,
    key: jax.Array | None = None,
) -> tuple[jax.Array, Any]:
    r"""The dominant eigenvalue of a diagonalizable matrix and its eigenvector, by power
    iteration, as `optax.power_iteration`.

    Repeats :math:`v \leftarrow A v / \|A v\|` and :math:`\lambda = \langle v, A v \rangle` until
    :math:`\|A v - \lambda v\| / |\lambda| <` `error_tolerance` or `num_iters` iterations.

    Args:
      matrix: a square (n, n) array, or a function computing the matrix-vector product of a
        pytree (then `v0` is required and fixes the pytree's structure).
      v0: the initial vector (an (n,) array, or a pytree for a callable `matrix`); `None`: uniform
        in [-1, 1], drawn with `key`.
      num_iters: the maximum number of iterations.
      error_tolerance: stop when the relative residual is below this.
      precision: the precision of the matrix products (`jax.lax.Precision`).
      key: the PRNG key for a random `v0` (default `jax.random.PRNGKey(0)`).

    Returns:
      `(eigenvalue, eigenvector)`, the eigenvector normalized (the order of Optax >= 0.2.2).
    """
    if callable(matrix):
        matvec = matrix
        if v0 is None:
            raise ValueError(
                "power_iteration: v0 is required when matrix is a function (a pytree of the "
                "shape the function takes)"
            )
    else:
        m = _square_matrix("power_iteration", matrix)
        matvec = lambda v: jnp.matmul(m, v, precision=precision)
        if v0 is None:
            key = jax.random.PRNGKey(0) if key is None else key
            v0 = jax.random.uniform(key, m.shape[-1:], m.dtype, minval=-1.0, maxval=1.0)

    v0 = _tree_normalize(v0)
    z0 = matvec(v0)

    def keep_going(carry):
        v, z, eig, i = carry
        residual = jax.tree.map(lambda zi, vi: zi - eig * vi, z, v)
        converged = jnp.abs(jnp.sqrt(_tree_sq_norm(residual)) / eig) < error_tolerance
        return ~converged & (i < num_iters)

    def step(carry):
        _, z, _, i = carry
        v = _tree_normalize(z)
        z = matvec(v)
        return v, z, _tree_vdot(v, z), i + 1

    # The first estimate is 0, so the loop always runs at least once (Optax does the same).
    eig0 = jnp.zeros_like(_tree_vdot(v0, z0))
    carry = (v0, z0, eig0, jnp.asarray(0, jnp.int32))
    _, z, eig, _ = lax.while_loop(keep_going, step, carry)
    return eig, _tree_normalize(z)


def _check_root_order(p: Any) -> Any:
    """A concrete `p` must be a positive integer (returned as a Python int); traced is kept."""
    if isinstance(p, jax.core.Tracer):
        return p
    arr = np.asarray(p)
    ok = arr.ndim == 0 and arr.dtype != np.bool_ and np.issubdtype(arr.dtype, np.number)
    if ok and np.isfinite(arr) and float(arr) == round(float(arr)) and float(arr) >= 1:
        return int(arr)
    raise ValueError(f"matrix_inverse_pth_root: p must be a positive integer, got {p!r}")


def _matrix_power(mat: jax.Array, p: Any, precision: lax.Precision) -> jax.Array:
    """`mat ** p` (matrix product) for a positive integer `p`, by repeated squaring."""
    mul = lambda a, b: jnp.matmul(a, b, precision=precision)
    if isinstance(p, int):
        result: jax.Array | None = None
        base = mat
        while True:
            if p & 1:
                result = base if result is None else mul(result, base)
            p >>= 1
            if not p:
                assert result is not None  # p >= 1 has a set bit
                return result
            base = mul(base, base)

    def body(carry):
        result, base, e = carry
        result = jnp.where(e % 2 == 1, mul(result, base), result)
        return result, mul(base, base), e // 2

    eye = jnp.eye(mat.shape[0], dtype=mat.dtype)
    e0 = jnp.asarray(jnp.round(p), jnp.int32)
    out, _, _ = lax.while_loop(lambda c: c[2] > 0, body, (eye, mat, e0))
    return out


def matrix_inverse_pth_root(
    matrix: ArrayLike,
    p: ArrayLike,
    num_iters: ArrayLike = 100,
    ridge_epsilon: ArrayLike = 1e-6,
    error_tolerance: ArrayLike = 1e-6,
    precision: lax.Precision = _HIGHEST,
) -> tuple[jax.Array, jax.Array]:
    r""":math:`(A + \epsilon I)^{-1/p}` of a symmetric PSD matrix, by coupled Newton iterations,
    as `optax.matrix_inverse_pth_root` (Higham, Functions of Matrices, eq. 7.18).

    The ridge is relative: :math:`\epsilon` = `ridge_epsilon` times the largest eigenvalue (by
    `power_iteration`). With :math:`M_0 = z (A + \epsilon I)`, :math:`H_0 = z^{1/p} I`,
    :math:`z = (1 + p) / (2 \|A + \epsilon I\|_F)`, each step is
    :math:`T = (1 - \alpha) I + \alpha M`, :math:`M \leftarrow T^p M`, :math:`H \leftarrow H T`
    with :math:`\alpha = -1/p`, until :math:`\max|M - I| \le` `error_tolerance`, `num_iters`
    steps, or the error grows by more than 1.2x (then the previous `H` is kept).

    Args:
      matrix: a symmetric positive semi-definite (n, n) matrix.
      p: the root, a positive integer (any: 1, 2, 3, 4, ...; a traced `p` is rounded).
      num_iters: the maximum number of Newton iterations.
      ridge_epsilon: the relative ridge that makes `matrix` positive definite.
      error_tolerance: stop when :math:`\max|M - I|` is at most this.
      precision: the precision of the matrix products (`jax.lax.Precision`).

    Returns:
      `(root, error)`: the inverse p-th root, in `matrix`'s dtype (computed in float32 at
      least), and the final :math:`\max|M - I|`.
    """
    m = _square_matrix("matrix_inverse_pth_root", matrix)
    p = _check_root_order(p)
    work = jnp.promote_types(m.dtype, jnp.float32)
    n = m.shape[0]
    alpha = jnp.asarray(-1.0 / p, work)
    eye = jnp.eye(n, dtype=work)
    max_ev, _ = power_iteration(m, num_iters=100, error_tolerance=1e-6, precision=precision)
    ridge = ridge_epsilon * jnp.maximum(max_ev, 1e-16)

    if n == 1:
        root = (m.astype(work) + ridge) ** alpha
        return root.astype(m.dtype), jnp.zeros([], work)

    damped = m.astype(work) + ridge * eye
    z = (1 + p) / (2 * jnp.linalg.norm(damped))
    mat_m0 = damped * z
    mat_h0 = eye * jnp.power(z, 1.0 / p)
    err0 = jnp.max(jnp.abs(mat_m0 - eye))

    def keep_going(carry):
        i, _, _, _, err, improving = carry
        return (i < num_iters) & (err > error_tolerance) & improving

    def step(carry):
        i, mat_m, mat_h, _, err, _ = carry
        t = (1 - alpha) * eye + alpha * mat_m
        new_m = jnp.matmul(_matrix_power(t, p, precision), mat_m, precision=precision)
        new_h = jnp.matmul(mat_h, t, precision=precision)
        new_err = jnp.max(jnp.abs(new_m - eye))
        # The error may rise for a step before it falls: allow up to 1.2x, stop beyond.
        return i + 1, new_m, new_h, mat_h, new_err, new_err < 1.2 * err

    carry = (jnp.asarray(0, jnp.int32), mat_m0, mat_h0, mat_h0, err0, jnp.asarray(True))
    _, mat_m, mat_h, prev_h, _, improving = lax.while_loop(keep_going, step, carry)
    error = jnp.max(jnp.abs(mat_m - eye))
    root = jnp.where(improving, mat_h, prev_h)
    return root.astype(m.dtype), error


# --------------------------------------------------------------------------------------------
# Non-negative least squares
# --------------------------------------------------------------------------------------------


def nnls(
    A: ArrayLike,
    b: ArrayLike,
    iters: int,
    unroll: int | bool = 1,
    L: ArrayLike | None = None,
) -> jax.Array:
    r"""Minimizes :math:`\|A x - b\|_2` subject to :math:`x \ge 0`, as `optax.nnls`: `iters`
    steps of Polyak's fast projected gradient method (2015) from :math:`x = 0`.

    With :math:`Q = A^\top A`, :math:`q = A^\top b`, :math:`c_0 = 0`:
    :math:`c' = (1 + \sqrt{1 + 4 c^2}) / 2`, :math:`x' = \max(0, p - (Q p - q) / L)`,
    :math:`p' = x' + \frac{c - 1}{c'} (x' - x)`.

    Args:
      A: an (M, N) matrix.
      b: an (M,) vector or an (M, K) matrix (K problems at once).
      iters: the number of iterations (a non-negative Python int).
      unroll: `lax.scan`'s `unroll`.
      L: an upper bound of the spectral radius of :math:`A^\top A`; `None`: the smaller of its
        Frobenius and 1-norms.

    Returns:
      The (N,) or (N, K) solution, in the inputs' float dtype (computed in float32 at least).
    """
    a, b = jnp.asarray(A), jnp.asarray(b)
    if a.ndim != 2:
        raise ValueError(f"nnls: A must be a 2-D (M, N) matrix, got shape {a.shape}")
    if b.ndim not in (1, 2):
        raise ValueError(f"nnls: b must be an (M,) vector or (M, K) matrix, got shape {b.shape}")
    if b.shape[0] != a.shape[0]:
        raise ValueError(
            f"nnls: b has {b.shape[0]} rows but A has {a.shape[0]} (b must be (M,) or (M, K) "
            f"for A of shape {a.shape})"
        )
    if isinstance(iters, bool) or not isinstance(iters, (int, np.integer)) or iters < 0:
        raise ValueError(f"nnls: iters must be a non-negative int, got {iters!r}")
    given = jnp.result_type(a, b)
    # Computed in float32 at least; returned in the inputs' float dtype, as Optax's.
    out = given if jnp.issubdtype(given, jnp.floating) else jnp.result_type(float)
    work = jnp.promote_types(given, jnp.float32)
    a, b = a.astype(work), b.astype(work)
    q_mat = a.mT @ a
    q_vec = a.mT @ b
    if L is None:
        if q_mat.size == 0:
            L = jnp.zeros([], work)
        else:
            fro = jnp.linalg.norm(q_mat)
            one = jnp.max(jnp.sum(jnp.abs(q_mat), axis=0))
            L = jnp.minimum(fro, one)
    lip = jnp.asarray(L)
    lip = jnp.where(lip == 0, 1, lip)  # an all-zero A: no division by zero

    def step(carry, _):
        x, p, c = carry
        c_next = (1 + jnp.sqrt(1 + 4 * c**2)) / 2
        x_next = jnp.clip(p - (q_mat @ p - q_vec) / lip, 0)
        p_next = x_next + (c - 1) / c_next * (x_next - x)
        return (x_next, p_next, c_next), None

    x0 = jnp.zeros(a.shape[-1:] + b.shape[1:], work)
    carry = (x0, x0, jnp.zeros([], work))
    (x, _, _), _ = lax.scan(step, carry, length=int(iters), unroll=unroll)
    return x.astype(out)


# --------------------------------------------------------------------------------------------
# Diagonal Gaussian
# --------------------------------------------------------------------------------------------


_HALF_LOG_2PI = 0.5 * float(np.log(2 * np.pi))


class MultiNormalDiagFromLogScale:
    """A Gaussian with independent coordinates, parametrized by its mean and log standard
    deviation (as Optax's class of this name)."""

    def __init__(self, loc: ArrayLike, log_scale: ArrayLike):
        self._mean = jnp.asarray(loc)
        self._log_scale = jnp.asarray(log_scale)
        self._scale = jnp.exp(self._log_scale)
        self._param_shape = jax.lax.broadcast_shapes(self._mean.shape, self._scale.shape)

    def sample(self, shape: Sequence[int], key: jax.Array) -> jax.Array:
        """Samples of shape `(*shape, *param_shape)` drawn with `key`."""
        noise = jax.random.normal(key, tuple(shape) + self._param_shape)
        return noise * self._scale + self._mean

    def log_prob(self, x: ArrayLike) -> jax.Array:
        """The log density of `x`, summed over the parameter axes (one value per sample)."""
        z = (jnp.asarray(x) - self._mean) / self._scale
        per_coord = -0.5 * z**2 - self._log_scale - _HALF_LOG_2PI
        axes = tuple(range(-len(self._param_shape), 0))
        return jnp.sum(per_coord, axis=axes)

    @property
    def log_scale(self) -> jax.Array:
        return self._log_scale

    @property
    def params(self) -> Sequence[jax.Array]:
        """`[loc, log_scale]`."""
        return [self._mean, self._log_scale]


def multi_normal(loc: ArrayLike, log_scale: ArrayLike) -> MultiNormalDiagFromLogScale:
    """A diagonal Gaussian of mean `loc` and standard deviation `exp(log_scale)`, with
    `sample(shape, key)`, `log_prob(x)`, `log_scale` and `params`, as `optax.multi_normal`.

    Args:
      loc: the mean.
      log_scale: the log of the standard deviation, the shape of `loc`.
    """
    return MultiNormalDiagFromLogScale(loc, log_scale)
