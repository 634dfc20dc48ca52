"""SM3: a memory-efficient Adagrad with one accumulator per tensor axis slice."""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp

from .._base._checks import check_in_range, check_non_negative
from .._base._recipe import recorded
from .._base._typing import ArrayLike, Updates
from ..core._transformation import GradientTransformation
from ..tree import assert_same_structure, zeros_like
from ._building_blocks import ema, into_buffer_and_value, widen


class ScaleBySM3State(NamedTuple):
    """State of `scale_by_sm3`."""

    mu: Updates  # per leaf, a list with one accumulator vector per axis (one scalar for rank 0)
    nu: Updates  # the momentum of the preconditioned updates


def _axis_accumulators(p) -> list:
    """Zero accumulators for a leaf: one vector of length `shape[i]` per axis `i` (a single
    scalar for a rank-0 leaf). Works on arrays and `jax.ShapeDtypeStruct`."""
    shape, dtype = tuple(p.shape), p.dtype
    if not shape:
        return [jnp.zeros((), dtype)]
    return [jnp.zeros((n,), dtype) for n in shape]


@recorded
def scale_by_sm3(
    b1: ArrayLike = 0.9, b2: ArrayLike = 1.0, eps: ArrayLike = 1e-8
) -> GradientTransformation:
    r"""Rescale updates by SM3's cover-based second-moment estimate, then take momentum.

    For a leaf of rank :math:`k \geq 2` the cover is the set of slices along each axis, with one
    accumulator :math:`\mu^{(r)}` per axis :math:`r` (a vector of that axis' length):

    .. math::

      a_t(i) = c\, g_t(i)^2 + \beta_2 \min_r \mu^{(r)}_{t-1}(i_r), \qquad
      \mu^{(r)}_t(j) = \max_{i:\, i_r = j} a_t(i), \\
      \tilde g_t = g_t\, \frac{[a_t > 0]}{\sqrt{a_t + \epsilon}}, \qquad
      u_t = \beta_1 u_{t-1} + (1-\beta_1) \tilde g_t

    with :math:`c = 1-\beta_2` (:math:`c = 1` when :math:`\beta_2 = 1`, SM3-II's running sum).
    A leaf of rank 0 or 1 keeps the full accumulator :math:`a_t` (plain Adagrad). Arithmetic is
    float32; buffers keep the params' dtype. Matches `optax.scale_by_sm3`, except that Optax
    fails on rank-0 leaves (an `IndexError`) where gradtx treats a scalar as a vector of one.
    Complex parameters are rejected, as in Optax.

    Args:
      b1: :math:`\beta_1` in [0, 1], the momentum of the preconditioned updates.
      b2: :math:`\beta_2` in [0, 1], decay of the accumulators (1: accumulate forever).
      eps: :math:`\epsilon` >= 0 added under the square root.

    Returns:
      A `GradientTransformation` with state `ScaleBySM3State(mu, nu)`.

    Reference: Anil et al., "Memory-Efficient Adaptive Optimization" (NeurIPS 2019).
    """
    who = "scale_by_sm3"
    check_in_range(who, "b1", b1, 0.0, 1.0)
    check_in_range(who, "b2", b2, 0.0, 1.0)
    check_non_negative(who, "eps", eps)

    def init(params):
        for x in jax.tree.leaves(params):
            if jnp.issubdtype(x.dtype, jnp.complexfloating):
                raise ValueError(f"{who}: complex parameters are not supported, got {x.dtype}")
        return ScaleBySM3State(mu=jax.tree.map(_axis_accumulators, params), nu=zeros_like(params))

    def leaf(g, accumulators, u_prev):
        gw = widen(g)
        coeff = jnp.where(jnp.asarray(b2) == 1.0, 1.0, 1.0 - jnp.asarray(b2, jnp.float32))
        rank = gw.ndim
        if rank < 2:
            previous = widen(accumulators[0])
        else:
            views = [
                jnp.reshape(widen(a), [1] * r + [gw.shape[r]] + [1] * (rank - r - 1))
                for r, a in enumerate(accumulators)
            ]
            previous = functools.reduce(jnp.minimum, views)
        acc = coeff * gw * gw + b2 * previous
        scaled = gw * jnp.where(acc > 0, jax.lax.rsqrt(acc + eps), 0.0)
        u_buf, u = into_buffer_and_value(ema(b1, scaled, u_prev), u_prev)
        if rank < 2:
            new_acc = [acc.astype(accumulators[0].dtype)]
        else:
            new_acc = [
                jnp.max(acc, axis=tuple(a for a in range(rank) if a != r)).astype(m.dtype)
                for r, m in enumerate(accumulators)
            ]
        return u.astype(g.dtype), new_acc, u_buf

    def update(updates, state, params=None, **extra_args):
        del params, extra_args
        assert_same_structure(who, updates=updates, **{"state.nu": state.nu})
        # The accumulators form a list per leaf: map over the updates' leaves, taking each
        # leaf's list whole.
        out = jax.tree.map(leaf, updates, state.mu, state.nu)
        pick = lambda i: jax.tree.map(lambda _, o: o[i], updates, out)
        new_updates, nu = pick(0), pick(2)
        mu = jax.tree.map(lambda _, o: o[1], updates, out)
        return new_updates, ScaleBySM3State(mu=mu, nu=nu)

    return GradientTransformation(init, update)


__all__ = ["ScaleBySM3State", "scale_by_sm3"]
