r"""Adam and its direct relatives: Adam (and NAdam), AdaMax, AMSGrad, and
Adam in the "ε-hat" form of nnabla, TensorFlow 1 and RETURNN.

Each is a rule (`_rule.py`): one leaf's arithmetic, read top to bottom; the mechanism does the
state, the dtypes and the storage codecs. Gradients are widened to float32 (float64 and complex
stay as they are) before a rule is evaluated, and only the results are cast: updates to the
gradients' dtype, buffers to the dtype they were created with. So a tiny float16 gradient does not
underflow to a zero second moment and an infinite update. Each rule writes a moment with
`s.keep`, which returns it as stored: the update reads the moments as stored (as a bf16 or
8-bit buffer holds them), and rounds in Optax's order.

Kingma & Ba give two ways to write Adam's step: Algorithm 1 divides the bias-corrected moments,
:math:`\hat m / (\sqrt{\hat v} + \epsilon)` (Optax, PyTorch, `scale_by_adam`), while the formula
before their Section 2.1 folds both corrections into the step size,
:math:`\alpha \sqrt{1-\beta_2^t}/(1-\beta_1^t) \cdot m / (\sqrt v + \hat\epsilon)`
(`scale_by_adam_eps_hat`). They differ in where :math:`\epsilon` sits, so no constant `eps` maps
one onto the other.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from .._base._numerics import abs_sq, bias_correction, safe_divide, safe_increment, widen
from .._base._recipe import recorded
from .._base._typing import ArrayLike, Updates
from ..core._transformation import GradientTransformation
from ..state._quantize import MomentDType
from ._building_blocks import adam_step_size, ema
from ._rule import decay, non_negative, rule, slot


class ScaleByAdamState(NamedTuple):
    """State of `scale_by_adam` (and of adamax, yogi, radam, the ε-hat form and `bound_lr`)."""

    count: jax.Array  # type: ignore[assignment]  # int32, saturating
    mu: Updates  # first moment (EMA of g), dtype mu_dtype or the params'
    nu: Updates  # second statistic (EMA of |g|^2, or the infinity norm), dtype nu_dtype or params'


class ScaleByAmsgradState(NamedTuple):
    """State of the moment rules with `amsgrad=True` (and of `scale_by_amsgrad`)."""

    count: jax.Array  # type: ignore[assignment]  # int32, saturating
    mu: Updates  # first moment, dtype mu_dtype or the params'
    nu: Updates  # second moment, dtype nu_dtype or the params'
    nu_max: Updates  # running maximum of the second moment, dtype of nu


#: Adam's two moments: a signed first moment (`mu_dtype`), a non-negative second (`nu_dtype`).
MOMENTS = {"mu": slot(dtype="mu_dtype"), "nu": slot(dtype="nu_dtype", signed=False)}
#: With AMSGrad's running maximum of the second moment, stored like it.
AMSGRAD_MOMENTS = {**MOMENTS, "nu_max": slot(dtype="nu_dtype", signed=False)}
#: The checks every Adam-like rule shares.
CHECKS = {"b1": decay, "b2": decay, "eps": non_negative}


def amsgrad_layout(hp: dict[str, Any], state: type = ScaleByAdamState) -> tuple[type, dict]:
    """The state class and slots of a rule with an `amsgrad` option."""
    if hp.get("amsgrad"):
        return ScaleByAmsgradState, AMSGRAD_MOMENTS
    return state, MOMENTS


def bias_corrected_mu(b1: ArrayLike, t: jax.Array, nesterov: bool) -> Any:
    r"""`(m_t, g_t) -> \hat m_t` at step `t`: :math:`m_t/(1-\beta_1^t)`, or with `nesterov`
    (NAdam, Dozat 2016) :math:`\beta_1 m_t/(1-\beta_1^{t+1}) + (1-\beta_1) g_t/(1-\beta_1^t)`.
    The corrections are float32 scalars, computed once per step."""
    c1 = bias_correction(b1, t)
    if not nesterov:
        return lambda m, g: m / c1
    c1_next = bias_correction(b1, safe_increment(t))
    return lambda m, g: b1 * (m / c1_next) + (1 - b1) * (g / c1)


@rule("scale_by_adam", ScaleByAdamState, slots=MOMENTS, checks={**CHECKS, "eps_root": non_negative})
def _adam(t, *, b1, b2, eps, eps_root, nesterov):
    m_hat, c2 = bias_corrected_mu(b1, t, nesterov), bias_correction(b2, t)

    def leaf(g, s):
        m = s.keep("mu", ema(b1, g, s.mu))
        v = s.keep("nu", ema(b2, abs_sq(g), s.nu))
        return m_hat(m, g) / (jnp.sqrt(v / c2 + eps_root) + eps)

    return leaf


@rule("scale_by_adamax", ScaleByAdamState, slots=MOMENTS, checks=CHECKS)
def _adamax(t, *, b1, b2, eps):
    c1 = bias_correction(b1, t)

    def leaf(g, s):
        m = s.keep("mu", ema(b1, g, s.mu))
        v = s.keep("nu", jnp.maximum(jnp.abs(g) + eps, b2 * s.nu))
        return (m / c1) / v

    return leaf


@rule(
    "scale_by_amsgrad",
    ScaleByAmsgradState,
    slots=AMSGRAD_MOMENTS,
    checks={**CHECKS, "eps_root": non_negative},
)
def _amsgrad(t, *, b1, b2, eps, eps_root, bias_correction_mu, bias_correction_nu):
    c1 = bias_correction(b1, t) if bias_correction_mu else 1.0
    # Optax takes the maximum of the bias-corrected second moment
    c2 = bias_correction(b2, t) if bias_correction_nu else None

    def leaf(g, s):
        m = s.keep("mu", ema(b1, g, s.mu))
        v = s.keep("nu", ema(b2, abs_sq(g), s.nu))
        v_max = s.keep("nu_max", jnp.maximum(widen(s.nu_max), v if c2 is None else v / c2))
        return (m / c1) / (jnp.sqrt(v_max + eps_root) + eps)

    return leaf


@rule(
    "scale_by_adam_eps_hat",
    lambda hp: amsgrad_layout(hp)[0],
    slots=lambda hp: amsgrad_layout(hp)[1],
    checks=CHECKS,
)
def _adam_eps_hat(t, *, b1, b2, eps, corrected, amsgrad, nesterov):
    k = adam_step_size(b1, b2, t) if corrected else 1.0

    def leaf(g, s):
        m = s.keep("mu", ema(b1, g, s.mu))
        v = s.keep("nu", ema(b2, abs_sq(g), s.nu))
        if amsgrad:
            v = s.keep("nu_max", jnp.maximum(widen(s.nu_max), v))
        numerator = b1 * m + (1 - b1) * g if nesterov else m
        return k * safe_divide(numerator, jnp.sqrt(v) + eps)

    return leaf


@recorded
def scale_by_adam(
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.999,
    eps: ArrayLike = 1e-8,
    eps_root: ArrayLike = 0.0,
    *,
    mu_dtype: MomentDType | None = None,
    nu_dtype: MomentDType | None = None,
    nesterov: bool = False,
) -> GradientTransformation:
    r"""Rescale updates by Adam's bias-corrected moment estimates.

    .. math::

      m_t = \beta_1 m_{t-1} + (1-\beta_1) g_t, \qquad
      v_t = \beta_2 v_{t-1} + (1-\beta_2) |g_t|^2, \\
      \hat m_t = \frac{m_t}{1-\beta_1^t}, \qquad \hat v_t = \frac{v_t}{1-\beta_2^t}, \qquad
      u_t = \frac{\hat m_t}{\sqrt{\hat v_t + \epsilon_{root}} + \epsilon}

    With `nesterov=True` (NAdam, Dozat 2016) :math:`\hat m_t` is replaced by
    :math:`\beta_1 m_t/(1-\beta_1^{t+1}) + (1-\beta_1) g_t/(1-\beta_1^t)`. Bias corrections are
    computed in float32. Matches `optax.scale_by_adam`.

    Args:
      b1: :math:`\beta_1` in [0, 1), decay of the first moment.
      b2: :math:`\beta_2` in [0, 1), decay of the second moment.
      eps: :math:`\epsilon` >= 0 added to the denominator outside the square root.
      eps_root: :math:`\epsilon_{root}` >= 0 added inside the square root.
      mu_dtype: dtype of the first moment buffer (default: the params' dtype).
      nu_dtype: dtype of the second moment buffer (default: the params' dtype).
      nesterov: use the Nesterov (NAdam) first moment.

    Returns:
      A `GradientTransformation` with state `ScaleByAdamState(count, mu, nu)`.

    Reference: Kingma & Ba, "Adam: A Method for Stochastic Optimization" (ICLR 2015).
    """
    return _adam(
        b1=b1,
        b2=b2,
        eps=eps,
        eps_root=eps_root,
        nesterov=nesterov,
        mu_dtype=mu_dtype,
        nu_dtype=nu_dtype,
    )


@recorded
def scale_by_adamax(
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.999,
    eps: ArrayLike = 1e-8,
    *,
    mu_dtype: MomentDType | None = None,
    nu_dtype: MomentDType | None = None,
) -> GradientTransformation:
    r"""Rescale updates by AdaMax: Adam with an exponentially weighted infinity norm.

    .. math::

      m_t = \beta_1 m_{t-1} + (1-\beta_1) g_t, \qquad
      v_t = \max(|g_t| + \epsilon,\ \beta_2 v_{t-1}), \qquad
      u_t = \frac{m_t}{(1-\beta_1^t)\, v_t}

    The infinity norm needs no bias correction. Matches `optax.scale_by_adamax`. nnabla's Adamax
    takes :math:`\max(\beta_2 v, |g|)` and adds :math:`\epsilon` to the denominator instead; the
    two differ only while :math:`|g| \lesssim \epsilon`.

    Args:
      b1: :math:`\beta_1` in [0, 1), decay of the first moment.
      b2: :math:`\beta_2` in [0, 1), decay of the infinity norm.
      eps: :math:`\epsilon` >= 0, added to :math:`|g_t|` so the denominator is never zero.
      mu_dtype: dtype of the first moment buffer (default: the params' dtype).
      nu_dtype: dtype of the infinity-norm buffer (default: the params' dtype).

    Returns:
      A `GradientTransformation` with state `ScaleByAdamState(count, mu, nu)`.

    Reference: Kingma & Ba, "Adam: A Method for Stochastic Optimization" (ICLR 2015), §7.1.
    """
    return _adamax(b1=b1, b2=b2, eps=eps, mu_dtype=mu_dtype, nu_dtype=nu_dtype)


@recorded
def scale_by_amsgrad(
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.999,
    eps: ArrayLike = 1e-8,
    eps_root: ArrayLike = 0.0,
    *,
    mu_dtype: MomentDType | None = None,
    nu_dtype: MomentDType | None = None,
    bias_correction_mu: bool = True,
    bias_correction_nu: bool = True,
) -> GradientTransformation:
    r"""Rescale updates by AMSGrad: Adam with a running maximum of the second moment.

    .. math::

      m_t = \beta_1 m_{t-1} + (1-\beta_1) g_t, \qquad
      v_t = \beta_2 v_{t-1} + (1-\beta_2) |g_t|^2, \\
      \bar v_t = \max\!\left(\bar v_{t-1},\ \frac{v_t}{1-\beta_2^t}\right), \qquad
      u_t = \frac{m_t / (1-\beta_1^t)}{\sqrt{\bar v_t + \epsilon_{root}} + \epsilon}

    Each bias correction can be switched off; with both off this is the rule of the paper, of
    nnabla's `AMSGRAD(bias_correction=False)` (its default) and of RETURNN's `AMSGradOptimizer`
    (which also defaults to :math:`\beta_2 = 0.99`, :math:`\epsilon = 0`). Matches
    `optax.scale_by_amsgrad`.

    Args:
      b1: :math:`\beta_1` in [0, 1), decay of the first moment.
      b2: :math:`\beta_2` in [0, 1), decay of the second moment.
      eps: :math:`\epsilon` >= 0 added to the denominator outside the square root.
      eps_root: :math:`\epsilon_{root}` >= 0 added inside the square root.
      mu_dtype: dtype of the first moment buffer (default: the params' dtype).
      nu_dtype: dtype of the second moment and of its running maximum (default: the params').
      bias_correction_mu: divide :math:`m_t` by :math:`1-\beta_1^t`.
      bias_correction_nu: divide :math:`v_t` by :math:`1-\beta_2^t` before taking the maximum.

    Returns:
      A `GradientTransformation` with state `ScaleByAmsgradState(count, mu, nu, nu_max)`.

    Reference: Reddi, Kale & Kumar, "On the Convergence of Adam and Beyond" (ICLR 2018).
    """
    return _amsgrad(
        b1=b1,
        b2=b2,
        eps=eps,
        eps_root=eps_root,
        bias_correction_mu=bias_correction_mu,
        bias_correction_nu=bias_correction_nu,
        mu_dtype=mu_dtype,
        nu_dtype=nu_dtype,
    )


@recorded
def scale_by_adam_eps_hat(
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.999,
    eps: ArrayLike = 1e-8,
    *,
    bias_correction: bool = True,
    amsgrad: bool = False,
    nesterov: bool = False,
    mu_dtype: MomentDType | None = None,
    nu_dtype: MomentDType | None = None,
) -> GradientTransformation:
    r"""Rescale updates by Adam with its bias corrections folded into the step size (ε-hat form).

    .. math::

      m_t = \beta_1 m_{t-1} + (1-\beta_1) g_t, \qquad
      v_t = \beta_2 v_{t-1} + (1-\beta_2) |g_t|^2, \qquad
      \bar v_t = \begin{cases} \max(\bar v_{t-1}, v_t) & \text{amsgrad} \\ v_t \end{cases} \\
      u_t = k_t\, \frac{n_t}{\sqrt{\bar v_t} + \epsilon}, \qquad
      k_t = \frac{\sqrt{1-\beta_2^t}}{1-\beta_1^t} \ (\text{or 1 without bias_correction}), \qquad
      n_t = \begin{cases} \beta_1 m_t + (1-\beta_1) g_t & \text{nesterov} \\ m_t \end{cases}

    This is `scale_by_adam` with :math:`\epsilon` replaced by :math:`\epsilon\sqrt{1-\beta_2^t}`
    (Kingma & Ba's ":math:`\hat\epsilon`", the form before their Section 2.1); the AMSGrad maximum
    is taken over the uncorrected :math:`v_t`. Where the denominator is 0 (only with
    :math:`\epsilon = 0` and all gradients so far 0) the update is 0. Followed by
    `scale_by_learning_rate(lr)` it is:

    - nnabla's `Adam` (and the Adam step of `AdamW`); TF1's `AdamOptimizer`; RETURNN's
      `CustomAdamOptimizer` (whose TF updater injects `epsilon=1e-16`);
    - with `amsgrad=True`: nnabla's `AMSGRAD(bias_correction=True)`; with
      `bias_correction=False` also nnabla's default `AMSGRAD` and RETURNN's `AMSGradOptimizer`
      (`b2=0.99, eps=0`), both equal to `scale_by_amsgrad` without corrections;
    - with `nesterov=True`: RETURNN's `NadamOptimizer` (TF1 contrib's Nadam, the `use_nesterov`
      Adam kernel), which is not Dozat's NAdam of `scale_by_adam(nesterov=True)`.

    Args:
      b1: :math:`\beta_1` in [0, 1), decay of the first moment.
      b2: :math:`\beta_2` in [0, 1), decay of the second moment.
      eps: :math:`\epsilon` >= 0 added to :math:`\sqrt{\bar v_t}`.
      bias_correction: use :math:`k_t`; without it :math:`k_t = 1`.
      amsgrad: divide by the running maximum of the second moment.
      nesterov: use :math:`\beta_1 m_t + (1-\beta_1) g_t` as the numerator.
      mu_dtype: dtype of the first moment (default: the params' dtype).
      nu_dtype: dtype of the second moment and its maximum (default: the params' dtype).

    Returns:
      A `GradientTransformation` with state `ScaleByAdamState(count, mu, nu)`, or
      `ScaleByAmsgradState(count, mu, nu, nu_max)` with `amsgrad`.

    Reference: Kingma & Ba, "Adam: A Method for Stochastic Optimization" (ICLR 2015), end of
    Section 2; nnabla `Adam` / `AMSGRAD` (`src/nbla/solver/generic/adam.cpp`, `amsgrad.cpp`);
    RETURNN `NadamOptimizer`, `AMSGradOptimizer` (`returnn/tf/updater.py`).
    """
    return _adam_eps_hat(
        b1=b1,
        b2=b2,
        eps=eps,
        corrected=bias_correction,
        amsgrad=amsgrad,
        nesterov=nesterov,
        mu_dtype=mu_dtype,
        nu_dtype=nu_dtype,
    )


__all__ = [
    "ScaleByAdamState",
    "ScaleByAmsgradState",
    "scale_by_adam",
    "scale_by_adam_eps_hat",
    "scale_by_adamax",
    "scale_by_amsgrad",
]
