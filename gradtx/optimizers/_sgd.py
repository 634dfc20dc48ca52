"""Stochastic gradient descent."""

from __future__ import annotations

from typing import Any

from .._checks import alias_errors
from .._core import GradientTransformation, chain, identity
from .._typing import ScalarOrSchedule
from ..transforms._momentum import trace
from ..transforms._scaling import scale_by_learning_rate


@alias_errors(renamed={"trace: decay": "momentum"})
def sgd(
    learning_rate: ScalarOrSchedule,
    momentum: ScalarOrSchedule | None = None,
    nesterov: bool = False,
    accumulator_dtype: Any = None,
) -> GradientTransformation:
    r"""Stochastic gradient descent, optionally with (Nesterov) momentum.

    .. math::  m_t = g_t + \mu m_{t-1}, \qquad w_t = w_{t-1} - \eta_t m_t

    `chain(trace(momentum, nesterov), scale_by_learning_rate(learning_rate))`, or just the
    learning-rate scaling when `momentum` is None. Matches `optax.sgd` and `torch.optim.SGD`
    (dampening 0).

    Args:
      learning_rate: a float >= 0 or a schedule `count -> lr`.
      momentum: :math:`\mu` in [0, 1] (float or schedule), or None for plain SGD.
      nesterov: Nesterov momentum (needs `momentum`).
      accumulator_dtype: dtype of the momentum buffer (default: the parameters' dtype).

    Example:
      >>> import jax.numpy as jnp, gradtx
      >>> tx = gradtx.sgd(0.1, momentum=0.9)
      >>> params = {"w": jnp.ones(3)}
      >>> state = tx.init(params)
      >>> updates, state = tx.update({"w": jnp.ones(3)}, state)
      >>> gradtx.apply_updates(params, updates)["w"]
      Array([0.9, 0.9, 0.9], dtype=float32)
    """
    if nesterov and momentum is None:
        raise ValueError("sgd: nesterov=True needs a momentum value, got momentum=None")
    return chain(
        trace(momentum, nesterov, accumulator_dtype) if momentum is not None else identity(),
        scale_by_learning_rate(learning_rate),
    )


__all__ = ["sgd"]
