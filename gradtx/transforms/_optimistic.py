"""Optimistic gradients: extrapolate with the change of the gradient since the last step."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from .._base._checks import check_scalar
from .._base._numerics import widen
from .._base._recipe import recorded
from .._base._typing import ScalarOrSchedule, Updates
from ..core._transformation import GradientTransformation
from ._rule import rule, slot


class ScaleByOptimisticGradientState(NamedTuple):
    """State of `scale_by_optimistic_gradient`."""

    count: jax.Array  # type: ignore[assignment]  # int32, saturating; 0 before the first step
    prev_grad: Updates  # the last incoming update g_{t-1}


@recorded
def scale_by_optimistic_gradient(
    alpha: ScalarOrSchedule = 1.0, beta: ScalarOrSchedule = 1.0
) -> GradientTransformation:
    r"""Generalised optimistic gradient: the update plus a multiple of its last change.

    .. math::  u_t = (\alpha_t + \beta_t)\, g_t - \beta_t\, g_{t-1}, \qquad g_0 = g_1

    (at the first step there is no previous gradient and :math:`u_1 = \alpha_1 g_1`). `alpha`
    and `beta` may be schedules of the step count (an extension: Optax takes numbers only).
    Matches `optax.scale_by_optimistic_gradient`; Optax keeps a boolean "initial step" flag
    where gradtx keeps an int32 count.

    Args:
      alpha: :math:`\alpha`, the weight of the gradient (a number or a schedule).
      beta: :math:`\beta`, the optimism: the weight of the gradient's change (a number or a
        schedule; negative momentum for :math:`\beta > 0`).

    Returns:
      A `GradientTransformation` with state `ScaleByOptimisticGradientState(count, prev_grad)`.

    Reference: Mokhtari, Ozdaglar & Pattathil, "A Unified Analysis of Extra-gradient and
    Optimistic Gradient Methods for Saddle Point Problems: Proximal Point Approach"
    (AISTATS 2020); Daskalakis et al., "Training GANs with Optimism" (ICLR 2018).
    """
    return _optimistic(alpha=alpha, beta=beta)


@rule(
    "scale_by_optimistic_gradient",
    ScaleByOptimisticGradientState,
    slots={"prev_grad": slot(quantizable=False)},
    checks={"alpha": check_scalar, "beta": check_scalar},
    schedules=("alpha", "beta"),
)
def _optimistic(t, *, alpha, beta):
    first = t == 1

    def leaf(g, s):
        previous = jnp.where(first, g, widen(s.prev_grad))
        s.keep("prev_grad", g)
        return (alpha + beta) * g - beta * previous

    return leaf


__all__ = ["ScaleByOptimisticGradientState", "scale_by_optimistic_gradient"]
