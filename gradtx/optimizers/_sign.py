"""Sign-based optimizers: signSGD and Lion."""

from .._base._checks import alias_errors
from .._base._typing import ArrayLike, ScalarOrSchedule
from ..core._transformation import GradientTransformation, chain
from ..state._quantize import MomentDType
from ..transforms import _decay
from ..transforms._scaling import scale_by_learning_rate
from ..transforms._sign import scale_by_lion, scale_by_sign, scale_by_sign_agreement
from ..tree._patterns import MaskOrFn


@alias_errors
def sign_sgd(learning_rate: ScalarOrSchedule) -> GradientTransformation:
    r"""signSGD: step by the sign of each gradient entry.

    .. math::  w_t = w_{t-1} - \eta_t\, \mathrm{sign}(g_t)

    `chain(scale_by_sign(), scale_by_learning_rate(learning_rate))`. Matches `optax.sign_sgd`.

    Args:
      learning_rate: :math:`\eta` >= 0, a float or a schedule `count -> lr`.

    Returns:
      A `GradientTransformation`.

    Example:
      >>> import jax.numpy as jnp, gradtx
      >>> tx = gradtx.sign_sgd(0.1)
      >>> state = tx.init({"w": jnp.zeros(3)})
      >>> updates, state = tx.update({"w": jnp.array([3.0, -0.2, 0.0])}, state)
      >>> updates["w"]
      Array([-0.1,  0.1, -0. ], dtype=float32)

    Reference: Bernstein et al., "signSGD: Compressed Optimisation for Non-Convex Problems"
    (ICML 2018).
    """
    return chain(scale_by_sign(), scale_by_learning_rate(learning_rate))


@alias_errors(renamed={"weight_decay: rate": "weight_decay"})
def lion(
    learning_rate: ScalarOrSchedule,
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.99,
    mu_dtype: MomentDType | None = None,
    weight_decay: ScalarOrSchedule = 1e-3,
    mask: MaskOrFn | None = None,
) -> GradientTransformation:
    r"""Lion: the sign of interpolated momentum, with decoupled weight decay.

    .. math::

      w_t = w_{t-1} - \eta_t \left( \mathrm{sign}(\beta_1 m_{t-1} + (1-\beta_1) g_t)
        + \lambda_t w_{t-1} \right), \qquad m_t = \beta_2 m_{t-1} + (1-\beta_2) g_t

    `chain(scale_by_lion(b1, b2, mu_dtype=mu_dtype), weight_decay(weight_decay, mask),
    scale_by_learning_rate(learning_rate))`. Matches `optax.lion` and nnabla's `Lion` (whose
    defaults are :math:`\eta = 10^{-4}` and no decay). RETURNN's torch `Lion` with
    `decoupled_weight_decay=True` scales the decay by :math:`\eta_t/\eta_0` only: pass
    `weight_decay=lam / eta0` to get it. Lion typically wants a learning rate 3-10x smaller and a
    decay 3-10x larger than AdamW.

    Args:
      learning_rate: :math:`\eta` >= 0, a float or a schedule.
      b1: :math:`\beta_1` in [0, 1), weight of the momentum in the update.
      b2: :math:`\beta_2` in [0, 1), decay of the momentum.
      mu_dtype: dtype of the momentum (default: the params' dtype).
      weight_decay: :math:`\lambda` >= 0, a float or a schedule.
      mask: which parameters decay: a boolean tree (or prefix), a callable `params -> tree`, or
        glob pattern(s) such as `"!**/bias"`; None decays all.

    Returns:
      A `GradientTransformation`.

    Example:
      >>> import jax.numpy as jnp, gradtx
      >>> tx = gradtx.lion(0.1, weight_decay=0.0)
      >>> params = {"w": jnp.ones(2)}
      >>> state = tx.init(params)
      >>> updates, state = tx.update({"w": jnp.array([3.0, -0.1])}, state, params)
      >>> gradtx.apply_updates(params, updates)["w"]
      Array([0.9, 1.1], dtype=float32)

    Reference: Chen et al., "Symbolic Discovery of Optimization Algorithms" (NeurIPS 2023).
    """
    return chain(
        scale_by_lion(b1, b2, mu_dtype=mu_dtype),
        _decay.weight_decay(weight_decay, mask),
        scale_by_learning_rate(learning_rate),
    )


@alias_errors
def neural_optimizer1(
    learning_rate: ScalarOrSchedule,
    beta1: ArrayLike = 0.9,
    decrease_factor: ArrayLike = 0.1,
    *,
    mu_dtype: MomentDType | None = None,
) -> GradientTransformation:
    r"""SGD that shrinks the steps whose sign disagrees with the running mean (`NeuralOptimizer1`).

    .. math::

      m_t = \beta_1 m_{t-1} + (1-\beta_1) g_t, \qquad
      w_t = w_{t-1} - \eta_t\, g_t \cdot \begin{cases} 1 & \mathrm{sign}(g_t) = \mathrm{sign}(m_t)
        \\ \delta & \text{otherwise} \end{cases}

    `chain(scale_by_sign_agreement(beta1, decrease_factor), scale_by_learning_rate(lr))`.
    RETURNN's `NeuralOptimizer1(beta1=0.9, decrease_factor=0.1)`.

    Args:
      learning_rate: :math:`\eta_t` >= 0, a float or a schedule.
      beta1: :math:`\beta_1` in [0, 1).
      decrease_factor: :math:`\delta` >= 0.
      mu_dtype: dtype of the running mean (default: the params' dtype).

    Returns:
      A `GradientTransformation`.

    Example:
      >>> import jax.numpy as jnp, gradtx
      >>> tx = gradtx.neural_optimizer1(1.0)
      >>> state = tx.init({"w": jnp.zeros(2)})
      >>> _, state = tx.update({"w": jnp.array([1.0, 1.0])}, state)
      >>> updates, state = tx.update({"w": jnp.array([0.5, -0.5])}, state)
      >>> updates["w"]  # the second entry turned against its mean: a tenth of the step
      Array([-0.5 ,  0.05], dtype=float32)

    Reference: RETURNN `NeuralOptimizer1`; Bello et al., "Neural Optimizer Search with
    Reinforcement Learning" (ICML 2017).
    """
    return chain(
        scale_by_sign_agreement(beta1, decrease_factor, mu_dtype=mu_dtype),
        scale_by_learning_rate(learning_rate),
    )


__all__ = ["lion", "neural_optimizer1", "sign_sgd"]
