"""ADOPT: Adam whose step is normalised by the second moment of the *previous* gradients."""

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from .._base._checks import alias_errors, check_in_range, check_non_negative
from .._base._numerics import abs_sq, safe_increment, widen, zero_count
from .._base._typing import ArrayLike, ScalarOrSchedule, Updates
from ..core._transformation import GradientTransformation, chain
from ..state._quantize import as_leaves
from ..transforms._scaling import scale_by_learning_rate
from ..transforms._tier import (
    check_moment_dtype,
    ema,
    moment_buffers,
    read,
    store,
    zeros_like_params,
)
from ..tree import assert_same_structure, map_split


class ScaleByAdoptState(NamedTuple):
    """State of `scale_by_adopt` (the fields of Optax's `ScaleByAdamState`)."""

    count: jax.Array  # type: ignore[assignment]  # int32, saturating
    mu: Updates  # momentum of the normalised gradients, dtype mu_dtype or the params'
    nu: Updates  # EMA of |g|^2, the params' dtype


def _fourth_root(count: jax.Array) -> jax.Array:
    return jnp.asarray(count, jnp.float32) ** 0.25


def scale_by_adopt(
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.9999,
    eps: ArrayLike = 1e-6,
    mu_dtype: Any = None,
    *,
    nesterov: bool = False,
    use_clipping: bool = True,
    clip_value_fn: Callable[[jax.Array], jax.Array] = _fourth_root,
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

    Returns:
      A `GradientTransformation` with state `ScaleByAdoptState(count, mu, nu)`.

    Reference: Taniguchi et al., "ADOPT: Modified Adam Can Converge with Any beta2 with the
    Optimal Rate" (NeurIPS 2024).
    """
    who = "scale_by_adopt"
    check_in_range(who, "b1", b1, 0.0, 1.0, high_open=True)
    check_in_range(who, "b2", b2, 0.0, 1.0, high_open=True)
    check_non_negative(who, "eps", eps)
    check_moment_dtype(who, "mu_dtype", mu_dtype)
    if use_clipping and not callable(clip_value_fn):
        raise TypeError(f"{who}: clip_value_fn must be callable, got {clip_value_fn!r}")

    def init(params):
        return ScaleByAdoptState(
            count=zero_count(), mu=moment_buffers(params, mu_dtype), nu=zeros_like_params(params)
        )

    def update(updates, state, params=None, **extra_args):
        del params, extra_args
        assert_same_structure(who, updates=updates, **{"state.mu": as_leaves(state.mu)})
        started = state.count > 0
        d1 = jnp.where(started, jnp.asarray(b1, jnp.float32), 1.0)
        d2 = jnp.where(started, jnp.asarray(b2, jnp.float32), 0.0)
        bound = jnp.asarray(clip_value_fn(state.count), jnp.float32) if use_clipping else None

        def leaf(g, m, v):
            gw = widen(g)
            v_buf = store(ema(d2, abs_sq(gw), v), v)
            g_hat = gw / jnp.maximum(jnp.sqrt(widen(v)), eps)
            if bound is not None:
                g_hat = jnp.clip(g_hat, -bound, bound)
            m_new = ema(d1, g_hat, read(m))  # the update reads it unrounded, as Optax's
            u = ema(d1, g_hat, m_new) if nesterov else m_new
            return u.astype(g.dtype), store(m_new, m), v_buf

        updates, mu, nu = map_split(leaf, 3, updates, state.mu, state.nu)
        return updates, ScaleByAdoptState(count=safe_increment(state.count), mu=mu, nu=nu)

    return GradientTransformation(init, update)


@alias_errors
def adopt(
    learning_rate: ScalarOrSchedule,
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.9999,
    eps: ArrayLike = 1e-6,
    mu_dtype: Any = None,
    *,
    nesterov: bool = False,
    use_clipping: bool = True,
    clip_value_fn: Callable[[jax.Array], jax.Array] = _fourth_root,
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
        ),
        scale_by_learning_rate(learning_rate),
    )


__all__ = ["ScaleByAdoptState", "adopt", "scale_by_adopt"]
