"""GaLore: run a base optimizer on low-rank projections of the gradients of matrices.

Also the low-rank machinery that APOLLO and Fira share with it: a leaf seen as a batch of (m, n)
matrices and its projection to rank r (`LowRank`, `low_rank_leaves`), the projection onto the top
singular vectors, and the low-rank Adam of APOLLO and Fira (`LowRankAdam`)."""

import math
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .. import tree as gtree
from .._base._checks import alias_errors, check_in_range, check_int, check_non_negative
from .._base._explicit import auto_partitioned
from .._base._linalg import after
from .._base._numerics import abs_sq, cond, safe_increment, widen, zero_count
from .._base._recipe import recorded
from .._base._typing import ArrayLike, Mask, OptState, ScalarOrSchedule, Updates
from ..core._transformation import GradientTransformation, chain
from ..transforms._adam import scale_by_adam
from ..transforms._building_blocks import adam_step_size
from ..transforms._decay import weight_decay as weight_decay_tx
from ..transforms._scaling import scale_by_learning_rate
from ._dimension_numbers import is_dimension_numbers, matrix_axes, per_leaf_dimension_numbers

PRECONDITIONER_DTYPES = (jnp.float32, jnp.bfloat16)


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


class LowRank(NamedTuple):
    """A leaf seen as a batch of (m, n) matrices (batch axes first, kept, never flattened), and
    its projection to rank r: P is (*batch, n, r) and R = G P (*batch, m, r) when `right`, else
    P is (*batch, m, r) and R = P^T G (*batch, r, n)."""

    perm: tuple[int, ...]  # batch axes, reduction axes, output axes
    perm_shape: tuple[int, ...]  # the shape after transposing
    batch: tuple[int, ...]  # the batch shape
    m: int
    n: int
    rank: int
    right: bool

    def to_mat(self, x: jax.Array) -> jax.Array:
        return jnp.transpose(x, self.perm).reshape(*self.batch, self.m, self.n)

    def from_mat(self, x: jax.Array) -> jax.Array:
        inverse = tuple(int(i) for i in np.argsort(self.perm))
        return jnp.transpose(x.reshape(self.perm_shape), inverse)

    def proj_shape(self) -> tuple[int, ...]:
        return (*self.batch, self.n if self.right else self.m, self.rank)

    def low_shape(self) -> tuple[int, ...]:
        return (*self.batch, self.m, self.rank) if self.right else (*self.batch, self.rank, self.n)

    def project(self, g: jax.Array, p: jax.Array) -> jax.Array:
        return g @ p if self.right else jnp.swapaxes(p, -1, -2) @ g

    def back(self, r: jax.Array, p: jax.Array) -> jax.Array:
        return r @ jnp.swapaxes(p, -1, -2) if self.right else p @ r

    @property
    def rank_axis(self) -> int:
        """The axis of R that the projection made of size r (summed over by the channel norm)."""
        return -1 if self.right else -2


def low_rank_leaves(
    who: str, tree: Any, dims: Any, rank: int, *, side: str = "short", batch: bool = True
) -> list[LowRank | None]:
    """Per leaf of `tree`: its `LowRank` view, or None for a leaf that is not projected. `dims`
    None projects the 2-D leaves (rows = axis 0); one dimension-numbers tuple applies to every
    leaf of rank >= 2 (the other axes are batch axes); a tree of them (and Nones) or a callable
    chooses per leaf. `side` is the side of a matrix that the projection shortens to r: "short"
    (APOLLO, Fira: R = G P for m >= n) or "long" (GaLore, as Optax: R = P^T G for m >= n).
    Without `batch`, every axis must be a reduction or an output axis (GaLore's rule)."""
    leaves = jax.tree.leaves(tree)
    if dims is None:
        specs = [GaLoreDimensionNumbers() if np.ndim(x) == 2 else None for x in leaves]
    elif is_dimension_numbers(dims):
        specs = [dims if len(np.shape(x)) >= 2 else None for x in leaves]
    else:
        specs = per_leaf_dimension_numbers(who, dims, tree)
    out: list[LowRank | None] = []
    for x, spec in zip(leaves, specs, strict=True):
        if spec is None:
            out.append(None)
            continue
        if not is_dimension_numbers(spec):
            raise TypeError(
                f"{who}: weight_dimension_numbers must give a GaLoreDimensionNumbers or None per "
                f"leaf, got {spec!r}"
            )
        shape = tuple(np.shape(x))
        if len(shape) < 2:
            raise ValueError(
                f"{who}: GaLore projects leaves of rank >= 2, got shape {shape} (give it None "
                "in weight_dimension_numbers)"
            )
        axes, red, outp = matrix_axes(who, shape, spec)
        if (axes and not batch) or len(set(red)) != len(red) or len(set(outp)) != len(outp):
            raise ValueError(
                f"{who}: every axis of a leaf of shape {shape} must be a reduction or an output "
                f"axis, exactly once (got {spec})"
            )
        m = math.prod(shape[a] for a in red)
        n = math.prod(shape[a] for a in outp)
        perm = axes + red + outp
        out.append(
            LowRank(
                perm=perm,
                perm_shape=tuple(shape[a] for a in perm),
                batch=tuple(shape[a] for a in axes),
                m=m,
                n=n,
                rank=min(rank, m, n),
                right=(m >= n) == (side == "short"),
            )
        )
    return out


def top_singular_vectors(lr: LowRank, g: jax.Array, dtype: Any) -> jax.Array:
    """P from the gradient `g` (*batch, m, n): its top-r singular vectors on the projected side
    (an SVD in float32), in `dtype`."""
    u, _, vh = jnp.linalg.svd(g.astype(jnp.float32), full_matrices=False)
    top = jnp.swapaxes(vh[..., : lr.rank, :], -1, -2) if lr.right else u[..., : lr.rank]
    return top.astype(dtype)


def check_preconditioner_dtype(who: str, dtype: Any) -> jnp.dtype:
    """The dtype of the projections and low-rank moments: float32 or bfloat16."""
    try:
        dt = jnp.dtype(dtype)
    except TypeError:
        dt = None
    if dt not in [jnp.dtype(d) for d in PRECONDITIONER_DTYPES]:
        raise ValueError(f"{who}: preconditioner_dtype must be float32 or bfloat16, got {dtype!r}")
    return dt


#: `direction(lr, g, p, r, n, previous_norm, started, step) -> (update, norm)`: a method's update
#: of a projected leaf from its gradient `g` (*batch, m, n), the projection `p`, `r` = the
#: projected gradient and `n` = the low-rank Adam step `M / (sqrt(V) + eps)`.
Direction = Callable[..., tuple[jax.Array, jax.Array]]


class LowRankAdam(NamedTuple):
    r"""The low-rank Adam of APOLLO and Fira: GaLore's moments on the projected gradient.

    Per projected leaf (`low_rank_leaves`, the short side shortened to r), with the projection
    :math:`P` renewed at the steps :math:`t` with :math:`t - 1 \equiv 0 \pmod T`:

    .. math::

      R_t = G_t P, \quad M_t = \beta_1 M_{t-1} + (1-\beta_1) R_t, \quad
      V_t = \beta_2 V_{t-1} + (1-\beta_2) R_t^2, \quad N_t = \frac{M_t}{\sqrt{V_t} + \epsilon}

    and the method's `direction` makes the update from :math:`G_t, P, R_t, N_t`, given the
    step factor :math:`\sqrt{1-\beta_2^t}/(1-\beta_1^t)`. A leaf that is not projected gets Adam
    with that factor, :math:`\frac{\sqrt{1-\beta_2^t}}{1-\beta_1^t} \frac{m_t}{\sqrt{v_t}
    + \epsilon}`, with moments in the params' dtype. Its state fields: `count`, `mu`, `nu`,
    `projection` (*batch, d, r), `norm` (*batch,) float32 (the method's norm-growth limiter);
    `mu` / `nu` / `projection` in `dtype` for the projected leaves.
    """

    who: str
    rank: int
    update_proj_gap: int
    b1: ArrayLike
    b2: ArrayLike
    eps: ArrayLike
    dims: Any
    dtype: Any

    @classmethod
    def checked(cls, who, rank, update_proj_gap, b1, b2, eps, dims, dtype) -> "LowRankAdam":
        check_int(who, "rank", rank, minimum=1)
        check_int(who, "update_proj_gap", update_proj_gap, minimum=1)
        check_in_range(who, "b1", b1, 0.0, 1.0, high_open=True)
        check_in_range(who, "b2", b2, 0.0, 1.0, high_open=True)
        check_non_negative(who, "eps", eps)
        dtype = check_preconditioner_dtype(who, dtype)
        return cls(who, rank, update_proj_gap, b1, b2, eps, dims, dtype)

    def init(self, params: Any) -> dict[str, Any]:
        leaves, treedef = jax.tree.flatten(params)
        mu, proj, norm = [], [], []
        for x, lr in zip(
            leaves, low_rank_leaves(self.who, params, self.dims, self.rank), strict=True
        ):
            if lr is None:
                mu.append(jnp.zeros(np.shape(x), x.dtype))
                proj.append(jnp.zeros((0, 0), self.dtype))
                norm.append(jnp.zeros((), jnp.float32))
            else:
                mu.append(jnp.zeros(lr.low_shape(), self.dtype))
                proj.append(jnp.zeros(lr.proj_shape(), self.dtype))
                norm.append(jnp.zeros(lr.batch, jnp.float32))
        tree = treedef.unflatten
        return {
            "count": zero_count(),
            "mu": tree(mu),
            "nu": tree([jnp.zeros_like(m) for m in mu]),
            "projection": tree(proj),
            "norm": tree(norm),
        }

    def update(
        self,
        updates: Any,
        state: Any,
        projection: Callable[[int, LowRank, jax.Array, jax.Array], jax.Array],
        direction: Direction,
    ) -> tuple[Any, dict[str, Any]]:
        """`(updates, new state fields)`; `projection(i, lr, g, p_old)` is leaf `i`'s new P."""
        b1, b2, eps = self.b1, self.b2, self.eps
        leaves, treedef = jax.tree.flatten(updates)
        mats = low_rank_leaves(self.who, updates, self.dims, self.rank)
        flat = [
            treedef.flatten_up_to(s) for s in (state.mu, state.nu, state.projection, state.norm)
        ]
        refresh = state.count % self.update_proj_gap == 0
        started = state.count > 0
        count = safe_increment(state.count)
        step = adam_step_size(b1, b2, count)
        outs = []
        last = None  # the previous projection: the next one starts after it (see below)
        for i, (g, lr, m, v, p_old, prev) in enumerate(zip(leaves, mats, *flat, strict=True)):
            gw = widen(g)
            if lr is None:
                m_new = ((1 - b1) * gw + b1 * m).astype(m.dtype)
                v_new = ((1 - b2) * abs_sq(gw) + b2 * v).astype(v.dtype)
                u = step * widen(m_new) / (jnp.sqrt(widen(v_new)) + eps)
                outs.append((u.astype(g.dtype), m_new, v_new, p_old, prev))
                continue
            g2 = lr.to_mat(gw)
            # the projections one after another, as scale_by_galore's SVDs (those of a random
            # projection ignore `g`: nothing waits)
            fresh = lambda i=i, lr=lr, g2=g2, p_old=p_old, last=last: projection(
                i, lr, after(g2, last), p_old
            )
            p = last = cond(refresh, fresh, lambda p_old=p_old: p_old)
            pw = widen(p)
            r = lr.project(g2, pw)
            m_new = ((1 - b1) * r + b1 * widen(m)).astype(m.dtype)
            v_new = ((1 - b2) * abs_sq(r) + b2 * widen(v)).astype(v.dtype)
            n = widen(m_new) / (jnp.sqrt(widen(v_new)) + eps)
            u, norm = direction(lr, g2, pw, r, n, prev, started, step)
            outs.append((u.astype(g.dtype), m_new, v_new, p, norm))
        cols = [treedef.unflatten([o[k] for o in outs]) for k in range(5)]
        fields = dict(zip(("mu", "nu", "projection", "norm"), cols[1:], strict=True))
        return cols[0], {"count": count, **fields}


@recorded
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

    def matrices(tree: Any) -> tuple[list, list[LowRank | None], Any]:
        leaves, treedef = jax.tree.flatten(tree)
        return leaves, low_rank_leaves(who, tree, dims, rank, side="long", batch=False), treedef

    def init(params):
        leaves, mats, treedef = matrices(params)
        projectors, proxies = [], []
        for x, mat in zip(leaves, mats, strict=True):
            if mat is None:
                projectors.append(jnp.zeros((0, 0), x.dtype))
                proxies.append(gtree.zeros_like(x))
            else:
                projectors.append(jnp.zeros(mat.proj_shape(), x.dtype))
                proxies.append(jnp.zeros(mat.low_shape(), x.dtype))
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
        # The SVDs run one after another, each `after` the previous projector: two batched
        # decompositions at once can deadlock XLA:CPU's 2-thread pool (QRs and eighs seen; SVDs
        # queue their batches alike), and a population (`jax.vmap`) batches these.
        last = None
        for g, mat, p_old in zip(leaves, mats, old_projectors, strict=True):
            if mat is None:
                low_rank.append(g)
                projectors.append(p_old)
                continue
            g2 = widen(mat.to_mat(g))
            fresh = lambda g2=g2, mat=mat, p_old=p_old, last=last: top_singular_vectors(
                mat, after(g2, last), p_old.dtype
            )
            p = last = cond(refresh, fresh, lambda p_old=p_old: p_old)
            low_rank.append(mat.project(g2, widen(p)).astype(g.dtype))
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
            back = mat.back(widen(r), widen(p))
            full.append((scale * mat.from_mat(back)).astype(g.dtype))
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
    mask: Mask | None = None,
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
