r"""The inverse fourth root of symmetric positive semi-definite matrices by a coupled Newton
iteration (matrix products only), with a scalar acceleration chosen from bounds on the spectrum.

Shampoo's `inverse_root="newton"` refresh (`scale_by_shampoo`). The iteration (Guo & Higham,
"A Schur-Newton method for the matrix p-th root and its inverse", SIAM J. Matrix Anal. Appl.
28(3), 2006; the coupled form Distributed Shampoo's `matrix_inverse_pth_root` uses), for
:math:`A^{-1/p}` with :math:`p = 4`:

.. math::

  X_0 = z^{1/p} I, \quad M_0 = z A, \qquad
  T_k = \frac{(p + 1) I - c_k M_k}{p}, \quad
  X_{k+1} = c_k^{1/p} X_k T_k, \quad M_{k+1} = T_k^p\, c_k M_k .

Every iterate keeps :math:`M_k = X_k^p A` (all are polynomials in :math:`A`, so they commute),
and :math:`M_k \to I` gives :math:`X_k \to A^{-1/p}`: on an eigenvalue :math:`m` of
:math:`M_k` the step is the scalar map :math:`f(m) = m ((p + 1 - m) / p)^p`, whose fixed point
1 attracts all of :math:`(0, p + 1)` (quadratically near 1, but only by the factor
:math:`((p+1)/p)^p \approx 2.44` per step near 0, which is what makes ill-conditioned matrices
slow). The scalar :math:`c_k` does not change the limit (it rescales :math:`X_k` and
:math:`M_k` together); it is chosen from bounds :math:`[l_k, u_k]` on the spectrum of
:math:`M_k` so that :math:`f(c_k l_k) = f(c_k u_k)`, i.e. :math:`c_k = (p+1)(1 - r) / (u_k -
r l_k)` with :math:`r = (l_k / u_k)^{1/p}` (then :math:`c_k l_k < 1 < c_k u_k < p + 1`), but
at most :math:`4 / u_k` (`TOP`); the next bounds are :math:`[\min(f(c_k l_k), f(c_k u_k)),
1]`. Near 0 this gains about :math:`4 \cdot 2.44 \approx 10` per step instead of 2.44: a
float32 factor with condition number :math:`10^6` converges in about 10 steps instead of 20
(the same idea as the scaled Newton iteration for the polar decomposition; DASH, Modoranu et
al. 2026, arXiv:2602.02016, shows the scaling decides the step count). The start: :math:`z =
(p + 1) / (2 b)` with :math:`b = \min(\lVert A \rVert_F, \lVert A \rVert_\infty) \ge
\lambda_{max}`, so :math:`u_0 = z b = (p+1)/2`, and :math:`l_0 = z \epsilon` with
:math:`\epsilon` the shift added to the matrix (below). The iteration stops when
:math:`\lVert M_k - I \rVert_\infty` (which bounds :math:`\max |\lambda(M_k) - 1|`) is
below the tolerance in every matrix of the stack.
"""

from typing import Any

import jax
import jax.numpy as jnp

from .._base._typing import ArrayLike

# At most this many steps: a float32 factor of any conditioning needs about 13 (from
# l_0 ~ eps_32 to 1 at a gain of ~10 per step, then ~4 quadratic steps).
NEWTON_MAX_ITERATIONS = 20
# A root whose residual ||M_k - I||_inf is still above this after the last step counts as failed
# (the caller keeps the previous root): the iteration diverged (a factor with a negative
# eigenvalue beyond the shift) or did not finish.
NEWTON_ACCEPT = 1e-2
# The acceleration maps the spectrum's upper bound to at most this (f(4) = 1/64): mapping it
# closer to p + 1 gains little (12 instead of 10 per step near 0) and costs the top of the
# spectrum its float32 accuracy (the relative rounding of M grows as 1 / f(c u), and it stays
# in X; with c u -> p + 1 a condition number of 30 gave 2e-4 relative error instead of 2e-6).
TOP = 4.0


def _tolerance(n: int, dtype: Any) -> float:
    """Stop once every matrix's residual :math:`\\lVert M_k - I \\rVert_\\infty` is below
    this: 1e-5 (about 1e-6 relative error in :math:`X` after the quadratic steps), or n / 4
    ulps for large blocks, whose products round to more than that."""
    return max(1e-5, 0.25 * n * float(jnp.finfo(dtype).eps))


def newton_inverse_root(stat: jax.Array, matrix_eps: ArrayLike) -> tuple[jax.Array, jax.Array]:
    r"""`(S + eps I)^{-1/4}` of each symmetric PSD matrix of a stack `(..., n, n)`, computed in
    `stat.dtype` (float32 or wider); and whether each root converged.

    The shift: the matrix is :math:`S + \max(\epsilon, \varepsilon b) I` with :math:`b =
    \min(\lVert S \rVert_F, \lVert S \rVert_\infty) \ge \lambda_{max}` and
    :math:`\varepsilon` the dtype's machine epsilon. It differs from eigh's :math:`\epsilon`
    only where :math:`\epsilon` is below the dtype's resolution of the spectrum (eigh's
    eigenvalues carry absolute errors of :math:`\varepsilon \lambda_{max}` too): there, and
    for `matrix_eps = 0`, the null space of a singular factor gets the root of about that
    floor, :math:`(\varepsilon b)^{-1/4}`, large but finite, where the eigendecomposition's
    pseudo-inverse gives 0. The floor keeps the iterated matrix positive definite despite
    rounding (a factor with an eigenvalue below :math:`-\varepsilon b` diverges and is
    reported unconverged) and bounds the iteration count. The zero matrix with `matrix_eps = 0`
    gives 0 (as the pseudo-inverse).

    The matrix is divided by :math:`\max(\max |S|, \epsilon)` first (and the root multiplied
    by its :math:`-1/4` power), so factors up to the dtype's largest value neither overflow
    nor underflow in the products. A non-finite input gives a non-finite root.

    Returns:
      `(root, converged)`: `converged` (shape `(..., 1, 1)`) is False where the residual
      :math:`\lVert M - I \rVert_\infty` is not finite or above `NEWTON_ACCEPT` after the last step.
    """
    p = 4
    n = stat.shape[-1]
    dtype = stat.dtype
    eye = jnp.eye(n, dtype=dtype)
    s = 0.5 * (stat + jnp.swapaxes(stat, -1, -2))
    eps = jnp.asarray(matrix_eps, dtype)
    peak = jnp.max(jnp.abs(s), axis=(-2, -1), keepdims=True)
    unit = jnp.maximum(peak, eps)
    safe_unit = jnp.where(unit > 0, unit, 1.0)
    a = s / safe_unit  # entries <= 1
    fro = jnp.sqrt(jnp.sum(a * a, axis=(-2, -1), keepdims=True))
    row = jnp.max(jnp.sum(jnp.abs(a), axis=-1, keepdims=True), axis=-2, keepdims=True)
    bound = jnp.minimum(fro, row)  # >= lambda_max (both norms bound the spectral radius)
    floor = jnp.maximum(eps / safe_unit, float(jnp.finfo(dtype).eps) * bound)
    floor = jnp.where(unit > 0, floor, 1.0)  # the zero matrix: iterate on I, return 0
    a = a + floor * eye
    z = (p + 1) / (2 * (bound + floor))
    lo, hi = z * floor, z * (bound + floor)

    def residual(m):
        return jnp.max(jnp.sum(jnp.abs(m - eye), axis=-1, keepdims=True), axis=-2, keepdims=True)

    def f(v):
        return v * ((p + 1 - v) / p) ** p

    tol = _tolerance(n, dtype)

    def unfinished(carry):
        i, _, _, _, _, err = carry
        return (i < NEWTON_MAX_ITERATIONS) & jnp.any(jnp.isfinite(err) & (err >= tol))

    def step(carry):
        i, x, m, lo, hi, _ = carry
        # equalise the ends, but map hi to at most TOP; on a tight interval (where 1 - r would
        # cancel) just map hi to 1
        wide = lo < 0.999 * hi
        r = jnp.where(wide, lo / hi, 0.0) ** (1 / p)
        c = jnp.where(wide, jnp.minimum((p + 1) * (1 - r) / (hi - r * lo), TOP / hi), 1 / hi)
        m = c * m
        t = ((p + 1) * eye - m) / p
        x = (c ** (1 / p) * x) @ t
        t2 = t @ t
        m = t2 @ (t2 @ m)
        ends = f(c * lo), f(c * hi)
        return i + 1, x, m, jnp.minimum(*ends), jnp.ones_like(hi), residual(m)

    m0 = z * a
    carry = (jnp.int32(0), z ** (1 / p) * jnp.broadcast_to(eye, a.shape), m0, lo, hi, residual(m0))
    _, x, _, _, _, err = jax.lax.while_loop(unfinished, step, carry)
    root = jnp.where(unit > 0, x * safe_unit ** (-1 / p), 0.0)
    converged = jnp.isfinite(err) & (err <= NEWTON_ACCEPT)
    return root, converged


__all__ = ["NEWTON_ACCEPT", "NEWTON_MAX_ITERATIONS", "newton_inverse_root"]
