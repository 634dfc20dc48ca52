"""Arithmetic on whole pytrees (internal; public as `gradtx.tree.*`): creation and casting,
leaf-wise arithmetic, reductions, moment updates, random trees. Names, arguments and defaults
are Optax's (`optax.tree.*`).

`None` leaves are absent (they pass through unchanged). Leaf-wise arithmetic keeps the floating
dtype of the first tree's leaves (a float32 scalar does not promote bf16 leaves); reductions
accumulate floats in float32 at least (float64 when a leaf is float64).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
from jax import tree_util as jtu

from .._base._explicit import on_explicit_axes
from .._base._numerics import abs_sq, wide_float
from .._base._numerics import bias_correction as _bias_correction
from .._base._typing import ArrayLike, PyTree

# --------------------------------------------------------------------------------------------
# Creation and casting
# --------------------------------------------------------------------------------------------


def _is_abstract(x: Any) -> bool:
    return isinstance(x, jax.ShapeDtypeStruct)


def full_like(tree: PyTree, fill_value: ArrayLike, dtype: Any = None) -> PyTree:
    """A tree like `tree` filled with `fill_value` (in `dtype`, default each leaf's dtype).

    Leaves may be arrays, Python scalars or `jax.ShapeDtypeStruct` (then concrete arrays of that
    shape and dtype are created, on the struct's sharding when it has one).
    """

    def fill(x):
        if _is_abstract(x):
            sharding = getattr(x, "sharding", None)
            return jnp.full(x.shape, fill_value, dtype or x.dtype, device=sharding)
        return jnp.full_like(x, fill_value, dtype=dtype)

    return jax.tree.map(fill, tree)


def zeros_like(tree: PyTree, dtype: Any = None) -> PyTree:
    """A tree of zeros like `tree` (see `full_like`)."""
    return full_like(tree, 0, dtype)


def ones_like(tree: PyTree, dtype: Any = None) -> PyTree:
    """A tree of ones like `tree` (see `full_like`)."""
    return full_like(tree, 1, dtype)


def cast(tree: PyTree, dtype: Any) -> PyTree:
    """Every leaf cast to `dtype`; `dtype=None` returns `tree` unchanged."""
    if dtype is None:
        return tree
    return jax.tree.map(lambda x: jnp.asarray(x).astype(dtype), tree)


def cast_like(tree: PyTree, other_tree: PyTree) -> PyTree:
    """Every leaf of `tree` cast to the dtype of the matching leaf of `other_tree` (a leaf of
    `other_tree` without a dtype, e.g. a Python float, leaves its counterpart unchanged)."""
    return jax.tree.map(
        lambda x, o: jnp.asarray(x).astype(o.dtype) if hasattr(o, "dtype") else x,
        tree,
        other_tree,
    )


def _higher_dtype(a: Any, b: Any) -> Any:
    top = jnp.promote_types(a, b)
    if top not in (jnp.dtype(a), jnp.dtype(b)):
        raise ValueError(
            f"dtype: cannot order {jnp.dtype(a).name} and {jnp.dtype(b).name}: neither promotes "
            f"to the other (they promote to {top.name}); use mixed_dtype_handler='promote'"
        )
    return top


def _lower_dtype(a: Any, b: Any) -> Any:
    top = _higher_dtype(a, b)
    return jnp.dtype(b) if top == jnp.dtype(a) else jnp.dtype(a)


def dtype(tree: PyTree, mixed_dtype_handler: str | None = None) -> Any:
    """The dtype of the leaves of `tree` (JAX's default float dtype for an empty tree).

    Args:
      tree: a pytree of arrays.
      mixed_dtype_handler: what to do when the leaves' dtypes differ: `None` raises a
        `ValueError` naming the leaves that differ; `"promote"` returns their common promoted
        dtype (`jnp.promote_types`); `"highest"` / `"lowest"` the highest / lowest in the order
        "a <= b when a promotes to b" (a `ValueError` when two dtypes are not ordered, e.g.
        int32 and uint32).
    """
    dtypes = [jnp.asarray(x).dtype for x in jax.tree.leaves(tree)]
    if not dtypes:
        return jnp.asarray([]).dtype
    if mixed_dtype_handler is None:
        first = dtypes[0]
        wrong = [
            f"{path}: {d.name}"
            for path, d in zip(_leaf_paths(tree), dtypes, strict=True)
            if d != first
        ]
        if wrong:
            raise ValueError(
                f"dtype: the leaves have different dtypes (the first is {first.name}; "
                f"differing: {', '.join(wrong)}); pass mixed_dtype_handler='promote', "
                "'highest' or 'lowest'"
            )
        return first
    handlers: dict[str, Callable[[Any, Any], Any]] = {
        "promote": jnp.promote_types,
        "highest": _higher_dtype,
        "lowest": _lower_dtype,
    }
    if mixed_dtype_handler not in handlers:
        raise ValueError(
            "dtype: mixed_dtype_handler must be None, 'promote', 'highest' or 'lowest', "
            f"got {mixed_dtype_handler!r}"
        )
    return jnp.dtype(functools.reduce(handlers[mixed_dtype_handler], dtypes))


def _leaf_paths(tree: PyTree) -> list[str]:
    return [jtu.keystr(p) for p, _ in jtu.tree_flatten_with_path(tree)[0]]


def batch_shape(tree: PyTree, shape: tuple[int, ...] = ()) -> PyTree:
    """Every leaf broadcast to leading batch dimensions `shape`: `(*shape, *leaf.shape)`."""
    return jax.tree.map(lambda x: jnp.broadcast_to(x, (*shape, *jnp.shape(x))), tree)


# --------------------------------------------------------------------------------------------
# Arithmetic (a floating result keeps the dtype of the first tree's leaf)
# --------------------------------------------------------------------------------------------


def _dtype_of(x: Any) -> Any:
    return x.dtype if hasattr(x, "dtype") else jnp.result_type(x)


def _keep(x: Any, out: Any) -> Any:
    """`out` in `x`'s dtype when both are real floats or both complex (bf16 stays bf16 against a
    float32 operand); otherwise as promoted (an integer leaf times 0.5 is not truncated). An
    `out` already of `x`'s dtype is returned as it is (NumPy stays NumPy, as in Optax)."""
    x_dtype, out_dtype = _dtype_of(x), _dtype_of(out)
    if x_dtype == out_dtype:
        return out
    for kind in (jnp.floating, jnp.complexfloating):
        if jnp.issubdtype(x_dtype, kind) and jnp.issubdtype(out_dtype, kind):
            return jnp.asarray(out).astype(x_dtype)
    return out


_NO_TREE: Any = object()


def add(tree_x: PyTree = _NO_TREE, tree_y: PyTree = _NO_TREE, *other_trees: PyTree) -> PyTree:
    """Leaf-wise sum of two (or more) trees of the same structure (one tree: itself)."""
    if tree_x is _NO_TREE:
        raise ValueError("add: needs at least one tree")
    trees = [tree_x] if tree_y is _NO_TREE else [tree_x, tree_y, *other_trees]
    return jax.tree.map(
        lambda x, *rest: _keep(x, functools.reduce(lambda a, b: a + b, rest, x)), *trees
    )


def sub(tree_x: PyTree, tree_y: PyTree) -> PyTree:
    """Leaf-wise `x - y`."""
    return jax.tree.map(lambda x, y: _keep(x, x - y), tree_x, tree_y)


def mul(tree_x: PyTree, tree_y: PyTree) -> PyTree:
    """Leaf-wise `x * y`."""
    return jax.tree.map(lambda x, y: _keep(x, x * y), tree_x, tree_y)


def div(tree_x: PyTree, tree_y: PyTree) -> PyTree:
    """Leaf-wise `x / y` (true division: integer leaves give floats)."""
    return jax.tree.map(lambda x, y: _keep(x, x / y), tree_x, tree_y)


def scale(scalar: ArrayLike, tree: PyTree) -> PyTree:
    """Every leaf multiplied by `scalar`, keeping its floating dtype."""
    return jax.tree.map(lambda x: _keep(x, scalar * x), tree)


def add_scale(tree_x: PyTree, scalar: ArrayLike, tree_y: PyTree) -> PyTree:
    """Leaf-wise `x + scalar * y`, keeping the floating dtype of `x` (a `None` in `tree_x` stays
    `None`, whatever `tree_y` has there)."""
    return jax.tree.map(
        lambda x, y: None if x is None else _keep(x, x + scalar * y),
        tree_x,
        tree_y,
        is_leaf=lambda x: x is None,
    )


def where(condition: Any, tree_x: PyTree, tree_y: PyTree) -> PyTree:
    """Leaf-wise `jnp.where`; `condition` is a scalar or array (applied to every leaf) or a
    tree of them like `tree_x`."""
    if jtu.treedef_is_leaf(jax.tree.structure(condition)) and condition is not None:
        return jax.tree.map(lambda x, y: jnp.where(condition, x, y), tree_x, tree_y)
    return jax.tree.map(lambda c, x, y: jnp.where(c, x, y), condition, tree_x, tree_y)


def clip(tree: PyTree, min_value: ArrayLike | None = None, max_value: ArrayLike | None = None):
    """Every leaf clipped to `[min_value, max_value]` (`None`: no bound on that side)."""
    return jax.tree.map(lambda x: jnp.clip(x, min_value, max_value), tree)


def conj(tree: PyTree) -> PyTree:
    """The complex conjugate of every leaf (real leaves unchanged)."""
    return jax.tree.map(jnp.conj, tree)


def real(tree: PyTree) -> PyTree:
    """The real part of every leaf."""
    return jax.tree.map(jnp.real, tree)


# --------------------------------------------------------------------------------------------
# Reductions (floats accumulated in float32, or float64 when a leaf is float64)
# --------------------------------------------------------------------------------------------


def _leaves(tree: PyTree) -> list[jax.Array]:
    return [jnp.asarray(x) for x in jax.tree.leaves(tree)]


def _real_dtype(dtype_: Any) -> Any:
    return jnp.finfo(dtype_).dtype if jnp.issubdtype(dtype_, jnp.complexfloating) else dtype_


def _acc_dtype(leaves: Sequence[jax.Array]) -> Any:
    """float32, or float64 when a leaf is float64 or complex128 (a complex leaf counts by the
    dtype of its real part)."""
    return wide_float(*(_real_dtype(x.dtype) for x in leaves))


def _magnitude(x: jax.Array, dtype_: Any) -> jax.Array:
    return jnp.abs(x).astype(dtype_) if jnp.iscomplexobj(x) else x.astype(dtype_)


def sum(tree: PyTree, associative_reduction: bool = False) -> jax.Array:
    """Sum of all elements of all leaves (0 for an empty tree).

    Floats accumulate in float32 or wider, complex leaves in complex64 or wider; a tree of only
    integer (or bool) leaves sums in their promoted integer dtype, as `jnp.sum` does.
    `associative_reduction=True` adds the leaves' sums pairwise (a shallower graph for trees of
    many leaves; the order, and so the last bits, may differ).
    """
    leaves = _leaves(tree)
    if leaves and all(not jnp.issubdtype(x.dtype, jnp.inexact) for x in leaves):
        sums = [jnp.sum(x) for x in leaves]
        acc = jnp.result_type(*sums)
    else:
        acc = _acc_dtype(leaves)
        if any(jnp.iscomplexobj(x) for x in leaves):
            acc = jnp.promote_types(acc, jnp.complex64)
        sums = [jnp.sum(x.astype(acc)) for x in leaves]
    if not sums:
        return jnp.zeros([], acc)
    if associative_reduction:
        while len(sums) > 1:
            pairs = [a + b for a, b in zip(sums[::2], sums[1::2], strict=False)]
            sums = pairs + ([sums[-1]] if len(sums) % 2 else [])
        return sums[0].astype(acc)
    return functools.reduce(lambda a, b: a + b, sums[1:], sums[0]).astype(acc)


def _keeping_nan(reduce: Callable) -> Callable:
    """`reduce` (`jnp.max` / `jnp.min`) giving NaN wherever its input holds one, as NumPy does:
    XLA:CPU's reductions of a few thousand values drop a NaN (openxla/xla#21461), so a gradient
    with a NaN would show a finite maximum."""

    def run(x: jax.Array, **kwargs: Any) -> jax.Array:
        out = reduce(x, **kwargs)
        if not jnp.issubdtype(x.dtype, jnp.inexact):
            return out
        return jnp.where(jnp.any(jnp.isnan(x)), jnp.asarray(jnp.nan, out.dtype), out)

    return run


def _extreme(tree: PyTree, reduce_leaf: Callable, combine: Callable, initial: float):
    partial = [reduce_leaf(x) for x in _leaves(tree) if x.size]
    return functools.reduce(combine, partial, initial)


def max(tree: PyTree) -> jax.Array:
    """The largest element of all leaves (`-inf` for a tree without elements)."""
    return jnp.asarray(_extreme(tree, _keeping_nan(jnp.max), jnp.maximum, -float("inf")))


def min(tree: PyTree) -> jax.Array:
    """The smallest element of all leaves (`inf` for a tree without elements)."""
    return jnp.asarray(_extreme(tree, _keeping_nan(jnp.min), jnp.minimum, float("inf")))


def vdot(tree_x: PyTree, tree_y: PyTree) -> jax.Array:
    r"""Inner product of two trees, :math:`\sum_{leaves} \bar x \cdot y` (`jnp.vdot` per leaf,
    summed, as Optax's `tree.vdot`): complex when a leaf is complex, accumulated in float32 or
    wider (float64 when a leaf is float64 or complex128; bf16 leaves give float32)."""
    xs, ys = _leaves(tree_x), _leaves(tree_y)
    if len(xs) != len(ys):
        raise ValueError(f"vdot: trees have {len(xs)} and {len(ys)} leaves")
    acc = _acc_dtype(xs + ys)
    if any(jnp.iscomplexobj(x) for x in xs + ys):
        acc = jnp.promote_types(acc, jnp.complex64)
    total = jnp.zeros([], acc)
    for x, y in zip(xs, ys, strict=True):
        wide = jnp.promote_types(jnp.promote_types(x.dtype, y.dtype), acc)
        total = total + _leaf_vdot(x.astype(wide), y.astype(wide)).astype(acc)
    return total


def _leaf_vdot(x: jax.Array, y: jax.Array) -> jax.Array:
    """`jnp.vdot(x, y)`; on explicit mesh axes, where raveling a sharded array is an error, the
    sum of the element-wise product."""
    if on_explicit_axes(x, y):
        return jnp.sum(jnp.conj(x) * y)
    return jnp.vdot(x, y)


def real_vdot(tree_x: PyTree, tree_y: PyTree) -> jax.Array:
    r"""Real inner product of two trees, :math:`\operatorname{Re} \sum_{leaves} \bar x \cdot y`,
    in float32 or wider (float64 when a leaf is float64 or complex128); internal, for L-BFGS,
    line searches and the learning-rate-free optimizers.

    Complex leaves are multiplied in their complex dtype, so the imaginary parts count:
    :math:`\operatorname{Re} \langle x, y \rangle = \sum \operatorname{Re} x
    \operatorname{Re} y + \operatorname{Im} x \operatorname{Im} y` (the inner product of
    :math:`\mathbb{C}^n` as :math:`\mathbb{R}^{2n}`)."""
    xs, ys = _leaves(tree_x), _leaves(tree_y)
    if len(xs) != len(ys):
        raise ValueError(f"vdot: trees have {len(xs)} and {len(ys)} leaves")
    acc = _acc_dtype(xs + ys)
    total = jnp.zeros([], acc)
    for x, y in zip(xs, ys, strict=True):
        wide = jnp.promote_types(jnp.promote_types(x.dtype, y.dtype), acc)
        total = total + _leaf_vdot(x.astype(wide), y.astype(wide)).real.astype(acc)
    return total


_INF_ORDS = ("inf", "infinity")


def norm(tree: PyTree, ord: int | float | str | None = None, squared: bool = False) -> jax.Array:
    """Global norm of all leaves together, accumulated in float32 even for bf16 leaves.

    Args:
      tree: a pytree of arrays (complex leaves count by their magnitudes).
      ord: `None` or 2 (or "fro") for the L2 norm, 1 for the sum of magnitudes, `jnp.inf` (or
        "inf", "infinity") for the largest magnitude.
      squared: return the square of the norm.

    Returns:
      A float32 scalar (float64 when a leaf is float64); 0 for an empty tree.
    """
    leaves = _leaves(tree)
    acc = _acc_dtype(leaves)
    zero = jnp.zeros([], acc)
    if ord is None or (not isinstance(ord, str) and ord == 2) or ord == "fro":
        sq = functools.reduce(
            lambda a, x: a + jnp.sum(jnp.square(_magnitude(x, acc))), leaves, zero
        )
        return sq if squared else jnp.sqrt(sq)
    if not isinstance(ord, str) and ord == 1:
        out = functools.reduce(lambda a, x: a + jnp.sum(jnp.abs(_magnitude(x, acc))), leaves, zero)
    elif ord in _INF_ORDS or (not isinstance(ord, str) and ord == jnp.inf):
        out = functools.reduce(
            lambda a, x: jnp.maximum(
                a, _keeping_nan(jnp.max)(jnp.abs(_magnitude(x, acc)), initial=0)
            ),
            leaves,
            zero,
        )
    else:
        raise ValueError(f"norm: ord must be 1, 2 or inf (or None), got {ord!r}")
    return jnp.square(out) if squared else out


def size(tree: PyTree) -> int:
    """Total number of elements in all leaves (works on `jax.ShapeDtypeStruct` leaves too)."""
    total = 0
    for x in jax.tree.leaves(tree):
        shape = x.shape if hasattr(x, "shape") else jnp.shape(x)
        n = 1
        for d in shape:
            n *= int(d)
        total += n
    return total


def allclose(
    a: PyTree,
    b: PyTree,
    rtol: ArrayLike = 1e-05,
    atol: ArrayLike = 1e-08,
    equal_nan: bool = False,
) -> Any:
    """Whether every leaf of `a` is close to the matching leaf of `b` (`jnp.allclose` per leaf,
    and-ed together; `True` for trees without leaves)."""
    close = jax.tree.map(
        lambda x, y: jnp.allclose(x, y, rtol=rtol, atol=atol, equal_nan=equal_nan), a, b
    )
    return functools.reduce(lambda p, q: p & q, jax.tree.leaves(close), True)


# --------------------------------------------------------------------------------------------
# Moments (the building blocks Optax's scale_by_* rules are written with)
# --------------------------------------------------------------------------------------------


def _map_skipping_none(f: Callable, updates: PyTree, moments: PyTree) -> PyTree:
    return jax.tree.map(
        lambda g, t: None if g is None else f(g, t), updates, moments, is_leaf=lambda x: x is None
    )


def update_moment(updates: PyTree, moments: PyTree, decay: ArrayLike, order: int) -> PyTree:
    r"""The EMA of the `order`-th power: :math:`(1 - \beta) g^{order} + \beta m`.

    Args:
      updates: the gradients :math:`g` (a pytree; None leaves are kept).
      moments: the previous moments :math:`m`, same structure.
      decay: :math:`\beta`.
      order: the power of :math:`g`.
    """
    return _map_skipping_none(lambda g, t: (1 - decay) * (g**order) + decay * t, updates, moments)


def update_infinity_moment(
    updates: PyTree, moments: PyTree, decay: ArrayLike, eps: ArrayLike
) -> PyTree:
    r"""The decayed infinity norm: :math:`\max(|g| + \epsilon, \beta m)`.

    Args:
      updates: the gradients :math:`g` (a pytree; None leaves are kept).
      moments: the previous moments :math:`m`, same structure.
      decay: :math:`\beta`.
      eps: :math:`\epsilon` added to :math:`|g|`.
    """
    return _map_skipping_none(
        lambda g, t: jnp.maximum(jnp.abs(g) + eps, decay * t), updates, moments
    )


def update_moment_per_elem_norm(
    updates: PyTree, moments: PyTree, decay: ArrayLike, order: int
) -> PyTree:
    r"""The EMA of the `order`-th power of each element's magnitude:
    :math:`(1 - \beta) |g|^{order} + \beta m` (real for complex `g`; for real `g` it is
    :math:`g^{order}`, as in Optax).

    Args:
      updates: the gradients :math:`g` (a pytree; None leaves are kept).
      moments: the previous moments :math:`m`, same structure.
      decay: :math:`\beta`.
      order: the power of :math:`|g|`.
    """

    def power(g):
        if not jnp.iscomplexobj(g):
            return g**order
        half = order / 2
        return abs_sq(g) ** (int(half) if float(half).is_integer() else half)

    return _map_skipping_none(lambda g, t: (1 - decay) * power(g) + decay * t, updates, moments)


def bias_correction(moment: PyTree, decay: ArrayLike, count: ArrayLike) -> PyTree:
    r"""Every leaf divided by :math:`1 - \beta^{count}` (computed in float32, then cast to the
    leaf's dtype); a no-op as `count` grows.

    Args:
      moment: a pytree (an EMA started at 0).
      decay: :math:`\beta`, the EMA's decay.
      count: the number of updates of the EMA (the step, from 1).
    """
    correction = _bias_correction(decay, count)
    return jax.tree.map(lambda t: t / correction.astype(t.dtype), moment)


# --------------------------------------------------------------------------------------------
# Random trees
# --------------------------------------------------------------------------------------------


def split_key_like(rng_key: Any, target_tree: PyTree) -> PyTree:
    """One key per leaf of `target_tree` (`jax.random.split` into as many keys as it has
    leaves), in its structure."""
    treedef = jax.tree.structure(target_tree)
    return jax.tree.unflatten(treedef, list(jax.random.split(rng_key, treedef.num_leaves)))


def random_like(
    rng_key: Any,
    target_tree: PyTree,
    sampler: Callable[..., Any] = jax.random.normal,
    dtype: Any = None,
) -> PyTree:
    """A tree like `target_tree` with fresh draws of `sampler(key, shape, dtype)` per leaf.

    Each leaf gets its own key (`split_key_like`); `dtype` defaults to the leaf's. A sampler that
    takes `out_sharding` gets the leaf's sharding.
    """
    keys = split_key_like(rng_key, target_tree)
    try:
        takes_sharding = "out_sharding" in inspect.signature(sampler).parameters
    except (TypeError, ValueError):
        takes_sharding = False

    def draw(leaf, key):
        if takes_sharding:
            sharding = jax.typeof(leaf).sharding
            return sampler(key, leaf.shape, dtype or leaf.dtype, out_sharding=sharding)
        return sampler(key, leaf.shape, dtype or leaf.dtype)

    return jax.tree.map(draw, target_tree, keys)


def unwrap_random_key_data(input_tree: PyTree) -> PyTree:
    """Typed PRNG keys in `input_tree` replaced by their raw key data (for comparisons)."""

    def unwrap(x):
        if isinstance(x, jax.Array) and jnp.issubdtype(x.dtype, jax.dtypes.prng_key):
            return jax.random.key_data(x)
        return x

    return jax.tree.map(unwrap, input_tree)


# --------------------------------------------------------------------------------------------
# Per-leaf maps
# --------------------------------------------------------------------------------------------


def map_split(f: Callable[..., tuple], n: int, tree: PyTree, *rest: PyTree) -> tuple:
    """`jax.tree.map` for an `f` that returns an `n`-tuple per leaf: returns `n` trees.

    Lets a transformation compute its new update and its new state buffers in one pass per leaf.
    """
    out = jax.tree.map(f, tree, *rest)
    return tuple(jax.tree.map(lambda _, o, i=i: o[i], tree, out) for i in range(n))
