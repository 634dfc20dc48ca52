"""Scion: the update is the linear-minimisation oracle (LMO) of a per-layer norm ball at the
momentum (spectral, sign, column, row, RMS), optionally with Gluon's layer-wise step sizes."""

import math
from collections.abc import Callable
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
    concrete,
)
from .._base._explicit import auto_partitioned
from .._base._numerics import safe_divide, safe_increment, widen, zero_count
from .._base._recipe import recorded
from .._base._typing import ArrayLike, Mask, ScalarOrSchedule, Updates
from ..core._transformation import GradientTransformation, chain
from ..state._quantize import MomentDType
from ..transforms._building_blocks import (
    buffer_value,
    check_moment_dtype,
    ema,
    into_buffer,
    moment_buffers,
)
from ..transforms._decay import weight_decay as weight_decay_tx
from ..transforms._scaling import scale_by_learning_rate
from ..tree import broadcast_prefix
from ..wrappers._partition import multi_transform
from ._dimension_numbers import AliasAxes, alias_axes, per_leaf_dimension_numbers
from ._fallback import adamw_fallback
from ._muon import _DEFAULT_NS_COEFFS, DimensionNumbersOrFn, _coefficient_table, _orthogonalize
from ._normuon import _TINY, from_matrices, matrix_view, to_matrices, unit_peak

#: The LMO norms (pytorch_optimizer's `LMONorm` names, snake case); "auto" picks by rank.
SCION_NORMS = ("auto", "spectral", "spectral_conv", "sign", "col", "row", "bias_rms", "none")
_MATRIX_NORMS = ("spectral", "spectral_conv", "sign", "col", "row")
STEP_SIZES = ("constant", "gluon")


class ScaleByScionState(NamedTuple):
    """State of `scale_by_scion`."""

    count: jax.Array  # type: ignore[assignment]  # int32, saturating
    mu: Updates  # momentum, each leaf the parameter's shape, dtype mu_dtype or the params'


def per_leaf_values(who: str, spec: Any, tree: Any, what: str) -> list[Any]:
    """One value per leaf of `tree` (flattening order) from `spec`: one value for all, a tree
    (or prefix) of values, or a callable of `tree` returning one of those."""
    if callable(spec):
        spec = spec(tree)
    spread = broadcast_prefix(spec, tree, who=who, what=what)
    return jax.tree.leaves(spread)


def _leaf_norm(norm: str, ndim: int) -> str:
    """The rank rule of "auto": bias_rms below rank 2, spectral otherwise."""
    if norm == "auto":
        return "bias_rms" if ndim < 2 else "spectral"
    return norm


def _lmo_step(who, norm, d, dims, table, eps, scale):
    """`scale(s, dual) * s` for the unit-ball LMO direction `s` of `norm` at `d` (float32, `d`'s
    shape), `dual` = <d, s> the dual norm: per matrix (shape (B, 1, 1)) for the matrix norms,
    one scalar for the others."""
    if norm == "none":
        return scale(d, jnp.sum(d * d))
    if norm == "bias_rms" or (norm == "sign" and d.ndim < 2):
        if norm == "sign":
            s = jnp.sign(d)
        else:
            y = unit_peak(d.reshape(1, 1, -1)).reshape(d.shape)
            s = safe_divide(y, jnp.sqrt(jnp.mean(jnp.square(y))) + eps) if d.size else d
        return scale(s, jnp.sum(d * s))
    view = matrix_view(
        who,
        d.shape,
        dims,
        otherwise=f"a norm that takes any shape instead of {norm!r} ('bias_rms' or 'none'; "
        "in `scion`, 'adamw', which 'auto' picks for such a leaf)",
    )
    x = to_matrices(d, view)
    y = unit_peak(x)  # the same directions, without overflow or underflow in the squares
    fin, fout = view.fan_in, view.fan_out
    if norm in ("spectral", "spectral_conv"):
        s = _orthogonalize(y, table, "frobenius", jnp.maximum(eps, _TINY))
        if norm == "spectral":
            s = s * math.sqrt(fout / fin)
        else:  # the last reduction axis holds the input channels, the others the kernel
            channels = view.reduction_shape[-1]
            s = s * (math.sqrt(fout / channels) / (fin // channels))
    elif norm == "sign":
        s = jnp.sign(x) / fin
    elif norm == "col":  # each input's outgoing weights (a row of x) to norm sqrt(fan_out)
        s = safe_divide(y, jnp.sqrt(jnp.sum(jnp.square(y), axis=-1, keepdims=True) / fout) + eps)
    else:  # "row": each neuron's incoming weights (a column of x) to norm 1 / sqrt(fan_in)
        s = safe_divide(y, jnp.sqrt(jnp.sum(jnp.square(y), axis=-2, keepdims=True) * fin) + eps)
    dual = jnp.sum(x * s, axis=(-2, -1), keepdims=True)
    return from_matrices(scale(s, dual), view, d.shape)


def _check_per_leaf_numbers(who: str, name: str, value: Any) -> None:
    for leaf in jax.tree.leaves(value):
        if not callable(leaf):
            check_non_negative(who, name, leaf)


@recorded
def scale_by_scion(
    beta: ArrayLike = 0.9,
    radius: Any = 1.0,
    eps: ArrayLike = 1e-8,
    mu_dtype: MomentDType | None = None,
    *,
    norm: Any = "auto",
    ns_coeffs: Any = _DEFAULT_NS_COEFFS,
    ns_steps: int = 5,
    step_size: str = "constant",
    gluon_l0: Any = 1.0,
    gluon_l1: Any = 0.0,
    weight_dimension_numbers: DimensionNumbersOrFn = None,
) -> GradientTransformation:
    r"""Replace each update by the (negated) linear-minimisation oracle of its layer's norm ball
    at the momentum: Scion's direction.

    .. math::

      d_t = \beta d_{t-1} + (1-\beta) g_t, \qquad
      u_t = \rho\, s_t, \qquad s_t = \arg\max_{\lVert s \rVert \le 1} \langle d_t, s\rangle

    so that :math:`W_{t+1} = W_t - \eta u_t = W_t + \eta\, \mathrm{lmo}_{\rho B}(d_t)`. For a
    matrix :math:`D \in \mathbb{R}^{n_{in} \times n_{out}}` (the leaf's reduction and output
    axes flattened; batch axes are independent matrices) the norms' directions are

    - "spectral" (RMS→RMS operator norm): :math:`s = \sqrt{n_{out}/n_{in}}\, \mathrm{NS}(D)
      \approx \sqrt{n_{out}/n_{in}}\, U V^\top`, NS the Newton-Schulz iteration of
      `scale_by_muon` (float32);
    - "spectral_conv": the same orthogonalisation, scaled by :math:`\sqrt{n_{out}/c_{in}}/k`
      with :math:`c_{in}` the size of the last reduction axis (the input channels of an HWIO
      kernel) and :math:`k = n_{in}/c_{in}` the kernel volume;
    - "sign" (ℓ1→ℓ∞, embeddings and heads): :math:`s = \mathrm{sign}(D) / n_{in}`;
    - "col" (each input's outgoing weights, a row of :math:`D`, of norm
      :math:`\sqrt{n_{out}}`): :math:`s_{i\cdot} = D_{i\cdot} / (\lVert D_{i\cdot}\rVert /
      \sqrt{n_{out}} + \epsilon)`;
    - "row" (each neuron's incoming weights, a column, of norm :math:`1/\sqrt{n_{in}}`):
      :math:`s_{\cdot j} = D_{\cdot j} / (\sqrt{n_{in}} \lVert D_{\cdot j}\rVert + \epsilon)`;

    and for any leaf "bias_rms": :math:`s = d / (\mathrm{RMS}(d) + \epsilon)`, "none":
    :math:`s = d` (momentum SGD). "auto" is "bias_rms" below rank 2 and "spectral" from rank 2
    (a 3-D / 4-D leaf needs its dimension numbers). "sign" of a vector or scalar is
    :math:`\mathrm{sign}(d)`.

    With `step_size="gluon"` each layer (each matrix of a batch) takes Gluon's step
    :math:`u_t = \rho\, t_t s_t`, :math:`t_t = \lVert d_t\rVert_* / (L_0 + L_1 \lVert
    d_t\rVert_*)`, with the dual norm :math:`\lVert d_t\rVert_* = \langle d_t, s_t\rangle` (e.g.
    :math:`\sqrt{n_{out}/n_{in}}` times the nuclear norm for "spectral").

    Args:
      beta: :math:`\beta` in [0, 1), the momentum decay (the reference's `momentum` is
        :math:`1-\beta`; its default 0.1 is :math:`\beta` = 0.9); 0: no momentum.
      radius: :math:`\rho` >= 0, one number or a tree (or prefix) of numbers, one per layer (the
        reference's per-group `scale`).
      eps: >= 0, in the normalisations.
      mu_dtype: dtype of :math:`d` (default: the params'), or a `gradtx.quantized()` spec.
      norm: one of `SCION_NORMS`, a tree (or prefix) of them, or a callable of the updates
        returning one of those.
      ns_coeffs: Newton-Schulz coefficients (see `scale_by_muon`).
      ns_steps: Newton-Schulz iterations (>= 1).
      step_size: "constant" (Scion) or "gluon" (layer-wise step sizes).
      gluon_l0: Gluon's :math:`L_0` >= 0, a number or a tree (or prefix), one per layer.
      gluon_l1: Gluon's :math:`L_1` >= 0, likewise.
      weight_dimension_numbers: the matrix axes of each leaf, as in `scale_by_muon` (read by the
        matrix norms only).

    Returns:
      A `GradientTransformation` with state `ScaleByScionState(count, mu)`, `mu` like the
      params.

    Reference: Pethick et al., "Training Deep Learning Models with Norm-Constrained LMOs"
    (2025), arXiv:2502.07529 (unconstrained Scion, Algorithm 1 and its Table of norms);
    Riabinin et al., "Gluon: Making Muon & Scion Great Again!" (2025), arXiv:2505.13416.
    Matches `pytorch_optimizer.SCION` (4.1.0) with each norm's default options, its Newton-Schulz
    run in float32 (the reference's runs in bfloat16), its torch (out, in) layout read as our
    (in, out).
    """
    who = "scale_by_scion"
    check_in_range(who, "beta", beta, 0.0, 1.0, high_open=True)
    check_non_negative(who, "eps", eps)
    check_int(who, "ns_steps", ns_steps, minimum=1)
    table = _coefficient_table(who, ns_coeffs, ns_steps)
    check_one_of(who, "step_size", step_size, STEP_SIZES)
    check_moment_dtype(who, "mu_dtype", mu_dtype)
    if not callable(norm):
        for n in jax.tree.leaves(norm):
            check_one_of(who, "norm", n, SCION_NORMS)
    for name, value in (("radius", radius), ("gluon_l0", gluon_l0), ("gluon_l1", gluon_l1)):
        _check_per_leaf_numbers(who, name, value)
    gluon = step_size == "gluon"
    l0, l1 = concrete(gluon_l0), concrete(gluon_l1)
    numbers = [x for x in (l0, l1) if x is not None and x.ndim == 0 and x.dtype.kind in "fiu"]
    if gluon and len(numbers) == 2 and all(float(x) == 0.0 for x in numbers):
        raise ValueError(
            f"{who}: gluon_l0 and gluon_l1 are both 0, so Gluon's step size "
            "|d|_* / (L0 + L1 |d|_*) is undefined; give gluon_l0 > 0 or gluon_l1 > 0"
        )

    def init(params):
        return ScaleByScionState(count=zero_count(), mu=moment_buffers(params, mu_dtype))

    def update(updates, state, params=None, **extra_args):
        del params, extra_args
        leaves, treedef = jax.tree.flatten(updates)
        mus = treedef.flatten_up_to(state.mu)
        dims = per_leaf_dimension_numbers(who, weight_dimension_numbers, updates)
        norms = per_leaf_values(who, norm, updates, "the norms")
        for n in norms:
            check_one_of(who, "norm", n, SCION_NORMS)
        radii = per_leaf_values(who, radius, updates, "the radii")
        l0s = per_leaf_values(who, gluon_l0, updates, "gluon_l0")
        l1s = per_leaf_values(who, gluon_l1, updates, "gluon_l1")
        new_updates, new_mu = [], []
        for g, m, d, n, rho, l0, l1 in zip(leaves, mus, dims, norms, radii, l0s, l1s, strict=True):
            g32 = widen(g)
            m32: Any = widen(ema(beta, g32, buffer_value(m)))

            def scale(s, dual, rho=rho, l0=l0, l1=l1):
                if not gluon:
                    return rho * s
                return rho * safe_divide(dual, l0 + l1 * dual) * s

            u = _lmo_step(who, _leaf_norm(n, g.ndim), m32, d, table, eps, scale)
            new_updates.append(u.astype(g.dtype))
            new_mu.append(into_buffer(m32, m))
        return treedef.unflatten(new_updates), ScaleByScionState(
            count=safe_increment(state.count), mu=treedef.unflatten(new_mu)
        )

    return GradientTransformation(init, auto_partitioned(update))


# --------------------------------------------------------------------------------------------
# Alias
# --------------------------------------------------------------------------------------------


def _labels(who: str, norm: Any, axes: AliasAxes) -> Callable[[Any], Any]:
    """The alias's rule: AdamW for the leaves whose norm is "adamw", and for those of rank >= 2
    with norm "auto" that are not matrices (no dimension numbers given or inferred, as
    `muon`); Scion for the others."""

    def labels(params):
        treedef = jax.tree.structure(params)
        leaves = treedef.flatten_up_to(params)
        names = per_leaf_values(who, norm, params, "the norms")
        # a leaf with a norm of its own needs no matrix axes here (no ambiguity error)
        dims = axes.per_leaf(params, needed=[n == "auto" for n in names])
        # inferred, every matrix has dimension numbers: a 2-D leaf without is a stack of vectors
        lowest = 2 if axes.inferring else 3
        return treedef.unflatten(
            [
                "adam"
                if n == "adamw" or (n == "auto" and len(np.shape(x)) >= lowest and d is None)
                else "scion"
                for x, n, d in zip(leaves, names, dims, strict=True)
            ]
        )

    return labels


def _scion_norms(norm: Any) -> Any:
    """The norm spec of the Scion branch: "adamw" leaves (pruned from that branch) as "none"."""
    swap = lambda spec: jax.tree.map(lambda n: "none" if n == "adamw" else n, spec)
    if callable(norm):
        return lambda tree: swap(norm(tree))
    return swap(norm)


@alias_errors(
    renamed={
        "weight_decay: rate": "weight_decay",
        "adamw: weight_decay": "adam_weight_decay",
        "adamw: b1": "adam_b1",
        "adamw: b2": "adam_b2",
    }
)
def scion(
    learning_rate: ScalarOrSchedule,
    beta: ArrayLike = 0.9,
    radius: Any = 1.0,
    eps: ArrayLike = 1e-8,
    weight_decay: ArrayLike = 0.0,
    weight_decay_mask: Mask | None = None,
    mu_dtype: MomentDType | None = None,
    *,
    norm: Any = "auto",
    constraint: bool = False,
    ns_coeffs: Any = _DEFAULT_NS_COEFFS,
    ns_steps: int = 5,
    step_size: str = "constant",
    gluon_l0: Any = 1.0,
    gluon_l1: Any = 0.0,
    adam_b1: ArrayLike = 0.9,
    adam_b2: ArrayLike = 0.999,
    adam_weight_decay: ArrayLike = 0.0,
    adam_learning_rate: ScalarOrSchedule | None = None,
    weight_dimension_numbers: DimensionNumbersOrFn = None,
) -> GradientTransformation:
    r"""Scion: each layer steps along the LMO of its norm ball at the momentum (AdamW for the
    leaves whose norm is "adamw").

    .. math::

      W_{t+1} = W_t - \eta_t \big(u_t + \lambda W_t\big), \qquad
      \text{or, with constraint,}\quad W_{t+1} = (1-\eta_t) W_t - \eta_t u_t

    with :math:`u_t = \rho\, s_t` of `scale_by_scion` (the unconstrained Scion, or with
    `constraint` the conditional-gradient Scion, which keeps :math:`W` in the ball of radius
    :math:`\rho` for :math:`\eta_t \le 1`): `multi_transform({"scion": chain(scale_by_scion(...),
    weight_decay(1.0 if constraint else weight_decay, weight_decay_mask),
    scale_by_learning_rate(learning_rate)), "adam": adamw(adam_learning_rate, adam_b1, adam_b2,
    eps, weight_decay=adam_weight_decay)}, labels)`.

    The 1-D rule: with the default `norm="auto"` the vectors and scalars (biases, gains) get the
    "bias_rms" LMO (the paper's and the reference's rule), the matrices "spectral", and a leaf
    of rank > 2 without dimension numbers plain AdamW (as `muon`'s non-matrices); with
    `weight_dimension_numbers` such a leaf is a stack of "spectral" layers (its batch axes
    independent), or a conv kernel with norm "spectral_conv". A leaf whose `norm` is "adamw"
    always goes to AdamW.

    Args:
      learning_rate: :math:`\eta` >= 0 (float or schedule) of the Scion leaves.
      beta: momentum decay in [0, 1) (the reference's `momentum` = :math:`1-\beta`).
      radius: :math:`\rho` >= 0, a number or a tree (or prefix) of per-layer numbers (the
        reference's `scale`; the paper uses e.g. 50 for hidden layers, 3000 for the head).
      eps: >= 0, in the normalisations, and AdamW's epsilon.
      weight_decay: :math:`\lambda` >= 0 (multiplied by the learning rate); must be 0 with
        `constraint`.
      weight_decay_mask: which Scion leaves decay (with `constraint` too).
      mu_dtype: dtype of the momenta (Scion's and AdamW's first moment).
      norm: `SCION_NORMS` or "adamw", one for all, a tree (or prefix), or a callable of the
        params.
      constraint: the constrained (conditional-gradient) variant.
      ns_coeffs: Newton-Schulz coefficients (see `scale_by_muon`).
      ns_steps: Newton-Schulz iterations (>= 1).
      step_size: "constant" or "gluon" (see `scale_by_scion`).
      gluon_l0: Gluon's :math:`L_0` (per layer, like `radius`).
      gluon_l1: Gluon's :math:`L_1` (per layer, like `radius`).
      adam_b1: AdamW's :math:`\beta'_1` in [0, 1).
      adam_b2: AdamW's :math:`\beta'_2` in [0, 1).
      adam_weight_decay: AdamW's :math:`\lambda'` >= 0.
      adam_learning_rate: AdamW's :math:`\eta'`; None uses `learning_rate`.
      weight_dimension_numbers: the matrix axes of each leaf (see `scale_by_muon`).

    Returns:
      A `GradientTransformation` with state `MultiTransformState` ("scion" and "adam").

    Example:
      >>> import jax.numpy as jnp, gradtx
      >>> params = {"w": jnp.ones((4, 3)), "b": jnp.zeros(3)}
      >>> tx = gradtx.contrib.scion(0.01, radius=10.0)
      >>> grads = {"w": jnp.arange(12.0).reshape(4, 3), "b": jnp.ones(3)}
      >>> updates, state = tx.update(grads, tx.init(params), params)

    Reference: Pethick et al., "Training Deep Learning Models with Norm-Constrained LMOs"
    (2025); Riabinin et al., "Gluon" (2025); `pytorch_optimizer.SCION` (4.1.0), see
    `scale_by_scion`.
    """
    who = "scion"
    if adam_learning_rate is None:
        adam_learning_rate = learning_rate
    if not isinstance(constraint, bool):
        raise ValueError(f"{who}: constraint must be True or False, got {constraint!r}")
    check_non_negative(who, "weight_decay", weight_decay, finite=True)
    wd = concrete(weight_decay)
    if constraint and (wd is None or float(np.max(wd)) != 0.0):
        raise ValueError(
            f"{who}: weight_decay must be 0 with constraint=True, got {weight_decay!r} (the "
            "constrained update already decays W by the learning rate: (1 - lr) W)"
        )
    if not callable(norm):
        for n in jax.tree.leaves(norm):
            check_one_of(who, "norm", n, (*SCION_NORMS, "adamw"))
    axes = alias_axes(who, weight_dimension_numbers)  # decides each leaf once, in the labels
    return multi_transform(
        {
            "scion": chain(
                scale_by_scion(
                    beta,
                    radius,
                    eps,
                    mu_dtype,
                    norm=_scion_norms(norm),
                    ns_coeffs=ns_coeffs,
                    ns_steps=ns_steps,
                    step_size=step_size,
                    gluon_l0=gluon_l0,
                    gluon_l1=gluon_l1,
                    weight_dimension_numbers=axes.branch_spec,
                ),
                weight_decay_tx(1.0 if constraint else weight_decay, weight_decay_mask),
                scale_by_learning_rate(learning_rate),
            ),
            "adam": adamw_fallback(
                adam_learning_rate,
                adam_b1,
                adam_b2,
                eps,
                0.0,  # eps_root: Scion has no adam_eps_root
                weight_decay=adam_weight_decay,
                mu_dtype=mu_dtype,
                nu_dtype=None,
                nesterov=False,  # the reference's AdamW (pytorch_optimizer.SCION)
            ),
        },
        _labels(who, norm, axes),
    )


__all__ = ["SCION_NORMS", "ScaleByScionState", "scale_by_scion", "scion"]
