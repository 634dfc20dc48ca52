"""GaLore: run a base optimizer on low-rank projections of the gradients of matrices."""

import math
from collections.abc import Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from .. import tree as gtree
from .._base._checks import alias_errors, check_int
from .._base._explicit import auto_partitioned
from .._base._numerics import cond, safe_increment, widen, zero_count
from .._base._typing import OptState, ScalarOrSchedule, Updates
from ..core._transformation import GradientTransformation, chain
from ..transforms._adam import scale_by_adam
from ..transforms._decay import weight_decay as weight_decay_tx
from ..transforms._scaling import scale_by_learning_rate
from ._dimension_numbers import is_dimension_numbers, matrix_axes, per_leaf_dimension_numbers


class GaLoreDimensionNumbers(NamedTuple):
    """Which axes of a weight form the rows (`reduction_axis`) and the columns (`output_axis`)
    of the matrix that GaLore projects, e.g. `GaLoreDimensionNumbers(0, (1, 2))` for an attention
    weight of shape (embed, heads, head_dim). The same as `optax.contrib.GaLoreDimensionNumbers`.
    """

    reduction_axis: Sequence[int] | int = 0
    output_axis: Sequence[int] | int = 1


class GaLoreState(NamedTuple):
    """State of `scale_by_galore` (Optax's layout)."""

    count: jax.Array  # type: ignore[assignment]  # int32, saturating
    base_optimizer_state: OptState  # the base optimizer's state, on the low-rank shapes
    projector: Updates  # per leaf: the projection matrix, or a (0, 0) array if not projected


class _Matrix(NamedTuple):
    """How a leaf is seen as an (m, n) matrix, and its projection."""

    perm: tuple[int, ...]  # reduction axes, then output axes
    perm_shape: tuple[int, ...]  # the shape after transposing
    m: int
    n: int
    rank: int
    left: bool  # project the rows (m >= n): P is (m, r), R = P^T G; else P is (n, r), R = G P

    def to_2d(self, x: jax.Array) -> jax.Array:
        return jnp.transpose(x, self.perm).reshape(self.m, self.n)

    def from_2d(self, x: jax.Array) -> jax.Array:
        inverse = tuple(sorted(range(len(self.perm)), key=lambda i: self.perm[i]))
        return jnp.transpose(x.reshape(self.perm_shape), inverse)

    def projector_shape(self) -> tuple[int, int]:
        return (self.m, self.rank) if self.left else (self.n, self.rank)

    def low_rank_shape(self) -> tuple[int, int]:
        return (self.rank, self.n) if self.left else (self.m, self.rank)


def _ndim(x: Any) -> int:
    return len(x.shape) if hasattr(x, "shape") else 0


def _matrix(who: str, x: Any, spec: Any, rank: int) -> _Matrix | None:
    if spec is None:
        return None
    if not is_dimension_numbers(spec):
        raise TypeError(
            f"{who}: weight_dimension_numbers must give a GaLoreDimensionNumbers or None per "
            f"leaf, got {spec!r}"
        )
    shape = tuple(getattr(x, "shape", ()))
    if len(shape) < 2:
        raise ValueError(f"{who}: GaLore projects leaves of rank >= 2, got shape {shape}")
    batch, reduction, output = matrix_axes(who, shape, spec)
    if batch or len(set(reduction)) != len(reduction) or len(set(output)) != len(output):
        raise ValueError(
            f"{who}: every axis of a leaf of shape {shape} must be a reduction or an output "
            f"axis, exactly once (got {spec})"
        )
    m = math.prod(shape[a] for a in reduction)
    n = math.prod(shape[a] for a in output)
    return _Matrix(
        perm=reduction + output,
        perm_shape=tuple(shape[a] for a in reduction + output),
        m=m,
        n=n,
        rank=min(rank, m, n),
        left=m >= n,
    )


def scale_by_galore(
    rank: int = 128,
    update_proj_gap: int = 200,
    scale: float = 1.0,
    base_optimizer: GradientTransformation | None = None,
    weight_dimension_numbers: Any = None,
) -> GradientTransformation:
    r"""Run `base_optimizer` on low-rank projections of the gradients of matrices (GaLore).

    .. math::

      P_t = \begin{cases} U_{:, :r}(G_t) & t \equiv 0 \pmod{T} \\ P_{t-1} & \text{else}
      \end{cases}, \qquad
      R_t = P_t^\top G_t, \qquad u_t = s\, P_t\, \rho(R_t)

    for an (m, n) gradient with :math:`m \ge n` (:math:`U` from its SVD; otherwise the right
    singular vectors and :math:`R_t = G_t P_t`), :math:`r` = `rank`, :math:`T` =
    `update_proj_gap`, :math:`\rho` the base optimizer. Other leaves get :math:`\rho` at full
    size. The base optimizer's state lives on the low-rank shapes, so it must not need the
    params (use `scale_by_adam`, not `adamw`; put weight decay in `galore`). The SVD runs in
    float32. None leaves of the params pass through (Optax's GaLore fails on them). Matches
    `optax.contrib.scale_by_galore`.

    Args:
      rank: r >= 1, the rank of the projection (capped by the matrix's dimensions).
      update_proj_gap: T >= 1, steps between recomputations of the projectors.
      scale: :math:`s`, a factor on the projected-back updates.
      base_optimizer: the transformation run in the low-rank space (default
        `gradtx.scale_by_adam()`).
      weight_dimension_numbers: None to project the 2-D leaves; one `GaLoreDimensionNumbers` for
        every leaf of rank >= 2; a tree like the params with a `GaLoreDimensionNumbers` or None
        per leaf; or a callable `params -> such a tree`.

    Returns:
      A `GradientTransformation` with state `GaLoreState(count, base_optimizer_state,
      projector)`.

    Reference: Zhao et al., "GaLore: Memory-Efficient LLM Training by Gradient Low-Rank
    Projection" (ICML 2024), arXiv:2403.03507.
    """
    who = "scale_by_galore"
    check_int(who, "rank", rank, minimum=1)
    check_int(who, "update_proj_gap", update_proj_gap, minimum=1)
    base = scale_by_adam() if base_optimizer is None else base_optimizer
    if not (callable(getattr(base, "init", None)) and callable(getattr(base, "update", None))):
        raise TypeError(
            f"{who}: base_optimizer must be a GradientTransformation, got {type(base).__name__}"
        )
    dims = weight_dimension_numbers

    def matrices(tree: Any) -> tuple[list, list[_Matrix | None], Any]:
        leaves, treedef = jax.tree.flatten(tree)
        if dims is None:
            specs = [GaLoreDimensionNumbers() if _ndim(x) == 2 else None for x in leaves]
        elif is_dimension_numbers(dims):
            specs = [dims if _ndim(x) >= 2 else None for x in leaves]
        else:
            specs = per_leaf_dimension_numbers(who, dims, tree)
        mats = [_matrix(who, x, s, rank) for x, s in zip(leaves, specs, strict=True)]
        return leaves, mats, treedef

    def init(params):
        leaves, mats, treedef = matrices(params)
        projectors, proxies = [], []
        for x, mat in zip(leaves, mats, strict=True):
            if mat is None:
                projectors.append(jnp.zeros((0, 0), x.dtype))
                proxies.append(gtree.zeros_like(x))
            else:
                projectors.append(jnp.zeros(mat.projector_shape(), x.dtype))
                proxies.append(jnp.zeros(mat.low_rank_shape(), x.dtype))
        return GaLoreState(
            count=zero_count(),
            base_optimizer_state=base.init(jax.tree.unflatten(treedef, proxies)),
            projector=jax.tree.unflatten(treedef, projectors),
        )

    def update(updates, state, params=None, **extra_args):
        del params, extra_args
        leaves, mats, treedef = matrices(updates)
        old_projectors = treedef.flatten_up_to(state.projector)
        refresh = state.count % update_proj_gap == 0
        low_rank, projectors = [], []
        for g, mat, p_old in zip(leaves, mats, old_projectors, strict=True):
            if mat is None:
                low_rank.append(g)
                projectors.append(p_old)
                continue
            g2 = widen(mat.to_2d(g))

            def fresh(g2=g2, mat=mat, p_old=p_old):
                u, _, vh = jnp.linalg.svd(g2.astype(jnp.float32), full_matrices=False)
                top = u[:, : mat.rank] if mat.left else vh[: mat.rank, :].T
                return top.astype(p_old.dtype)

            p = cond(refresh, fresh, lambda p_old=p_old: p_old)
            r = widen(p).T @ g2 if mat.left else g2 @ widen(p)
            low_rank.append(r.astype(g.dtype))
            projectors.append(p)
        low_updates, base_state = base.update(
            jax.tree.unflatten(treedef, low_rank), state.base_optimizer_state, None
        )
        full = []
        for g, mat, p, r in zip(
            leaves, mats, projectors, treedef.flatten_up_to(low_updates), strict=True
        ):
            if mat is None:
                full.append(r)
                continue
            rw, pw = widen(r), widen(p)
            back = pw @ rw if mat.left else rw @ pw.T
            full.append((scale * mat.from_2d(back)).astype(g.dtype))
        new_state = GaLoreState(
            count=safe_increment(state.count),
            base_optimizer_state=base_state,
            projector=jax.tree.unflatten(treedef, projectors),
        )
        return jax.tree.unflatten(treedef, full), new_state

    return GradientTransformation(init, auto_partitioned(update))


@alias_errors(renamed={"weight_decay: rate": "weight_decay"})
def galore(
    learning_rate: ScalarOrSchedule,
    rank: int = 128,
    update_proj_gap: int = 200,
    scale: float = 1.0,
    base_optimizer: GradientTransformation | None = None,
    weight_decay: Any = 0.0,
    mask: Any = None,
    weight_dimension_numbers: Any = None,
) -> GradientTransformation:
    r"""GaLore: memory-efficient training by projecting the gradients of matrices to low rank.

    .. math::  w_t = w_{t-1} - \eta_t \left( s\, P_t\, \rho(P_t^\top G_t) + \lambda w_{t-1}
      \right)

    (see `scale_by_galore`). `chain(scale_by_galore(...), weight_decay(weight_decay, mask),
    scale_by_learning_rate(learning_rate))`: the decay is decoupled and applied at full size.
    Matches `optax.contrib.galore`.

    Args:
      learning_rate: :math:`\eta` >= 0, a float or a schedule (use 1 if the base optimizer has
        its own learning rate).
      rank: r >= 1, the rank of the projection.
      update_proj_gap: steps >= 1 between recomputations of the projectors.
      scale: :math:`s`, a factor on the projected-back updates.
      base_optimizer: the gradient-only transformation run in the low-rank space (default
        `gradtx.scale_by_adam()`); not one that needs the params.
      weight_decay: :math:`\lambda` >= 0, decoupled weight decay.
      mask: which parameters decay (a boolean tree, a callable or glob patterns); None: all.
      weight_dimension_numbers: which leaves are projected and how (see `scale_by_galore`).

    Returns:
      A `GradientTransformation`.

    Example:
      >>> import jax.numpy as jnp, gradtx
      >>> tx = gradtx.contrib.galore(1e-2, rank=2)
      >>> params = {"w": jnp.ones((4, 3)), "b": jnp.ones(3)}
      >>> grads = {"w": jnp.ones((4, 3)), "b": jnp.ones(3)}
      >>> updates, state = tx.update(grads, tx.init(params), params)

    Reference: Zhao et al., "GaLore: Memory-Efficient LLM Training by Gradient Low-Rank
    Projection" (ICML 2024), arXiv:2403.03507.
    """
    return chain(
        scale_by_galore(rank, update_proj_gap, scale, base_optimizer, weight_dimension_numbers),
        weight_decay_tx(weight_decay, mask),
        scale_by_learning_rate(learning_rate),
    )


__all__ = [
    "GaLoreDimensionNumbers",
    "GaLoreState",
    "galore",
    "scale_by_galore",
]
