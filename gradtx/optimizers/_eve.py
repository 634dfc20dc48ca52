"""Eve: Adam with a global feedback factor from the loss (the loss is passed as `value=`)."""

from .._base._checks import alias_errors
from .._base._typing import ArrayLike, ScalarOrSchedule
from ..core._transformation import GradientTransformation, chain
from ..state._quantize import MomentDType
from ..transforms._eve import scale_by_eve
from ..transforms._scaling import scale_by_learning_rate


@alias_errors
def eve(
    learning_rate: ScalarOrSchedule = 1e-3,
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.999,
    b3: ArrayLike = 0.999,
    k: ArrayLike = 0.1,
    K: ArrayLike = 10.0,
    eps: ArrayLike = 1e-8,
    *,
    f_star: ArrayLike = 0.0,
    mu_dtype: MomentDType | None = None,
    nu_dtype: MomentDType | None = None,
) -> GradientTransformation:
    r"""Eve: Adam whose step shrinks while the loss changes a lot and grows while it settles.

    .. math::  w_t = w_{t-1} - \eta_t \frac{\hat m_t}{d_t \sqrt{\hat v_t} + \epsilon}

    with :math:`d_t` a running average (decay :math:`\beta_3`) of the relative change of a
    smoothed loss, clipped by :math:`k` and :math:`K` (see `scale_by_eve`).
    `chain(scale_by_eve(b1, b2, b3, k, K, eps), scale_by_learning_rate(learning_rate))`. Every
    `update` needs the current loss: `tx.update(grads, state, params, value=loss)`; without it
    `update` raises a `ValueError` that says so. Defaults are the paper's. nnabla has no working
    Eve; its config's `Eve` / `eve_param` (alpha, beta1, beta2, beta3, k, k2, eps) map to
    `eve(alpha, beta1, beta2, beta3, k, k2, eps)`.

    Args:
      learning_rate: :math:`\eta_t` >= 0, a float or a schedule (the paper's :math:`\alpha`).
      b1: :math:`\beta_1` in [0, 1).
      b2: :math:`\beta_2` in [0, 1).
      b3: :math:`\beta_3` in [0, 1), decay of the feedback factor.
      k: lower threshold >= 0 of the relative loss change.
      K: upper threshold >= `k` of the relative loss change.
      eps: :math:`\epsilon` >= 0.
      f_star: a lower bound of the loss, subtracted before use (the rule needs a positive loss).
      mu_dtype: dtype of the first moment (default: the params' dtype).
      nu_dtype: dtype of the second moment (default: the params' dtype).

    Returns:
      A `GradientTransformation` whose `update` takes `value=loss`.

    Example:
      >>> import jax, jax.numpy as jnp, gradtx
      >>> loss_fn = lambda p: jnp.sum((p["w"] - 3.0) ** 2)
      >>> tx = gradtx.eve(learning_rate=0.1)
      >>> params = {"w": jnp.zeros(2)}
      >>> state = tx.init(params)
      >>> for _ in range(100):
      ...     loss, grads = jax.value_and_grad(loss_fn)(params)
      ...     updates, state = tx.update(grads, state, params, value=loss)
      ...     params = gradtx.apply_updates(params, updates)
      >>> bool(loss_fn(params) < 1e-2)
      True

    Reference: Koushik & Hayashi, "Improving Stochastic Gradient Descent with Feedback"
    (arXiv:1611.01505, 2016).
    """
    return chain(
        scale_by_eve(b1, b2, b3, k, K, eps, f_star=f_star, mu_dtype=mu_dtype, nu_dtype=nu_dtype),
        scale_by_learning_rate(learning_rate),
    )


__all__ = ["eve"]
