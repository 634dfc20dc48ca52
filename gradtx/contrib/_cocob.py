"""COCOB: learning-rate-free descent by continuous coin betting (COCOB-Backprop)."""

from typing import NamedTuple

import jax.numpy as jnp

from .._base._checks import alias_errors, check_non_negative, check_positive
from .._base._numerics import widen
from .._base._recipe import recorded
from .._base._typing import ArrayLike, Mask, Params, ScalarOrSchedule, Updates
from ..core._transformation import GradientTransformation, chain
from ..transforms._decay import weight_decay as weight_decay_tx
from ..transforms._rule import rule, slot
from ..transforms._scaling import scale_by_learning_rate


class COCOBState(NamedTuple):
    """State of `scale_by_cocob` (Optax's field names); every buffer has the params' dtypes."""

    init_particles: Params  # x_0
    cumulative_gradients: Updates  # -sum of the gradients, C_t
    scale: Updates  # largest |g| seen, L_t (starts at eps)
    subgradients: Updates  # sum of |g|, G_t
    reward: Updates  # R_t


@recorded
def scale_by_cocob(alpha: ArrayLike = 100.0, eps: ArrayLike = 1e-8) -> GradientTransformation:
    r"""Replace the updates by COCOB-Backprop's bet: the step from the current point to the
    initial point plus a fraction of the accumulated negative gradients.

    Per coordinate, with :math:`L_0 = \epsilon` and :math:`C_0 = G_0 = R_0 = 0`:

    .. math::

      L_t = \max(L_{t-1}, |g_t|), \quad G_t = G_{t-1} + |g_t|, \quad
      R_t = \max\big(R_{t-1} - g_t (x_t - x_0), 0\big), \quad C_t = C_{t-1} - g_t,

      u_t = x_0 + \frac{C_t}{L_t \max(G_t + L_t, \alpha L_t)} (L_t + R_t) - x_t

    The update is the whole step: it is already a descent direction, so no learning rate (or
    sign flip) follows it in a chain. Computed in float32 for low-precision leaves.

    Args:
      alpha: :math:`\alpha` > 0, bounds the fraction of the wealth bet at the start.
      eps: :math:`\epsilon` > 0, the initial :math:`L_0` (keeps the first bet finite).

    Returns:
      A `GradientTransformation` with state `COCOBState`; `update` needs `params`.

    Reference: Orabona & Tommasi, "Training Deep Networks without Learning Rates Through Coin
    Betting" (NeurIPS 2017), Algorithm 2. Matches `optax.contrib.scale_by_cocob` (Optax 0.2.8).
    """
    return _cocob(alpha=alpha, eps=eps)


@rule(
    "scale_by_cocob",
    COCOBState,
    slots={
        "init_particles": slot("params"),
        "cumulative_gradients": slot(),
        "scale": slot("eps"),
        "subgradients": slot(),
        "reward": slot(),
    },
    checks={"alpha": check_positive, "eps": check_positive},
    uses_params=True,
)
def _cocob(t, *, alpha, eps):
    del t, eps  # no counter; eps is the initial scale

    def leaf(g, s):
        p, p0 = s.param, widen(s.init_particles)
        # the bet reads the sums unrounded (for low-precision buffers too)
        big_l = jnp.maximum(widen(s.scale), jnp.abs(g))
        big_g = widen(s.subgradients) + jnp.abs(g)
        r = jnp.maximum(widen(s.reward) - g * (p - p0), 0.0)
        c = widen(s.cumulative_gradients) - g
        for name, value in (
            ("cumulative_gradients", c),
            ("scale", big_l),
            ("subgradients", big_g),
            ("reward", r),
        ):
            s.keep(name, value)
        bet = c / (big_l * jnp.maximum(big_g + big_l, alpha * big_l))
        return -p + (p0 + bet * (big_l + r))

    return leaf


@alias_errors(renamed={"weight_decay: rate": "weight_decay"})
def cocob(
    learning_rate: ScalarOrSchedule = 1.0,
    alpha: ArrayLike = 100.0,
    eps: ArrayLike = 1e-8,
    weight_decay: ArrayLike = 0.0,
    mask: Mask | None = None,
) -> GradientTransformation:
    r"""COCOB-Backprop: learning-rate-free descent by coin betting.

    .. math::

      \tilde g_t = \eta_t (g_t + \lambda x_t), \qquad
      x_{t+1} = x_0 + \frac{C_t}{L_t \max(G_t + L_t, \alpha L_t)} (L_t + R_t)

    with the statistics of `scale_by_cocob` accumulated from :math:`\tilde g_t`.
    `chain(weight_decay(weight_decay, mask), scale_by_learning_rate(learning_rate,
    flip_sign=False), scale_by_cocob(alpha, eps))`: the learning rate scales the *gradients*
    fed to the bet (it is 1 by default; a schedule may be injected).

    Args:
      learning_rate: :math:`\eta_t` >= 0 (a float or a schedule), multiplies the gradients.
      alpha: :math:`\alpha` > 0, bounds the fraction bet at the start.
      eps: :math:`\epsilon` > 0, the initial per-coordinate gradient bound.
      weight_decay: :math:`\lambda` >= 0 (an L2 penalty added to the gradients).
      mask: which parameters decay (a boolean tree or prefix, a callable, or glob patterns).

    Returns:
      A `GradientTransformation`; `update` needs `params`.

    Example:
      >>> import jax, jax.numpy as jnp, gradtx
      >>> f = lambda x: jnp.sum(x**2)
      >>> tx = gradtx.contrib.cocob()
      >>> x = jnp.array([1.0, 2.0, 3.0])
      >>> state = tx.init(x)
      >>> for _ in range(20):
      ...     updates, state = tx.update(jax.grad(f)(x), state, x)
      ...     x = gradtx.apply_updates(x, updates)
      >>> bool(f(x) < 14.0)
      True

    Reference: Orabona & Tommasi, "Training Deep Networks without Learning Rates Through Coin
    Betting" (NeurIPS 2017). Matches `optax.contrib.cocob` (Optax 0.2.8).
    """
    check_non_negative("cocob", "weight_decay", weight_decay)
    return chain(
        weight_decay_tx(weight_decay, mask),
        scale_by_learning_rate(learning_rate, flip_sign=False),
        scale_by_cocob(alpha, eps),
    )
