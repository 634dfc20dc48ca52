"""MoMo and MoMo-Adam: momentum with a Polyak-type step size from a model of the loss.

Both need the current (batch) loss: `update(grads, state, params, value=loss)`.
"""

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .._base._checks import check_in_range, check_non_negative, check_scalar, concrete
from .._base._introspect import register
from .._base._numerics import abs_sq, last_used, safe_increment, value_at, widen, zero_count
from .._base._recipe import recorded
from .._base._typing import ArrayLike, ScalarOrSchedule, Updates
from ..core._transformation import GradientTransformation, require_params
from ..transforms._building_blocks import ema, loss_value_in, scalar_dtype
from ..tree import assert_same_structure, map_split, norm, zeros_like
from ..tree._math import real_vdot as vdot

# Optax's "no step" threshold on the squared norm of the momentum: float64's epsilon.
_TINY = float(np.finfo(np.float64).eps)


class MomoState(NamedTuple):
    """State of `momo` (Optax's fields)."""

    exp_avg: Updates  # EMA of the gradients, the params' dtype
    barf: jax.Array  # EMA of the loss values (float32, or float64 for float64 params)
    gamma: jax.Array  # EMA of <g, w> (same dtype as barf)
    lb: jax.Array  # the current lower bound of the loss (same dtype as barf)
    count: jax.Array  # type: ignore[assignment]  # int32, saturating


class MomoAdamState(NamedTuple):
    """State of `momo_adam` (Optax's fields)."""

    exp_avg: Updates  # EMA of the gradients, the params' dtype
    exp_avg_sq: Updates  # EMA of the squared gradients, the params' dtype
    barf: jax.Array  # EMA of the loss values (float32, or float64 for float64 params)
    gamma: jax.Array  # EMA of <g, w> (same dtype as barf)
    lb: jax.Array  # the current lower bound of the loss (same dtype as barf)
    count: jax.Array  # type: ignore[assignment]  # int32, saturating


def _check_common(who: str, learning_rate: Any, lower_bound: Any, weight_decay: Any) -> None:
    check_non_negative(who, "learning_rate", learning_rate)
    check_non_negative(who, "weight_decay", weight_decay)
    check_scalar(who, "lower_bound", lower_bound)
    arr = concrete(lower_bound)
    if arr is not None and not np.all(np.isfinite(arr)):
        raise ValueError(f"{who}: lower_bound must be finite, got {lower_bound!r}")


def _reporting(who: str, tx: GradientTransformation, learning_rate: Any) -> GradientTransformation:
    r"""`tx` registered for `gradtx.metrics`, which reports its `learning_rate`: the cap
    :math:`\alpha_t` of the latest step. (The step size :math:`\tau_t` itself is not in the
    state: it depends on the params of that step.)"""

    def report(state):
        return {"learning_rate": last_used(learning_rate, state.count, who=who)}

    return register(tx, "leaf", report=report)


def _polyak_step(cap: jax.Array, denom: jax.Array, max_step: jax.Array) -> jax.Array:
    """min(max_step, max(cap, 0) / denom), and 0 (no step) where denom is (nearly) 0."""
    tiny = denom <= _TINY
    t1 = jnp.maximum(cap, 0.0) / jnp.where(tiny, 1.0, denom)
    return jnp.minimum(max_step, jnp.where(tiny, 0.0, t1))


@recorded
def momo(
    learning_rate: ScalarOrSchedule = 1.0,
    beta: ArrayLike = 0.9,
    lower_bound: ArrayLike = 0.0,
    weight_decay: ArrayLike = 0.0,
    adapt_lower_bound: bool = False,
) -> GradientTransformation:
    r"""MoMo: SGD with momentum whose step size is capped by a Polyak-type adaptive term.

    .. math::

      d_t = \beta d_{t-1} + (1-\beta) g_t, \quad
      \bar f_t = \beta \bar f_{t-1} + (1-\beta) f_t, \quad
      \gamma_t = \beta \gamma_{t-1} + (1-\beta) \langle g_t, w_t \rangle, \\
      \tau_t = \min\!\left(\alpha_t, \frac{\big((1+\alpha_t\lambda)(\bar f_t - f_* - \gamma_t)
        + \langle d_t, w_t\rangle\big)_+}{\|d_t\|^2}\right), \quad
      u_t = -\frac{\alpha_t \lambda}{1 + \alpha_t\lambda} w_t - \tau_t d_t

    (:math:`\beta` is 0 at the first step, so the averages start at the first values; no step
    is taken while :math:`\|d_t\|^2` is ~0). With `adapt_lower_bound` the lower bound
    :math:`f_*` is estimated on the fly. The loss goes in as `update(..., value=loss)`; it needs
    the params. The scalar averages are float32 (Optax keeps them in the params' lowest dtype).
    Matches `optax.contrib.momo`.

    Args:
      learning_rate: :math:`\alpha` >= 0, the largest step size (float or schedule); it can be
        chosen large.
      beta: :math:`\beta` in [0, 1), the momentum.
      lower_bound: :math:`f_*`, a lower bound of the loss (0 for most losses).
      weight_decay: :math:`\lambda` >= 0.
      adapt_lower_bound: estimate the lower bound on the fly, starting from `lower_bound`.

    Returns:
      A `GradientTransformation` with state `MomoState(exp_avg, barf, gamma, lb, count)`.
      `gradtx.metrics` reports its `learning_rate`, the cap :math:`\alpha_t` of the latest
      step (the step size :math:`\tau_t` depends on that step's params, not kept in the state).

    Example:
      >>> import jax, jax.numpy as jnp, gradtx
      >>> f = lambda w: jnp.sum(w**2)
      >>> tx = gradtx.contrib.momo()
      >>> w = jnp.array([1.0, 2.0, 3.0])
      >>> state = tx.init(w)
      >>> value, grad = jax.value_and_grad(f)(w)
      >>> updates, state = tx.update(grad, state, w, value=value)

    Reference: Schaipp et al., "MoMo: Momentum Models for Adaptive Learning Rates" (ICML 2024),
    arXiv:2305.07583.
    """
    who = "momo"
    _check_common(who, learning_rate, lower_bound, weight_decay)
    check_in_range(who, "beta", beta, 0.0, 1.0, high_open=True)

    def init(params):
        dtype = scalar_dtype(params)
        return MomoState(
            exp_avg=zeros_like(params),
            barf=jnp.zeros([], dtype),
            gamma=jnp.zeros([], dtype),
            lb=jnp.array(lower_bound, dtype),
            count=zero_count(),
        )

    def update(updates, state, params=None, **extra_args):
        params = require_params(who, params)
        assert_same_structure(who, updates=updates, params=params)
        dtype = state.barf.dtype
        f = loss_value_in(who, extra_args, dtype)
        bt = jnp.where(state.count == 0, 0.0, jnp.asarray(beta, dtype))
        barf = ema(bt, f, state.barf)
        exp_avg = jax.tree.map(
            lambda d, g: ema(bt, widen(g), d).astype(d.dtype), state.exp_avg, updates
        )
        gamma = ema(bt, vdot(updates, params).astype(dtype), state.gamma)
        d_norm = norm(exp_avg, squared=True).astype(dtype)
        iprod = vdot(exp_avg, params).astype(dtype)
        alpha = jnp.asarray(value_at(learning_rate, state.count), dtype)
        decay = 1 + alpha * weight_decay
        lb = state.lb
        if adapt_lower_bound:
            cap = decay * (barf - gamma) + iprod
            lb = jnp.where(cap < decay * lb, jnp.maximum(cap / (2 * decay), lower_bound), lb)
        tau = _polyak_step(decay * (barf - lb - gamma) + iprod, d_norm, alpha)
        shrink = alpha * weight_decay / decay
        new_updates = jax.tree.map(
            lambda d, w: (-shrink * widen(w) - tau * widen(d)).astype(w.dtype), exp_avg, params
        )
        new_lb = state.lb
        if adapt_lower_bound:
            new_lb = jnp.maximum((barf + iprod - gamma) - 0.5 * tau * d_norm, lower_bound)
        new_state = MomoState(
            exp_avg=exp_avg,
            barf=barf,
            gamma=gamma,
            lb=new_lb.astype(dtype),
            count=safe_increment(state.count),
        )
        return new_updates, new_state

    return _reporting(who, GradientTransformation(init, update), learning_rate)


@recorded
def momo_adam(
    learning_rate: ScalarOrSchedule = 1e-2,
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.999,
    eps: ArrayLike = 1e-8,
    lower_bound: ArrayLike = 0.0,
    weight_decay: ArrayLike = 0.0,
    adapt_lower_bound: bool = False,
) -> GradientTransformation:
    r"""MoMo-Adam: Adam(W) whose step size is capped by a Polyak-type adaptive term.

    .. math::

      D_t = \epsilon + \sqrt{v_t / (1-\beta_2^t)}, \quad
      \rho_t = 1 - \beta_1^t, \quad
      \tau_t = \min\!\left(\frac{\alpha_t}{\rho_t},
        \frac{\big((1+\alpha_t\lambda)(\bar f_t - \rho_t f_* - \gamma_t)
        + \langle m_t, w_t\rangle\big)_+}{\langle m_t, m_t / D_t\rangle}\right), \\
      u_t = -\frac{\alpha_t \lambda}{1 + \alpha_t\lambda} w_t - \tau_t\, m_t / D_t

    with Adam's :math:`m_t, v_t` and (uncorrected) :math:`\beta_1`-averages :math:`\bar f_t` of
    the loss and :math:`\gamma_t` of :math:`\langle g_t, w_t\rangle`. The loss goes in as
    `update(..., value=loss)`; it needs the params. Matches `optax.contrib.momo_adam`.

    Args:
      learning_rate: :math:`\alpha` >= 0, the largest step size (float or schedule).
      b1: :math:`\beta_1` in [0, 1).
      b2: :math:`\beta_2` in [0, 1).
      eps: :math:`\epsilon` >= 0 of the Adam denominator.
      lower_bound: :math:`f_*`, a lower bound of the loss (0 for most losses).
      weight_decay: :math:`\lambda` >= 0, decoupled as in AdamW.
      adapt_lower_bound: estimate the lower bound on the fly, starting from `lower_bound`.

    Returns:
      A `GradientTransformation` with state
      `MomoAdamState(exp_avg, exp_avg_sq, barf, gamma, lb, count)`. `gradtx.metrics` reports
      its `learning_rate`, the cap :math:`\alpha_t` of the latest step (see `momo`).

    Example:
      >>> import jax, jax.numpy as jnp, gradtx
      >>> f = lambda w: jnp.sum(w**2)
      >>> tx = gradtx.contrib.momo_adam()
      >>> w = jnp.array([1.0, 2.0, 3.0])
      >>> state = tx.init(w)
      >>> value, grad = jax.value_and_grad(f)(w)
      >>> updates, state = tx.update(grad, state, w, value=value)

    Reference: Schaipp et al., "MoMo: Momentum Models for Adaptive Learning Rates" (ICML 2024),
    arXiv:2305.07583.
    """
    who = "momo_adam"
    _check_common(who, learning_rate, lower_bound, weight_decay)
    check_in_range(who, "b1", b1, 0.0, 1.0, high_open=True)
    check_in_range(who, "b2", b2, 0.0, 1.0, high_open=True)
    check_non_negative(who, "eps", eps)

    def init(params):
        dtype = scalar_dtype(params)
        return MomoAdamState(
            exp_avg=zeros_like(params),
            exp_avg_sq=zeros_like(params),
            barf=jnp.zeros([], dtype),
            gamma=jnp.zeros([], dtype),
            lb=jnp.array(lower_bound, dtype),
            count=zero_count(),
        )

    def update(updates, state, params=None, **extra_args):
        params = require_params(who, params)
        assert_same_structure(who, updates=updates, params=params)
        dtype = state.barf.dtype
        f = loss_value_in(who, extra_args, dtype)
        count = safe_increment(state.count)
        # As Optax: a float base to an integer power (rounds unlike bias_correction's float power).
        bc1 = jnp.asarray(1 - b1**count, dtype)
        bc2 = jnp.asarray(1 - b2**count, dtype)
        barf = ema(b1, f, state.barf)

        def leaf(g, m, v):
            gw = widen(g)
            m_new = ema(b1, gw, m).astype(m.dtype)
            v_new = ema(b2, abs_sq(gw), v).astype(v.dtype)
            precond = eps + jnp.sqrt(widen(v_new) / bc2)
            return m_new, v_new, precond

        exp_avg, exp_avg_sq, precond = map_split(leaf, 3, updates, state.exp_avg, state.exp_avg_sq)
        weighted = jax.tree.map(lambda m, p: widen(m) / p, exp_avg, precond)
        d_norm = vdot(exp_avg, weighted).astype(dtype)
        gamma = ema(b1, vdot(updates, params).astype(dtype), state.gamma)
        iprod = vdot(exp_avg, params).astype(dtype)
        alpha = jnp.asarray(value_at(learning_rate, state.count), dtype)
        decay = 1 + alpha * weight_decay
        lb = state.lb
        if adapt_lower_bound:
            cap = decay * (barf - gamma) + iprod
            lb = jnp.where(
                cap < decay * bc1 * lb, jnp.maximum(cap / (2 * bc1 * decay), lower_bound), lb
            )
        tau = _polyak_step(decay * (barf - bc1 * lb - gamma) + iprod, d_norm, alpha / bc1)
        shrink = alpha * weight_decay / decay
        new_updates = jax.tree.map(
            lambda q, w: (-shrink * widen(w) - tau * q).astype(w.dtype), weighted, params
        )
        new_lb = state.lb
        if adapt_lower_bound:
            new_lb = jnp.maximum(((barf + iprod - gamma) - 0.5 * tau * d_norm) / bc1, lower_bound)
        new_state = MomoAdamState(
            exp_avg=exp_avg,
            exp_avg_sq=exp_avg_sq,
            barf=barf.astype(dtype),
            gamma=gamma.astype(dtype),
            lb=new_lb.astype(dtype),
            count=count,
        )
        return new_updates, new_state

    return _reporting(who, GradientTransformation(init, update), learning_rate)


__all__ = ["MomoAdamState", "MomoState", "momo", "momo_adam"]
