"""MADGRAD: momentumised, adaptive dual averaging."""

from typing import NamedTuple

import jax
import jax.numpy as jnp

from .._base._checks import alias_errors, check_in_range, check_non_negative
from .._base._introspect import register
from .._base._numerics import last_used, safe_increment, value_at, widen, zero_count
from .._base._recipe import recorded
from .._base._typing import ArrayLike, Params, ScalarOrSchedule, Updates
from ..core._transformation import GradientTransformation, chain, require_params
from ..transforms._decay import weight_decay as weight_decay_tx
from ..tree import assert_same_structure, map_split, zeros_like


class MadgradState(NamedTuple):
    """State of `scale_by_madgrad` (Optax's layout)."""

    count: jax.Array  # type: ignore[assignment]  # int32, saturating
    grad_sum_sq: Updates  # G_t = sum_k lambda_k g_k^2, the params' dtype
    s: Updates  # s_t = sum_k lambda_k g_k, the params' dtype
    x0: Params  # the starting point, taken from the params of the first update


@recorded
def scale_by_madgrad(
    learning_rate: ScalarOrSchedule,
    momentum: ArrayLike = 0.9,
    eps: ArrayLike = 1e-6,
) -> GradientTransformation:
    r"""Turn gradients into MADGRAD steps (the learning rate is part of the rule).

    .. math::

      \lambda_t = (\eta_t + \epsilon) \sqrt{t}, \qquad
      s_t = s_{t-1} + \lambda_t g_t, \qquad G_t = G_{t-1} + \lambda_t g_t^2, \\
      z_t = x_0 - \frac{s_t}{G_t^{1/3} + \epsilon}, \qquad
      x_t = (1 - c)\, z_t + c\, x_{t-1}, \qquad u_t = x_t - x_{t-1}

    with :math:`t = 1, 2, \dots` and :math:`c` the momentum. It needs the params.
    :math:`x_0` is the params of the first update (Optax copies them in `init`; the two agree
    whenever training starts from the params given to `init`), so that the state can be created
    from `jax.ShapeDtypeStruct`s. Matches `optax.contrib.scale_by_madgrad`.

    Args:
      learning_rate: :math:`\eta` >= 0, a float or a schedule.
      momentum: :math:`c` in [0, 1).
      eps: :math:`\epsilon` >= 0, added to the learning rate and to the denominator.

    Returns:
      A `GradientTransformation` with state `MadgradState(count, grad_sum_sq, s, x0)`;
      `gradtx.metrics` reports its `learning_rate`.

    Reference: Defazio & Jelassi, "Adaptivity without Compromise: A Momentumized, Adaptive, Dual
    Averaged Gradient Method for Stochastic Optimization" (2021), arXiv:2101.11075.
    """
    who = "scale_by_madgrad"
    check_non_negative(who, "learning_rate", learning_rate)
    check_in_range(who, "momentum", momentum, 0.0, 1.0, high_open=True)
    check_non_negative(who, "eps", eps)

    def init(params):
        return MadgradState(
            count=zero_count(),
            grad_sum_sq=zeros_like(params),
            s=zeros_like(params),
            x0=zeros_like(params),
        )

    def update(updates, state, params=None, **extra_args):
        del extra_args
        params = require_params(who, params)
        assert_same_structure(who, updates=updates, params=params)
        first = state.count == 0
        lr = value_at(learning_rate, state.count)
        lam = (lr + eps) * jnp.sqrt(jnp.asarray(state.count, jnp.float32) + 1.0)

        def leaf(g, big_g, s, x0, x):
            gw, xw = widen(g), widen(x)
            big_g_new = (widen(big_g) + lam * gw**2).astype(big_g.dtype)
            s_new = (widen(s) + lam * gw).astype(s.dtype)
            x0_new = jnp.where(first, x, x0)
            z = widen(x0_new) - widen(s_new) / (jnp.cbrt(widen(big_g_new)) + eps)
            x_new = (1 - momentum) * z + momentum * xw
            return (x_new - xw).astype(g.dtype), big_g_new, s_new, x0_new

        updates, big_g, s, x0 = map_split(
            leaf, 4, updates, state.grad_sum_sq, state.s, state.x0, params
        )
        new_state = MadgradState(count=safe_increment(state.count), grad_sum_sq=big_g, s=s, x0=x0)
        return updates, new_state

    def report(state):  # for `gradtx.metrics`: the learning rate the latest update used
        return {"learning_rate": last_used(learning_rate, state.count, who=who)}

    return register(GradientTransformation(init, update), "leaf", report=report)


@alias_errors(renamed={"weight_decay: rate": "weight_decay"})
def madgrad(
    learning_rate: ScalarOrSchedule,
    momentum: ArrayLike = 0.9,
    weight_decay: ScalarOrSchedule = 0.0,
    eps: ArrayLike = 1e-6,
) -> GradientTransformation:
    r"""MADGRAD: dual averaging with a cube-root adaptive denominator and momentum.

    .. math::  u_t = \mathrm{MADGRAD}(g_t + \lambda w_{t-1})

    `chain(weight_decay(weight_decay), scale_by_madgrad(learning_rate, momentum, eps))`: the
    decay is coupled (L2, added to the gradient), and the learning rate is inside the rule (see
    `scale_by_madgrad`). Matches `optax.contrib.madgrad`.

    Args:
      learning_rate: :math:`\eta` >= 0, a float or a schedule.
      momentum: in [0, 1).
      weight_decay: :math:`\lambda` >= 0, L2 regularisation added to the gradient.
      eps: >= 0, added to the learning rate and to the denominator.

    Returns:
      A `GradientTransformation` (it needs the params).

    Example:
      >>> import jax.numpy as jnp, gradtx
      >>> tx = gradtx.contrib.madgrad(1e-2)
      >>> params = {"w": jnp.ones(3)}
      >>> updates, state = tx.update({"w": jnp.ones(3)}, tx.init(params), params)

    Reference: Defazio & Jelassi, "Adaptivity without Compromise: A Momentumized, Adaptive, Dual
    Averaged Gradient Method for Stochastic Optimization" (2021), arXiv:2101.11075.
    """
    return chain(
        weight_decay_tx(weight_decay),
        scale_by_madgrad(learning_rate, momentum, eps),
    )


__all__ = ["MadgradState", "madgrad", "scale_by_madgrad"]
