"""Adaptive per-coordinate optimizers: Adagrad, Adadelta, RMSprop and Adafactor."""

import jax.numpy as jnp

from .._base._checks import (
    alias_errors,
    check_in_range,
    check_int,
    check_non_negative,
    check_positive,
)
from .._base._typing import ArrayLike, DType, ScalarOrSchedule
from ..core._transformation import GradientTransformation, chain, identity
from ..state._quantize import MomentDType
from ..transforms._adaptive import (
    scale_by_adadelta,
    scale_by_grad_variance,
    scale_by_rms,
    scale_by_rss,
    scale_by_stddev,
)
from ..transforms._clipping import clip_by_block_rms
from ..transforms._decay import weight_decay as weight_decay_tx
from ..transforms._factored import scale_by_factored_rms
from ..transforms._momentum import trace
from ..transforms._scaling import scale, scale_by_learning_rate
from ..transforms._trust_ratio import scale_by_param_block_rms
from ..tree._patterns import MaskOrFn
from ..wrappers._ema import ema


@alias_errors
def adagrad(
    learning_rate: ScalarOrSchedule,
    initial_accumulator_value: ArrayLike = 0.1,
    eps: ArrayLike = 1e-7,
    *,
    eps_in_sqrt: bool = True,
) -> GradientTransformation:
    r"""Adagrad: per-coordinate step sizes from the sum of all past squared gradients.

    .. math::

      G_t = G_{t-1} + g_t^2, \qquad w_t = w_{t-1} - \eta_t\, \frac{g_t}{\sqrt{G_t + \epsilon}}

    `chain(scale_by_rss(initial_accumulator_value, eps), scale_by_learning_rate(learning_rate))`.
    Matches `optax.adagrad`. nnabla's `Adagrad(lr=1e-2, eps=1e-8)` is
    `adagrad(1e-2, initial_accumulator_value=0.0, eps=1e-8, eps_in_sqrt=False)`.

    Args:
      learning_rate: :math:`\eta` >= 0, a float or a schedule `count -> lr`.
      initial_accumulator_value: :math:`G_0` >= 0.
      eps: :math:`\epsilon` >= 0.
      eps_in_sqrt: add `eps` inside the square root (Optax) or outside (nnabla, PyTorch).

    Returns:
      A `GradientTransformation`.

    Example:
      >>> import jax.numpy as jnp, gradtx
      >>> tx = gradtx.adagrad(0.1)
      >>> params = {"w": jnp.array([1.0, -2.0])}
      >>> state = tx.init(params)
      >>> updates, state = tx.update({"w": jnp.array([0.3, -0.4])}, state)
      >>> gradtx.apply_updates(params, updates)["w"]
      Array([ 0.9311753, -1.9215536], dtype=float32)

    Reference: Duchi, Hazan & Singer, "Adaptive Subgradient Methods for Online Learning and
    Stochastic Optimization" (JMLR 2011).
    """
    check_non_negative("adagrad", "learning_rate", learning_rate)
    return chain(
        scale_by_rss(initial_accumulator_value, eps, eps_in_sqrt=eps_in_sqrt),
        scale_by_learning_rate(learning_rate),
    )


@alias_errors
def adadelta(
    learning_rate: ScalarOrSchedule | None = None,
    rho: ArrayLike = 0.9,
    eps: ArrayLike = 1e-6,
    weight_decay: ScalarOrSchedule = 0.0,
    weight_decay_mask: MaskOrFn | None = None,
) -> GradientTransformation:
    r"""Adadelta: step sizes from the ratio of running RMS of past steps and of gradients.

    .. math::

      E[g^2]_t = \rho E[g^2]_{t-1} + (1-\rho) g_t^2, \qquad
      \Delta_t = \frac{\sqrt{E[\Delta^2]_{t-1} + \epsilon}}{\sqrt{E[g^2]_t + \epsilon}}\, g_t,
      \qquad E[\Delta^2]_t = \rho E[\Delta^2]_{t-1} + (1-\rho) \Delta_t^2, \qquad
      w_t = w_{t-1} - \eta_t \Delta_t

    with :math:`g_t` the gradient plus `weight_decay` times the parameters (coupled L2).
    `chain(weight_decay(weight_decay, weight_decay_mask), scale_by_adadelta(rho, eps),
    scale_by_learning_rate(learning_rate))`. Matches `optax.adadelta` when a learning rate is
    given. Without one the step is the paper's (:math:`\eta = 1`, descending); Optax 0.2.8 then
    leaves out the learning-rate scaling *and its sign flip*, so `optax.adadelta()` ascends.
    nnabla's `Adadelta(lr=1.0, decay=0.95, eps=1e-6)` is `adadelta(1.0, rho=0.95)`.

    Args:
      learning_rate: :math:`\eta` >= 0 (float or schedule), or None for :math:`\eta = 1`.
      rho: :math:`\rho` in [0, 1).
      eps: :math:`\epsilon` >= 0.
      weight_decay: coupled L2 rate >= 0, a float or a schedule.
      weight_decay_mask: which parameters decay (boolean tree, callable or glob pattern(s));
        None decays all.

    Returns:
      A `GradientTransformation`.

    Example:
      >>> import jax.numpy as jnp, gradtx
      >>> tx = gradtx.adadelta(1.0)
      >>> params = {"w": jnp.array([1.0, -2.0])}
      >>> state = tx.init(params)
      >>> updates, state = tx.update({"w": jnp.array([0.3, -0.4])}, state, params)
      >>> gradtx.apply_updates(params, updates)["w"]
      Array([ 0.9968379, -1.9968379], dtype=float32)

    Reference: Zeiler, "ADADELTA: An Adaptive Learning Rate Method" (arXiv:1212.5701, 2012).
    """
    who = "adadelta"
    check_non_negative(who, "learning_rate", learning_rate)
    check_in_range(who, "rho", rho, 0.0, 1.0, high_open=True)
    check_non_negative(who, "eps", eps)
    check_non_negative(who, "weight_decay", weight_decay)
    return chain(
        weight_decay_tx(weight_decay, weight_decay_mask),
        scale_by_adadelta(rho, eps),
        scale_by_learning_rate(1.0 if learning_rate is None else learning_rate),
    )


@alias_errors
def rmsprop(
    learning_rate: ScalarOrSchedule,
    decay: ArrayLike = 0.9,
    eps: ArrayLike = 1e-8,
    initial_scale: ArrayLike = 0.0,
    eps_in_sqrt: bool = True,
    centered: bool = False,
    momentum: ScalarOrSchedule | None = None,
    nesterov: bool = False,
    bias_correction: bool = False,
) -> GradientTransformation:
    r"""RMSprop: divide gradients by the root of a running average of their squares.

    .. math::

      \nu_t = \rho\, \nu_{t-1} + (1-\rho) g_t^2, \qquad
      s_t = -\eta_t \frac{g_t}{\sqrt{\nu_t - \bar g_t^2 + \epsilon}}, \qquad
      m_t = s_t + \mu\, m_{t-1}, \qquad w_t = w_{t-1} + m_t

    with :math:`\bar g_t = \rho \bar g_{t-1} + (1-\rho) g_t` when `centered` and 0 otherwise,
    and :math:`m_t = s_t` without `momentum`. `chain(scale_by_rms(...) or scale_by_stddev(...),
    scale_by_learning_rate(learning_rate), trace(momentum, nesterov) or identity())`: the
    momentum sees the learning rate, as in PyTorch and Optax. Matches `optax.rmsprop`.

    Seed-system equivalents: nnabla's `RMSprop(lr, decay=0.9, eps=1e-8)` is
    `rmsprop(lr, 0.9, 1e-8, eps_in_sqrt=False)`; nnabla's `RMSpropGraves(lr=1e-4, decay=0.95,
    momentum=0.9, eps=1e-4)` (Graves, 2013) is `rmsprop(1e-4, 0.95, 1e-4, centered=True,
    momentum=0.9)`.

    Args:
      learning_rate: :math:`\eta` >= 0, a float or a schedule.
      decay: :math:`\rho` in [0, 1).
      eps: :math:`\epsilon` >= 0.
      initial_scale: :math:`\nu_0` >= 0.
      eps_in_sqrt: add `eps` inside the square root (default) or outside it.
      centered: divide by the running standard deviation instead of the RMS.
      momentum: :math:`\mu` in [0, 1] (float or schedule), or None for no momentum.
      nesterov: Nesterov momentum (needs `momentum`).
      bias_correction: bias-correct the running averages (see `scale_by_rms`).

    Returns:
      A `GradientTransformation`.

    Example:
      >>> import jax.numpy as jnp, gradtx
      >>> tx = gradtx.rmsprop(0.01, momentum=0.9)
      >>> params = {"w": jnp.array([1.0, -2.0])}
      >>> state = tx.init(params)
      >>> updates, state = tx.update({"w": jnp.array([0.3, -0.4])}, state)
      >>> gradtx.apply_updates(params, updates)["w"]
      Array([ 0.96837723, -1.9683772 ], dtype=float32)

    Reference: Tieleman & Hinton, Lecture 6.5 of "Neural Networks for Machine Learning" (2012).
    """
    who = "rmsprop"
    check_non_negative(who, "learning_rate", learning_rate)
    check_in_range(who, "decay", decay, 0.0, 1.0, high_open=True)
    check_non_negative(who, "eps", eps)
    check_non_negative(who, "initial_scale", initial_scale)
    if momentum is not None:
        check_in_range(who, "momentum", momentum, 0.0, 1.0)
    elif nesterov:
        raise ValueError(f"{who}: nesterov=True needs a momentum value, got momentum=None")
    return chain(
        scale_by_rms(
            decay,
            eps,
            initial_scale,
            eps_in_sqrt=eps_in_sqrt,
            bias_correction=bias_correction,
            centered=centered,
        ),
        scale_by_learning_rate(learning_rate),
        trace(momentum, nesterov) if momentum is not None else identity(),
    )


@alias_errors(renamed={"ema: accumulator_dtype": "dtype_momentum"})
def adafactor(
    learning_rate: ScalarOrSchedule | None = None,
    min_dim_size_to_factor: int = 128,
    decay_rate: ArrayLike = 0.8,
    decay_offset: ArrayLike = 0,
    multiply_by_parameter_scale: bool = True,
    clipping_threshold: ArrayLike | None = 1.0,
    momentum: ArrayLike | None = None,
    dtype_momentum: DType = jnp.float32,
    weight_decay_rate: ScalarOrSchedule | None = None,
    eps: ArrayLike = 1e-30,
    factored: bool = True,
    weight_decay_mask: MaskOrFn | None = None,
) -> GradientTransformation:
    r"""Adafactor: RMS scaling with a factored (row and column) second moment, sublinear memory.

    .. math::

      \hat u_t = \frac{g_t}{\sqrt{\hat V_t}}, \qquad
      \tilde u_t = \frac{\hat u_t}{\max(1, \mathrm{rms}(\hat u_t)/d)}\, \eta_t
        \max(\mathrm{rms}(w_{t-1}), 10^{-3}), \qquad
      m_t = \beta m_{t-1} + (1-\beta)\tilde u_t, \qquad
      w_t = w_{t-1} - (m_t + \lambda_t w_{t-1})

    where :math:`\hat V_t` is the factored second moment of `scale_by_factored_rms` (rank >= 2
    leaves whose two largest axes have at least `min_dim_size_to_factor` elements; a full one
    elsewhere), :math:`d` the `clipping_threshold`, :math:`\beta` the `momentum` and
    :math:`\lambda` the `weight_decay_rate` (each step is left out when its option is None or
    False). It is this chain of public primitives, with an `identity()` in the place of each
    disabled step::

      chain(scale_by_factored_rms(factored, decay_rate, decay_offset, min_dim_size_to_factor, eps),
            clip_by_block_rms(clipping_threshold),
            scale_by_learning_rate(learning_rate, flip_sign=False),
            scale_by_param_block_rms(),
            ema(momentum, debias=False, accumulator_dtype=dtype_momentum),
            weight_decay(weight_decay_rate, weight_decay_mask),
            scale(-1))

    as Optax builds it. Matches `optax.adafactor` (defaults included: without a
    learning rate the step size is the parameter scale alone, the "relative step" of the paper
    without its warm-up).

    Args:
      learning_rate: :math:`\eta` >= 0 (float or schedule), or None to leave it out.
      min_dim_size_to_factor: factor only leaves whose two largest axes have at least this size.
      decay_rate: exponent :math:`\gamma` >= 0 of the second-moment decay
        :math:`1 - (t+1)^{-\gamma}`.
      decay_offset: step at which the decay schedule starts (e.g. for fine-tuning), >= 0.
      multiply_by_parameter_scale: scale steps by the RMS of the parameters.
      clipping_threshold: :math:`d` > 0 for update clipping, or None.
      momentum: :math:`\beta` in [0, 1] for an EMA of the updates, or None.
      dtype_momentum: float dtype of the momentum buffer.
      weight_decay_rate: decoupled weight decay :math:`\lambda` >= 0 (float or schedule), or None.
      eps: :math:`\epsilon` >= 0 added to the squared gradients.
      factored: factor the second moment at all.
      weight_decay_mask: which parameters decay (boolean tree, callable or glob pattern(s)).

    Returns:
      A `GradientTransformation`.

    Example:
      >>> import jax.numpy as jnp, gradtx
      >>> tx = gradtx.adafactor(learning_rate=0.1)
      >>> params = {"w": jnp.array([1.0, -2.0])}
      >>> state = tx.init(params)
      >>> updates, state = tx.update({"w": jnp.array([0.3, -0.4])}, state, params)
      >>> gradtx.apply_updates(params, updates)["w"]
      Array([ 0.8418861, -1.8418862], dtype=float32)

    Reference: Shazeer & Stern, "Adafactor: Adaptive Learning Rates with Sublinear Memory Cost"
    (ICML 2018).
    """
    who = "adafactor"
    check_non_negative(who, "learning_rate", learning_rate)
    check_int(who, "min_dim_size_to_factor", min_dim_size_to_factor, minimum=0)
    check_non_negative(who, "decay_rate", decay_rate)
    check_non_negative(who, "decay_offset", decay_offset)
    if clipping_threshold is not None:
        check_positive(who, "clipping_threshold", clipping_threshold)
    if momentum is not None:
        check_in_range(who, "momentum", momentum, 0.0, 1.0)
    check_non_negative(who, "weight_decay_rate", weight_decay_rate)
    check_non_negative(who, "eps", eps)
    return chain(
        scale_by_factored_rms(factored, decay_rate, decay_offset, min_dim_size_to_factor, eps),
        clip_by_block_rms(clipping_threshold) if clipping_threshold is not None else identity(),
        (
            scale_by_learning_rate(learning_rate, flip_sign=False)
            if learning_rate is not None
            else identity()
        ),
        scale_by_param_block_rms() if multiply_by_parameter_scale else identity(),
        (
            ema(momentum, debias=False, accumulator_dtype=dtype_momentum)
            if momentum is not None
            else identity()
        ),
        (
            weight_decay_tx(weight_decay_rate, weight_decay_mask)
            if weight_decay_rate is not None
            else identity()
        ),
        scale(-1),
    )


@alias_errors(renamed={"trace: decay": "momentum"})
def rmsprop_graves(
    learning_rate: ScalarOrSchedule = 1e-4,
    decay: ArrayLike = 0.95,
    momentum: ScalarOrSchedule = 0.9,
    eps: ArrayLike = 1e-4,
) -> GradientTransformation:
    r"""Graves' RMSprop: centred second moment, the learning rate inside the momentum.

    .. math::

      n_t = \rho n_{t-1} + (1-\rho) g_t^2, \qquad \bar g_t = \rho \bar g_{t-1} + (1-\rho) g_t,
      \\
      d_t = \mu d_{t-1} - \eta_t \frac{g_t}{\sqrt{n_t - \bar g_t^2 + \epsilon}}, \qquad
      w_t = w_{t-1} + d_t

    `chain(scale_by_stddev(decay, eps), scale_by_learning_rate(learning_rate), trace(momentum))`
    (also `rmsprop(lr, decay, eps, centered=True, momentum=momentum)`). nnabla's
    `RMSpropGraves(lr=1e-4, decay=0.95, momentum=0.9, eps=1e-4)`.

    Args:
      learning_rate: :math:`\eta_t` >= 0, a float or a schedule.
      decay: :math:`\rho` in [0, 1).
      momentum: :math:`\mu` in [0, 1], a float or a schedule.
      eps: :math:`\epsilon` >= 0, inside the square root.

    Returns:
      A `GradientTransformation`.

    Example:
      >>> import jax.numpy as jnp, numpy as np, gradtx
      >>> tx = gradtx.rmsprop_graves(0.01)
      >>> state = tx.init({"w": jnp.zeros(2)})
      >>> updates, state = tx.update({"w": jnp.array([1.0, -1.0])}, state)
      >>> print(np.asarray(updates["w"]).round(4))
      [-0.0458  0.0458]

    Reference: Graves, "Generating Sequences With Recurrent Neural Networks" (2013), eq. 38-40;
    nnabla `RMSpropGraves`.
    """
    return chain(
        scale_by_stddev(decay, eps),
        scale_by_learning_rate(learning_rate),
        trace(momentum),
    )


@alias_errors
def grad_variance_scaled(
    learning_rate: ScalarOrSchedule,
    beta1: ArrayLike = 0.9,
    beta2: ArrayLike = 0.999,
    eps: ArrayLike = 1e-8,
    *,
    mu_dtype: MomentDType | None = None,
    nu_dtype: MomentDType | None = None,
) -> GradientTransformation:
    r"""SGD with steps shrunk where the gradient deviates unusually from its mean.

    .. math::

      m_t = \beta_1 m_{t-1} + (1-\beta_1) g_t, \quad \sigma_t^2 = (g_t - m_t)^2, \quad
      v_t = \beta_2 v_{t-1} + (1-\beta_2) \sigma_t^2, \quad
      w_t = w_{t-1} - \eta_t\, g_t \min\!\left(\frac{v_t}{\sigma_t^2 + \epsilon}, 1\right)

    `chain(scale_by_grad_variance(beta1, beta2, eps), scale_by_learning_rate(learning_rate))`.
    RETURNN's `GradVarianceScaledOptimizer(beta1=0.9, beta2=0.999, epsilon=1e-8)`.

    Args:
      learning_rate: :math:`\eta_t` >= 0, a float or a schedule.
      beta1: :math:`\beta_1` in [0, 1).
      beta2: :math:`\beta_2` in [0, 1).
      eps: :math:`\epsilon` >= 0.
      mu_dtype: dtype of :math:`m` (default: the params' dtype).
      nu_dtype: dtype of :math:`v` (default: the params' dtype).

    Returns:
      A `GradientTransformation`.

    Example:
      >>> import jax.numpy as jnp, numpy as np, gradtx
      >>> tx = gradtx.grad_variance_scaled(1.0, beta2=0.5)
      >>> state = tx.init({"w": jnp.zeros(1)})
      >>> updates, state = tx.update({"w": jnp.array([2.0])}, state)
      >>> print(np.asarray(updates["w"]).round(4))  # min(0.5 sigma^2 / sigma^2, 1) = 0.5
      [-1.]

    Reference: RETURNN `GradVarianceScaledOptimizer` (`returnn/tf/updater.py`).
    """
    return chain(
        scale_by_grad_variance(beta1, beta2, eps, mu_dtype=mu_dtype, nu_dtype=nu_dtype),
        scale_by_learning_rate(learning_rate),
    )


__all__ = ["adadelta", "adafactor", "adagrad", "grad_variance_scaled", "rmsprop", "rmsprop_graves"]
