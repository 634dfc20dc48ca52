"""Adam variants: AdaBelief, Yogi, RAdam and NovoGrad.

They share Adam's first moment and differ in the second: the spread of the gradient around its
mean (AdaBelief), an additive rather than multiplicative update (Yogi), a variance rectification
(RAdam), or one scalar per parameter tensor (NovoGrad). Arithmetic is float32 or wider; results
are cast to the gradients' dtype and buffers keep the dtype they were created with.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .._base._checks import check_in_range, check_non_negative, concrete
from .._base._typing import ArrayLike, ScalarOrSchedule, Updates
from ..core._transformation import GradientTransformation
from ..state import _quantize
from ..tree import assert_same_structure, map_split
from ._moments import (
    belief_moment,
    check_moments,
    first_moment_estimate,
    moment_transformation,
    rectification,
    second_moment,
    yogi_moment,
)
from ._tier import (
    bias_correction,
    check_float_dtype,
    ema,
    moment_buffers,
    read,
    require_params,
    safe_increment,
    stored,
    value_at,
    widen,
    zero_count,
)


class ScaleByBeliefState(NamedTuple):
    """State of `scale_by_belief`."""

    count: jax.Array  # type: ignore[assignment]  # int32, saturating
    mu: Updates  # first moment, dtype mu_dtype or the params'
    nu: Updates  # EMA of the squared prediction error |g - m|^2 (+ eps_root each step)


class ScaleByNovogradState(NamedTuple):
    """State of `scale_by_novograd`."""

    count: jax.Array  # type: ignore[assignment]  # int32, saturating
    mu: Updates  # the momentum of normalised gradients, dtype mu_dtype or the params'
    nu: Updates  # one scalar per leaf: EMA of the squared norm of the leaf's gradient


def scale_by_belief(
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.999,
    eps: ArrayLike = 1e-16,
    eps_root: ArrayLike = 1e-16,
    *,
    nesterov: bool = False,
    amsgrad: bool = False,
    rectify: bool = False,
    accumulate_eps_root: bool = True,
    mu_dtype: Any = None,
    nu_dtype: Any = None,
) -> GradientTransformation:
    r"""Rescale updates by AdaBelief: Adam with the variance of the gradient around its EMA.

    .. math::

      m_t = \beta_1 m_{t-1} + (1-\beta_1) g_t, \qquad
      s_t = \beta_2 s_{t-1} + (1-\beta_2) |g_t - m_t|^2 + \epsilon_{root}, \qquad
      \bar s_t = \begin{cases} \max(\bar s_{t-1}, s_t) & \text{amsgrad} \\ s_t \end{cases} \\
      u_t = \frac{\hat m_t}{\sqrt{\bar s_t / (1-\beta_2^t)} + \epsilon}, \qquad
      \hat m_t = \frac{m_t}{1-\beta_1^t}

    By default :math:`\epsilon_{root}` is stored in :math:`s_t`, so it accumulates, as in the
    authors' code, in Optax and in nnabla. With `accumulate_eps_root=False` it is added once, as
    the paper writes it: :math:`\bar s_t` is replaced by :math:`\bar s_t + \epsilon_{root}` in
    the denominator and the stored :math:`s_t` has no :math:`\epsilon_{root}`. With
    `nesterov=True` :math:`\hat m_t` is NAdam's (see `scale_by_adam`). With `rectify=True`
    (RAdam's rectification, as nnabla's `AdaBelief(rectify=True)`) the update is
    :math:`r_t u_t` where RAdam's :math:`\rho_t > 4` and the momentum step :math:`\hat m_t`
    before (see `scale_by_radam` for :math:`\rho_t, r_t`). Defaults match
    `optax.scale_by_belief`; `gradtx.nnabla.adabelief` uses
    `eps_root=eps, accumulate_eps_root=False` with nnabla's `amsgrad` and `rectify` options.

    Args:
      b1: :math:`\beta_1` in [0, 1), decay of the first moment.
      b2: :math:`\beta_2` in [0, 1), decay of the second central moment.
      eps: :math:`\epsilon` >= 0 added to the denominator.
      eps_root: :math:`\epsilon_{root}` >= 0 added to :math:`s` (must be > 0 to differentiate
        through the update).
      nesterov: use the Nesterov (NAdam) first moment.
      amsgrad: divide by the running maximum of :math:`s_t`.
      rectify: RAdam's rectification (momentum SGD while :math:`\rho_t \le 4`).
      accumulate_eps_root: store :math:`\epsilon_{root}` in :math:`s_t` every step (True) or add
        it once when dividing (False).
      mu_dtype: dtype of the first moment buffer (default: the params' dtype).
      nu_dtype: dtype of the second moment buffer (default: the params' dtype).

    Returns:
      A `GradientTransformation` with state `ScaleByBeliefState(count, mu, nu)`, or
      `ScaleByAmsgradState(count, mu, nu, nu_max)` with `amsgrad` (`nu` holding :math:`s_t`).

    Reference: Zhuang et al., "AdaBelief Optimizer: Adapting Stepsizes by the Belief in Observed
    Gradients" (NeurIPS 2020); Liu et al. (ICLR 2020) for the rectification; nnabla `AdaBelief`.
    """
    who = "scale_by_belief"
    check_moments(who, b1, b2, eps, mu_dtype, nu_dtype)
    check_non_negative(who, "eps_root", eps_root)
    stored_eps_root = eps_root if accumulate_eps_root else 0.0
    read_eps_root = 0.0 if accumulate_eps_root else eps_root

    def leaf_step_at(count):
        m_hat = first_moment_estimate(b1, count, nesterov)
        c2 = bias_correction(b2, count)
        if rectify:
            adaptive, r = rectification(b2, count, 4.0, precise=True)

        def leaf_step(g, m, s):
            mh = m_hat(m, g)
            u = mh / (jnp.sqrt((s + read_eps_root) / c2) + eps)
            return jnp.where(adaptive, r * u, mh) if rectify else u

        return leaf_step

    return moment_transformation(
        who,
        leaf_step_at,
        b1=b1,
        second=belief_moment(b2, stored_eps_root),
        amsgrad=amsgrad,
        mu_dtype=mu_dtype,
        nu_dtype=nu_dtype,
        state_cls=ScaleByBeliefState,
    )


def scale_by_yogi(
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.999,
    eps: ArrayLike = 1e-3,
    eps_root: ArrayLike = 0.0,
    initial_accumulator_value: ArrayLike = 1e-6,
    *,
    mu_dtype: Any = None,
    nu_dtype: Any = None,
) -> GradientTransformation:
    r"""Rescale updates by Yogi: Adam whose second moment moves additively towards :math:`g^2`.

    .. math::

      m_t = \beta_1 m_{t-1} + (1-\beta_1) g_t, \qquad
      v_t = v_{t-1} - (1-\beta_2)\, \mathrm{sign}(v_{t-1} - |g_t|^2)\, |g_t|^2, \\
      u_t = \frac{m_t / (1-\beta_1^t)}{\sqrt{v_t / (1-\beta_2^t) + \epsilon_{root}} + \epsilon}

    Both buffers start at `initial_accumulator_value` (:math:`m_0 = v_0 = 10^{-6}` by default,
    as in Optax). Matches `optax.scale_by_yogi`.

    Args:
      b1: :math:`\beta_1` in [0, 1), decay of the first moment.
      b2: :math:`\beta_2` in [0, 1), rate of the second moment.
      eps: :math:`\epsilon` >= 0 added to the denominator outside the square root.
      eps_root: :math:`\epsilon_{root}` >= 0 added inside the square root.
      initial_accumulator_value: starting value >= 0 of both buffers.
      mu_dtype: dtype of the first moment buffer (default: the params' dtype).
      nu_dtype: dtype of the second moment buffer (default: the params' dtype).

    Returns:
      A `GradientTransformation` with state `ScaleByAdamState(count, mu, nu)`.

    Reference: Zaheer et al., "Adaptive Methods for Nonconvex Optimization" (NeurIPS 2018).
    """
    who = "scale_by_yogi"
    check_moments(who, b1, b2, eps, mu_dtype, nu_dtype)
    check_non_negative(who, "eps_root", eps_root)
    check_non_negative(who, "initial_accumulator_value", initial_accumulator_value)

    def leaf_step_at(count):
        c1, c2 = bias_correction(b1, count), bias_correction(b2, count)
        return lambda g, m, v: (m / c1) / (jnp.sqrt(v / c2 + eps_root) + eps)

    return moment_transformation(
        who,
        leaf_step_at,
        b1=b1,
        second=yogi_moment(b2),
        mu_dtype=mu_dtype,
        nu_dtype=nu_dtype,
        initial_value=initial_accumulator_value,
    )


def scale_by_radam(
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.999,
    eps: ArrayLike = 1e-8,
    eps_root: ArrayLike = 0.0,
    threshold: ArrayLike = 5.0,
    *,
    nesterov: bool = False,
    mu_dtype: Any = None,
    nu_dtype: Any = None,
) -> GradientTransformation:
    r"""Rescale updates by Rectified Adam: Adam once the variance of its step is tractable.

    .. math::

      \rho_\infty = \frac{2}{1-\beta_2} - 1, \qquad
      \rho_t = \rho_\infty - \frac{2 t \beta_2^t}{1-\beta_2^t}, \qquad
      r_t = \sqrt{\frac{(\rho_t-4)(\rho_t-2)\rho_\infty}{(\rho_\infty-4)(\rho_\infty-2)\rho_t}},
      \\
      u_t = \begin{cases}
        r_t\, \hat m_t / (\sqrt{\hat v_t + \epsilon_{root}} + \epsilon) & \rho_t \ge \tau \\
        \hat m_t & \text{otherwise (momentum SGD)}
      \end{cases}

    with Adam's :math:`m_t, v_t` and bias-corrected :math:`\hat m_t, \hat v_t` (NAdam's
    :math:`\hat m_t` with `nesterov=True`). Matches `optax.scale_by_radam`; nnabla has RAdam only as
    `AdaBelief(rectify=True)`.

    Args:
      b1: :math:`\beta_1` in [0, 1), decay of the first moment.
      b2: :math:`\beta_2` in [0, 1), decay of the second moment.
      eps: :math:`\epsilon` >= 0 added to the denominator outside the square root.
      eps_root: :math:`\epsilon_{root}` >= 0 added inside the square root.
      threshold: :math:`\tau` >= 4, the smallest :math:`\rho_t` at which the adaptive step is used
        (below 4 the rectification :math:`r_t` is undefined). The paper uses 4, Optax and the
        authors' code 5.
      nesterov: use the Nesterov (NAdam) first moment.
      mu_dtype: dtype of the first moment buffer (default: the params' dtype).
      nu_dtype: dtype of the second moment buffer (default: the params' dtype).

    Returns:
      A `GradientTransformation` with state `ScaleByAdamState(count, mu, nu)`.

    Reference: Liu et al., "On the Variance of the Adaptive Learning Rate and Beyond" (ICLR 2020).
    """
    who = "scale_by_radam"
    check_moments(who, b1, b2, eps, mu_dtype, nu_dtype)
    check_non_negative(who, "eps_root", eps_root)
    check_in_range(who, "threshold", threshold, 4.0, float("inf"))

    def leaf_step_at(count):
        m_hat = first_moment_estimate(b1, count, nesterov)
        c2 = bias_correction(b2, count)
        # float32 powers, rounded as Optax's jitted update does, eagerly and under jit
        adaptive, r = rectification(b2, count, threshold, precise=False)

        def leaf_step(g, m, v):
            mh = m_hat(m, g)
            return jnp.where(adaptive, r * mh / (jnp.sqrt(v / c2 + eps_root) + eps), mh)

        return leaf_step

    return moment_transformation(
        who, leaf_step_at, b1=b1, second=second_moment(b2), mu_dtype=mu_dtype, nu_dtype=nu_dtype
    )


def _is_zero(value: Any) -> bool:
    arr = concrete(value)
    return arr is not None and bool(np.all(arr == 0))


def scale_by_novograd(
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.25,
    eps: ArrayLike = 1e-8,
    eps_root: ArrayLike = 0.0,
    weight_decay: ScalarOrSchedule = 0.0,
    *,
    mu_dtype: Any = None,
    nu_dtype: Any = None,
) -> GradientTransformation:
    r"""Rescale updates by NovoGrad: momentum of gradients normalised per parameter tensor.

    For each parameter tensor (leaf) :math:`w` with gradient :math:`g_t`:

    .. math::

      v_t = \beta_2 v_{t-1} + (1-\beta_2) \|g_t\|^2 \quad (v_1 = \|g_1\|^2), \\
      m_t = \beta_1 m_{t-1} + \frac{g_t}{\sqrt{v_t + \epsilon_{root}} + \epsilon}
        + \lambda_t w \quad (m_0 = 0), \qquad u_t = m_t

    :math:`v_t` is one scalar per leaf, so the state is about half of Adam's. Matches
    `optax.scale_by_novograd`; here `weight_decay` may also be a schedule.

    Args:
      b1: :math:`\beta_1` in [0, 1), decay of the momentum.
      b2: :math:`\beta_2` in [0, 1), decay of the squared gradient norms.
      eps: :math:`\epsilon` >= 0 added to the denominator outside the square root.
      eps_root: :math:`\epsilon_{root}` >= 0 added inside the square root.
      weight_decay: :math:`\lambda` >= 0, a float or a schedule `count -> rate`, applied inside
        the momentum. When it is not zero, `update` needs `params`.
      mu_dtype: dtype of the momentum buffer (default: the params' dtype), or
        `gradtx.quantized()` for block-wise 8-bit storage (signed code).
      nu_dtype: float dtype of the per-leaf norm scalars (default: the params' dtype).

    Returns:
      A `GradientTransformation` with state `ScaleByNovogradState(count, mu, nu)`.

    Reference: Ginsburg et al., "Stochastic Gradient Methods with Layer-wise Adaptive Moments for
    Training of Deep Networks" (2019), arXiv:1905.11286.
    """
    who = "scale_by_novograd"
    check_moments(who, b1, b2, eps, mu_dtype, nu_dtype)
    check_non_negative(who, "eps_root", eps_root)
    check_non_negative(who, "weight_decay", weight_decay)
    check_float_dtype(who, "nu_dtype", nu_dtype)  # one scalar per leaf: nothing to quantize
    uses_params = not _is_zero(weight_decay)

    def init(params):
        return ScaleByNovogradState(
            count=zero_count(),
            mu=moment_buffers(params, mu_dtype, signed=True),
            nu=jax.tree.map(lambda p: jnp.zeros([], nu_dtype or p.dtype), params),
        )

    def update(updates, state, params=None, **extra_args):
        del extra_args
        assert_same_structure(who, updates=updates, **{"state.mu": _quantize.as_leaves(state.mu)})
        count = safe_increment(state.count)
        first = count == 1
        lam = value_at(weight_decay, state.count)

        def leaf(g, p, m, n):
            gw = widen(g)
            sq = jnp.linalg.norm(gw) ** 2  # rounds as Optax does (a plain sum of squares does not)
            n_new = jnp.where(first, sq, ema(b2, sq, n))
            step = gw / (jnp.sqrt(n_new + eps_root) + eps)
            if p is not None:
                step = step + lam * widen(jnp.asarray(p))
            m_buf, m_new = stored(jnp.where(first, step, b1 * read(m) + step), m)
            return m_new.astype(g.dtype), m_buf, n_new.astype(n.dtype)

        if uses_params:
            params = require_params(who, params)
            assert_same_structure(who, updates=updates, params=params)
            out = map_split(leaf, 3, updates, params, state.mu, state.nu)
        else:
            out = map_split(lambda g, m, n: leaf(g, None, m, n), 3, updates, state.mu, state.nu)
        updates, mu, nu = out
        return updates, ScaleByNovogradState(count=count, mu=mu, nu=nu)

    return GradientTransformation(init, update)


__all__ = [
    "ScaleByBeliefState",
    "ScaleByNovogradState",
    "scale_by_belief",
    "scale_by_novograd",
    "scale_by_radam",
    "scale_by_yogi",
]
