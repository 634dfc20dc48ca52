"""Adam and its Nesterov and decoupled-decay forms: Adam, AdamW, NAdam, NAdamW.

Each is a `chain` of `scale_by_adam`, optionally decoupled weight decay (after the
preconditioner, so it is not rescaled by it) and the learning rate. Argument names, order and
defaults are Optax 0.2.8's; the keyword-only `nu_dtype` that Optax lacks is an addition. The other
Adam variants are in `_adam_variants.py`.
"""

import inspect

from .._base._checks import alias_errors
from .._base._typing import ArrayLike, ScalarOrSchedule
from ..core._transformation import GradientTransformation, chain
from ..state._quantize import MomentDType
from ..transforms import _decay
from ..transforms._adam import scale_by_adam
from ..transforms._scaling import scale_by_learning_rate
from ..tree._patterns import MaskOrFn


@alias_errors
def adam(
    learning_rate: ScalarOrSchedule,
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.999,
    eps: ArrayLike = 1e-8,
    eps_root: ArrayLike = 0.0,
    mu_dtype: MomentDType | None = None,
    *,
    nesterov: bool = False,
    nu_dtype: MomentDType | None = None,
) -> GradientTransformation:
    r"""Adam: steps by the ratio of bias-corrected first and second gradient moments.

    .. math::

      m_t = \beta_1 m_{t-1} + (1-\beta_1) g_t, \qquad v_t = \beta_2 v_{t-1} + (1-\beta_2) g_t^2,
      \\
      w_t = w_{t-1} - \eta_t \frac{m_t/(1-\beta_1^t)}{\sqrt{v_t/(1-\beta_2^t) + \epsilon_{root}}
        + \epsilon}

    `chain(scale_by_adam(b1, b2, eps, eps_root, mu_dtype=, nu_dtype=, nesterov=),
    scale_by_learning_rate(learning_rate))`. Matches `optax.adam` and `torch.optim.Adam`. nnabla's
    `Adam` and RETURNN's TF Adam put :math:`\epsilon` before the bias correction
    (:math:`\epsilon\sqrt{1-\beta_2^t}` here), and RETURNN's TF updater injects
    :math:`\epsilon = 10^{-16}`; pass `eps` accordingly to approach them.

    Args:
      learning_rate: :math:`\eta` >= 0, a float or a schedule `count -> lr`.
      b1: :math:`\beta_1` in [0, 1), decay of the first moment.
      b2: :math:`\beta_2` in [0, 1), decay of the second moment.
      eps: :math:`\epsilon` >= 0 added to the denominator outside the square root.
      eps_root: :math:`\epsilon_{root}` >= 0 added inside the square root.
      mu_dtype: dtype of the first moment (default: the params' dtype).
      nesterov: use Nesterov momentum (that is `nadam`).
      nu_dtype: dtype of the second moment (default: the params' dtype).

    Returns:
      A `GradientTransformation`.

    Example:
      >>> import jax.numpy as jnp, numpy as np, gradtx
      >>> tx = gradtx.adam(0.1)
      >>> params = {"w": jnp.ones(3)}
      >>> state = tx.init(params)
      >>> updates, state = tx.update({"w": jnp.array([1.0, -2.0, 0.0])}, state)
      >>> print(np.asarray(gradtx.apply_updates(params, updates)["w"]).round(4))
      [0.9 1.1 1. ]

    Reference: Kingma & Ba, "Adam: A Method for Stochastic Optimization" (ICLR 2015).
    """
    return chain(
        scale_by_adam(
            b1, b2, eps, eps_root, mu_dtype=mu_dtype, nu_dtype=nu_dtype, nesterov=nesterov
        ),
        scale_by_learning_rate(learning_rate),
    )


@alias_errors(renamed={"weight_decay: rate": "weight_decay"})
def adamw(
    learning_rate: ScalarOrSchedule,
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.999,
    eps: ArrayLike = 1e-8,
    eps_root: ArrayLike = 0.0,
    mu_dtype: MomentDType | None = None,
    weight_decay: ScalarOrSchedule = 1e-4,
    mask: MaskOrFn | None = None,
    *,
    nesterov: bool = False,
    nu_dtype: MomentDType | None = None,
) -> GradientTransformation:
    r"""AdamW: Adam with decoupled weight decay.

    .. math::

      w_t = w_{t-1} - \eta_t \left( \frac{\hat m_t}{\sqrt{\hat v_t + \epsilon_{root}} + \epsilon}
        + \lambda_t w_{t-1} \right)

    with Adam's :math:`\hat m_t, \hat v_t` (see `adam`). `chain(scale_by_adam(...),
    weight_decay(weight_decay, mask), scale_by_learning_rate(learning_rate))`: the decay is added
    after the preconditioner, so it is not rescaled by it, and it is multiplied by the learning
    rate as in Optax and `torch.optim.AdamW`. nnabla's `AdamW(wd=lam)` scales it by
    :math:`\eta_t/\eta_0` (the schedule only, Loshchilov & Hutter's form): pass
    `weight_decay=lam / eta0`, with :math:`\eta_0` the initial learning rate, to get that.

    Args:
      learning_rate: :math:`\eta` >= 0, a float or a schedule.
      b1: :math:`\beta_1` in [0, 1).
      b2: :math:`\beta_2` in [0, 1).
      eps: :math:`\epsilon` >= 0, outside the square root.
      eps_root: :math:`\epsilon_{root}` >= 0, inside the square root.
      mu_dtype: dtype of the first moment (default: the params' dtype).
      weight_decay: :math:`\lambda` >= 0, a float or a schedule.
      mask: which parameters decay: a boolean tree (or prefix), a callable `params -> tree`, or
        glob pattern(s) such as `"!**/bias"`; None decays all.
      nesterov: use Nesterov momentum (that is `nadamw`).
      nu_dtype: dtype of the second moment (default: the params' dtype).

    Returns:
      A `GradientTransformation`.

    Example:
      >>> import jax.numpy as jnp, numpy as np, gradtx
      >>> tx = gradtx.adamw(0.1, weight_decay=0.5, mask="!bias")
      >>> params = {"w": jnp.ones(2), "bias": jnp.ones(2)}
      >>> state = tx.init(params)
      >>> updates, state = tx.update({"w": jnp.zeros(2), "bias": jnp.zeros(2)}, state, params)
      >>> gradtx.apply_updates(params, updates)["w"]
      Array([0.95, 0.95], dtype=float32)

    Reference: Loshchilov & Hutter, "Decoupled Weight Decay Regularization" (ICLR 2019).
    """
    return chain(
        scale_by_adam(
            b1, b2, eps, eps_root, mu_dtype=mu_dtype, nu_dtype=nu_dtype, nesterov=nesterov
        ),
        _decay.weight_decay(weight_decay, mask),
        scale_by_learning_rate(learning_rate),
    )


@alias_errors
def nadam(
    learning_rate: ScalarOrSchedule,
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.999,
    eps: ArrayLike = 1e-8,
    eps_root: ArrayLike = 0.0,
    mu_dtype: MomentDType | None = None,
    *,
    nesterov: bool = True,
    nu_dtype: MomentDType | None = None,
) -> GradientTransformation:
    r"""NAdam: Adam with Nesterov momentum; `adam(..., nesterov=True)`.

    .. math::

      \hat m_t = \frac{\beta_1 m_t}{1-\beta_1^{t+1}} + \frac{(1-\beta_1) g_t}{1-\beta_1^t},
      \qquad w_t = w_{t-1} - \eta_t \frac{\hat m_t}{\sqrt{\hat v_t + \epsilon_{root}} + \epsilon}

    Matches `optax.nadam`. RETURNN's TF `NadamOptimizer` uses
    :math:`(\beta_1 m_t + (1-\beta_1) g_t)/(1-\beta_1^t)` instead (and is not Keras' Nadam).

    Args:
      learning_rate: :math:`\eta` >= 0, a float or a schedule.
      b1: :math:`\beta_1` in [0, 1).
      b2: :math:`\beta_2` in [0, 1).
      eps: :math:`\epsilon` >= 0, outside the square root.
      eps_root: :math:`\epsilon_{root}` >= 0, inside the square root.
      mu_dtype: dtype of the first moment (default: the params' dtype).
      nesterov: True (False gives `adam`).
      nu_dtype: dtype of the second moment (default: the params' dtype).

    Returns:
      A `GradientTransformation`.

    Example:
      >>> import jax.numpy as jnp, numpy as np, gradtx
      >>> tx = gradtx.nadam(0.1)
      >>> state = tx.init({"w": jnp.zeros(2)})
      >>> updates, state = tx.update({"w": jnp.array([1.0, -1.0])}, state)
      >>> print(np.asarray(updates["w"]).round(4))  # the first step is larger than Adam's 0.1
      [-0.1474  0.1474]

    Reference: Dozat, "Incorporating Nesterov Momentum into Adam" (ICLR 2016 workshop).
    """
    # `adam` with another default (Optax: `functools.partial(adam, nesterov=True)`); the
    # undecorated `adam`, so that its errors name `nadam` alone
    return _adam(
        learning_rate, b1, b2, eps, eps_root, mu_dtype, nesterov=nesterov, nu_dtype=nu_dtype
    )


@alias_errors(renamed={"weight_decay: rate": "weight_decay"})
def nadamw(
    learning_rate: ScalarOrSchedule,
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.999,
    eps: ArrayLike = 1e-8,
    eps_root: ArrayLike = 0.0,
    mu_dtype: MomentDType | None = None,
    weight_decay: ScalarOrSchedule = 1e-4,
    mask: MaskOrFn | None = None,
    *,
    nesterov: bool = True,
    nu_dtype: MomentDType | None = None,
) -> GradientTransformation:
    r"""NAdamW: NAdam with decoupled weight decay; `adamw(..., nesterov=True)`.

    .. math::

      w_t = w_{t-1} - \eta_t \left( \frac{\hat m_t}{\sqrt{\hat v_t + \epsilon_{root}} + \epsilon}
        + \lambda_t w_{t-1} \right)

    with NAdam's :math:`\hat m_t` (see `nadam`). Matches `optax.nadamw`.

    Args:
      learning_rate: :math:`\eta` >= 0, a float or a schedule.
      b1: :math:`\beta_1` in [0, 1).
      b2: :math:`\beta_2` in [0, 1).
      eps: :math:`\epsilon` >= 0, outside the square root.
      eps_root: :math:`\epsilon_{root}` >= 0, inside the square root.
      mu_dtype: dtype of the first moment (default: the params' dtype).
      weight_decay: :math:`\lambda` >= 0, a float or a schedule.
      mask: which parameters decay (see `adamw`); None decays all.
      nesterov: True (False gives `adamw`).
      nu_dtype: dtype of the second moment (default: the params' dtype).

    Returns:
      A `GradientTransformation`.

    Example:
      >>> import jax.numpy as jnp, numpy as np, gradtx
      >>> tx = gradtx.nadamw(0.1, weight_decay=0.5)
      >>> params = {"w": jnp.ones(2)}
      >>> state = tx.init(params)
      >>> updates, state = tx.update({"w": jnp.zeros(2)}, state, params)
      >>> updates["w"]
      Array([-0.05, -0.05], dtype=float32)

    Reference: Dozat (2016); Loshchilov & Hutter (ICLR 2019).
    """
    # `adamw` with another default (Optax: `functools.partial(adamw, nesterov=True)`)
    return _adamw(
        learning_rate,
        b1,
        b2,
        eps,
        eps_root,
        mu_dtype,
        weight_decay,
        mask,
        nesterov=nesterov,
        nu_dtype=nu_dtype,
    )


_adam = inspect.unwrap(adam)
_adamw = inspect.unwrap(adamw)


__all__ = ["adam", "adamw", "nadam", "nadamw"]
