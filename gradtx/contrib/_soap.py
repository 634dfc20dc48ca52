"""SOAP: Adam in the eigenbasis of Shampoo's Kronecker factors, the basis refreshed every few steps
by one power iteration and a QR decomposition; AdamW for the other leaves."""

import math
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .._base._checks import (
    alias_errors,
    check_bool,
    check_in_range,
    check_int,
    check_non_negative,
)
from .._base._explicit import auto_partitioned, gathered
from .._base._introspect import replicated_fields
from .._base._linalg import after
from .._base._numerics import bias_correction, safe_increment, widen, zero_count
from .._base._recipe import recorded
from .._base._typing import ArrayLike, DType, Mask, Params, ScalarOrSchedule, Updates
from ..core._transformation import GradientTransformation, chain
from ..state._quantize import MomentDType, as_leaves
from ..transforms._adam import scale_by_adam
from ..transforms._building_blocks import (
    buffer_value,
    check_float_dtype,
    check_moment_dtype,
    ema,
    into_buffer,
    moment_buffers,
)
from ..transforms._decay import weight_decay as weight_decay_tx
from ..transforms._scaling import scale_by_learning_rate
from ..tree import assert_same_structure
from ..wrappers._partition import multi_transform
from ._dimension_numbers import (
    AliasAxes,
    alias_axes,
    matrix_axes,
    per_leaf_dimension_numbers,
    untranspose,
)


class SoapDimensionNumbers(NamedTuple):
    """Which axes of a parameter form the matrix that SOAP preconditions.

    As `MuonDimensionNumbers` (the same fields; either is accepted): the `reduction_axis` (input)
    axes are flattened into the rows, the `output_axis` axes into the columns, every other axis is
    a batch axis (stacked layers, MoE experts) with its own factors and bases. Negative axes
    count from the end. The default is a plain matrix (rows = axis 0, columns = axis 1).
    """

    reduction_axis: Sequence[int] | int = 0
    output_axis: Sequence[int] | int = 1


DimensionNumbersOrFn = SoapDimensionNumbers | Params | Callable[[Params], Any] | None


@replicated_fields("mu", "nu", "factors", "bases")
class ScaleBySoapState(NamedTuple):
    """State of `scale_by_soap`.

    Per leaf, `factors` and `bases` hold a tuple with one array per matrix dimension, in the order
    of the dimension they act on (rows / reduction side first, then columns / output side), each
    of shape `(*batch_axes, k, k)`; a dimension that is not preconditioned (k > max_precond_dim,
    or a vector without `precondition_1d`) holds a `(*batch_axes, 0, 0)` placeholder, a scalar an
    empty tuple. `mu` and `nu` have the parameter's shape, both in the rotated basis (the view's
    sides in the coordinates of `bases`, transposed back to the parameter's axes).

    On sharded params the step gathers each gradient once and runs whole on every device, so
    `state_sharding` keeps all four fields replicated (`replicated_fields`): sharded like the
    matrix, the rotated moments and the bases would be moved at every rotation.
    """

    count: jax.Array  # type: ignore[assignment]  # int32, saturating; 1 after the first step
    mu: Updates  # EMA of the rotated g' (the rotated basis), dtype mu_dtype or the params'
    nu: Updates  # EMA of the rotated g'^2 (the rotated basis), dtype nu_dtype or the params'
    factors: Any  # per leaf (L, R): EMAs of G G^T and G^T G, preconditioner_dtype
    bases: Any  # per leaf (Q_L, Q_R): their eigenbases (columns by decreasing eigenvalue)


class _Plan(NamedTuple):
    """How one leaf is viewed: `order` (a transpose of the leaf), the view's shape
    `(*batch, *sides)` and which sides are rotated."""

    order: tuple[int, ...]
    batch: tuple[int, ...]
    sides: tuple[int, ...]
    active: tuple[bool, ...]


def _plan(
    who: str, shape: tuple[int, ...], dims: Any, max_dim: int, precondition_1d: bool
) -> _Plan:
    ndim = len(shape)
    if ndim == 0:
        return _Plan((), (), (), ())
    if ndim == 1:
        return _Plan((0,), (), shape, (precondition_1d and shape[0] <= max_dim,))
    if dims is None:
        if ndim != 2:
            raise ValueError(
                f"{who}: a parameter of shape {shape} is not a matrix; give it "
                "SoapDimensionNumbers (weight_dimension_numbers: which axes form the matrix, the "
                "others are batch axes) or leave it out of SOAP"
            )
        dims = SoapDimensionNumbers()
    batch, red, out = matrix_axes(who, shape, dims)
    sides = (math.prod(shape[a] for a in red), math.prod(shape[a] for a in out))
    return _Plan(
        batch + red + out, tuple(shape[a] for a in batch), sides, tuple(k <= max_dim for k in sides)
    )


def _to_view(x: jax.Array, plan: _Plan) -> jax.Array:
    if x.ndim < 2:
        return x
    return jnp.transpose(x, plan.order).reshape(plan.batch + plan.sides)


def _from_view(x: jax.Array, plan: _Plan, shape: tuple[int, ...]) -> jax.Array:
    if len(shape) < 2:
        return x
    return untranspose(x, plan.order, shape)


def _eye(batch: tuple[int, ...], k: int, dtype: Any) -> jax.Array:
    return jnp.broadcast_to(jnp.eye(k, dtype=dtype), (*batch, k, k))


def _rotate(x: jax.Array, bases: Sequence[jax.Array], plan: _Plan, back: bool) -> jax.Array:
    """`Q_L^T X Q_R` (or `Q_L X Q_R^T` with `back`) on the view `x` (..., *sides)."""
    r = len(plan.sides)
    for i, (q, on) in enumerate(zip(bases, plan.active, strict=True)):
        if not on:
            continue
        q = jnp.swapaxes(q, -1, -2) if back else q
        y = jnp.moveaxis(x, i - r, -1)  # (*batch, other, k) or (k,)
        x = jnp.moveaxis(y @ q, -1, i - r)
    return x


def _gram(x: jax.Array, plan: _Plan, i: int) -> jax.Array:
    """`G G^T` along side `i` of the view: (*batch, k, k)."""
    k = plan.sides[i]
    y = jnp.moveaxis(x, i - len(plan.sides), -1).reshape((*plan.batch, -1, k))
    return jnp.swapaxes(y, -1, -2) @ y


def _eigenbasis(p: jax.Array) -> jax.Array:
    """Eigenvectors of the symmetric `p` (float32), by decreasing eigenvalue (as the reference:
    `eigh(P + 1e-30 I)`, columns flipped), with a canonical basis of its null space.

    The first factor of an (m, n) gradient has rank min(m, n), and any orthonormal basis of its
    null space is an eigenbasis there: eigh's choice depends on rounding, so the same gradients
    summed in another order (sharded, another backend) would give other bases and, since Adam's
    second moment is taken per coordinate of the basis, another trajectory. The eigenvectors of
    eigenvalues within `k` float32 ulps of the largest are replaced by those of `N D N` (`N` the
    projector onto their span, `D = diag(1, ..., k)`), which depend only on the span; each
    vector's sign is fixed by its largest entry.
    """
    k = p.shape[-1]
    w, q = jnp.linalg.eigh(p + 1e-30 * jnp.eye(k, dtype=p.dtype))
    w, q = w[..., ::-1], q[..., ::-1]
    null = w <= k * float(jnp.finfo(jnp.float32).eps) * w[..., :1]  # the trailing columns
    qn = q * null[..., None, :]
    proj = qn @ jnp.swapaxes(qn, -1, -2)
    weights = jnp.arange(1, k + 1, dtype=p.dtype)
    _, canonical = jnp.linalg.eigh((proj * weights) @ proj)
    canonical = canonical[..., ::-1]  # the null space's vectors first (eigenvalues >= 1)
    rank = k - jnp.sum(null, axis=-1, keepdims=True)
    source = (jnp.arange(k) - rank) % k  # column j >= rank takes canonical column j - rank
    canonical = jnp.take_along_axis(canonical, jnp.broadcast_to(source[..., None, :], q.shape), -1)
    q = jnp.where(null[..., None, :], canonical, q)
    # eigh's sign of each vector is arbitrary too (the update does not depend on it, the state
    # does): the entry of largest magnitude is made positive.
    peak = jnp.take_along_axis(q, jnp.argmax(jnp.abs(q), axis=-2)[..., None, :], axis=-2)
    return q * jnp.where(peak < 0, -1.0, 1.0).astype(q.dtype)


def _power_qr(p: jax.Array, q: jax.Array) -> tuple[jax.Array, jax.Array]:
    """One power iteration and QR: the columns of `P Q`, sorted by the estimated eigenvalues
    `diag(Q^T P Q)` (decreasing), orthonormalised; and the sort order."""
    pq = p @ q
    order = jnp.argsort(-jnp.sum(q * pq, axis=-2), axis=-1)
    power = jnp.take_along_axis(pq, order[..., None, :], axis=-1)
    return jnp.linalg.qr(power)[0], order


def _change_basis(
    x: jax.Array, q_old: jax.Array, q_new: jax.Array, plan: _Plan, i: int
) -> jax.Array:
    """`x` (the view, side `i` in the basis `q_old`) with side `i` in the basis `q_new`:
    `Q_new^T Q_old X` along that side."""
    r = len(plan.sides)
    y = jnp.moveaxis(x, i - r, -1)
    return jnp.moveaxis(y @ (jnp.swapaxes(q_old, -1, -2) @ q_new), -1, i - r)


def _permuted(v: jax.Array, order: jax.Array, plan: _Plan, i: int) -> jax.Array:
    """`v` (the view) with side `i`'s entries in `order` (the refreshed basis's columns)."""
    r = len(plan.sides)
    idx = jnp.expand_dims(order, tuple(j - r for j in range(r) if j != i))
    return jnp.take_along_axis(v, jnp.broadcast_to(idx, v.shape), axis=i - r)


@recorded
def scale_by_soap(
    b1: ArrayLike = 0.95,
    b2: ArrayLike = 0.95,
    shampoo_beta: ArrayLike | None = None,
    eps: ArrayLike = 1e-8,
    mu_dtype: MomentDType | None = None,
    *,
    precondition_frequency: int = 10,
    max_precond_dim: int = 10000,
    precondition_1d: bool = False,
    correct_bias: bool = True,
    normalize_gradient: bool = False,
    preconditioner_dtype: DType = jnp.float32,
    nu_dtype: MomentDType | None = None,
    weight_dimension_numbers: DimensionNumbersOrFn = None,
) -> GradientTransformation:
    r"""Rescale updates by SOAP: Adam in the eigenbasis of Shampoo's factors.

    For each matrix :math:`G_t` (m x n; batch axes independently), with :math:`s = t - 1`:

    .. math::

      G'_t = Q_L^\top G_t Q_R, \qquad M'_t = \beta_1 M'_{t-1} + (1-\beta_1) G'_t, \qquad
      V_t = \beta_2 V_{t-1} + (1-\beta_2) G'^{\,2}_t, \\
      u_t = \frac{\sqrt{1-\beta_2^s}}{1-\beta_1^s}\;
      Q_L \frac{M'_t}{\sqrt{V_t} + \epsilon} Q_R^\top, \\
      L_t = \beta_s L_{t-1} + (1-\beta_s) G_t G_t^\top, \qquad
      R_t = \beta_s R_{t-1} + (1-\beta_s) G_t^\top G_t,

    and, when :math:`s > 0` and :math:`s \bmod f = 0`, the bases are refreshed by one power
    iteration and QR, :math:`Q \leftarrow \mathrm{QR}(P Q)` for :math:`(P, Q) = (L_t, Q_L),
    (R_t, Q_R)`, the columns of :math:`PQ` sorted by decreasing :math:`\mathrm{diag}(Q^\top P
    Q)` and :math:`V_t`'s rows (columns) permuted in the same order, so that each entry of
    :math:`V` stays with its basis vector (the re-projection of the authors' code; a diagonal
    second moment has no exact rotation), and :math:`M'` is rotated into the new bases,
    :math:`M' \leftarrow Q_L^{\text{new}\top} Q_L M' Q_R^\top Q_R^{\text{new}}`.

    :math:`M'_t = Q_L^\top M_t Q_R` for the first moment :math:`M_t` of the authors' code, which
    keeps :math:`M` in the parameter's basis: the same numbers in exact arithmetic, but stored
    rotated, the rounding of a low-precision `mu_dtype` (bfloat16, 8 bits) is relative to each
    rotated entry. Rounded in the parameter's basis and then rotated, it would put up to 2^-8
    (bf16) of :math:`|M|` into the directions where the gradient has no component and
    :math:`V \approx 0`; divided by :math:`\sqrt{V} + \epsilon` there, that rounding would take
    steps of hundreds to thousands of learning rates.

    The first step (:math:`t = 1`) only accumulates :math:`L_1, R_1` and sets the bases to their
    eigenvectors (`eigh`, decreasing eigenvalues); its update is 0, as in the authors' code ("so
    that we never use the current gradients in the projection") and `pytorch_optimizer.SOAP`.
    The refresh runs under `jax.lax.switch` (one compiled step; the common step computes no
    decomposition); eigh and QR run in float32 (or float64 for float64 factors) on all the batch
    entries at once, whatever `preconditioner_dtype` stores. With `normalize_gradient` each
    leaf's :math:`u_t` is divided by its RMS + :math:`\epsilon`.

    Leaves: a matrix side longer than `max_precond_dim` is not rotated (identity); a vector gets
    one factor with `precondition_1d` (else plain Adam, identity); a scalar is plain Adam (all
    with the first step's 0 update). A leaf of rank > 2 needs dimension numbers (its axes are
    never flattened silently).

    Numbers, as the authors' code and `pytorch_optimizer.SOAP` (4.1.0): :math:`\epsilon` is added
    to :math:`\sqrt{V_t}` before the bias correction (i.e. :math:`\hat V` gets
    :math:`\epsilon / \sqrt{1-\beta_2^s}`), and the bias corrections count the Adam steps
    :math:`s`, not the first, preconditioner-only step.

    Args:
      b1: :math:`\beta_1` in [0, 1), decay of the first moment.
      b2: :math:`\beta_2` in [0, 1), decay of the rotated second moment.
      shampoo_beta: :math:`\beta_s` in [0, 1), decay of the factors; None uses `b2`.
      eps: :math:`\epsilon` >= 0.
      mu_dtype: dtype of :math:`M'` (default: the params'), or a `gradtx.quantized()` spec.
      precondition_frequency: :math:`f` >= 1, Adam steps between basis refreshes.
      max_precond_dim: >= 1; a matrix side longer than this is not rotated.
      precondition_1d: give vectors a (k x k) factor and basis (k <= max_precond_dim).
      correct_bias: Adam's bias corrections (the step factor above; 1 without).
      normalize_gradient: divide each leaf's update by its RMS + eps.
      preconditioner_dtype: float dtype of the factors and bases (float32; bfloat16 halves them).
      nu_dtype: dtype of :math:`V` (default: the params'), or a `gradtx.quantized()` spec.
      weight_dimension_numbers: which axes form each leaf's matrix: None (2-D leaves are
        matrices), one `SoapDimensionNumbers` (or `MuonDimensionNumbers`) for all, a tree (or
        prefix) of them and Nones (None: a plain 2-D matrix), or a callable of the updates
        returning one of those. Ignored for vectors and scalars.

    Returns:
      A `GradientTransformation` with state `ScaleBySoapState(count, mu, nu, factors, bases)`.

    Reference: Vyas et al., "SOAP: Improving and Stabilizing Shampoo using Adam" (2024),
    arXiv:2409.11321, Algorithms 1 and 4; the authors' code (github.com/nikhilvyas/SOAP) and
    `pytorch_optimizer.SOAP` (4.1.0), which this matches (`merge_dims=False`,
    `data_format="channels_first"`; dimension numbers replace the reference's one factor per
    tensor axis for leaves of rank > 2).
    """
    who = "scale_by_soap"
    check_in_range(who, "b1", b1, 0.0, 1.0, high_open=True)
    check_in_range(who, "b2", b2, 0.0, 1.0, high_open=True)
    if shampoo_beta is not None:
        check_in_range(who, "shampoo_beta", shampoo_beta, 0.0, 1.0, high_open=True)
    check_non_negative(who, "eps", eps)
    check_int(who, "precondition_frequency", precondition_frequency, minimum=1)
    check_int(who, "max_precond_dim", max_precond_dim, minimum=1)
    for flag, value in (
        ("precondition_1d", precondition_1d),
        ("correct_bias", correct_bias),
        ("normalize_gradient", normalize_gradient),
    ):
        check_bool(who, flag, value)
    check_moment_dtype(who, "mu_dtype", mu_dtype)
    check_moment_dtype(who, "nu_dtype", nu_dtype)
    if preconditioner_dtype is None:
        raise ValueError(
            f"{who}: preconditioner_dtype must be a float dtype (float32, bfloat16), got None"
        )
    check_float_dtype(who, "preconditioner_dtype", preconditioner_dtype)
    p_dtype = jnp.dtype(preconditioner_dtype)
    s_beta = b2 if shampoo_beta is None else shampoo_beta
    freq = precondition_frequency

    def plans(tree) -> tuple[list[Any], Any, list[_Plan]]:
        leaves, treedef = jax.tree.flatten(tree)
        dims = per_leaf_dimension_numbers(who, weight_dimension_numbers, tree)
        return (
            leaves,
            treedef,
            [
                _plan(who, tuple(np.shape(x)), d, max_precond_dim, precondition_1d)
                for x, d in zip(leaves, dims, strict=True)
            ],
        )

    def init(params):
        _, treedef, leaf_plans = plans(params)

        def per_side(plan, make):
            return tuple(
                make(plan.batch, k if on else 0)
                for k, on in zip(plan.sides, plan.active, strict=False)
            )

        zeros = lambda b, k: jnp.zeros((*b, k, k), p_dtype)
        eye = lambda b, k: _eye(b, k, p_dtype) + jnp.zeros((), p_dtype)  # a fresh buffer
        return ScaleBySoapState(
            count=zero_count(),
            mu=moment_buffers(params, mu_dtype),
            nu=moment_buffers(params, nu_dtype, signed=False),
            factors=treedef.unflatten([per_side(p, zeros) for p in leaf_plans]),
            bases=treedef.unflatten([per_side(p, eye) for p in leaf_plans]),
        )

    def update(updates, state, params=None, **extra_args):
        del params, extra_args
        assert_same_structure(who, updates=updates, **{"state.mu": as_leaves(state.mu)})
        leaves, treedef, leaf_plans = plans(updates)
        mus = treedef.flatten_up_to(state.mu)
        nus = treedef.flatten_up_to(state.nu)
        factors = treedef.flatten_up_to(state.factors)
        bases = treedef.flatten_up_to(state.bases)
        count = safe_increment(state.count)
        first = state.count == 0
        adam_steps = jnp.maximum(count - 1, 1)
        refresh = (count > 1) & ((count - 1) % freq == 0)
        if correct_bias:
            step = jnp.sqrt(bias_correction(b2, adam_steps)) / bias_correction(b1, adam_steps)
        else:
            step = jnp.ones([], jnp.float32)

        out, new_factors, views_m, views_v = [], [], [], []
        for g, m, v, fs, qs, plan in zip(
            leaves, mus, nus, factors, bases, leaf_plans, strict=False
        ):
            shape = g.shape
            gv = _to_view(widen(gathered(g)), plan)
            q32 = [widen(q) for q in qs]
            m_old, v_old = _to_view(buffer_value(m), plan), _to_view(buffer_value(v), plan)
            g_rot = _rotate(gv, q32, plan, back=False)
            m32 = widen(ema(b1, g_rot, m_old))
            v32 = widen(ema(b2, jnp.square(g_rot), v_old))
            n = _rotate(m32 / (jnp.sqrt(v32) + eps), q32, plan, True)
            if normalize_gradient:  # before the step factor, as the reference
                n = n / (jnp.sqrt(jnp.mean(jnp.square(n))) + eps)
            n = n * step
            out.append(jnp.where(first, 0.0, _from_view(n, plan, shape)).astype(g.dtype))
            views_m.append(jnp.where(first, widen(m_old), m32))
            views_v.append(jnp.where(first, widen(v_old), v32))
            new_factors.append(
                tuple(
                    (ema(s_beta, _gram(gv, plan, i), widen(f)) if on else widen(f)).astype(f.dtype)
                    for i, (f, on) in enumerate(zip(fs, plan.active, strict=False))
                )
            )

        def keep(operands):
            _, qs_all, ms, vs = operands
            return qs_all, ms, vs

        # The bases' decompositions run one after another, each factor `after` the previous
        # basis: two batched eighs at once can deadlock XLA:CPU's thread pool (QRs alike).
        def initial(operands):
            fs_all, qs_all, ms, vs = operands
            new_qs, new_ms = [], []
            last = None
            for fs, qs, m, plan in zip(fs_all, qs_all, ms, leaf_plans, strict=False):
                leaf_qs = []
                for i, (f, q, on) in enumerate(zip(fs, qs, plan.active, strict=False)):
                    if not on:
                        leaf_qs.append(q)
                        continue
                    q_new = last = _eigenbasis(after(widen(f), last)).astype(q.dtype)
                    leaf_qs.append(q_new)
                    m = _change_basis(m, widen(q), widen(q_new), plan, i)
                new_qs.append(tuple(leaf_qs))
                new_ms.append(m)
            return new_qs, new_ms, vs

        def refreshed(operands):
            fs_all, qs_all, ms, vs = operands
            new_qs, new_ms, new_vs = [], [], []
            last = None
            for fs, qs, m, v, plan in zip(fs_all, qs_all, ms, vs, leaf_plans, strict=False):
                leaf_qs = []
                for i, (f, q, on) in enumerate(zip(fs, qs, plan.active, strict=False)):
                    if not on:
                        leaf_qs.append(q)
                        continue
                    q_new, order = _power_qr(after(widen(f), last), widen(q))
                    q_new = last = q_new.astype(q.dtype)
                    leaf_qs.append(q_new)
                    m = _change_basis(m, widen(q), widen(q_new), plan, i)
                    v = _permuted(v, order, plan, i)
                new_qs.append(tuple(leaf_qs))
                new_ms.append(m)
                new_vs.append(v)
            return new_qs, new_ms, new_vs

        branch = jnp.where(first, 1, jnp.where(refresh, 2, 0))
        new_bases, views_m, views_v = jax.lax.switch(
            branch,
            (keep, initial, refreshed),
            (new_factors, [tuple(q) for q in bases], views_m, views_v),
        )
        new_mu = [
            into_buffer(_from_view(m32, plan, g.shape), m)
            for m32, m, plan, g in zip(views_m, mus, leaf_plans, leaves, strict=False)
        ]
        new_nu = [
            into_buffer(_from_view(v32, plan, g.shape), v)
            for v32, v, plan, g in zip(views_v, nus, leaf_plans, leaves, strict=False)
        ]
        return treedef.unflatten(out), ScaleBySoapState(
            count=count,
            mu=treedef.unflatten(new_mu),
            nu=treedef.unflatten(new_nu),
            factors=treedef.unflatten(new_factors),
            bases=treedef.unflatten(new_bases),
        )

    return GradientTransformation(init, auto_partitioned(update))


# --------------------------------------------------------------------------------------------
# Alias
# --------------------------------------------------------------------------------------------


def _soap_labels(axes: AliasAxes, precondition_1d: bool) -> Callable:
    """The 1-D rule: "soap" for the matrices (the leaves with dimension numbers, given or
    inferred) and, with `precondition_1d`, the vectors; "adam" for the rest."""

    def labels(params):
        leaves, treedef = jax.tree.flatten(params)
        dims = axes.per_leaf(params)

        def label(x, d):
            rank = len(np.shape(x))
            if rank == 1:
                return "soap" if precondition_1d else "adam"
            if rank >= 2 and d is not None:
                return "soap"
            return "adam"

        return treedef.unflatten([label(x, d) for x, d in zip(leaves, dims, strict=True)])

    return labels


@alias_errors(renamed={"weight_decay: rate": "weight_decay"})
def soap(
    learning_rate: ScalarOrSchedule,
    b1: ArrayLike = 0.95,
    b2: ArrayLike = 0.95,
    shampoo_beta: ArrayLike | None = None,
    eps: ArrayLike = 1e-8,
    weight_decay: ScalarOrSchedule = 0.01,
    weight_decay_mask: Mask | None = None,
    mu_dtype: MomentDType | None = None,
    *,
    precondition_frequency: int = 10,
    max_precond_dim: int = 10000,
    precondition_1d: bool = False,
    correct_bias: bool = True,
    normalize_gradient: bool = False,
    preconditioner_dtype: DType = jnp.float32,
    nu_dtype: MomentDType | None = None,
    weight_dimension_numbers: DimensionNumbersOrFn = None,
) -> GradientTransformation:
    r"""SOAP: Adam in Shampoo's eigenbasis for the matrices, AdamW for the other leaves.

    .. math::

      W_t = W_{t-1} - \eta_t \big(u_t + \lambda W_{t-1}\big)

    with :math:`u_t` of `scale_by_soap` for the matrices and Adam's
    :math:`\hat m_t / (\sqrt{\hat v_t} + \epsilon)` (same :math:`\beta_1, \beta_2, \epsilon`)
    for the rest: `chain(multi_transform({"soap": scale_by_soap(...), "adam": scale_by_adam(b1,
    b2, eps)}, labels), weight_decay(weight_decay, weight_decay_mask),
    scale_by_learning_rate(learning_rate))`.

    The 1-D rule: without `weight_dimension_numbers` the 2-D leaves are SOAP matrices and every
    other leaf (scalars, vectors, and leaves of rank > 2, which need dimension numbers to say
    which axes are batch axes) gets AdamW; with them, the leaves whose dimension numbers are not
    None are SOAP matrices. With `precondition_1d` the vectors get SOAP (one k x k factor). The
    reference runs its Adam (no rotation) on the vectors too, but skips their first step along
    with the matrices'; here AdamW takes every step of them.

    Differences from `pytorch_optimizer.SOAP` (4.1.0): the decoupled decay is AdamW's
    :math:`-\eta\lambda W_{t-1}` (the reference multiplies the already updated weight by
    :math:`1 - \eta\lambda`: a difference of :math:`\eta^2\lambda u_t` per step) and also acts at
    the first step (whose SOAP update is 0; the reference skips that step entirely);
    `learning_rate` has no default (the reference's is 3e-3).

    Args:
      learning_rate: :math:`\eta` >= 0, float or schedule.
      b1: :math:`\beta_1` in [0, 1) (SOAP and AdamW).
      b2: :math:`\beta_2` in [0, 1) (SOAP and AdamW).
      shampoo_beta: decay of the factors in [0, 1); None uses `b2`.
      eps: :math:`\epsilon` >= 0 (SOAP and AdamW).
      weight_decay: :math:`\lambda` >= 0, decoupled, times :math:`\eta_t`.
      weight_decay_mask: which parameters decay (boolean tree or prefix, callable, or patterns).
      mu_dtype: dtype of the first moments, or a `gradtx.quantized()` spec.
      precondition_frequency: Adam steps between basis refreshes (>= 1).
      max_precond_dim: a matrix side longer than this is not rotated (>= 1).
      precondition_1d: SOAP (a k x k factor) for the vectors instead of AdamW.
      correct_bias: Adam's bias corrections of the SOAP leaves.
      normalize_gradient: divide each SOAP leaf's update by its RMS + eps.
      preconditioner_dtype: dtype of the factors and bases (float32 or bfloat16).
      nu_dtype: dtype of the second moments, or a `gradtx.quantized()` spec.
      weight_dimension_numbers: which leaves are SOAP matrices and how: a tree (or prefix) of
        `SoapDimensionNumbers` and None (None: AdamW), one for every leaf, or a callable of the
        params returning one of those; None: every 2-D leaf, as a plain matrix.

    Returns:
      A `GradientTransformation`; its state is a chain of the moments (a `MultiTransformState`
      with "soap" and "adam"), the decay and the learning rate.

    Example:
      >>> import jax.numpy as jnp, gradtx
      >>> tx = gradtx.contrib.soap(3e-3)
      >>> params = {"w": jnp.ones((4, 3)), "b": jnp.zeros(3)}
      >>> grads = {"w": jnp.arange(12.0).reshape(4, 3), "b": jnp.ones(3)}
      >>> updates, state = tx.update(grads, tx.init(params), params)

    Reference: Vyas et al., "SOAP: Improving and Stabilizing Shampoo using Adam" (2024),
    arXiv:2409.11321; `pytorch_optimizer.SOAP` (4.1.0), whose defaults these are.
    """
    who = "soap"
    check_non_negative(who, "learning_rate", learning_rate, finite=True)
    check_non_negative(who, "weight_decay", weight_decay, finite=True)
    axes = alias_axes(who, weight_dimension_numbers)  # decides each leaf once, in the labels
    labels = _soap_labels(axes, precondition_1d)
    return chain(
        multi_transform(
            {
                "soap": scale_by_soap(
                    b1,
                    b2,
                    shampoo_beta,
                    eps,
                    mu_dtype,
                    precondition_frequency=precondition_frequency,
                    max_precond_dim=max_precond_dim,
                    precondition_1d=precondition_1d,
                    correct_bias=correct_bias,
                    normalize_gradient=normalize_gradient,
                    preconditioner_dtype=preconditioner_dtype,
                    nu_dtype=nu_dtype,
                    weight_dimension_numbers=axes.branch_spec,
                ),
                "adam": scale_by_adam(b1, b2, eps, mu_dtype=mu_dtype, nu_dtype=nu_dtype),
            },
            labels,
        ),
        weight_decay_tx(weight_decay, weight_decay_mask),
        scale_by_learning_rate(learning_rate),
    )


__all__ = ["ScaleBySoapState", "SoapDimensionNumbers", "scale_by_soap", "soap"]
