"""RETURNN's forms of standard algorithms: its `NadamOptimizer` (TF1 contrib's Nadam) and its
`AMSGradOptimizer`, with RETURNN's defaults.

RETURNN's TF updater injects `epsilon=optimizer_epsilon` (1e-16 by default) into every optimizer
that takes an `epsilon`; the defaults here are the classes' own, so pass `eps=1e-16` to reproduce
a RETURNN config run. RETURNN's algorithms with names of their own (`normalized_sgd`,
`neural_optimizer1`, `grad_variance_scaled`) are at the top level.
"""

from .._base._checks import alias_errors, check_bool
from .._base._typing import ArrayLike, ScalarOrSchedule
from ..core._transformation import GradientTransformation, chain
from ..schedules import constant, inverse_sqrt
from ..state._quantize import MomentDType
from ..transforms._adam import scale_by_adam_eps_hat
from ..transforms._scaling import scale_by_learning_rate, scale_by_schedule


@alias_errors(name="returnn.nadam")
def nadam(
    learning_rate: ScalarOrSchedule = 1e-3,
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.999,
    eps: ArrayLike = 1e-8,
    *,
    mu_dtype: MomentDType | None = None,
    nu_dtype: MomentDType | None = None,
) -> GradientTransformation:
    r"""RETURNN's (TF1 contrib's) Nadam: Nesterov momentum in the ε-hat Adam step.

    .. math::  w_t = w_{t-1} - \eta_t \frac{\sqrt{1-\beta_2^t}}{1-\beta_1^t}
      \frac{\beta_1 m_t + (1-\beta_1) g_t}{\sqrt{v_t} + \epsilon}

    `chain(scale_by_adam_eps_hat(b1, b2, eps, nesterov=True), scale_by_learning_rate(lr))`.
    RETURNN's `NadamOptimizer`, which is neither Keras' Nadam (RETURNN issue #766) nor Dozat's
    form of `nadam` (whose first correction uses :math:`1-\beta_1^{t+1}`).

    Args:
      learning_rate: :math:`\eta_t` >= 0, a float or a schedule.
      b1: :math:`\beta_1` in [0, 1).
      b2: :math:`\beta_2` in [0, 1).
      eps: :math:`\epsilon` >= 0 (RETURNN's updater injects 1e-16).
      mu_dtype: dtype of the first moment (default: the params' dtype).
      nu_dtype: dtype of the second moment (default: the params' dtype).

    Returns:
      A `GradientTransformation`.

    Example:
      >>> import jax.numpy as jnp, numpy as np, gradtx
      >>> tx = gradtx.returnn.nadam(0.1)
      >>> state = tx.init({"w": jnp.zeros(2)})
      >>> updates, state = tx.update({"w": jnp.array([1.0, -1.0])}, state)
      >>> print(np.asarray(updates["w"]).round(4))  # 0.1 * (0.09 + 0.1) / 0.1
      [-0.19  0.19]

    Reference: Dozat, "Incorporating Nesterov Momentum into Adam" (2016), as implemented in
    `tf.contrib.opt.NadamOptimizer`; RETURNN `NadamOptimizer`.
    """
    return chain(
        scale_by_adam_eps_hat(b1, b2, eps, nesterov=True, mu_dtype=mu_dtype, nu_dtype=nu_dtype),
        scale_by_learning_rate(learning_rate),
    )


@alias_errors(name="returnn.amsgrad")
def amsgrad(
    learning_rate: ScalarOrSchedule = 1e-3,
    decay: bool = False,
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.99,
    eps: ArrayLike = 0.0,
) -> GradientTransformation:
    r"""RETURNN's AMSGrad: no bias correction, :math:`\beta_2 = 0.99`, optional :math:`1/\sqrt t`.

    .. math::

      \bar v_t = \max(\bar v_{t-1}, v_t), \qquad
      w_t = w_{t-1} - \frac{\eta_t}{\sqrt t^{\,[\text{decay}]}} \frac{m_t}{\sqrt{\bar v_t}
        + \epsilon}

    `chain(scale_by_adam_eps_hat(b1, b2, eps, amsgrad=True, bias_correction=False),
    scale_by_schedule(inverse_sqrt(1.0, 1) if decay else constant(1.0)),
    scale_by_learning_rate(learning_rate))`; the state layout is the same with and without
    `decay`. RETURNN's `AMSGradOptimizer(learning_rate=0.001, decay=False, beta1=0.9,
    beta2=0.99, epsilon=0.0)`. With :math:`\epsilon = 0`, entries whose gradients have all been
    0 get a zero step (RETURNN divides 0 by 0 there). RETURNN's class cannot be used from a
    config (it needs a `var_list` the updater never passes); this alias can.

    Args:
      learning_rate: :math:`\eta_t` >= 0, a float or a schedule.
      decay: divide the learning rate by :math:`\sqrt t` (t = 1 at the first step).
      b1: :math:`\beta_1` in [0, 1).
      b2: :math:`\beta_2` in [0, 1).
      eps: :math:`\epsilon` >= 0.

    Returns:
      A `GradientTransformation`.

    Example:
      >>> import jax.numpy as jnp, numpy as np, gradtx
      >>> tx = gradtx.returnn.amsgrad(0.1)
      >>> state = tx.init({"w": jnp.zeros(3)})
      >>> updates, state = tx.update({"w": jnp.array([1.0, -1.0, 0.0])}, state)
      >>> print(np.asarray(updates["w"]).round(4))  # 0.1 * 0.1 / sqrt(0.01)
      [-0.1  0.1 -0. ]

    Reference: Reddi, Kale & Kumar, "On the Convergence of Adam and Beyond" (ICLR 2018); RETURNN
    `AMSGradOptimizer` (`returnn/tf/updater.py`).
    """
    check_bool("returnn.amsgrad", "decay", decay)
    return chain(
        scale_by_adam_eps_hat(b1, b2, eps, amsgrad=True, bias_correction=False),
        scale_by_schedule(inverse_sqrt(1.0, 1) if decay else constant(1.0)),
        scale_by_learning_rate(learning_rate),
    )


__all__ = ["amsgrad", "nadam"]
