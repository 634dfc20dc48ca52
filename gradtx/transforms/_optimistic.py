"""Optimistic gradients: extrapolate with the change of the gradient since the last step."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from .._base._checks import check_scalar
from .._base._numerics import safe_increment, value_at, widen, zero_count
from .._base._typing import ScalarOrSchedule, Updates
from ..core._transformation import GradientTransformation
from ..tree import assert_same_structure, map_split, zeros_like


class ScaleByOptimisticGradientState(NamedTuple):
    """State of `scale_by_optimistic_gradient`."""

    count: jax.Array  # type: ignore[assignment]  # int32, saturating; 0 before the first step
    prev_grad: Updates  # the last incoming update g_{t-1}


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
    who = "scale_by_optimistic_gradient"
    check_scalar(who, "alpha", alpha)
    check_scalar(who, "beta", beta)

    def init(params):
        return ScaleByOptimisticGradientState(count=zero_count(), prev_grad=zeros_like(params))

    def update(updates, state, params=None, **extra_args):
        del params, extra_args
        assert_same_structure(who, updates=updates, **{"state.prev_grad": state.prev_grad})
        a = value_at(alpha, state.count, who=who, name="alpha")
        b = value_at(beta, state.count, who=who, name="beta")
        first = state.count == 0

        def leaf(g, g_prev):
            gw = widen(g)
            previous = jnp.where(first, gw, widen(g_prev))
            u = (a + b) * gw - b * previous
            return u.astype(g.dtype), g.astype(g_prev.dtype)

        updates, prev = map_split(leaf, 2, updates, state.prev_grad)
        return updates, ScaleByOptimisticGradientState(
            count=safe_increment(state.count), prev_grad=prev
        )

    return GradientTransformation(init, update)


__all__ = ["ScaleByOptimisticGradientState", "scale_by_optimistic_gradient"]
