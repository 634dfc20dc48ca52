"""Gradient preprocessing: annealed Gaussian gradient noise and gradient centralization."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from .._base._checks import check_non_negative, check_positive
from .._base._numerics import key_data, safe_increment, widen, zero_count
from .._base._recipe import recorded
from .._base._typing import ArrayLike, Seed
from ..core._transformation import GradientTransformation, stateless


class AddNoiseState(NamedTuple):
    count: jax.Array  # type: ignore[assignment]  # int32, saturating
    rng_key: jax.Array  # raw PRNG key data (uint32), as `jax.random.key_data` returns it


@recorded
def add_noise(
    eta: ArrayLike,
    gamma: ArrayLike = 0.55,
    seed: Seed | None = None,
    *,
    key: Seed | None = None,
    truncation: float | None = None,
) -> GradientTransformation:
    r"""Add annealed Gaussian noise to the updates.

    .. math::  u_t = g_t + \sigma_t\, \xi_t, \qquad \sigma_t = \sqrt{\eta / t^{\gamma}}, \qquad
      \xi_t \sim \mathcal N(0, I), \quad t = 1, 2, \dots

    The PRNG key lives in the state, so a run is reproducible from `seed` and from a checkpoint.
    The random stream is the one of `optax.add_noise` with the same key (one split per step, then
    one key per leaf). Noise is drawn in float32 for low-precision leaves; updates keep their
    dtype. With `truncation=c`, :math:`\xi_t` is a standard normal truncated to :math:`[-c, c]`
    (redrawn outside it, as TF's `truncated_normal`; its standard deviation is then below 1:
    0.880 for c = 2). RETURNN's `gradient_noise=σ` is `add_noise(σ**2, 0.0, truncation=2.0)`.

    Args:
      eta: :math:`\eta` >= 0, the variance at the first step.
      gamma: :math:`\gamma` >= 0, the decay exponent of the variance (default 0.55, the
        paper's value; Optax requires it).
      seed: an integer seed or a PRNG key (`jax.random.key(0)` or a legacy
        `jax.random.PRNGKey(0)`); Optax's third positional argument `key` maps here. None (and
        no `key`) means seed 0.
      key: the same as `seed`, under Optax's name; give at most one of the two.
      truncation: None (a normal, Optax's stream) or c > 0: a normal truncated to
        :math:`\pm c` (in units of :math:`\sigma_t`).

    Returns:
      A `GradientTransformation` with state `AddNoiseState(count, rng_key)`.

    Reference: Neelakantan et al., "Adding Gradient Noise Improves Learning for Very Deep
    Networks" (arXiv:1511.06807, 2015).
    """
    who = "add_noise"
    check_non_negative(who, "eta", eta)
    check_non_negative(who, "gamma", gamma)
    if truncation is not None:
        check_positive(who, "truncation", truncation)
    if seed is not None and key is not None:
        raise ValueError(f"{who}: give either seed or key, got seed={seed!r} and key={key!r}")
    seed = key if key is not None else (0 if seed is None else seed)
    key_data(who, "seed", seed)  # validate now rather than at the first init

    def init(params):
        del params
        return AddNoiseState(count=zero_count(), rng_key=key_data(who, "seed", seed))

    def update(updates, state, params=None, **extra_args):
        del params, extra_args
        count = safe_increment(state.count)
        std = jnp.sqrt(eta / jnp.asarray(count, jnp.float32) ** gamma)
        next_key, sample_key = jax.random.split(jax.random.wrap_key_data(state.rng_key))
        leaves, treedef = jax.tree.flatten(updates)
        keys = jax.random.split(sample_key, len(leaves))
        noisy = []
        for i, g in enumerate(leaves):
            g32 = widen(g)
            if truncation is None:
                xi = jax.random.normal(keys[i], jnp.shape(g), g32.dtype)
            else:
                c = float(truncation)
                xi = jax.random.truncated_normal(keys[i], -c, c, jnp.shape(g), g32.dtype)
            noisy.append((g32 + std * xi).astype(g.dtype))
        new_state = AddNoiseState(count=count, rng_key=jax.random.key_data(next_key))
        return jax.tree.unflatten(treedef, noisy), new_state

    return GradientTransformation(init, update)


@recorded
def centralize() -> GradientTransformation:
    r"""Subtract from each update its mean over all axes but the first (gradient centralization).

    .. math::  u_{i,\dots} = g_{i,\dots} - \mathrm{mean}_{\dots}\, g_{i,\dots}

    Leaves of rank 0 and 1 pass unchanged. The mean is computed in float32. Matches
    `optax.centralize`.

    Returns:
      A stateless `GradientTransformation` (state `EmptyState`).

    Reference: Yong et al., "Gradient Centralization: A New Optimization Technique for Deep
    Neural Networks" (ECCV 2020).
    """

    def leaf(g):
        if jnp.ndim(g) <= 1:
            return g
        g32 = widen(g)
        mean = jnp.mean(g32, axis=tuple(range(1, g32.ndim)), keepdims=True)
        return (g32 - mean).astype(g.dtype)

    return stateless(lambda updates, params: jax.tree.map(leaf, updates))


__all__ = ["AddNoiseState", "add_noise", "centralize"]
