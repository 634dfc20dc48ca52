"""Adam and its direct relatives on the moment engine: Adam (and NAdam), AdaMax, AMSGrad, and
Adam in the "ε-hat" form of nnabla, TensorFlow 1 and RETURNN.

The moment bookkeeping (state, EMAs, stored-dtype reads, AMSGrad maximum) is `_moments.py`'s;
each rule here only says how its second statistic moves and how the update is formed. Gradients
are widened to float32 (float64 and complex stay as they are) before a rule is evaluated, and only
the results are cast: updates to the gradients' dtype, buffers to the dtype they were created
with. So a tiny float16 gradient does not underflow to a zero second moment and an infinite
update.

Kingma & Ba give two ways to write Adam's step: Algorithm 1 divides the bias-corrected moments,
:math:`\\hat m / (\\sqrt{\\hat v} + \\epsilon)` (Optax, PyTorch, `scale_by_adam`), while the formula
before their Section 2.1 folds both corrections into the step size,
:math:`\alpha \\sqrt{1-\beta_2^t}/(1-\beta_1^t) \\cdot m / (\\sqrt v + \\hat\\epsilon)`
(`scale_by_adam_eps_hat`). They differ in where :math:`\\epsilon` sits, so no constant `eps` maps
one onto the other.
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp

from .._base._checks import check_non_negative
from .._base._numerics import bias_correction, safe_divide
from .._base._typing import ArrayLike
from ..core._transformation import GradientTransformation
from ._moments import ScaleByAdamState as ScaleByAdamState
from ._moments import ScaleByAmsgradState as ScaleByAmsgradState
from ._moments import (
    check_moments,
    eps_hat_factor,
    first_moment_estimate,
    infinity_norm,
    moment_transformation,
    second_moment,
)


def scale_by_adam(
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.999,
    eps: ArrayLike = 1e-8,
    eps_root: ArrayLike = 0.0,
    *,
    mu_dtype: Any = None,
    nu_dtype: Any = None,
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
    who = "scale_by_adam"
    check_moments(who, b1, b2, eps, mu_dtype, nu_dtype)
    check_non_negative(who, "eps_root", eps_root)

    def leaf_step_at(count):
        m_hat = first_moment_estimate(b1, count, nesterov)
        c2 = bias_correction(b2, count)
        return lambda g, m, v: m_hat(m, g) / (jnp.sqrt(v / c2 + eps_root) + eps)

    return moment_transformation(
        who, leaf_step_at, b1=b1, second=second_moment(b2), mu_dtype=mu_dtype, nu_dtype=nu_dtype
    )


def scale_by_adamax(
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.999,
    eps: ArrayLike = 1e-8,
    *,
    mu_dtype: Any = None,
    nu_dtype: Any = None,
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
    who = "scale_by_adamax"
    check_moments(who, b1, b2, eps, mu_dtype, nu_dtype)

    def leaf_step_at(count):
        c1 = bias_correction(b1, count)
        return lambda g, m, v: (m / c1) / v

    second = infinity_norm(b2, eps)
    return moment_transformation(
        who, leaf_step_at, b1=b1, second=second, mu_dtype=mu_dtype, nu_dtype=nu_dtype
    )


def scale_by_amsgrad(
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.999,
    eps: ArrayLike = 1e-8,
    eps_root: ArrayLike = 0.0,
    *,
    mu_dtype: Any = None,
    nu_dtype: Any = None,
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
    who = "scale_by_amsgrad"
    check_moments(who, b1, b2, eps, mu_dtype, nu_dtype)
    check_non_negative(who, "eps_root", eps_root)

    def leaf_step_at(count):
        c1 = bias_correction(b1, count) if bias_correction_mu else 1.0
        return lambda g, m, v_max: (m / c1) / (jnp.sqrt(v_max + eps_root) + eps)

    def max_of_at(count):  # Optax takes the maximum of the bias-corrected second moment
        if not bias_correction_nu:
            return None
        c2 = bias_correction(b2, count)
        return lambda v: v / c2

    return moment_transformation(
        who,
        leaf_step_at,
        b1=b1,
        second=second_moment(b2),
        amsgrad=True,
        max_of_at=max_of_at,
        mu_dtype=mu_dtype,
        nu_dtype=nu_dtype,
    )


def scale_by_adam_eps_hat(
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.999,
    eps: ArrayLike = 1e-8,
    *,
    bias_correction: bool = True,
    amsgrad: bool = False,
    nesterov: bool = False,
    mu_dtype: Any = None,
    nu_dtype: Any = None,
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
    who = "scale_by_adam_eps_hat"
    check_moments(who, b1, b2, eps, mu_dtype, nu_dtype)

    def leaf_step_at(count):
        k = eps_hat_factor(b1, b2, count, bias_correction)

        def leaf_step(g, m, v):
            numerator = b1 * m + (1 - b1) * g if nesterov else m
            return k * safe_divide(numerator, jnp.sqrt(v) + eps)

        return leaf_step

    return moment_transformation(
        who,
        leaf_step_at,
        b1=b1,
        second=second_moment(b2),
        amsgrad=amsgrad,
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
