"""Shampoo: Kronecker-factored matrix preconditioning (L^{-1/4} G R^{-1/4}) per block, with its
step size grafted from a diagonal method (Adam, RMSProp, AdaGrad, SGD)."""

import math
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .._base._checks import (
    HyperparameterError,
    alias_errors,
    check_in_range,
    check_int,
    check_non_negative,
    check_one_of,
    concrete,
)
from .._base._explicit import auto_partitioned, gathered
from .._base._introspect import replicated_fields
from .._base._linalg import after
from .._base._numerics import bias_correction, cond, safe_increment, zero_count
from .._base._recipe import recorded
from .._base._typing import ArrayLike, DType, MaskOrFn, Params, ScalarOrSchedule, Updates
from ..core._transformation import GradientTransformation, chain
from ..state._quantize import MomentDType, as_leaves
from ..transforms._building_blocks import (
    buffer_value,
    check_float_dtype,
    check_moment_dtype,
    ema,
    into_buffer_and_value,
    moment_buffers,
)
from ..transforms._decay import weight_decay as weight_decay_tx
from ..transforms._scaling import scale_by_learning_rate
from ._dimension_numbers import matrix_axes, per_leaf_dimension_numbers, untranspose
from ._matrix_axes import MatrixAxes
from ._newton_root import newton_inverse_root

GRAFT_TYPES = ("adam", "rmsprop", "adagrad", "sgd", "none")
INVERSE_ROOTS = ("eigh", "newton")


class ShampooDimensionNumbers(NamedTuple):
    """Which axes of a parameter form the matrix that Shampoo preconditions.

    `reduction_axis` (fan-in) axes are flattened into the rows (acted on by the left factor
    :math:`L`), `output_axis` (fan-out) axes into the columns (the right factor :math:`R`);
    every other axis is a batch axis (stacked layers, MoE experts): each entry gets its own
    factors. The same shape as `MuonDimensionNumbers` (either is accepted).
    """

    reduction_axis: Sequence[int] | int = 0
    output_axis: Sequence[int] | int = 1


DimensionNumbersOrFn = ShampooDimensionNumbers | Params | Callable[[Params], Any] | None


def _one_block_leaves(state: Any) -> Any:
    """Per parameter leaf, whether it is a matrix preconditioned as one block (see the state)."""
    structure = jax.tree.structure(as_leaves(state.mu))
    return structure.unflatten(
        [bool(f) and f[0].shape[-4:-2] == (1, 1) for f in structure.flatten_up_to(state.factors)]
    )


@replicated_fields("mu", "nu", "factors", "roots", where=_one_block_leaves)
class ScaleByShampooState(NamedTuple):
    """State of `scale_by_shampoo`.

    `factors` and `roots` are trees like the params whose leaves are, for each matrix leaf, a
    tuple `(L, R)` ordered by the matrix dimension they act on (rows first), of shapes
    `(*batch, nb_rows, nb_cols, b_rows, b_rows)` and `(*batch, nb_rows, nb_cols, b_cols,
    b_cols)` (`batch`: the leaf's batch axes, in order; `nb_*`: the number of blocks along the
    rows / columns; `b_* = min(block_size, size)`), and `()` for the leaves that get the graft
    alone (rank < 2).

    On sharded params a matrix that is one block (`block_size` at least its sides) is gathered
    once and its whole step runs on every device (the factors' Gram products, the roots, the
    grafted direction), so `state_sharding` keeps its four fields replicated
    (`replicated_fields`; sharded, its first moment would be gathered too). A matrix of several
    blocks keeps its state sharded, the block grid like the matrix: where the blocks fall within
    the shards its step moves nothing.
    """

    count: jax.Array  # type: ignore[assignment]  # int32, saturating
    mu: Updates  # EMA of the gradient (b1), params' shape, mu_dtype or the params'
    nu: Updates  # the graft's second moment (0 for "sgd" / "none"), nu_dtype or the params'
    factors: Any  # (L, R) per matrix leaf, preconditioner_dtype
    roots: Any  # ((L + eps I)^{-1/4}, (R + eps I)^{-1/4}), same layout and dtype


class _Plan(NamedTuple):
    """How one matrix leaf is cut into blocks (static, from its shape and dimension numbers)."""

    order: tuple[int, ...]  # transpose: batch axes, then reduction, then output axes
    batch: tuple[int, ...]  # the batch axes' sizes
    rows: int
    cols: int
    b_rows: int
    b_cols: int
    nb_rows: int
    nb_cols: int


def _plan(who: str, shape: tuple[int, ...], dims: Any, block_size: int) -> _Plan | None:
    """The block plan of a leaf, or None for a leaf that gets the graft alone (rank < 2)."""
    if len(shape) < 2:
        return None
    if dims is None:
        if len(shape) != 2:
            raise ValueError(
                f"{who}: a parameter of shape {shape} is not a matrix; say which axes form it "
                "with weight_dimension_numbers=ShampooDimensionNumbers(reduction_axis, "
                "output_axis) (the other axes are batch axes), or reshape it"
            )
        dims = ShampooDimensionNumbers()
    batch, red, out = matrix_axes(who, shape, dims)
    rows = math.prod(shape[a] for a in red)
    cols = math.prod(shape[a] for a in out)
    b_rows, b_cols = min(block_size, rows), min(block_size, cols)
    return _Plan(
        order=batch + red + out,
        batch=tuple(shape[a] for a in batch),
        rows=rows,
        cols=cols,
        b_rows=b_rows,
        b_cols=b_cols,
        nb_rows=-(-rows // b_rows),
        nb_cols=-(-cols // b_cols),
    )


def _to_blocks(x: jax.Array, plan: _Plan) -> jax.Array:
    """A leaf as its stack of blocks `(*batch, nb_rows, nb_cols, b_rows, b_cols)`; the last block
    of a dimension that `block_size` does not divide is zero-padded."""
    nb = len(plan.batch)
    m = jnp.transpose(x, plan.order).reshape(*plan.batch, plan.rows, plan.cols)
    pad = [(0, 0)] * nb + [
        (0, plan.nb_rows * plan.b_rows - plan.rows),
        (0, plan.nb_cols * plan.b_cols - plan.cols),
    ]
    m = jnp.pad(m, pad)
    m = m.reshape(*plan.batch, plan.nb_rows, plan.b_rows, plan.nb_cols, plan.b_cols)
    return jnp.moveaxis(m, nb + 1, nb + 2)


def _from_blocks(blocks: jax.Array, plan: _Plan, shape: tuple[int, ...]) -> jax.Array:
    nb = len(plan.batch)
    m = jnp.moveaxis(blocks, nb + 2, nb + 1)
    m = m.reshape(*plan.batch, plan.nb_rows * plan.b_rows, plan.nb_cols * plan.b_cols)
    m = m[..., : plan.rows, : plan.cols]
    return untranspose(m, plan.order, shape)


def _factor_shapes(plan: _Plan) -> tuple[tuple[int, ...], tuple[int, ...]]:
    lead = (*plan.batch, plan.nb_rows, plan.nb_cols)
    return (*lead, plan.b_rows, plan.b_rows), (*lead, plan.b_cols, plan.b_cols)


def _mT(x: jax.Array) -> jax.Array:
    return jnp.swapaxes(x, -1, -2)


def _compute_dtype(dtype: Any) -> Any:
    return jnp.promote_types(dtype, jnp.float32)


def _inverse_root(
    stat: jax.Array, old: jax.Array, matrix_eps: ArrayLike, method: str = "eigh"
) -> jax.Array:
    r"""`(S + eps I)^{-1/4}` of each matrix of a stack, in float32 (or wider). "eigh": by a
    symmetric eigendecomposition: eigenvalues clamped at 0 (rounding), then `+ eps`; an
    eigenvalue that is still 0 (eps = 0) gives 0 (the pseudo-inverse root). "newton": by
    `newton_inverse_root`. A block whose root is not finite (its factor overflowed), or whose
    Newton iteration did not converge, keeps its previous root, as Distributed Shampoo does on
    a failed root."""
    s = stat.astype(_compute_dtype(stat.dtype))
    if method == "newton":
        root, ok = newton_inverse_root(s, matrix_eps)
        ok = ok & jnp.all(jnp.isfinite(root), axis=(-2, -1), keepdims=True)
        return jnp.where(ok, root, old.astype(root.dtype)).astype(old.dtype)
    s = 0.5 * (s + _mT(s))
    w, v = jnp.linalg.eigh(s)
    w = jnp.maximum(w, 0.0) + jnp.asarray(matrix_eps, s.dtype)
    positive = w > 0
    inv = jnp.where(positive, jnp.where(positive, w, 1.0) ** -0.25, 0.0)
    root = (v * inv[..., None, :]) @ _mT(v)
    finite = jnp.all(jnp.isfinite(root), axis=(-2, -1), keepdims=True)
    return jnp.where(finite, root, old.astype(root.dtype)).astype(old.dtype)


def _block_norms(x: jax.Array) -> jax.Array:
    """Frobenius norm of each block (last two axes), without overflow or underflow: the norm
    of `x / max|x|`, times `max|x|`."""
    peak = jnp.max(jnp.abs(x), axis=(-2, -1), keepdims=True)
    safe = jnp.where(peak > 0, peak, 1.0)
    return jnp.where(
        peak > 0, safe * jnp.sqrt(jnp.sum((x / safe) ** 2, axis=(-2, -1), keepdims=True)), 0.0
    )


def _whole(x: jax.Array, plan: _Plan | None) -> jax.Array:
    """`x` whole on every device when its leaf is a matrix of one block (`gathered`: one gather
    per step, then the block's step runs locally); as it is otherwise (a graft-only leaf
    runs where it lives, several blocks are left to XLA's partitioner on the block grid)."""
    one_block = plan is not None and plan.nb_rows == plan.nb_cols == 1
    return gathered(x) if one_block else x


def _shampoo_direction(
    graft: jax.Array, m_hat: jax.Array, plan: _Plan, roots: tuple, graft_type: str
) -> jax.Array:
    """`L^{-1/4} M R^{-1/4}` of each block, rescaled to the graft's norm on the same block."""
    left, right = (r.astype(m_hat.dtype) for r in roots)
    blocks = left @ _to_blocks(m_hat, plan) @ right
    # zero the padded rows / columns (rounding in the roots could leak into them)
    blocks = blocks * _to_blocks(jnp.ones(m_hat.shape, m_hat.dtype), plan)
    if graft_type != "none":
        target = _block_norms(_to_blocks(graft, plan))
        norm = _block_norms(blocks)
        blocks = blocks * jnp.where(norm > 0, target / jnp.where(norm > 0, norm, 1.0), 0.0)
    return _from_blocks(blocks, plan, m_hat.shape)


@recorded
def scale_by_shampoo(
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.999,
    eps: ArrayLike = 1e-8,
    matrix_eps: ArrayLike = 1e-6,
    mu_dtype: MomentDType | None = None,
    *,
    block_size: int = 512,
    precondition_frequency: int = 10,
    start_preconditioning_step: int = 10,
    graft_type: str = "adam",
    graft_b2: ArrayLike | None = None,
    preconditioner_dtype: DType = jnp.float32,
    nu_dtype: MomentDType | None = None,
    weight_dimension_numbers: DimensionNumbersOrFn = None,
    inverse_root: str = "eigh",
) -> GradientTransformation:
    r"""Precondition each matrix (block) by Shampoo's Kronecker factors, with the step size of a
    grafted diagonal method.

    For each block :math:`G_t` of a matrix leaf (and :math:`M_t` of the filtered gradient):

    .. math::

      m_t = \beta_1 m_{t-1} + (1-\beta_1) g_t, \qquad \hat m_t = m_t / (1 - \beta_1^t), \\
      L_t = \beta_2 L_{t-1} + w\, G_t G_t^\top, \qquad
      R_t = \beta_2 R_{t-1} + w\, G_t^\top G_t, \qquad w = 1 - \beta_2 \ (1 \text{ if }
      \beta_2 = 1: \text{sums}), \\
      P_t = (L + \epsilon_M I)^{-1/4}\, \hat M_t\, (R + \epsilon_M I)^{-1/4}, \qquad
      u_t = \frac{\lVert A_t \rVert_F}{\lVert P_t \rVert_F} P_t
      \ \ (t \ge t_0), \qquad u_t = A_t \ \ (t < t_0)

    where :math:`A_t` is the grafted method's update of the same block: "adam"
    :math:`\hat m_t / (\sqrt{v_t / (1-\beta_g^t)} + \epsilon)` (Adam exactly), "rmsprop"
    :math:`\hat m_t / (\sqrt{v_t} + \epsilon)`, "adagrad" the same with :math:`v_t = \sum g^2`,
    "sgd" :math:`\hat m_t`, with :math:`v_t = \beta_g v_{t-1} + (1-\beta_g) g_t^2`; "none"
    gives :math:`u_t = P_t` (Gupta et al.'s un-grafted rule). The inverse roots are recomputed
    at the steps :math:`t = t_0 + k \cdot` `precondition_frequency` under `jax.lax.cond`, and
    kept in the state between, so the first preconditioned step always has fresh roots; the
    factors are updated at every step (before :math:`t_0` too). A block whose root is not
    finite (or, with "newton", did not converge) keeps its previous root (the initial ones are
    identities).

    The roots, `inverse_root`: "eigh" (default) a symmetric eigendecomposition in float32,
    negative rounding eigenvalues clamped to 0, then :math:`+ \epsilon_M`, an eigenvalue still
    0 giving 0 (the pseudo-inverse root); "newton" the coupled Newton iteration of Guo & Higham
    (matrix products only) with a scalar acceleration from bounds on the spectrum, in float32,
    until :math:`\lVert X^4 (L + \epsilon I) - I \rVert_\infty < \max(10^{-5}, n
    \varepsilon / 4)` in every block of the leaf (at most 20 iterations, about 10 at condition
    number :math:`10^6`; 4 matrix products each); a residual above :math:`10^{-2}` after the
    last counts as a failed root. Its shift is :math:`\epsilon = \max(\epsilon_M, \varepsilon
    \min(\lVert L \rVert_F, \lVert L \rVert_\infty))` (:math:`\varepsilon` float32's
    machine epsilon): eigh's unless :math:`\epsilon_M` is below float32's resolution of the
    spectrum; with `matrix_eps=0` a singular factor's null space gets the large finite root of
    that floor where eigh's pseudo-inverse gives 0 (a zero factor still gives 0). Its roots
    agree with a float64 eigendecomposition as closely as float32 eigh's do (~1e-6 relative on
    well-conditioned factors, ~1e-2 at condition number :math:`10^6`). The iteration is in
    `gradtx/contrib/_newton_root.py`; what each method costs is in benchmarks/README.md
    (`--matrix`).

    Blocks: the matrix (rows: `reduction_axis`, columns: `output_axis` of the dimension
    numbers) is cut into blocks of at most `block_size` x `block_size`, each with its own
    factors and its own grafting norm (as in Distributed Shampoo); a last block that
    `block_size` does not divide is zero-padded, which is exactly its own smaller
    preconditioning (the padded rows give a zero block of :math:`L` and are cut off). Blocks and
    batch axes are stacked and computed in one batched eigendecomposition per leaf.
    Leaves of rank < 2 get the grafted method alone (Adam with "adam").

    Differences from `pytorch_optimizer.ScalableShampoo` (4.1.0), which follows Google's
    distributed_shampoo: its factors start at :math:`\epsilon_M I` and are decayed with
    :math:`\beta_2` (so the regulariser fades as :math:`\beta_2^t \epsilon_M`); here
    :math:`\epsilon_M` is added at each root (as in Distributed Shampoo; with :math:`\beta_2 =
    1` both are the paper's :math:`L_0 = \epsilon I`). Its grafting norm is taken per layer,
    here per block (the same with one block). Its momentum (`betas[0]`) is heavy-ball on the
    preconditioned update, with a second buffer for the graft; here :math:`\beta_1` filters the
    gradient before both preconditioners (Distributed Shampoo's `betas[0]`); chain
    `trace(momentum, nesterov)` after this for the reference's form. It treats a rank-k tensor
    as k factors (exponent :math:`-1/2k`); here a leaf is a matrix plus batch axes. Its
    `shape_interpretation=True` default merges an (8, 6) matrix into one dimension (no
    preconditioning at all). Its inverse root is a coupled Newton iteration (Frobenius-norm
    scaling, no acceleration) unless `use_svd=True` (SVD, the same as the eigendecomposition for
    these symmetric matrices).

    Numbers: the factors hold squares of the gradients, so in float32 they overflow for
    :math:`|g| \gtrsim 10^{18}` (then the previous roots are kept) and lose the gradient below
    :math:`|g| \lesssim 10^{-18}`.

    Args:
      b1: :math:`\beta_1` in [0, 1), the gradient filter (Adam's first moment); 0: none.
      b2: :math:`\beta_2` in [0, 1], decay of the factors (1: running sums, as in the paper);
        also the graft's second-moment decay unless `graft_b2` is given.
      eps: :math:`\epsilon` >= 0 of the grafted diagonal method.
      matrix_eps: :math:`\epsilon_M` >= 0 added to the factors' eigenvalues.
      mu_dtype: dtype of :math:`m` (default: the params'), or a `gradtx.quantized()` spec.
      block_size: the largest block side (>= 1).
      precondition_frequency: steps between two root computations (>= 1).
      start_preconditioning_step: :math:`t_0` >= 1, the first step with Shampoo's direction
        (before it, the grafted method's update).
      graft_type: "adam", "rmsprop", "adagrad", "sgd" or "none".
      graft_b2: :math:`\beta_g`, the graft's second-moment decay ("adam" / "rmsprop"); None:
        `b2`.
      preconditioner_dtype: storage dtype of the factors and roots (float32 default, bfloat16
        allowed); they are computed in float32.
      nu_dtype: dtype of the graft's :math:`v` (default: the params'), or a quantized spec.
      weight_dimension_numbers: which axes form each leaf's matrix: None (every 2-D leaf is a
        plain matrix; a leaf of rank > 2 raises), one `ShampooDimensionNumbers` for every leaf
        of rank >= 2, a tree (or prefix) of them and Nones (None: the default rule), or a
        callable of the params returning one of those.
      inverse_root: how the roots are computed, "eigh" (default) or "newton" (see above); the
        state is the same with either.

    Returns:
      A `GradientTransformation` with state `ScaleByShampooState(count, mu, nu, factors,
      roots)` (see its docstring for the layout of the factors).

    Reference: Gupta, Koren & Singer, "Shampoo: Preconditioned Stochastic Tensor Optimization"
    (ICML 2018), Algorithm 1; Shi et al., "A Distributed Data-Parallel PyTorch Implementation of
    the Distributed Shampoo Optimizer for Training Neural Networks At-Scale" (2023),
    arXiv:2309.06497 (blocking, grafting, start step, filtered gradient).
    """
    who = "scale_by_shampoo"
    check_in_range(who, "b1", b1, 0.0, 1.0, high_open=True)
    check_in_range(who, "b2", b2, 0.0, 1.0)
    check_non_negative(who, "eps", eps)
    check_non_negative(who, "matrix_eps", matrix_eps, finite=True)
    check_int(who, "block_size", block_size, minimum=1)
    check_int(who, "precondition_frequency", precondition_frequency, minimum=1)
    check_int(who, "start_preconditioning_step", start_preconditioning_step, minimum=1)
    check_one_of(who, "graft_type", graft_type, GRAFT_TYPES)
    check_one_of(who, "inverse_root", inverse_root, INVERSE_ROOTS)
    check_moment_dtype(who, "mu_dtype", mu_dtype)
    check_moment_dtype(who, "nu_dtype", nu_dtype)
    check_float_dtype(who, "preconditioner_dtype", preconditioner_dtype)
    if preconditioner_dtype is None:
        raise HyperparameterError(
            who, "preconditioner_dtype", None, "a floating-point dtype",
            note="; use jnp.float32 (default) or jnp.bfloat16",
        )  # fmt: skip
    beta_g = b2 if graft_b2 is None else graft_b2
    if graft_type in ("adam", "rmsprop"):
        name = "b2" if graft_b2 is None else "graft_b2"
        arr = concrete(beta_g)
        if arr is not None and np.all(arr == 1.0) and graft_b2 is None:
            raise HyperparameterError(
                who, "b2", b2, f"< 1 for graft_type={graft_type!r}",
                note=" (b2 = 1 sums the factors, and the graft's second moment would stay 0);"
                " give the graft its own decay, e.g. graft_b2=0.999",
            )  # fmt: skip
        check_in_range(who, name, beta_g, 0.0, 1.0, high_open=True)
    pdtype = jnp.dtype(preconditioner_dtype)
    spec = weight_dimension_numbers

    def plans(tree) -> tuple[Any, list[_Plan | None]]:
        leaves, treedef = jax.tree.flatten(tree)
        dims = per_leaf_dimension_numbers(who, spec, tree)
        # inferred, a 2-D leaf without dimension numbers is a stack of vectors: graft only (a
        # larger one is reported by `_plan`)
        inferred = spec is None or isinstance(spec, MatrixAxes)
        return treedef, [
            None
            if inferred and d is None and np.ndim(x) == 2
            else _plan(who, tuple(np.shape(x)), d, block_size)
            for x, d in zip(leaves, dims, strict=True)
        ]

    def init(params):
        treedef, ps = plans(params)
        factors: list[tuple] = []
        roots: list[tuple] = []
        for p in ps:
            if p is None:
                factors.append(())
                roots.append(())
                continue
            shapes = _factor_shapes(p)
            factors.append(tuple(jnp.zeros(s, pdtype) for s in shapes))
            roots.append(tuple(jnp.zeros(s, pdtype) + jnp.eye(s[-1], dtype=pdtype) for s in shapes))
        return ScaleByShampooState(
            count=zero_count(),
            mu=moment_buffers(params, mu_dtype),
            nu=moment_buffers(params, nu_dtype, signed=False),
            factors=treedef.unflatten(factors),
            roots=treedef.unflatten(roots),
        )

    def update(updates, state, params=None, **extra_args):
        del params, extra_args
        count = safe_increment(state.count)
        treedef, ps = plans(updates)
        leaves = treedef.flatten_up_to(updates)
        mus = treedef.flatten_up_to(state.mu)
        nus = treedef.flatten_up_to(state.nu)
        old_factors = treedef.flatten_up_to(state.factors)
        old_roots = treedef.flatten_up_to(state.roots)
        c1 = bias_correction(b1, count)
        cg = bias_correction(beta_g, count)
        b2_ = jnp.asarray(b2, jnp.float32)
        w_new = jnp.where(b2_ == 1.0, 1.0, 1.0 - b2_)

        # 1. the filtered gradient, the graft's update (elementwise, leaf-shaped), the factors
        m_hats, new_mu, new_nu, grafts = [], [], [], []
        factors: list[tuple] = []
        for g, m, v, p, f in zip(leaves, mus, nus, ps, old_factors, strict=True):
            g32 = _whole(g, p).astype(_compute_dtype(g.dtype))
            m_buf, m_new = into_buffer_and_value(ema(b1, g32, buffer_value(m)), m)
            m_hat = m_new / c1
            if graft_type in ("adam", "rmsprop"):
                v_buf, v_new = into_buffer_and_value(ema(beta_g, g32 * g32, buffer_value(v)), v)
                denom = v_new / cg if graft_type == "adam" else v_new
                a = m_hat / (jnp.sqrt(denom) + eps)
            elif graft_type == "adagrad":
                v_buf, v_new = into_buffer_and_value(buffer_value(v) + g32 * g32, v)
                a = m_hat / (jnp.sqrt(v_new) + eps)
            else:
                v_buf, a = v, m_hat
            new_mu.append(m_buf)
            new_nu.append(v_buf)
            grafts.append(a)
            m_hats.append(m_hat)
            if p is None:
                factors.append(())
                continue
            gb = _to_blocks(g32, p)
            left, right = f
            left = b2_ * buffer_value(left).astype(gb.dtype) + w_new * (gb @ _mT(gb))
            right = b2_ * buffer_value(right).astype(gb.dtype) + w_new * (_mT(gb) @ gb)
            factors.append((_whole(left, p).astype(pdtype), _whole(right, p).astype(pdtype)))

        # 2. the inverse roots, recomputed every precondition_frequency steps from t0 on
        active = count >= start_preconditioning_step
        refresh = active & ((count - start_preconditioning_step) % precondition_frequency == 0)

        def refreshed(fs, rs):
            # eigh's roots one after another (see `after`: two batched eighs at once can
            # deadlock XLA:CPU's thread pool); Newton's iterations run side by side
            out: list[tuple] = []
            last = None
            for f, r2, p in zip(fs, rs, ps, strict=True):
                leaf = []
                for s, r in zip(f, r2, strict=True):
                    if inverse_root == "eigh":
                        s = after(s, last)
                    last = _whole(_inverse_root(s, r, matrix_eps, inverse_root), p)
                    leaf.append(last)
                out.append(tuple(leaf))
            return out

        roots = cond(refresh, refreshed, lambda fs, rs: rs, factors, old_roots)

        # 3. the grafted Shampoo direction of each block (the graft alone before t0)
        final = []
        for g, a, mh, p, r in zip(leaves, grafts, m_hats, ps, roots, strict=True):
            if p is not None:
                a = jnp.where(active, _shampoo_direction(a, mh, p, r, graft_type), a)
            final.append(_whole(a, p).astype(g.dtype))
        return treedef.unflatten(final), ScaleByShampooState(
            count=count,
            mu=treedef.unflatten(new_mu),
            nu=treedef.unflatten(new_nu),
            factors=treedef.unflatten(factors),
            roots=treedef.unflatten(roots),
        )

    return GradientTransformation(init, auto_partitioned(update))


@alias_errors(renamed={"weight_decay: rate": "weight_decay"})
def shampoo(
    learning_rate: ScalarOrSchedule,
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.999,
    eps: ArrayLike = 1e-8,
    matrix_eps: ArrayLike = 1e-6,
    weight_decay: ScalarOrSchedule = 0.0,
    mask: MaskOrFn | None = None,
    mu_dtype: MomentDType | None = None,
    *,
    block_size: int = 512,
    precondition_frequency: int = 10,
    start_preconditioning_step: int = 10,
    graft_type: str = "adam",
    graft_b2: ArrayLike | None = None,
    preconditioner_dtype: DType = jnp.float32,
    nu_dtype: MomentDType | None = None,
    weight_dimension_numbers: DimensionNumbersOrFn = None,
    inverse_root: str = "eigh",
) -> GradientTransformation:
    r"""Shampoo (blocked, grafted, as Distributed Shampoo) with decoupled weight decay.

    .. math::

      W_t = W_{t-1} - \eta_t \big(u_t + \lambda W_{t-1}\big)

    with :math:`u_t` of `scale_by_shampoo`: `chain(scale_by_shampoo(...),
    weight_decay(weight_decay, mask), scale_by_learning_rate(learning_rate))`.

    The 1-D rule: leaves of rank 0 and 1 (biases, norm scales) get the grafted method alone,
    i.e. AdamW with the default `graft_type="adam"` (same :math:`\beta_1, \beta_2, \epsilon`,
    learning rate and decay); leaves of rank 2 are matrices; leaves of rank > 2 need
    `weight_dimension_numbers` (which axes are the matrix, the others being batch axes).

    Args:
      learning_rate: :math:`\eta` >= 0, a float or a schedule.
      b1: gradient filter :math:`\beta_1` in [0, 1) (Adam's first moment for the graft too).
      b2: factor decay :math:`\beta_2` in [0, 1] (1: sums), and the graft's unless `graft_b2`.
      eps: the grafted method's :math:`\epsilon` >= 0.
      matrix_eps: :math:`\epsilon_M` >= 0 added to the factors' eigenvalues.
      weight_decay: decoupled :math:`\lambda` >= 0, scaled by the learning rate.
      mask: which parameters decay (boolean tree or prefix, callable, or glob patterns).
      mu_dtype: dtype of the first moment, or a `gradtx.quantized()` spec.
      block_size: the largest block side (>= 1).
      precondition_frequency: steps between two root computations (>= 1).
      start_preconditioning_step: first step (>= 1) with Shampoo's direction.
      graft_type: "adam", "rmsprop", "adagrad", "sgd" or "none".
      graft_b2: the graft's second-moment decay; None: `b2`.
      preconditioner_dtype: storage dtype of the factors and roots (float32 or bfloat16).
      nu_dtype: dtype of the graft's second moment, or a quantized spec.
      weight_dimension_numbers: the matrix axes of each leaf, see `scale_by_shampoo`.
      inverse_root: "eigh" (default) or "newton", the roots' method, see `scale_by_shampoo`.

    Returns:
      A `GradientTransformation`; its state is a chain of `ScaleByShampooState`, the decay's
      and the learning rate's.

    Example:
      >>> import jax.numpy as jnp, gradtx
      >>> tx = gradtx.contrib.shampoo(1e-3, block_size=128, start_preconditioning_step=1)
      >>> params = {"w": jnp.ones((4, 3)), "b": jnp.zeros(3)}
      >>> grads = {"w": jnp.arange(12.0).reshape(4, 3), "b": jnp.ones(3)}
      >>> updates, state = tx.update(grads, tx.init(params), params)

    Reference: Gupta et al., "Shampoo" (2018); Shi et al., "Distributed Shampoo" (2023),
    arXiv:2309.06497; compared with `pytorch_optimizer.ScalableShampoo` (4.1.0), see
    `scale_by_shampoo` for the differences.
    """
    check_non_negative("shampoo", "learning_rate", learning_rate, finite=True)
    return chain(
        scale_by_shampoo(
            b1,
            b2,
            eps,
            matrix_eps,
            mu_dtype,
            block_size=block_size,
            precondition_frequency=precondition_frequency,
            start_preconditioning_step=start_preconditioning_step,
            graft_type=graft_type,
            graft_b2=graft_b2,
            preconditioner_dtype=preconditioner_dtype,
            nu_dtype=nu_dtype,
            weight_dimension_numbers=weight_dimension_numbers,
            inverse_root=inverse_root,
        ),
        weight_decay_tx(weight_decay, mask),
        scale_by_learning_rate(learning_rate),
    )


__all__ = ["ScaleByShampooState", "ShampooDimensionNumbers", "scale_by_shampoo", "shampoo"]
