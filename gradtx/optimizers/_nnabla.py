"""nnabla's solvers whose update rules differ from the Optax-style aliases of the same name.

`gradtx.nnabla.adam`, `adamw` and `amsgrad` put ε before the bias corrections (the ε-hat form of
`scale_by_adam_eps_hat`); `lamb` has no bias correction by default and clips the parameter norm;
`adabelief` has nnabla's options; `momentum` and `lars` keep the learning rate inside the
momentum buffer (`trace_with_lr`). Each is a `chain` of public primitives with nnabla's defaults;
its docstring gives nnabla's rule and, where nnabla has a known bug, how and why this differs.

nnabla's `Sgd`, `Adagrad`, `Adadelta`, `RMSprop`, `AMSGRAD` (default), `Adamax` and `Lion` match
the top-level aliases with the settings given in their docstrings; `SgdW`, `RMSpropGraves`,
`AdaBound` / `AMSBound` are the top-level `sgdw`, `rmsprop_graves`, `adabound` / `amsbound`, and
nnabla's missing `Eve` is `eve`.
"""

from .._base._checks import alias_errors
from .._base._typing import ArrayLike, ScalarOrSchedule
from ..core._transformation import GradientTransformation, chain
from ..state._quantize import MomentDType
from ..transforms._adam import scale_by_adam, scale_by_adam_eps_hat
from ..transforms._adam_variants import scale_by_belief
from ..transforms._decay import weight_decay as weight_decay_tx
from ..transforms._decay import weight_decay_by_lr_ratio
from ..transforms._momentum import trace_with_lr
from ..transforms._scaling import scale, scale_by_learning_rate
from ..transforms._trust_ratio import scale_by_lamb_trust_ratio, scale_by_lars_trust_ratio
from ..tree._patterns import MaskOrFn


@alias_errors(name="nnabla.adam")
def adam(
    learning_rate: ScalarOrSchedule = 1e-3,
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.999,
    eps: ArrayLike = 1e-8,
    *,
    mu_dtype: MomentDType | None = None,
    nu_dtype: MomentDType | None = None,
) -> GradientTransformation:
    r"""Adam in nnabla's (and TensorFlow 1's) form, with :math:`\epsilon` before the corrections.

    .. math::  w_t = w_{t-1} - \eta_t \frac{\sqrt{1-\beta_2^t}}{1-\beta_1^t}
      \frac{m_t}{\sqrt{v_t} + \epsilon}

    `chain(scale_by_adam_eps_hat(b1, b2, eps), scale_by_learning_rate(learning_rate))`. nnabla's
    `Adam(alpha=1e-3, beta1=0.9, beta2=0.999, eps=1e-8)`, TF1's `AdamOptimizer` and RETURNN's
    `CustomAdamOptimizer` (RETURNN's TF updater injects `eps=1e-16`). `adam` is the same with
    :math:`\epsilon\sqrt{1-\beta_2^t}` in place of :math:`\epsilon`.

    Args:
      learning_rate: :math:`\eta_t` >= 0, a float or a schedule (nnabla's `alpha`).
      b1: :math:`\beta_1` in [0, 1).
      b2: :math:`\beta_2` in [0, 1).
      eps: :math:`\epsilon` >= 0 (Kingma & Ba's :math:`\hat\epsilon`).
      mu_dtype: dtype of the first moment (default: the params' dtype).
      nu_dtype: dtype of the second moment (default: the params' dtype).

    Returns:
      A `GradientTransformation`.

    Example:
      >>> import jax.numpy as jnp, numpy as np, gradtx
      >>> tx = gradtx.nnabla.adam(0.1, eps=0.1)
      >>> state = tx.init({"w": jnp.zeros(2)})
      >>> updates, state = tx.update({"w": jnp.array([1.0, -1.0])}, state)
      >>> print(np.asarray(updates["w"]).round(4))  # gradtx.adam(0.1, eps=0.1) gives 0.0909
      [-0.024  0.024]

    Reference: Kingma & Ba (ICLR 2015), end of Section 2; nnabla `Adam`.
    """
    return chain(
        scale_by_adam_eps_hat(b1, b2, eps, mu_dtype=mu_dtype, nu_dtype=nu_dtype),
        scale_by_learning_rate(learning_rate),
    )


@alias_errors(name="nnabla.adamw", renamed={"weight_decay_by_lr_ratio: rate": "weight_decay"})
def adamw(
    learning_rate: ScalarOrSchedule = 1e-3,
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.999,
    eps: ArrayLike = 1e-8,
    weight_decay: ScalarOrSchedule = 1e-4,
    *,
    initial_learning_rate: ArrayLike | None = None,
    mask: MaskOrFn | None = None,
    mu_dtype: MomentDType | None = None,
    nu_dtype: MomentDType | None = None,
) -> GradientTransformation:
    r"""AdamW in nnabla's form: ε-hat Adam, decay scaled by :math:`\eta_t/\eta_0` (not by η).

    .. math::  w_t = w_{t-1} - \eta_t \frac{\sqrt{1-\beta_2^t}}{1-\beta_1^t}
      \frac{m_t}{\sqrt{v_t} + \epsilon} - \frac{\eta_t}{\eta_0} \lambda_t w_{t-1}

    `chain(scale_by_adam_eps_hat(b1, b2, eps), scale_by_learning_rate(learning_rate,
    flip_sign=False), weight_decay_by_lr_ratio(weight_decay, learning_rate), scale(-1))`.
    nnabla's `AdamW(alpha=1e-3, ..., wd=1e-4)`. `adamw` (Optax's) multiplies the decay by
    :math:`\eta_t` itself and puts :math:`\epsilon` after the corrections. `update` needs
    `params`.

    Args:
      learning_rate: :math:`\eta_t` >= 0, a float or a schedule.
      b1: :math:`\beta_1` in [0, 1).
      b2: :math:`\beta_2` in [0, 1).
      eps: :math:`\epsilon` >= 0.
      weight_decay: :math:`\lambda` >= 0, a float or a schedule.
      initial_learning_rate: :math:`\eta_0` > 0 (default: the learning rate, or the schedule at
        step 0); needed when the learning rate is injected or set between steps.
      mask: which parameters decay; None: all.
      mu_dtype: dtype of the first moment (default: the params' dtype).
      nu_dtype: dtype of the second moment (default: the params' dtype).

    Returns:
      A `GradientTransformation`.

    Example:
      >>> import jax.numpy as jnp, gradtx
      >>> tx = gradtx.nnabla.adamw(0.1, weight_decay=0.5)
      >>> params = {"w": jnp.ones(2)}
      >>> state = tx.init(params)
      >>> updates, state = tx.update({"w": jnp.zeros(2)}, state, params)
      >>> updates["w"]  # the decay is 0.5 * w, not 0.1 * 0.5 * w as in adamw
      Array([-0.5, -0.5], dtype=float32)

    Reference: Loshchilov & Hutter (ICLR 2019); nnabla `AdamW`.
    """
    return chain(
        scale_by_adam_eps_hat(b1, b2, eps, mu_dtype=mu_dtype, nu_dtype=nu_dtype),
        scale_by_learning_rate(learning_rate, flip_sign=False),
        weight_decay_by_lr_ratio(
            weight_decay, learning_rate, initial_learning_rate=initial_learning_rate, mask=mask
        ),
        scale(-1.0),
    )


@alias_errors(name="nnabla.amsgrad")
def amsgrad(
    learning_rate: ScalarOrSchedule = 1e-3,
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.999,
    eps: ArrayLike = 1e-8,
    *,
    bias_correction: bool = False,
) -> GradientTransformation:
    r"""AMSGrad in nnabla's form: the maximum of the uncorrected second moment, ε-hat placement.

    .. math::  \bar v_t = \max(\bar v_{t-1}, v_t), \qquad
      w_t = w_{t-1} - \eta_t k_t \frac{m_t}{\sqrt{\bar v_t} + \epsilon}

    with :math:`k_t = \sqrt{1-\beta_2^t}/(1-\beta_1^t)` when `bias_correction`, else 1.
    `chain(scale_by_adam_eps_hat(b1, b2, eps, amsgrad=True, bias_correction=...),
    scale_by_learning_rate(learning_rate))`. nnabla's `AMSGRAD` (default
    `bias_correction=False`, which is also `amsgrad(lr, bias_correction_mu=False,
    bias_correction_nu=False)`).

    Args:
      learning_rate: :math:`\eta_t` >= 0, a float or a schedule.
      b1: :math:`\beta_1` in [0, 1).
      b2: :math:`\beta_2` in [0, 1).
      eps: :math:`\epsilon` >= 0.
      bias_correction: use :math:`k_t`.

    Returns:
      A `GradientTransformation`.

    Example:
      >>> import jax.numpy as jnp, numpy as np, gradtx
      >>> tx = gradtx.nnabla.amsgrad(0.1)
      >>> state = tx.init({"w": jnp.zeros(2)})
      >>> updates, state = tx.update({"w": jnp.array([1.0, -1.0])}, state)
      >>> print(np.asarray(updates["w"]).round(4))  # 0.1 * 0.1 / sqrt(0.001)
      [-0.3162  0.3162]

    Reference: Reddi, Kale & Kumar, "On the Convergence of Adam and Beyond" (ICLR 2018); nnabla
    `AMSGRAD`.
    """
    return chain(
        scale_by_adam_eps_hat(b1, b2, eps, amsgrad=True, bias_correction=bias_correction),
        scale_by_learning_rate(learning_rate),
    )


@alias_errors(name="nnabla.lamb", renamed={"weight_decay: rate": "weight_decay"})
def lamb(
    learning_rate: ScalarOrSchedule = 1e-3,
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.999,
    gamma_l: ArrayLike = 0.0,
    gamma_u: ArrayLike = 10.0,
    eps: ArrayLike = 1e-6,
    weight_decay: ScalarOrSchedule = 0.0,
    *,
    bias_correction: bool = False,
) -> GradientTransformation:
    r"""LAMB in nnabla's form: no bias correction by default, the parameter norm clipped.

    Per parameter tensor, with :math:`c_i = 1-\beta_i^t` when `bias_correction`, else 1:

    .. math::

      r_t = \frac{m_t / c_1}{\sqrt{v_t / c_2} + \epsilon} + \lambda_t w_{t-1}, \qquad
      \varphi = \mathrm{clip}(\|w_{t-1}\|, \gamma_l, \gamma_u), \qquad
      w_t = w_{t-1} - \eta_t \tau\, r_t, \quad
      \tau = \begin{cases} \varphi/\|r_t\| & \|r_t\| > \epsilon \\ 1 \end{cases}

    `chain(scale_by_adam(b1, b2, eps)` (with `bias_correction`) or
    `scale_by_adam_eps_hat(b1, b2, eps, bias_correction=False)`, `weight_decay(weight_decay)`,
    `scale_by_lamb_trust_ratio(gamma_l, gamma_u, eps)`, `scale_by_learning_rate(learning_rate))`.
    nnabla's `Lamb(eta=1e-3, beta1=0.9, beta2=0.999, gamma_l=0.0, gamma_u=10.0, eps=1e-6,
    bias_correction=False)` (its docs show bias correction, its code defaults to none). With
    `gamma_l=0` a tensor of norm 0 never moves, as in nnabla. `update` needs `params`.

    Args:
      learning_rate: :math:`\eta_t` >= 0, a float or a schedule (nnabla's `eta`).
      b1: :math:`\beta_1` in [0, 1).
      b2: :math:`\beta_2` in [0, 1).
      gamma_l: lower clip >= 0 of the parameter norm.
      gamma_u: upper clip >= `gamma_l` of the parameter norm.
      eps: :math:`\epsilon` >= 0, in the Adam denominator and as the update-norm threshold.
      weight_decay: :math:`\lambda` >= 0, a float or a schedule.
      bias_correction: divide the moments by their bias corrections.

    Returns:
      A `GradientTransformation`.

    Example:
      >>> import jax.numpy as jnp, numpy as np, gradtx
      >>> tx = gradtx.nnabla.lamb(0.1)
      >>> params = {"w": jnp.array([3.0, -4.0])}
      >>> state = tx.init(params)
      >>> updates, state = tx.update({"w": jnp.array([0.3, -0.4])}, state, params)
      >>> print(np.asarray(updates["w"]).round(3))  # a step of 0.1 * ||w|| = 0.5 along -r
      [-0.354  0.354]

    Reference: You et al., "Large Batch Optimization for Deep Learning: Training BERT in 76
    minutes" (ICLR 2020); nnabla `Lamb`.
    """
    moments = (
        scale_by_adam(b1, b2, eps)
        if bias_correction
        else scale_by_adam_eps_hat(b1, b2, eps, bias_correction=False)
    )
    return chain(
        moments,
        weight_decay_tx(weight_decay),
        scale_by_lamb_trust_ratio(gamma_l, gamma_u, eps),
        scale_by_learning_rate(learning_rate),
    )


@alias_errors(name="nnabla.adabelief", renamed={"weight_decay: rate": "weight_decay"})
def adabelief(
    learning_rate: ScalarOrSchedule = 1e-3,
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.999,
    eps: ArrayLike = 1e-8,
    weight_decay: ScalarOrSchedule = 0.0,
    *,
    amsgrad: bool = False,
    weight_decouple: bool = False,
    fixed_decay: bool = False,
    rectify: bool = False,
) -> GradientTransformation:
    r"""AdaBelief with nnabla's options: AMSGrad, decoupled or fixed decay, rectification.

    .. math::

      w_t = w_{t-1} - \eta_t\, u_t - \begin{cases}
        \eta_t \lambda_t w_{t-1} & \text{weight_decouple} \\
        \lambda_t w_{t-1} & \text{weight_decouple and fixed_decay} \\
        0 & \text{otherwise (then } g_t \leftarrow g_t + \lambda_t w_{t-1} \text{, coupled)}
      \end{cases}

    with :math:`u_t` from `scale_by_belief(b1, b2, eps, eps_root=eps, amsgrad=, rectify=,
    accumulate_eps_root=False)`. The chains:
    coupled `chain(weight_decay(λ), scale_by_belief(...), scale_by_learning_rate(lr))`;
    decoupled `chain(scale_by_belief(...), weight_decay(λ), scale_by_learning_rate(lr))`;
    fixed `chain(scale_by_belief(...), scale_by_learning_rate(lr, flip_sign=False),
    weight_decay(λ), scale(-1))`. nnabla's `AdaBelief(alpha=1e-3, beta1=0.9, beta2=0.999,
    eps=1e-8, wd=0, amsgrad=False, weight_decouple=False, fixed_decay=False, rectify=False)`,
    except that :math:`\epsilon` is added once, as published, where nnabla accumulates it in
    its state, and that the rectified SGD phase is bias-corrected (see `scale_by_belief`).
    `update` needs `params`.

    Args:
      learning_rate: :math:`\eta_t` >= 0, a float or a schedule (nnabla's `alpha`).
      b1: :math:`\beta_1` in [0, 1).
      b2: :math:`\beta_2` in [0, 1).
      eps: :math:`\epsilon` >= 0.
      weight_decay: :math:`\lambda` >= 0, a float or a schedule.
      amsgrad: use the running maximum of the belief :math:`s_t`.
      weight_decouple: decoupled decay (AdamW-style) instead of coupled L2.
      fixed_decay: with `weight_decouple`, do not scale the decay by the learning rate.
      rectify: RAdam's rectification.

    Returns:
      A `GradientTransformation`.

    Example:
      >>> import jax.numpy as jnp, numpy as np, gradtx
      >>> tx = gradtx.nnabla.adabelief(0.1, rectify=True)
      >>> params = {"w": jnp.zeros(2)}
      >>> state = tx.init(params)
      >>> updates, state = tx.update({"w": jnp.array([3.0, -1.0])}, state, params)
      >>> print(np.asarray(updates["w"]).round(4))  # the first steps are momentum SGD
      [-0.3  0.1]

    Reference: Zhuang et al., "AdaBelief Optimizer: Adapting Stepsizes by the Belief in Observed
    Gradients" (NeurIPS 2020); Liu et al. (ICLR 2020) for the rectification; nnabla `AdaBelief`.
    """
    if fixed_decay and not weight_decouple:
        raise ValueError(
            "nnabla.adabelief: fixed_decay=True needs weight_decouple=True (nnabla ignores it "
            "otherwise), got weight_decouple=False"
        )
    belief = scale_by_belief(
        b1, b2, eps, eps, amsgrad=amsgrad, rectify=rectify, accumulate_eps_root=False
    )
    if not weight_decouple:
        return chain(weight_decay_tx(weight_decay), belief, scale_by_learning_rate(learning_rate))
    if not fixed_decay:
        return chain(belief, weight_decay_tx(weight_decay), scale_by_learning_rate(learning_rate))
    return chain(
        belief,
        scale_by_learning_rate(learning_rate, flip_sign=False),
        weight_decay_tx(weight_decay),
        scale(-1.0),
    )


@alias_errors(name="nnabla.momentum", renamed={"trace_with_lr: decay": "momentum"})
def momentum(
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
      >>> tx = gradtx.nnabla.momentum(lambda t: 0.1 / (1.0 + t), momentum=0.5)
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


@alias_errors(name="nnabla.lars", renamed={"trace_with_lr: decay": "momentum"})
def lars(
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
      >>> tx = gradtx.nnabla.lars(1.0, coefficient=0.1)
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


__all__ = ["adabelief", "adam", "adamw", "amsgrad", "lamb", "lars", "momentum"]
