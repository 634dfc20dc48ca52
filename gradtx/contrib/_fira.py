"""Fira: GaLore's low-rank Adam plus the gradient's residual outside the projection, scaled by
the low-rank Adam's norm ratio and held by a norm-growth limiter: full-rank updates under a
low-rank memory budget."""

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from .._base._checks import alias_errors, check_non_negative
from .._base._explicit import auto_partitioned
from .._base._recipe import recorded
from .._base._typing import ArrayLike, DType, MaskOrFn, ScalarOrSchedule, Updates
from ..core._transformation import GradientTransformation, chain
from ..transforms._decay import weight_decay as weight_decay_tx
from ..transforms._scaling import scale_by_learning_rate
from ._apollo import channel_scale, limit_norm_growth
from ._galore import LowRankAdam, top_singular_vectors


class ScaleByFiraState(NamedTuple):
    """State of `scale_by_fira`."""

    count: jax.Array  # type: ignore[assignment]  # int32, saturating
    mu: Updates  # per leaf: EMA of R (low-rank shape) or of g (the param's shape)
    nu: Updates  # per leaf: EMA of R^2 or of g^2
    projection: Updates  # per leaf: P (*batch, d, r) (top singular vectors), or (0, 0)
    norm: Updates  # per leaf: the limiter's last norm (*batch,) float32, () if not projected


@recorded
def scale_by_fira(
    rank: int = 128,
    update_proj_gap: int = 200,
    scale: ArrayLike = 1.0,
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.999,
    eps: ArrayLike = 1e-6,
    *,
    weight_dimension_numbers: Any = None,
    preconditioner_dtype: DType = jnp.float32,
) -> GradientTransformation:
    r"""Rescale updates by Fira: GaLore's low-rank Adam plus the scaled residual of the
    gradient outside the projection.

    For a matrix gradient :math:`G` (m, n) with :math:`m \ge n` (otherwise the same on the
    rows: :math:`P` the top-r left singular vectors, :math:`R = P^\top G`), :math:`P` (n, r)
    the top-r right singular vectors of the gradient at the refresh steps:

    .. math::

      R_t = G_t P, \quad M_t = \beta_1 M_{t-1} + (1-\beta_1) R_t, \quad
      V_t = \beta_2 V_{t-1} + (1-\beta_2) R_t^2, \quad
      N_t = \frac{M_t}{\sqrt{V_t} + \epsilon}, \\
      \phi_{t,i} = \frac{\lVert N_{t,i,:} \rVert}{\lVert R_{t,i,:} \rVert + 10^{-8}}, \quad
      S_t = \mathrm{diag}(\phi_t)\,(G_t - R_t P^\top), \quad
      S_t \leftarrow S_t / \frac{\max(\lVert S_t\rVert / \lVert S_{t-1}\rVert, 1.01)}{1.01}
      \ (t > 1), \\
      u_t = \frac{\sqrt{1-\beta_2^t}}{1-\beta_1^t} \big(\alpha\, N_t P^\top + S_t\big)

    (:math:`\phi` per row for :math:`m \ge n`, per column otherwise: the norm over the rank
    axis, as in the authors' code). :math:`P` is recomputed (an SVD in float32, under
    `lax.cond`) at the steps :math:`t` with :math:`t - 1 \equiv 0 \pmod T`, GaLore's
    convention in gradtx and the authors' code (`pytorch_optimizer` refreshes at step 1 and
    the multiples of :math:`T`); the moments are kept across refreshes. :math:`\epsilon` is
    added to the uncorrected root, the bias correction is a factor on the step, as in the
    reference.

    The residual is :math:`G - P P^\top G`, as in the paper (Eq. 6); the authors' code (fira
    1.0.2) and `pytorch_optimizer.Fira` (4.1.0) subtract :math:`\alpha P P^\top G` (their
    projectors' back-projection carries the scale), which is the same for :math:`\alpha = 1`
    only. A matrix whose last residual was 0
    starts the limiter afresh (see `limit_norm_growth`).

    Leaves that are not projected (by default every leaf not of rank 2; see
    `weight_dimension_numbers`) get Adam with parameter-shaped moments in the params' dtype,
    as in the reference. Batch axes are kept: each batch element is its own matrix.

    Args:
      rank: r >= 1, the rank of the projection (capped by the matrix's sides).
      update_proj_gap: T >= 1, steps between recomputations of the projection.
      scale: :math:`\alpha` >= 0, the factor on the low-rank update (GaLore's scale).
      b1: :math:`\beta_1` in [0, 1).
      b2: :math:`\beta_2` in [0, 1).
      eps: :math:`\epsilon` >= 0.
      weight_dimension_numbers: None (the 2-D leaves are projected), one
        `GaLoreDimensionNumbers` for every leaf of rank >= 2 (other axes are batch axes), a
        tree of them and Nones, or a callable `params -> such a tree`.
      preconditioner_dtype: float32 (default) or bfloat16, of the projection and the low-rank
        moments.

    Returns:
      A `GradientTransformation` with state `ScaleByFiraState(count, mu, nu, projection,
      norm)`: `projection` (*batch, d, r), `mu` / `nu` (*batch, m, r) or (*batch, r, n),
      `norm` (*batch,).

    Reference: Chen et al., "Fira: Can We Achieve Full-rank Training of LLMs Under Low-rank
    Constraint?" (2024), arXiv:2410.01623, Algorithm 1; github.com/xichen-fy/Fira.
    """
    who = "scale_by_fira"
    check_non_negative(who, "scale", scale, finite=True)
    core = LowRankAdam.checked(
        who, rank, update_proj_gap, b1, b2, eps, weight_dimension_numbers, preconditioner_dtype
    )

    def init(params):
        return ScaleByFiraState(**core.init(params))

    def update(updates, state, params=None, **extra_args):
        del params, extra_args
        alpha = jnp.asarray(scale, jnp.float32)

        def direction(lr, g, p, r, n, previous, started, step):
            residual = (g - lr.back(r, p)) * channel_scale(lr, n, r, "channel")
            residual, norm = limit_norm_growth(residual, previous, started)
            return step * lr.from_mat(alpha * lr.back(n, p) + residual), norm

        projection = lambda i, lr, g, p_old: top_singular_vectors(lr, g, p_old.dtype)
        new_updates, fields = core.update(updates, state, projection, direction)
        return new_updates, ScaleByFiraState(**fields)

    return GradientTransformation(init, auto_partitioned(update))


@alias_errors(renamed={"weight_decay: rate": "weight_decay"})
def fira(
    learning_rate: ScalarOrSchedule,
    rank: int = 128,
    update_proj_gap: int = 200,
    scale: ArrayLike = 1.0,
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.999,
    eps: ArrayLike = 1e-6,
    weight_decay: ScalarOrSchedule = 0.0,
    mask: MaskOrFn | None = None,
    *,
    weight_dimension_numbers: Any = None,
    preconditioner_dtype: DType = jnp.float32,
) -> GradientTransformation:
    r"""Fira: full-rank training under a low-rank memory budget (GaLore's low-rank Adam plus a
    scaled residual), with decoupled weight decay.

    .. math::  w_t = w_{t-1} - \eta_t \big(u_t + \lambda w_{t-1}\big)

    with :math:`u_t` of `scale_by_fira`: `chain(scale_by_fira(...), weight_decay(weight_decay,
    mask), scale_by_learning_rate(learning_rate))`; the leaves that are not projected (by
    default all but the 2-D ones) get AdamW. The authors' code (fira 1.0.2) and
    `pytorch_optimizer.Fira` apply the decay after the step,
    :math:`w \leftarrow (w - \eta' u)(1 - \eta\lambda)`, which differs from AdamW's by the
    product :math:`\eta'\eta\lambda u`.

    Args:
      learning_rate: :math:`\eta` >= 0, a float or a schedule.
      rank: r >= 1, the projection's rank.
      update_proj_gap: steps >= 1 between recomputations of the projection.
      scale: :math:`\alpha` >= 0, the factor on the low-rank update.
      b1: :math:`\beta_1` in [0, 1).
      b2: :math:`\beta_2` in [0, 1).
      eps: :math:`\epsilon` >= 0.
      weight_decay: :math:`\lambda` >= 0, decoupled.
      mask: which leaves decay (boolean tree, callable or glob patterns); None: all.
      weight_dimension_numbers: which leaves are projected and how (see `scale_by_fira`).
      preconditioner_dtype: float32 or bfloat16, of the projection and low-rank moments.

    Returns:
      A `GradientTransformation`.

    Example:
      >>> import jax.numpy as jnp, gradtx
      >>> tx = gradtx.contrib.fira(1e-2, rank=2)
      >>> params = {"w": jnp.ones((4, 3)), "b": jnp.zeros(3)}
      >>> grads = {"w": jnp.ones((4, 3)), "b": jnp.ones(3)}
      >>> updates, state = tx.update(grads, tx.init(params), params)

    Reference: Chen et al., "Fira: Can We Achieve Full-rank Training of LLMs Under Low-rank
    Constraint?" (2024), arXiv:2410.01623; `pytorch_optimizer.Fira` (4.1.0).
    """
    return chain(
        scale_by_fira(
            rank,
            update_proj_gap,
            scale,
            b1,
            b2,
            eps,
            weight_dimension_numbers=weight_dimension_numbers,
            preconditioner_dtype=preconditioner_dtype,
        ),
        weight_decay_tx(weight_decay, mask),
        scale_by_learning_rate(learning_rate),
    )


__all__ = ["ScaleByFiraState", "fira", "scale_by_fira"]
