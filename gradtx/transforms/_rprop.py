"""Rprop: per-parameter step sizes adapted to the sign agreement of successive gradients."""

from typing import Any, NamedTuple

import jax.numpy as jnp

from .._base._checks import (
    HyperparameterError,
    check_in_range,
    check_positive,
    check_scalar,
    concrete,
)
from .._base._numerics import widen
from .._base._recipe import recorded
from .._base._typing import ArrayLike, Updates
from ..core._transformation import GradientTransformation
from ._rule import rule, slot


class ScaleByRpropState(NamedTuple):
    """State of `scale_by_rprop`."""

    step_sizes: Updates  # the per-parameter step sizes
    prev_updates: Updates  # the last update (0 where the gradient's sign flipped)


@recorded
def scale_by_rprop(
    learning_rate: ArrayLike,
    eta_minus: ArrayLike = 0.5,
    eta_plus: ArrayLike = 1.2,
    min_step_size: ArrayLike = 1e-6,
    max_step_size: ArrayLike = 50.0,
) -> GradientTransformation:
    r"""Rprop (iRprop-): a step of per-parameter size in the direction of the gradient's sign.

    With :math:`s = g_t\, u_{t-1}` (the sign agreement with the last update):

    .. math::

      \Delta_t = \begin{cases}
        \mathrm{clip}(\eta^+ \Delta_{t-1}, \Delta_{min}, \Delta_{max}) & s > 0 \\
        \mathrm{clip}(\eta^- \Delta_{t-1}, \Delta_{min}, \Delta_{max}) & s < 0 \\
        \Delta_{t-1} & s = 0
      \end{cases}, \qquad
      u_t = \begin{cases} 0 & s < 0 \\ \Delta_t\, \mathrm{sign}(g_t) & \text{otherwise}
      \end{cases}

    with :math:`\Delta_0 = ` `learning_rate` and :math:`u_0 = 0`. A sign flip shrinks the step
    and skips one move; the zero update then starts the next comparison afresh. The update
    ascends (`rprop` flips the sign).

    Differs from `optax.scale_by_rprop` (0.2.8), which returns :math:`u_{t-1}` instead of
    :math:`u_t` (its first update is zero, each later one is a step late: google-deepmind/optax
    PR #1725). The state evolves exactly as Optax's; the update is the one the state holds, as
    in `torch.optim.Rprop` and the paper.

    Args:
      learning_rate: :math:`\Delta_0` > 0, the initial step size.
      eta_minus: :math:`\eta^-` in (0, 1), the factor applied to the step after a sign flip.
      eta_plus: :math:`\eta^+` > 1, the factor applied when the sign is kept (as
        `torch.optim.Rprop`: :math:`0 < \eta^- < 1 < \eta^+`).
      min_step_size: :math:`\Delta_{min}` > 0.
      max_step_size: :math:`\Delta_{max}` >= `min_step_size`.

    Returns:
      A `GradientTransformation` with state `ScaleByRpropState(step_sizes, prev_updates)`.

    Reference: Riedmiller & Braun, "A direct adaptive method for faster backpropagation
    learning: the RPROP algorithm" (ICNN 1993); Igel & Hüsken, "Empirical evaluation of the
    improved Rprop learning algorithms" (Neurocomputing 2003).
    """
    who = "scale_by_rprop"
    if callable(learning_rate):
        raise ValueError(
            f"{who}: learning_rate is the initial step size and must be a number, not a schedule"
        )
    tx = _rprop(
        learning_rate=learning_rate,
        eta_minus=eta_minus,
        eta_plus=eta_plus,
        min_step_size=min_step_size,
        max_step_size=max_step_size,
    )
    low, high = concrete(min_step_size), concrete(max_step_size)
    if low is not None and high is not None and not bool((high >= low).all()):
        raise HyperparameterError(
            who, "max_step_size", max_step_size, f">= min_step_size ({float(low)})"
        )
    return tx


def _shrink(who: str, name: str, value: Any) -> None:
    # as torch.optim.Rprop: a sign flip shrinks the step, an agreement grows it
    check_in_range(who, name, value, 0.0, 1.0, low_open=True, high_open=True)


def _grow(who: str, name: str, value: Any) -> None:
    check_scalar(who, name, value)
    grow = concrete(value)
    if grow is not None and not bool((grow > 1).all()):
        raise HyperparameterError(who, name, value, "> 1")


@rule(
    "scale_by_rprop",
    ScaleByRpropState,
    slots={"step_sizes": slot("learning_rate"), "prev_updates": slot()},
    checks={
        "learning_rate": check_positive,
        "eta_minus": _shrink,
        "eta_plus": _grow,
        "min_step_size": check_positive,
        "max_step_size": check_positive,
    },
)
def _rprop(t, *, learning_rate, eta_minus, eta_plus, min_step_size, max_step_size):
    def leaf(g, s):
        agreement = g * widen(s.prev_updates)
        factor = jnp.where(agreement > 0, eta_plus, eta_minus)
        adapted = jnp.clip(widen(s.step_sizes) * factor, min_step_size, max_step_size)
        step = s.keep("step_sizes", jnp.where(agreement == 0, widen(s.step_sizes), adapted))
        u = jnp.where(agreement < 0, 0.0, step * jnp.sign(g))
        s.keep("prev_updates", u)
        return u

    return leaf


__all__ = ["ScaleByRpropState", "scale_by_rprop"]
