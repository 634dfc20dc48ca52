r"""Euclidean projections of a pytree onto convex sets (and spheres).

Each function returns :math:`\operatorname{argmin}_p \lVert x - p \rVert_2^2` over its set, for
a tree `x` taken as one vector (all leaves together) or leaf by leaf for the separable sets (box,
hypercube, non-negative orthant, l-infinity ball). They are pure, jit / vmap / grad compatible,
and keep the dtype of floating-point leaves (reductions run in float32 or wider); integer leaves
of the non-separable sets come back as float32.

Concrete hyperparameters are checked eagerly (a negative radius names the function and the
value); traced ones are accepted as they are.

Where the projection is not unique or the set is empty, Optax 0.2.8 returns NaN or a point
outside the set; these functions return a valid projection instead (documented on each).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .._base._checks import (
    HyperparameterError,
    check_non_negative,
    check_scalar,
    concrete,
)
from .._base._numerics import cond, wide_float
from .._base._typing import ArrayLike, PyTree
from ..tree import add_scale, assert_same_structure, norm, size, vdot
from ..tree import scale as scale_tree  # `scale` is the radius argument's name here
from ..tree._paths import _is_tree_leaf

# --------------------------------------------------------------------------------------------
# Shared helpers
# --------------------------------------------------------------------------------------------


def _as_float(tree: PyTree) -> PyTree:
    """Every leaf as an array; integer / bool leaves as float32."""

    def leaf(x):
        x = jnp.asarray(x)
        return x if jnp.issubdtype(x.dtype, jnp.inexact) else x.astype(jnp.float32)

    return jax.tree.map(leaf, tree)


def bound_tree(who: str, name: str, bound: Any, tree: PyTree) -> PyTree:
    """`bound` broadcast to every leaf of `tree` when it is a single leaf, else checked to have
    `tree`'s structure."""
    if bound is not None and _is_tree_leaf(bound):
        return jax.tree.map(lambda _: bound, tree)
    assert_same_structure(who, tree=tree, **{name: bound})
    return bound


def check_bounds(who: str, lower: Any, upper: Any) -> None:
    """Concrete box bounds are not NaN and `lower <= upper` (leaf by leaf; a single leaf pairs
    with every leaf of the other)."""
    los = [lower] if _is_tree_leaf(lower) else jax.tree.leaves(lower)
    his = [upper] if _is_tree_leaf(upper) else jax.tree.leaves(upper)
    if len(los) == 1:
        los = los * len(his)
    if len(his) == 1:
        his = his * len(los)
    if len(los) != len(his):
        raise ValueError(f"{who}: lower and upper have {len(los)} and {len(his)} leaves")
    for lo_value, hi_value in zip(los, his, strict=True):
        lo, hi = concrete(lo_value), concrete(hi_value)
        if lo is None or hi is None:
            continue
        if np.any(np.isnan(lo)) or np.any(np.isnan(hi)):
            raise ValueError(f"{who}: bounds must not be NaN, got lower={lo!r}, upper={hi!r}")
        if not np.all(lo <= hi):
            raise ValueError(
                f"{who}: lower must be <= upper, got lower={lo_value!r}, upper={hi_value!r}"
            )


def clip_leaf(x: Any, lo: Any, hi: Any) -> jax.Array:
    """`clip(x, lo, hi)`, the bounds compared in `x`'s dtype when it is floating-point."""
    x = jnp.asarray(x)
    if jnp.issubdtype(x.dtype, jnp.inexact):
        lo, hi = jnp.asarray(lo, x.dtype), jnp.asarray(hi, x.dtype)
    return jnp.clip(x, lo, hi)


def _check_radius(who: str, value: ArrayLike, *, finite: bool = True) -> None:
    check_non_negative(who, "scale", value, finite=finite)


# --------------------------------------------------------------------------------------------
# Separable sets: orthant, box, hypercube, l-infinity ball
# --------------------------------------------------------------------------------------------


def projection_non_negative(tree: Any) -> Any:
    r"""Projection onto the non-negative orthant: :math:`p = \max(x, 0)` element-wise.

    Args:
      tree: tree to project.

    Returns:
      projected tree, with the same structure as ``tree``.
    """
    return jax.tree.map(jax.nn.relu, tree)


def projection_box(tree: Any, lower: Any, upper: Any) -> Any:
    r"""Projection onto box constraints: :math:`p = \mathrm{clip}(x, \text{lower}, \text{upper})`.

    .. math::

      \underset{p}{\text{argmin}} ~ \|x - p\|_2^2 \quad \textrm{subject to} \quad
      \text{lower} \le p \le \text{upper}

    Args:
      tree: tree to project.
      lower: lower bound, a scalar (or an array broadcastable to every leaf) or a tree with the
        same structure as ``tree``; ``-jnp.inf`` for none.
      upper: upper bound, likewise.

    Returns:
      projected tree, with the same structure as ``tree``; floating-point leaves keep their
      dtype (the bounds are compared in it).

    Raises:
      ValueError: when concrete bounds are NaN or ``lower > upper`` somewhere (the box is empty;
        ``jnp.clip`` would silently return ``upper``).

    Unlike Optax 0.2.8, a scalar bound also works for a tree of several leaves.
    """
    who = "projection_box"
    check_bounds(who, lower, upper)
    lo = bound_tree(who, "lower", lower, tree)
    hi = bound_tree(who, "upper", upper, tree)
    return jax.tree.map(clip_leaf, tree, lo, hi)


def projection_hypercube(tree: Any, scale: Any = 1) -> Any:
    r"""Projection onto the hypercube :math:`0 \le p \le \text{scale}` (the unit one by default).

    A special case of :func:`projection_box`.

    Args:
      tree: tree to project.
      scale: side of the hypercube, >= 0: a scalar or a tree (default: 1).

    Returns:
      projected tree, with the same structure as ``tree``.
    """
    who = "projection_hypercube"
    for leaf in [scale] if _is_tree_leaf(scale) else jax.tree.leaves(scale):
        arr = concrete(leaf)
        if arr is not None and not np.all(arr >= 0):  # NaN fails too
            raise HyperparameterError(who, "scale", leaf, ">= 0")
    lo = jax.tree.map(lambda _: 0, tree)
    hi = bound_tree(who, "scale", scale, tree)
    return jax.tree.map(clip_leaf, tree, lo, hi)


def projection_linf_ball(tree: Any, scale: ArrayLike = 1) -> Any:
    r"""Projection onto the l-infinity ball :math:`\lVert p \rVert_\infty \le \text{scale}`:
    every element clipped to :math:`[-\text{scale}, \text{scale}]`.

    Args:
      tree: tree to project.
      scale: radius of the ball, a scalar >= 0 (``jnp.inf``: no constraint).

    Returns:
      projected tree, with the same structure as ``tree``.
    """
    _check_radius("projection_linf_ball", scale, finite=False)
    radius = jnp.asarray(scale)
    return jax.tree.map(lambda x: clip_leaf(x, -radius, radius), tree)


# --------------------------------------------------------------------------------------------
# Simplex and l1 sets (all leaves together)
# --------------------------------------------------------------------------------------------


@jax.custom_jvp
def _simplex_vector(v: jax.Array, s: jax.Array) -> jax.Array:
    r"""Projection of a vector onto :math:`\{p \ge 0, \sum p = s\}` by sorting.

    :math:`p = \max(v - \tau, 0)` with :math:`\tau = (\sum_{i \le \rho} u_i - s) / \rho`,
    `u` the values sorted in decreasing order and :math:`\rho` the largest `k` with
    :math:`u_k > (\sum_{i \le k} u_i - s) / k` (Duchi et al. 2008; Condat 2016). Ties are
    harmless: equal values land on the same side of the threshold.
    """
    u = -jnp.sort(-v)
    k = jnp.arange(1, v.shape[0] + 1)
    thresholds = (jnp.cumsum(u) - s) / k.astype(v.dtype)
    rho = jnp.max(jnp.where(u > thresholds, k, 1))  # >= 1; 1 when s == 0 (then p = 0)
    return jnp.maximum(v - thresholds[rho - 1], 0)


@_simplex_vector.defjvp
def _simplex_vector_jvp(primals, tangents):
    # On the support S of p, p = v - tau with tau = (sum_S v - s) / |S|: the Jacobian is the
    # centering on S, and dp/ds = 1/|S| on S.
    v, s = primals
    dv, ds = tangents
    p = _simplex_vector(v, s)
    support = (p > 0).astype(v.dtype)
    card = jnp.maximum(jnp.sum(support), 1)
    return p, support * (dv - (jnp.dot(support, dv) - ds) / card)


def _simplex_tree(tree: PyTree, s: ArrayLike) -> PyTree:
    """The simplex projection of all leaves of `tree` as one vector (in float32 at least)."""
    leaves, treedef = jax.tree.flatten(_as_float(tree))
    if not leaves or all(x.size == 0 for x in leaves):
        return treedef.unflatten(leaves)
    dtype = wide_float(*(x.dtype for x in leaves))
    flat = jnp.concatenate([jnp.ravel(x).astype(dtype) for x in leaves])
    projected = _simplex_vector(flat, jnp.asarray(s, dtype))
    out, start = [], 0
    for x in leaves:
        out.append(projected[start : start + x.size].reshape(x.shape).astype(x.dtype))
        start += x.size
    return treedef.unflatten(out)


def projection_simplex(tree: Any, scale: ArrayLike = 1) -> Any:
    r"""Projection onto the simplex of the given scale (the probability simplex by default).

    .. math::

      \underset{p}{\text{argmin}} ~ \|x - p\|_2^2 \quad \textrm{subject to} \quad
      p \ge 0, ~ p^\top 1 = \text{scale}

    All leaves together form the vector (the whole tree sums to ``scale``). Differentiable in
    ``tree`` and ``scale`` (a custom JVP on the support of the result).

    Args:
      tree: tree to project.
      scale: value the projected tree sums to, a scalar >= 0 (default: 1); 0 gives zeros (Optax
        returns NaN there).

    Returns:
      projected tree, with the same structure as ``tree``.

    Reference: Duchi, Shalev-Shwartz, Singer, Chandra, "Efficient projections onto the l1-ball
    for learning in high dimensions", ICML 2008; Condat, "Fast projection onto the simplex and
    the l1 ball", Math. Programming 2016.
    """
    _check_radius("projection_simplex", scale)
    return _simplex_tree(tree, scale)


def projection_l1_sphere(tree: Any, scale: ArrayLike = 1) -> Any:
    r"""Projection onto the l1 sphere :math:`\lVert p \rVert_1 = \text{scale}`.

    :math:`p = \sigma \odot \Pi_\Delta(|x|)`, the simplex projection of the magnitudes with the
    signs :math:`\sigma` of `x`. An element equal to 0 takes the sign +1 (either sign is
    optimal): Optax 0.2.8 uses `sign(0) = 0` there, which returns a point off the sphere when
    :math:`\lVert x \rVert_1 < \text{scale}` (e.g. 0 for `x = 0`).

    Args:
      tree: tree to project.
      scale: radius of the sphere, a scalar >= 0.

    Returns:
      projected tree, with the same structure as ``tree``.
    """
    _check_radius("projection_l1_sphere", scale)
    return _l1_sphere(_as_float(tree), scale)


def _l1_sphere(tree: PyTree, s: ArrayLike) -> PyTree:
    magnitudes = _simplex_tree(jax.tree.map(jnp.abs, tree), s)
    return jax.tree.map(lambda x, m: jnp.where(x < 0, -m, m), tree, magnitudes)


def projection_l1_ball(tree: Any, scale: ArrayLike = 1) -> Any:
    r"""Projection onto the l1 ball :math:`\lVert p \rVert_1 \le \text{scale}`.

    `tree` itself when it is inside, else its projection onto the l1 sphere.

    Args:
      tree: tree to project.
      scale: radius of the ball, a scalar >= 0.

    Returns:
      projected tree, with the same structure as ``tree``.
    """
    _check_radius("projection_l1_ball", scale)
    tree = _as_float(tree)
    inside = norm(tree, ord=1) <= scale
    return cond(inside, lambda t: t, lambda t: _l1_sphere(t, scale), tree)


# --------------------------------------------------------------------------------------------
# l2 sets (all leaves together)
# --------------------------------------------------------------------------------------------


def projection_l2_sphere(tree: Any, scale: ArrayLike = 1) -> Any:
    r"""Projection onto the l2 sphere: :math:`p = \text{scale} \cdot x / \lVert x \rVert_2`.

    The norm is the global norm of all leaves, in float32 or wider. For `x = 0` every point of
    the sphere is a projection; this returns the one with all elements equal to
    :math:`\text{scale} / \sqrt{n}` (Optax 0.2.8 returns NaN).

    Args:
      tree: tree to project.
      scale: radius of the sphere, a scalar >= 0.

    Returns:
      projected tree, with the same structure as ``tree``.
    """
    _check_radius("projection_l2_sphere", scale)
    tree = _as_float(tree)
    root = jnp.sqrt(norm(tree, squared=True))
    nonzero = root > 0  # a test on the root, not the sum of squares: see _clipping._global_norm
    factor = scale / jnp.where(nonzero, root, 1)
    uniform = scale / jnp.sqrt(jnp.asarray(max(size(tree), 1), root.dtype))
    return jax.tree.map(
        lambda x: jnp.where(nonzero, factor * x, uniform).astype(x.dtype),
        tree,
    )


def projection_l2_ball(tree: Any, scale: ArrayLike = 1) -> Any:
    r"""Projection onto the l2 ball :math:`\lVert p \rVert_2 \le \text{scale}`.

    .. math::  p = x \cdot \text{scale} / \max(\lVert x \rVert_2, \text{scale})

    The norm is the global norm of all leaves, in float32 or wider; a tree inside the ball comes
    back unchanged. `scale = 0` gives zeros (Optax 0.2.8 returns NaN for `x = 0` there).

    Args:
      tree: tree to project.
      scale: radius of the ball, a scalar >= 0.

    Returns:
      projected tree, with the same structure as ``tree``.
    """
    _check_radius("projection_l2_ball", scale)
    tree = _as_float(tree)
    squared = norm(tree, squared=True)
    s = jnp.asarray(scale, squared.dtype)
    denominator = jnp.sqrt(jnp.maximum(squared, s * s))
    positive = denominator > 0
    factor = jnp.where(positive, s / jnp.where(positive, denominator, 1), 1)
    return scale_tree(factor, tree)


# --------------------------------------------------------------------------------------------
# Affine sets: a line through 0, a hyperplane, a halfspace
# --------------------------------------------------------------------------------------------


def _ratio(numerator: jax.Array, denominator: jax.Array, when_zero: jax.Array) -> jax.Array:
    """`numerator / denominator`, or `when_zero` where the denominator is 0 (with gradients)."""
    nonzero = denominator > 0
    return jnp.where(nonzero, numerator / jnp.where(nonzero, denominator, 1), when_zero)


def projection_vector(x: Any, a: Any) -> Any:
    r"""Projection onto the line spanned by the tree `a`.

    .. math::  \operatorname{proj}_a x = \frac{\langle x, a \rangle}{\langle a, a \rangle} a

    For `a = 0` the line is the point 0, returned as zeros (Optax 0.2.8 returns NaN).

    Args:
      x: tree to project.
      a: tree onto which to project, with the same structure as ``x``.

    Returns:
      tree with the same structure as ``x`` (in the dtypes of ``a``).
    """
    assert_same_structure("projection_vector", x=x, a=a)
    aa = vdot(a, a)
    return scale_tree(_ratio(vdot(x, a), aa, jnp.zeros([], aa.dtype)), _as_float(a))


def _affine_step(who: str, x: Any, a: Any, b: ArrayLike, *, halfspace: bool) -> Any:
    check_scalar(who, "b", b)
    assert_same_structure(who, x=x, a=a)
    aa = vdot(a, a)
    residual = jnp.asarray(b, aa.dtype) - vdot(x, a)
    # a = 0: the set is everything (keep x) when 0 = b (hyperplane) or 0 <= b (halfspace), else
    # empty (NaN: no projection exists).
    feasible = residual >= 0 if halfspace else residual == 0
    step = _ratio(residual, aa, jnp.where(feasible, 0, jnp.nan).astype(aa.dtype))
    if halfspace:
        step = jnp.minimum(step, 0)
    return add_scale(_as_float(x), step, a)


def projection_hyperplane(x: Any, a: Any, b: ArrayLike) -> Any:
    r"""Projection onto the hyperplane :math:`\langle a, y \rangle = b`.

    .. math::  y = x + \frac{b - \langle a, x \rangle}{\langle a, a \rangle} a

    For `a = 0` the set is the whole space when `b = 0` (returns `x`; Optax returns NaN) and empty
    otherwise (returns NaN).

    Args:
      x: tree to project.
      a: tree defining the hyperplane, with the same structure as ``x``.
      b: scalar defining the hyperplane.

    Returns:
      tree with the same structure as ``x``.
    """
    return _affine_step("projection_hyperplane", x, a, b, halfspace=False)


def projection_halfspace(x: Any, a: Any, b: ArrayLike) -> Any:
    r"""Projection onto the halfspace :math:`\langle a, y \rangle \le b`.

    .. math::  y = x + \min\left(0, \frac{b - \langle a, x \rangle}{\langle a, a \rangle}\right) a

    Points inside come back unchanged. For `a = 0` the set is the whole space when `b >= 0`
    (returns `x`; Optax returns NaN for `b = 0`) and empty otherwise (returns NaN).

    Args:
      x: tree to project.
      a: tree defining the halfspace, with the same structure as ``x``.
      b: scalar defining the halfspace.

    Returns:
      tree with the same structure as ``x``.
    """
    return _affine_step("projection_halfspace", x, a, b, halfspace=True)


__all__ = [
    "projection_box",
    "projection_halfspace",
    "projection_hypercube",
    "projection_hyperplane",
    "projection_l1_ball",
    "projection_l1_sphere",
    "projection_l2_ball",
    "projection_l2_sphere",
    "projection_linf_ball",
    "projection_non_negative",
    "projection_simplex",
    "projection_vector",
]
