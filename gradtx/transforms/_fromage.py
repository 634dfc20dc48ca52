"""Fromage's step: the learning rate with a shrinkage of the parameters that keeps their norm."""

from typing import Any

import jax
import jax.numpy as jnp

from .._base._checks import check_bool, check_non_negative, concrete
from .._base._introspect import register
from .._base._numerics import last_used
from .._base._recipe import recorded
from .._base._typing import ScalarOrSchedule
from ..core._transformation import GradientTransformation
from ..tree import assert_same_structure
from ._building_blocks import require_params, safe_increment, value_at, zero_count
from ._scaling import ScaleByScheduleState


def _factors(lr: Any) -> tuple[Any, Any]:
    """`(step, decay)` for a learning rate `lr`: with :math:`m = 1/\\sqrt{1 + lr^2}`, the step
    :math:`lr\\,m` and the coupled decay :math:`(1 - m)/(lr\\,m)` (0 where lr = 0), so that
    `step * (g + decay * w) = lr m g + (1 - m) w`. Python floats are computed as Optax does
    (in float64); anything else in JAX."""
    mult = 1 / (1 + lr**2) ** 0.5
    step = lr * mult
    if isinstance(lr, int | float):
        return step, (1 - mult) / step if step > 0 else 0.0
    positive = step > 0
    return step, jnp.where(positive, (1 - mult) / jnp.where(positive, step, 1.0), 0.0)


@recorded
def scale_by_learning_rate_and_shrink(
    learning_rate: ScalarOrSchedule, *, flip_sign: bool = True
) -> GradientTransformation:
    r"""Scale updates by a learning rate and shrink the parameters, so that a step orthogonal to
    them and as long as them keeps their norm (Fromage's step).

    .. math::

      m_t = \frac{1}{\sqrt{1 + \eta_t^2}}, \qquad
      u_t = -\left(\eta_t m_t\, g_t + (1 - m_t)\, w_{t-1}\right), \qquad
      w_t = w_{t-1} + u_t = m_t \left(w_{t-1} - \eta_t g_t\right)

    After `scale_by_trust_ratio` (:math:`\|g_t\| = \|w_{t-1}\|`) and for :math:`g_t \perp
    w_{t-1}`, :math:`\|w_t\| = \|w_{t-1}\|`. It is computed as Optax's `fromage` computes its
    last two steps: :math:`\eta_t m_t (g_t + \lambda_t w_{t-1})` with the coupled decay
    :math:`\lambda_t = (1 - m_t)/(\eta_t m_t)` (0 where :math:`\eta_t = 0`); for a Python float
    learning rate :math:`m` and :math:`\lambda` are computed in float64, as Optax does.

    Args:
      learning_rate: :math:`\eta` >= 0, a float or a schedule `count -> lr`.
      flip_sign: negate the step (gradient descent); False gives :math:`-u_t`.

    Returns:
      A `GradientTransformation` with state `ScaleByScheduleState(count)`; it needs `params`.
      `gradtx.metrics` reports its `learning_rate`.

    Reference: Bernstein et al., "On the distance between two neural networks and the
    stability of learning" (NeurIPS 2020), Algorithm 1 (Fromage).
    """
    who = "scale_by_learning_rate_and_shrink"
    check_non_negative(who, "learning_rate", learning_rate)
    check_bool(who, "flip_sign", flip_sign)
    sign = -1.0 if flip_sign else 1.0
    lr: Any = learning_rate
    arr = None if callable(lr) else concrete(lr)
    if arr is not None and arr.ndim == 0 and not isinstance(lr, int | float):
        lr = float(arr)  # a NumPy scalar: computed like a Python float
    constant = None if callable(lr) else _factors(lr)

    def init(params):
        del params
        return ScaleByScheduleState(count=zero_count())

    def update(updates, state, params=None, **extra_args):
        del extra_args
        params = require_params(who, params)
        assert_same_structure(who, updates=updates, params=params)
        step, decay = constant or _factors(value_at(lr, state.count))
        factor = sign * step

        def leaf(g, p):
            decayed = (g + decay * p).astype(g.dtype)
            return (factor * decayed).astype(g.dtype)

        updates = jax.tree.map(leaf, updates, params)
        return updates, ScaleByScheduleState(count=safe_increment(state.count))

    def report(state):  # for `gradtx.metrics`: the learning rate the latest update used
        return {"learning_rate": last_used(learning_rate, state.count, who=who)}

    return register(GradientTransformation(init, update), "leaf", report=report)


__all__ = ["scale_by_learning_rate_and_shrink"]
