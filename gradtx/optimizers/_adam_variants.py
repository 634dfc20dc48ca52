"""Adam variants as optimizers: AdaMax(W), AMSGrad, RAdam, AdaBelief, Yogi and NovoGrad.

Each is a `chain` of its preconditioner from `gradtx.transforms`, optionally decoupled weight
decay (after the preconditioner) and the learning rate. Argument names, order and defaults are
Optax 0.2.8's; the keyword-only `mu_dtype` / `nu_dtype` that Optax lacks are additions.
"""

from .._base._checks import alias_errors
from .._base._typing import ArrayLike, DType, ScalarOrSchedule
from ..core._transformation import GradientTransformation, chain
from ..state._quantize import MomentDType
from ..transforms import _decay
from ..transforms._adam import scale_by_adamax, scale_by_amsgrad
from ..transforms._adam_variants import (
    scale_by_belief,
    scale_by_novograd,
    scale_by_radam,
    scale_by_yogi,
)
from ..transforms._scaling import scale_by_learning_rate
from ..tree._patterns import MaskOrFn


@alias_errors
def adamax(
    learning_rate: ScalarOrSchedule,
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.999,
    eps: ArrayLike = 1e-8,
    *,
    mu_dtype: MomentDType | None = None,
    nu_dtype: MomentDType | None = None,
) -> GradientTransformation:
    r"""AdaMax: Adam with the infinity norm in place of the second moment.

    .. math::

      m_t = \beta_1 m_{t-1} + (1-\beta_1) g_t, \qquad
      v_t = \max(|g_t| + \epsilon, \beta_2 v_{t-1}), \qquad
      w_t = w_{t-1} - \eta_t \frac{m_t}{(1-\beta_1^t) v_t}

    `chain(scale_by_adamax(b1, b2, eps), scale_by_learning_rate(learning_rate))`. Matches
    `optax.adamax`; nnabla's `Adamax` defaults to :math:`\eta = 2 \cdot 10^{-3}`.

    Args:
      learning_rate: :math:`\eta` >= 0, a float or a schedule.
      b1: :math:`\beta_1` in [0, 1).
      b2: :math:`\beta_2` in [0, 1), decay of the infinity norm.
      eps: :math:`\epsilon` >= 0.
      mu_dtype: dtype of the first moment (default: the params' dtype).
      nu_dtype: dtype of the infinity norm (default: the params' dtype).

    Returns:
      A `GradientTransformation`.

    Example:
      >>> import jax.numpy as jnp, numpy as np, gradtx
      >>> tx = gradtx.adamax(0.1)
      >>> state = tx.init({"w": jnp.zeros(2)})
      >>> updates, state = tx.update({"w": jnp.array([2.0, -0.5])}, state)
      >>> print(np.asarray(updates["w"]).round(4))
      [-0.1  0.1]

    Reference: Kingma & Ba, "Adam: A Method for Stochastic Optimization" (ICLR 2015), §7.1.
    """
    return chain(
        scale_by_adamax(b1, b2, eps, mu_dtype=mu_dtype, nu_dtype=nu_dtype),
        scale_by_learning_rate(learning_rate),
    )


@alias_errors(renamed={"weight_decay: rate": "weight_decay"})
def adamaxw(
    learning_rate: ScalarOrSchedule,
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.999,
    eps: ArrayLike = 1e-8,
    weight_decay: ScalarOrSchedule = 1e-4,
    mask: MaskOrFn | None = None,
    *,
    mu_dtype: MomentDType | None = None,
    nu_dtype: MomentDType | None = None,
) -> GradientTransformation:
    r"""AdaMaxW: AdaMax with decoupled weight decay.

    .. math::

      w_t = w_{t-1} - \eta_t \left( \frac{m_t}{(1-\beta_1^t) v_t} + \lambda_t w_{t-1} \right)

    with AdaMax's :math:`m_t, v_t` (see `adamax`). `chain(scale_by_adamax(...),
    weight_decay(weight_decay, mask), scale_by_learning_rate(learning_rate))`. Matches
    `optax.adamaxw`.

    Args:
      learning_rate: :math:`\eta` >= 0, a float or a schedule.
      b1: :math:`\beta_1` in [0, 1).
      b2: :math:`\beta_2` in [0, 1).
      eps: :math:`\epsilon` >= 0.
      weight_decay: :math:`\lambda` >= 0, a float or a schedule.
      mask: which parameters decay (see `adamw`); None decays all.
      mu_dtype: dtype of the first moment (default: the params' dtype).
      nu_dtype: dtype of the infinity norm (default: the params' dtype).

    Returns:
      A `GradientTransformation`.

    Example:
      >>> import jax.numpy as jnp, numpy as np, gradtx
      >>> tx = gradtx.adamaxw(0.1, weight_decay=0.5)
      >>> params = {"w": jnp.ones(2)}
      >>> state = tx.init(params)
      >>> updates, state = tx.update({"w": jnp.array([1.0, -1.0])}, state, params)
      >>> print(np.asarray(updates["w"]).round(4))
      [-0.15  0.05]

    Reference: Kingma & Ba (ICLR 2015); Loshchilov & Hutter (ICLR 2019).
    """
    return chain(
        scale_by_adamax(b1, b2, eps, mu_dtype=mu_dtype, nu_dtype=nu_dtype),
        _decay.weight_decay(weight_decay, mask),
        scale_by_learning_rate(learning_rate),
    )


@alias_errors
def amsgrad(
    learning_rate: ScalarOrSchedule,
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.999,
    eps: ArrayLike = 1e-8,
    eps_root: ArrayLike = 0.0,
    mu_dtype: MomentDType | None = None,
    bias_correction_mu: bool = True,
    bias_correction_nu: bool = True,
    *,
    nu_dtype: MomentDType | None = None,
) -> GradientTransformation:
    r"""AMSGrad: Adam that divides by the running maximum of the second moment.

    .. math::

      \bar v_t = \max(\bar v_{t-1}, \hat v_t), \qquad
      w_t = w_{t-1} - \eta_t \frac{\hat m_t}{\sqrt{\bar v_t + \epsilon_{root}} + \epsilon}

    `chain(scale_by_amsgrad(...), scale_by_learning_rate(learning_rate))`. Matches
    `optax.amsgrad`. With `bias_correction_mu=bias_correction_nu=False` it is the paper's rule and
    nnabla's `AMSGRAD` (default `bias_correction=False`); RETURNN's TF `AMSGradOptimizer` is that
    with `b2=0.99`.

    Args:
      learning_rate: :math:`\eta` >= 0, a float or a schedule.
      b1: :math:`\beta_1` in [0, 1).
      b2: :math:`\beta_2` in [0, 1).
      eps: :math:`\epsilon` >= 0, outside the square root.
      eps_root: :math:`\epsilon_{root}` >= 0, inside the square root.
      mu_dtype: dtype of the first moment (default: the params' dtype).
      bias_correction_mu: bias-correct the first moment.
      bias_correction_nu: bias-correct the second moment before the maximum.
      nu_dtype: dtype of the second moment and its maximum (default: the params' dtype).

    Returns:
      A `GradientTransformation`.

    Example:
      >>> import jax.numpy as jnp, numpy as np, gradtx
      >>> tx = gradtx.amsgrad(0.1)
      >>> state = tx.init({"w": jnp.zeros(2)})
      >>> updates, state = tx.update({"w": jnp.array([3.0, -1.0])}, state)
      >>> print(np.asarray(updates["w"]).round(4))
      [-0.1  0.1]

    Reference: Reddi, Kale & Kumar, "On the Convergence of Adam and Beyond" (ICLR 2018).
    """
    return chain(
        scale_by_amsgrad(
            b1,
            b2,
            eps,
            eps_root,
            mu_dtype=mu_dtype,
            nu_dtype=nu_dtype,
            bias_correction_mu=bias_correction_mu,
            bias_correction_nu=bias_correction_nu,
        ),
        scale_by_learning_rate(learning_rate),
    )


@alias_errors
def radam(
    learning_rate: ScalarOrSchedule,
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.999,
    eps: ArrayLike = 1e-8,
    eps_root: ArrayLike = 0.0,
    threshold: ArrayLike = 5.0,
    *,
    nesterov: bool = False,
    mu_dtype: MomentDType | None = None,
    nu_dtype: MomentDType | None = None,
) -> GradientTransformation:
    r"""RAdam: Adam with its step rectified while the second moment is still unreliable.

    .. math::

      w_t = w_{t-1} - \eta_t \begin{cases}
        r_t\, \hat m_t / (\sqrt{\hat v_t + \epsilon_{root}} + \epsilon) & \rho_t \ge \tau \\
        \hat m_t & \text{otherwise}
      \end{cases}

    with :math:`\rho_t, r_t` as in `scale_by_radam`. `chain(scale_by_radam(...),
    scale_by_learning_rate(learning_rate))`. Matches `optax.radam` and `torch.optim.RAdam`.

    Args:
      learning_rate: :math:`\eta` >= 0, a float or a schedule.
      b1: :math:`\beta_1` in [0, 1).
      b2: :math:`\beta_2` in [0, 1).
      eps: :math:`\epsilon` >= 0, outside the square root.
      eps_root: :math:`\epsilon_{root}` >= 0, inside the square root.
      threshold: :math:`\tau` >= 4, where the adaptive step starts.
      nesterov: use the Nesterov (NAdam) first moment.
      mu_dtype: dtype of the first moment (default: the params' dtype).
      nu_dtype: dtype of the second moment (default: the params' dtype).

    Returns:
      A `GradientTransformation`.

    Example:
      >>> import jax.numpy as jnp, numpy as np, gradtx
      >>> tx = gradtx.radam(0.1)
      >>> state = tx.init({"w": jnp.zeros(2)})
      >>> updates, state = tx.update({"w": jnp.array([3.0, -1.0])}, state)
      >>> print(np.asarray(updates["w"]).round(4))  # the first steps are momentum SGD
      [-0.3  0.1]

    Reference: Liu et al., "On the Variance of the Adaptive Learning Rate and Beyond" (ICLR 2020).
    """
    return chain(
        scale_by_radam(
            b1,
            b2,
            eps,
            eps_root,
            threshold,
            nesterov=nesterov,
            mu_dtype=mu_dtype,
            nu_dtype=nu_dtype,
        ),
        scale_by_learning_rate(learning_rate),
    )


@alias_errors
def adabelief(
    learning_rate: ScalarOrSchedule,
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.999,
    eps: ArrayLike = 1e-16,
    eps_root: ArrayLike = 1e-16,
    *,
    nesterov: bool = False,
    mu_dtype: MomentDType | None = None,
    nu_dtype: MomentDType | None = None,
) -> GradientTransformation:
    r"""AdaBelief: Adam that divides by the spread of the gradient around its running mean.

    .. math::

      s_t = \beta_2 s_{t-1} + (1-\beta_2)(g_t - m_t)^2 + \epsilon_{root}, \qquad
      w_t = w_{t-1} - \eta_t \frac{m_t/(1-\beta_1^t)}{\sqrt{s_t/(1-\beta_2^t)} + \epsilon}

    `chain(scale_by_belief(...), scale_by_learning_rate(learning_rate))`. Matches
    `optax.adabelief`. nnabla's `AdaBelief` adds :math:`\epsilon` (default :math:`10^{-8}`) to
    :math:`s_t` as this does with `eps_root`, and again to the denominator; pass
    `eps=eps_root=1e-8` to follow it.

    Args:
      learning_rate: :math:`\eta` >= 0, a float or a schedule.
      b1: :math:`\beta_1` in [0, 1).
      b2: :math:`\beta_2` in [0, 1).
      eps: :math:`\epsilon` >= 0, added to the denominator.
      eps_root: :math:`\epsilon_{root}` >= 0, added to :math:`s_t` every step.
      nesterov: use the Nesterov (NAdam) first moment.
      mu_dtype: dtype of the first moment (default: the params' dtype).
      nu_dtype: dtype of :math:`s` (default: the params' dtype).

    Returns:
      A `GradientTransformation`.

    Example:
      >>> import jax.numpy as jnp, numpy as np, gradtx
      >>> tx = gradtx.adabelief(0.1)
      >>> state = tx.init({"w": jnp.zeros(2)})
      >>> updates, state = tx.update({"w": jnp.array([3.0, -1.0])}, state)
      >>> print(np.asarray(updates["w"]).round(4))
      [-0.1111  0.1111]

    Reference: Zhuang et al., "AdaBelief Optimizer: Adapting Stepsizes by the Belief in Observed
    Gradients" (NeurIPS 2020).
    """
    return chain(
        scale_by_belief(
            b1, b2, eps, eps_root, nesterov=nesterov, mu_dtype=mu_dtype, nu_dtype=nu_dtype
        ),
        scale_by_learning_rate(learning_rate),
    )


@alias_errors
def yogi(
    learning_rate: ScalarOrSchedule,
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.999,
    eps: ArrayLike = 1e-3,
    *,
    mu_dtype: MomentDType | None = None,
    nu_dtype: MomentDType | None = None,
) -> GradientTransformation:
    r"""Yogi: Adam whose second moment grows or shrinks additively by :math:`(1-\beta_2) g^2`.

    .. math::

      v_t = v_{t-1} - (1-\beta_2)\,\mathrm{sign}(v_{t-1} - g_t^2)\, g_t^2, \qquad
      w_t = w_{t-1} - \eta_t \frac{m_t/(1-\beta_1^t)}{\sqrt{v_t/(1-\beta_2^t)} + \epsilon}

    `chain(scale_by_yogi(b1, b2, eps), scale_by_learning_rate(learning_rate))`, buffers starting
    at :math:`10^{-6}`. Matches `optax.yogi`.

    Args:
      learning_rate: :math:`\eta` >= 0, a float or a schedule.
      b1: :math:`\beta_1` in [0, 1).
      b2: :math:`\beta_2` in [0, 1).
      eps: :math:`\epsilon` >= 0, outside the square root.
      mu_dtype: dtype of the first moment (default: the params' dtype).
      nu_dtype: dtype of the second moment (default: the params' dtype).

    Returns:
      A `GradientTransformation`.

    Example:
      >>> import jax.numpy as jnp, numpy as np, gradtx
      >>> tx = gradtx.yogi(0.1)
      >>> state = tx.init({"w": jnp.zeros(2)})
      >>> updates, state = tx.update({"w": jnp.array([3.0, -1.0])}, state)
      >>> print(np.asarray(updates["w"]).round(4))
      [-0.1     0.0998]

    Reference: Zaheer et al., "Adaptive Methods for Nonconvex Optimization" (NeurIPS 2018).
    """
    return chain(
        scale_by_yogi(b1, b2, eps, mu_dtype=mu_dtype, nu_dtype=nu_dtype),
        scale_by_learning_rate(learning_rate),
    )


@alias_errors
def novograd(
    learning_rate: ScalarOrSchedule,
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.25,
    eps: ArrayLike = 1e-6,
    eps_root: ArrayLike = 0.0,
    weight_decay: ScalarOrSchedule = 0.0,
    *,
    mu_dtype: MomentDType | None = None,
    nu_dtype: DType | None = None,
) -> GradientTransformation:
    r"""NovoGrad: momentum of gradients normalised by a per-tensor running norm.

    .. math::

      v_t = \beta_2 v_{t-1} + (1-\beta_2)\|g_t\|^2, \qquad
      m_t = \beta_1 m_{t-1} + \frac{g_t}{\sqrt{v_t + \epsilon_{root}} + \epsilon} + \lambda_t w,
      \qquad w_t = w_{t-1} - \eta_t m_t

    per parameter tensor, with :math:`v_1 = \|g_1\|^2` (see `scale_by_novograd`).
    `chain(scale_by_novograd(b1, b2, eps, eps_root, weight_decay), scale_by_learning_rate(lr))`:
    the decay sits inside the momentum, as in the paper. Matches `optax.novograd`; here
    `weight_decay` may also be a schedule.

    Args:
      learning_rate: :math:`\eta` >= 0, a float or a schedule.
      b1: :math:`\beta_1` in [0, 1).
      b2: :math:`\beta_2` in [0, 1).
      eps: :math:`\epsilon` >= 0, outside the square root.
      eps_root: :math:`\epsilon_{root}` >= 0, inside the square root.
      weight_decay: :math:`\lambda` >= 0, a float or a schedule; when not zero, `update` needs
        `params`.
      mu_dtype: dtype of the momentum (default: the params' dtype).
      nu_dtype: dtype of the per-tensor norms (default: the params' dtype).

    Returns:
      A `GradientTransformation`.

    Example:
      >>> import jax.numpy as jnp, numpy as np, gradtx
      >>> tx = gradtx.novograd(0.1)
      >>> state = tx.init({"w": jnp.zeros(2)})
      >>> updates, state = tx.update({"w": jnp.array([3.0, -4.0])}, state)
      >>> print(np.asarray(updates["w"]).round(4))
      [-0.06  0.08]

    Reference: Ginsburg et al., "Stochastic Gradient Methods with Layer-wise Adaptive Moments for
    Training of Deep Networks" (2019), arXiv:1905.11286.
    """
    return chain(
        scale_by_novograd(
            b1, b2, eps, eps_root, weight_decay, mu_dtype=mu_dtype, nu_dtype=nu_dtype
        ),
        scale_by_learning_rate(learning_rate),
    )


__all__ = ["adabelief", "adamax", "adamaxw", "amsgrad", "novograd", "radam", "yogi"]
