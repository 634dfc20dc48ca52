"""SGD variants with Optax's names, argument names and defaults (0.2.8): Fromage, noisy SGD,
Polyak-step SGD, Rprop and Signum.

Each is a `chain` of public primitives.
"""

from .._base._checks import alias_errors, check_non_negative
from .._base._typing import ArrayLike, ScalarOrSchedule, Seed
from ..core._transformation import GradientTransformation, chain
from ..state._quantize import MomentDType
from ..transforms._fromage import scale_by_learning_rate_and_shrink
from ..transforms._gradient_ops import add_noise
from ..transforms._polyak import scale_by_polyak
from ..transforms._rprop import scale_by_rprop
from ..transforms._scaling import scale, scale_by_learning_rate
from ..transforms._sign import scale_by_lion
from ..transforms._trust_ratio import scale_by_trust_ratio


@alias_errors
def fromage(learning_rate: ScalarOrSchedule, min_norm: ArrayLike = 1e-6) -> GradientTransformation:
    r"""Fromage (Frobenius matched gradient descent): a trust-ratio step that also shrinks the
    parameters, so their norm stays put.

    .. math::

      w_t = \frac{1}{\sqrt{1 + \eta_t^2}} \left( w_{t-1} - \eta_t
        \frac{\|w_{t-1}\|}{\|g_t\|}\, g_t \right)

    per leaf (norms clipped below at `min_norm`):
    `chain(scale_by_trust_ratio(min_norm), scale_by_learning_rate_and_shrink(learning_rate))`,
    which is Optax's chain (trust ratio, learning rate :math:`\eta m`, then adding
    :math:`(m - 1) w`, with :math:`m = 1/\sqrt{1+\eta^2}`). Matches `optax.fromage`, which
    takes no schedule.

    Args:
      learning_rate: :math:`\eta` >= 0, a float or a schedule `count -> lr`.
      min_norm: >= 0, the lower bound of the parameter and update norms in the trust ratio.

    Returns:
      A `GradientTransformation`; it needs `params`.

    Example:
      >>> import jax, jax.numpy as jnp, gradtx
      >>> tx = gradtx.fromage(0.01)
      >>> params = jnp.array([3.0, 4.0])
      >>> state = tx.init(params)
      >>> updates, state = tx.update(jnp.array([1.0, 0.0]), state, params)
      >>> print(jnp.round(gradtx.apply_updates(params, updates), 4))
      [2.9499 3.9998]

    Reference: Bernstein et al., "On the distance between two neural networks and the
    stability of learning" (NeurIPS 2020).
    """
    check_non_negative("fromage", "learning_rate", learning_rate)
    return chain(
        scale_by_trust_ratio(min_norm),
        scale_by_learning_rate_and_shrink(learning_rate),
    )


@alias_errors
def noisy_sgd(
    learning_rate: ScalarOrSchedule,
    eta: ArrayLike = 0.01,
    gamma: ArrayLike = 0.55,
    key: Seed | None = None,
    *,
    seed: Seed | None = None,
) -> GradientTransformation:
    r"""SGD on gradients with annealed Gaussian noise.

    .. math::

      w_t = w_{t-1} - \eta_t (g_t + \sigma_t \xi_t), \qquad
      \sigma_t^2 = \frac{\eta}{t^{\gamma}}, \qquad \xi_t \sim \mathcal N(0, I), \quad t = 1, 2,
      \dots

    `chain(add_noise(eta, gamma, key=key, seed=seed), scale_by_learning_rate(learning_rate))`.
    The PRNG key lives in the state, so a run is reproducible from `key` (or `seed`) and from a
    checkpoint; the noise is the same as Optax's for the same key. Matches `optax.noisy_sgd`
    (Optax draws bf16/f16 noise in that dtype, gradtx in float32).

    Args:
      learning_rate: :math:`\eta_t` >= 0, a float or a schedule `count -> lr`.
      eta: :math:`\eta` >= 0, the noise variance at the first step.
      gamma: :math:`\gamma` >= 0, the decay exponent of the variance.
      key: an integer seed or a PRNG key (`jax.random.key(0)`); None (and no `seed`) means 0.
      seed: the same as `key` (Optax's deprecated name); give at most one of the two.

    Returns:
      A `GradientTransformation`.

    Example:
      >>> import jax.numpy as jnp, gradtx
      >>> tx = gradtx.noisy_sgd(0.1, key=42)
      >>> params = jnp.zeros(3)
      >>> a, _ = tx.update(jnp.ones(3), tx.init(params))
      >>> b, _ = tx.update(jnp.ones(3), tx.init(params))
      >>> bool(jnp.all(a == b))  # the same key gives the same noise
      True

    Reference: Neelakantan et al., "Adding Gradient Noise Improves Learning for Very Deep
    Networks" (arXiv:1511.06807, 2015).
    """
    return chain(
        add_noise(eta, gamma, seed=seed, key=key),
        scale_by_learning_rate(learning_rate),
    )


@alias_errors(renamed={"scale_by_learning_rate: learning_rate": "scaling"})
def polyak_sgd(
    max_learning_rate: ArrayLike = 1.0,
    scaling: ScalarOrSchedule = 1.0,
    f_min: ArrayLike = 0.0,
    eps: ArrayLike = 0.0,
    variant: str = "sps",
) -> GradientTransformation:
    r"""SGD with the (stochastic) Polyak step size; the loss comes in as `value=`.

    .. math::

      w_t = w_{t-1} - \min\left( \frac{f(w_{t-1}) - f^\star}{s_t^2 \|g_t\|^2 + \epsilon},\
        \gamma_{max} \right) s_t\, g_t

    (`variant="sps+"` clips the gap at 0). `chain(scale_by_learning_rate(scaling),
    scale_by_polyak(f_min, max_learning_rate, eps, variant))`, so the squared norm is that of
    the scaled gradient :math:`s_t g_t`, as in Optax's code (its docstring writes
    :math:`s \min(\text{gap}/(\|g\|^2 + \epsilon), \gamma_{max})`, which is the same for
    :math:`s = 1`). Call `update(grads, state, params, value=loss)`. Matches
    `optax.polyak_sgd`.

    Args:
      max_learning_rate: :math:`\gamma_{max}` >= 0, the largest step: a number, as in Optax
        (a schedule is refused at construction; put one in `scaling`).
      scaling: :math:`s` >= 0, a float or a schedule `count -> s`.
      f_min: :math:`f^\star`, a lower bound on the objective (0 for an interpolating model).
      eps: :math:`\epsilon` >= 0 added to the squared norm.
      variant: "sps" or "sps+".

    Returns:
      A `GradientTransformation` whose `update` needs `value`.

    Example:
      >>> import jax, jax.numpy as jnp, gradtx
      >>> f = lambda w: jnp.sum(w**2)
      >>> tx = gradtx.polyak_sgd()
      >>> params = jnp.array([1.0, 2.0, 3.0])
      >>> state = tx.init(params)
      >>> value, grad = jax.value_and_grad(f)(params)
      >>> updates, state = tx.update(grad, state, params, value=value)
      >>> float(f(gradtx.apply_updates(params, updates)))
      3.5

    Reference: Loizou et al., "Stochastic Polyak Step-size for SGD: An Adaptive Learning Rate
    for Fast Convergence" (AISTATS 2021).
    """
    return chain(
        scale_by_learning_rate(scaling),
        scale_by_polyak(f_min=f_min, max_learning_rate=max_learning_rate, eps=eps, variant=variant),
    )


@alias_errors
def rprop(
    learning_rate: ArrayLike,
    eta_minus: ArrayLike = 0.5,
    eta_plus: ArrayLike = 1.2,
    min_step_size: ArrayLike = 1e-6,
    max_step_size: ArrayLike = 50.0,
) -> GradientTransformation:
    r"""Rprop (iRprop-): per-parameter steps against the gradient's sign, grown while the sign
    holds and shrunk (skipping one move) when it flips.

    .. math::  w_t = w_{t-1} - \Delta_t\, \mathrm{sign}(g_t)
      \quad (\text{no move where } g_t\, u_{t-1} < 0)

    with :math:`\Delta_t` as in `scale_by_rprop`. `chain(scale_by_rprop(learning_rate,
    eta_minus, eta_plus, min_step_size, max_step_size), scale(-1.0))`. Matches `optax.rprop`
    except for Optax 0.2.8's one-step delay (see `scale_by_rprop`); agrees with
    `torch.optim.Rprop`.

    Args:
      learning_rate: :math:`\Delta_0` > 0, the initial step size.
      eta_minus: in (0, 1), the factor applied to a step after a sign flip.
      eta_plus: > 1, the factor applied while the sign holds.
      min_step_size: > 0, the smallest step.
      max_step_size: >= `min_step_size`, the largest step.

    Returns:
      A `GradientTransformation`.

    Example:
      >>> import jax.numpy as jnp, gradtx
      >>> tx = gradtx.rprop(0.1)
      >>> state = tx.init(jnp.zeros(1))
      >>> for g in [1.0, 1.0, -1.0, -1.0]:
      ...     u, state = tx.update(jnp.array([g]), state)
      ...     print(round(float(u[0]), 4))
      -0.1
      -0.12
      -0.0
      0.06

    Reference: Riedmiller & Braun, "A direct adaptive method for faster backpropagation
    learning: the RPROP algorithm" (ICNN 1993); Igel & Hüsken (Neurocomputing 2003).
    """
    return chain(
        scale_by_rprop(
            learning_rate,
            eta_minus=eta_minus,
            eta_plus=eta_plus,
            min_step_size=min_step_size,
            max_step_size=max_step_size,
        ),
        scale(-1.0),
    )


@alias_errors(renamed={"scale_by_lion: b1": "beta", "scale_by_lion: b2": "beta"})
def signum(
    learning_rate: ScalarOrSchedule,
    beta: ArrayLike = 0.9,
    accumulator_dtype: MomentDType | None = None,
) -> GradientTransformation:
    r"""Signum: steps by the sign of an exponential moving average of the gradients.

    .. math::  m_t = \beta m_{t-1} + (1-\beta) g_t, \qquad w_t = w_{t-1} - \eta_t\,
      \mathrm{sign}(m_t)

    Lion with :math:`\beta_1 = \beta_2 = \beta` is exactly this (its interpolation is then the
    new average), so: `chain(scale_by_lion(beta, beta, mu_dtype=accumulator_dtype),
    scale_by_learning_rate(learning_rate))`. Matches `optax.signum` (an unbiased EMA, then
    `scale_by_sign`).

    Args:
      learning_rate: :math:`\eta` >= 0, a float or a schedule `count -> lr`.
      beta: :math:`\beta` in [0, 1), the decay of the average.
      accumulator_dtype: dtype of the average (default: the params' dtype).

    Returns:
      A `GradientTransformation`.

    Example:
      >>> import jax.numpy as jnp, gradtx
      >>> tx = gradtx.signum(0.1)
      >>> state = tx.init(jnp.zeros(2))
      >>> u, state = tx.update(jnp.array([3.0, -0.5]), state)
      >>> u
      Array([-0.1,  0.1], dtype=float32)

    Reference: Bernstein et al., "signSGD: Compressed Optimisation for Non-Convex Problems"
    (ICML 2018).
    """
    return chain(
        scale_by_lion(beta, beta, mu_dtype=accumulator_dtype),
        scale_by_learning_rate(learning_rate),
    )


__all__ = ["fromage", "noisy_sgd", "polyak_sgd", "rprop", "signum"]
