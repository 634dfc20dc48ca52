r"""Adam in the "epsilon hat" form of nnabla, TensorFlow 1 and RETURNN.

Kingma & Ba give two equivalent-looking ways to write Adam's step: Algorithm 1 divides the
bias-corrected moments, :math:`\hat m / (\sqrt{\hat v} + \epsilon)` (Optax, PyTorch,
`scale_by_adam`), while the formula just before their Section 2.1 folds both corrections into the
step size, :math:`\alpha \sqrt{1-\beta_2^t}/(1-\beta_1^t) \cdot m / (\sqrt v + \hat\epsilon)`.
The two differ in where :math:`\epsilon` sits: :math:`\hat\epsilon = \epsilon \sqrt{1-\beta_2^t}`,
which changes with the step, so no constant `eps` maps one onto the other. nnabla's `Adam`,
`AdamW`, `AMSGRAD` and `AMSBound`, TF1's `AdamOptimizer` and RETURNN's `CustomAdamOptimizer`,
`NadamOptimizer` and `AMSGradOptimizer` use the second form. The moment helpers here are shared
with `bound_lr` (AdaBound), which clips the same per-element step size.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from .._core import GradientTransformation
from .._numerics import abs_sq, as_stored, bias_correction, safe_increment, widen, zero_count
from .._typing import ArrayLike, Params
from ..tree import assert_same_structure, map_split, zeros_like
from ._adam import ScaleByAdamState, ScaleByAmsgradState, _check_moments, _ema


def init_moments(
    params: Params, amsgrad: bool, mu_dtype: Any, nu_dtype: Any
) -> ScaleByAdamState | ScaleByAmsgradState:
    """Zero first and second moments (and their running maximum with `amsgrad`)."""
    if amsgrad:
        return ScaleByAmsgradState(
            count=zero_count(),
            mu=zeros_like(params, mu_dtype),
            nu=zeros_like(params, nu_dtype),
            nu_max=zeros_like(params, nu_dtype),
        )
    return ScaleByAdamState(
        count=zero_count(), mu=zeros_like(params, mu_dtype), nu=zeros_like(params, nu_dtype)
    )


def step_moments(
    who: str,
    b1: ArrayLike,
    b2: ArrayLike,
    updates: Any,
    state: ScaleByAdamState | ScaleByAmsgradState,
    leaf_step: Any,
) -> tuple[Any, ScaleByAdamState | ScaleByAmsgradState]:
    r"""One step of the moments of `state`; `leaf_step(g, m_t, v_eff)` gives each leaf's update.

    `g` and `m_t` are widened (float32 at least); `v_eff` is :math:`v_t`, or with AMSGrad the
    running maximum :math:`\max(\bar v_{t-1}, v_t)`. Buffers keep their dtypes and updates are
    cast to the gradients' dtypes.
    """
    assert_same_structure(who, updates=updates, **{"state.mu": state.mu})
    amsgrad = isinstance(state, ScaleByAmsgradState)

    def leaf(g, m, v, *v_max):
        gw = widen(g)
        m_new = as_stored(_ema(b1, gw, m), m)
        v_new = as_stored(_ema(b2, abs_sq(gw), v), v)
        v_eff = as_stored(jnp.maximum(widen(v_max[0]), v_new), v_max[0]) if v_max else v_new
        u = leaf_step(gw, m_new, v_eff)
        out = (u.astype(g.dtype), m_new.astype(m.dtype), v_new.astype(v.dtype))
        return (*out, v_eff.astype(v_max[0].dtype)) if v_max else out

    count = safe_increment(state.count)
    if amsgrad:
        assert isinstance(state, ScaleByAmsgradState)
        u, mu, nu, nu_max = map_split(leaf, 4, updates, state.mu, state.nu, state.nu_max)
        return u, ScaleByAmsgradState(count=count, mu=mu, nu=nu, nu_max=nu_max)
    u, mu, nu = map_split(leaf, 3, updates, state.mu, state.nu)
    return u, ScaleByAdamState(count=count, mu=mu, nu=nu)


def eps_hat_factor(b1: ArrayLike, b2: ArrayLike, count: jax.Array, enabled: bool) -> Any:
    r""":math:`\sqrt{1-\beta_2^t}/(1-\beta_1^t)` in float32 at step `count`, or 1."""
    if not enabled:
        return 1.0
    return jnp.sqrt(bias_correction(b2, count)) / bias_correction(b1, count)


def safe_divide(numerator: jax.Array, denominator: jax.Array) -> jax.Array:
    r"""`numerator / denominator`, and 0 where the denominator is 0.

    Used where the denominator is :math:`\sqrt{v} + \epsilon` with :math:`\epsilon = 0`: it is 0
    only if every gradient so far was 0, and then so is the first moment (RETURNN's AMSGrad with
    its default `epsilon=0` divides 0 by 0 there).
    """
    nonzero = denominator != 0
    return jnp.where(nonzero, numerator / jnp.where(nonzero, denominator, 1.0), 0.0)


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
    _check_moments(who, b1, b2, eps)

    def init(params):
        return init_moments(params, amsgrad, mu_dtype, nu_dtype)

    def update(updates, state, params=None, **extra_args):
        del params, extra_args
        k = eps_hat_factor(b1, b2, safe_increment(state.count), bias_correction)

        def leaf_step(g, m, v):
            numerator = b1 * m + (1 - b1) * g if nesterov else m
            return k * safe_divide(numerator, jnp.sqrt(v) + eps)

        return step_moments(who, b1, b2, updates, state, leaf_step)

    return GradientTransformation(init, update)


__all__ = ["scale_by_adam_eps_hat"]
