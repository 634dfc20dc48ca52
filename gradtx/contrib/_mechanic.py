"""Mechanic: a learned scale for the updates of any base optimizer (a learning-rate tuner)."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from .. import tree as gtree
from .._base._checks import check_int, check_non_negative, check_positive
from .._base._numerics import safe_increment, widen, zero_count
from .._base._recipe import recorded
from .._base._typing import ArrayLike, OptState, Params
from ..core._transformation import GradientTransformation, forward_extra_args, require_params
from ..transforms._building_blocks import copy_params, scalar_dtype
from ..tree._math import real_vdot
from ._schedule_free import check_transformation


class MechanicState(NamedTuple):
    """State of `mechanize` (Optax's fields and order)."""

    base_optimizer_state: OptState
    count: jax.Array  # type: ignore[assignment]  # int32, saturating
    r: jax.Array  # (num_betas,) float32
    m: jax.Array  # (num_betas,) float32
    v: jax.Array  # (num_betas,) float32
    s: jax.Array  # (num_betas,) float32: the scale, one per beta
    x0: Params  # the reference point (the params at the first update)


@recorded
def mechanize(
    base_optimizer: GradientTransformation,
    weight_decay: ArrayLike = 1e-2,
    eps: ArrayLike = 1e-8,
    s_init: ArrayLike = 1e-6,
    num_betas: int = 6,
) -> GradientTransformation:
    r"""Mechanic: learn the scale :math:`s` of `base_optimizer`'s updates while training.

    With :math:`\Delta_{t-1} = (x_0 - x_t) / \sum_i s_i` (the scaled distance travelled,
    recomputed rather than stored), :math:`u^{b}_t` the base optimizer's update,
    :math:`\beta_i = 1 - 10^{-i}` for :math:`i = 1..n`, and the gradient with Mechanic's own decay
    :math:`\tilde g_t = g_t + \lambda (\sum_i s_i) \frac{\|g_t\|}{\|x_t\| + \epsilon} x_t`:

    .. math::

      h_t &= \langle \tilde g_t, \Delta_{t-1} \rangle, \qquad
      m_i \leftarrow \max(\beta_i m_i, |h_t| + \epsilon), \qquad
      v_i \leftarrow \beta_i^2 v_i + h_t^2, \\
      r_i &\leftarrow \beta_i r_i + \mathrm{clip}(h_t, -m_i^{old}, m_i^{old})\, s_i, \qquad
      s_i \leftarrow \frac{\tfrac{s_{init}}{n} m_i + \max(r_i, 0)}{\sqrt{v_i} + \epsilon}, \\
      x_{t+1} &= x_0 - \Big(\sum_i s_i\Big) (\Delta_{t-1} - u^{b}_t)

    The returned update is :math:`x_{t+1} - x_t`. Use the base optimizer with its usual
    schedule, its base learning rate set to 1 (or any constant): Mechanic learns the scale.
    Extra arguments of `update` (e.g. `value=loss`) reach the base optimizer.

    Args:
      base_optimizer: the transformation whose updates are scaled (e.g. `gradtx.adam(1.0)`).
      weight_decay: :math:`\lambda` >= 0, Mechanic's own decay (not the base optimizer's).
      eps: :math:`\epsilon` >= 0.
      s_init: :math:`s_{init}` > 0, the initial scale (split over the betas).
      num_betas: :math:`n` >= 1 accumulators, with :math:`\beta_i = 1 - 10^{-i}`.

    Returns:
      A `GradientTransformation` with state `MechanicState`; `update` needs `params`.

    Example:
      >>> import jax, jax.numpy as jnp, gradtx
      >>> f = lambda x: jnp.sum(x**2)
      >>> tx = gradtx.contrib.mechanize(gradtx.sgd(1.0))
      >>> x = jnp.array([1.0, 2.0, 3.0])
      >>> state = tx.init(x)
      >>> for _ in range(50):
      ...     updates, state = tx.update(jax.grad(f)(x), state, x)
      ...     x = gradtx.apply_updates(x, updates)
      >>> bool(f(x) < 14.0)
      True

    Reference: Cutkosky, Defazio & Mehta, "Mechanic: A Learning Rate Tuner" (NeurIPS 2023).
    Matches `optax.contrib.mechanize` (Optax 0.2.8), with the scalar statistics in float32 for
    low-precision params (Optax keeps them in the params' dtype).
    """
    who = "mechanize"
    base = check_transformation(who, base_optimizer)
    check_non_negative(who, "weight_decay", weight_decay)
    check_non_negative(who, "eps", eps)
    check_positive(who, "s_init", s_init)
    check_int(who, "num_betas", num_betas, minimum=1)
    base_update = forward_extra_args(base.update)
    betas_py = [1.0 - 0.1**i for i in range(1, num_betas + 1)]

    def init(params):
        dtype = scalar_dtype(params)
        return MechanicState(
            base_optimizer_state=base.init(params),
            count=zero_count(),
            r=jnp.zeros([num_betas], dtype),
            m=jnp.zeros([num_betas], dtype),
            v=jnp.zeros([num_betas], dtype),
            s=jnp.full([num_betas], s_init, dtype),
            x0=copy_params(params),
        )

    def update(updates, state, params=None, **extra_args):
        params = require_params(who, params)
        gtree.assert_same_structure(who, updates=updates, params=params)
        dtype = state.s.dtype
        base_updates, base_state = base_update(
            updates, state.base_optimizer_state, params, **extra_args
        )
        # The reference point is the params at the first update (not at init), so that params
        # replaced after init (e.g. by pre-trained weights) are where Mechanic starts from.
        first = state.count == 0
        x0 = jax.tree.map(lambda p, x: jnp.where(first, p.astype(x.dtype), x), params, state.x0)
        s_sum = jnp.sum(state.s)
        decay = (
            weight_decay
            * s_sum
            * gtree.norm(updates).astype(dtype)
            / (gtree.norm(params).astype(dtype) + eps)
        )
        # Mechanic's own weight decay on the raw gradients, and the sum of the base updates so
        # far, recomputed from the distance travelled (the memory-saving form of the paper).
        decayed = jax.tree.map(lambda g, p: widen(g) + decay * widen(p), updates, params)
        delta_prev = jax.tree.map(lambda p, x: (widen(x) - widen(p)) / (s_sum + eps), params, x0)
        h = real_vdot(decayed, delta_prev).astype(dtype)

        betas = jnp.asarray(betas_py, dtype)
        clipped_h = jnp.clip(h, -state.m, state.m)
        m = jnp.maximum(betas * state.m, jnp.abs(h) + eps)
        v = betas**2 * state.v + h**2
        r = betas * state.r + clipped_h * state.s
        wealth = (s_init / num_betas) * m + jnp.maximum(0.0, r)
        s = jnp.asarray(wealth / (jnp.sqrt(v) + eps), dtype)

        s_new_sum = jnp.sum(s)

        def step(p, x, d, u):
            new_p = widen(x) - s_new_sum * (d - widen(u))
            return (new_p - widen(p)).astype(p.dtype)

        new_updates = jax.tree.map(step, params, x0, delta_prev, base_updates)
        new_updates = jax.tree.map(lambda u, g: u.astype(g.dtype), new_updates, updates)
        new_state = MechanicState(
            base_optimizer_state=base_state,
            count=safe_increment(state.count),
            r=r.astype(dtype),
            m=m.astype(dtype),
            v=v.astype(dtype),
            s=s,
            x0=x0,
        )
        return new_updates, new_state

    return GradientTransformation(init, update)
