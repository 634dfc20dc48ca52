"""Distance over gradients: DoG and DoWG, parameter-free step sizes from the distance travelled."""

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from .. import tree as gtree
from .._base._checks import alias_errors, check_non_negative, check_one_of, check_positive
from .._base._numerics import widen
from .._base._recipe import recorded
from .._base._typing import ArrayLike, Mask, Params, ScalarOrSchedule, Updates
from ..core._transformation import GradientTransformation, chain, identity, require_params
from ..transforms._building_blocks import copy_params, scalar_dtype
from ..transforms._decay import weight_decay as weight_decay_tx
from ..transforms._scaling import scale_by_learning_rate


def _scaled(factor: jax.Array, updates: Updates) -> Updates:
    return jax.tree.map(lambda g: (factor * widen(g)).astype(g.dtype), updates)


# --------------------------------------------------------------------------------------------
# DoG
# --------------------------------------------------------------------------------------------

_INIT_STEP_TAGS = ("distance", "learning_rate", "heuristic")


class DoGState(NamedTuple):
    """State of `scale_by_dog`."""

    is_init_step: jax.Array  # bool scalar: True until the first update
    init_params: Params  # x_0, in the params' dtypes
    max_dist: jax.Array  # \bar r_t, float32
    sum_sq_norm_grads: jax.Array  # G_t, float32


def _check_init_step(who: str, init_step: Any) -> None:
    if not (isinstance(init_step, tuple | list) and len(init_step) == 2):
        raise ValueError(
            f"{who}: init_step must be a pair (tag, value) with tag one of {list(_INIT_STEP_TAGS)}"
            f", got {init_step!r}"
        )
    check_one_of(who, "init_step[0]", init_step[0], _INIT_STEP_TAGS)
    check_positive(who, "init_step[1]", init_step[1])


@recorded
def scale_by_dog(init_step: tuple[str, ArrayLike], eps: ArrayLike = 1e-8) -> GradientTransformation:
    r"""Scale the updates by DoG's step size: the largest distance from the initial point over the
    root of the summed squared gradient norms.

    .. math::

      \bar r_t = \max\big(r_\epsilon, \max_{k \le t} \|x_k - x_0\|\big), \qquad
      G_t = \sum_{k \le t} \|g_k\|^2, \qquad
      u_t = \frac{\bar r_t}{\sqrt{G_t + \epsilon}}\, g_t

    Norms are global (over all leaves) and computed in float32.

    Args:
      init_step: `(tag, value)` with `value` > 0: `("distance", r)` sets :math:`r_\epsilon = r`;
        `("heuristic", a)` sets :math:`r_\epsilon = a (1 + \|x_0\|)` (needs the real params at
        `init`; `jax.ShapeDtypeStruct` params, for shapes only, give 0); `("learning_rate", eta)`
        makes the first step size :math:`\eta` (and
        :math:`r_\epsilon = 0`).
      eps: :math:`\epsilon` >= 0, added to :math:`G_t`.

    Returns:
      A `GradientTransformation` with state `DoGState`; `update` needs `params`.

    Reference: Ivgi, Hinder & Carmon, "DoG is SGD's Best Friend: A Parameter-Free Dynamic Step
    Size Schedule" (ICML 2023). Matches `optax.contrib._dog.scale_by_dog` (Optax 0.2.8), except
    that the scalar statistics are float32 for low-precision params (Optax keeps them in the
    params' dtype).
    """
    who = "scale_by_dog"
    _check_init_step(who, init_step)
    check_non_negative(who, "eps", eps)
    tag, value = init_step

    def init(params):
        dtype = scalar_dtype(params)
        if tag == "distance":
            r_eps = jnp.asarray(value, dtype)
        elif tag == "heuristic":
            concrete = all(not isinstance(x, jax.ShapeDtypeStruct) for x in jax.tree.leaves(params))
            norm = gtree.norm(params).astype(dtype) if concrete else jnp.zeros([], dtype)
            r_eps = jnp.asarray(value * (1.0 + norm), dtype)
        else:
            r_eps = jnp.zeros([], dtype)
        return DoGState(
            is_init_step=jnp.asarray(True),
            init_params=copy_params(params),
            max_dist=r_eps,
            sum_sq_norm_grads=jnp.zeros([], dtype),
        )

    def update(updates, state, params=None, **extra_args):
        del extra_args
        params = require_params(who, params)
        dtype = state.max_dist.dtype
        dist = gtree.norm(gtree.sub(state.init_params, params)).astype(dtype)
        max_dist = jnp.maximum(state.max_dist, dist)
        sum_sq = state.sum_sq_norm_grads + gtree.norm(updates, squared=True).astype(dtype)
        lr = max_dist / jnp.sqrt(sum_sq + eps)
        if tag == "learning_rate":
            lr = jnp.where(state.is_init_step, jnp.asarray(value, dtype), lr)
        new_state = DoGState(
            is_init_step=jnp.asarray(False),
            init_params=state.init_params,
            max_dist=max_dist,
            sum_sq_norm_grads=sum_sq,
        )
        return _scaled(lr, updates), new_state

    return GradientTransformation(init, update)


@alias_errors(renamed={"weight_decay: rate": "weight_decay"})
def dog(
    learning_rate: ScalarOrSchedule = 1.0,
    init_step: tuple[str, ArrayLike] = ("heuristic", 1e-6),
    eps: ArrayLike = 1e-8,
    weight_decay: ArrayLike | None = None,
    mask: Mask | None = None,
) -> GradientTransformation:
    r"""DoG: SGD whose step size is the distance travelled over the root of the summed squared
    gradient norms.

    .. math::

      x_{t+1} = x_t - \eta_t \frac{\bar r_t}{\sqrt{G_t + \epsilon}} (g_t + \lambda x_t)

    with :math:`\bar r_t, G_t` of `scale_by_dog` and :math:`\eta_t` the (optional) schedule.
    `chain(weight_decay(weight_decay, mask) or identity(), scale_by_dog(init_step, eps),
    scale_by_learning_rate(learning_rate))`. The authors recommend averaging the iterates (e.g.
    `gradtx.ema_params`).

    Args:
      learning_rate: :math:`\eta_t` >= 0, a multiplier (a float or a schedule); 1 by default.
      init_step: `(tag, value)` of `scale_by_dog`; the default `("heuristic", 1e-6)` needs the
        real params at `init` (suggested 1e-4 with batch normalisation).
      eps: :math:`\epsilon` >= 0, added to the summed squared norms.
      weight_decay: :math:`\lambda` >= 0 added to the gradient before DoG's step, or None.
      mask: which parameters decay (a boolean tree or prefix, a callable, or glob patterns).

    Returns:
      A `GradientTransformation`; `update` needs `params`.

    Example:
      >>> import jax, jax.numpy as jnp, gradtx
      >>> f = lambda x: jnp.sum(x**2)
      >>> tx = gradtx.contrib.dog()
      >>> x = jnp.array([1.0, 2.0, 3.0])
      >>> state = tx.init(x)
      >>> updates, state = tx.update(jax.grad(f)(x), state, x)
      >>> bool(f(gradtx.apply_updates(x, updates)) < f(x))
      True

    Reference: Ivgi, Hinder & Carmon, "DoG is SGD's Best Friend: A Parameter-Free Dynamic Step
    Size Schedule" (ICML 2023). Matches `optax.contrib.dog` (Optax 0.2.8).
    """
    return chain(
        weight_decay_tx(weight_decay, mask) if weight_decay is not None else identity(),
        scale_by_dog(init_step, eps),
        scale_by_learning_rate(learning_rate),
    )


# --------------------------------------------------------------------------------------------
# DoWG
# --------------------------------------------------------------------------------------------


class DoWGState(NamedTuple):
    """State of `scale_by_dowg`."""

    init_params: Params  # x_0, in the params' dtypes
    weighted_sq_norm_grads: jax.Array  # v_t, float32
    estim_sq_dist: jax.Array  # \bar r_t^2, float32


@recorded
def scale_by_dowg(
    init_estim_sq_dist: ArrayLike | None = None, eps: ArrayLike = 1e-4
) -> GradientTransformation:
    r"""Scale the updates by DoWG's step size (distance over weighted gradients).

    .. math::

      \bar r_t^2 = \max(\bar r_{t-1}^2, \|x_t - x_0\|^2), \qquad
      v_t = v_{t-1} + \bar r_t^2 \|g_t\|^2, \qquad
      u_t = \frac{\bar r_t^2}{\sqrt{v_t} + \epsilon}\, g_t

    Args:
      init_estim_sq_dist: :math:`\bar r_0^2` > 0, the initial guess of the squared distance to
        the solution; None uses `eps`.
      eps: :math:`\epsilon` >= 0 in the denominator (> 0 when it is also :math:`\bar r_0^2`).

    Returns:
      A `GradientTransformation` with state `DoWGState`; `update` needs `params`.

    Reference: Khaled, Mishchenko & Jin, "DoWG Unleashed: An Efficient Universal Parameter-Free
    Gradient Descent Method" (NeurIPS 2023). Matches `optax.contrib._dog.scale_by_dowg` (Optax
    0.2.8), with float32 scalar statistics.
    """
    who = "scale_by_dowg"
    if init_estim_sq_dist is None:
        check_positive(who, "eps (the initial squared distance, as init_estim_sq_dist=None)", eps)
        r0 = eps
    else:
        check_positive(who, "init_estim_sq_dist", init_estim_sq_dist)
        check_non_negative(who, "eps", eps)
        r0 = init_estim_sq_dist

    def init(params):
        dtype = scalar_dtype(params)
        return DoWGState(
            init_params=copy_params(params),
            weighted_sq_norm_grads=jnp.zeros([], dtype),
            estim_sq_dist=jnp.asarray(r0, dtype),
        )

    def update(updates, state, params=None, **extra_args):
        del extra_args
        params = require_params(who, params)
        dtype = state.estim_sq_dist.dtype
        sq_dist = gtree.norm(gtree.sub(state.init_params, params), squared=True).astype(dtype)
        estim_sq_dist = jnp.maximum(state.estim_sq_dist, sq_dist)
        grad_sq = gtree.norm(updates, squared=True).astype(dtype)
        weighted = estim_sq_dist * grad_sq + state.weighted_sq_norm_grads
        lr = estim_sq_dist / (jnp.sqrt(weighted) + eps)
        new_state = DoWGState(
            init_params=state.init_params,
            weighted_sq_norm_grads=weighted,
            estim_sq_dist=estim_sq_dist,
        )
        return _scaled(lr, updates), new_state

    return GradientTransformation(init, update)


@alias_errors(renamed={"weight_decay: rate": "weight_decay"})
def dowg(
    learning_rate: ScalarOrSchedule = 1.0,
    init_estim_sq_dist: ArrayLike | None = None,
    eps: ArrayLike = 1e-4,
    weight_decay: ArrayLike | None = None,
    mask: Mask | None = None,
) -> GradientTransformation:
    r"""DoWG: SGD with the distance-over-weighted-gradients step size.

    .. math::

      x_{t+1} = x_t - \eta_t \frac{\bar r_t^2}{\sqrt{v_t} + \epsilon} (g_t + \lambda x_t)

    with :math:`\bar r_t^2, v_t` of `scale_by_dowg`. `chain(weight_decay(weight_decay, mask) or
    identity(), scale_by_dowg(init_estim_sq_dist, eps), scale_by_learning_rate(learning_rate))`.

    Args:
      learning_rate: :math:`\eta_t` >= 0, a multiplier (a float or a schedule); 1 by default.
      init_estim_sq_dist: initial guess of the squared distance to the solution (> 0), or None
        to use `eps`.
      eps: :math:`\epsilon` > 0 in the denominator (and the default initial guess).
      weight_decay: :math:`\lambda` >= 0 added to the gradient before DoWG's step, or None.
      mask: which parameters decay (a boolean tree or prefix, a callable, or glob patterns).

    Returns:
      A `GradientTransformation`; `update` needs `params`.

    Example:
      >>> import jax, jax.numpy as jnp, gradtx
      >>> f = lambda x: jnp.sum(x**2)
      >>> tx = gradtx.contrib.dowg()
      >>> x = jnp.array([1.0, 2.0, 3.0])
      >>> state = tx.init(x)
      >>> updates, state = tx.update(jax.grad(f)(x), state, x)
      >>> bool(f(gradtx.apply_updates(x, updates)) < f(x))
      True

    Reference: Khaled, Mishchenko & Jin, "DoWG Unleashed: An Efficient Universal Parameter-Free
    Gradient Descent Method" (NeurIPS 2023). Matches `optax.contrib.dowg` (Optax 0.2.8).
    """
    return chain(
        weight_decay_tx(weight_decay, mask) if weight_decay is not None else identity(),
        scale_by_dowg(init_estim_sq_dist, eps),
        scale_by_learning_rate(learning_rate),
    )
