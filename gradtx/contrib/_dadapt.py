"""D-Adaptation (AdamW variant): learning-rate-free AdamW by estimating the distance to the
solution."""

from typing import NamedTuple

import jax
import jax.numpy as jnp

from .. import tree as gtree
from .._base._checks import alias_errors, check_non_negative, check_positive
from .._base._numerics import safe_divide, widen
from .._base._typing import ArrayLike, ScalarOrSchedule, Updates
from ..core._transformation import GradientTransformation
from ..tree._math import real_vdot
from ._prodigy import adamw_updates, check_betas, d_adapted, d_adapted_fields, d_adapted_step


class DAdaptAdamWState(NamedTuple):
    """State of `dadapt_adamw` (Optax's fields and order)."""

    exp_avg: Updates  # m_t, params' dtypes
    exp_avg_sq: Updates  # v_t, params' dtypes
    grad_sum: Updates  # s_t, params' dtypes
    estim_lr: jax.Array  # d_t, float32
    numerator_weighted: jax.Array  # r_t, float32
    count: jax.Array  # type: ignore[assignment]  # int32, saturating


@alias_errors
def dadapt_adamw(
    learning_rate: ScalarOrSchedule = 1.0,
    betas: tuple[ArrayLike, ArrayLike] = (0.9, 0.999),
    eps: ArrayLike = 1e-8,
    estim_lr0: ArrayLike = 1e-6,
    weight_decay: ArrayLike = 0.0,
) -> GradientTransformation:
    r"""D-Adaptation AdamW: AdamW whose step size :math:`d_t` estimates the distance to the
    solution in the infinity norm.

    With :math:`\eta_t` the schedule,
    :math:`\hat\eta_t = d_t \eta_t \sqrt{1-\beta_2^t}/(1-\beta_1^t)` and
    :math:`\gamma = \sqrt{\beta_2}`:

    .. math::

      r_t &= \gamma r_{t-1} + (1-\gamma) \hat\eta_t
        \Big\langle g_t, \frac{s_{t-1}}{\sqrt{v_{t-1}} + \epsilon} \Big\rangle, \qquad
      s_t = \gamma s_{t-1} + (1-\gamma) \hat\eta_t g_t, \\
      m_t &= \beta_1 m_{t-1} + (1-\beta_1) \hat\eta_t g_t, \qquad
      v_t = \beta_2 v_{t-1} + (1-\beta_2) g_t^2, \\
      d_{t+1} &= \max\Big(d_t, \frac{r_t}{(1-\gamma) \|s_t\|_1}\Big), \qquad
      u_t = -\lambda \hat\eta_t x_t - \frac{m_t}{\sqrt{v_t} + \epsilon}

    The update already includes the step size and the sign: use it as is, with a schedule that
    treats 1 as the base value. A monolithic transformation, as in Optax.

    Args:
      learning_rate: :math:`\eta_t` >= 0, a multiplier (float or schedule) of the estimated
        step; the recommended schedule is a linear decay from 1 to 0 with a 0-20% warmup.
      betas: :math:`(\beta_1, \beta_2)`, each in [0, 1), of the underlying AdamW.
      eps: :math:`\epsilon` >= 0 in AdamW's denominator.
      estim_lr0: :math:`d_0` > 0, the initial (under-)estimate.
      weight_decay: :math:`\lambda` >= 0, AdamW-style (decoupled) weight decay.

    Returns:
      A `GradientTransformation` with state `DAdaptAdamWState`; `update` needs `params`.
      `gradtx.metrics` reports its `learning_rate` and `effective_learning_rate`
      :math:`d_t \eta_t` (the current estimate times the schedule's value).

    Example:
      >>> import jax, jax.numpy as jnp, gradtx
      >>> f = lambda x: jnp.sum(x**2)
      >>> tx = gradtx.contrib.dadapt_adamw()
      >>> x = jnp.array([1.0, 2.0, 3.0])
      >>> state = tx.init(x)
      >>> for _ in range(50):
      ...     updates, state = tx.update(jax.grad(f)(x), state, x)
      ...     x = gradtx.apply_updates(x, updates)
      >>> bool(f(x) < 14.0)
      True

    Reference: Defazio & Mishchenko, "Learning-Rate-Free Learning by D-Adaptation" (ICML 2023).
    Matches `optax.contrib.dadapt_adamw` (Optax 0.2.8), except that the scalar statistics are
    float32 for low-precision params and that gradients that are all zero so far leave
    :math:`d_t` unchanged (Optax divides 0 by 0 there, and every later update is NaN).
    """
    who = "dadapt_adamw"
    beta1, beta2 = check_betas(who, betas)
    check_non_negative(who, "learning_rate", learning_rate)
    check_non_negative(who, "eps", eps)
    check_positive(who, "estim_lr0", estim_lr0)
    check_non_negative(who, "weight_decay", weight_decay)

    def init(params):
        return DAdaptAdamWState(**d_adapted_fields(params, estim_lr0))

    def update(updates, state, params=None, **extra_args):
        del extra_args
        params, dtype, count, dlr = d_adapted_step(
            who, learning_rate, beta1, beta2, updates, state, params
        )
        sb2 = beta2**0.5

        s_weighted = jax.tree.map(
            lambda s, v: widen(s) / (jnp.sqrt(widen(v)) + eps), state.grad_sum, state.exp_avg_sq
        )
        numerator_acum = real_vdot(updates, s_weighted).astype(dtype)

        def moments(g, m, v, s):
            g32 = widen(g)
            # Optax's order: (1 - beta) * dlr rounds before it scales the gradient (not the
            # the building blocks' ema of dlr * g); D-Adaptation's estimate amplifies that last bit.
            m_new = beta1 * m + (1 - beta1) * dlr * g32
            v_new = beta2 * v + (1 - beta2) * g32 * g32
            s_new = sb2 * s + (1 - sb2) * dlr * g32
            return m_new.astype(m.dtype), v_new.astype(v.dtype), s_new.astype(s.dtype)

        exp_avg, exp_avg_sq, grad_sum = gtree.map_split(
            moments, 3, updates, state.exp_avg, state.exp_avg_sq, state.grad_sum
        )
        grad_sum_l1 = jnp.asarray(gtree.norm(grad_sum, ord=1), dtype)
        numerator = sb2 * state.numerator_weighted + (1 - sb2) * dlr * numerator_acum
        estimate = safe_divide(numerator, (1 - sb2) * grad_sum_l1, positive=True)
        new_d = jnp.maximum(state.estim_lr, estimate).astype(dtype)

        new_updates = adamw_updates(
            updates, exp_avg, exp_avg_sq, params, step_size=1.0, decay=weight_decay * dlr, eps=eps
        )
        new_state = DAdaptAdamWState(
            exp_avg=exp_avg,
            exp_avg_sq=exp_avg_sq,
            grad_sum=grad_sum,
            estim_lr=new_d,
            numerator_weighted=numerator.astype(dtype),
            count=count,
        )
        return new_updates, new_state

    return d_adapted(who, GradientTransformation(init, update), learning_rate)
