"""Adam variants: AdaBelief, Yogi, RAdam and NovoGrad.

They share Adam's first moment and differ in the second: the spread of the gradient around its
mean (AdaBelief), an additive rather than multiplicative update (Yogi), a variance rectification
(RAdam), or one scalar per parameter tensor (NovoGrad). Arithmetic is float32 or wider; results
are cast to the gradients' dtype and buffers keep the dtype they were created with.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .._base._checks import check_in_range, concrete
from .._base._numerics import abs_sq, bias_correction, widen
from .._base._recipe import recorded
from .._base._typing import ArrayLike, DType, ScalarOrSchedule, Updates
from ..core._transformation import GradientTransformation
from ..state._quantize import MomentDType
from ._adam import CHECKS, MOMENTS, ScaleByAdamState, ScaleByAmsgradState, bias_corrected_mu
from ._building_blocks import ema
from ._rule import non_negative, rule, slot


class ScaleByBeliefState(NamedTuple):
    """State of `scale_by_belief`."""

    count: jax.Array  # type: ignore[assignment]  # int32, saturating
    mu: Updates  # first moment, dtype mu_dtype or the params'
    nu: Updates  # EMA of the squared prediction error |g - m|^2 (+ eps_root each step)


class ScaleByNovogradState(NamedTuple):
    """State of `scale_by_novograd`."""

    count: jax.Array  # type: ignore[assignment]  # int32, saturating
    mu: Updates  # the momentum of normalised gradients, dtype mu_dtype or the params'
    nu: Updates  # one scalar per leaf: EMA of the squared norm of the leaf's gradient


@recorded
def scale_by_belief(
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.999,
    eps: ArrayLike = 1e-16,
    eps_root: ArrayLike = 1e-16,
    *,
    nesterov: bool = False,
    amsgrad: bool = False,
    rectify: bool = False,
    accumulate_eps_root: bool = True,
    mu_dtype: MomentDType | None = None,
    nu_dtype: MomentDType | None = None,
) -> GradientTransformation:
    r"""Rescale updates by AdaBelief: Adam with the variance of the gradient around its EMA.

    .. math::

      m_t = \beta_1 m_{t-1} + (1-\beta_1) g_t, \qquad
      s_t = \beta_2 s_{t-1} + (1-\beta_2) |g_t - m_t|^2 + \epsilon_{root}, \qquad
      \bar s_t = \begin{cases} \max(\bar s_{t-1}, s_t) & \text{amsgrad} \\ s_t \end{cases} \\
      u_t = \frac{\hat m_t}{\sqrt{\bar s_t / (1-\beta_2^t)} + \epsilon}, \qquad
      \hat m_t = \frac{m_t}{1-\beta_1^t}

    By default :math:`\epsilon_{root}` is stored in :math:`s_t`, so it accumulates, as in the
    authors' code, in Optax and in nnabla. With `accumulate_eps_root=False` it is added once, as
    the paper writes it: :math:`\bar s_t` is replaced by :math:`\bar s_t + \epsilon_{root}` in
    the denominator and the stored :math:`s_t` has no :math:`\epsilon_{root}`. With
    `nesterov=True` :math:`\hat m_t` is NAdam's (see `scale_by_adam`). With `rectify=True`
    (RAdam's rectification, as nnabla's `AdaBelief(rectify=True)`) the update is
    :math:`r_t u_t` where RAdam's :math:`\rho_t > 4` and the momentum step :math:`\hat m_t`
    before (see `scale_by_radam` for :math:`\rho_t, r_t`). Defaults match
    `optax.scale_by_belief`; `gradtx.nnabla.adabelief` uses
    `eps_root=eps, accumulate_eps_root=False` with nnabla's `amsgrad` and `rectify` options.

    Args:
      b1: :math:`\beta_1` in [0, 1), decay of the first moment.
      b2: :math:`\beta_2` in [0, 1), decay of the second central moment.
      eps: :math:`\epsilon` >= 0 added to the denominator.
      eps_root: :math:`\epsilon_{root}` >= 0 added to :math:`s` (must be > 0 to differentiate
        through the update).
      nesterov: use the Nesterov (NAdam) first moment.
      amsgrad: divide by the running maximum of :math:`s_t`.
      rectify: RAdam's rectification (momentum SGD while :math:`\rho_t \le 4`).
      accumulate_eps_root: store :math:`\epsilon_{root}` in :math:`s_t` every step (True) or add
        it once when dividing (False).
      mu_dtype: dtype of the first moment buffer (default: the params' dtype).
      nu_dtype: dtype of the second moment buffer (default: the params' dtype).

    Returns:
      A `GradientTransformation` with state `ScaleByBeliefState(count, mu, nu)`, or
      `ScaleByAmsgradState(count, mu, nu, nu_max)` with `amsgrad` (`nu` holding :math:`s_t`).

    Reference: Zhuang et al., "AdaBelief Optimizer: Adapting Stepsizes by the Belief in Observed
    Gradients" (NeurIPS 2020); Liu et al. (ICLR 2020) for the rectification; nnabla `AdaBelief`.
    """
    return _belief(
        b1=b1,
        b2=b2,
        eps=eps,
        eps_root=eps_root,
        nesterov=nesterov,
        amsgrad=amsgrad,
        rectify=rectify,
        accumulate_eps_root=accumulate_eps_root,
        mu_dtype=mu_dtype,
        nu_dtype=nu_dtype,
    )


@recorded
def scale_by_yogi(
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.999,
    eps: ArrayLike = 1e-3,
    eps_root: ArrayLike = 0.0,
    initial_accumulator_value: ArrayLike = 1e-6,
    *,
    mu_dtype: MomentDType | None = None,
    nu_dtype: MomentDType | None = None,
) -> GradientTransformation:
    r"""Rescale updates by Yogi: Adam whose second moment moves additively towards :math:`g^2`.

    .. math::

      m_t = \beta_1 m_{t-1} + (1-\beta_1) g_t, \qquad
      v_t = v_{t-1} - (1-\beta_2)\, \mathrm{sign}(v_{t-1} - |g_t|^2)\, |g_t|^2, \\
      u_t = \frac{m_t / (1-\beta_1^t)}{\sqrt{v_t / (1-\beta_2^t) + \epsilon_{root}} + \epsilon}

    Both buffers start at `initial_accumulator_value` (:math:`m_0 = v_0 = 10^{-6}` by default,
    as in Optax). Matches `optax.scale_by_yogi`.

    Args:
      b1: :math:`\beta_1` in [0, 1), decay of the first moment.
      b2: :math:`\beta_2` in [0, 1), rate of the second moment.
      eps: :math:`\epsilon` >= 0 added to the denominator outside the square root.
      eps_root: :math:`\epsilon_{root}` >= 0 added inside the square root.
      initial_accumulator_value: starting value >= 0 of both buffers.
      mu_dtype: dtype of the first moment buffer (default: the params' dtype).
      nu_dtype: dtype of the second moment buffer (default: the params' dtype).

    Returns:
      A `GradientTransformation` with state `ScaleByAdamState(count, mu, nu)`.

    Reference: Zaheer et al., "Adaptive Methods for Nonconvex Optimization" (NeurIPS 2018).
    """
    return _yogi(
        b1=b1,
        b2=b2,
        eps=eps,
        eps_root=eps_root,
        initial_accumulator_value=initial_accumulator_value,
        mu_dtype=mu_dtype,
        nu_dtype=nu_dtype,
    )


@recorded
def scale_by_radam(
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.999,
    eps: ArrayLike = 1e-8,
    eps_root: ArrayLike = 0.0,
    threshold: ArrayLike = 5.0,
    *,
    nesterov: bool = False,
    mu_dtype: MomentDType | None = None,
    nu_dtype: MomentDType | None = None,
) -> GradientTransformation:
    r"""Rescale updates by Rectified Adam: Adam once the variance of its step is tractable.

    .. math::

      \rho_\infty = \frac{2}{1-\beta_2} - 1, \qquad
      \rho_t = \rho_\infty - \frac{2 t \beta_2^t}{1-\beta_2^t}, \qquad
      r_t = \sqrt{\frac{(\rho_t-4)(\rho_t-2)\rho_\infty}{(\rho_\infty-4)(\rho_\infty-2)\rho_t}},
      \\
      u_t = \begin{cases}
        r_t\, \hat m_t / (\sqrt{\hat v_t + \epsilon_{root}} + \epsilon) & \rho_t \ge \tau \\
        \hat m_t & \text{otherwise (momentum SGD)}
      \end{cases}

    with Adam's :math:`m_t, v_t` and bias-corrected :math:`\hat m_t, \hat v_t` (NAdam's
    :math:`\hat m_t` with `nesterov=True`). Matches `optax.scale_by_radam`; nnabla has RAdam only as
    `AdaBelief(rectify=True)`.

    Args:
      b1: :math:`\beta_1` in [0, 1), decay of the first moment.
      b2: :math:`\beta_2` in [0, 1), decay of the second moment.
      eps: :math:`\epsilon` >= 0 added to the denominator outside the square root.
      eps_root: :math:`\epsilon_{root}` >= 0 added inside the square root.
      threshold: :math:`\tau` >= 4, the smallest :math:`\rho_t` at which the adaptive step is used
        (below 4 the rectification :math:`r_t` is undefined). The paper uses 4, Optax and the
        authors' code 5.
      nesterov: use the Nesterov (NAdam) first moment.
      mu_dtype: dtype of the first moment buffer (default: the params' dtype).
      nu_dtype: dtype of the second moment buffer (default: the params' dtype).

    Returns:
      A `GradientTransformation` with state `ScaleByAdamState(count, mu, nu)`.

    Reference: Liu et al., "On the Variance of the Adaptive Learning Rate and Beyond" (ICLR 2020).
    """
    return _radam(
        b1=b1,
        b2=b2,
        eps=eps,
        eps_root=eps_root,
        threshold=threshold,
        nesterov=nesterov,
        mu_dtype=mu_dtype,
        nu_dtype=nu_dtype,
    )


def _is_zero(value: Any) -> bool:
    arr = concrete(value)
    return arr is not None and bool(np.all(arr == 0))


@recorded
def scale_by_novograd(
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.25,
    eps: ArrayLike = 1e-8,
    eps_root: ArrayLike = 0.0,
    weight_decay: ScalarOrSchedule = 0.0,
    *,
    mu_dtype: MomentDType | None = None,
    nu_dtype: DType | None = None,
) -> GradientTransformation:
    r"""Rescale updates by NovoGrad: momentum of gradients normalised per parameter tensor.

    For each parameter tensor (leaf) :math:`w` with gradient :math:`g_t`:

    .. math::

      v_t = \beta_2 v_{t-1} + (1-\beta_2) \|g_t\|^2 \quad (v_1 = \|g_1\|^2), \\
      m_t = \beta_1 m_{t-1} + \frac{g_t}{\sqrt{v_t + \epsilon_{root}} + \epsilon}
        + \lambda_t w \quad (m_0 = 0), \qquad u_t = m_t

    :math:`v_t` is one scalar per leaf, so the state is about half of Adam's. Matches
    `optax.scale_by_novograd`; here `weight_decay` may also be a schedule.

    Args:
      b1: :math:`\beta_1` in [0, 1), decay of the momentum.
      b2: :math:`\beta_2` in [0, 1), decay of the squared gradient norms.
      eps: :math:`\epsilon` >= 0 added to the denominator outside the square root.
      eps_root: :math:`\epsilon_{root}` >= 0 added inside the square root.
      weight_decay: :math:`\lambda` >= 0, a float or a schedule `count -> rate`, applied inside
        the momentum. When it is not zero, `update` needs `params`.
      mu_dtype: dtype of the momentum buffer (default: the params' dtype), or
        `gradtx.quantized()` for block-wise 8-bit storage (signed code).
      nu_dtype: float dtype of the per-leaf norm scalars (default: the params' dtype).

    Returns:
      A `GradientTransformation` with state `ScaleByNovogradState(count, mu, nu)`.

    Reference: Ginsburg et al., "Stochastic Gradient Methods with Layer-wise Adaptive Moments for
    Training of Deep Networks" (2019), arXiv:1905.11286.
    """
    return _novograd(
        b1=b1,
        b2=b2,
        eps=eps,
        eps_root=eps_root,
        weight_decay=weight_decay,
        mu_dtype=mu_dtype,
        nu_dtype=nu_dtype,
    )


def rectification(
    b2: ArrayLike, count: jax.Array, threshold: ArrayLike, *, precise: bool
) -> tuple[jax.Array, jax.Array]:
    r"""RAdam's `(adaptive, r_t)` at step `count`: adaptive where :math:`\rho_t` passes
    `threshold` (:math:`\ge` it when not `precise`, :math:`>` it when `precise`).

    .. math::

      \rho_\infty = \frac{2}{1-\beta_2} - 1, \quad
      \rho_t = \rho_\infty - \frac{2 t \beta_2^t}{1-\beta_2^t}, \quad
      r_t = \sqrt{\frac{(\rho_t-4)(\rho_t-2)\rho_\infty}{(\rho_\infty-4)(\rho_\infty-2)\rho_t}}

    :math:`\rho_t` is a small difference of large numbers for small :math:`t`. With `precise`,
    :math:`\beta_2^t` and :math:`1-\beta_2^t` come from :math:`\log\beta_2` (in float64 for a
    Python float) through `exp` / `expm1`, accurate to about 1e-6 at the first adaptive step.
    Without it they are float32 powers, which round as Optax's `scale_by_radam` does (about 1%
    off at t = 6), so that `scale_by_radam` matches Optax.
    """
    b2_value = concrete(b2)
    scalar = b2_value is not None and b2_value.ndim == 0
    rho_inf: Any = (
        2.0 / (1.0 - float(b2_value)) - 1.0  # type: ignore[arg-type]
        if scalar
        else 2.0 / (1.0 - jnp.asarray(b2, jnp.float32)) - 1.0
    )
    t = count.astype(jnp.float32)
    if precise:
        if scalar:
            log_b2: Any = math.log(float(b2_value)) if float(b2_value) > 0 else -jnp.inf  # type: ignore[arg-type]
        else:
            log_b2 = jnp.log(jnp.asarray(b2, jnp.float32))
        x = t * log_b2
        rho = rho_inf - 2.0 * t * jnp.exp(x) / -jnp.expm1(x)
        adaptive = rho > threshold
    else:
        b2t = jnp.asarray(b2, jnp.float32) ** t
        rho = rho_inf - 2.0 * t * b2t / (1.0 - b2t)
        adaptive = rho >= threshold
    rho_ok = jnp.where(adaptive, rho, rho_inf)  # keeps the unused branch free of NaN
    r = jnp.sqrt(
        (rho_ok - 4.0) * (rho_ok - 2.0) * rho_inf / ((rho_inf - 4.0) * (rho_inf - 2.0) * rho_ok)
    )
    return adaptive, r


def _belief_layout(hp: dict[str, Any]) -> tuple[type, dict]:
    if hp.get("amsgrad"):
        return ScaleByAmsgradState, {**MOMENTS, "nu_max": slot(dtype="nu_dtype", signed=False)}
    return ScaleByBeliefState, MOMENTS


@rule(
    "scale_by_belief",
    lambda hp: _belief_layout(hp)[0],
    slots=lambda hp: _belief_layout(hp)[1],
    checks={**CHECKS, "eps_root": non_negative},
)
def _belief(t, *, b1, b2, eps, eps_root, nesterov, amsgrad, rectify, accumulate_eps_root):
    stored_eps_root = eps_root if accumulate_eps_root else 0.0
    read_eps_root = 0.0 if accumulate_eps_root else eps_root
    m_hat, c2 = bias_corrected_mu(b1, t, nesterov), bias_correction(b2, t)
    if rectify:
        adaptive, r = rectification(b2, t, 4.0, precise=True)

    def leaf(g, s):
        m = s.keep("mu", ema(b1, g, s.mu))
        v = s.keep("nu", ema(b2, abs_sq(g - m), s.nu) + stored_eps_root)
        if amsgrad:
            v = s.keep("nu_max", jnp.maximum(widen(s.nu_max), v))
        mh = m_hat(m, g)
        u = mh / (jnp.sqrt((v + read_eps_root) / c2) + eps)
        return jnp.where(adaptive, r * u, mh) if rectify else u

    return leaf


@rule(
    "scale_by_yogi",
    ScaleByAdamState,
    slots={
        "mu": slot("initial_accumulator_value", "mu_dtype"),
        "nu": slot("initial_accumulator_value", "nu_dtype", signed=False),
    },
    checks={**CHECKS, "eps_root": non_negative, "initial_accumulator_value": non_negative},
)
def _yogi(t, *, b1, b2, eps, eps_root, initial_accumulator_value):
    c1, c2 = bias_correction(b1, t), bias_correction(b2, t)

    def leaf(g, s):
        m = s.keep("mu", ema(b1, g, s.mu))
        g2, v = abs_sq(g), widen(s.nu)
        v = s.keep("nu", v - (1 - b2) * jnp.sign(v - g2) * g2)
        return (m / c1) / (jnp.sqrt(v / c2 + eps_root) + eps)

    return leaf


@rule(
    "scale_by_radam",
    ScaleByAdamState,
    slots=MOMENTS,
    checks={
        **CHECKS,
        "eps_root": non_negative,
        "threshold": lambda who, name, value: check_in_range(who, name, value, 4.0, float("inf")),
    },
)
def _radam(t, *, b1, b2, eps, eps_root, threshold, nesterov):
    m_hat, c2 = bias_corrected_mu(b1, t, nesterov), bias_correction(b2, t)
    # float32 powers, rounded as Optax's jitted update does, eagerly and under jit
    adaptive, r = rectification(b2, t, threshold, precise=False)

    def leaf(g, s):
        m = s.keep("mu", ema(b1, g, s.mu))
        v = s.keep("nu", ema(b2, abs_sq(g), s.nu))
        mh = m_hat(m, g)
        return jnp.where(adaptive, r * mh / (jnp.sqrt(v / c2 + eps_root) + eps), mh)

    return leaf


@rule(
    "scale_by_novograd",
    ScaleByNovogradState,
    slots={"mu": slot(dtype="mu_dtype"), "nu": slot(dtype="nu_dtype", per_leaf=True)},
    checks={**CHECKS, "eps_root": non_negative, "weight_decay": non_negative},
    schedules=("weight_decay",),
    uses_params=lambda hp: not _is_zero(hp["weight_decay"]),
    elementwise=False,
)
def _novograd(t, *, b1, b2, eps, eps_root, weight_decay):
    first = t == 1

    def leaf(g, s):
        sq = jnp.linalg.norm(g) ** 2  # rounds as Optax does (a plain sum of squares does not)
        n = jnp.where(first, sq, ema(b2, sq, s.nu))
        s.keep("nu", n)  # the step reads the norm unrounded
        step = g / (jnp.sqrt(n + eps_root) + eps)
        if s.param is not None:
            step = step + weight_decay * s.param
        return s.keep("mu", jnp.where(first, step, b1 * s.mu + step))

    return leaf


__all__ = [
    "ScaleByBeliefState",
    "ScaleByNovogradState",
    "scale_by_belief",
    "scale_by_novograd",
    "scale_by_radam",
    "scale_by_yogi",
]
