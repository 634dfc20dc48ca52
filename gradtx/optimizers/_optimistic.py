"""Optimistic optimizers for min-max games: optimistic gradient descent and Optimistic Adam.

Each is a `chain` of public primitives around `scale_by_optimistic_gradient`. Names, argument
names and defaults are Optax 0.2.8's.
"""

import warnings

from jax.tree_util import SequenceKey

from .._base._checks import alias_errors, check_non_negative
from .._base._introspect import register
from .._base._numerics import last_used
from .._base._typing import ArrayLike, ScalarOrSchedule
from ..core._transformation import GradientTransformation, chain
from ..state._quantize import MomentDType
from ..transforms._adam import scale_by_adam
from ..transforms._optimistic import scale_by_optimistic_gradient
from ..transforms._scaling import scale_by_learning_rate


@alias_errors
def optimistic_gradient_descent(
    learning_rate: ScalarOrSchedule,
    alpha: ScalarOrSchedule = 1.0,
    beta: ScalarOrSchedule = 1.0,
) -> GradientTransformation:
    r"""Optimistic gradient descent: a step along the gradient extrapolated by its last change.

    .. math::  w_{t+1} = w_t - \eta_t \big((\alpha_t + \beta_t)\, g_t - \beta_t\, g_{t-1}\big)

    (:math:`g_0 = g_1`). `chain(scale_by_optimistic_gradient(alpha, beta),
    scale_by_learning_rate(learning_rate))`. Matches `optax.optimistic_gradient_descent`.

    Args:
      learning_rate: :math:`\eta` >= 0, a float or a schedule `count -> lr`.
      alpha: :math:`\alpha`, the weight of the current gradient (a float or a schedule).
      beta: :math:`\beta`, the optimism: the weight of the gradient's change (negative
        momentum).

    Returns:
      A `GradientTransformation`.

    Example:
      >>> import jax, jax.numpy as jnp, gradtx
      >>> # min over x, max over y of x * y: plain gradient descent-ascent spirals out.
      >>> tx = gradtx.optimistic_gradient_descent(0.2)
      >>> params = {"x": jnp.array(1.0), "y": jnp.array(1.0)}
      >>> state = tx.init(params)
      >>> for _ in range(200):
      ...     grads = {"x": params["y"], "y": -params["x"]}
      ...     updates, state = tx.update(grads, state, params)
      ...     params = gradtx.apply_updates(params, updates)
      >>> bool(jnp.hypot(params["x"], params["y"]) < 0.05)  # gradtx.sgd(0.2) ends near 71
      True

    Reference: Mokhtari, Ozdaglar & Pattathil, "A Unified Analysis of Extra-gradient and
    Optimistic Gradient Methods for Saddle Point Problems: Proximal Point Approach"
    (AISTATS 2020).
    """
    return chain(
        scale_by_optimistic_gradient(alpha=alpha, beta=beta),
        scale_by_learning_rate(learning_rate),
    )


@alias_errors
def optimistic_adam(
    learning_rate: ScalarOrSchedule,
    optimism: ScalarOrSchedule | None = None,
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.999,
    eps: ArrayLike = 1e-08,
    eps_root: ArrayLike = 0.0,
    mu_dtype: MomentDType | None = None,
    *,
    nesterov: bool = True,
) -> GradientTransformation:
    r"""Optimistic Adam, with Optax's first interface: `learning_rate` weighs the Adam step and
    `optimism` (default: the learning rate) its change since the last step.

    .. math::

      r_t = \frac{\hat m_t}{\sqrt{\hat v_t + \epsilon_{root}} + \epsilon}, \qquad
      w_{t+1} = w_t - \eta_t r_t - o_t (r_t - r_{t-1})

    with Adam's (by default Nesterov) moment estimates and :math:`r_0 = r_1`.
    `chain(scale_by_adam(b1, b2, eps, eps_root, mu_dtype=, nesterov=),
    scale_by_optimistic_gradient(alpha=learning_rate, beta=optimism),
    scale_by_learning_rate(1.0))`: the same algorithm as `optimistic_adam_v2(1.0,
    alpha=learning_rate, beta=optimism)`. Matches `optax.optimistic_adam`, which Optax deprecates
    in favour of `optax.optimistic_adam_v2` and which rejects schedules; here `learning_rate` and
    `optimism` may be schedules. Deprecated as in Optax: it emits Optax's `DeprecationWarning`
    (use `optimistic_adam_v2`).

    Args:
      learning_rate: :math:`\eta` >= 0, a float or a schedule.
      optimism: :math:`o`, a float or a schedule; None means `learning_rate` (as in the paper).
      b1: :math:`\beta_1` in [0, 1), decay of the first moment.
      b2: :math:`\beta_2` in [0, 1), decay of the second moment.
      eps: :math:`\epsilon` >= 0 added to the denominator outside the square root.
      eps_root: :math:`\epsilon_{root}` >= 0 added inside the square root.
      mu_dtype: dtype of the first moment (default: the params' dtype).
      nesterov: use the Nesterov (NAdam) first moment.

    Returns:
      A `GradientTransformation`; `gradtx.metrics` reports its `learning_rate` and `optimism`.

    Example:
      >>> import jax.numpy as jnp, gradtx
      >>> import warnings
      >>> with warnings.catch_warnings():
      ...     warnings.simplefilter("ignore", DeprecationWarning)
      ...     tx = gradtx.optimistic_adam(1e-2, optimism=1.0)
      >>> params = {"x": jnp.array(1.0), "y": jnp.array(2.0)}
      >>> state = tx.init(params)
      >>> updates, state = tx.update({"x": params["y"], "y": -params["x"]}, state, params)
      >>> print(round(float(updates["x"]), 4), round(float(updates["y"]), 4))
      -0.0147 0.0147

    Reference: Daskalakis et al., "Training GANs with Optimism" (ICLR 2018).
    """
    warnings.warn(
        "`optimistic_adam` is deprecated, please use `optimistic_adam_v2` instead.",
        category=DeprecationWarning,
        stacklevel=4,  # the caller of the alias (alias_errors wraps it twice)
    )
    check_non_negative("optimistic_adam", "learning_rate", learning_rate)
    optimism = learning_rate if optimism is None else optimism
    adam = scale_by_adam(b1, b2, eps, eps_root, mu_dtype=mu_dtype, nesterov=nesterov)
    tx = chain(
        adam,
        scale_by_optimistic_gradient(alpha=learning_rate, beta=optimism),
        scale_by_learning_rate(1.0),
    )

    # For `gradtx.metrics`: the learning rate and the optimism are the weights of the optimistic
    # link, as its latest update used them; the last link (a learning rate of 1) only flips the
    # sign, so it is left out of what metrics sees.
    def report(state):
        count = state[1].count
        return {
            "learning_rate": last_used(learning_rate, count, who="optimistic_adam"),
            "optimism": last_used(optimism, count, who="optimistic_adam"),
        }

    return register(tx, "chain", children=[((SequenceKey(0),), adam)], report=report)


@alias_errors
def optimistic_adam_v2(
    learning_rate: ScalarOrSchedule,
    *,
    alpha: ArrayLike = 1.0,
    beta: ArrayLike = 1.0,
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.999,
    eps: ArrayLike = 1e-08,
    eps_root: ArrayLike = 0.0,
    mu_dtype: MomentDType | None = None,
    nesterov: bool = True,
) -> GradientTransformation:
    r"""Optimistic Adam with Optax's reworked interface: a learning rate (or schedule) times the
    optimistic combination of the Adam step and its change.

    .. math::

      r_t = \frac{\hat m_t}{\sqrt{\hat v_t + \epsilon_{root}} + \epsilon}, \qquad
      w_{t+1} = w_t - \eta_t \big((\alpha + \beta)\, r_t - \beta\, r_{t-1}\big)

    with Adam's (by default Nesterov) moment estimates and :math:`r_0 = r_1`.
    `chain(scale_by_adam(b1, b2, eps, eps_root, mu_dtype=, nesterov=),
    scale_by_optimistic_gradient(alpha, beta), scale_by_learning_rate(learning_rate))`.
    The algorithm is `optimistic_adam`'s; only the interface differs
    (`optimistic_adam(lr, o)` is `optimistic_adam_v2(1.0, alpha=lr, beta=o)`). Matches
    `optax.optimistic_adam_v2`.

    Args:
      learning_rate: :math:`\eta` >= 0, a float or a schedule `count -> lr`.
      alpha: :math:`\alpha`, the weight of the current Adam step.
      beta: :math:`\beta`, the optimism: the weight of the step's change.
      b1: :math:`\beta_1` in [0, 1), decay of the first moment.
      b2: :math:`\beta_2` in [0, 1), decay of the second moment.
      eps: :math:`\epsilon` >= 0 added to the denominator outside the square root.
      eps_root: :math:`\epsilon_{root}` >= 0 added inside the square root.
      mu_dtype: dtype of the first moment (default: the params' dtype).
      nesterov: use the Nesterov (NAdam) first moment.

    Returns:
      A `GradientTransformation`.

    Example:
      >>> import jax.numpy as jnp, gradtx
      >>> tx = gradtx.optimistic_adam_v2(1.0, alpha=1e-2, beta=1.0)
      >>> params = {"x": jnp.array(1.0), "y": jnp.array(2.0)}
      >>> state = tx.init(params)
      >>> updates, state = tx.update({"x": params["y"], "y": -params["x"]}, state, params)
      >>> print(round(float(updates["x"]), 4), round(float(updates["y"]), 4))
      -0.0147 0.0147

    Reference: Daskalakis et al., "Training GANs with Optimism" (ICLR 2018).
    """
    return chain(
        scale_by_adam(b1, b2, eps, eps_root, mu_dtype=mu_dtype, nesterov=nesterov),
        scale_by_optimistic_gradient(alpha=alpha, beta=beta),
        scale_by_learning_rate(learning_rate),
    )


__all__ = ["optimistic_adam", "optimistic_adam_v2", "optimistic_gradient_descent"]
