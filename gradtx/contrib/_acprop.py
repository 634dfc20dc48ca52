"""ACProp: AdaBelief's centred second moment, applied asynchronously (from the previous step)."""

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from .._base._checks import alias_errors
from .._base._numerics import abs_sq, bias_correction, widen
from .._base._recipe import recorded
from .._base._typing import ArrayLike, Mask, ScalarOrSchedule, Updates
from ..core._transformation import GradientTransformation, chain
from ..state._quantize import MomentDType
from ..transforms._adam import CHECKS, MOMENTS
from ..transforms._building_blocks import ema, moment_buffers
from ..transforms._decay import weight_decay as weight_decay_tx
from ..transforms._rule import non_negative, rule
from ..transforms._scaling import scale_by_learning_rate


class ScaleByAcpropState(NamedTuple):
    """State of `scale_by_acprop` (the fields of Optax's `ScaleByBeliefState`)."""

    count: jax.Array  # type: ignore[assignment]  # int32, saturating
    mu: Updates  # EMA of g, dtype mu_dtype or the params'
    nu: Updates  # EMA of |g_t - m_{t-1}|^2 (+ eps_root each step), nu_dtype (see below)


def _default_nu(params: Any) -> Any:
    """`nu` without a `nu_dtype`: the params' dtype, float32 for float16 leaves."""
    half = jnp.dtype(jnp.float16)
    return jax.tree.map(
        lambda x: moment_buffers(x, jnp.float32 if jnp.result_type(x) == half else None),
        params,
    )


@recorded
def scale_by_acprop(
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.999,
    eps: ArrayLike = 1e-16,
    eps_root: ArrayLike = 1e-16,
    *,
    nu_dtype: MomentDType | None = None,
    mu_dtype: MomentDType | None = None,
) -> GradientTransformation:
    r"""Rescale updates by ACProp: the gradient over the root of the *previous* centred second
    moment.

    .. math::

      m_t = \beta_1 m_{t-1} + (1-\beta_1) g_t, \qquad
      s_t = \beta_2 s_{t-1} + (1-\beta_2) (g_t - m_{t-1})^2 + \epsilon_{root}, \\
      u_t = \frac{g_t}{\sqrt{s_{t-1} / (1-\beta_2^{t-1})} + \epsilon}
      \quad (t > 1), \qquad u_1 = \frac{g_1}{1 + \epsilon}

    The numerator is the raw gradient (momentum only enters through the centring), the
    denominator uses information up to step :math:`t-1` only. Matches
    `optax.contrib.scale_by_acprop`.

    Args:
      b1: :math:`\beta_1` in [0, 1), decay of the mean of the gradients.
      b2: :math:`\beta_2` in [0, 1), decay of the centred second moment.
      eps: :math:`\epsilon` >= 0 added to the denominator.
      eps_root: :math:`\epsilon_{root}` >= 0 added to :math:`s_t` every step.
      nu_dtype: dtype of :math:`s` (default: the params' dtype, but float32 for float16 params:
        a float16 :math:`s` underflows to 0 for small gradients, and as the denominator only
        sees past steps, that makes the next step infinite); a `gradtx.quantized()` spec
        stores it in 8 bits.
      mu_dtype: dtype of :math:`m` (default: the params' dtype), or a `gradtx.quantized()` spec
        for 8-bit storage (signed code).

    Returns:
      A `GradientTransformation` with state `ScaleByAcpropState(count, mu, nu)`.

    Reference: Zhuang et al., "Momentum Centering and Asynchronous Update for Adaptive Gradient
    Methods" (NeurIPS 2021), arXiv:2110.05454.
    """
    tx = _acprop(b1=b1, b2=b2, eps=eps, eps_root=eps_root, mu_dtype=mu_dtype, nu_dtype=nu_dtype)
    if nu_dtype is not None:
        return tx
    # float32 for the float16 leaves (a slot's dtype keyword is one dtype for every leaf)
    return GradientTransformation(
        lambda params: tx.init(params)._replace(nu=_default_nu(params)), tx.update
    )


def _previous_count(state, extra_args, t, hyperparameters):
    """The count before this step: the denominator reads the previous step's moment."""
    return {"previous": state.count}, {}


@rule(
    "scale_by_acprop",
    ScaleByAcpropState,
    slots=MOMENTS,
    checks={**CHECKS, "eps_root": non_negative},
    prologue=_previous_count,
)
def _acprop(t, *, b1, b2, eps, eps_root, previous):
    first = previous == 0
    # The previous step's bias correction; at the first step the denominator is 1.
    c2 = bias_correction(b2, jnp.maximum(previous, 1))

    def leaf(g, s):
        m, s_old = s.mu, s.nu  # both as before this step
        s.keep("mu", ema(b1, g, m))
        s.keep("nu", ema(b2, abs_sq(g - widen(m)), s_old) + eps_root)
        s_hat = jnp.where(first, 1.0, widen(s_old) / c2)
        return g / (jnp.sqrt(s_hat) + eps)

    return leaf


@alias_errors(renamed={"weight_decay: rate": "weight_decay"})
def acprop(
    learning_rate: ScalarOrSchedule,
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.999,
    eps: ArrayLike = 1e-16,
    eps_root: ArrayLike = 1e-16,
    weight_decay: ScalarOrSchedule = 0.0,
    mask: Mask | None = None,
    *,
    nu_dtype: MomentDType | None = None,
    mu_dtype: MomentDType | None = None,
) -> GradientTransformation:
    r"""ACProp: momentum centring and asynchronous update (an AdaBelief variant).

    .. math::

      w_t = w_{t-1} - \eta_t \left( \frac{g_t}{\sqrt{\hat s_{t-1}} + \epsilon}
        + \lambda w_{t-1} \right)

    with :math:`\hat s` from `scale_by_acprop`. `chain(scale_by_acprop(...),
    weight_decay(weight_decay, mask), scale_by_learning_rate(learning_rate))`. Matches
    `optax.contrib.acprop`.

    Args:
      learning_rate: :math:`\eta` >= 0, a float or a schedule.
      b1: :math:`\beta_1` in [0, 1).
      b2: :math:`\beta_2` in [0, 1).
      eps: :math:`\epsilon` >= 0 added to the denominator.
      eps_root: :math:`\epsilon_{root}` >= 0 added to the second moment every step.
      weight_decay: :math:`\lambda` >= 0, decoupled weight decay (scaled by the learning rate).
      mask: which parameters decay (a boolean tree, a callable or glob patterns); None: all.
      nu_dtype: dtype of the second moment (see `scale_by_acprop`).
      mu_dtype: dtype of the first moment (default: the params' dtype), or a
        `gradtx.quantized()` spec.

    Returns:
      A `GradientTransformation`.

    Example:
      >>> import jax.numpy as jnp, gradtx
      >>> tx = gradtx.contrib.acprop(1e-3)
      >>> params = {"w": jnp.ones(3)}
      >>> updates, state = tx.update({"w": jnp.ones(3)}, tx.init(params), params)

    Reference: Zhuang et al., "Momentum Centering and Asynchronous Update for Adaptive Gradient
    Methods" (NeurIPS 2021), arXiv:2110.05454.
    """
    return chain(
        scale_by_acprop(b1, b2, eps, eps_root, nu_dtype=nu_dtype, mu_dtype=mu_dtype),
        weight_decay_tx(weight_decay, mask),
        scale_by_learning_rate(learning_rate),
    )


__all__ = ["ScaleByAcpropState", "acprop", "scale_by_acprop"]
