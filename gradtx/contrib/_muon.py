"""Muon: momentum orthogonalised by Newton-Schulz iterations for matrix parameters, AdamW for the
others."""

import math
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .._base._checks import (
    alias_errors,
    check_in_range,
    check_int,
    check_non_negative,
    check_one_of,
)
from .._base._explicit import auto_partitioned, gathered, owner_merged, owner_split
from .._base._numerics import bias_correction, safe_increment, widen, zero_count
from .._base._recipe import recorded
from .._base._typing import ArrayLike, Mask, Params, ScalarOrSchedule, Updates
from ..core._transformation import GradientTransformation, chain
from ..state._quantize import MomentDType
from ..transforms._building_blocks import (
    buffer_value,
    check_moment_dtype,
    ema,
    into_buffer,
    moment_buffers,
    stateless,
)
from ..transforms._decay import weight_decay as weight_decay_tx
from ..transforms._scaling import scale_by_learning_rate
from ..wrappers._partition import multi_transform
from ._dimension_numbers import (
    alias_axes,
    matrix_axes,
    per_leaf_dimension_numbers,
    untranspose,
)
from ._fallback import adamw_fallback

_PRECONDITIONINGS = ("frobenius", "spectral", "aol", "schatten")
_LAYOUTS = ("replicated", "owner")
_DEFAULT_NS_COEFFS = (3.4445, -4.7750, 2.0315)
# Polar Express (Amsel et al., 2025, Algorithm 1): the minimax odd quintics of a greedy
# sequence for singular values in [1e-3, 1], each row but the last divided by the paper's safety
# factor (c0 / 1.01, c1 / 1.01^3, c2 / 1.01^5) so that rounding cannot push a singular value
# past the next polynomial's interval. A preset longer than `ns_steps` gives its first rows.
_POLAR_EXPRESS = (
    (8.28721201814563, -23.595886519098837, 17.300387312530933),
    (4.107059111542203, -2.9478499167379106, 0.5448431082926601),
    (3.9486908534822946, -2.908902115962949, 0.5518191394370137),
    (3.3184196573706015, -2.488488024314874, 0.51004894012372),
    (2.300652019954817, -1.6689039845747493, 0.4188073119525673),
    (1.891301407787398, -1.2679958271945868, 0.37680408948524835),
    (1.8750014808534479, -1.2500016453999487, 0.3750001645474248),
    (1.875, -1.25, 0.375),
)
_NS_COEFFS_PRESETS: dict[str, Any] = {
    "standard": _DEFAULT_NS_COEFFS,
    "polar_express": tuple((a / 1.01, b / 1.01**3, c / 1.01**5) for a, b, c in _POLAR_EXPRESS[:-1])
    + _POLAR_EXPRESS[-1:],
    "dion": (
        (4.0848, -6.8946, 2.9270),
        (3.9505, -6.3029, 2.6377),
        (3.7418, -5.5913, 2.3037),
        (2.8769, -3.1427, 1.2046),
        (2.8366, -3.0525, 1.2012),
    ),
}


class MuonDimensionNumbers(NamedTuple):
    """Which axes of a parameter form the matrix that Muon orthogonalises.

    The parameter is used as :math:`y = x W`: `reduction_axis` (the input, fan-in axes) and
    `output_axis` (the output, fan-out axes) are flattened into the matrix's rows and columns;
    every other axis is a batch axis, orthogonalised independently. The default is a plain
    matrix (rows = axis 0, columns = axis 1). Negative axes count from the end.
    """

    reduction_axis: Sequence[int] | int = 0
    output_axis: Sequence[int] | int = 1


DimensionNumbersOrFn = MuonDimensionNumbers | Params | Callable[[Params], Any] | None


class MuonState(NamedTuple):
    """State of `scale_by_muon`."""

    count: jax.Array  # type: ignore[assignment]  # int32, saturating
    mu: Updates  # momentum, dtype mu_dtype or the params'


def _matrix_axes(
    who: str,
    shape: tuple[int, ...],
    dims: MuonDimensionNumbers | None,
    *,
    otherwise: str = "leave it out of Muon",
) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """(batch, reduction, output) axes of a leaf of `shape` (None: a plain matrix);
    `otherwise` completes the error for a leaf that is not a matrix (the caller's other fix)."""
    if dims is None:
        if len(shape) != 2:
            raise ValueError(
                f"{who}: a parameter of shape {shape} is not a matrix; give it "
                "MuonDimensionNumbers (weight_dimension_numbers: which axes form the matrix, "
                f"the others are batch axes) or {otherwise}"
            )
        dims = MuonDimensionNumbers()
    if len(shape) < 2:
        raise ValueError(f"{who}: Muon needs parameters of rank >= 2, got shape {shape}")
    return matrix_axes(who, shape, dims)


def _fans(who: str, shape: tuple[int, ...], dims: MuonDimensionNumbers | None) -> tuple[int, int]:
    _, red, out = _matrix_axes(who, shape, dims)
    return math.prod(shape[a] for a in red), math.prod(shape[a] for a in out)


# --------------------------------------------------------------------------------------------
# Newton-Schulz orthogonalisation of a batch of matrices (..., m, n)
# --------------------------------------------------------------------------------------------


def _mT(x: jax.Array) -> jax.Array:
    return jnp.swapaxes(x, -1, -2)


def _ns_step(x: jax.Array, a: jax.Array, c: jax.Array) -> jax.Array:
    # f(X) = c0 X + (c1 A + c2 A A) X with A = X X^H
    b = c[1] * a + c[2] * (a @ a)
    return c[0] * x + b @ x


def _orthogonalize(
    x: jax.Array,
    coeffs: tuple[tuple[Any, ...], ...],
    preconditioning: str,
    eps: ArrayLike,
    layout: str = "replicated",
) -> jax.Array:
    """Newton-Schulz iterations on a stack of matrices `x` of shape (batch, m, n), in float32.

    `coeffs`: one row of 3 coefficients per iteration, Python floats (a static argument of one
    jitted program per table) or traced scalars (`gradtx.with_hyperparameters`; then traced in
    the caller's program). On a mesh, `layout` "replicated": a sharded `x` is gathered once and
    the iterations run locally, their result replicated (`gathered` on both sides: else XLA's
    partitioner would carry the params' sharding into every matmul); "owner": the stack is
    split by whole matrices over the devices, each iterating on its own (`owner_split`)."""
    count, owned = x.shape[0], None
    if layout == "owner":
        x, owned = owner_split(x)
    else:
        x = gathered(x)
    if any(isinstance(c, jax.core.Tracer) for row in coeffs for c in row):
        y = _newton_schulz(x, coeffs, preconditioning, eps)
    else:
        y = _static_newton_schulz(x, coeffs, preconditioning, eps)
    return owner_merged(y, owned, count) if layout == "owner" else gathered(y)


def _newton_schulz(
    x: jax.Array, coeffs: tuple[tuple[Any, ...], ...], preconditioning: str, eps: ArrayLike
) -> jax.Array:
    transposed = x.shape[-2] > x.shape[-1]
    if transposed:  # iterate on the smaller Gram matrix; f(X^T) = f(X)^T
        x = _mT(x)
    if preconditioning == "frobenius":
        x = x / (jnp.linalg.norm(x, ord="fro", axis=(-2, -1), keepdims=True) + eps)
    elif preconditioning == "spectral":
        x = x / (jnp.linalg.norm(x, ord=2, axis=(-2, -1), keepdims=True) + eps)
    for i, row in enumerate(coeffs):
        c = jnp.asarray(row, x.dtype)
        if i == 0 and preconditioning == "aol":
            # "almost orthogonal layer" rescaling of the first step's Gram matrix
            a = x @ jnp.conj(_mT(x))
            s = jax.lax.rsqrt(jnp.maximum(jnp.sum(jnp.abs(a), axis=-1), eps))[..., None]
            x, a = x * s, a * s * _mT(s)
        elif i == 0 and preconditioning == "schatten":
            # Schatten-4 norm rescaling (Optax's form: X X^T, not X X^H)
            a = x @ _mT(x)
            norm = jnp.linalg.norm(a, ord="fro", axis=(-2, -1), keepdims=True)
            s = jax.lax.rsqrt(jnp.maximum(norm, eps))
            x, a = x * s, a * s**2
        else:
            a = x @ jnp.conj(_mT(x))
        x = _ns_step(x, a, c)
    return _mT(x) if transposed else x


_static_newton_schulz = jax.jit(_newton_schulz, static_argnums=(1, 2))


def _orthogonalize_leaves(
    who: str,
    xs: list[jax.Array],
    dims: list[MuonDimensionNumbers | None],
    coeffs: tuple[tuple[float, ...], ...],
    preconditioning: str,
    eps: ArrayLike,
    layout: str = "replicated",
) -> list[jax.Array]:
    """Each leaf of `xs` orthogonalised as the matrices its dimension numbers give; the leaves
    whose matrices have one shape run as one stack (one batched Newton-Schulz)."""
    stacks: dict[tuple[int, ...], list[int]] = {}
    views = []
    for i, (x, d) in enumerate(zip(xs, dims, strict=True)):
        batch, red, out = _matrix_axes(who, x.shape, d)
        if layout != "owner":
            x = gathered(x)  # one all-gather of a sharded leaf; the iterations then run locally
        order = batch + red + out
        size = lambda axes, x=x: math.prod(x.shape[a] for a in axes)
        matrices = jnp.transpose(x, order).reshape(size(batch), size(red), size(out))
        views.append((matrices, order))
        stacks.setdefault(matrices.shape[1:], []).append(i)
    results: list[Any] = [None] * len(xs)
    for members in stacks.values():
        parts = [views[i][0] for i in members]
        stack = parts[0] if len(parts) == 1 else jnp.concatenate(parts)
        ortho = _orthogonalize(stack, coeffs, preconditioning, eps, layout)
        start = 0
        for i, part in zip(members, parts, strict=True):
            piece = ortho[start : start + part.shape[0]]
            results[i] = untranspose(piece, views[i][1], xs[i].shape)
            start += part.shape[0]
    return results


def _coefficient_table(who: str, ns_coeffs: Any, ns_steps: int) -> tuple[tuple[Any, ...], ...]:
    """The coefficients of each iteration, one row of 3 per iteration (hashable: a static
    argument of the jitted iteration); traced coefficients (`gradtx.with_hyperparameters`)
    stay traced scalars."""
    if isinstance(ns_coeffs, str):
        check_one_of(who, "ns_coeffs", ns_coeffs, list(_NS_COEFFS_PRESETS))
        ns_coeffs = _NS_COEFFS_PRESETS[ns_coeffs][:ns_steps]  # a preset's first ns_steps rows
    traced = any(isinstance(c, jax.core.Tracer) for c in jax.tree.leaves(ns_coeffs))
    xp: Any = jnp if traced else np  # traced: float32 scalars; else Python floats (float64)
    try:
        table = xp.asarray(ns_coeffs, jnp.float32 if traced else np.float64)
    except (TypeError, ValueError):
        raise ValueError(
            f"{who}: ns_coeffs must be 3 numbers or rows of 3 numbers, got {ns_coeffs!r}"
        ) from None
    if table.ndim not in (1, 2) or table.shape[-1] != 3:
        raise ValueError(f"{who}: ns_coeffs must have shape (3,) or (n, 3), got {table.shape}")
    if table.ndim == 1:
        table = xp.tile(table, (ns_steps, 1))
    if table.shape[0] > ns_steps:
        raise ValueError(
            f"{who}: ns_coeffs has {table.shape[0]} rows, more than ns_steps={ns_steps} "
            "(a table of coefficients gives one iteration per row, at most ns_steps)"
        )
    if traced:
        return tuple(tuple(row[j] for j in range(3)) for row in table)
    return tuple(tuple(float(c) for c in row) for row in table)


# --------------------------------------------------------------------------------------------
# Primitives
# --------------------------------------------------------------------------------------------


@recorded
def scale_by_muon(
    ns_coeffs: Any = _DEFAULT_NS_COEFFS,
    ns_steps: int = 5,
    beta: ArrayLike = 0.95,
    eps: ArrayLike = 1e-8,
    mu_dtype: MomentDType | None = None,
    *,
    nesterov: bool = True,
    adaptive: bool = False,
    preconditioning: str = "frobenius",
    weight_dimension_numbers: DimensionNumbersOrFn = None,
    distributed: str = "replicated",
) -> GradientTransformation:
    r"""Replace each matrix update by the orthogonalised (Nesterov) momentum: Muon's direction.

    .. math::

      m_t = \beta m_{t-1} + (1-\beta) g_t, \qquad
      \hat m_t = \beta \frac{m_t}{1-\beta^{t+1}} + (1-\beta) \frac{g_t}{1-\beta^t}
      \ \ (\text{or } m_t / (1-\beta^t) \text{ without Nesterov}), \qquad
      u_t = \mathrm{NS}(\hat m_t / \|\hat m_t\|_F)

    where NS applies the quintic :math:`X \mapsto c_0 X + (c_1 A + c_2 A^2) X`,
    :math:`A = X X^H`, `ns_steps` times (one row of coefficients per step when `ns_coeffs` is a
    table), driving the singular values towards 1, so that :math:`u_t \approx U V^H` for
    :math:`\hat m_t = U S V^H`. With `adaptive`, :math:`u_t` is scaled by
    :math:`\langle \hat m_t, u_t \rangle` (the dual norm). Computed in float32.

    Args:
      ns_coeffs: :math:`(c_0, c_1, c_2)`, or a table of such rows (one per iteration, at most
        `ns_steps` rows; then `ns_steps` is otherwise ignored), or a preset: "standard" (the
        default), "dion" (five tuned rows) or "polar_express" (the first `ns_steps` of the
        eight rows of Amsel et al., 2025: at 5 iterations about half the standard rows'
        orthogonality error, near 0 at 6).
      ns_steps: number of iterations (>= 1).
      beta: :math:`\beta` in [0, 1), the momentum decay.
      eps: >= 0, added to the normalising norm.
      mu_dtype: dtype of the momentum (default: the params' dtype), or a
        `gradtx.quantized()` spec for 8-bit storage.
      nesterov: use Nesterov momentum.
      adaptive: scale by the dual norm (Bernstein & Newhouse, 2024).
      preconditioning: how to normalise before iterating: "frobenius" (default), "spectral"
        (exact largest singular value, costlier), "aol" (almost-orthogonal-layer rescaling of
        the first step) or "schatten" (Schatten-4 norm rescaling of the first step).
      weight_dimension_numbers: which axes form each leaf's matrix: None (every leaf is a
        matrix), one `MuonDimensionNumbers` for all, a tree (or prefix) of them (a None entry
        means the default matrix axes), or a callable of the updates returning one of those.
      distributed: where the iterations run when the leaves are sharded over a mesh (under
        sharded `jit`; nothing changes on one device or inside `shard_map`): "replicated"
        (default) gathers each matrix once and every device iterates on it (the collectives
        of a step: the matrices' size once); "owner" splits the stacks of same-shape matrices
        by whole matrices over the devices, each iterating only on those it owns (an
        all-to-all each way, about 2/N of the matrices' size on N devices, and 1/N of the
        work; padded with zero matrices to a multiple of N). Either equals the one-device
        step. The leaves whose matrices share a shape always run as one batched iteration.

    Returns:
      A `GradientTransformation` with state `MuonState(count, mu)`.

    Reference: Jordan et al., "Muon: An optimizer for hidden layers in neural networks" (2024);
    Bernstein & Newhouse, "Old Optimizer, New Norm: An Anthology" (2024). Matches
    `optax.contrib.scale_by_muon` (Optax 0.2.8), except: the coefficients are a construction
    constant, not state (Optax's `MuonState.ns_coeffs`); `weight_dimension_numbers=None` works on
    any tree of matrices (Optax's fails on anything but a single array); the first "aol" /
    "schatten" step uses `eps` (Optax hard-codes 1e-8); the iterations run in float32.
    """
    who = "scale_by_muon"
    check_int(who, "ns_steps", ns_steps, minimum=1)
    table = _coefficient_table(who, ns_coeffs, ns_steps)
    check_in_range(who, "beta", beta, 0.0, 1.0, high_open=True)
    check_non_negative(who, "eps", eps)
    check_one_of(who, "preconditioning", preconditioning, _PRECONDITIONINGS)
    check_one_of(who, "distributed", distributed, _LAYOUTS)

    check_moment_dtype(who, "mu_dtype", mu_dtype)

    def init(params):
        return MuonState(count=zero_count(), mu=moment_buffers(params, mu_dtype))

    def update(updates, state, params=None, **extra_args):
        del params, extra_args
        count = safe_increment(state.count)
        leaves, treedef = jax.tree.flatten(updates)
        dims = per_leaf_dimension_numbers(who, weight_dimension_numbers, updates)
        mus = treedef.flatten_up_to(state.mu)
        corr = bias_correction(beta, count)
        corr_next = bias_correction(beta, safe_increment(count))
        m_hats, new_mu = [], []
        for g, m in zip(leaves, mus, strict=True):
            g32 = widen(g)
            m32: Any = widen(ema(beta, g32, buffer_value(m)))
            if nesterov:
                m_hats.append(beta * (m32 / corr_next) + (1 - beta) * (g32 / corr))
            else:
                m_hats.append(m32 / corr)
            new_mu.append(into_buffer(m32, m))
        orthos = _orthogonalize_leaves(who, m_hats, dims, table, preconditioning, eps, distributed)
        new_updates = []
        for g, m_hat, u in zip(leaves, m_hats, orthos, strict=True):
            if adaptive:
                u = jnp.sum(jnp.conj(m_hat) * u) * u
            new_updates.append(u.astype(g.dtype))
        return treedef.unflatten(new_updates), MuonState(count=count, mu=treedef.unflatten(new_mu))

    return GradientTransformation(init, auto_partitioned(update))


@recorded
def scale_by_shape(
    weight_dimension_numbers: DimensionNumbersOrFn = None,
    consistent_rms: ArrayLike | None = None,
) -> GradientTransformation:
    r"""Scale each matrix update by a factor of its shape (Muon's width scaling).

    .. math::

      u = \sqrt{\max(1, n_{out} / n_{in})}\; g
      \quad\text{or, with consistent\_rms } \rho,\quad
      u = \rho \sqrt{\max(n_{in}, n_{out})}\; g

    with :math:`n_{in}, n_{out}` the sizes of the reduction and output axes. The first keeps
    the spectral norm of the update in step with the layer's width; the second gives the update
    an RMS of about :math:`\rho` (0.2 matches AdamW's), like the "Muon is scalable" paper.

    Args:
      weight_dimension_numbers: the matrix axes of each leaf, as in `scale_by_muon`.
      consistent_rms: :math:`\rho` >= 0, or None for the width scaling.

    Returns:
      A stateless `GradientTransformation` (`EmptyState`).

    Reference: Jordan et al., "Muon" (2024); Liu et al., "Muon is Scalable for LLM Training"
    (2025). Matches Optax 0.2.8's `optax.contrib._muon.scale_by_shape` (not exported there).
    """
    who = "scale_by_shape"
    check_non_negative(who, "consistent_rms", consistent_rms)

    def scaled(updates, params):
        del params
        leaves, treedef = jax.tree.flatten(updates)
        dims = per_leaf_dimension_numbers(who, weight_dimension_numbers, updates)
        out = []
        for g, d in zip(leaves, dims, strict=True):
            fan_in, fan_out = _fans(who, g.shape, d)
            if consistent_rms is None:
                factor: Any = math.sqrt(max(1.0, fan_out / fan_in))
            else:
                factor = math.sqrt(max(fan_in, fan_out)) * consistent_rms
            out.append((factor * widen(g)).astype(g.dtype))
        return treedef.unflatten(out)

    return stateless(scaled)


# --------------------------------------------------------------------------------------------
# Alias
# --------------------------------------------------------------------------------------------


@alias_errors(
    renamed={"weight_decay: rate": "weight_decay", "adamw: weight_decay": "adam_weight_decay"}
)
def muon(
    learning_rate: ScalarOrSchedule,
    ns_coeffs: Any = _DEFAULT_NS_COEFFS,
    ns_steps: int = 5,
    beta: ArrayLike = 0.95,
    eps: ArrayLike = 1e-8,
    weight_decay: ArrayLike = 0.0,
    weight_decay_mask: Mask | None = None,
    mu_dtype: MomentDType | None = None,
    *,
    nesterov: bool = True,
    adaptive: bool = False,
    preconditioning: str = "frobenius",
    adam_b1: ArrayLike = 0.9,
    adam_b2: ArrayLike = 0.999,
    adam_eps_root: ArrayLike = 0.0,
    adam_weight_decay: ArrayLike = 0.0,
    adam_learning_rate: ScalarOrSchedule | None = None,
    muon_weight_dimension_numbers: DimensionNumbersOrFn = None,
    consistent_rms: ArrayLike | None = None,
    distributed: str = "replicated",
) -> GradientTransformation:
    r"""Muon: orthogonalised Nesterov momentum for matrices, AdamW for every other parameter.

    .. math::

      W_{t+1} = W_t - \eta_t \big(s\, \mathrm{NS}(\hat m_t) + \lambda W_t\big)
      \ \text{(matrices)}, \qquad
      w_{t+1} = w_t - \eta'_t \Big(\frac{\hat m'_t}{\sqrt{\hat v'_t + \epsilon_{root}} +
      \epsilon} + \lambda' w_t\Big) \ \text{(the rest)}

    with :math:`\mathrm{NS}(\hat m_t)` of `scale_by_muon` and :math:`s` of `scale_by_shape`.
    `multi_transform({"muon": chain(scale_by_muon(...), scale_by_shape(...),
    weight_decay(weight_decay, weight_decay_mask), scale_by_learning_rate(learning_rate)),
    "adam": adamw(adam_learning_rate, adam_b1, adam_b2, eps, adam_eps_root,
    weight_decay=adam_weight_decay, nesterov=nesterov)}, labels)`. Without
    `muon_weight_dimension_numbers` every 2-D parameter is a Muon matrix and every other one
    goes to AdamW; with them, the leaves whose dimension numbers are not None go to Muon.

    Args:
      learning_rate: :math:`\eta` >= 0 (float or schedule) of the Muon matrices.
      ns_coeffs: Newton-Schulz coefficients, a table of them, or a preset name ("standard",
        "dion", "polar_express"); see `scale_by_muon`.
      ns_steps: Newton-Schulz iterations (>= 1).
      beta: momentum decay in [0, 1).
      eps: >= 0, the normalisation's and AdamW's epsilon.
      weight_decay: :math:`\lambda` >= 0 of the matrices, multiplied by the learning rate.
      weight_decay_mask: which matrices decay (boolean tree or prefix, callable, or patterns).
      mu_dtype: dtype of the momenta (Muon's and AdamW's first moment); a `gradtx.quantized()` spec
        stores them in 8 bits.
      nesterov: Nesterov momentum (for Muon and for AdamW).
      adaptive: scale by the dual norm (see `scale_by_muon`).
      preconditioning: "frobenius", "spectral", "aol" or "schatten" (see `scale_by_muon`).
      adam_b1: AdamW's :math:`\beta_1` in [0, 1).
      adam_b2: AdamW's :math:`\beta_2` in [0, 1).
      adam_eps_root: AdamW's :math:`\epsilon_{root}` >= 0.
      adam_weight_decay: AdamW's :math:`\lambda'` >= 0.
      adam_learning_rate: AdamW's :math:`\eta'`; None uses `learning_rate`.
      muon_weight_dimension_numbers: which leaves are Muon matrices and how: a tree (or
        prefix) of `MuonDimensionNumbers` and None (None: AdamW), one `MuonDimensionNumbers`
        for every leaf, or a callable of the params returning one of those; None: every 2-D
        leaf, as a plain matrix.
      consistent_rms: None (width scaling) or the target RMS (e.g. 0.2) of `scale_by_shape`.
      distributed: "replicated" or "owner": where the iterations run on sharded params (see
        `scale_by_muon`).

    Returns:
      A `GradientTransformation` with state `MultiTransformState` ("muon" and "adam").

    Example:
      >>> import jax.numpy as jnp, gradtx
      >>> params = {"w": jnp.ones((4, 3)), "b": jnp.zeros(3)}
      >>> tx = gradtx.contrib.muon(0.02)
      >>> state = tx.init(params)
      >>> grads = {"w": jnp.arange(12.0).reshape(4, 3), "b": jnp.ones(3)}
      >>> updates, state = tx.update(grads, state, params)
      >>> [updates[k].shape for k in ("w", "b")]
      [(4, 3), (3,)]

    Reference: Jordan et al., "Muon: An optimizer for hidden layers in neural networks" (2024);
    Liu et al., "Muon is Scalable for LLM Training" (2025). Matches `optax.contrib.muon` (Optax
    0.2.8), with the differences listed in `scale_by_muon`.
    """
    who = "muon"
    if adam_learning_rate is None:
        adam_learning_rate = learning_rate
    spec: DimensionNumbersOrFn = muon_weight_dimension_numbers
    if isinstance(ns_coeffs, str):  # a preset: its table is read by `_coefficient_table`
        check_one_of(who, "ns_coeffs", ns_coeffs, list(_NS_COEFFS_PRESETS))

    # The labels decide each leaf once (inferred without a spec); inside the "muon" branch the
    # AdamW leaves are pruned, and the branch reads those decisions (or the user's spec).
    axes = alias_axes(who, spec)
    labels = axes.labels("muon")
    branch_spec = axes.branch_spec
    return multi_transform(
        {
            "muon": chain(
                scale_by_muon(
                    ns_coeffs,
                    ns_steps,
                    beta,
                    eps,
                    mu_dtype,
                    nesterov=nesterov,
                    adaptive=adaptive,
                    preconditioning=preconditioning,
                    weight_dimension_numbers=branch_spec,
                    distributed=distributed,
                ),
                scale_by_shape(branch_spec, consistent_rms),
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
                nesterov=nesterov,  # as optax.contrib.muon
            ),
        },
        labels,
    )
