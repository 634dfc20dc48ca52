"""NorMuon: Muon's orthogonalised momentum, normalised per output neuron by a second moment of
the orthogonalised update, then rescaled; AdamW for the other parameters."""

import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from .._base._checks import (
    alias_errors,
    check_in_range,
    check_int,
    check_non_negative,
    check_one_of,
)
from .._base._explicit import auto_partitioned
from .._base._numerics import safe_divide, safe_increment, widen, zero_count
from .._base._recipe import recorded
from .._base._typing import ArrayLike, DType, Mask, ScalarOrSchedule, Updates
from ..core._transformation import GradientTransformation, chain, identity
from ..state._quantize import MomentDType
from ..transforms._building_blocks import (
    buffer_value,
    check_float_dtype,
    check_moment_dtype,
    ema,
    into_buffer,
    into_buffer_and_value,
    moment_buffers,
)
from ..transforms._decay import weight_decay as weight_decay_tx
from ..transforms._scaling import scale_by_learning_rate
from ..wrappers._partition import multi_transform
from ._dimension_numbers import alias_axes, per_leaf_dimension_numbers, untranspose
from ._fallback import adamw_fallback
from ._muon import (  # read-only: Muon's orthogonalisation
    _DEFAULT_NS_COEFFS,
    _NS_COEFFS_PRESETS,
    _PRECONDITIONINGS,
    DimensionNumbersOrFn,
    _coefficient_table,
    _matrix_axes,
    _orthogonalize,
    scale_by_shape,
)

UPDATE_SCALES = ("match_rms", "preserve_norm")
_TINY = 1e-30  # the least normalising eps: after `unit_peak` a nonzero matrix has norm >= 1


class ScaleByNormuonState(NamedTuple):
    """State of `scale_by_normuon`."""

    count: jax.Array  # type: ignore[assignment]  # int32, saturating
    mu: Updates  # momentum, each leaf the parameter's shape, dtype mu_dtype or the params'
    nu: Updates  # per-neuron second moment, each leaf (*batch, fan_out), preconditioner_dtype


# --------------------------------------------------------------------------------------------
# A leaf as a stack of matrices (batch, fan_in, fan_out) and back
# --------------------------------------------------------------------------------------------


class MatrixView(NamedTuple):
    """How a leaf maps to a stack of matrices `(batch, fan_in, fan_out)`: the transposition
    (batch axes, then reduction axes, then output axes) and the sizes."""

    order: tuple[int, ...]
    batch_shape: tuple[int, ...]
    fan_in: int
    fan_out: int
    reduction_shape: tuple[int, ...]


def matrix_view(
    who: str, shape: tuple[int, ...], dims: Any, *, otherwise: str = "leave it out of NorMuon"
) -> MatrixView:
    """The leaf of `shape` as a stack of matrices; `otherwise` completes the error for a leaf
    that is not a matrix and has no dimension numbers (the caller's other fix)."""
    batch, red, out = _matrix_axes(who, tuple(shape), dims, otherwise=otherwise)
    return MatrixView(
        order=batch + red + out,
        batch_shape=tuple(shape[a] for a in batch),
        fan_in=math.prod(shape[a] for a in red),
        fan_out=math.prod(shape[a] for a in out),
        reduction_shape=tuple(shape[a] for a in red),
    )


def to_matrices(x: jax.Array, view: MatrixView) -> jax.Array:
    """`x` as a stack `(prod(batch), fan_in, fan_out)` (one matrix per batch entry)."""
    return jnp.transpose(x, view.order).reshape(
        math.prod(view.batch_shape), view.fan_in, view.fan_out
    )


def from_matrices(m: jax.Array, view: MatrixView, shape: tuple[int, ...]) -> jax.Array:
    """The inverse of `to_matrices`."""
    return untranspose(m, view.order, shape)


def unit_peak(x: jax.Array) -> jax.Array:
    """Each matrix of a stack (B, m, n) divided by its largest magnitude (0 stays 0): the same
    direction, with squares that neither overflow (huge values) nor underflow (tiny ones)."""
    peak = jnp.max(jnp.abs(x), axis=(-2, -1), keepdims=True)
    return safe_divide(x, peak)


def _frobenius(x: jax.Array) -> jax.Array:
    """Per-matrix Frobenius norm of a stack (B, m, n), shape (B, 1, 1), without overflow."""
    peak = jnp.max(jnp.abs(x), axis=(-2, -1), keepdims=True)
    safe = jnp.where(peak > 0, peak, 1.0)
    return safe * jnp.sqrt(jnp.sum(jnp.square(x / safe), axis=(-2, -1), keepdims=True))


# --------------------------------------------------------------------------------------------
# Primitive
# --------------------------------------------------------------------------------------------


@recorded
def scale_by_normuon(
    ns_coeffs: Any = _DEFAULT_NS_COEFFS,
    ns_steps: int = 5,
    beta: ArrayLike = 0.95,
    b2: ArrayLike = 0.95,
    eps: ArrayLike = 1e-8,
    mu_dtype: MomentDType | None = None,
    *,
    nesterov: bool = True,
    update_scale: str = "match_rms",
    target_rms: ArrayLike = 0.2,
    preconditioning: str = "frobenius",
    preconditioner_dtype: DType = jnp.float32,
    weight_dimension_numbers: DimensionNumbersOrFn = None,
) -> GradientTransformation:
    r"""Orthogonalise each matrix's momentum (Muon), normalise it per output neuron by a running
    second moment, and rescale it: NorMuon's direction.

    For each matrix :math:`G_t \in \mathbb{R}^{n_{in} \times n_{out}}` (the parameter used as
    :math:`y = x W`; each column is one output neuron):

    .. math::

      M_t = \beta M_{t-1} + (1-\beta) G_t, \qquad
      O_t = \mathrm{NS}\big(\beta M_t + (1-\beta) G_t\big)
      \ \ (\text{or } \mathrm{NS}(M_t) \text{ without Nesterov}), \\
      v_{t,j} = \beta_2 v_{t-1,j} + (1-\beta_2) \tfrac{1}{n_{in}} \textstyle\sum_i O_{t,ij}^2,
      \qquad \hat O_{t,ij} = O_{t,ij} / (\sqrt{v_{t,j}} + \epsilon), \\
      u_t = \rho \sqrt{n_{in} n_{out}}\, \hat O_t / (\lVert \hat O_t \rVert_F + \epsilon)
      \ \text{("match\_rms")}, \qquad
      u_t = \lVert O_t \rVert_F\, \hat O_t / (\lVert \hat O_t \rVert_F + \epsilon)
      \ \text{("preserve\_norm")}

    with NS the Newton-Schulz iteration of `scale_by_muon` (its `ns_coeffs`, `ns_steps`,
    `preconditioning`), computed in float32 on the matrix divided by its largest magnitude (so
    huge and tiny gradients neither overflow nor drown in eps). "match_rms" gives the update the RMS
    :math:`\rho` = `target_rms` (0.2, AdamW's typical RMS), as in Algorithm 1 of the paper;
    "preserve_norm" keeps the Frobenius norm of :math:`O_t`, as the authors' code (then `normuon`
    adds Muon's width scaling :math:`\sqrt{\max(1, n_{out}/n_{in})}`). Neither moment is bias
    corrected (the paper's rule; the final rescale makes a uniform correction moot). Batch axes
    (stacked layers, experts) are independent matrices, each with its own rows' statistics and
    its own rescale. A zero update stays zero (no 0/0, even with eps = 0); a non-finite gradient
    gives a non-finite update (and state), as in Muon, never a silent zero.

    Args:
      ns_coeffs: Newton-Schulz coefficients, a table of rows of them, or a preset name
        ("standard", "dion", "polar_express"); see `scale_by_muon`.
      ns_steps: number of Newton-Schulz iterations (>= 1).
      beta: :math:`\beta` in [0, 1), the momentum decay.
      b2: :math:`\beta_2` in [0, 1), the decay of the per-neuron second moment.
      eps: >= 0, added to the Newton-Schulz normalisation, the neuron-wise denominator and the
        rescale's norm.
      mu_dtype: dtype of the momentum (default: the params'), or a `gradtx.quantized()` spec.
      nesterov: orthogonalise the Nesterov momentum :math:`\beta M_t + (1-\beta) G_t`.
      update_scale: "match_rms" (the paper) or "preserve_norm" (the authors' code).
      target_rms: :math:`\rho` >= 0 of "match_rms".
      preconditioning: the Newton-Schulz normalisation, as in `scale_by_muon`.
      preconditioner_dtype: a floating dtype for the second moment :math:`v` (float32 default;
        bfloat16 halves it, it is read back in float32).
      weight_dimension_numbers: which axes form each leaf's matrix: None (every leaf is a plain
        (fan_in, fan_out) matrix), one `MuonDimensionNumbers` for all, a tree (or prefix) of
        them, or a callable of the updates returning one of those.

    Returns:
      A `GradientTransformation` with state `ScaleByNormuonState(count, mu, nu)`: `mu` like the
      params, `nu` of shape `(*batch_shape, fan_out)` per leaf, `fan_out` the product of the
      leaf's output axes (the neurons: rows of the paper's :math:`d_{out} \times d_{in}` matrix).

    Reference: Li et al., "NorMuon: Making Muon more efficient and scalable" (2025),
    arXiv:2510.05491, Algorithm 1; `pytorch_optimizer.NorMuon` (4.1.0). Differences from the
    latter: the default scale is the paper's "match_rms" (the reference's default is the code's
    "preserve_norm"); the Newton-Schulz iterations run in float32 (the reference's in bfloat16);
    the neuron axis is the output axes of the dimension numbers (the reference's axis 0 of a
    torch (out, in) weight, the same neurons). Also checked against the authors' package,
    NVIDIA's emerging-optimizers 0.3.0 (`AdaptiveMuon(moment2_method="normuon")`, the
    "preserve_norm" scale with Muon's width scaling), which departs from the paper for wide
    weights (out < in): it keeps one second moment per *input* there; gradtx keeps one per
    output neuron for every shape, as Algorithm 1 does.
    """
    who = "scale_by_normuon"
    check_int(who, "ns_steps", ns_steps, minimum=1)
    table = _coefficient_table(who, ns_coeffs, ns_steps)
    check_in_range(who, "beta", beta, 0.0, 1.0, high_open=True)
    check_in_range(who, "b2", b2, 0.0, 1.0, high_open=True)
    check_non_negative(who, "eps", eps)
    check_non_negative(who, "target_rms", target_rms)
    check_one_of(who, "update_scale", update_scale, UPDATE_SCALES)
    check_one_of(who, "preconditioning", preconditioning, _PRECONDITIONINGS)
    check_moment_dtype(who, "mu_dtype", mu_dtype)
    if preconditioner_dtype is None:
        preconditioner_dtype = jnp.float32
    check_float_dtype(who, "preconditioner_dtype", preconditioner_dtype)
    match_rms = update_scale == "match_rms"

    def views(tree):
        dims = per_leaf_dimension_numbers(who, weight_dimension_numbers, tree)
        return [
            matrix_view(who, tuple(x.shape), d)
            for x, d in zip(jax.tree.leaves(tree), dims, strict=True)
        ]

    def init(params):
        treedef = jax.tree.structure(params)
        nu = [jnp.zeros((*v.batch_shape, v.fan_out), preconditioner_dtype) for v in views(params)]
        return ScaleByNormuonState(
            count=zero_count(), mu=moment_buffers(params, mu_dtype), nu=treedef.unflatten(nu)
        )

    def update(updates, state, params=None, **extra_args):
        del params, extra_args
        leaves, treedef = jax.tree.flatten(updates)
        mus = treedef.flatten_up_to(state.mu)
        nus = treedef.flatten_up_to(state.nu)
        new_updates, new_mu, new_nu = [], [], []
        for g, m, v, view in zip(leaves, mus, nus, views(updates), strict=True):
            g32 = widen(g)
            m32: Any = widen(ema(beta, g32, buffer_value(m)))
            direction = beta * m32 + (1 - beta) * g32 if nesterov else m32
            x = unit_peak(to_matrices(direction, view))  # a zero matrix stays 0 (no 0/0 at eps=0)
            o = _orthogonalize(x, table, preconditioning, jnp.maximum(eps, _TINY))
            row_ms = jnp.mean(jnp.square(o), axis=-2)  # (B, fan_out): one per neuron
            v_buf, v32 = into_buffer_and_value(
                ema(b2, row_ms, widen(v).reshape(row_ms.shape)).reshape(v.shape), v
            )
            o_hat = safe_divide(o, jnp.sqrt(v32.reshape(row_ms.shape))[:, None, :] + eps)
            norm_hat = _frobenius(o_hat) + eps
            scale: Any
            if match_rms:
                scale = target_rms * math.sqrt(view.fan_in * view.fan_out)
            else:
                scale = _frobenius(o)
            u = from_matrices(safe_divide(scale * o_hat, norm_hat), view, g.shape)
            new_updates.append(u.astype(g.dtype))
            new_mu.append(into_buffer(m32, m))
            new_nu.append(v_buf)
        return treedef.unflatten(new_updates), ScaleByNormuonState(
            count=safe_increment(state.count),
            mu=treedef.unflatten(new_mu),
            nu=treedef.unflatten(new_nu),
        )

    return GradientTransformation(init, auto_partitioned(update))


# --------------------------------------------------------------------------------------------
# Alias
# --------------------------------------------------------------------------------------------


@alias_errors(
    renamed={"weight_decay: rate": "weight_decay", "adamw: weight_decay": "adam_weight_decay"}
)
def normuon(
    learning_rate: ScalarOrSchedule,
    ns_coeffs: Any = _DEFAULT_NS_COEFFS,
    ns_steps: int = 5,
    beta: ArrayLike = 0.95,
    b2: ArrayLike = 0.95,
    eps: ArrayLike = 1e-8,
    weight_decay: ArrayLike = 0.0,
    weight_decay_mask: Mask | None = None,
    mu_dtype: MomentDType | None = None,
    *,
    nesterov: bool = True,
    update_scale: str = "match_rms",
    target_rms: ArrayLike = 0.2,
    preconditioning: str = "frobenius",
    preconditioner_dtype: DType = jnp.float32,
    consistent_rms: ArrayLike | None = None,
    adam_b1: ArrayLike = 0.9,
    adam_b2: ArrayLike = 0.95,
    adam_eps_root: ArrayLike = 0.0,
    adam_weight_decay: ArrayLike = 0.0,
    adam_learning_rate: ScalarOrSchedule | None = None,
    weight_dimension_numbers: DimensionNumbersOrFn = None,
) -> GradientTransformation:
    r"""NorMuon: orthogonalised momentum normalised per neuron for the matrices, AdamW for the
    rest.

    .. math::

      W_{t+1} = W_t - \eta_t \big(s\, u_t + \lambda W_t\big) \ \text{(matrices)}, \qquad
      w_{t+1} = w_t - \eta'_t \Big(\frac{\hat m'_t}{\sqrt{\hat v'_t + \epsilon_{root}} +
      \epsilon} + \lambda' w_t\Big) \ \text{(the rest)}

    with :math:`u_t` of `scale_by_normuon` and :math:`s = 1` for "match_rms" (the paper's
    :math:`\hat\eta = 0.2\,\eta\sqrt{mn}/\lVert\hat O\rVert_F` is in :math:`u_t`), or Muon's
    width scaling of `scale_by_shape` (with `consistent_rms`) for "preserve_norm", the
    reference's `get_adjusted_lr`. That is `multi_transform({"normuon":
    chain(scale_by_normuon(...), scale_by_shape(...) or identity(), weight_decay(weight_decay,
    weight_decay_mask), scale_by_learning_rate(learning_rate)), "adam":
    adamw(adam_learning_rate, adam_b1, adam_b2, eps, adam_eps_root,
    weight_decay=adam_weight_decay)}, labels)`.

    The 1-D rule, as `muon`'s: without `weight_dimension_numbers` every 2-D leaf is a NorMuon
    matrix and every other leaf (biases, gains, scalars, and 3-D / 4-D leaves) goes to plain
    AdamW (not Nesterov: the reference's AdamW groups); with them, the leaves whose dimension
    numbers are not None are NorMuon matrices (their batch axes independent), the rest AdamW.

    Args:
      learning_rate: :math:`\eta` >= 0 (float or schedule) of the matrices.
      ns_coeffs: Newton-Schulz coefficients, a table of them, or a preset name.
      ns_steps: Newton-Schulz iterations (>= 1).
      beta: momentum decay in [0, 1) (the reference's `momentum`).
      b2: decay of the per-neuron second moment in [0, 1) (the reference's `beta2`).
      eps: >= 0, NorMuon's epsilon and AdamW's.
      weight_decay: :math:`\lambda` >= 0 of the matrices, multiplied by the learning rate.
      weight_decay_mask: which matrices decay (boolean tree or prefix, callable, or patterns).
      mu_dtype: dtype of the first moments (NorMuon's and AdamW's).
      nesterov: Nesterov momentum for the matrices (the reference's default; Algorithm 1 of the
        paper is `nesterov=False`).
      update_scale: "match_rms" (the paper, default) or "preserve_norm" (the authors' code,
        the reference's default).
      target_rms: the RMS of "match_rms" updates (0.2).
      preconditioning: the Newton-Schulz normalisation (see `scale_by_muon`).
      preconditioner_dtype: dtype of the per-neuron second moment (float32 or bfloat16).
      consistent_rms: with "preserve_norm": None (Muon's width scaling) or the target RMS of
        `scale_by_shape` (0.2: the reference's `use_adjusted_lr=True`).
      adam_b1: AdamW's :math:`\beta'_1` in [0, 1).
      adam_b2: AdamW's :math:`\beta'_2` in [0, 1) (0.95, the reference's).
      adam_eps_root: AdamW's :math:`\epsilon_{root}` >= 0.
      adam_weight_decay: AdamW's :math:`\lambda'` >= 0.
      adam_learning_rate: AdamW's :math:`\eta'`; None uses `learning_rate`.
      weight_dimension_numbers: which leaves are NorMuon matrices and how: a tree (or prefix)
        of `MuonDimensionNumbers` and None (None: AdamW), one for every leaf, or a callable of
        the params; None: every 2-D leaf as a plain (fan_in, fan_out) matrix.

    Returns:
      A `GradientTransformation` with state `MultiTransformState` ("normuon" and "adam").

    Example:
      >>> import jax.numpy as jnp, gradtx
      >>> params = {"w": jnp.ones((4, 3)), "b": jnp.zeros(3)}
      >>> tx = gradtx.contrib.normuon(0.02)
      >>> grads = {"w": jnp.arange(12.0).reshape(4, 3), "b": jnp.ones(3)}
      >>> updates, state = tx.update(grads, tx.init(params), params)

    Reference: Li et al., "NorMuon: Making Muon more efficient and scalable" (2025),
    arXiv:2510.05491; `pytorch_optimizer.NorMuon` (4.1.0), with the differences listed in
    `scale_by_normuon`.
    """
    who = "normuon"
    if adam_learning_rate is None:
        adam_learning_rate = learning_rate
    if isinstance(ns_coeffs, str):  # a preset: its table is read by `_coefficient_table`
        check_one_of(who, "ns_coeffs", ns_coeffs, list(_NS_COEFFS_PRESETS))
    check_one_of(who, "update_scale", update_scale, UPDATE_SCALES)
    axes = alias_axes(who, weight_dimension_numbers)  # decides each leaf once, in the labels
    branch_spec = axes.branch_spec
    shape_scale = (
        scale_by_shape(branch_spec, consistent_rms)
        if update_scale == "preserve_norm"
        else identity()  # the same (empty) state either way
    )
    return multi_transform(
        {
            "normuon": chain(
                scale_by_normuon(
                    ns_coeffs,
                    ns_steps,
                    beta,
                    b2,
                    eps,
                    mu_dtype,
                    nesterov=nesterov,
                    update_scale=update_scale,
                    target_rms=target_rms,
                    preconditioning=preconditioning,
                    preconditioner_dtype=preconditioner_dtype,
                    weight_dimension_numbers=branch_spec,
                ),
                shape_scale,
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
                nesterov=False,  # the reference's AdamW (pytorch_optimizer.NorMuon)
            ),
        },
        axes.labels("normuon"),
    )


__all__ = ["ScaleByNormuonState", "normuon", "scale_by_normuon"]
