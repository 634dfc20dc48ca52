"""Differentially private SGD: per-example clipping, summing and Gaussian noise."""

from typing import NamedTuple

import jax
import jax.numpy as jnp

from .._base._checks import alias_errors, check_non_negative
from .._base._numerics import key_data, widen
from .._base._recipe import recorded
from .._base._typing import ArrayLike, ScalarOrSchedule, Seed
from ..core._transformation import GradientTransformation, chain, identity
from ..transforms._momentum import trace
from ..transforms._per_example import per_example_global_norm_clip
from ..transforms._scaling import scale_by_learning_rate


class DifferentiallyPrivateAggregateState(NamedTuple):
    """State of `differentially_private_aggregate`."""

    rng_key: jax.Array  # raw PRNG key data (uint32), as `jax.random.key_data` returns it


@recorded
def differentially_private_aggregate(
    l2_norm_clip: ArrayLike,
    noise_multiplier: ArrayLike,
    key: Seed | None = None,
    *,
    seed: int | None = None,
) -> GradientTransformation:
    r"""Aggregate per-example gradients as DP-SGD does: clip each example's gradient to a global
    L2 norm, sum, add Gaussian noise, divide by the batch size.

    .. math::

      u = \frac{1}{B} \left( \sum_{b=1}^{B} g_b \min\!\left(1,
        \frac{C}{\|g_b\|_2}\right) + \sigma C\, \xi \right), \qquad \xi \sim \mathcal N(0, I)

    The updates must be *per-example* gradients: every leaf has the batch on axis 0 (e.g. from
    `jax.vmap(jax.grad(loss), in_axes=(None, 0))`); the result has the params' shapes. Put it
    first in a chain. The key lives in the state, so a run is reproducible from the key; the
    random stream is Optax's for the same key (one split per step). Noise is drawn in float32
    for low-precision leaves, which keep their dtype. Matches
    `optax.contrib.differentially_private_aggregate`.

    Args:
      l2_norm_clip: :math:`C` >= 0, the largest L2 norm of an example's gradient.
      noise_multiplier: :math:`\sigma` >= 0, the noise's standard deviation relative to
        :math:`C`.
      key: an integer seed or a PRNG key (`jax.random.key(0)`, or a legacy
        `jax.random.PRNGKey(0)`). Required (Optax falls back to seed 0 with a warning).
      seed: the same as `key`, under Optax's older name; give exactly one of the two.

    Returns:
      A `GradientTransformation` with state `DifferentiallyPrivateAggregateState(rng_key)`.

    Reference: Abadi et al., "Deep Learning with Differential Privacy" (CCS 2016).
    """
    who = "differentially_private_aggregate"
    check_non_negative(who, "l2_norm_clip", l2_norm_clip)
    check_non_negative(who, "noise_multiplier", noise_multiplier)
    if key is not None and seed is not None:
        raise ValueError(f"{who}: give either key or seed, got key={key!r} and seed={seed!r}")
    if key is None and seed is None:
        raise ValueError(
            f"{who}: needs an explicit key (an integer seed or a PRNG key) so that the noise "
            "is reproducible, got key=None"
        )
    key0 = key_data(who, "key", key if key is not None else seed)

    def init(params):
        del params
        return DifferentiallyPrivateAggregateState(rng_key=jnp.array(key0))  # may be donated

    def update(updates, state, params=None, **extra_args):
        del params, extra_args
        leaves, treedef = jax.tree.flatten(updates)
        if not leaves:
            return updates, state
        try:
            clipped, _ = per_example_global_norm_clip(updates, l2_norm_clip)
        except ValueError as error:
            raise ValueError(f"{who} expects per-example gradients: {error}") from None
        batch = jnp.shape(leaves[0])[0]
        new_key, *keys = jax.random.split(jax.random.wrap_key_data(state.rng_key), len(leaves) + 1)
        std = jnp.asarray(l2_norm_clip, jnp.float32) * noise_multiplier
        out = []
        for g, total, k in zip(leaves, treedef.flatten_up_to(clipped), keys, strict=True):
            total = widen(total)
            noise = jax.random.normal(k, total.shape, total.dtype)
            out.append(((total + std * noise) / batch).astype(g.dtype))
        new_state = DifferentiallyPrivateAggregateState(rng_key=jax.random.key_data(new_key))
        return jax.tree.unflatten(treedef, out), new_state

    return GradientTransformation(init, update)


@alias_errors(renamed={"trace: decay": "momentum"})
def dpsgd(
    learning_rate: ScalarOrSchedule,
    l2_norm_clip: ArrayLike,
    noise_multiplier: ArrayLike,
    seed: int,
    momentum: ScalarOrSchedule | None = None,
    nesterov: bool = False,
) -> GradientTransformation:
    r"""DP-SGD: SGD (optionally with momentum) on differentially private aggregated gradients.

    .. math::  w_t = w_{t-1} - \eta_t\, \mathrm{momentum}\big(\mathrm{DPAgg}(g_{t,1}, \dots,
      g_{t,B})\big)

    `chain(differentially_private_aggregate(l2_norm_clip, noise_multiplier, seed),
    trace(momentum, nesterov) or nothing, scale_by_learning_rate(learning_rate))`. The updates
    must be per-example gradients (batch on axis 0 of every leaf). Matches
    `optax.contrib.dpsgd` (same noise for the same seed).

    Args:
      learning_rate: :math:`\eta` >= 0, a float or a schedule.
      l2_norm_clip: >= 0, the largest L2 norm of an example's gradient.
      noise_multiplier: >= 0, the noise's standard deviation relative to `l2_norm_clip`.
      seed: an integer seed (a PRNG key is accepted too); the run is reproducible from it.
      momentum: in [0, 1] (float or schedule), or None for plain SGD.
      nesterov: Nesterov momentum (needs `momentum`).

    Returns:
      A `GradientTransformation`.

    Example:
      >>> import jax, jax.numpy as jnp, gradtx
      >>> tx = gradtx.contrib.dpsgd(0.1, l2_norm_clip=1.0, noise_multiplier=1.1, seed=0)
      >>> params = {"w": jnp.zeros(3)}
      >>> per_example = {"w": jnp.ones((8, 3))}  # a batch of 8 examples
      >>> updates, state = tx.update(per_example, tx.init(params), params)

    Reference: Abadi et al., "Deep Learning with Differential Privacy" (CCS 2016).
    """
    if nesterov and momentum is None:
        raise ValueError("dpsgd: nesterov=True needs a momentum value, got momentum=None")
    return chain(
        differentially_private_aggregate(l2_norm_clip, noise_multiplier, seed=seed),
        trace(momentum, nesterov) if momentum is not None else identity(),
        scale_by_learning_rate(learning_rate),
    )


__all__ = ["DifferentiallyPrivateAggregateState", "differentially_private_aggregate", "dpsgd"]
