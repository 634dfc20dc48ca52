"""AdaBound and AMSBound: Adam whose per-element step sizes are clipped into a band that narrows
to an SGD learning rate. Defaults are nnabla's (and the paper's)."""

from .._base._checks import alias_errors
from .._base._typing import ArrayLike, ScalarOrSchedule
from ..core._transformation import GradientTransformation, chain
from ..state._quantize import MomentDType
from ..transforms._bounded import bound_lr
from ..transforms._decay import weight_decay as weight_decay_tx


@alias_errors(renamed={"weight_decay: rate": "weight_decay"})
def adabound(
    learning_rate: ScalarOrSchedule = 1e-3,
    final_lr: ArrayLike = 0.1,
    gamma: ArrayLike = 1e-3,
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.999,
    eps: ArrayLike = 1e-8,
    weight_decay: ScalarOrSchedule = 0.0,
    *,
    initial_learning_rate: ArrayLike | None = None,
    mu_dtype: MomentDType | None = None,
    nu_dtype: MomentDType | None = None,
) -> GradientTransformation:
    r"""AdaBound: Adam with per-element step sizes clipped into a band narrowing to `final_lr`.

    .. math::

      g_t \leftarrow g_t + \lambda_t w_{t-1}, \qquad
      w_t = w_{t-1} - \mathrm{clip}\!\left(\frac{\eta_t \sqrt{1-\beta_2^t}/(1-\beta_1^t)}
        {\sqrt{v_t} + \epsilon},\ \ell_t,\ h_t\right) m_t, \\
      \ell_t = \text{final\_lr}\,\frac{\eta_t}{\eta_0} \left(1 - \frac{1}{\gamma t + 1}\right),
      \qquad h_t = \text{final\_lr}\,\frac{\eta_t}{\eta_0} \left(1 + \frac{1}{\gamma t}\right)

    with Adam's uncorrected moments :math:`m_t, v_t`. `chain(weight_decay(weight_decay),
    bound_lr(learning_rate, final_lr, gamma, b1, b2, eps))`: the decay is coupled (it passes
    through the moments), as in nnabla's `weight_decay` for this solver and in the reference
    implementation. Matches nnabla's `AdaBound` (CPU) and Luolc/AdaBound; nnabla-ext-cuda's
    bounds leave out :math:`t` (a bug, see `bound_lr`). `update` needs `params`.

    Args:
      learning_rate: :math:`\eta_t` >= 0, a float or a schedule (nnabla's `alpha`).
      final_lr: the SGD learning rate > 0 the band converges to (relative to :math:`\eta_0`).
      gamma: :math:`\gamma` > 0, the speed of convergence of the band.
      b1: :math:`\beta_1` in [0, 1).
      b2: :math:`\beta_2` in [0, 1).
      eps: :math:`\epsilon` >= 0.
      weight_decay: coupled L2 rate :math:`\lambda` >= 0, a float or a schedule.
      initial_learning_rate: :math:`\eta_0` (default: the learning rate, or the schedule at step
        0); needed when the schedule starts at 0 or the learning rate is injected
        (`inject_hyperparams`) or set between steps, see `bound_lr`.
      mu_dtype: dtype of the first moment (default: the params' dtype).
      nu_dtype: dtype of the second moment (default: the params' dtype).

    Returns:
      A `GradientTransformation`.

    Example:
      >>> import jax.numpy as jnp, numpy as np, gradtx
      >>> tx = gradtx.adabound(learning_rate=0.1, final_lr=0.01)
      >>> params = {"w": jnp.array([1.0, -2.0])}
      >>> state = tx.init(params)
      >>> updates, state = tx.update({"w": jnp.array([0.5, -0.5])}, state, params)
      >>> print(np.asarray(gradtx.apply_updates(params, updates)["w"]).round(4))  # Adam's step
      [ 0.9 -1.9]

    Reference: Luo, Xiong, Liu & Sun, "Adaptive Gradient Methods with Dynamic Bound of Learning
    Rate" (ICLR 2019, arXiv:1902.09843); nnabla `AdaBound`.
    """
    return chain(
        weight_decay_tx(weight_decay),
        bound_lr(
            learning_rate,
            final_lr,
            gamma,
            b1,
            b2,
            eps,
            initial_learning_rate=initial_learning_rate,
            mu_dtype=mu_dtype,
            nu_dtype=nu_dtype,
        ),
    )


@alias_errors(renamed={"weight_decay: rate": "weight_decay"})
def amsbound(
    learning_rate: ScalarOrSchedule = 1e-3,
    final_lr: ArrayLike = 0.1,
    gamma: ArrayLike = 1e-3,
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.999,
    eps: ArrayLike = 1e-8,
    weight_decay: ScalarOrSchedule = 0.0,
    *,
    bias_correction: bool = False,
    initial_learning_rate: ArrayLike | None = None,
    mu_dtype: MomentDType | None = None,
    nu_dtype: MomentDType | None = None,
) -> GradientTransformation:
    r"""AMSBound: AdaBound with AMSGrad's running maximum of the second moment.

    .. math::

      \bar v_t = \max(\bar v_{t-1}, v_t), \qquad
      w_t = w_{t-1} - \mathrm{clip}\!\left(\frac{\eta_t k_t}{\sqrt{\bar v_t} + \epsilon},\
        \ell_t,\ h_t\right) m_t

    with the bounds of `adabound` and :math:`k_t = \sqrt{1-\beta_2^t}/(1-\beta_1^t)` when
    `bias_correction`, else 1 (nnabla's default; the reference implementation corrects).
    `chain(weight_decay(weight_decay), bound_lr(..., amsgrad=True, bias_correction=...))`.
    nnabla's CPU `AMSBound` has the upper bound :math:`\text{final\_lr}(1 + t/\gamma)` (an
    operator-precedence bug that removes the upper clip); this uses the published
    :math:`1 + 1/(\gamma t)`, as nnabla's own test reference does. `update` needs `params`.

    Args:
      learning_rate: :math:`\eta_t` >= 0, a float or a schedule.
      final_lr: the SGD learning rate > 0 the band converges to.
      gamma: :math:`\gamma` > 0.
      b1: :math:`\beta_1` in [0, 1).
      b2: :math:`\beta_2` in [0, 1).
      eps: :math:`\epsilon` >= 0.
      weight_decay: coupled L2 rate :math:`\lambda` >= 0, a float or a schedule.
      bias_correction: use :math:`k_t` (nnabla's default False).
      initial_learning_rate: :math:`\eta_0` (see `adabound`).
      mu_dtype: dtype of the first moment (default: the params' dtype).
      nu_dtype: dtype of the second moment and its maximum (default: the params' dtype).

    Returns:
      A `GradientTransformation`.

    Example:
      >>> import jax.numpy as jnp, numpy as np, gradtx
      >>> tx = gradtx.amsbound(learning_rate=0.01, final_lr=0.1, bias_correction=True)
      >>> params = {"w": jnp.array([1.0, -2.0])}
      >>> state = tx.init(params)
      >>> updates, state = tx.update({"w": jnp.array([0.5, -0.5])}, state, params)
      >>> print(np.asarray(gradtx.apply_updates(params, updates)["w"]).round(4))
      [ 0.99 -1.99]

    Reference: Luo et al. (ICLR 2019, arXiv:1902.09843); Reddi, Kale & Kumar (ICLR 2018);
    nnabla `AMSBound`.
    """
    return chain(
        weight_decay_tx(weight_decay),
        bound_lr(
            learning_rate,
            final_lr,
            gamma,
            b1,
            b2,
            eps,
            amsgrad=True,
            bias_correction=bias_correction,
            initial_learning_rate=initial_learning_rate,
            mu_dtype=mu_dtype,
            nu_dtype=nu_dtype,
        ),
    )


__all__ = ["adabound", "amsbound"]
