"""Layer-wise adaptive optimizers for large batches: LAMB and LARS."""

from .._base._checks import alias_errors, check_in_range, check_non_negative, check_positive
from .._base._typing import ArrayLike, ScalarOrSchedule
from ..core._transformation import GradientTransformation, chain
from ..state._quantize import MomentDType
from ..transforms._adam import scale_by_adam
from ..transforms._decay import weight_decay as weight_decay_tx
from ..transforms._momentum import trace
from ..transforms._scaling import scale_by_learning_rate
from ..transforms._trust_ratio import scale_by_trust_ratio
from ..tree._patterns import MaskOrFn


@alias_errors
def lamb(
    learning_rate: ScalarOrSchedule,
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.999,
    eps: ArrayLike = 1e-6,
    eps_root: ArrayLike = 0.0,
    weight_decay: ScalarOrSchedule = 0.0,
    mask: MaskOrFn | None = None,
    *,
    mu_dtype: MomentDType | None = None,
    nu_dtype: MomentDType | None = None,
) -> GradientTransformation:
    r"""LAMB: Adam with decoupled weight decay, rescaled per layer by a trust ratio.

    .. math::

      r_t = \frac{\hat m_t}{\sqrt{\hat v_t + \epsilon_{root}} + \epsilon} + \lambda_t w_{t-1},
      \qquad
      w_t = w_{t-1} - \eta_t \frac{\|w_{t-1}\|}{\|r_t\|}\, r_t

    per leaf (the ratio is 1 when either norm is 0), with :math:`\hat m_t, \hat v_t` Adam's
    bias-corrected moments. `chain(scale_by_adam(b1, b2, eps, eps_root), weight_decay(weight_decay,
    mask), scale_by_trust_ratio(), scale_by_learning_rate(learning_rate))`. Matches
    `optax.lamb`. nnabla's `Lamb` differs by default: no bias correction, and :math:`\|w\|`
    clipped to `[gamma_l, gamma_u] = [0, 10]`: that is `nnabla.lamb`.

    Args:
      learning_rate: :math:`\eta` >= 0, a float or a schedule.
      b1: :math:`\beta_1` in [0, 1).
      b2: :math:`\beta_2` in [0, 1).
      eps: :math:`\epsilon` >= 0, outside the square root.
      eps_root: :math:`\epsilon_{root}` >= 0, inside the square root.
      weight_decay: :math:`\lambda` >= 0, a float or a schedule.
      mask: which parameters decay: a boolean tree, a callable or glob pattern(s) such as
        `"!**/bias"`; None decays all.
      mu_dtype: dtype of the first moment (default: the params'; `gradtx.quantized()` for
        8-bit block-wise storage).
      nu_dtype: dtype of the second moment (likewise).

    Returns:
      A `GradientTransformation`.

    Example:
      >>> import jax.numpy as jnp, gradtx
      >>> tx = gradtx.lamb(0.1, weight_decay=0.01)
      >>> params = {"w": jnp.array([3.0, -4.0])}
      >>> state = tx.init(params)
      >>> updates, state = tx.update({"w": jnp.array([0.3, -0.4])}, state, params)
      >>> gradtx.apply_updates(params, updates)["w"]
      Array([ 2.6481588, -3.6447427], dtype=float32)

    Reference: You et al., "Large Batch Optimization for Deep Learning: Training BERT in 76
    minutes" (ICLR 2020).
    """
    who = "lamb"
    check_non_negative(who, "learning_rate", learning_rate)
    check_in_range(who, "b1", b1, 0.0, 1.0, high_open=True)
    check_in_range(who, "b2", b2, 0.0, 1.0, high_open=True)
    check_non_negative(who, "eps", eps)
    check_non_negative(who, "eps_root", eps_root)
    check_non_negative(who, "weight_decay", weight_decay)
    return chain(
        scale_by_adam(b1, b2, eps, eps_root, mu_dtype=mu_dtype, nu_dtype=nu_dtype),
        weight_decay_tx(weight_decay, mask),
        scale_by_trust_ratio(),
        scale_by_learning_rate(learning_rate),
    )


@alias_errors
def lars(
    learning_rate: ScalarOrSchedule,
    weight_decay: ScalarOrSchedule = 0.0,
    weight_decay_mask: MaskOrFn = True,
    trust_coefficient: ArrayLike = 0.001,
    eps: ArrayLike = 0.0,
    trust_ratio_mask: MaskOrFn = True,
    momentum: ScalarOrSchedule = 0.9,
    nesterov: bool = False,
) -> GradientTransformation:
    r"""LARS: SGD with momentum whose step is rescaled per layer by a trust ratio.

    .. math::

      d_t = g_t + \lambda_t w_{t-1}, \qquad
      s_t = -\eta_t\, \eta_{tc} \frac{\|w_{t-1}\|}{\|d_t\| + \epsilon}\, d_t, \qquad
      m_t = s_t + \mu\, m_{t-1}, \qquad w_t = w_{t-1} + m_t

    per leaf (the ratio is 1 when either norm is 0). `chain(weight_decay(weight_decay,
    weight_decay_mask), scale_by_trust_ratio(trust_coefficient=trust_coefficient, eps=eps,
    mask=trust_ratio_mask), scale_by_learning_rate(learning_rate), trace(momentum, nesterov))`.
    Matches `optax.lars` (masks as booleans, boolean trees or callables, and here also glob
    patterns; the paper excludes biases and normalisation scales, e.g.
    `weight_decay_mask="!**/bias", trust_ratio_mask="!**/bias"`). nnabla's `Lars` differs: it
    divides by :math:`\|g\| + \lambda\|w\|` and keeps the learning rate inside the momentum
    (`nnabla.lars`).

    Args:
      learning_rate: :math:`\eta` >= 0, a float or a schedule.
      weight_decay: :math:`\lambda` >= 0, a float or a schedule.
      weight_decay_mask: which parameters decay (True: all).
      trust_coefficient: :math:`\eta_{tc}` > 0.
      eps: :math:`\epsilon` >= 0 added to the update norm.
      trust_ratio_mask: which parameters get the trust ratio (True: all); the others take
        plain momentum SGD steps.
      momentum: :math:`\mu` in [0, 1], a float or a schedule.
      nesterov: Nesterov momentum.

    Returns:
      A `GradientTransformation`.

    Example:
      >>> import jax.numpy as jnp, gradtx
      >>> tx = gradtx.lars(1.0, weight_decay=1e-4)
      >>> params = {"w": jnp.array([3.0, -4.0])}
      >>> state = tx.init(params)
      >>> updates, state = tx.update({"w": jnp.array([0.3, -0.4])}, state, params)
      >>> gradtx.apply_updates(params, updates)["w"]
      Array([ 2.997, -3.996], dtype=float32)

    Reference: You, Gitman & Ginsburg, "Large Batch Training of Convolutional Networks"
    (arXiv:1708.03888, 2017).
    """
    who = "lars"
    check_non_negative(who, "learning_rate", learning_rate)
    check_non_negative(who, "weight_decay", weight_decay)
    check_positive(who, "trust_coefficient", trust_coefficient)
    check_non_negative(who, "eps", eps)
    check_in_range(who, "momentum", momentum, 0.0, 1.0)
    return chain(
        weight_decay_tx(weight_decay, weight_decay_mask),
        scale_by_trust_ratio(trust_coefficient=trust_coefficient, eps=eps, mask=trust_ratio_mask),
        scale_by_learning_rate(learning_rate),
        trace(momentum, nesterov),
    )


__all__ = ["lamb", "lars"]
