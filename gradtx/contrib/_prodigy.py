"""Prodigy: learning-rate-free AdamW that estimates the distance to the solution (D) quickly."""

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from .. import tree as gtree
from .._base._checks import alias_errors, check_in_range, check_non_negative, check_positive
from .._base._introspect import register
from .._base._numerics import last_used, safe_divide, safe_increment, value_at, widen, zero_count
from .._base._typing import ArrayLike, Params, ScalarOrSchedule, Updates
from ..core._transformation import GradientTransformation, require_params
from ..transforms._building_blocks import (
    adam_step_size,
    copy_params,
    ema,
    scalar_dtype,
)
from ..tree._math import real_vdot, zeros_like


class ProdigyState(NamedTuple):
    """State of `prodigy` (Optax's fields and order)."""

    exp_avg: Updates  # m_t, params' dtypes
    exp_avg_sq: Updates  # v_t, params' dtypes
    grad_sum: Updates  # s_t, params' dtypes
    params0: Params  # x_0
    estim_lr: jax.Array  # d_t, float32
    numerator_weighted: jax.Array  # r_t, float32
    count: jax.Array  # type: ignore[assignment]  # int32, saturating


def check_betas(who: str, betas: tuple[ArrayLike, ArrayLike]) -> tuple[ArrayLike, ArrayLike]:
    """`betas` as a pair (b1, b2), each in [0, 1)."""
    if not (isinstance(betas, tuple | list) and len(betas) == 2):
        raise ValueError(f"{who}: betas must be a pair (b1, b2), got {betas!r}")
    check_in_range(who, "betas[0]", betas[0], 0.0, 1.0, high_open=True)
    check_in_range(who, "betas[1]", betas[1], 0.0, 1.0, high_open=True)
    return betas[0], betas[1]


def d_adapted_fields(params: Params, estim_lr0: ArrayLike) -> dict[str, Any]:
    """The fields that the states of the D-estimating AdamWs share, fresh: zero moments and
    gradient sum like the params, :math:`d_0` and a zero numerator in the scalar dtype, and a
    zero count."""
    dtype = scalar_dtype(params)
    return {
        "exp_avg": zeros_like(params),
        "exp_avg_sq": zeros_like(params),
        "grad_sum": zeros_like(params),
        "estim_lr": jnp.asarray(estim_lr0, dtype),
        "numerator_weighted": jnp.zeros([], dtype),
        "count": zero_count(),
    }


def d_adapted_step(
    who: str,
    learning_rate: ScalarOrSchedule,
    beta1: ArrayLike,
    beta2: ArrayLike,
    updates: Updates,
    state: Any,
    params: Params | None,
) -> tuple[Params, Any, jax.Array, jax.Array]:
    r"""The common start of an update of the D-estimating AdamWs (Prodigy, D-Adaptation):
    `(params, dtype, count, dlr)`, the params (required, with the updates' structure), the dtype
    of the scalar statistics, the new count and the step size
    :math:`\hat\eta_t = d_t \eta_t \sqrt{1-\beta_2^t}/(1-\beta_1^t)`."""
    params = require_params(who, params)
    gtree.assert_same_structure(who, updates=updates, params=params)
    dtype = state.estim_lr.dtype
    count = safe_increment(state.count)
    sched = value_at(learning_rate, state.count)
    dlr = (state.estim_lr * sched * adam_step_size(beta1, beta2, count)).astype(dtype)
    return params, dtype, count, dlr


def d_adapted(who: str, tx: GradientTransformation, learning_rate: ScalarOrSchedule) -> Any:
    r"""`tx` (a D-estimating AdamW) registered for `gradtx.metrics`, which then reports its
    `learning_rate` (the schedule's value at the latest update) and `effective_learning_rate`
    :math:`d\,\eta`: that learning rate times the current estimate :math:`d` (`estim_lr`), the
    step size the method has adapted to (before Adam's bias correction), as Prodigy's and
    D-Adaptation's authors log it."""

    def report(state):
        lr = last_used(learning_rate, state.count, who=who, name="learning_rate")
        d = jnp.asarray(state.estim_lr, jnp.float32)
        return {"learning_rate": lr, "effective_learning_rate": d * lr}

    return register(tx, "leaf", report=report)


def adamw_updates(
    updates: Updates,
    mu: Updates,
    nu: Updates,
    params: Params,
    *,
    step_size: ArrayLike,
    decay: ArrayLike,
    eps: ArrayLike,
) -> Updates:
    r"""AdamW's update from the moments of the D-estimating methods,
    :math:`u = -\lambda_t x - s\, m / (\sqrt v + \epsilon)` per leaf, in the gradients' dtypes."""

    def leaf(g, m, v, p):
        u = -jnp.asarray(decay) * widen(p) - step_size * widen(m) / (jnp.sqrt(widen(v)) + eps)
        return u.astype(g.dtype)

    return jax.tree.map(leaf, updates, mu, nu, params)


@alias_errors
def prodigy(
    learning_rate: ScalarOrSchedule = 1.0,
    betas: tuple[ArrayLike, ArrayLike] = (0.9, 0.999),
    beta3: ArrayLike | None = None,
    eps: ArrayLike = 1e-8,
    estim_lr0: ArrayLike = 1e-6,
    estim_lr_coef: ArrayLike = 1.0,
    weight_decay: ArrayLike = 0.0,
    safeguard_warmup: bool = False,
) -> GradientTransformation:
    r"""Prodigy: AdamW whose step size :math:`d_t` estimates the distance to the solution.

    With :math:`\eta_t` the schedule,
    :math:`\hat\eta_t = d_t \eta_t \sqrt{1-\beta_2^t}/(1-\beta_1^t)` and
    :math:`\tilde g_t = d_t g_t`:

    .. math::

      m_t &= \beta_1 m_{t-1} + (1-\beta_1) \tilde g_t, \qquad
      v_t = \beta_2 v_{t-1} + (1-\beta_2) \tilde g_t^2, \\
      s_t &= \beta_3 s_{t-1} + \hat\eta_t \tilde g_t / d_0, \qquad
      r_t = \beta_3 r_{t-1} + (d_t / d_0)\, \hat\eta_t \langle g_t, x_0 - x_t \rangle, \\
      d_{t+1} &= \max\big(d_t, c\, r_t / \|s_t\|_1\big), \qquad
      u_t = -\hat\eta_t \Big(\lambda x_t + \frac{m_t}{\sqrt{v_t} + d_{t+1} \epsilon}\Big)

    (`safeguard_warmup` replaces :math:`\hat\eta_t` by :math:`d_t` in :math:`s_t`). The update
    already includes the step size and the sign: use it as is, with a schedule that treats 1 as
    the base value. A monolithic transformation, as in Optax: :math:`d_t` couples every part.

    Args:
      learning_rate: :math:`\eta_t` >= 0, a multiplier (float or schedule) of the estimated
        step; the recommended schedule is a linear decay from 1 to 0 with a 0-20% warmup.
      betas: :math:`(\beta_1, \beta_2)`, each in [0, 1), of the underlying AdamW.
      beta3: :math:`\beta_3` in [0, 1), the decay of the D estimate's sums; None:
        :math:`\sqrt{\beta_2}`.
      eps: :math:`\epsilon` >= 0 (scaled by :math:`d_{t+1}`) in AdamW's denominator.
      estim_lr0: :math:`d_0` > 0, the initial (under-)estimate.
      estim_lr_coef: :math:`c` > 0, multiplies every estimate.
      weight_decay: :math:`\lambda` >= 0, AdamW-style (decoupled) weight decay.
      safeguard_warmup: leave the schedule out of :math:`s_t` (avoids issues during warmup).

    Returns:
      A `GradientTransformation` with state `ProdigyState`; `update` needs `params`.
      `gradtx.metrics` reports its `learning_rate` and `effective_learning_rate`
      :math:`d_t \eta_t` (the current estimate times the schedule's value).

    Example:
      >>> import jax, jax.numpy as jnp, gradtx
      >>> f = lambda x: jnp.sum(x**2)
      >>> tx = gradtx.contrib.prodigy()
      >>> x = jnp.array([1.0, 2.0, 3.0])
      >>> state = tx.init(x)
      >>> for _ in range(50):
      ...     updates, state = tx.update(jax.grad(f)(x), state, x)
      ...     x = gradtx.apply_updates(x, updates)
      >>> bool(f(x) < 14.0)
      True

    Reference: Mishchenko & Defazio, "Prodigy: An Expeditiously Adaptive Parameter-Free
    Learner" (ICML 2024). Matches `optax.contrib.prodigy` (Optax 0.2.8), except that the scalar
    statistics are float32 for low-precision params and that gradients that are all zero so far
    leave :math:`d_t` unchanged (Optax divides 0 by 0 there, and every later update is NaN).
    """
    who = "prodigy"
    beta1, beta2 = check_betas(who, betas)
    if beta3 is None:
        beta3 = beta2**0.5
    check_in_range(who, "beta3", beta3, 0.0, 1.0, high_open=True)
    check_non_negative(who, "learning_rate", learning_rate)
    check_non_negative(who, "eps", eps)
    check_positive(who, "estim_lr0", estim_lr0)
    check_positive(who, "estim_lr_coef", estim_lr_coef)
    check_non_negative(who, "weight_decay", weight_decay)

    def init(params):
        return ProdigyState(**d_adapted_fields(params, estim_lr0), params0=copy_params(params))

    def update(updates, state, params=None, **extra_args):
        del extra_args
        params, dtype, count, dlr = d_adapted_step(
            who, learning_rate, beta1, beta2, updates, state, params
        )
        d = state.estim_lr
        d_grad = d if safeguard_warmup else dlr

        numerator_acum = real_vdot(updates, gtree.sub(state.params0, params)).astype(dtype)
        numerator = beta3 * state.numerator_weighted + (d / estim_lr0) * dlr * numerator_acum

        def moments(g, m, v, s):
            dg = d * widen(g)
            m_new = ema(beta1, dg, m)
            v_new = ema(beta2, dg * dg, v)
            s_new = beta3 * widen(s) + d_grad * dg / estim_lr0
            return m_new.astype(m.dtype), v_new.astype(v.dtype), s_new.astype(s.dtype)

        exp_avg, exp_avg_sq, grad_sum = gtree.map_split(
            moments, 3, updates, state.exp_avg, state.exp_avg_sq, state.grad_sum
        )
        denominator = gtree.norm(grad_sum, ord=1).astype(dtype)
        estimate = estim_lr_coef * safe_divide(numerator, denominator, positive=True)
        new_d = jnp.maximum(d, estimate).astype(dtype)

        new_updates = adamw_updates(
            updates,
            exp_avg,
            exp_avg_sq,
            params,
            step_size=dlr,
            decay=weight_decay * dlr,
            eps=new_d * eps,
        )
        new_state = ProdigyState(
            exp_avg=exp_avg,
            exp_avg_sq=exp_avg_sq,
            grad_sum=grad_sum,
            params0=state.params0,
            estim_lr=new_d,
            numerator_weighted=numerator.astype(dtype),
            count=count,
        )
        return new_updates, new_state

    return d_adapted(who, GradientTransformation(init, update), learning_rate)
