"""Reduce-on-plateau: scale the updates down when a monitored value stops improving."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from .._base._checks import check_in_range, check_int, check_non_negative
from .._base._numerics import safe_increment
from .._base._recipe import recorded
from ..core._transformation import GradientTransformation, monitored_value

_INF = float("inf")


class ReduceLROnPlateauState(NamedTuple):
    """`optax.contrib.ReduceLROnPlateauState`'s fields, in its order (also `ReduceOnPlateauState`).

    `count` was `accumulation_count` before gradtx took Optax's layout: a checkpoint saved by
    field name (`gradtx.save`, `state_dict`) under the old name needs that key renamed to load.
    """

    scale: jax.Array  # float32, the factor applied to the updates
    best_value: jax.Array  # float32, the best (lowest) evaluated value so far, +inf at first
    plateau_count: jax.Array  # int32, evaluations since the last improvement
    cooldown_count: jax.Array  # int32, evaluations left in the cool-down
    count: jax.Array  # type: ignore[assignment]  # int32, values gathered for the next evaluation
    avg_value: jax.Array  # float32, the mean of those values


ReduceOnPlateauState = ReduceLROnPlateauState  # gradtx's earlier name, the same class


def running_mean(count: jax.Array, mean: jax.Array, value: jax.Array) -> tuple[jax.Array, ...]:
    """One more value into a running mean: returns (count + 1, new mean)."""
    count = safe_increment(count)
    return count, mean + (value - mean) / count.astype(jnp.float32)


@recorded
def reduce_on_plateau(
    factor: float = 0.1,
    patience: int = 10,
    rtol: float = 1e-4,
    atol: float = 0.0,
    cooldown: int = 0,
    accumulation_size: int = 1,
    min_scale: float = 0.0,
) -> GradientTransformation:
    r"""Multiply the updates by a scale that drops by `factor` when the value plateaus.

    Every `update` gets the monitored value (e.g. the loss) as `value=`. Each
    `accumulation_size` calls, their mean :math:`\bar v` is evaluated:

    .. math::

      \text{improved} \iff \bar v < b - \text{rtol}\,|b| - \text{atol}, \qquad
      b \leftarrow \bar v \text{ if improved}

    where :math:`b` is the best value so far (:math:`+\infty` at first, so the first evaluation
    always improves). Otherwise the plateau count grows; when it reaches `patience` the scale
    becomes :math:`\max(s \cdot \text{factor}, \text{min\_scale})`, the count restarts and a
    cool-down of `cooldown` evaluations begins, during which the plateau count stays 0. The
    updates of every call are multiplied by the current scale (already the new one on the call
    that reduced it).

    Matches `optax.contrib.reduce_on_plateau` for positive values. For negative values Optax's
    test `v < (1 - rtol) b - atol` moves its margin the wrong way (a flat or worsening negative
    loss counts as improving, so it never reduces); gradtx uses the relative margin
    :math:`\text{rtol}\,|b|`, correct for either sign. `patience` must be >= 1 (Optax's
    `patience=0` reduces only on improvements). The state is Optax's `ReduceLROnPlateauState`
    (same fields, same order); its scale and values are float32 whatever the params' dtype (Optax
    uses the params' lowest / highest float dtype). Optax also refuses `factor=1`,
    `rtol=atol=0` and `rtol > 1`; gradtx accepts them (no reduction; any strict decrease counts
    as an improvement; a margin wider than the value).

    Args:
      factor: the reduction factor, in (0, 1].
      patience: evaluations without improvement before a reduction, >= 1.
      rtol: relative improvement needed, >= 0.
      atol: absolute improvement needed, >= 0.
      cooldown: evaluations after a reduction during which no new plateau is counted, >= 0.
      accumulation_size: calls whose values are averaged into one evaluation, >= 1 (1 when the
        value is already an epoch's validation loss; larger for per-batch losses).
      min_scale: the scale never drops below this, >= 0.

    Returns:
      A `GradientTransformation` with state `ReduceLROnPlateauState`; `update` needs `value=`.

    Reference: PyTorch `ReduceLROnPlateau`; `optax.contrib.reduce_on_plateau`.
    """
    who = "reduce_on_plateau"
    check_in_range(who, "factor", factor, 0.0, 1.0, low_open=True)
    check_int(who, "patience", patience, minimum=1)
    check_non_negative(who, "rtol", rtol)
    check_non_negative(who, "atol", atol)
    check_int(who, "cooldown", cooldown, minimum=0)
    check_int(who, "accumulation_size", accumulation_size, minimum=1)
    check_in_range(who, "min_scale", min_scale, 0.0, 1.0)

    def init(params):
        del params
        return ReduceLROnPlateauState(
            scale=jnp.ones([], jnp.float32),
            best_value=jnp.full([], _INF, jnp.float32),
            plateau_count=jnp.zeros([], jnp.int32),
            cooldown_count=jnp.zeros([], jnp.int32),
            count=jnp.zeros([], jnp.int32),
            avg_value=jnp.zeros([], jnp.float32),
        )

    def update(updates, state, params=None, **extra_args):
        del params
        value = monitored_value(who, extra_args)
        count, avg = running_mean(state.count, state.avg_value, value)
        evaluate = count >= accumulation_size

        best = state.best_value
        margin = jnp.float32(rtol) * jnp.abs(best) + jnp.float32(atol)
        threshold = jnp.where(best == _INF, _INF, best - margin)
        improved = avg < threshold
        plateau = jnp.where(improved, 0, safe_increment(state.plateau_count))
        in_cooldown = state.cooldown_count > 0
        reduce = jnp.logical_not(in_cooldown) & (plateau >= patience)
        reduced = jnp.maximum(state.scale * jnp.float32(factor), jnp.float32(min_scale))

        new_state = ReduceLROnPlateauState(
            scale=jnp.where(evaluate & reduce, reduced, state.scale),
            best_value=jnp.where(evaluate & improved, avg, best),
            plateau_count=jnp.where(
                evaluate, jnp.where(in_cooldown | reduce, 0, plateau), state.plateau_count
            ).astype(jnp.int32),
            cooldown_count=jnp.where(
                evaluate,
                jnp.where(in_cooldown, state.cooldown_count - 1, jnp.where(reduce, cooldown, 0)),
                state.cooldown_count,
            ).astype(jnp.int32),
            count=jnp.where(evaluate, 0, count).astype(jnp.int32),
            avg_value=jnp.where(evaluate, 0.0, avg).astype(jnp.float32),
        )
        scale = new_state.scale
        updates = jax.tree.map(lambda g: (scale * g).astype(g.dtype), updates)
        return updates, new_state

    return GradientTransformation(init, update)


__all__ = ["ReduceLROnPlateauState", "ReduceOnPlateauState", "reduce_on_plateau"]
