"""Polyak's step size: the update scaled by the suboptimality gap over the squared gradient norm."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from .._base._checks import check_non_negative, check_one_of, check_scalar
from .._base._recipe import recorded
from .._base._typing import ArrayLike
from ..core._transformation import GradientTransformation
from ..tree import norm
from ._building_blocks import loss_value, stateless_with_extra_args, widen

POLYAK_VARIANTS = ("sps", "sps+")

# Optax's threshold below which the squared norm counts as zero: float64's machine epsilon.
_TINY = float(np.finfo(np.float64).eps)


@recorded
def scale_by_polyak(
    f_min: ArrayLike = 0.0,
    max_learning_rate: ArrayLike = 1.0,
    eps: ArrayLike = 0.0,
    variant: str = "sps",
) -> GradientTransformation:
    r"""Scale the updates by the (stochastic) Polyak step size; the loss comes in as `value=`.

    .. math::

      \gamma_t = \min\left(\frac{f(w_t) - f^\star}{\|g_t\|^2 + \epsilon},\ \gamma_{max}\right),
      \qquad u_t = \gamma_t\, g_t

    With `variant="sps+"` the gap is :math:`\max(f(w_t) - f^\star, 0)`. Where
    :math:`\|g_t\|^2 + \epsilon \leq 2.2 \times 10^{-16}` the step is 0. The norm is global over
    the tree, in float32. Call `update(updates, state, params, value=loss)`. Matches
    `optax.scale_by_polyak`.

    Args:
      f_min: :math:`f^\star`, a lower bound on the objective (0 for an interpolating model).
      max_learning_rate: :math:`\gamma_{max}` >= 0, the largest step.
      eps: :math:`\epsilon` >= 0 added to the squared norm.
      variant: "sps" or "sps+".

    `f_min`, `max_learning_rate` and `eps` are numbers: a schedule is refused at construction
    (Optax takes none either, and the state, Optax's `EmptyState`, has no step count to call one
    with; `polyak_sgd`'s `scaling` may be a schedule).

    Returns:
      A stateless `GradientTransformation` (state `EmptyState`); `update` needs `value`.

    Reference: Loizou et al., "Stochastic Polyak Step-size for SGD: An Adaptive Learning Rate
    for Fast Convergence" (AISTATS 2021); Garrigos et al., "Function value learning: Adaptive
    learning rates based on the Polyak stepsize and function splitting in ERM" (2023).
    """
    who = "scale_by_polyak"
    for name, value in (("f_min", f_min), ("max_learning_rate", max_learning_rate), ("eps", eps)):
        if callable(value):  # no schedule here: the transformation is stateless (no count)
            raise TypeError(
                f"{who}: {name} must be a number, got the callable {value!r}; it takes no "
                "schedule (nor does Optax's). To vary the step over training pass the schedule "
                "as polyak_sgd's `scaling`, or chain scale_by_learning_rate(schedule) before "
                "scale_by_polyak"
            )
    check_scalar(who, "f_min", f_min)
    check_non_negative(who, "max_learning_rate", max_learning_rate)
    check_non_negative(who, "eps", eps)
    check_one_of(who, "variant", variant, POLYAK_VARIANTS)

    def polyak_step(updates, params, extra_args):
        del params
        sq_norm = norm(updates, squared=True)
        gap = (loss_value(who, extra_args) - f_min).astype(sq_norm.dtype)
        if variant == "sps+":
            gap = jnp.maximum(gap, 0.0)
        denominator = sq_norm + eps
        step = jnp.where(
            denominator <= _TINY, 0.0, jnp.minimum(gap / denominator, max_learning_rate)
        )
        return jax.tree.map(lambda g: (step * widen(g)).astype(g.dtype), updates)

    return stateless_with_extra_args(polyak_step)


__all__ = ["POLYAK_VARIANTS", "scale_by_polyak"]
