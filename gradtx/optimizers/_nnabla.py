"""nnabla's momentum-SGD solvers whose update rules differ from the Optax-style aliases:
`Momentum` / `Nesterov`, `SgdW`, `Lars` and `RMSpropGraves` (the learning rate inside the
momentum buffer). The Adam-family ones are in `_nnabla_adam.py`.

Each alias is a `chain` of public primitives with nnabla's defaults; its docstring gives nnabla's
rule and, where nnabla has a known bug, how and why this differs. nnabla's `Sgd`, `Adagrad`,
`Adadelta`, `RMSprop`, `AMSGRAD` (default) and `Lion` already match an Optax-style alias with the
settings given in that alias's docstring (proven in tests/optimizers/test_nnabla_aliases.py);
`AdaBound` / `AMSBound` are `adabound` / `amsbound`, and nnabla's missing `Eve` is `eve`.
"""

from __future__ import annotations

from .._checks import alias_errors
from .._core import GradientTransformation, chain
from .._masking import MaskOrFn
from .._typing import ArrayLike, ScalarOrSchedule
from ..transforms._adaptive import scale_by_stddev
from ..transforms._momentum import trace
from ..transforms._nnabla import (
    scale_by_lars_trust_ratio,
    trace_with_lr,
    weight_decay_by_lr_ratio,
)
from ..transforms._scaling import scale, scale_by_learning_rate


@alias_errors(renamed={"trace_with_lr: decay": "momentum"})
def momentum_nnabla(
    learning_rate: ScalarOrSchedule = 1e-3,
    momentum: ScalarOrSchedule = 0.9,
    *,
    nesterov: bool = False,
) -> GradientTransformation:
    r"""SGD with momentum in nnabla's form: the learning rate sits inside the momentum buffer.

    .. math::

      v_t = \mu v_{t-1} + \eta_t g_t, \qquad
      w_t = w_{t-1} - \begin{cases} \eta_t g_t + \mu v_t & \text{Nesterov} \\ v_t \end{cases}

    `trace_with_lr(learning_rate, momentum, nesterov=nesterov)`. nnabla's `Momentum(lr=1e-3,
    momentum=0.9)` and, with `nesterov=True`, `Nesterov`. With a constant learning rate it equals
    `sgd(learning_rate, momentum, nesterov)`; under a schedule `sgd` rescales the accumulated
    momentum by the new learning rate at once, this applies it to new gradients only.

    Args:
      learning_rate: :math:`\eta_t` >= 0, a float or a schedule.
      momentum: :math:`\mu` in [0, 1], a float or a schedule.
      nesterov: nnabla's `Nesterov`.

    Returns:
      A `GradientTransformation`.

    Example:
      >>> import jax.numpy as jnp, gradtx
      >>> tx = gradtx.momentum_nnabla(lambda t: 0.1 / (1.0 + t), momentum=0.5)
      >>> params = {"w": jnp.zeros(1)}
      >>> state = tx.init(params)
      >>> for _ in range(2):
      ...     updates, state = tx.update({"w": jnp.ones(1)}, state)
      ...     params = gradtx.apply_updates(params, updates)
      >>> params["w"]  # -(0.1) - (0.5 * 0.1 + 0.05); sgd would give -(0.1) - 0.05 * 1.5
      Array([-0.2], dtype=float32)

    Reference: nnabla `Momentum`, `Nesterov`; Polyak (1964); Sutskever et al. (ICML 2013).
    """
    return chain(trace_with_lr(learning_rate, momentum, nesterov=nesterov))


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


@alias_errors(renamed={"trace: decay": "momentum"})
def rmsprop_graves(
    learning_rate: ScalarOrSchedule = 1e-4,
    decay: ArrayLike = 0.95,
    momentum: ScalarOrSchedule = 0.9,
    eps: ArrayLike = 1e-4,
) -> GradientTransformation:
    r"""Graves' RMSprop: centred second moment, the learning rate inside the momentum.

    .. math::

      n_t = \rho n_{t-1} + (1-\rho) g_t^2, \qquad \bar g_t = \rho \bar g_{t-1} + (1-\rho) g_t,
      \\
      d_t = \mu d_{t-1} - \eta_t \frac{g_t}{\sqrt{n_t - \bar g_t^2 + \epsilon}}, \qquad
      w_t = w_{t-1} + d_t

    `chain(scale_by_stddev(decay, eps), scale_by_learning_rate(learning_rate), trace(momentum))`
    (also `rmsprop(lr, decay, eps, centered=True, momentum=momentum)`). nnabla's
    `RMSpropGraves(lr=1e-4, decay=0.95, momentum=0.9, eps=1e-4)`.

    Args:
      learning_rate: :math:`\eta_t` >= 0, a float or a schedule.
      decay: :math:`\rho` in [0, 1).
      momentum: :math:`\mu` in [0, 1], a float or a schedule.
      eps: :math:`\epsilon` >= 0, inside the square root.

    Returns:
      A `GradientTransformation`.

    Example:
      >>> import jax.numpy as jnp, numpy as np, gradtx
      >>> tx = gradtx.rmsprop_graves(0.01)
      >>> state = tx.init({"w": jnp.zeros(2)})
      >>> updates, state = tx.update({"w": jnp.array([1.0, -1.0])}, state)
      >>> print(np.asarray(updates["w"]).round(4))
      [-0.0458  0.0458]

    Reference: Graves, "Generating Sequences With Recurrent Neural Networks" (2013), eq. 38-40;
    nnabla `RMSpropGraves`.
    """
    return chain(
        scale_by_stddev(decay, eps),
        scale_by_learning_rate(learning_rate),
        trace(momentum),
    )


@alias_errors(renamed={"trace_with_lr: decay": "momentum"})
def lars_nnabla(
    learning_rate: ScalarOrSchedule = 1e-3,
    momentum: ScalarOrSchedule = 0.9,
    coefficient: ArrayLike = 1e-3,
    eps: ArrayLike = 1e-6,
    weight_decay: ScalarOrSchedule = 0.0,
) -> GradientTransformation:
    r"""LARS in nnabla's form: trust ratio over :math:`\|g\| + \lambda\|w\|`, lr in the momentum.

    Per parameter tensor:

    .. math::

      r = \begin{cases} 1 & \|w\| < \epsilon \\
        c\|w\| / (\|g\| + \lambda\|w\|) & \text{otherwise} \end{cases}, \qquad
      v_t = \mu v_{t-1} + \eta_t\, r\, (g_t + \lambda w_{t-1}), \qquad w_t = w_{t-1} - v_t

    (the denominator gets :math:`+\epsilon` when it is below :math:`\epsilon`).
    `chain(scale_by_lars_trust_ratio(weight_decay, coefficient, eps), trace_with_lr(learning_rate,
    momentum))`. nnabla's `Lars(lr=1e-3, momentum=0.9, coefficient=1e-3, eps=1e-6)`; nnabla
    resets its decay rate to 0 after each update unless `weight_decay()` is called again, so the
    rate here is applied at every step (a schedule varies it). `lars` is Optax's form. `update`
    needs `params`.

    Args:
      learning_rate: :math:`\eta_t` >= 0, a float or a schedule.
      momentum: :math:`\mu` in [0, 1], a float or a schedule.
      coefficient: the trust coefficient :math:`c` > 0.
      eps: :math:`\epsilon` > 0.
      weight_decay: :math:`\lambda` >= 0, a float or a schedule.

    Returns:
      A `GradientTransformation`.

    Example:
      >>> import jax.numpy as jnp, gradtx
      >>> tx = gradtx.lars_nnabla(1.0, coefficient=0.1)
      >>> params = {"w": jnp.array([3.0, -4.0])}
      >>> state = tx.init(params)
      >>> updates, state = tx.update({"w": jnp.array([0.3, -0.4])}, state, params)
      >>> gradtx.apply_updates(params, updates)["w"]  # r = 0.1 * 5 / 0.5
      Array([ 2.7, -3.6], dtype=float32)

    Reference: You, Gitman & Ginsburg (arXiv:1708.03888, 2017); nnabla `Lars`.
    """
    return chain(
        scale_by_lars_trust_ratio(weight_decay, coefficient, eps),
        trace_with_lr(learning_rate, momentum),
    )


__all__ = [
    "lars_nnabla",
    "momentum_nnabla",
    "rmsprop_graves",
    "sgdw",
]
