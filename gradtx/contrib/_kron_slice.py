"""PSGD Kron's arithmetic on one slice (the non-batch axes of one leaf): the preconditioner
`P = Q^T Q` applied per axis, the factors' fitting step from a probe pair, their balancing, the
update's RMS clip, and the step's random draws (`scale_by_kron` in `_kron.py` maps them over
the batch axes and the leaves)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp

from .._base._typing import ArrayLike

_TINY = float(jnp.finfo(jnp.float32).tiny)  # the reference's eps (bfloat16's tiny, the same)
_RMS_CLIP = 1.1  # the preconditioned update's RMS is clipped to this, per leaf (per slice)


def _along(x: jax.Array, axis: int, f: Callable[[jax.Array], jax.Array]) -> jax.Array:
    """Apply `f` to the rows of `x` with `axis` last."""
    return jnp.moveaxis(f(jnp.moveaxis(x, axis, -1)), -1, axis)


def _left(q: jax.Array, x: jax.Array, axis: int) -> jax.Array:
    """`Q @ x` along `axis` (a diagonal `q` scales)."""
    if q.ndim < 2:
        return x * (
            q if x.ndim == 0 else q.reshape([-1 if a == axis else 1 for a in range(x.ndim)])
        )
    return _along(x, axis, lambda y: y @ q.T)


def _precondition(qs: tuple, g: jax.Array) -> jax.Array:
    """`P g` with `P = Q^T Q` per axis; a scalar slice has one diagonal factor."""
    if g.ndim == 0:
        return qs[0] * qs[0] * g
    for axis, q in enumerate(qs):
        if q.ndim < 2:
            g = _left(q * q, g, axis)
        else:
            g = _along(g, axis, functools.partial(_gram_apply, q))
    return g


def _gram_apply(q: jax.Array, y: jax.Array) -> jax.Array:
    """`y Q^T Q` (rows of `y` by `Q^T Q`)."""
    return (y @ q.T) @ q


def _norm_lower_bound(a: jax.Array) -> jax.Array:
    """A lower bound of the spectral norm of a (symmetric) matrix, as in the reference's
    `norm_lower_bound`: a power-iteration step from its largest column (row)."""
    max_abs = jnp.max(jnp.abs(a))
    a = a / jnp.where(max_abs > 0, max_abs, 1.0)
    aa = a * a
    col, row = jnp.sum(aa, axis=0), jnp.sum(aa, axis=1)
    norm = lambda x: jnp.sqrt(jnp.sum(x * x))
    i, j = jnp.argmax(col), jnp.argmax(row)
    x0 = jax.lax.dynamic_index_in_dim(a, i, axis=1, keepdims=False) @ a
    bound0 = norm((x0 / jnp.maximum(norm(x0), _TINY)) @ a.T)
    x1 = a @ jax.lax.dynamic_index_in_dim(a, j, axis=0, keepdims=False)
    bound1 = norm(a.T @ (x1 / jnp.maximum(norm(x1), _TINY)))
    return max_abs * jnp.where(col[i] > row[j], bound0, bound1)


def _gram(x: jax.Array, axis: int, diagonal: bool) -> jax.Array:
    """`X_i X_i^T` of the unfolding of `x` along `axis` (its diagonal for a diagonal factor)."""
    if x.ndim == 0:
        return x * x
    others = [a for a in range(x.ndim) if a != axis]
    if diagonal:
        return jnp.sum(x * x, axis=others)
    return jnp.tensordot(x, x, axes=(others, others))


def _update_factors(qs: tuple, g: jax.Array, v: jax.Array, lr: ArrayLike) -> tuple:
    """One fitting step of every factor from the pair (v, g), all from the old factors:
    `A = Q g`, `conj(B) = v Q^{-1}` per axis, then `Q_i -= lr triu(A_i A_i^T - B_i B_i^T) Q_i /
    ||A_i A_i^T + B_i B_i^T||` (a diagonal factor: elementwise, by the max-norm)."""
    a, b = g, v
    for axis, q in enumerate(qs):
        a = _left(q, a, axis)
        if q.ndim < 2:
            b = b / (
                q if b.ndim == 0 else q.reshape([-1 if i == axis else 1 for i in range(b.ndim)])
            )
        else:
            solve = lambda y, q=q: jax.lax.linalg.triangular_solve(
                q, y.reshape(-1, y.shape[-1]), left_side=False, lower=False
            ).reshape(y.shape)
            b = _along(b, axis, solve)
    # The step is homogeneous of degree 0 in (term1, term2) jointly: both are computed from
    # A / s and B / s with s = max(max|A|, max|B|), so huge or tiny gradients neither overflow
    # nor underflow to a wrong ratio.
    peak = jnp.maximum(jnp.max(jnp.abs(a)), jnp.max(jnp.abs(b)))
    peak = jnp.where(peak > 0, peak, 1.0)
    a, b = a / peak, b / peak
    out = []
    for axis, q in enumerate(qs):
        diagonal = q.ndim < 2
        term1, term2 = _gram(a, axis, diagonal), _gram(b, axis, diagonal)
        step = lr * (term1 - term2)
        if diagonal:
            q = q - step * q / (jnp.max(jnp.abs(term1 + term2)) + _TINY)
        else:
            q = q - (jnp.triu(step) / (_norm_lower_bound(term1 + term2) + _TINY)) @ q
        out.append(q)
    return tuple(out)


def _balanced(qs: tuple) -> tuple:
    """The factors rescaled to the geometric mean of their max-norms (P unchanged)."""
    if len(qs) < 2:
        return qs
    norms = jnp.stack([jnp.max(jnp.abs(q)) for q in qs])
    gmean = jnp.prod(norms) ** (1.0 / len(qs))
    return tuple(q * (gmean / norms[i]) for i, q in enumerate(qs))


def _rms_clipped(u: jax.Array) -> jax.Array:
    """`u * min(1.1 / (rms(u) + 1e-6), 1)`, the RMS taken of `u / max|u|` (no overflow)."""
    if not u.size:
        return u
    peak = jnp.max(jnp.abs(u))
    safe = jnp.where(peak > 0, peak, 1.0)
    rms = safe * jnp.sqrt(jnp.mean(jnp.square(u / safe)))
    return u * jnp.minimum(_RMS_CLIP / (rms + 1e-6), 1.0)


def _batched(f: Callable, batch: tuple[int, ...], ndim: int) -> Callable:
    """`f(qs, *xs)` mapped over the batch axes: the xs (leaf-shaped) have their batch axes moved
    to the front and back, the factors carry them in front already."""
    if not batch:
        return f
    inner = f
    for _ in batch:
        inner = jax.vmap(inner)
    front = tuple(range(len(batch)))

    def run(qs, *xs):
        out = inner(qs, *(jnp.moveaxis(x, batch, front) for x in xs))
        return out if isinstance(out, tuple) else jnp.moveaxis(out, front, batch)

    return run


def _factors(q: Any) -> tuple:
    """A leaf's factors as a tuple; `nnx.Optimizer` writes the state back with `nnx.update`,
    which turns each tuple into a `State` keyed 0, 1, ..."""
    return tuple(q[i] for i in range(len(q))) if isinstance(q, Mapping) else tuple(q)


def _step_keys(key: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """A step's keys from the state's key data: (next key data, update draw, balance draw,
    probes)."""
    key, k_update, k_balance, k_probe = jax.random.split(jax.random.wrap_key_data(key), 4)
    return jax.random.key_data(key), k_update, k_balance, k_probe


def _probes(k_probe: jax.Array, shapes: list[tuple[int, ...]]) -> list[jax.Array]:
    """The probes V ~ N(0, I) of a step, one per leaf (float32)."""
    keys = jax.random.split(k_probe, max(len(shapes), 1))
    return [jax.random.normal(keys[i], s, jnp.float32) for i, s in enumerate(shapes)]
