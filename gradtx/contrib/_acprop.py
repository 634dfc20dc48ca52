"""ACProp: AdaBelief's centred second moment, applied asynchronously (from the previous step)."""

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from .._base._checks import alias_errors, check_in_range, check_non_negative
from .._base._numerics import abs_sq, bias_correction, safe_increment, widen, zero_count
from .._base._typing import ArrayLike, ScalarOrSchedule, Updates
from ..core._transformation import GradientTransformation, chain
from ..transforms._decay import weight_decay as weight_decay_tx
from ..transforms._scaling import scale_by_learning_rate
from ..transforms._tier import check_moment_dtype, ema, moment_buffers, read, store
from ..tree import assert_same_structure, map_split


class ScaleByAcpropState(NamedTuple):
    """State of `scale_by_acprop` (the fields of Optax's `ScaleByBeliefState`)."""

    count: jax.Array  # type: ignore[assignment]  # int32, saturating
    mu: Updates  # EMA of g, the params' dtype
    nu: Updates  # EMA of |g_t - m_{t-1}|^2 (+ eps_root each step), nu_dtype (see below)


def _nu_buffers(params: Any, nu_dtype: Any) -> Any:
    if nu_dtype is not None:
        return moment_buffers(params, nu_dtype, signed=False)
    half = jnp.dtype(jnp.float16)
    return jax.tree.map(
        lambda x: moment_buffers(x, jnp.float32 if jnp.result_type(x) == half else None),
        params,
    )


def scale_by_acprop(
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.999,
    eps: ArrayLike = 1e-16,
    eps_root: ArrayLike = 1e-16,
    *,
    nu_dtype: Any = None,
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

    Returns:
      A `GradientTransformation` with state `ScaleByAcpropState(count, mu, nu)`.

    Reference: Zhuang et al., "Momentum Centering and Asynchronous Update for Adaptive Gradient
    Methods" (NeurIPS 2021), arXiv:2110.05454.
    """
    who = "scale_by_acprop"
    check_in_range(who, "b1", b1, 0.0, 1.0, high_open=True)
    check_in_range(who, "b2", b2, 0.0, 1.0, high_open=True)
    check_non_negative(who, "eps", eps)
    check_non_negative(who, "eps_root", eps_root)
    check_moment_dtype(who, "nu_dtype", nu_dtype)

    def init(params):
        return ScaleByAcpropState(
            count=zero_count(), mu=moment_buffers(params), nu=_nu_buffers(params, nu_dtype)
        )

    def update(updates, state, params=None, **extra_args):
        del params, extra_args
        assert_same_structure(who, updates=updates, **{"state.mu": state.mu})
        first = state.count == 0
        # The previous step's bias correction; at the first step the denominator is 1.
        c2 = bias_correction(b2, jnp.maximum(state.count, 1))

        def leaf(g, m, s):
            gw, s_old = widen(g), read(s)
            m_buf = store(ema(b1, gw, m), m)
            s_buf = store(ema(b2, abs_sq(gw - widen(m)), s_old) + eps_root, s)
            s_hat = jnp.where(first, 1.0, widen(s_old) / c2)
            u = gw / (jnp.sqrt(s_hat) + eps)
            return u.astype(g.dtype), m_buf, s_buf

        updates, mu, nu = map_split(leaf, 3, updates, state.mu, state.nu)
        return updates, ScaleByAcpropState(count=safe_increment(state.count), mu=mu, nu=nu)

    return GradientTransformation(init, update)


@alias_errors(renamed={"weight_decay: rate": "weight_decay"})
def acprop(
    learning_rate: ScalarOrSchedule,
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.999,
    eps: ArrayLike = 1e-16,
    eps_root: ArrayLike = 1e-16,
    weight_decay: ScalarOrSchedule = 0.0,
    mask: Any = None,
    *,
    nu_dtype: Any = None,
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
        scale_by_acprop(b1, b2, eps, eps_root, nu_dtype=nu_dtype),
        weight_decay_tx(weight_decay, mask),
        scale_by_learning_rate(learning_rate),
    )


__all__ = ["ScaleByAcpropState", "acprop", "scale_by_acprop"]
