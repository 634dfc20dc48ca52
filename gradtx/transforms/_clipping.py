"""Gradient clipping: by value, per-leaf norm, global norm, block RMS and unit-wise (AGC)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from .._base._checks import check_non_negative, check_positive
from .._base._numerics import abs_sq, safe_norm, widen
from .._base._typing import ArrayLike, Updates
from ..core._transformation import GradientTransformation, stateless, stateless_with_params
from ..tree import norm


def _stateless(update_leaves) -> GradientTransformation:
    return stateless(lambda updates, params: update_leaves(updates))


def _shrink_factor(size: jax.Array, limit: ArrayLike) -> jax.Array:
    """`limit / max(size, limit)`: exactly 1 when `size <= limit` (so an infinite limit is no
    clipping, not inf / inf = NaN), with a finite gradient at size 0; a NaN size gives NaN."""
    limit = jnp.asarray(limit, size.dtype)
    return jnp.where(size <= limit, jnp.ones_like(size), limit / jnp.maximum(size, limit))


def clip(max_delta: ArrayLike) -> GradientTransformation:
    r"""Clip every element of the updates to :math:`[-\delta, \delta]`.

    .. math::  u = \min(\max(g, -\delta), \delta)

    Matches `optax.clip`, RETURNN's `gradient_clip` and `torch.nn.utils.clip_grad_value_`.

    Args:
      max_delta: :math:`\delta` > 0, the largest magnitude of an element.

    Returns:
      A stateless `GradientTransformation` (state `EmptyState`).
    """
    check_positive("clip", "max_delta", max_delta)
    return _stateless(
        lambda updates: jax.tree.map(
            lambda g: jnp.clip(g, jnp.negative(max_delta), max_delta).astype(g.dtype), updates
        )
    )


def clip_by_norm(max_norm: ArrayLike) -> GradientTransformation:
    r"""Rescale each leaf whose L2 norm exceeds `max_norm` down to that norm.

    .. math::  u = g \cdot \frac{c}{\max(\|g\|, c)}

    The norm is taken over one leaf (one parameter tensor), in float32. This is the per-parameter
    clipping of nnabla (`Solver.clip_grad_by_norm`) and RETURNN (`gradient_clip_norm`); for one
    norm over all leaves use `clip_by_global_norm`.

    Args:
      max_norm: :math:`c` > 0; `inf` means no clipping.

    Returns:
      A stateless `GradientTransformation` (state `EmptyState`).
    """
    check_positive("clip_by_norm", "max_norm", max_norm)

    def leaf(g):
        factor = _shrink_factor(safe_norm(g), max_norm)
        return (g * factor).astype(g.dtype)

    return _stateless(lambda updates: jax.tree.map(leaf, updates))


def _global_norm(updates: Updates) -> jax.Array:
    """The global L2 norm in float32 (or wider), with a gradient that is finite at zero (a NaN
    norm stays NaN)."""
    sq = norm(updates, squared=True)
    positive = ~(sq <= 0)
    return jnp.where(positive, jnp.sqrt(jnp.where(positive, sq, 1.0)), 0.0).astype(sq.dtype)


def clip_by_global_norm(max_norm: ArrayLike) -> GradientTransformation:
    r"""Rescale all updates together when their global L2 norm exceeds `max_norm`.

    .. math::  u = g \cdot \frac{c}{\max(\|g\|_{global}, c)}, \qquad
      \|g\|_{global} = \sqrt{\textstyle\sum_{\text{leaves}} \|g_i\|^2}

    The norm and the factor are computed in float32 even for bf16 or f16 leaves (whose squares
    would overflow or lose precision); each update keeps its dtype. Matches
    `optax.clip_by_global_norm` and RETURNN's TF `gradient_clip_global_norm`; PyTorch's
    `clip_grad_norm_` (used by RETURNN's torch engine) divides by `norm + 1e-6` instead.

    Args:
      max_norm: :math:`c` > 0; `inf` means no clipping.

    Returns:
      A stateless `GradientTransformation` (state `EmptyState`).

    Examples:
      >>> import jax.numpy as jnp, gradtx
      >>> tx = gradtx.clip_by_global_norm(1.0)
      >>> grads = {"a": jnp.array([3.0]), "b": jnp.array([4.0])}  # global norm 5
      >>> clipped, _ = tx.update(grads, tx.init(grads))
      >>> [round(float(clipped[k][0]), 4) for k in ("a", "b")]
      [0.6, 0.8]

    Reference: Pascanu, Mikolov & Bengio, "On the difficulty of training Recurrent Neural
    Networks" (ICML 2013).
    """
    check_positive("clip_by_global_norm", "max_norm", max_norm)

    def clip_all(updates):
        factor = _shrink_factor(_global_norm(updates), max_norm)
        return jax.tree.map(lambda g: (g * factor).astype(g.dtype), updates)

    return _stateless(clip_all)


def clip_by_block_rms(threshold: ArrayLike) -> GradientTransformation:
    r"""Rescale each leaf whose root mean square exceeds `threshold` down to it.

    .. math::  u = g \Big/ \max\Big(1, \frac{\mathrm{rms}(g)}{\tau}\Big)

    The RMS is taken over one leaf, in float32. Used by Adafactor (update clipping). Matches
    `optax.clip_by_block_rms`.

    Args:
      threshold: :math:`\tau` > 0.

    Returns:
      A stateless `GradientTransformation` (state `EmptyState`).

    Reference: Shazeer & Stern, "Adafactor" (ICML 2018), section 6.
    """
    check_positive("clip_by_block_rms", "threshold", threshold)

    def leaf(g):
        g32 = widen(g)
        rms = jnp.sqrt(jnp.mean(abs_sq(g32)))
        return (g32 / jnp.maximum(1.0, rms / threshold)).astype(g.dtype)

    return _stateless(lambda updates: jax.tree.map(leaf, updates))


_UNIT_AXES = {2: (0,), 3: (0,), 4: (0, 1, 2), 5: (0, 1, 2, 3)}


def _unitwise_norm(x: jax.Array, axis: int | tuple[int, ...] | None, who: str) -> jax.Array:
    """L2 norm of each unit of `x`, broadcast to `x`'s shape, in float32."""
    x = widen(x)
    if axis is None:
        if jnp.squeeze(x).ndim <= 1:
            axis = tuple(range(x.ndim))
        elif x.ndim in _UNIT_AXES:
            axis = _UNIT_AXES[x.ndim]
        else:
            raise ValueError(
                f"{who}: cannot infer the unit axes of a parameter of shape {x.shape}; pass "
                "axis= (the axes one unit's norm is taken over)"
            )
    sq = jnp.sum(abs_sq(x), axis=axis, keepdims=True)
    return jnp.broadcast_to(jnp.sqrt(sq), x.shape)


def adaptive_grad_clip(
    clipping: ArrayLike, eps: ArrayLike = 1e-3, axis: int | tuple[int, ...] | None = None
) -> GradientTransformation:
    r"""Clip each unit's update to at most `clipping` times its parameters' norm (AGC).

    .. math::

      u_i = \begin{cases}
        g_i & \text{if } \|g_i\| < \lambda \max(\|w_i\|, \epsilon) \\
        \lambda \max(\|w_i\|, \epsilon)\, g_i / \|g_i\| & \text{otherwise}
      \end{cases}

    for each unit :math:`i`: a slice of a leaf along `axis`. By default the unit is the whole
    leaf for scalars and vectors, axis 0 for rank 2 and 3 (fan-in of dense and multi-head
    kernels), axes (0, 1, 2) for rank 4 (HWIO convolutions) and (0, 1, 2, 3) for rank 5. Norms
    are computed in float32. Matches `optax.adaptive_grad_clip`.

    Args:
      clipping: :math:`\lambda` > 0, the largest allowed ratio of update norm to parameter norm.
      eps: :math:`\epsilon` >= 0, the smallest parameter norm used (so that zero-initialised
        parameters can move).
      axis: the axes of one unit's norm, or None for the defaults above.

    Returns:
      A stateless `GradientTransformation` (state `EmptyState`); it needs `params`.

    Reference: Brock et al., "High-Performance Large-Scale Image Recognition Without
    Normalization" (ICML 2021).
    """
    who = "adaptive_grad_clip"
    check_positive(who, "clipping", clipping)
    check_non_negative(who, "eps", eps)

    def leaf(g, p):
        g_norm = _unitwise_norm(g, axis, who)
        p_norm = _unitwise_norm(p, axis, who)
        limit = clipping * jnp.maximum(p_norm, eps)
        # The 1e-6 floor only guards the discarded branch against a division by zero.
        scaled = widen(g) * (limit / jnp.maximum(g_norm, 1e-6))
        return jnp.where(g_norm < limit, g, scaled.astype(g.dtype)).astype(g.dtype)

    return stateless_with_params(who, leaf)


__all__ = [
    "adaptive_grad_clip",
    "clip",
    "clip_by_block_rms",
    "clip_by_global_norm",
    "clip_by_norm",
]
