"""Stochastic gradient descent."""

from .._base._checks import alias_errors
from .._base._typing import ArrayLike, ScalarOrSchedule
from ..core._transformation import GradientTransformation, chain, identity
from ..state._quantize import MomentDType
from ..transforms._decay import weight_decay_by_lr_ratio
from ..transforms._momentum import trace, trace_with_lr
from ..transforms._scaling import normalize, scale, scale_by_learning_rate
from ..tree._patterns import MaskOrFn


@alias_errors(renamed={"trace: decay": "momentum"})
def sgd(
    learning_rate: ScalarOrSchedule,
    momentum: ScalarOrSchedule | None = None,
    nesterov: bool = False,
    accumulator_dtype: MomentDType | None = None,
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


@alias_errors(
    renamed={"trace_with_lr: decay": "momentum", "weight_decay_by_lr_ratio: rate": "weight_decay"}
)
def sgdw(
    learning_rate: ScalarOrSchedule = 1e-3,
    momentum: ScalarOrSchedule = 0.9,
    weight_decay: ScalarOrSchedule = 1e-4,
    *,
    initial_learning_rate: ArrayLike | None = None,
    mask: MaskOrFn | None = None,
) -> GradientTransformation:
    r"""SGDW: momentum SGD with decoupled weight decay that follows the learning-rate schedule.

    .. math::

      v_t = \mu v_{t-1} + \eta_t g_t, \qquad
      w_t = w_{t-1} - v_t - \frac{\eta_t}{\eta_0} \lambda_t w_{t-1}

    `chain(trace_with_lr(learning_rate, momentum, flip_sign=False),
    weight_decay_by_lr_ratio(weight_decay, learning_rate), scale(-1))`. nnabla's `SgdW(lr=1e-3,
    momentum=0.9, wd=1e-4)`, with :math:`\eta_0` the learning rate given to the solver. `update`
    needs `params`.

    Args:
      learning_rate: :math:`\eta_t` >= 0, a float or a schedule.
      momentum: :math:`\mu` in [0, 1], a float or a schedule.
      weight_decay: :math:`\lambda` >= 0, a float or a schedule.
      initial_learning_rate: :math:`\eta_0` > 0 (default: the learning rate, or the schedule at
        step 0); needed when the learning rate is injected or set between steps.
      mask: which parameters decay (boolean tree, callable or glob pattern(s)); None: all.

    Returns:
      A `GradientTransformation`.

    Example:
      >>> import jax.numpy as jnp, gradtx
      >>> tx = gradtx.sgdw(0.1, momentum=0.9, weight_decay=0.01)
      >>> params = {"w": jnp.array([1.0, -2.0])}
      >>> state = tx.init(params)
      >>> updates, state = tx.update({"w": jnp.array([1.0, 1.0])}, state, params)
      >>> gradtx.apply_updates(params, updates)["w"]
      Array([ 0.89, -2.08], dtype=float32)

    Reference: Loshchilov & Hutter, "Decoupled Weight Decay Regularization" (ICLR 2019); nnabla
    `SgdW`.
    """
    return chain(
        trace_with_lr(learning_rate, momentum, flip_sign=False),
        weight_decay_by_lr_ratio(
            weight_decay, learning_rate, initial_learning_rate=initial_learning_rate, mask=mask
        ),
        scale(-1.0),
    )


@alias_errors
def normalized_sgd(learning_rate: ScalarOrSchedule) -> GradientTransformation:
    r"""SGD on gradients L2-normalised per parameter tensor (RETURNN's `NormalizedSGD`).

    .. math::  w_t = w_{t-1} - \eta_t \frac{g_t}{\sqrt{\max(\|g_t\|^2, 10^{-12})}}

    `chain(normalize(), scale_by_learning_rate(learning_rate))`: every tensor moves by
    :math:`\eta_t` in norm, whatever the size of its gradient.

    Args:
      learning_rate: :math:`\eta_t` >= 0, a float or a schedule.

    Returns:
      A `GradientTransformation`.

    Example:
      >>> import jax.numpy as jnp, numpy as np, gradtx
      >>> tx = gradtx.normalized_sgd(0.5)
      >>> params = {"w": jnp.array([1.0, 1.0])}
      >>> state = tx.init(params)
      >>> updates, state = tx.update({"w": jnp.array([30.0, -40.0])}, state)
      >>> print(np.asarray(gradtx.apply_updates(params, updates)["w"]).round(4))
      [0.7 1.4]

    Reference: RETURNN `NormalizedSGD` (`returnn/tf/updater.py`).
    """
    return chain(normalize(), scale_by_learning_rate(learning_rate))


__all__ = ["normalized_sgd", "sgd", "sgdw"]
