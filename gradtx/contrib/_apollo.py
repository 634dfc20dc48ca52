"""APOLLO: AdamW's moments kept in a random low-rank projection, used only to measure a
channel-wise (or tensor-wise) learning-rate scale that is applied to the raw gradient.

Also what Fira shares with it on top of the low-rank Adam (`_galore.LowRankAdam`): the scale per
channel and the norm-growth limiter."""

import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from .._base._checks import alias_errors, check_non_negative, check_one_of
from .._base._numerics import abs_sq, key_data
from .._base._recipe import recorded
from .._base._typing import ArrayLike, DType, MaskOrFn, ScalarOrSchedule, Seed, Updates
from ..core._transformation import GradientTransformation, chain
from ..transforms._decay import weight_decay as weight_decay_tx
from ..transforms._scaling import scale_by_learning_rate
from ._galore import LowRank, LowRankAdam

SCALE_TYPES = ("channel", "tensor")
PROJ_TYPES = ("random",)
NORM_GROWTH = 1.01  # the limiter's gamma: the norm may grow by at most 1 % a step
NORM_EPS = 1e-8  # added to the norms divided by (the authors' and the reference's)


def channel_scale(lr: LowRank, adapted: jax.Array, r: jax.Array, scale_type: str) -> jax.Array:
    r"""The ratio :math:`\lVert\tilde R\rVert / (\lVert R\rVert + 10^{-8})`, per channel (the
    norm over the rank axis, one factor per row or column of the full matrix) or per tensor,
    shaped to broadcast against the (*batch, m, n) gradient."""
    axes = (lr.rank_axis,) if scale_type == "channel" else (-2, -1)
    num = jnp.sqrt(jnp.sum(abs_sq(adapted), axis=axes, keepdims=True))
    den = jnp.sqrt(jnp.sum(abs_sq(r), axis=axes, keepdims=True)) + NORM_EPS
    return num / den


def limit_norm_growth(
    s: jax.Array, previous: jax.Array, active: jax.Array
) -> tuple[jax.Array, jax.Array]:
    r"""The norm-growth limiter (Fira, Eq. 9): where `active`, scale `s` (*batch, m, n) down so
    that its norm is at most 1.01 times `previous` (*batch,) where that is > 0 (a matrix whose
    last update was 0, e.g. from a zero gradient, starts afresh; both reference codes would
    divide by 1e-8 there and stall it for good):
    :math:`S \leftarrow S / (\max(\lVert S\rVert / (\lVert S_{prev}\rVert + 10^{-8}),
    1.01) / 1.01)`. Returns the limited `s` and its norm (the next step's `previous`)."""
    norm = jnp.sqrt(jnp.sum(abs_sq(s), axis=(-2, -1)))
    limiter = jnp.maximum(norm / (previous + NORM_EPS), NORM_GROWTH) / NORM_GROWTH
    limiter = jnp.where(active & (previous > 0), limiter, 1.0)
    return s / limiter[..., None, None], (norm / limiter).astype(previous.dtype)


class ScaleByApolloState(NamedTuple):
    """State of `scale_by_apollo`."""

    count: jax.Array  # type: ignore[assignment]  # int32, saturating
    key: jax.Array  # uint32 key data of the PRNG key the projections are drawn from
    mu: Updates  # per leaf: EMA of R (low-rank shape) or of g (the param's shape)
    nu: Updates  # per leaf: EMA of R^2 or of g^2
    projection: Updates  # per leaf: P (*batch, d, r), or a (0, 0) array if not projected
    norm: Updates  # per leaf: the limiter's last norm (*batch,) float32, () if not projected


@recorded
def scale_by_apollo(
    rank: int = 256,
    update_proj_gap: int = 200,
    scale: ArrayLike = 1.0,
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.999,
    eps: ArrayLike = 1e-6,
    *,
    scale_type: str = "channel",
    proj: str = "random",
    seed: Seed = 0,
    weight_dimension_numbers: Any = None,
    preconditioner_dtype: DType = jnp.float32,
) -> GradientTransformation:
    r"""Rescale updates by APOLLO: the raw gradient times a per-channel learning-rate scale
    measured by Adam in a random projection.

    For a matrix gradient :math:`G` (m, n) with :math:`m \ge n` (otherwise the same on the
    rows, with :math:`R = P^\top G`), :math:`P` (n, r) with entries
    :math:`\mathcal N(0, 1/r)` drawn every :math:`T` steps:

    .. math::

      R_t = G_t P, \quad M_t = \beta_1 M_{t-1} + (1-\beta_1) R_t, \quad
      V_t = \beta_2 V_{t-1} + (1-\beta_2) R_t^2, \quad
      \tilde R_t = \frac{M_t}{\sqrt{V_t} + \epsilon}, \\
      s_{t,i} = \frac{\lVert \tilde R_{t,i,:} \rVert}{\lVert R_{t,i,:} \rVert + 10^{-8}}, \quad
      S_t = \mathrm{diag}(s_t)\, G_t, \quad
      S_t \leftarrow S_t / \frac{\max(\lVert S_t\rVert / \lVert S_{t-1}\rVert, 1.01)}{1.01}
      \ (t > 1), \quad
      u_t = \sqrt{\alpha}\, \frac{\sqrt{1-\beta_2^t}}{1-\beta_1^t}\, S_t

    ("channel": one :math:`s` per row (per column for :math:`m < n`), the norm over the rank
    axis; "tensor": one :math:`s` per matrix, APOLLO-Mini's choice with `rank=1`). The
    scale is applied to the raw gradient :math:`G_t`, as in the paper (Algorithm 1) and the
    authors' code; `pytorch_optimizer.APOLLO` (4.1.0) applies it to the projected gradient and
    projects back, so its update has rank r. :math:`\sqrt{\alpha}` is the authors' use of
    `scale` (:math:`\alpha = 128` for APOLLO-Mini); :math:`\epsilon` is added to the
    uncorrected root and the bias correction is a factor on the step, as in both codes.
    :math:`P` is redrawn (under `lax.cond`) at the steps :math:`t` with :math:`t - 1 \equiv 0
    \pmod T` (the first step, then every :math:`T`: GaLore's convention in gradtx) from the key
    in the state folded with the step and the leaf's index; the moments are kept across
    redraws (as in both codes). The norm-growth limiter (Fira's) keeps :math:`\lVert S_t\rVert`
    of each matrix within 1.01 times the last one.

    Leaves that are not projected (by default: every leaf not of rank 2, e.g. biases, norm
    scales, scalars; see `weight_dimension_numbers`) get Adam,
    :math:`\frac{\sqrt{1-\beta_2^t}}{1-\beta_1^t} \frac{m_t}{\sqrt{v_t} + \epsilon}`, with
    parameter-shaped moments in the params' dtype, as in the reference. Batch axes (those of a
    leaf in neither the reduction nor the output axes) are kept: each batch element is its
    own matrix with its own :math:`P`, :math:`s` and limiter.

    State: `projection` (*batch, d, r) with d the projected side, low-rank `mu` / `nu`
    (*batch, m, r) or (*batch, r, n), all in `preconditioner_dtype`; `norm` (*batch,) float32;
    `key` the uint32 key data.

    Args:
      rank: r >= 1, the rank of the projection (capped by the matrix's sides).
      update_proj_gap: T >= 1, steps between redraws of the projection.
      scale: :math:`\alpha` >= 0, the update is multiplied by :math:`\sqrt{\alpha}`.
      b1: :math:`\beta_1` in [0, 1).
      b2: :math:`\beta_2` in [0, 1).
      eps: :math:`\epsilon` >= 0.
      scale_type: "channel" or "tensor".
      proj: "random" (a Gaussian projection; the only kind).
      seed: an integer seed or a PRNG key for the projections.
      weight_dimension_numbers: None (the 2-D leaves are projected, rows = axis 0), one
        `GaLoreDimensionNumbers` for every leaf of rank >= 2 (other axes are batch axes), a
        tree of them and Nones, or a callable `params -> such a tree`.
      preconditioner_dtype: float32 (default) or bfloat16, of the projection and low-rank
        moments.

    Returns:
      A `GradientTransformation` with state `ScaleByApolloState(count, key, mu, nu,
      projection, norm)`.

    Reference: Zhu et al., "APOLLO: SGD-like Memory, AdamW-level Performance" (MLSys 2025),
    arXiv:2412.05270, Algorithm 1; github.com/zhuhanqing/APOLLO.
    """
    who = "scale_by_apollo"
    check_non_negative(who, "scale", scale, finite=True)
    core = LowRankAdam.checked(
        who, rank, update_proj_gap, b1, b2, eps, weight_dimension_numbers, preconditioner_dtype
    )
    check_one_of(who, "scale_type", scale_type, SCALE_TYPES)
    check_one_of(who, "proj", proj, PROJ_TYPES)
    key0 = key_data(who, "seed", seed)

    def init(params):
        return ScaleByApolloState(key=jnp.asarray(key0), **core.init(params))

    def update(updates, state, params=None, **extra_args):
        del params, extra_args
        step_key = jax.random.fold_in(jax.random.wrap_key_data(state.key), state.count)

        def draw(i: int, lr: LowRank, g: jax.Array, p_old: jax.Array) -> jax.Array:
            z = jax.random.normal(jax.random.fold_in(step_key, i), lr.proj_shape(), jnp.float32)
            return (z / math.sqrt(lr.rank)).astype(p_old.dtype)

        def direction(lr, g, p, r, n, previous, started, step):
            s, norm = limit_norm_growth(g * channel_scale(lr, n, r, scale_type), previous, started)
            return (jnp.sqrt(jnp.asarray(scale, jnp.float32)) * step) * lr.from_mat(s), norm

        new_updates, fields = core.update(updates, state, draw, direction)
        return new_updates, ScaleByApolloState(key=state.key, **fields)

    return GradientTransformation(init, update)


@alias_errors(renamed={"weight_decay: rate": "weight_decay"})
def apollo(
    learning_rate: ScalarOrSchedule,
    rank: int = 256,
    update_proj_gap: int = 200,
    scale: ArrayLike = 1.0,
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.999,
    eps: ArrayLike = 1e-6,
    weight_decay: ScalarOrSchedule = 0.0,
    mask: MaskOrFn | None = None,
    *,
    scale_type: str = "channel",
    proj: str = "random",
    seed: Seed = 0,
    weight_dimension_numbers: Any = None,
    preconditioner_dtype: DType = jnp.float32,
) -> GradientTransformation:
    r"""APOLLO: SGD-like memory, AdamW-level performance (a random-projection Adam measuring a
    per-channel scale of the raw gradient), with decoupled weight decay.

    .. math::  w_t = w_{t-1} - \eta_t \big(u_t + \lambda w_{t-1}\big)

    with :math:`u_t` of `scale_by_apollo`: `chain(scale_by_apollo(...), weight_decay(
    weight_decay, mask), scale_by_learning_rate(learning_rate))`. The leaves that are not
    projected (by default all but the 2-D ones) get AdamW. The decay is AdamW's
    (:math:`\eta_t\lambda`, as in the paper); the authors' code (apollo-torch 1.0.3) applies
    it after the step, :math:`w \leftarrow (w - \eta' u)(1 - \eta\lambda)`, which differs by
    the product :math:`\eta'\eta\lambda u`; `pytorch_optimizer.APOLLO` multiplies it by the
    bias-corrected step size instead. APOLLO-Mini is `apollo(lr, rank=1, scale=128,
    scale_type="tensor")`.

    Args:
      learning_rate: :math:`\eta` >= 0, a float or a schedule.
      rank: r >= 1, the projection's rank.
      update_proj_gap: steps >= 1 between redraws of the projection.
      scale: :math:`\alpha` >= 0 (the update is scaled by :math:`\sqrt\alpha`).
      b1: :math:`\beta_1` in [0, 1).
      b2: :math:`\beta_2` in [0, 1).
      eps: :math:`\epsilon` >= 0.
      weight_decay: :math:`\lambda` >= 0, decoupled.
      mask: which leaves decay (boolean tree, callable or glob patterns); None: all.
      scale_type: "channel" or "tensor".
      proj: "random".
      seed: integer seed or PRNG key of the projections.
      weight_dimension_numbers: which leaves are projected and how (see `scale_by_apollo`).
      preconditioner_dtype: float32 or bfloat16, of the projection and low-rank moments.

    Returns:
      A `GradientTransformation`.

    Example:
      >>> import jax.numpy as jnp, gradtx
      >>> tx = gradtx.contrib.apollo(1e-2, rank=2)
      >>> params = {"w": jnp.ones((4, 3)), "b": jnp.zeros(3)}
      >>> grads = {"w": jnp.ones((4, 3)), "b": jnp.ones(3)}
      >>> updates, state = tx.update(grads, tx.init(params), params)

    Reference: Zhu et al., "APOLLO: SGD-like Memory, AdamW-level Performance" (MLSys 2025),
    arXiv:2412.05270; `pytorch_optimizer.APOLLO` (4.1.0).
    """
    return chain(
        scale_by_apollo(
            rank,
            update_proj_gap,
            scale,
            b1,
            b2,
            eps,
            scale_type=scale_type,
            proj=proj,
            seed=seed,
            weight_dimension_numbers=weight_dimension_numbers,
            preconditioner_dtype=preconditioner_dtype,
        ),
        weight_decay_tx(weight_decay, mask),
        scale_by_learning_rate(learning_rate),
    )


__all__ = ["ScaleByApolloState", "apollo", "scale_by_apollo"]
