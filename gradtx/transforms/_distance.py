"""Distance over gradients (layer-wise DoG): a step size from how far the parameters moved."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from .._base._checks import check_non_negative, check_positive, check_scalar
from .._base._numerics import safe_norm, wide_float, widen
from .._base._recipe import recorded
from .._base._typing import ArrayLike, DType, Params, Updates
from ..core._transformation import GradientTransformation, require_params
from ..state._buffers import check_float_dtype
from ..tree import assert_same_structure, map_split, norm, zeros_like


class ScaleByDistanceOverGradientsState(NamedTuple):
    """State of `scale_by_distance_over_gradients`."""

    max_dist: Updates  # per leaf, a float32 scalar: the largest distance from the start
    grad_sum_of_squares: Updates  # per leaf, a float32 scalar: the sum of all squared gradients
    init_params: Params  # the initial parameters, in param_dtype


def _wide_zeros(x: Any) -> jax.Array:
    return jnp.zeros((), wide_float(x.dtype))


def _concrete(p: Any) -> Any:
    """`p`, or zeros of its shape and dtype for a `jax.ShapeDtypeStruct` (an abstract init)."""
    return zeros_like(p) if isinstance(p, jax.ShapeDtypeStruct) else p


@recorded
def scale_by_distance_over_gradients(
    reps_rel: ArrayLike = 1e-6,
    eps: ArrayLike = 1e-8,
    param_dtype: DType = jnp.float32,
    global_scale: ArrayLike = 1.0,
) -> GradientTransformation:
    r"""Scale each leaf by its largest distance from the start over its root summed squared
    gradient (layer-wise DoG, "LDoG").

    For each leaf (parameter tensor):

    .. math::

      r_t = \max\big(r_{t-1}, \|w_t - w_0\|\big), \quad r_0 = \rho\,(1 + \|w_0\|), \qquad
      G_t = G_{t-1} + \|g_t\|^2, \qquad
      u_t = s\, \frac{r_t}{\sqrt{G_t + \epsilon}}\, g_t

    It has no learning rate: the step grows with the distance travelled. Pass
    `global_scale=-1.0` to descend. Norms are in float32. Matches
    `optax.scale_by_distance_over_gradients`, except that its scalars are rank 0 where Optax's
    gradient sum has shape (1,) (which turns a rank-0 leaf's update into shape (1,) there).

    Args:
      reps_rel: :math:`\rho` > 0, the initial distance relative to :math:`1 + \|w_0\|`
        (the authors suggest 1e-4 with batch norm, 1e-6 otherwise).
      eps: :math:`\epsilon` >= 0 under the square root.
      param_dtype: dtype of the stored initial parameters.
      global_scale: :math:`s`, a global factor (1.0, or -1.0 to descend).

    Returns:
      A `GradientTransformation` with state
      `ScaleByDistanceOverGradientsState(max_dist, grad_sum_of_squares, init_params)`; it needs
      `params`. Initialised from `jax.ShapeDtypeStruct` leaves (for shapes and shardings only)
      the stored start is zeros: initialise from the real parameters to run it.

    Reference: Ivgi, Hinder & Carmon, "DoG is SGD's Best Friend: A Parameter-Free Dynamic Step
    Size Schedule" (ICML 2023).
    """
    who = "scale_by_distance_over_gradients"
    check_positive(who, "reps_rel", reps_rel)
    check_non_negative(who, "eps", eps)
    check_scalar(who, "global_scale", global_scale)
    check_float_dtype(who, "param_dtype", param_dtype)

    def init(params):
        params = jax.tree.map(_concrete, params)
        initial_distance = lambda p: (reps_rel * (1.0 + safe_norm(p))).astype(wide_float(p.dtype))
        return ScaleByDistanceOverGradientsState(
            max_dist=jax.tree.map(initial_distance, params),
            grad_sum_of_squares=jax.tree.map(_wide_zeros, params),
            init_params=jax.tree.map(lambda p: jnp.array(p, param_dtype, copy=True), params),
        )

    def update(updates, state, params=None, **extra_args):
        del extra_args
        params = require_params(who, params)
        assert_same_structure(who, updates=updates, params=params)

        def leaf(g, p, p0, d, sos):
            d_new = jnp.maximum(d, safe_norm(widen(p) - widen(p0)).astype(d.dtype))
            sos_new = sos + norm(g, squared=True).astype(sos.dtype)
            eta = global_scale * (d_new / jnp.sqrt(sos_new + eps))
            return (eta * widen(g)).astype(g.dtype), d_new, sos_new

        updates, max_dist, sos = map_split(
            leaf, 3, updates, params, state.init_params, state.max_dist, state.grad_sum_of_squares
        )
        return updates, ScaleByDistanceOverGradientsState(max_dist, sos, state.init_params)

    return GradientTransformation(init, update)


__all__ = ["ScaleByDistanceOverGradientsState", "scale_by_distance_over_gradients"]
