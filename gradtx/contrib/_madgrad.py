"""MADGRAD: momentumised, adaptive dual averaging."""

from typing import NamedTuple

import jax
import jax.numpy as jnp

from .._base._checks import alias_errors
from .._base._introspect import register
from .._base._numerics import last_used, widen
from .._base._recipe import recorded
from .._base._typing import ArrayLike, Params, ScalarOrSchedule, Updates
from ..core._transformation import GradientTransformation, chain
from ..transforms._decay import weight_decay as weight_decay_tx
from ..transforms._rule import decay, non_negative, rule, slot


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
    tx = _madgrad(learning_rate=learning_rate, momentum=momentum, eps=eps)

    def report(state):  # for `gradtx.metrics`: the learning rate the latest update used
        return {"learning_rate": last_used(learning_rate, state.count, who="scale_by_madgrad")}

    return register(tx, "leaf", report=report)


@rule(
    "scale_by_madgrad",
    MadgradState,
    # sums and a copy of the params, in the params' dtypes (no dtype keyword governs them)
    slots={"grad_sum_sq": slot(), "s": slot(), "x0": slot()},
    checks={"learning_rate": non_negative, "momentum": decay, "eps": non_negative},
    schedules=("learning_rate",),
    uses_params=True,
)
def _madgrad(t, *, learning_rate, momentum, eps):
    lam = (learning_rate + eps) * jnp.sqrt(jnp.asarray(t, jnp.float32))

    def leaf(g, s):
        x = s.param
        big_g = s.keep("grad_sum_sq", widen(s.grad_sum_sq) + lam * g**2)
        total = s.keep("s", widen(s.s) + lam * g)
        x0 = s.keep("x0", jnp.where(t == 1, x, s.x0))
        z = x0 - total / (jnp.cbrt(big_g) + eps)
        return (1 - momentum) * z + momentum * x - x

    return leaf


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
