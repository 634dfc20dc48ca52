"""AdEMAMix and Simplified AdEMAMix: Adam with a slow momentum mixed into the fast one."""

from typing import NamedTuple

import jax
import jax.numpy as jnp

from .._base._checks import alias_errors
from .._base._numerics import (
    abs_sq,
    bias_correction,
    safe_increment,
    value_at,
    widen,
    zero_count,
)
from .._base._recipe import recorded
from .._base._typing import ArrayLike, Mask, ScalarOrSchedule, Updates
from ..core._transformation import GradientTransformation, chain
from ..state._quantize import MomentDType
from ..transforms._adam import CHECKS
from ..transforms._building_blocks import ema
from ..transforms._decay import weight_decay as weight_decay_tx
from ..transforms._rule import decay, non_negative, rule, slot
from ..transforms._scaling import scale_by_learning_rate


class ScaleByAdemamixState(NamedTuple):
    """State of `scale_by_ademamix` (Optax's layout)."""

    count: jax.Array  # type: ignore[assignment]  # int32, saturating: the fast EMA's steps
    count_m2: jax.Array  # int32, saturating: the step that b3 / alpha schedules see
    m1: Updates  # fast EMA of g, dtype mu_dtype or the params'
    m2: Updates  # slow EMA of g (not bias-corrected), dtype mu_dtype or the params'
    nu: Updates  # EMA of |g|^2, dtype mu_dtype or the params' (as in Optax)


class ScaleBySimplifiedAdEMAMixState(NamedTuple):
    """State of `scale_by_simplified_ademamix` (Optax's layout)."""

    t: jax.Array  # int32, saturating
    m: Updates  # accumulated momentum sum_k b1^k g_{t-k}, mu_dtype or the params' dtype
    n: Updates  # EMA of |g|^2, nu_dtype or the params' dtype


@recorded
def scale_by_ademamix(
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.999,
    b3: ScalarOrSchedule = 0.9999,
    alpha: ScalarOrSchedule = 6.0,
    eps: ArrayLike = 1e-8,
    eps_root: ArrayLike = 0.0,
    mu_dtype: MomentDType | None = None,
) -> GradientTransformation:
    r"""Rescale updates by AdEMAMix: Adam's bias-corrected fast momentum plus :math:`\alpha`
    times a slow, uncorrected momentum.

    .. math::

      m^{(1)}_t = \beta_1 m^{(1)}_{t-1} + (1-\beta_1) g_t, \qquad
      m^{(2)}_t = \beta_3 m^{(2)}_{t-1} + (1-\beta_3) g_t, \qquad
      \nu_t = \beta_2 \nu_{t-1} + (1-\beta_2) g_t^2, \\
      u_t = \frac{m^{(1)}_t / (1-\beta_1^t) + \alpha\, m^{(2)}_t}
        {\sqrt{\nu_t / (1-\beta_2^t) + \epsilon_{root}} + \epsilon}

    :math:`\beta_3` and :math:`\alpha` may be schedules (the paper warms both up). All three
    buffers use `mu_dtype`, as in Optax (a `gradtx.quantized()` spec stores them in 8 bits).
    Matches `optax.contrib.scale_by_ademamix`.

    Args:
      b1: :math:`\beta_1` in [0, 1), decay of the fast EMA.
      b2: :math:`\beta_2` in [0, 1), decay of the second moment.
      b3: :math:`\beta_3` in [0, 1), decay of the slow EMA; a float or a schedule.
      alpha: :math:`\alpha` >= 0, weight of the slow EMA; a float or a schedule.
      eps: :math:`\epsilon` >= 0 added outside the square root.
      eps_root: :math:`\epsilon_{root}` >= 0 added inside the square root.
      mu_dtype: dtype of the buffers (default: the params' dtype); a `gradtx.quantized()` spec
        stores them in 8 bits.

    Returns:
      A `GradientTransformation` with state `ScaleByAdemamixState(count, count_m2, m1, m2, nu)`.

    Reference: Pagliardini et al., "The AdEMAMix Optimizer: Better, Faster, Older" (2024),
    arXiv:2409.03137.
    """
    return _ademamix(
        b1=b1, b2=b2, b3=b3, alpha=alpha, eps=eps, eps_root=eps_root, mu_dtype=mu_dtype
    )


def _slow_schedules(state, extra_args, t, hp):
    """b3 and alpha at the slow EMA's own count (`count_m2`), which this step advances."""
    at = lambda name: value_at(hp[name], state.count_m2, who="scale_by_ademamix", name=name)
    values = {"beta3": at("b3"), "mix": at("alpha")}
    return values, {"count_m2": safe_increment(state.count_m2)}


@rule(
    "scale_by_ademamix",
    ScaleByAdemamixState,
    slots={
        "m1": slot(dtype="mu_dtype"),
        "m2": slot(dtype="mu_dtype"),
        "nu": slot(dtype="mu_dtype", signed=False),
    },
    checks={**CHECKS, "eps_root": non_negative, "b3": decay, "alpha": non_negative},
    prologue=_slow_schedules,
    fields=lambda hp: {"count_m2": zero_count()},
)
def _ademamix(t, *, b1, b2, b3, alpha, eps, eps_root, beta3, mix):
    del b3, alpha  # as schedules of count_m2: beta3, mix
    c1, c2 = bias_correction(b1, t), bias_correction(b2, t)

    def leaf(g, s):
        m1 = s.keep("m1", ema(b1, g, s.m1))
        m2 = s.keep("m2", ema(beta3, g, s.m2))
        v = s.keep("nu", ema(b2, abs_sq(g), s.nu))
        return (m1 / c1 + mix * m2) / (jnp.sqrt(v / c2 + eps_root) + eps)

    return leaf


@alias_errors(renamed={"weight_decay: rate": "weight_decay"})
def ademamix(
    learning_rate: ScalarOrSchedule,
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.999,
    b3: ScalarOrSchedule = 0.9999,
    alpha: ScalarOrSchedule = 5.0,
    eps: ArrayLike = 1e-8,
    eps_root: ArrayLike = 0.0,
    mu_dtype: MomentDType | None = None,
    weight_decay: ScalarOrSchedule = 0.0,
    mask: Mask | None = None,
) -> GradientTransformation:
    r"""AdEMAMix: AdamW with a mixture of a fast and a slow momentum.

    .. math::

      w_t = w_{t-1} - \eta_t \left( \frac{\hat m^{(1)}_t + \alpha\, m^{(2)}_t}
        {\sqrt{\hat\nu_t + \epsilon_{root}} + \epsilon} + \lambda w_{t-1} \right)

    with the buffers of `scale_by_ademamix`. `chain(scale_by_ademamix(...),
    weight_decay(weight_decay, mask), scale_by_learning_rate(learning_rate))`. Note that the
    alias's default :math:`\alpha` is 5 and the primitive's 6, as in Optax. Matches
    `optax.contrib.ademamix`.

    Args:
      learning_rate: :math:`\eta` >= 0, a float or a schedule.
      b1: :math:`\beta_1` in [0, 1), decay of the fast EMA.
      b2: :math:`\beta_2` in [0, 1), decay of the second moment.
      b3: :math:`\beta_3` in [0, 1), decay of the slow EMA (float or schedule).
      alpha: :math:`\alpha` >= 0, weight of the slow EMA (float or schedule).
      eps: :math:`\epsilon` >= 0 added outside the square root.
      eps_root: :math:`\epsilon_{root}` >= 0 added inside the square root.
      mu_dtype: dtype of the buffers (default: the params' dtype); a `gradtx.quantized()` spec
        stores them in 8 bits.
      weight_decay: :math:`\lambda` >= 0, decoupled weight decay (scaled by the learning rate).
      mask: which parameters decay (a boolean tree, a callable or glob patterns); None: all.

    Returns:
      A `GradientTransformation`.

    Example:
      >>> import jax.numpy as jnp, gradtx
      >>> tx = gradtx.contrib.ademamix(1e-2)
      >>> params = {"w": jnp.ones(3)}
      >>> updates, state = tx.update({"w": jnp.ones(3)}, tx.init(params), params)

    Reference: Pagliardini et al., "The AdEMAMix Optimizer: Better, Faster, Older" (2024),
    arXiv:2409.03137.
    """
    return chain(
        scale_by_ademamix(b1, b2, b3, alpha, eps, eps_root, mu_dtype),
        weight_decay_tx(weight_decay, mask),
        scale_by_learning_rate(learning_rate),
    )


@recorded
def scale_by_simplified_ademamix(
    b1: ArrayLike = 0.99,
    b2: ArrayLike = 0.95,
    alpha: ScalarOrSchedule = 0.0,
    eps: ArrayLike = 1e-8,
    eps_root: ArrayLike = 0.0,
    *,
    mu_dtype: MomentDType | None = None,
    nu_dtype: MomentDType | None = None,
) -> GradientTransformation:
    r"""Rescale updates by Simplified AdEMAMix: one undamped momentum plus :math:`\alpha` times
    the current gradient, over Adam's denominator.

    .. math::

      m_t = \beta_1 m_{t-1} + g_t, \qquad n_t = \beta_2 n_{t-1} + (1-\beta_2) g_t^2, \qquad
      u_t = \frac{m_t + \alpha\, g_t}{\sqrt{n_t / (1-\beta_2^t) + \epsilon_{root}} + \epsilon}

    The momentum is a plain discounted sum (no :math:`1-\beta_1` factor, no bias correction).
    Matches `optax.contrib.scale_by_simplified_ademamix`.

    Args:
      b1: :math:`\beta_1` in [0, 1), discount of the momentum.
      b2: :math:`\beta_2` in [0, 1), decay of the second moment.
      alpha: :math:`\alpha` >= 0, weight of the current gradient; a float or a schedule.
      eps: :math:`\epsilon` >= 0 added outside the square root.
      eps_root: :math:`\epsilon_{root}` >= 0 added inside the square root.
      mu_dtype: dtype of the momentum `m` (default: the params' dtype); a `gradtx.quantized()`
        spec stores it in 8 bits. Not in Optax, whose buffers keep the params' dtype.
      nu_dtype: the same for the second moment `n`.

    Returns:
      A `GradientTransformation` with state `ScaleBySimplifiedAdEMAMixState(t, m, n)`.

    Reference: Morwani et al., "Connections between Schedule-Free Optimizers, AdEMAMix, and
    Accelerated SGD Variants" (2025), arXiv:2502.02431.
    """
    return _simplified_ademamix(
        b1=b1, b2=b2, alpha=alpha, eps=eps, eps_root=eps_root, mu_dtype=mu_dtype, nu_dtype=nu_dtype
    )


@rule(
    "scale_by_simplified_ademamix",
    ScaleBySimplifiedAdEMAMixState,
    slots={"m": slot(dtype="mu_dtype"), "n": slot(dtype="nu_dtype", signed=False)},
    checks={**CHECKS, "eps_root": non_negative, "alpha": non_negative},
    schedules=("alpha",),
)
def _simplified_ademamix(t, *, b1, b2, alpha, eps, eps_root):
    c2 = bias_correction(b2, t)

    def leaf(g, s):
        # widened: b1 * m in float32 for a bf16 buffer too, as before the rule (golden record)
        m = s.keep("m", g + b1 * widen(s.m))
        g2 = abs_sq(g)
        n = s.keep("n", g2 + b2 * (widen(s.n) - g2))
        return (m + alpha * g) / (jnp.sqrt(n / c2 + eps_root) + eps)

    return leaf


@alias_errors(renamed={"weight_decay: rate": "weight_decay"})
def simplified_ademamix(
    learning_rate: ScalarOrSchedule,
    b1: ArrayLike = 0.99,
    b2: ArrayLike = 0.95,
    alpha: ScalarOrSchedule = 0.0,
    eps: ArrayLike = 1e-8,
    eps_root: ArrayLike = 0.0,
    weight_decay: ScalarOrSchedule = 0.0,
    mask: Mask | None = None,
    *,
    mu_dtype: MomentDType | None = None,
    nu_dtype: MomentDType | None = None,
) -> GradientTransformation:
    r"""Simplified AdEMAMix: a single undamped momentum, mixed with the current gradient.

    .. math::

      w_t = w_{t-1} - \eta_t \left( \frac{m_t + \alpha\, g_t}
        {\sqrt{\hat n_t + \epsilon_{root}} + \epsilon} + \lambda w_{t-1} \right)

    with the buffers of `scale_by_simplified_ademamix`; :math:`\alpha = 0` is Adam with a
    rescaled learning rate and :math:`\beta_1`. `chain(scale_by_simplified_ademamix(...),
    weight_decay(weight_decay, mask), scale_by_learning_rate(learning_rate))`. Matches
    `optax.contrib.simplified_ademamix`.

    Args:
      learning_rate: :math:`\eta` >= 0, a float or a schedule.
      b1: :math:`\beta_1` in [0, 1), discount of the momentum.
      b2: :math:`\beta_2` in [0, 1), decay of the second moment.
      alpha: :math:`\alpha` >= 0, weight of the current gradient (float or schedule).
      eps: :math:`\epsilon` >= 0 added outside the square root.
      eps_root: :math:`\epsilon_{root}` >= 0 added inside the square root.
      weight_decay: :math:`\lambda` >= 0, decoupled weight decay (scaled by the learning rate).
      mask: which parameters decay (a boolean tree, a callable or glob patterns); None: all.
      mu_dtype: dtype of the momentum (default: the params'); `gradtx.quantized()`: 8 bits.
      nu_dtype: dtype of the second moment, likewise.

    Returns:
      A `GradientTransformation`.

    Example:
      >>> import jax.numpy as jnp, gradtx
      >>> tx = gradtx.contrib.simplified_ademamix(1e-3)
      >>> params = {"w": jnp.ones(3)}
      >>> updates, state = tx.update({"w": jnp.ones(3)}, tx.init(params), params)

    Reference: Morwani et al., "Connections between Schedule-Free Optimizers, AdEMAMix, and
    Accelerated SGD Variants" (2025), arXiv:2502.02431.
    """
    return chain(
        scale_by_simplified_ademamix(
            b1, b2, alpha, eps, eps_root, mu_dtype=mu_dtype, nu_dtype=nu_dtype
        ),
        weight_decay_tx(weight_decay, mask),
        scale_by_learning_rate(learning_rate),
    )


__all__ = [
    "ScaleByAdemamixState",
    "ScaleBySimplifiedAdEMAMixState",
    "ademamix",
    "scale_by_ademamix",
    "scale_by_simplified_ademamix",
    "simplified_ademamix",
]
