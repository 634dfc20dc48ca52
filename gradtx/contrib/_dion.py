"""Dion: a low-rank orthonormal update of the momentum by one warm-started power iteration with
error feedback, for matrix parameters; AdamW for the others."""

import math
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from .._base._checks import (
    HyperparameterError,
    alias_errors,
    check_in_range,
    check_int,
    check_non_negative,
)
from .._base._explicit import auto_partitioned, gathered
from .._base._introspect import replicated_fields
from .._base._linalg import after
from .._base._numerics import key_data, safe_increment, widen, zero_count
from .._base._recipe import recorded
from .._base._typing import ArrayLike, DType, Mask, Params, ScalarOrSchedule, Seed, Updates
from ..core._transformation import GradientTransformation, chain
from ..state._buffers import check_float_dtype
from ..state._quantize import MomentDType
from ..transforms._building_blocks import (
    buffer_value,
    check_moment_dtype,
    into_buffer,
    moment_buffers,
)
from ..transforms._decay import weight_decay as weight_decay_tx
from ..transforms._scaling import scale_by_learning_rate
from ..wrappers._partition import multi_transform
from ._dimension_numbers import (
    alias_axes,
    is_dimension_numbers,
    matrix_axes,
    per_leaf_dimension_numbers,
    untranspose,
)
from ._fallback import adamw_fallback


class DionDimensionNumbers(NamedTuple):
    """Which axes of a parameter form the matrix that Dion works on.

    The parameter is used as :math:`y = x W`: `reduction_axis` (the input, fan-in axes) and
    `output_axis` (the output, fan-out axes) are flattened into the matrix's two sides; every
    other axis is a batch axis (stacked layers, MoE experts), with its own momentum slice and its
    own :math:`Q`, computed batched (never flattened into the matrix). The default is a plain
    matrix (fan-in = axis 0, fan-out = axis 1). The same fields as `MuonDimensionNumbers` and
    `GaLoreDimensionNumbers`, which are accepted too.
    """

    reduction_axis: Sequence[int] | int = 0
    output_axis: Sequence[int] | int = 1


DimensionNumbersOrFn = DionDimensionNumbers | Params | Callable[[Params], Any] | None


@replicated_fields("q")
class ScaleByDionState(NamedTuple):
    """State of `scale_by_dion`.

    `mu` has each parameter's shape (dtype `mu_dtype` or the params'). `q` has, per leaf, the
    shape `(*batch_shape, min(fan_in, fan_out), r)`: the batch axes in the leaf's order, then the
    smaller side of the matrix, then the rank; dtype `preconditioner_dtype`. On sharded params
    `q` is replicated (`gradtx.state_sharding`): every device computes it whole in its local
    step, so keeping it whole saves its gather.
    """

    count: jax.Array  # type: ignore[assignment]  # int32, saturating
    mu: Updates  # the error-feedback momentum M
    q: Any  # the right factor Q of the power iteration, warm start of the next step


class _Layout(NamedTuple):
    """How a leaf becomes the stack of matrices B (*batch, rows, cols), rows >= cols."""

    order: tuple[int, ...]  # the leaf's axes: batch, then the rows' axes, then the columns'
    batch_shape: tuple[int, ...]
    rows: int
    cols: int
    fan_in: int
    fan_out: int


def _layout(who: str, shape: tuple[int, ...], dims: Any) -> _Layout:
    if dims is None:
        if len(shape) != 2:
            raise ValueError(
                f"{who}: a parameter of shape {shape} is not a matrix; give it "
                "DionDimensionNumbers (weight_dimension_numbers) or leave it out of Dion "
                "(the `dion` alias sends it to AdamW)"
            )
        dims = DionDimensionNumbers()
    if not is_dimension_numbers(dims):
        raise ValueError(
            f"{who}: weight_dimension_numbers must give a DionDimensionNumbers or None per "
            f"leaf, got {dims!r}"
        )
    if len(shape) < 2:
        raise ValueError(f"{who}: Dion needs parameters of rank >= 2, got shape {shape}")
    batch, red, out = matrix_axes(who, shape, dims)
    fan_in = math.prod(shape[a] for a in red)
    fan_out = math.prod(shape[a] for a in out)
    # The reference's orientation: (fan_out, fan_in), transposed when fan_out < fan_in, so that
    # the power iteration's Q sits on the smaller side.
    first, second = (out, red) if fan_out >= fan_in else (red, out)
    return _Layout(
        order=batch + first + second,
        batch_shape=tuple(shape[a] for a in batch),
        rows=max(fan_in, fan_out),
        cols=min(fan_in, fan_out),
        fan_in=fan_in,
        fan_out=fan_out,
    )


def _to_matrices(x: jax.Array, lay: _Layout) -> jax.Array:
    return jnp.transpose(x, lay.order).reshape(*lay.batch_shape, lay.rows, lay.cols)


def _from_matrices(b: jax.Array, lay: _Layout, shape: tuple[int, ...]) -> jax.Array:
    return untranspose(b, lay.order, shape)


def _rank(cols: int, rank: int | None, rank_fraction: float, rank_multiple_of: int) -> int:
    """The leaf's rank r: `rank`, or ceil(rank_fraction * cols) rounded up to a multiple of
    `rank_multiple_of`; clipped to min(fan_in, fan_out) = cols."""
    if rank is None:
        r = math.ceil(round(rank_fraction * cols, 9))
        rank = rank_multiple_of * math.ceil(r / rank_multiple_of)
    return max(1, min(int(rank), cols))


def _mT(x: jax.Array) -> jax.Array:
    return jnp.swapaxes(x, -1, -2)


def _dion_step(
    b: jax.Array, q: jax.Array, mu: ArrayLike, eps: ArrayLike, done: jax.Array | None = None
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """One Dion step on a stack of float32 matrices `b` (*batch, rows, cols) with `q`
    (*batch, cols, r): the orthonormal P, the new momentum and the new (column-normalised) Q.
    Its QR starts only once `done` (the previous leaf's P) is computed (see `after`)."""
    p, tri = jnp.linalg.qr(after(b @ q, done))
    # Householder QR fixes the columns' signs arbitrarily; take the unique factorisation with
    # diag(R) >= 0 (that of the reference's Cholesky QR). P Q^T does not depend on the signs.
    sign = jnp.where(jnp.diagonal(tri, axis1=-2, axis2=-1) < 0, -1.0, 1.0).astype(p.dtype)
    p = p * sign[..., None, :]
    r = _mT(b) @ p
    # An all-zero B gives P = 0 and keeps Q (as the reference's fix_all_zero_or_nan). The
    # reference also zeroes NaNs (its Cholesky QR gives them for a rank-deficient B; Householder
    # QR does not): here a NaN comes only from a non-finite gradient, and it stays in P, R and
    # the state, so that it reaches the update instead of a finite step from a poisoned state.
    zero = jnp.all(b == 0, axis=(-2, -1), keepdims=True)
    p = jnp.where(zero, 0.0, p)
    r = jnp.where(zero, q, r)
    m_new = b - (1 - mu) * (p @ _mT(r))
    q_new = r / (_column_norms(r) + eps)
    return p, m_new, q_new


def _column_norms(r: jax.Array) -> jax.Array:
    """The 2-norm of each column of `r` (*batch, n, k), taken of `r / max|r|` (times `max|r|`)
    so that it neither overflows for huge gradients nor underflows for tiny ones."""
    peak = jnp.max(jnp.abs(r), axis=-2, keepdims=True)
    safe = jnp.where(peak > 0, peak, 1.0)
    return safe * jnp.sqrt(jnp.sum(jnp.square(r / safe), axis=-2, keepdims=True))


def _check_rank(who: str, rank: int | None, rank_fraction: Any, rank_multiple_of: int) -> None:
    if rank is not None:
        check_int(who, "rank", rank, minimum=1)
        if rank_fraction != 1.0:
            raise HyperparameterError(
                who,
                "rank",
                rank,
                "given alone",
                note=f" (rank_fraction={rank_fraction!r} given too; give one of them: an "
                "absolute rank, or a fraction of min(fan_in, fan_out))",
            )
    check_in_range(who, "rank_fraction", rank_fraction, 0.0, 1.0, low_open=True)
    check_int(who, "rank_multiple_of", rank_multiple_of, minimum=1)


# --------------------------------------------------------------------------------------------
# Primitive
# --------------------------------------------------------------------------------------------


@recorded
def scale_by_dion(
    rank_fraction: float = 1.0,
    mu: ArrayLike = 0.95,
    eps: ArrayLike = 1e-8,
    mu_dtype: MomentDType | None = None,
    *,
    rank: int | None = None,
    rank_multiple_of: int = 1,
    seed: Seed = 0,
    preconditioner_dtype: DType = jnp.float32,
    weight_dimension_numbers: DimensionNumbersOrFn = None,
) -> GradientTransformation:
    r"""Replace each matrix update by Dion's low-rank orthonormal direction.

    For each matrix, oriented as :math:`B \in \mathbb{R}^{m \times n}` with :math:`m \ge n`
    (:math:`(n_{out}, n_{in})`, transposed when :math:`n_{out} < n_{in}`), and
    :math:`Q_{t-1} \in \mathbb{R}^{n \times r}`:

    .. math::

      B_t = M_{t-1} + G_t, \qquad P_t = \mathrm{orth}(B_t Q_{t-1}), \qquad
      R_t = B_t^\top P_t, \\
      M_t = B_t - (1-\mu) P_t R_t^\top, \qquad
      Q_t = R_t \,/\, (\lVert R_t \rVert_{\text{col}} + \epsilon), \qquad
      u_t = \sqrt{n_{out}/n_{in}}\; P_t Q_t^\top

    (:math:`u_t` transposed back to the leaf's layout). `orth` is the thin QR's Q factor with a
    non-negative diagonal of R; :math:`\lVert\cdot\rVert_{\text{col}}` the column norms. The
    error feedback keeps in :math:`M_t` what the rank-r step did not apply, and decays by
    :math:`\mu` what it did (:math:`P_t^\top M_t = \mu P_t^\top B_t`). An all-zero :math:`B_t`
    gives :math:`u_t = 0` and keeps the directions of :math:`Q` (as the reference). Everything is
    computed in float32 (the column norms without overflow); :math:`Q` is stored in
    `preconditioner_dtype`.

    The rank of each leaf is :math:`r = \lceil \text{rank\_fraction} \cdot \min(n_{in},
    n_{out}) \rceil`, rounded up to a multiple of `rank_multiple_of`, or `rank`; either is
    clipped to :math:`\min(n_{in}, n_{out})` (a rank above it is not an error: it is the full
    rank). :math:`Q_0` is standard normal, drawn from `seed` (one key per leaf).

    Args:
      rank_fraction: in (0, 1], the rank as a fraction of :math:`\min(n_{in}, n_{out})`
        (1: full rank, the reference's default).
      mu: :math:`\mu` in [0, 1), the momentum / error-feedback decay.
      eps: >= 0, added to the column norms of :math:`R`.
      mu_dtype: dtype of :math:`M` (default: the params'), or a `gradtx.quantized()` spec.
      rank: an absolute rank >= 1 instead of `rank_fraction` (give one of them).
      rank_multiple_of: >= 1, round the rank up to a multiple of it (before clipping).
      seed: an integer seed or a PRNG key for :math:`Q_0`.
      preconditioner_dtype: floating dtype in which :math:`Q` is stored (float32 default;
        bfloat16 halves its memory); None: each param's dtype.
      weight_dimension_numbers: which axes form each leaf's matrix: None (every leaf is a
        matrix), one `DionDimensionNumbers` for all, a tree (or prefix) of them (a None entry
        means the default matrix axes), or a callable of the updates returning one of those.
        Other axes are batch axes (one :math:`M`, :math:`Q` slice each, computed batched).

    Returns:
      A `GradientTransformation` with state `ScaleByDionState(count, mu, q)`: `mu` like the
      params, `q` of shape `(*batch_shape, min(n_in, n_out), r)` per leaf.

    Reference: Ahn, Xu, Abreu, Langford, "Dion: Distributed Orthonormalized Updates" (2025),
    arXiv:2504.05295, Algorithm 1 (centralised Dion), and its reference implementation
    (github.com/microsoft/dion, `dion_update`): the same orientation, scale, zero handling and
    column normalisation. Differences: the reference orthonormalises tall P by randomised
    Cholesky QR (a sketch), here by Householder QR with the same sign convention (the same P in
    exact arithmetic); the reference's rank uses `math.ceil(rank_fraction * n)` where
    0.3 * 10 rounds up to 4, here 3; the reference zeroes NaNs in :math:`P` and :math:`R`
    (which its Cholesky QR gives for a rank-deficient :math:`B`), here a NaN (only from a
    non-finite gradient) reaches the update and the state, as in Muon.
    """
    who = "scale_by_dion"
    _check_rank(who, rank, rank_fraction, rank_multiple_of)
    check_in_range(who, "mu", mu, 0.0, 1.0, high_open=True)
    check_non_negative(who, "eps", eps)
    check_moment_dtype(who, "mu_dtype", mu_dtype)
    check_float_dtype(who, "preconditioner_dtype", preconditioner_dtype)
    seed_data = key_data(who, "seed", seed)

    def layouts(tree):
        leaves = jax.tree.leaves(tree)
        dims = per_leaf_dimension_numbers(who, weight_dimension_numbers, tree)
        return [_layout(who, tuple(x.shape), d) for x, d in zip(leaves, dims, strict=True)]

    def init(params):
        leaves, treedef = jax.tree.flatten(params)
        lays = layouts(params)
        key = jax.random.wrap_key_data(seed_data)
        keys = jax.random.split(key, max(len(leaves), 1))
        qs = []
        for x, lay, k in zip(leaves, lays, keys, strict=False):
            r = _rank(lay.cols, rank, rank_fraction, rank_multiple_of)
            dtype = preconditioner_dtype or x.dtype
            q0 = jax.random.normal(k, (*lay.batch_shape, lay.cols, r), jnp.float32)
            qs.append(q0.astype(dtype))
        return ScaleByDionState(
            count=zero_count(), mu=moment_buffers(params, mu_dtype), q=treedef.unflatten(qs)
        )

    def update(updates, state, params=None, **extra_args):
        del params, extra_args
        leaves, treedef = jax.tree.flatten(updates)
        lays = layouts(updates)
        ms = treedef.flatten_up_to(state.mu)
        qs = treedef.flatten_up_to(state.q)
        new_updates, new_m, new_q = [], [], []
        # The leaves' QRs run one after another, each `after` the previous P: two batched QRs
        # at once deadlocked XLA:CPU's 2-thread pool (one device, 2 CPUs; jaxlib 0.10.2).
        last = None
        for g, m, q, lay in zip(leaves, ms, qs, lays, strict=True):
            b = _to_matrices(widen(g), lay) + _to_matrices(widen(buffer_value(m)), lay)
            # on sharded params: B and Q gathered once, the step local on every device, its
            # results replicated (see `gathered`; left to XLA's partitioner, the QR of a stack
            # sharded along its rows deadlocked XLA:CPU's collectives)
            p, m32, q32 = (
                gathered(x)
                for x in _dion_step(gathered(b), gathered(q.astype(jnp.float32)), mu, eps, last)
            )
            last = p
            u = math.sqrt(lay.fan_out / lay.fan_in) * (p @ _mT(q32))
            new_updates.append(_from_matrices(u, lay, g.shape).astype(g.dtype))
            new_m.append(into_buffer(_from_matrices(m32, lay, g.shape), m))
            new_q.append(q32.astype(q.dtype))
        return treedef.unflatten(new_updates), ScaleByDionState(
            count=safe_increment(state.count),
            mu=treedef.unflatten(new_m),
            q=treedef.unflatten(new_q),
        )

    return GradientTransformation(init, auto_partitioned(update))


# --------------------------------------------------------------------------------------------
# Alias
# --------------------------------------------------------------------------------------------


@alias_errors(
    renamed={"weight_decay: rate": "weight_decay", "adamw: weight_decay": "adam_weight_decay"}
)
def dion(
    learning_rate: ScalarOrSchedule,
    rank_fraction: float = 1.0,
    mu: ArrayLike = 0.95,
    eps: ArrayLike = 1e-8,
    weight_decay: ArrayLike = 0.01,
    weight_decay_mask: Mask | None = None,
    mu_dtype: MomentDType | None = None,
    *,
    rank: int | None = None,
    rank_multiple_of: int = 1,
    seed: Seed = 0,
    preconditioner_dtype: DType = jnp.float32,
    adam_b1: ArrayLike = 0.9,
    adam_b2: ArrayLike = 0.95,
    adam_eps_root: ArrayLike = 0.0,
    adam_weight_decay: ArrayLike = 0.0,
    adam_learning_rate: ScalarOrSchedule | None = None,
    weight_dimension_numbers: DimensionNumbersOrFn = None,
) -> GradientTransformation:
    r"""Dion: low-rank orthonormalised momentum with error feedback for matrices, AdamW for
    every other parameter.

    .. math::

      W_{t+1} = W_t - \eta_t \big(\sqrt{n_{out}/n_{in}}\, P_t Q_t^\top + \lambda W_t\big)
      \ \text{(matrices)}, \qquad
      w_{t+1} = w_t - \eta'_t \Big(\frac{\hat m'_t}{\sqrt{\hat v'_t + \epsilon_{root}} +
      \epsilon} + \lambda' w_t\Big) \ \text{(the rest)}

    with :math:`P_t, Q_t` of `scale_by_dion`. `multi_transform({"dion": chain(scale_by_dion(...),
    weight_decay(weight_decay, weight_decay_mask), scale_by_learning_rate(learning_rate)),
    "adam": adamw(adam_learning_rate, adam_b1, adam_b2, eps, adam_eps_root, mu_dtype,
    weight_decay=adam_weight_decay)}, labels)`. The rule for the other leaves: without
    `weight_dimension_numbers` every 2-D parameter is a Dion matrix and every other one (1-D,
    scalars, 3-D and more) goes to AdamW; with them, the leaves whose dimension numbers are not
    None go to Dion (3-D / 4-D leaves with their batch axes), the rest to AdamW.

    Args:
      learning_rate: :math:`\eta` >= 0 (float or schedule) of the Dion matrices.
      rank_fraction: in (0, 1], the rank as a fraction of min(fan_in, fan_out).
      mu: :math:`\mu` in [0, 1), Dion's momentum / error-feedback decay.
      eps: >= 0, the column normalisation's and AdamW's epsilon.
      weight_decay: :math:`\lambda` >= 0 of the matrices, multiplied by the learning rate.
      weight_decay_mask: which matrices decay (boolean tree or prefix, callable, or patterns).
      mu_dtype: dtype of Dion's momentum and AdamW's first moment; a `gradtx.quantized()` spec
        stores them in 8 bits.
      rank: an absolute rank >= 1 instead of `rank_fraction`; clipped to min(fan_in, fan_out).
      rank_multiple_of: >= 1, round the rank up to a multiple of it.
      seed: an integer seed or a PRNG key for the initial :math:`Q`.
      preconditioner_dtype: storage dtype of :math:`Q` (float32; bfloat16 allowed).
      adam_b1: AdamW's :math:`\beta_1` in [0, 1).
      adam_b2: AdamW's :math:`\beta_2` in [0, 1) (0.95, the reference's).
      adam_eps_root: AdamW's :math:`\epsilon_{root}` >= 0.
      adam_weight_decay: AdamW's :math:`\lambda'` >= 0.
      adam_learning_rate: AdamW's :math:`\eta'`; None uses `learning_rate`.
      weight_dimension_numbers: which leaves are Dion matrices and how: a tree (or prefix) of
        `DionDimensionNumbers` and None (None: AdamW), one `DionDimensionNumbers` for every
        leaf, or a callable of the params returning one of those; None: every 2-D leaf, as a
        plain matrix.

    Returns:
      A `GradientTransformation` with state `MultiTransformState` ("dion" and "adam").

    Example:
      >>> import jax.numpy as jnp, gradtx
      >>> params = {"w": jnp.ones((4, 3)), "b": jnp.zeros(3)}
      >>> tx = gradtx.contrib.dion(0.02, rank=2)
      >>> state = tx.init(params)
      >>> grads = {"w": jnp.arange(12.0).reshape(4, 3), "b": jnp.ones(3)}
      >>> updates, state = tx.update(grads, state, params)
      >>> [updates[k].shape for k in ("w", "b")]
      [(4, 3), (3,)]

    Reference: Ahn, Xu, Abreu, Langford, "Dion: Distributed Orthonormalized Updates" (2025),
    arXiv:2504.05295; github.com/microsoft/dion (`Dion`: defaults mu=0.95, rank_fraction=1,
    AdamW betas (0.9, 0.95), weight_decay=0.01, epsilon=1e-8).
    """
    who = "dion"
    if adam_learning_rate is None:
        adam_learning_rate = learning_rate
    spec: DimensionNumbersOrFn = weight_dimension_numbers

    # The labels decide each leaf once (inferred without a spec); inside the "dion" branch the
    # AdamW leaves are pruned, and the branch reads those decisions (or the user's spec).
    axes = alias_axes(who, spec)
    labels = axes.labels("dion")
    branch_spec = axes.branch_spec
    return multi_transform(
        {
            "dion": chain(
                scale_by_dion(
                    rank_fraction,
                    mu,
                    eps,
                    mu_dtype,
                    rank=rank,
                    rank_multiple_of=rank_multiple_of,
                    seed=seed,
                    preconditioner_dtype=preconditioner_dtype,
                    weight_dimension_numbers=branch_spec,
                ),
                weight_decay_tx(weight_decay, weight_decay_mask),
                scale_by_learning_rate(learning_rate),
            ),
            "adam": adamw_fallback(
                adam_learning_rate,
                adam_b1,
                adam_b2,
                eps,
                adam_eps_root,
                weight_decay=adam_weight_decay,
                mu_dtype=mu_dtype,
                nu_dtype=None,
                nesterov=False,  # the reference's AdamW (microsoft/dion)
            ),
        },
        labels,
    )


__all__ = ["DionDimensionNumbers", "ScaleByDionState", "dion", "scale_by_dion"]
