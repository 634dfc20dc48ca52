"""Clipping to a threshold learned from the recent history of norms (Levanter's historical
clipping), and the ring buffer of recent values it shares with `gradtx.skip_on_spikes`."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from .._base._checks import check_int, check_non_negative, check_positive, expect_state
from .._base._introspect import register
from .._base._numerics import safe_increment, zero_count
from .._base._recipe import recorded
from .._base._typing import ArrayLike
from ..core._transformation import GradientTransformation
from ..tree import norm
from ._clipping import _shrink_factor

# -- a ring buffer of the last `n` values (float32), with its mean and standard deviation ----------


def ring_init(length: int) -> tuple[jax.Array, jax.Array, jax.Array]:
    """An empty ring of `length` float32 slots: `(values, filled, position)`."""
    return jnp.zeros([length], jnp.float32), zero_count(), zero_count()


def ring_push(
    values: jax.Array, filled: jax.Array, position: jax.Array, x: jax.Array, enter: jax.Array
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Write `x` into the next slot when `enter` (a bool scalar); the ring unchanged otherwise.

    The slots fill from 0 upwards, so the valid ones are always `values[:filled]` (in some
    rotation, which the statistics do not depend on)."""
    length = values.shape[0]
    x = jnp.asarray(x, jnp.float32)
    new_values = jnp.where(enter, values.at[position].set(x), values)
    new_filled = jnp.where(enter, jnp.minimum(filled + 1, length), filled).astype(filled.dtype)
    new_position = jnp.where(enter, (position + 1) % length, position).astype(position.dtype)
    return new_values, new_filled, new_position


def ring_stats(values: jax.Array, filled: jax.Array, ddof: int) -> tuple[jax.Array, jax.Array]:
    """Mean and standard deviation (`ddof` 0: population, 1: sample) of the valid slots, in
    float32; (0, 0) for an empty ring (and a 0 std for `filled <= ddof`)."""
    mask = jnp.arange(values.shape[0]) < filled
    n = filled.astype(jnp.float32)
    mean = jnp.sum(jnp.where(mask, values, 0.0)) / jnp.maximum(n, 1.0)
    sq = jnp.sum(jnp.where(mask, jnp.square(values - mean), 0.0))
    std = jnp.sqrt(sq / jnp.maximum(n - ddof, 1.0))
    return mean, std


# -- clip_by_history ---------------------------------------------------------------------------

_STD_FLOOR = 1e-6  # Levanter's floor of the standard deviation in the threshold


class ClipByHistoryState(NamedTuple):
    count: jax.Array  # type: ignore[assignment]  # int32, saturating: steps seen
    norms: jax.Array  # float32[window]: ring of the last finite pre-clip global norms
    filled: jax.Array  # int32 in [0, window]: how many slots of `norms` are valid
    position: jax.Array  # int32 in [0, window): the slot the next norm is written to
    last_scale: jax.Array  # float32: the factor the latest updates were multiplied by (1: none)


def _threshold(
    state: ClipByHistoryState, factor: ArrayLike, sigma_factor: ArrayLike, warmup: int
) -> jax.Array:
    mean, std = ring_stats(state.norms, state.filled, ddof=0)
    f, k = jnp.asarray(factor, jnp.float32), jnp.asarray(sigma_factor, jnp.float32)
    c = f * mean + k * jnp.maximum(std, _STD_FLOOR)
    return jnp.where(state.filled >= warmup, c, jnp.inf)


@recorded
def clip_by_history(
    window: int = 128,
    factor: ArrayLike = 1.0,
    *,
    sigma_factor: ArrayLike = 3.0,
    warmup: int | None = None,
) -> GradientTransformation:
    r"""Clip the global norm of the updates to a threshold set by the norms of recent steps.

    With :math:`H_t` the finite global L2 norms of the last `window` steps' incoming updates
    (before clipping), :math:`\mu_t` and :math:`\sigma_t` their mean and population standard
    deviation:

    .. math::

      c_t = \begin{cases} f \mu_t + k \max(\sigma_t, 10^{-6}) & |H_t| \ge w \\
                          \infty & \text{otherwise} \end{cases}, \qquad
      u_t = g_t \cdot \frac{c_t}{\max(\|g_t\|, c_t)}

    and then :math:`\|g_t\|` enters :math:`H` (the *unclipped* norm, so a run of clipped steps
    cannot drag the threshold down with it). While the history holds fewer than :math:`w`
    (`warmup`) norms the updates pass through unchanged. A non-finite norm never enters the
    history (the updates are then scaled as the rule says: a NaN norm gives NaN updates, for
    `apply_if_finite` or `skip_on_spikes` to catch). Placed first in a chain it clips gradients;
    placed after the preconditioner (e.g. after `scale_by_adam`) it clips updates, as Levanter
    does. The norm and the factor are float32; updates keep their dtype (bf16 in, bf16 out).

    Args:
      window: how many recent norms make the history, an int >= 1.
      factor: :math:`f` > 0, the multiple of the mean recent norm the threshold starts from
        (1: Levanter's rule; `factor=2.0, sigma_factor=0.0` clips to twice the mean norm).
      sigma_factor: :math:`k` >= 0, how many standard deviations are added to it (Levanter's
        `sigma_factor`, default 3; 0 for a pure multiple of the mean).
      warmup: :math:`w`, how many norms the history must hold before anything is clipped, an int
        in [1, window]; default `min(window, max(2, window // 2))`, Levanter's rule.

    Returns:
      A `GradientTransformation` with state `ClipByHistoryState(count, norms, filled, position,
      last_scale)`, registered as a clip for `gradtx.metrics`; its report is
      `{"clip_threshold": c_{t+1}, "clip_scale": last_scale}` (the threshold the next step will
      use, `inf` during warmup).

    Examples:
      >>> import jax.numpy as jnp
      >>> from gradtx.transforms._clip_history import clip_by_history
      >>> tx = clip_by_history(window=4, sigma_factor=1.0, warmup=2)
      >>> state = tx.init({"w": jnp.zeros(1)})
      >>> for g in (1.0, 3.0):  # history [1, 3]: threshold 2 + 1 * 1 = 3
      ...     _, state = tx.update({"w": jnp.array([g])}, state)
      >>> u, state = tx.update({"w": jnp.array([30.0])}, state)
      >>> u["w"], float(state.last_scale)
      (Array([3.], dtype=float32), 0.10000000149011612)

    Reference: Levanter's `clip_update_by_historical_norm` (`ClipUpdateNormConfig`: threshold
    mean + sigma_factor * std over a rolling window of unclipped update norms, no clipping before
    half the window is filled). Differences: non-finite norms are kept out of the history
    (Levanter records them, after which its threshold is NaN and nothing is clipped again), and
    `warmup` is an argument.
    """
    who = "clip_by_history"
    check_int(who, "window", window, minimum=1)
    check_positive(who, "factor", factor)
    check_non_negative(who, "sigma_factor", sigma_factor)
    if warmup is None:
        warmup = min(window, max(2, window // 2))
    check_int(who, "warmup", warmup, minimum=1)
    if warmup > window:
        raise ValueError(
            f"{who}: warmup must be <= window ({window}), got {warmup}; the history never holds "
            "more than `window` norms, so nothing would ever be clipped"
        )
    warmup = int(warmup)

    def init(params):
        del params
        norms, filled, position = ring_init(window)
        return ClipByHistoryState(
            count=zero_count(),
            norms=norms,
            filled=filled,
            position=position,
            last_scale=jnp.ones([], jnp.float32),
        )

    def update(updates, state, params=None, **extra_args):
        del params, extra_args
        expect_state(who, state, ClipByHistoryState)
        g_norm = norm(updates).astype(jnp.float32)
        c = _threshold(state, factor, sigma_factor, warmup)
        scale = _shrink_factor(g_norm, c)
        updates = jax.tree.map(lambda g: (g * scale).astype(g.dtype), updates)
        norms, filled, position = ring_push(
            state.norms, state.filled, state.position, g_norm, jnp.isfinite(g_norm)
        )
        return updates, ClipByHistoryState(
            count=safe_increment(state.count),
            norms=norms,
            filled=filled,
            position=position,
            last_scale=scale,
        )

    def report(state):
        return {
            "clip_threshold": _threshold(state, factor, sigma_factor, warmup),
            "clip_scale": state.last_scale,
        }

    return register(
        GradientTransformation(init, update),
        "clip",
        report=report,
        removed=lambda before, state: 1.0 - state.last_scale,
    )


__all__ = ["ClipByHistoryState", "clip_by_history"]
