"""Adan and SM3: adaptive optimizers with Optax's names, argument names and defaults (0.2.8).

Each is a `chain` of public primitives: the preconditioner (`scale_by_adan`, `scale_by_sm3`),
optionally decoupled weight decay, and the learning rate.
"""

from .._base._checks import alias_errors
from .._base._typing import ArrayLike, Mask, ScalarOrSchedule
from ..core._transformation import GradientTransformation, chain
from ..transforms._adan import scale_by_adan
from ..transforms._decay import weight_decay as weight_decay_tx
from ..transforms._scaling import scale_by_learning_rate
from ..transforms._sm3 import scale_by_sm3


@alias_errors(renamed={"weight_decay: rate": "weight_decay"})
def adan(
    learning_rate: ScalarOrSchedule,
    b1: ArrayLike = 0.98,
    b2: ArrayLike = 0.92,
    b3: ArrayLike = 0.99,
    eps: ArrayLike = 1e-8,
    eps_root: ArrayLike = 1e-8,
    weight_decay: ScalarOrSchedule = 0.0,
    mask: Mask | None = None,
) -> GradientTransformation:
    r"""Adan: Adam-like steps from moments of the gradients and of their differences, with
    decoupled weight decay.

    .. math::

      w_t = w_{t-1} - \eta_t \left(
        \frac{\hat m_t + (1-\beta_2)\hat v_t}{\sqrt{\hat n_t + \epsilon_{root}} + \epsilon}
        + \lambda_t w_{t-1} \right)

    with the moments of `scale_by_adan` (:math:`m`: gradients, :math:`v`: gradient differences,
    :math:`n`: the squared Nesterov-corrected gradient). `chain(scale_by_adan(b1, b2, b3, eps,
    eps_root), weight_decay(weight_decay, mask), scale_by_learning_rate(learning_rate))`.
    Matches `optax.adan` (whose docstring shows the paper's proximal decay
    :math:`/(1 + \lambda\eta)`; its code, and this, add the decay like AdamW).

    Args:
      learning_rate: :math:`\eta` >= 0, a float or a schedule `count -> lr`.
      b1: :math:`\beta_1` in [0, 1), decay of the gradient EMA.
      b2: :math:`\beta_2` in [0, 1), decay of the gradient-difference EMA.
      b3: :math:`\beta_3` in [0, 1), decay of the squared term.
      eps: :math:`\epsilon` >= 0 added to the denominator outside the square root.
      eps_root: :math:`\epsilon_{root}` >= 0 added inside the square root.
      weight_decay: :math:`\lambda` >= 0, a float or a schedule.
      mask: which parameters decay: a boolean tree (or prefix), a callable `params -> tree`, or
        glob pattern(s) such as `"!**/bias"`; None decays all.

    Returns:
      A `GradientTransformation`.

    Example:
      >>> import jax, jax.numpy as jnp, gradtx
      >>> f = lambda w: jnp.sum(w**2)
      >>> tx = gradtx.adan(0.1)
      >>> params = jnp.array([1.0, 2.0, 3.0])
      >>> state = tx.init(params)
      >>> for _ in range(5):
      ...     updates, state = tx.update(jax.grad(f)(params), state, params)
      ...     params = gradtx.apply_updates(params, updates)
      >>> print(f"{float(f(params)):.2f}")
      8.76

    Reference: Xie et al., "Adan: Adaptive Nesterov Momentum Algorithm for Faster Optimizing
    Deep Models" (arXiv:2208.06677, 2022).
    """
    return chain(
        scale_by_adan(b1=b1, b2=b2, b3=b3, eps=eps, eps_root=eps_root),
        weight_decay_tx(weight_decay, mask),
        scale_by_learning_rate(learning_rate),
    )


@alias_errors(renamed={"scale_by_sm3: b1": "momentum"})
def sm3(
    learning_rate: ScalarOrSchedule, momentum: ArrayLike | None = 0.9
) -> GradientTransformation:
    r"""SM3: Adagrad with one accumulator per tensor axis slice, plus momentum.

    .. math::

      a_t(i) = g_t(i)^2 + \min_r \mu^{(r)}_{t-1}(i_r), \qquad
      u_t = \beta u_{t-1} + (1-\beta) \frac{g_t}{\sqrt{a_t + \epsilon}}, \qquad
      w_t = w_{t-1} - \eta_t u_t

    (see `scale_by_sm3`: the accumulators :math:`\mu^{(r)}` keep the maximum of :math:`a_t`
    over each slice, so a :math:`m \times n` matrix costs :math:`m + n` numbers).
    `chain(scale_by_sm3(momentum), scale_by_learning_rate(learning_rate))`. Matches `optax.sm3`;
    here `learning_rate` may also be a schedule, `momentum=None` means no momentum, and rank-0
    leaves work (Optax raises an `IndexError` on them).

    Args:
      learning_rate: :math:`\eta` >= 0, a float or a schedule `count -> lr`.
      momentum: :math:`\beta` in [0, 1], the momentum of the preconditioned updates; None for 0.

    Returns:
      A `GradientTransformation`.

    Example:
      >>> import jax, jax.numpy as jnp, gradtx
      >>> tx = gradtx.sm3(0.1)
      >>> params = {"w": jnp.ones((4, 3))}
      >>> state = tx.init(params)
      >>> [a.shape for a in state[0].mu["w"]]  # one accumulator per axis
      [(4,), (3,)]

    Reference: Anil et al., "Memory-Efficient Adaptive Optimization" (NeurIPS 2019).
    """
    return chain(
        scale_by_sm3(0.0 if momentum is None else momentum),
        scale_by_learning_rate(learning_rate),
    )


__all__ = ["adan", "sm3"]
