"""ADOPT: Adam whose step is normalised by the second moment of the *previous* gradients."""

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp

from .._base._checks import alias_errors
from .._base._numerics import abs_sq, widen
from .._base._recipe import recorded
from .._base._typing import ArrayLike, ScalarOrSchedule, Updates
from ..core._transformation import GradientTransformation, chain
from ..state._quantize import MomentDType
from ..transforms._building_blocks import ema
from ..transforms._rule import decay, non_negative, rule, slot
from ..transforms._scaling import scale_by_learning_rate


class ScaleByAdoptState(NamedTuple):
    """State of `scale_by_adopt` (the fields of Optax's `ScaleByAdamState`)."""

    count: jax.Array  # type: ignore[assignment]  # int32, saturating
    mu: Updates  # momentum of the normalised gradients, dtype mu_dtype or the params'
    nu: Updates  # EMA of |g|^2, dtype nu_dtype or the params'


def _fourth_root(count: jax.Array) -> jax.Array:
    return jnp.asarray(count, jnp.float32) ** 0.25


@recorded
def scale_by_adopt(
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.9999,
    eps: ArrayLike = 1e-6,
    mu_dtype: MomentDType | None = None,
    *,
    nesterov: bool = False,
    use_clipping: bool = True,
    clip_value_fn: Callable[[jax.Array], jax.Array] = _fourth_root,
    nu_dtype: MomentDType | None = None,
) -> GradientTransformation:
    r"""Rescale updates by ADOPT: the gradient is normalised by the second moment of the *past*
    gradients before it enters the momentum.

    .. math::

      \tilde g_t = \mathrm{clip}\!\left(\frac{g_t}{\max(\sqrt{v_{t-1}}, \epsilon)},
        \pm c(t-1)\right), \qquad
      m_t = \beta_1 m_{t-1} + (1-\beta_1) \tilde g_t, \qquad
      v_t = \beta_2 v_{t-1} + (1-\beta_2) g_t^2, \qquad u_t = m_t

    At the first step :math:`v_1 = g_1^2` and :math:`m_1 = 0` (so the first update is zero).
    With `nesterov`, :math:`u_t = \beta_1 m_t + (1-\beta_1) \tilde g_t`. Matches
    `optax.contrib.scale_by_adopt`.

    Args:
      b1: :math:`\beta_1` in [0, 1), decay of the momentum.
      b2: :math:`\beta_2` in [0, 1), decay of the second moment.
      eps: :math:`\epsilon` >= 0, floor of :math:`\sqrt{v}`.
      mu_dtype: dtype of the momentum buffer (default: the params' dtype), or a
        `gradtx.quantized()` spec for 8-bit storage.
      nesterov: use the Nesterov form of the momentum.
      use_clipping: clip the normalised gradient to :math:`\pm c(t-1)`.
      clip_value_fn: :math:`c`, the clipping bound as a function of the step count (0 at the
        first step); default :math:`c(t) = t^{1/4}`.
      nu_dtype: dtype of the second moment buffer (default: the params' dtype), or a
        `gradtx.quantized()` spec for 8-bit storage (unsigned code).

    Returns:
      A `GradientTransformation` with state `ScaleByAdoptState(count, mu, nu)`.

    Reference: Taniguchi et al., "ADOPT: Modified Adam Can Converge with Any beta2 with the
    Optimal Rate" (NeurIPS 2024).
    """
    if use_clipping and not callable(clip_value_fn):
        raise TypeError(f"scale_by_adopt: clip_value_fn must be callable, got {clip_value_fn!r}")
    return _adopt(
        b1=b1,
        b2=b2,
        eps=eps,
        nesterov=nesterov,
        clip_value_fn=clip_value_fn if use_clipping else None,
        mu_dtype=mu_dtype,
        nu_dtype=nu_dtype,
    )


def _previous_count(state, extra_args, t, hyperparameters):
    """The count before this step: ADOPT's first step (and its clipping bound) read it."""
    return {"previous": state.count}, {}


@rule(
    "scale_by_adopt",
    ScaleByAdoptState,
    slots={"mu": slot(dtype="mu_dtype"), "nu": slot(dtype="nu_dtype", signed=False)},
    checks={"b1": decay, "b2": decay, "eps": non_negative},
    prologue=_previous_count,
)
def _adopt(t, *, b1, b2, eps, nesterov, clip_value_fn, previous):
    started = previous > 0
    d1 = jnp.where(started, jnp.asarray(b1, jnp.float32), 1.0)
    d2 = jnp.where(started, jnp.asarray(b2, jnp.float32), 0.0)
    bound = None if clip_value_fn is None else jnp.asarray(clip_value_fn(previous), jnp.float32)

    def leaf(g, s):
        v = s.nu  # the step divides by the previous second moment
        s.keep("nu", ema(d2, abs_sq(g), v))
        g_hat = g / jnp.maximum(jnp.sqrt(widen(v)), eps)
        if bound is not None:
            g_hat = jnp.clip(g_hat, -bound, bound)
        m = ema(d1, g_hat, s.mu)
        s.keep("mu", m)  # the update reads it unrounded, as Optax's
        return ema(d1, g_hat, m) if nesterov else m

    return leaf


@alias_errors
def adopt(
    learning_rate: ScalarOrSchedule,
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.9999,
    eps: ArrayLike = 1e-6,
    mu_dtype: MomentDType | None = None,
    *,
    nesterov: bool = False,
    use_clipping: bool = True,
    clip_value_fn: Callable[[jax.Array], jax.Array] = _fourth_root,
    nu_dtype: MomentDType | None = None,
) -> GradientTransformation:
    r"""ADOPT: Adam that converges with any :math:`\beta_2`, by normalising each gradient with the
    second moment of the previous ones.

    .. math::  w_t = w_{t-1} - \eta_t\, m_t

    with :math:`m_t` from `scale_by_adopt`. `chain(scale_by_adopt(...),
    scale_by_learning_rate(learning_rate))`. Matches `optax.contrib.adopt`.

    Args:
      learning_rate: :math:`\eta` >= 0, a float or a schedule.
      b1: :math:`\beta_1` in [0, 1).
      b2: :math:`\beta_2` in [0, 1).
      eps: :math:`\epsilon` >= 0.
      mu_dtype: dtype of the momentum buffer (default: the params' dtype), or a
        `gradtx.quantized()` spec for 8-bit storage.
      nesterov: use the Nesterov form of the momentum.
      use_clipping: clip the normalised gradient (recommended when training from scratch).
      clip_value_fn: the clipping bound as a function of the step count (default
        :math:`t^{1/4}`).
      nu_dtype: dtype of the second moment buffer (default: the params' dtype), or a
        `gradtx.quantized()` spec for 8-bit storage.

    Returns:
      A `GradientTransformation`.

    Example:
      >>> import jax.numpy as jnp, gradtx
      >>> tx = gradtx.contrib.adopt(1e-3)
      >>> params = {"w": jnp.ones(3)}
      >>> updates, state = tx.update({"w": jnp.ones(3)}, tx.init(params), params)

    Reference: Taniguchi et al., "ADOPT: Modified Adam Can Converge with Any beta2 with the
    Optimal Rate" (NeurIPS 2024).
    """
    return chain(
        scale_by_adopt(
            b1,
            b2,
            eps,
            mu_dtype,
            nesterov=nesterov,
            use_clipping=use_clipping,
            clip_value_fn=clip_value_fn,
            nu_dtype=nu_dtype,
        ),
        scale_by_learning_rate(learning_rate),
    )


__all__ = ["ScaleByAdoptState", "adopt", "scale_by_adopt"]
