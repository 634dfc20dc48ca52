"""PSGD Kron: preconditioned stochastic gradient descent with one Kronecker factor per axis of
each parameter, fitted online from random probes (Xi-Lin Li; Evan Walters' PSGD Kron)."""

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
    check_one_of,
    check_positive,
)
from .._base._explicit import auto_partitioned, gathered
from .._base._introspect import replicated_fields
from .._base._linalg import after
from .._base._numerics import (
    bias_correction,
    cond,
    key_data,
    safe_increment,
    value_at,
    widen,
    zero_count,
)
from .._base._recipe import recorded
from .._base._typing import (
    ArrayLike,
    DType,
    MaskOrFn,
    Params,
    PyTree,
    ScalarOrSchedule,
    Seed,
    Updates,
)
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
from ..tree import assert_same_structure, broadcast_prefix
from ._dimension_numbers import inferred_batch_axes
from ._kron_slice import (
    _balanced,
    _batched,
    _factors,
    _precondition,
    _probes,
    _rms_clipped,
    _step_keys,
    _update_factors,
)
from ._matrix_axes import MatrixAxes, NamedDecisions

MEMORY_SAVE_MODES = (None, "one_diag", "smart_one_diag", "all_diag")


def precond_update_prob_schedule(
    max_prob: float = 1.0, min_prob: float = 0.03, decay: float = 0.001, flat_start: int = 500
) -> Callable[[ArrayLike], jax.Array]:
    r"""The annealed probability of a preconditioner update: flat, then exponential decay.

    .. math::  p(n) = \mathrm{clip}\big(p_{\max} e^{-\delta (n - n_0)},\ p_{\min},\ p_{\max}\big)

    Args:
      max_prob: :math:`p_{\max}`, the probability of the first `flat_start` steps.
      min_prob: :math:`p_{\min}`, the floor.
      decay: :math:`\delta`, the exponential decay rate per step after the flat start.
      flat_start: :math:`n_0`, the steps before the decay begins.

    Returns:
      A schedule `n -> p(n)` (float32), `n` the number of steps taken before this one.

    Reference: psgd-jax and `pytorch_optimizer.optimizer.psgd.precondition_update_prob_schedule`
    (4.1.0), whose defaults these are.
    """

    def schedule(n: ArrayLike) -> jax.Array:
        n = jnp.asarray(n, jnp.float32)
        prob = max_prob * jnp.exp(-decay * (n - flat_start))
        return jnp.clip(prob, min_prob, max_prob).astype(jnp.float32)

    return schedule


@replicated_fields("qs")
class ScaleByKronState(NamedTuple):
    """State of `scale_by_kron`.

    On sharded params the momentum is blended where it lives (sharded like the param), gathered
    once, and the fit and the preconditioning run whole on every device, so `state_sharding`
    keeps the factors `qs` replicated (`replicated_fields`).
    """

    count: jax.Array  # type: ignore[assignment]  # int32, saturating
    key: jax.Array  # raw PRNG key data (uint32), as `jax.random.key_data` returns it
    mu: Updates  # momentum, the params' shapes, dtype mu_dtype or the params'
    qs: Any  # per leaf a tuple of factors, by the axis they act on: (*batch, k, k) or (*batch, k)


# -- layout: which axes are batch axes, which factors are triangular --------------------------


class _Spec:
    """A leaf wrapper, so that an axes tuple (or None) survives a tree map."""

    def __init__(self, value: Any):
        self.value = value


def _is_axes(x: Any) -> bool:
    return (
        x is None
        or isinstance(x, int | np.integer)
        or (isinstance(x, tuple) and all(isinstance(a, int | np.integer) for a in x))
    )


def _per_leaf_batch_axes(
    who: str, spec: Any, tree: Any, named: NamedDecisions
) -> list[tuple[int, ...]]:
    """The batch axes of each leaf of `tree` (in flattening order) from `spec`: None or
    `infer_matrix_axes(...)` (inferred, the decisions made from axis names kept in `named`), an
    axis or a tuple of axes for every leaf, a tree (or prefix) of them, or a callable of `tree`."""
    if spec is None or isinstance(spec, MatrixAxes):
        return inferred_batch_axes(who, spec, tree, named)
    if callable(spec):
        spec = spec(tree)
    leaves = jax.tree.leaves(tree)
    if _is_axes(spec):
        per_leaf = [spec] * len(leaves)
    else:
        wrapped = jax.tree.map(_Spec, spec, is_leaf=_is_axes)
        spread = broadcast_prefix(wrapped, tree, who=who, what="batch_axes")
        per_leaf = [s.value for s in jax.tree.leaves(spread)]
    out = []
    for axes, x in zip(per_leaf, leaves, strict=True):
        shape = tuple(np.shape(x))
        axes = () if axes is None else (axes,) if isinstance(axes, int | np.integer) else axes
        bad = [a for a in axes if not -len(shape) <= int(a) < len(shape)]
        if bad:
            raise ValueError(
                f"{who}: batch axis {bad[0]} is out of range for a leaf of shape {shape}; "
                "give batch_axes per leaf (a tree or a callable) or leave it None"
            )
        norm = sorted({int(a) % len(shape) for a in axes})
        if len(norm) != len(axes):
            raise ValueError(f"{who}: batch_axes {axes} repeat an axis of a leaf of shape {shape}")
        out.append(tuple(norm))
    return out


def _triangular(
    shape: tuple[int, ...],
    max_size: float,
    max_skew: float,
    min_ndim: int,
    memory_save_mode: str | None,
) -> tuple[bool, ...]:
    """Whether each axis of a (non-batch) `shape` gets a triangular factor (else a diagonal)."""
    n = len(shape)
    diag = [False] * n
    if n and memory_save_mode == "one_diag":
        diag[int(np.argsort(shape)[::-1][0])] = True
    elif n >= 2 and memory_save_mode == "smart_one_diag":
        ranked = sorted(shape)
        if ranked[-1] > ranked[-2]:
            diag[int(np.argsort(shape)[::-1][0])] = True
    elif memory_save_mode == "all_diag":
        diag = [True] * n
    numel = float(np.prod(shape)) if n else 1.0
    return tuple(
        not (
            d or size == 1 or size > max_size or n < min_ndim or float(size) ** 2 > max_skew * numel
        )
        for size, d in zip(shape, diag, strict=True)
    )


@recorded
def scale_by_kron(
    b1: ArrayLike = 0.9,
    preconditioner_update_probability: ScalarOrSchedule | None = None,
    max_size_triangular: int = 8192,
    min_ndim_triangular: int = 2,
    max_skew_triangular: float = float("inf"),
    memory_save_mode: str | None = None,
    preconditioner_lr: ArrayLike = 0.1,
    preconditioner_init_scale: float = 1.0,
    mu_dtype: MomentDType | None = None,
    preconditioner_dtype: DType = jnp.float32,
    *,
    batch_axes: int | Sequence[int] | PyTree | Callable[[Params], PyTree] | None = None,
    momentum_into_preconditioner_update: bool = True,
    balance_probability: ArrayLike = 0.01,
    seed: Seed = 0,
) -> GradientTransformation:
    r"""Precondition the momentum by PSGD's Kronecker-factored preconditioner.

    Each leaf :math:`G` with axes :math:`1..n` (its batch axes left out) has factors
    :math:`Q_1..Q_n`, upper triangular (or diagonal), :math:`P = Q^T Q` with
    :math:`Q = Q_1 \otimes \dots \otimes Q_n`:

    .. math::

      m_t = \beta_1 m_{t-1} + (1-\beta_1) g_t, \qquad \hat m_t = m_t / (1-\beta_1^t), \\
      \text{with probability } p_t:\ A = Q \hat m_t,\ \bar B = V Q^{-1},\ V \sim N(0, I), \quad
      Q_i \leftarrow Q_i - \eta_Q \frac{\mathrm{triu}(A_i A_i^T - \bar B_i \bar B_i^T)}
      {\lVert A_i A_i^T + \bar B_i \bar B_i^T \rVert} Q_i, \\
      u_t = P \hat m_t \cdot \min\big(1,\ 1.1 / (\mathrm{rms}(P \hat m_t) + 10^{-6})\big)

    (:math:`X_i X_i^T` contracts every axis but the i-th; the norm is the reference's cheap lower
    bound of the spectral norm; a diagonal factor takes the elementwise rule divided by the max
    norm of :math:`A_i^2 + \bar B_i^2`). The fit minimises :math:`E[h^T P h + v^T P^{-1} v]`, so
    that :math:`P` tends to the inverse of the gradient's covariance square root.

    Diagonal fallbacks: an axis gets a diagonal factor (a vector) when it has size 1, size >
    `max_size_triangular`, :math:`k^2 >` `max_skew_triangular` times the slice's size (Li's skew
    rule; the reference has none, inf), when the leaf has fewer than `min_ndim_triangular`
    non-batch axes, or by `memory_save_mode`. So 1-D leaves (biases) get one diagonal factor and
    scalars one scalar factor: elementwise PSGD, as in the reference. The factors start at
    :math:`s^{1/n} I` (:math:`s` = `preconditioner_init_scale`).

    Batch axes (`batch_axes`, e.g. stacked layers or MoE experts on axis 0) get no factor: each
    slice has its own factors (stored with the batch axes in front, ``(*batch, k, k)`` /
    ``(*batch, k)``), fitted, balanced and RMS-clipped on its own (vmapped), as if it were a
    separate parameter. Nothing is ever flattened. Without `batch_axes` they are inferred per
    leaf by the matrix optimizers' decisions (docs/matrix-optimizers.md, "Which axes form the
    matrix": Flax axis names, stack names such as `layers` or `experts` in the path, overrides):
    a matrix's batch axes are its axes that are neither reduction nor output axes (a conv
    kernel and a 2-D leaf have none), a stack of vectors keeps its stacked axes, and a leaf of
    rank < 2 or one whose names say nothing has none (a factor per axis: Kron needs no matrix,
    so such a leaf is not an error). Decisions read from Flax metadata at `init` hold at
    `update` (`nnx.Optimizer` passes plain arrays there); they are logged once, and
    `gradtx.contrib.explain_matrix_axes(params, kron=True)` shows them.

    Randomness: the update draw :math:`U < p_t`, the balance draw and the probes come from a key in
    the state (uint32 key data, from `seed`); the fit runs under `lax.cond`, so a step without it
    pays only the preconditioning. With probability `balance_probability`, an update first
    rescales a leaf's factors to the geometric mean of their max-norms (:math:`P` unchanged).

    Numbers and differences from `pytorch_optimizer.Kron` (4.1.0), which is otherwise followed:
    the reference decides deterministically (every :math:`\lceil 1/p_t \rceil`-th step, psgd-jax's
    later rule); here the update is a Bernoulli(:math:`p_t`) draw, PSGD's and early psgd-jax's
    rule, so the expected frequency is the same. The schedule is called with the number of steps
    taken before (0 at the first step), as in the reference. The fit and the preconditioning run
    in float32 whatever `preconditioner_dtype` stores (the reference computes in it). Probes are
    drawn in float32. The fit's two terms are computed from :math:`A` and :math:`\bar B`
    divided by their common max-norm (the step is unchanged, but a gradient of 1e30 does not
    overflow :math:`A_i A_i^T`, where the reference gives NaN), and the clip's RMS from
    :math:`u / \max|u|`. psgd-jax's probe damping of the gradient is not applied (the
    reference and Li's PSGD have none). Further, against psgd-jax 0.2.9 (tested in
    tests/contrib/test_kron_psgd_jax.py): it calls the schedule with the count after the
    increment (1 at the first step), so gradtx's probability lags its by one step; it clips by
    :math:`\max(1, \mathrm{rms}/1.1)` (no 1e-6), a 1e-6 relative difference; and it clips a
    `scanned_layers` leaf as a whole, where gradtx clips each batch slice on its own.
    Complex parameters are not supported.

    Args:
      b1: :math:`\beta_1` in [0, 1), the momentum (0: none; the state keeps its buffer).
      preconditioner_update_probability: :math:`p_t` in [0, 1], a float or a schedule of the
        step count; None is `precond_update_prob_schedule()` (1 for 500 steps, then decaying to
        0.03).
      max_size_triangular: axes longer than this get a diagonal factor.
      min_ndim_triangular: leaves with fewer non-batch axes get only diagonal factors.
      max_skew_triangular: an axis of size k with :math:`k^2 >` this times the slice's size gets
        a diagonal factor (inf: never).
      memory_save_mode: None, "one_diag" (the largest axis diagonal), "smart_one_diag" (the
        largest, if it is strictly the largest) or "all_diag".
      preconditioner_lr: :math:`\eta_Q` >= 0, the fit's step size.
      preconditioner_init_scale: :math:`s` > 0, the initial scale of :math:`P`'s factors.
      mu_dtype: dtype of the momentum (default: the params'), or a `gradtx.quantized()` spec.
      preconditioner_dtype: the storage dtype of the factors (float32, or bfloat16 to halve it).
      batch_axes: axes without a factor: None (inferred per leaf, see above),
        `gradtx.contrib.infer_matrix_axes(overrides, axis_names=...)` (inferred with glob
        overrides, each dimension numbers whose other axes are the batch axes or None for
        none, and axis names), an axis or a tuple of axes for every leaf, a tree (or prefix)
        of them (a None leaf: none), or a callable `params -> that tree`.
      momentum_into_preconditioner_update: fit the preconditioner to :math:`\hat m_t` (True, the
        reference's default) or to the raw gradient.
      balance_probability: the chance in [0, 1] that an update first balances the factors.
      seed: an integer seed or a PRNG key for the draws.

    Returns:
      A `GradientTransformation` with state `ScaleByKronState(count, key, mu, qs)`.

    Reference: X.-L. Li, "Preconditioned Stochastic Gradient Descent", IEEE TNNLS (2018),
    arXiv:1512.04202; E. Walters' psgd-jax (Kron); `pytorch_optimizer.Kron` (4.1.0).
    """
    who = "scale_by_kron"
    check_in_range(who, "b1", b1, 0.0, 1.0, high_open=True)
    if preconditioner_update_probability is None:
        preconditioner_update_probability = precond_update_prob_schedule()
    if not callable(preconditioner_update_probability):
        check_in_range(
            who, "preconditioner_update_probability", preconditioner_update_probability, 0.0, 1.0
        )
    check_non_negative(who, "max_size_triangular", max_size_triangular)
    check_int(who, "min_ndim_triangular", min_ndim_triangular, minimum=0)
    check_positive(who, "max_skew_triangular", max_skew_triangular)
    check_one_of(who, "memory_save_mode", memory_save_mode, MEMORY_SAVE_MODES)
    check_non_negative(who, "preconditioner_lr", preconditioner_lr, finite=True)
    check_positive(who, "preconditioner_init_scale", preconditioner_init_scale, finite=True)
    check_moment_dtype(who, "mu_dtype", mu_dtype)
    check_float_dtype(who, "preconditioner_dtype", preconditioner_dtype)
    if preconditioner_dtype is None:
        raise ValueError(
            f"{who}: preconditioner_dtype must be a float dtype, got None; use float32"
        )
    check_bool(who, "momentum_into_preconditioner_update", momentum_into_preconditioner_update)
    check_in_range(who, "balance_probability", balance_probability, 0.0, 1.0)
    key0 = key_data(who, "seed", seed)
    q_dtype = jnp.dtype(preconditioner_dtype)
    named = NamedDecisions()  # batch axes read from metadata at init hold at update

    def layouts(tree):
        """Per leaf: (batch axes, triangular flags of the non-batch axes)."""
        out = []
        batches = _per_leaf_batch_axes(who, batch_axes, tree, named)
        for x, batch in zip(jax.tree.leaves(tree), batches, strict=True):
            shape = tuple(np.shape(x))
            rest = tuple(s for a, s in enumerate(shape) if a not in batch)
            tri = _triangular(
                rest, max_size_triangular, max_skew_triangular, min_ndim_triangular,
                memory_save_mode,
            )  # fmt: skip
            out.append((batch, tri))
        return out

    def init_leaf(x, batch, tri):
        if jnp.issubdtype(x.dtype, jnp.complexfloating):
            raise ValueError(f"{who}: complex parameters are not supported, got {x.dtype}")
        shape = tuple(np.shape(x))
        lead = tuple(shape[a] for a in batch)
        rest = [s for a, s in enumerate(shape) if a not in batch]
        if not rest:
            return (jnp.full(lead, preconditioner_init_scale, q_dtype),)
        scale = preconditioner_init_scale ** (1.0 / len(rest))
        factors = []
        for k, t in zip(rest, tri, strict=True):
            f = scale * (jnp.eye(k, dtype=jnp.float32) if t else jnp.ones(k, jnp.float32))
            factors.append(jnp.broadcast_to(f, lead + f.shape).astype(q_dtype))
        return tuple(factors)

    def init(params):
        leaves, treedef = jax.tree.flatten(params)
        qs = [init_leaf(x, b, t) for x, (b, t) in zip(leaves, layouts(params), strict=True)]
        return ScaleByKronState(
            count=zero_count(),
            key=jnp.array(key0),
            mu=moment_buffers(params, mu_dtype),
            qs=treedef.unflatten(qs),
        )

    def update(updates, state, params=None, **extra_args):
        del params, extra_args
        assert_same_structure(who, updates=updates, **{"state.mu": as_leaves(state.mu)})
        leaves, treedef = jax.tree.flatten(updates)
        # the batch axes only: which factors are triangular is the state's (its factors' ranks),
        # decided at init, so the thresholds are not read here
        batches = _per_leaf_batch_axes(who, batch_axes, updates, named)
        mus = treedef.flatten_up_to(state.mu)
        qs = [_factors(q) for q in treedef.flatten_up_to(state.qs)]
        count = safe_increment(state.count)
        prob = value_at(
            preconditioner_update_probability, state.count, who=who,
            name="preconditioner_update_probability",
        )  # fmt: skip
        key, k_update, k_balance, k_probe = _step_keys(state.key)
        do_update = jax.random.uniform(k_update) < prob
        c1 = bias_correction(b1, count)

        mu_bufs, hats = [], []
        for g, m in zip(leaves, mus, strict=True):
            m_buf, m_new = into_buffer_and_value(ema(b1, widen(g), buffer_value(m)), m)
            mu_bufs.append(m_buf)
            hats.append(gathered(jnp.asarray(m_new, jnp.float32) / c1))
        fit_to = (
            hats if momentum_into_preconditioner_update else [gathered(widen(g)) for g in leaves]
        )

        def fit(qs):
            balance = jax.random.uniform(k_balance) < balance_probability
            probes = _probes(k_probe, [h.shape for h in fit_to])
            out, last = [], None
            for q, h, v, batch in zip(qs, fit_to, probes, batches, strict=True):
                if h.size == 0:  # an empty leaf: nothing to fit from, its factors as they are
                    out.append(tuple(q))
                    continue
                q32 = tuple(jnp.asarray(f, jnp.float32) for f in q)
                q32 = cond(balance, _batched(_balanced, batch, h.ndim), lambda x: x, q32)
                lr = jnp.asarray(preconditioner_lr, jnp.float32)
                # the leaves' triangular solves (batched over their stack axes) run one after
                # another: the probe, which they solve for, waits for the previous leaf's
                # factors (see `after`: two batched solves at once can deadlock XLA:CPU)
                new = _batched(lambda f, a, b: _update_factors(f, a, b, lr), batch, h.ndim)(
                    q32, h, after(v, last)
                )
                last = new[-1]
                out.append(tuple(gathered(n).astype(f.dtype) for n, f in zip(new, q, strict=True)))
            return out

        qs = cond(do_update, fit, lambda x: list(x), list(qs))

        def precondition(f, h):
            return _rms_clipped(_precondition(tuple(jnp.asarray(x, jnp.float32) for x in f), h))

        new_updates = [
            gathered(_batched(precondition, batch, h.ndim)(q, h)).astype(g.dtype)
            for q, h, g, batch in zip(qs, hats, leaves, batches, strict=True)
        ]
        return treedef.unflatten(new_updates), ScaleByKronState(
            count=count,
            key=key,
            mu=treedef.unflatten(mu_bufs),
            qs=treedef.unflatten([tuple(q) for q in qs]),
        )

    return GradientTransformation(init, auto_partitioned(update))


def _rank_at_least_2(params: Params) -> Any:
    return jax.tree.map(lambda x: len(np.shape(x)) >= 2, params)


@alias_errors
def kron(
    learning_rate: ScalarOrSchedule = 1e-3,
    b1: ArrayLike = 0.9,
    weight_decay: ScalarOrSchedule = 0.0,
    mask: MaskOrFn | None = None,
    preconditioner_update_probability: ScalarOrSchedule | None = None,
    max_size_triangular: int = 8192,
    min_ndim_triangular: int = 2,
    max_skew_triangular: float = float("inf"),
    memory_save_mode: str | None = None,
    preconditioner_lr: ArrayLike = 0.1,
    preconditioner_init_scale: float = 1.0,
    mu_dtype: MomentDType | None = None,
    preconditioner_dtype: DType = jnp.float32,
    *,
    batch_axes: int | Sequence[int] | PyTree | Callable[[Params], PyTree] | None = None,
    momentum_into_preconditioner_update: bool = True,
    balance_probability: ArrayLike = 0.01,
    seed: Seed = 0,
) -> GradientTransformation:
    r"""PSGD Kron: SGD on the momentum preconditioned by Kronecker-factored PSGD factors.

    .. math::  w_t = w_{t-1} - \eta_t \big(u_t + \lambda w_{t-1}\big)

    with :math:`u_t` of `scale_by_kron`: `chain(scale_by_kron(...), weight_decay(weight_decay,
    mask), scale_by_learning_rate(learning_rate))`. The decay is decoupled and added after the
    RMS clip, as in the reference; `mask=None` decays the leaves of rank >= 2 only (the
    reference's rule; psgd-jax's default, optax's mask None, decays every leaf), a mask chooses
    otherwise.

    Args:
      learning_rate: :math:`\eta` >= 0 (float or schedule); the reference's default 1e-3.
      b1: the momentum in [0, 1).
      weight_decay: :math:`\lambda` >= 0, decoupled decay.
      mask: which parameters decay (tree, callable or glob patterns); None: rank >= 2.
      preconditioner_update_probability: as in `scale_by_kron`.
      max_size_triangular: as in `scale_by_kron`.
      min_ndim_triangular: as in `scale_by_kron`.
      max_skew_triangular: as in `scale_by_kron`.
      memory_save_mode: as in `scale_by_kron`.
      preconditioner_lr: as in `scale_by_kron`.
      preconditioner_init_scale: as in `scale_by_kron`.
      mu_dtype: as in `scale_by_kron`.
      preconditioner_dtype: as in `scale_by_kron`.
      batch_axes: as in `scale_by_kron`.
      momentum_into_preconditioner_update: as in `scale_by_kron`.
      balance_probability: as in `scale_by_kron`.
      seed: as in `scale_by_kron`.

    Returns:
      A `GradientTransformation`; its state is a chain of `ScaleByKronState`, the decay's and
      the learning rate's.

    Example:
      >>> import jax.numpy as jnp, gradtx
      >>> tx = gradtx.contrib.kron(1e-3)
      >>> params = {"w": jnp.ones((4, 3)), "b": jnp.zeros(3)}
      >>> grads = {"w": jnp.ones((4, 3)), "b": jnp.ones(3)}
      >>> updates, state = tx.update(grads, tx.init(params), params)

    Reference: X.-L. Li, "Preconditioned Stochastic Gradient Descent" (2018), arXiv:1512.04202;
    psgd-jax (E. Walters); `pytorch_optimizer.Kron` (4.1.0), whose defaults these are.
    """
    return chain(
        scale_by_kron(
            b1,
            preconditioner_update_probability,
            max_size_triangular,
            min_ndim_triangular,
            max_skew_triangular,
            memory_save_mode,
            preconditioner_lr,
            preconditioner_init_scale,
            mu_dtype,
            preconditioner_dtype,
            batch_axes=batch_axes,
            momentum_into_preconditioner_update=momentum_into_preconditioner_update,
            balance_probability=balance_probability,
            seed=seed,
        ),
        weight_decay_tx(weight_decay, _rank_at_least_2 if mask is None else mask),
        scale_by_learning_rate(learning_rate),
    )


__all__ = ["ScaleByKronState", "kron", "precond_update_prob_schedule", "scale_by_kron"]
