"""LaProp: momentum of the RMSProp-normalised gradient, Adam's bias corrections on both."""

from typing import NamedTuple

import jax
import jax.numpy as jnp

from .._base._checks import alias_errors
from .._base._numerics import abs_sq, bias_correction
from .._base._recipe import recorded
from .._base._typing import ArrayLike, Mask, ScalarOrSchedule, Updates
from ..core._transformation import GradientTransformation, chain
from ..state._quantize import MomentDType
from ..transforms._adam import CHECKS, MOMENTS
from ..transforms._building_blocks import ema
from ..transforms._decay import weight_decay as weight_decay_tx
from ..transforms._rule import non_negative, rule
from ..transforms._scaling import scale_by_learning_rate


class ScaleByLapropState(NamedTuple):
    """State of `scale_by_laprop`."""

    count: jax.Array  # type: ignore[assignment]  # int32, saturating
    mu: Updates  # EMA of the normalised gradients, dtype mu_dtype or the params'
    nu: Updates  # EMA of |g|^2, dtype nu_dtype or the params'


@recorded
def scale_by_laprop(
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.999,
    eps: ArrayLike = 1e-15,
    eps_root: ArrayLike = 0.0,
    *,
    mu_dtype: MomentDType | None = None,
    nu_dtype: MomentDType | None = None,
) -> GradientTransformation:
    r"""Rescale updates by LaProp: the gradient is normalised by the current second moment
    *before* it enters the momentum (Adam normalises the momentum afterwards).

    .. math::

      \nu_t = \beta_2 \nu_{t-1} + (1-\beta_2) g_t^2, \qquad
      m_t = \beta_1 m_{t-1} + (1-\beta_1)
        \frac{g_t}{\sqrt{\nu_t / (1-\beta_2^t) + \epsilon_{root}} + \epsilon}, \qquad
      u_t = \frac{m_t}{1-\beta_1^t}

    This is Algorithm 1 of the paper (its :math:`\mu, \nu` are :math:`\beta_1, \beta_2` here).
    With constant gradients every update is :math:`\mathrm{sign}(g)` (up to :math:`\epsilon`),
    from the first step on. `pytorch_optimizer.LaProp` computes the same values
    with two small differences: its denominator is
    :math:`(\sqrt{\nu_t + 10^{-15}} + \epsilon) / \sqrt{1-\beta_2^t}` (so its :math:`\epsilon` is
    rescaled by the bias correction), and it keeps the learning rate *inside* the momentum (see
    `laprop`).

    Args:
      b1: :math:`\beta_1` in [0, 1), decay of the momentum.
      b2: :math:`\beta_2` in [0, 1), decay of the second moment.
      eps: :math:`\epsilon` >= 0, outside the square root (the paper's default, 1e-15).
      eps_root: :math:`\epsilon_{root}` >= 0, inside the square root.
      mu_dtype: dtype of the momentum (default: the params' dtype), or a `gradtx.quantized()`
        spec for 8-bit storage.
      nu_dtype: dtype of the second moment (default: the params' dtype), or a
        `gradtx.quantized()` spec.

    Returns:
      A `GradientTransformation` with state `ScaleByLapropState(count, mu, nu)`.

    Reference: Ziyin, Wang & Ueda, "LaProp: Separating Momentum and Adaptivity in Adam" (2020),
    arXiv:2002.04839.
    """
    return _laprop(b1=b1, b2=b2, eps=eps, eps_root=eps_root, mu_dtype=mu_dtype, nu_dtype=nu_dtype)


@rule(
    "scale_by_laprop",
    ScaleByLapropState,
    slots=MOMENTS,
    checks={**CHECKS, "eps_root": non_negative},
)
def _laprop(t, *, b1, b2, eps, eps_root):
    c1, c2 = bias_correction(b1, t), bias_correction(b2, t)

    def leaf(g, s):
        v = s.keep("nu", ema(b2, abs_sq(g), s.nu))
        m = s.keep("mu", ema(b1, g / (jnp.sqrt(v / c2 + eps_root) + eps), s.mu))
        return m / c1

    return leaf


@alias_errors(renamed={"weight_decay: rate": "weight_decay"})
def laprop(
    learning_rate: ScalarOrSchedule,
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.999,
    eps: ArrayLike = 1e-15,
    eps_root: ArrayLike = 0.0,
    weight_decay: ScalarOrSchedule = 0.0,
    mask: Mask | None = None,
    *,
    mu_dtype: MomentDType | None = None,
    nu_dtype: MomentDType | None = None,
) -> GradientTransformation:
    r"""LaProp: Adam with the order of momentum and normalisation swapped.

    .. math::

      w_t = w_{t-1} - \eta_t \left( \frac{m_t}{1-\beta_1^t} + \lambda w_{t-1} \right)

    with :math:`m_t`, the momentum of the normalised gradients, from `scale_by_laprop`.
    `chain(scale_by_laprop(...), weight_decay(weight_decay, mask),
    scale_by_learning_rate(learning_rate))`. As in the paper's Algorithm 1 the learning rate
    multiplies the bias-corrected momentum; `pytorch_optimizer.LaProp` (and the authors' code)
    accumulate :math:`\eta_t` inside the momentum and divide by an EMA of :math:`\eta_t`, which
    gives the same steps for a constant learning rate and different ones under a schedule. Its
    decoupled weight decay multiplies the already-updated weights by :math:`1-\eta\lambda`;
    here the decay reads :math:`w_{t-1}`, as in `adamw` (a difference of order
    :math:`\eta^2\lambda`).

    Args:
      learning_rate: :math:`\eta` >= 0, a float or a schedule (pytorch_optimizer's default is
        4e-4).
      b1: :math:`\beta_1` in [0, 1), decay of the momentum.
      b2: :math:`\beta_2` in [0, 1), decay of the second moment.
      eps: :math:`\epsilon` >= 0, outside the square root.
      eps_root: :math:`\epsilon_{root}` >= 0, inside the square root.
      weight_decay: :math:`\lambda` >= 0, decoupled weight decay (scaled by the learning rate).
      mask: which parameters decay (a boolean tree, a callable or glob patterns); None: all.
      mu_dtype: dtype of the momentum (default: the params' dtype).
      nu_dtype: dtype of the second moment (default: the params' dtype).

    Returns:
      A `GradientTransformation`.

    Example:
      >>> import jax.numpy as jnp, gradtx
      >>> from gradtx.contrib._laprop import laprop
      >>> tx = laprop(1e-3)
      >>> params = {"w": jnp.ones(3)}
      >>> updates, state = tx.update({"w": jnp.ones(3)}, tx.init(params), params)
      >>> jnp.round(updates["w"], 6)  # the first step is -lr * sign(g)
      Array([-0.001, -0.001, -0.001], dtype=float32)

    Reference: Ziyin, Wang & Ueda, "LaProp: Separating Momentum and Adaptivity in Adam" (2020),
    arXiv:2002.04839.
    """
    return chain(
        scale_by_laprop(b1, b2, eps, eps_root, mu_dtype=mu_dtype, nu_dtype=nu_dtype),
        weight_decay_tx(weight_decay, mask),
        scale_by_learning_rate(learning_rate),
    )


__all__ = ["ScaleByLapropState", "laprop", "scale_by_laprop"]
