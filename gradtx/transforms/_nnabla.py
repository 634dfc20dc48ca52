r"""Primitives for the update rules of nnabla's solvers where they differ from Optax's.

- `trace_with_lr`: momentum with the learning rate *inside* the buffer (nnabla's `Momentum`,
  `Nesterov`, `SgdW`, `Lars`), :math:`v_t = \mu v_{t-1} + \eta_t g_t`;
- `weight_decay_by_lr_ratio`: decoupled decay scaled by :math:`\eta_t/\eta_0` (`SgdW`, `AdamW`);
- `scale_by_lars_trust_ratio`, `scale_by_lamb_trust_ratio`: nnabla's LARS and LAMB ratios;
- `scale_by_adabelief`: AdaBelief with nnabla's `amsgrad` and `rectify` options, and the
  published placement of :math:`\epsilon` rather than nnabla's accumulating one.

Norms are per parameter tensor (one leaf), in float32; results keep the gradients' dtypes.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from .._checks import check_in_range, check_non_negative, check_positive, concrete
from .._core import GradientTransformation, require_params, stateless_with_params
from .._masking import MaskOrFn
from .._numerics import (
    abs_sq,
    as_stored,
    bias_correction,
    safe_increment,
    safe_norm,
    value_at,
    widen,
    zero_count,
)
from .._typing import ArrayLike, ScalarOrSchedule
from ..tree import assert_same_structure, map_split, zeros_like
from ._adam import ScaleByAmsgradState, _check_moments, _ema
from ._adam_variants import ScaleByBeliefState
from ._bounded import lr_ratio
from ._decay import weight_decay as weight_decay_tx
from ._momentum import TraceState

# --------------------------------------------------------------------------------------------
# Momentum with the learning rate inside the buffer, and decay following the schedule
# --------------------------------------------------------------------------------------------


def trace_with_lr(
    learning_rate: ScalarOrSchedule,
    decay: ScalarOrSchedule = 0.9,
    *,
    nesterov: bool = False,
    flip_sign: bool = True,
    accumulator_dtype: Any = None,
) -> GradientTransformation:
    r"""Momentum whose buffer accumulates learning-rate-scaled gradients (nnabla's form).

    .. math::

      v_t = \mu\, v_{t-1} + \eta_t\, g_t, \qquad
      u_t = -\begin{cases} \eta_t g_t + \mu\, v_t & \text{Nesterov} \\
                           v_t & \text{otherwise} \end{cases}

    With a constant learning rate this equals `trace` followed by `scale_by_learning_rate`; when
    the learning rate changes it does not: here a new learning rate applies to new gradients only,
    while "trace, then scale" rescales the whole accumulated momentum at once. nnabla's
    `Momentum` (:math:`v = \gamma v + \eta g;\ w \mathrel{-}= v`) and `Nesterov`
    (:math:`v' = \gamma v - \eta g;\ w \mathrel{+}= -\gamma v + (1+\gamma) v'`, which is the
    Nesterov line above with :math:`v \to -v`) use this form. Like `scale_by_learning_rate` it
    ends a chain.

    Args:
      learning_rate: :math:`\eta_t` >= 0, a float or a schedule `count -> lr`.
      decay: the momentum :math:`\mu` in [0, 1], a float or a schedule.
      nesterov: Nesterov's form.
      flip_sign: negate the step (gradient descent).
      accumulator_dtype: dtype of the buffer (default: the params' dtype).

    Returns:
      A `GradientTransformation` with state `TraceState(count, trace)`.

    Reference: nnabla `Momentum`, `Nesterov` (`src/nbla/solver/generic/momentum.cpp`,
    `nesterov.cpp`); Sutskever et al. (ICML 2013).
    """
    who = "trace_with_lr"
    check_non_negative(who, "learning_rate", learning_rate)
    check_in_range(who, "decay", decay, 0.0, 1.0)
    sign = -1.0 if flip_sign else 1.0

    def init(params):
        return TraceState(count=zero_count(), trace=zeros_like(params, accumulator_dtype))

    def update(updates, state, params=None, **extra_args):
        del params, extra_args
        assert_same_structure(who, updates=updates, **{"state.trace": state.trace})
        eta = value_at(learning_rate, state.count)
        mu = value_at(decay, state.count)

        def leaf(g, v):
            step = eta * widen(g)
            v_new = as_stored(mu * widen(v) + step, v)
            u = step + mu * v_new if nesterov else v_new
            return (sign * u).astype(g.dtype), v_new.astype(v.dtype)

        updates, trace = map_split(leaf, 2, updates, state.trace)
        return updates, TraceState(count=safe_increment(state.count), trace=trace)

    return GradientTransformation(init, update)


def weight_decay_by_lr_ratio(
    rate: ScalarOrSchedule,
    learning_rate: ScalarOrSchedule,
    *,
    initial_learning_rate: ArrayLike | None = None,
    mask: MaskOrFn | None = None,
) -> GradientTransformation:
    r"""Add the parameters decayed in proportion to the learning rate's schedule.

    .. math::  u_t = g_t + \lambda_t \frac{\eta_t}{\eta_0} w_{t-1}

    Placed after a step that already contains the learning rate and before the sign flip, this is
    the decoupled decay of nnabla's `SgdW` and `AdamW`, :math:`w \mathrel{-}= (\eta_t/\eta_0)
    \lambda w` (Loshchilov & Hutter's schedule multiplier); see `sgdw`, `adamw_nnabla`. With a
    constant learning rate the factor is 1 and this is `weight_decay(rate, mask)`.

    Args:
      rate: :math:`\lambda` >= 0, a float or a schedule `count -> rate`.
      learning_rate: :math:`\eta_t`, the optimizer's learning rate (a float or a schedule).
      initial_learning_rate: :math:`\eta_0` > 0; default: the learning rate, or the schedule's
        value at step 0. Give it when the learning rate is changed between steps
        (`inject_hyperparams`, nnabla's `set_learning_rate`), as in `bound_lr`.
      mask: which parameters decay (boolean tree, callable or glob pattern(s)); None: all.

    Returns:
      A `GradientTransformation` with state `WeightDecayState(count)`; it needs `params`.

    Reference: nnabla `SgdW`, `AdamW` (`src/nbla/solver/generic/sgdw.cpp`, `adamw.cpp`);
    Loshchilov & Hutter, "Decoupled Weight Decay Regularization" (ICLR 2019).
    """
    who = "weight_decay_by_lr_ratio"
    check_non_negative(who, "rate", rate)
    ratio = lr_ratio(who, learning_rate, initial_learning_rate)
    if not callable(learning_rate) and initial_learning_rate is None:
        return weight_decay_tx(rate, mask)
    return weight_decay_tx(lambda count: value_at(rate, count) * ratio(count), mask)


# --------------------------------------------------------------------------------------------
# Trust ratios of nnabla's Lars and Lamb
# --------------------------------------------------------------------------------------------


class ScaleByLarsTrustRatioState(NamedTuple):
    """State of `scale_by_lars_trust_ratio`."""

    count: jax.Array  # type: ignore[assignment]  # int32, saturating (for a decay schedule)


def scale_by_lars_trust_ratio(
    weight_decay: ScalarOrSchedule = 0.0,
    coefficient: ArrayLike = 1e-3,
    eps: ArrayLike = 1e-6,
) -> GradientTransformation:
    r"""nnabla's LARS step direction: coupled decay scaled by a per-tensor trust ratio.

    For each parameter tensor :math:`w` with gradient :math:`g`:

    .. math::

      x = \|g\| + \lambda \|w\| \ (+\,\epsilon \text{ if it is } < \epsilon), \qquad
      r = \begin{cases} 1 & \|w\| < \epsilon \\ c\, \|w\| / x & \text{otherwise} \end{cases},
      \qquad u = r\, (g + \lambda w)

    Followed by `trace_with_lr(lr, momentum)` it is nnabla's `Lars`,
    :math:`v = \gamma v + \eta r (g + \lambda w);\ w \mathrel{-}= v` (see `lars_nnabla`). It
    differs from `scale_by_trust_ratio` (Optax's, used by `lars`) in the denominator
    :math:`\|g\| + \lambda\|w\|` instead of :math:`\|g + \lambda w\|`, and in skipping the
    coefficient when :math:`\|w\| < \epsilon`.

    Args:
      weight_decay: :math:`\lambda` >= 0, a float or a schedule (nnabla resets it to 0 after
        every update unless set again, so a schedule is the way to vary it).
      coefficient: the trust coefficient :math:`c` > 0.
      eps: :math:`\epsilon` > 0.

    Returns:
      A `GradientTransformation` with state `ScaleByLarsTrustRatioState(count)`; it needs
      `params`.

    Reference: nnabla `Lars` (`src/nbla/solver/generic/lars.cpp`); You, Gitman & Ginsburg,
    "Large Batch Training of Convolutional Networks" (arXiv:1708.03888, 2017).
    """
    who = "scale_by_lars_trust_ratio"
    check_non_negative(who, "weight_decay", weight_decay)
    check_positive(who, "coefficient", coefficient)
    check_positive(who, "eps", eps)

    def init(params):
        del params
        return ScaleByLarsTrustRatioState(count=zero_count())

    def update(updates, state, params=None, **extra_args):
        del extra_args
        params = require_params(who, params)
        assert_same_structure(who, updates=updates, params=params)
        lam = value_at(weight_decay, state.count)

        def leaf(g, w):
            gw, ww = widen(g), widen(jnp.asarray(w))
            w_norm, g_norm = safe_norm(ww), safe_norm(gw)
            x = g_norm + lam * w_norm
            x = jnp.where(x < eps, x + eps, x)
            ratio = jnp.where(w_norm < eps, 1.0, coefficient * w_norm / x)
            return (ratio * (gw + lam * ww)).astype(g.dtype)

        updates = jax.tree.map(leaf, updates, params)
        return updates, ScaleByLarsTrustRatioState(count=safe_increment(state.count))

    return GradientTransformation(init, update)


def scale_by_lamb_trust_ratio(
    gamma_l: ArrayLike = 0.0, gamma_u: ArrayLike = 10.0, eps: ArrayLike = 1e-6
) -> GradientTransformation:
    r"""nnabla's LAMB trust ratio: the clipped parameter norm over the update norm.

    For each parameter tensor :math:`w` with incoming update :math:`r`:

    .. math::

      \varphi = \mathrm{clip}(\|w\|, \gamma_l, \gamma_u), \qquad
      u = \begin{cases} (\varphi / \|r\|)\, r & \|r\| > \epsilon \\ r & \text{otherwise}
        \end{cases}

    In nnabla's `Lamb`, :math:`r` is the Adam direction plus :math:`\lambda w` (see
    `lamb_nnabla`). With the default :math:`\gamma_l = 0` a tensor whose norm is 0 gets
    :math:`\varphi = 0` and never moves (zero-initialised biases stay at 0, as in nnabla); pass a
    small positive `gamma_l` to let them move. Optax's `scale_by_trust_ratio` (used by `lamb`)
    leaves such tensors at ratio 1 instead and does not clip.

    Args:
      gamma_l: :math:`\gamma_l` >= 0, lower clip of the parameter norm.
      gamma_u: :math:`\gamma_u` >= `gamma_l`, upper clip of the parameter norm.
      eps: :math:`\epsilon` >= 0, the update norm below which the ratio is 1.

    Returns:
      A stateless `GradientTransformation` (state `EmptyState`); it needs `params`.

    Reference: nnabla `Lamb` (`src/nbla/solver/generic/lamb.cpp`); You et al., "Large Batch
    Optimization for Deep Learning: Training BERT in 76 minutes" (ICLR 2020).
    """
    who = "scale_by_lamb_trust_ratio"
    check_non_negative(who, "gamma_l", gamma_l)
    check_non_negative(who, "gamma_u", gamma_u)
    check_non_negative(who, "eps", eps)
    low, high = concrete(gamma_l), concrete(gamma_u)
    if low is not None and high is not None and not bool((low <= high).all()):
        raise ValueError(
            f"{who}: gamma_l must be <= gamma_u, got gamma_l={gamma_l!r} and gamma_u={gamma_u!r}"
        )

    def leaf(r, w):
        rw = widen(r)
        phi = jnp.clip(safe_norm(jnp.asarray(w)), gamma_l, gamma_u)
        r_norm = safe_norm(rw)
        big = r_norm > eps
        ratio = jnp.where(big, phi / jnp.where(big, r_norm, 1.0), 1.0)
        return (ratio * rw).astype(r.dtype)

    return stateless_with_params(who, leaf)


# --------------------------------------------------------------------------------------------
# AdaBelief with nnabla's options
# --------------------------------------------------------------------------------------------


def _rectification(b2: ArrayLike, count: jax.Array) -> tuple[jax.Array, jax.Array]:
    """RAdam's (adaptive?, r_t) at step `count`: adaptive where rho_t > 4.

    rho_t is a small difference of two large numbers for small t, so b2^t and 1 - b2^t are
    formed from log(b2) (in float64 when b2 is a Python number) with exp / expm1, which keeps r_t
    accurate to about 1e-6 at its first adaptive step instead of the 1e-4 of a float32 power.
    """
    b2_value = concrete(b2)
    if b2_value is not None and b2_value.ndim == 0:
        rho_inf: Any = 2.0 / (1.0 - float(b2_value)) - 1.0
        log_b2: Any = math.log(float(b2_value)) if float(b2_value) > 0 else -jnp.inf
    else:
        rho_inf = 2.0 / (1.0 - jnp.asarray(b2, jnp.float32)) - 1.0
        log_b2 = jnp.log(jnp.asarray(b2, jnp.float32))
    t = count.astype(jnp.float32)
    x = t * log_b2
    rho = rho_inf - 2.0 * t * jnp.exp(x) / -jnp.expm1(x)
    adaptive = rho > 4.0
    rho_ok = jnp.where(adaptive, rho, rho_inf)  # keeps the unused branch free of NaN
    r = jnp.sqrt(
        (rho_ok - 4.0) * (rho_ok - 2.0) * rho_inf / ((rho_inf - 4.0) * (rho_inf - 2.0) * rho_ok)
    )
    return adaptive, r


def scale_by_adabelief(
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.999,
    eps: ArrayLike = 1e-8,
    *,
    amsgrad: bool = False,
    rectify: bool = False,
    mu_dtype: Any = None,
    nu_dtype: Any = None,
) -> GradientTransformation:
    r"""Rescale updates by AdaBelief as published, with nnabla's AMSGrad and rectification options.

    .. math::

      m_t = \beta_1 m_{t-1} + (1-\beta_1) g_t, \qquad
      s_t = \beta_2 s_{t-1} + (1-\beta_2) |g_t - m_t|^2, \qquad
      \bar s_t = \begin{cases} \max(\bar s_{t-1}, s_t) & \text{amsgrad} \\ s_t \end{cases} \\
      \hat m_t = \frac{m_t}{1-\beta_1^t}, \qquad \hat s_t = \frac{\bar s_t + \epsilon}{1-\beta_2^t},
      \qquad u_t = \begin{cases}
        r_t\, \hat m_t / (\sqrt{\hat s_t} + \epsilon) & \text{rectify and } \rho_t > 4 \\
        \hat m_t & \text{rectify and } \rho_t \le 4 \\
        \hat m_t / (\sqrt{\hat s_t} + \epsilon) & \text{otherwise} \end{cases}

    with RAdam's :math:`\rho_t` and :math:`r_t` (see `scale_by_radam`). Two deliberate differences
    from nnabla's `AdaBelief`, which match the published rules: nnabla adds :math:`\epsilon` into
    the *stored* :math:`s_t` (or :math:`\bar s_t`) at every step, so it accumulates (to about
    :math:`\epsilon/(1-\beta_2)`) before :math:`\epsilon` is added again in the denominator; here
    it is added once, as the paper's :math:`\hat s_t = (s_t + \epsilon)/(1-\beta_2^t)`. And
    nnabla's rectified SGD branch steps by the uncorrected :math:`m_t`; here it is RAdam's
    :math:`\hat m_t`. (`scale_by_belief` is Optax's variant, whose :math:`\epsilon_{root}`
    accumulates like nnabla's.)

    Args:
      b1: :math:`\beta_1` in [0, 1), decay of the first moment.
      b2: :math:`\beta_2` in [0, 1), decay of the belief :math:`s`.
      eps: :math:`\epsilon` >= 0, added to :math:`\bar s_t` and to the denominator.
      amsgrad: divide by the running maximum of :math:`s_t`.
      rectify: RAdam's rectification (momentum SGD while :math:`\rho_t \le 4`).
      mu_dtype: dtype of the first moment (default: the params' dtype).
      nu_dtype: dtype of :math:`s` and its maximum (default: the params' dtype).

    Returns:
      A `GradientTransformation` with state `ScaleByBeliefState(count, mu, nu)`, or
      `ScaleByAmsgradState(count, mu, nu, nu_max)` with `amsgrad` (`nu` holding :math:`s_t`).

    Reference: Zhuang et al., "AdaBelief Optimizer: Adapting Stepsizes by the Belief in Observed
    Gradients" (NeurIPS 2020); nnabla `AdaBelief` (`src/nbla/solver/generic/adabelief.cpp`).
    """
    who = "scale_by_adabelief"
    _check_moments(who, b1, b2, eps)

    def init(params):
        mu, nu = zeros_like(params, mu_dtype), zeros_like(params, nu_dtype)
        if amsgrad:
            return ScaleByAmsgradState(
                count=zero_count(), mu=mu, nu=nu, nu_max=zeros_like(params, nu_dtype)
            )
        return ScaleByBeliefState(count=zero_count(), mu=mu, nu=nu)

    def update(updates, state, params=None, **extra_args):
        del params, extra_args
        assert_same_structure(who, updates=updates, **{"state.mu": state.mu})
        count = safe_increment(state.count)
        c1, c2 = bias_correction(b1, count), bias_correction(b2, count)
        if rectify:
            adaptive, r = _rectification(b2, count)
        else:
            adaptive, r = jnp.asarray(False), jnp.asarray(1.0)  # unused

        def leaf(g, m, s, *s_max):
            gw = widen(g)
            m_new = as_stored(_ema(b1, gw, m), m)
            s_new = as_stored(_ema(b2, abs_sq(gw - m_new), s), s)
            s_eff = as_stored(jnp.maximum(widen(s_max[0]), s_new), s_max[0]) if s_max else s_new
            m_hat = m_new / c1
            u = m_hat / (jnp.sqrt((s_eff + eps) / c2) + eps)
            if rectify:
                u = jnp.where(adaptive, r * u, m_hat)
            out = (u.astype(g.dtype), m_new.astype(m.dtype), s_new.astype(s.dtype))
            return (*out, s_eff.astype(s_max[0].dtype)) if s_max else out

        if amsgrad:
            u, mu, nu, nu_max = map_split(leaf, 4, updates, state.mu, state.nu, state.nu_max)
            return u, ScaleByAmsgradState(count=count, mu=mu, nu=nu, nu_max=nu_max)
        u, mu, nu = map_split(leaf, 3, updates, state.mu, state.nu)
        return u, ScaleByBeliefState(count=count, mu=mu, nu=nu)

    return GradientTransformation(init, update)


__all__ = [
    "ScaleByLarsTrustRatioState",
    "scale_by_adabelief",
    "scale_by_lamb_trust_ratio",
    "scale_by_lars_trust_ratio",
    "trace_with_lr",
    "weight_decay_by_lr_ratio",
]
