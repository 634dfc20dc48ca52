"""RETURNN's "newbob" learning-rate control as a transformation that scales the updates."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from .._base._checks import check_int, check_non_negative, check_one_of, check_positive, concrete
from .._base._numerics import safe_increment
from .._base._recipe import recorded
from ..core._transformation import GradientTransformation, monitored_value
from ._plateau import running_mean

_MODES = {
    "relative": "relative",
    "absolute": "absolute",
    "multi_epoch": "multi_epoch",
    # RETURNN's `learning_rate_control` names
    "newbob": "relative",
    "newbob_rel": "relative",
    "newbob_relative": "relative",
    "newbob_abs": "absolute",
    "newbob_multi_epoch": "multi_epoch",
}


class NewbobState(NamedTuple):
    scale: jax.Array  # float32, learning rate / initial learning rate, applied to the updates
    last_error: jax.Array  # float32, the previous epoch's error
    epochs: jax.Array  # int32, completed epochs (saturating)
    epochs_at_scale: jax.Array  # int32, consecutive completed epochs run with the current scale
    relative_errors: jax.Array  # float32[num_epochs], ring of recent relative errors
    accumulation_count: jax.Array  # int32, values gathered for the current epoch
    avg_value: jax.Array  # float32, their mean


@recorded
def newbob(
    mode: str = "relative",
    *,
    decay: float = 0.5,
    growth: float = 1.0,
    threshold: float = -0.01,
    grow_threshold: float | None = None,
    relative_error_div_by_old: bool = False,
    relative_to_scale: bool = False,
    num_epochs: int = 5,
    update_interval: int | None = None,
    min_scale: float = 0.0,
    min_epochs_per_scale: int = 0,
    accumulation_size: int = 1,
) -> GradientTransformation:
    r"""Newbob: after each epoch, decay the learning-rate scale if the error did not improve
    enough, otherwise grow it.

    `update` gets the epoch's error as `value=`; every `accumulation_size` calls make one epoch,
    whose error :math:`e_k` is the mean of their values. After epoch :math:`k` (from the second
    on) the scale :math:`s` for the next epoch is set by the rule of `mode`:

    - "relative" (RETURNN `newbob`): :math:`r = (e_k - e_{k-1}) / |e_k|` (or
      :math:`/|e_{k-1}|`), divided by :math:`s` when `relative_to_scale`; decay if
      :math:`r >` `threshold`, else grow.
    - "absolute" (`newbob_abs`): decay if :math:`e_k - e_{k-1} >` `threshold`, else grow.
    - "multi_epoch" (`newbob_multi_epoch`): :math:`\bar r`, the mean of the last `num_epochs`
      relative errors, is checked only before epochs :math:`k + 1 \equiv 1 \pmod{\text{interval}}`;
      decay if :math:`\bar r >` `threshold`, grow if :math:`\bar r <` `grow_threshold`.

    Decay is :math:`s \leftarrow \max(s \cdot \text{decay}, \text{min\_scale})`, growth
    :math:`s \leftarrow s \cdot \text{growth}` (not bounded). With `min_epochs_per_scale` = M > 1
    a scale is kept for at least M epochs. The call that completes an epoch already returns
    updates scaled for the next one (as `reduce_on_plateau` does); chain it before
    `scale_by_learning_rate(lr)`, so the learning rate is `lr * s`.

    RETURNN's settings map as: `newbob_learning_rate_decay` -> decay,
    `newbob_learning_rate_growth` -> growth, `newbob_relative_error_threshold` (or
    `newbob_error_threshold`) -> threshold, `newbob_relative_error_grow_threshold` ->
    grow_threshold, `newbob_relative_error_div_by_old`,
    `learning_rate_control_relative_error_relative_lr` -> relative_to_scale,
    `newbob_multi_num_epochs` -> num_epochs,
    `newbob_multi_update_interval` -> update_interval, `min_learning_rate / learning_rate` ->
    min_scale, `learning_rate_control_min_num_epochs_per_new_lr` -> min_epochs_per_scale.

    Args:
      mode: "relative", "absolute" or "multi_epoch" (RETURNN's names `newbob`, `newbob_rel`,
        `newbob_abs`, `newbob_multi_epoch` are accepted too).
      decay: the factor on a decay, > 0.
      growth: the factor on a growth, > 0 (1 keeps the scale).
      threshold: the decay threshold (on the relative or absolute change).
      grow_threshold: "multi_epoch" only: grow below it; default `threshold`; <= `threshold`.
      relative_error_div_by_old: divide the change by the old error instead of the new one.
      relative_to_scale: divide relative errors by the scale in use.
      num_epochs: "multi_epoch": how many relative errors are averaged, >= 1.
      update_interval: "multi_epoch": epochs between checks, >= 1 (default `num_epochs`).
      min_scale: the lower bound of a decay, >= 0.
      min_epochs_per_scale: keep a new scale for at least this many epochs, >= 0.
      accumulation_size: calls per epoch, >= 1.

    Returns:
      A `GradientTransformation` with state `NewbobState`; `update` needs `value=`.

    Reference: RETURNN `learning_rate_control.py` (`NewbobRelative`, `NewbobAbs`,
    `NewbobMultiEpoch`).
    """
    who = "newbob"
    check_one_of(who, "mode", mode, list(_MODES))
    rule = _MODES[mode]
    check_positive(who, "decay", decay)
    check_positive(who, "growth", growth)
    check_int(who, "num_epochs", num_epochs, minimum=1)
    interval = num_epochs if update_interval is None else update_interval
    check_int(who, "update_interval", interval, minimum=1)
    check_non_negative(who, "min_scale", min_scale)
    check_int(who, "min_epochs_per_scale", min_epochs_per_scale, minimum=0)
    check_int(who, "accumulation_size", accumulation_size, minimum=1)
    grow_thr = threshold if grow_threshold is None else grow_threshold
    thr, gthr = concrete(threshold), concrete(grow_thr)
    if rule == "multi_epoch" and thr is not None and gthr is not None and float(gthr) > float(thr):
        raise ValueError(
            f"{who}: grow_threshold must be <= threshold (an error change cannot both decay and "
            f"grow the scale), got grow_threshold={float(gthr)}, threshold={float(thr)}"
        )
    ring = int(num_epochs)

    def init(params):
        del params
        return NewbobState(
            scale=jnp.ones([], jnp.float32),
            last_error=jnp.zeros([], jnp.float32),
            epochs=jnp.zeros([], jnp.int32),
            epochs_at_scale=jnp.zeros([], jnp.int32),
            relative_errors=jnp.zeros([ring], jnp.float32),
            accumulation_count=jnp.zeros([], jnp.int32),
            avg_value=jnp.zeros([], jnp.float32),
        )

    def end_of_epoch(state: NewbobState, error: jax.Array) -> NewbobState:
        scale = state.scale
        epochs = safe_increment(state.epochs)  # k, this epoch's number
        at_scale = safe_increment(state.epochs_at_scale)
        has_previous = state.epochs >= 1
        diff = error - state.last_error
        denom = jnp.abs(state.last_error if relative_error_div_by_old else error)
        relative = diff / denom
        if relative_to_scale:
            relative = jnp.where(scale > 0, relative / scale, relative)
        rel_errors = state.relative_errors
        if rule == "multi_epoch":
            slot = jnp.maximum(state.epochs - 1, 0) % ring
            rel_errors = jnp.where(
                has_previous, rel_errors.at[slot].set(relative), state.relative_errors
            )
            valid = jnp.minimum(state.epochs, ring)  # relative errors known: min(k - 1, ring)
            mask = jnp.arange(ring) < valid
            mean = jnp.sum(jnp.where(mask, rel_errors, 0.0)) / jnp.maximum(valid, 1)
            checked = has_previous
            if interval > 1:
                checked = checked & ((epochs + 1) % interval == 1)
            do_decay = mean > jnp.float32(threshold)
            do_grow = mean < jnp.float32(grow_thr)
        else:
            checked = has_previous
            change = relative if rule == "relative" else diff
            do_decay = change > jnp.float32(threshold)
            do_grow = jnp.logical_not(do_decay)
        if min_epochs_per_scale > 1:
            checked = checked & (at_scale >= min_epochs_per_scale)
        decayed = jnp.maximum(scale * jnp.float32(decay), jnp.float32(min_scale))
        grown = scale * jnp.float32(growth)
        new_scale = jnp.where(
            checked & do_decay, decayed, jnp.where(checked & do_grow, grown, scale)
        )
        return NewbobState(
            scale=new_scale,
            last_error=error,
            epochs=epochs,
            epochs_at_scale=jnp.where(new_scale != scale, 0, at_scale).astype(jnp.int32),
            relative_errors=rel_errors,
            accumulation_count=jnp.zeros([], jnp.int32),
            avg_value=jnp.zeros([], jnp.float32),
        )

    def update(updates, state, params=None, **extra_args):
        del params
        value = monitored_value(who, extra_args)
        count, avg = running_mean(state.accumulation_count, state.avg_value, value)
        ended = end_of_epoch(state, avg)
        during = state._replace(accumulation_count=count, avg_value=avg)
        done = count >= accumulation_size
        new_state = jax.tree.map(lambda a, b: jnp.where(done, a, b), ended, during)
        scale = new_state.scale
        updates = jax.tree.map(lambda g: (scale * g).astype(g.dtype), updates)
        return updates, new_state

    return GradientTransformation(init, update)


__all__ = ["NewbobState", "newbob"]
