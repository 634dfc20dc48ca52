"""Skip the steps whose loss or gradient norm spikes above its recent history."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from .._base._checks import (
    check_int,
    check_one_of,
    check_positive,
    expect_state,
)
from .._base._introspect import counts_run_steps
from .._base._numerics import safe_increment, zero_count
from .._base._recipe import recorded
from .._base._typing import ArrayLike, OptState
from ..core._transformation import (
    GradientTransformation,
    as_transformation,
    forward_extra_args,
    monitored_value,
)
from ..transforms._clip_history import ring_init, ring_push, ring_stats
from ..tree import norm
from ._common import register_wrapper, run_or_skip

METRICS = ("loss", "grad_norm")


@counts_run_steps("count")
class SkipOnSpikesState(NamedTuple):
    count: jax.Array  # type: ignore[assignment]  # int32, saturating: steps seen (skipped or not)
    last_skipped: jax.Array  # bool: whether the latest step was skipped
    consecutive_skips: jax.Array  # int32: skipped steps in a row so far (0 after an applied one)
    total_skipped: jax.Array  # int32, saturating: skipped steps since init (never reset)
    window: jax.Array  # float32[window]: ring of the metric on the last accepted finite steps
    filled: jax.Array  # int32 in [0, window]: how many slots of `window` are valid
    position: jax.Array  # int32 in [0, window): the slot the next accepted value is written to
    inner_state: OptState


def _report(state: Any) -> dict[str, jax.Array]:
    return {
        "skipped": state.last_skipped,
        "total_skipped": state.total_skipped,
        "consecutive_skips": state.consecutive_skips,
    }


@recorded
def skip_on_spikes(
    tx: GradientTransformation,
    *,
    metric: str = "loss",
    window: int = 128,
    threshold: ArrayLike = 6.0,
    warmup: int | None = None,
    max_consecutive: int | None = None,
) -> GradientTransformation:
    r"""Skip the whole step when the loss (or the gradient norm) spikes above its recent history.

    With :math:`x_t` the step's metric (the loss passed as `value=`, or the float32 global L2
    norm of the incoming updates), :math:`W_t` the metric of the last `window` *accepted* steps,
    :math:`\bar x_t` their mean and :math:`s_t` their sample standard deviation (Bessel's
    :math:`n - 1`):

    .. math::

      \text{spike}_t = |W_t| \ge w \;\land\; x_t > \bar x_t + k\, s_t, \qquad
      \text{skip}_t = \neg\,\mathrm{finite}(x_t) \;\lor\; \big(\text{spike}_t \land (r_t < m)\big)

    where :math:`r_t` is the number of steps skipped in a row before this one and :math:`m` is
    `max_consecutive` (:math:`\infty` for None). A skipped step returns zero updates (in the
    gradients' dtype) and leaves the inner state bit for bit as it was; an applied step runs `tx`
    unchanged and, when :math:`x_t` is finite, writes it into the window (a ring buffer). So a
    spike never raises the mean and spread that the next steps are judged by, and a NaN / Inf
    metric never enters them. With `max_consecutive`, after that many skips in a row the next
    finite spike is applied anyway (and enters the window), so a genuine change of regime cannot
    stall training forever; the counter then starts again. A non-finite metric is always
    skipped, however many steps were skipped before it (applying it would put NaN / Inf into
    the params and the moments); it counts in :math:`r_t`.

    The comparison is written without a division, so a constant history does not skip an equal
    value (OLMo-core's z-score is 0/0 = NaN there, a skip). Only upward spikes are skipped:
    OLMo-core compares :math:`|x_t - \bar x_t|` and also skips an abnormally *low* loss; MaxText's
    port, as here, skips only values above the threshold.

    With gradient accumulation, wrap the inner optimizer:
    `accumulate_k_steps(skip_on_spikes(tx, ...), k)` checks whole steps: the gradient norm is
    that of the accumulated (mean) gradient, and `value=` is what the *k-th* micro-step's
    `update` got (accumulate_k_steps forwards the extra arguments of the emitting micro-step),
    so pass the mean loss of the k micro-batches there (any value on the others; it is needed
    on every call, as the inner update is traced inside a `lax.cond`).

    Args:
      tx: the transformation to protect.
      metric: `"loss"` (the `value=` passed to `update`, which is then required) or
        `"grad_norm"` (the global L2 norm of the updates `tx` would receive).
      window: how many accepted steps the statistics cover, an int >= 2 (the sample standard
        deviation needs two values).
      threshold: :math:`k` > 0, how many standard deviations above the mean is a spike
        (OLMo-core's `sigma_factor`, default 6).
      warmup: :math:`w`, how many values the window must hold before a step can be skipped for
        its size, an int in [2, window]; default `min(window, max(20, window // 2) - 1)`:
        OLMo-core checks once it holds `max(20, window // 2)` losses counting the current one
        (with `window < 19` it never would; here the cap is the full window).
      max_consecutive: None (always skip a spike) or an int >= 0: how many steps in a row may be
        skipped before the next finite spike is applied anyway (0: skip only non-finite
        values). A non-finite value is skipped whatever this is.

    Returns:
      A `GradientTransformation` with state `SkipOnSpikesState(count, last_skipped,
      consecutive_skips, total_skipped, window, filled, position, inner_state)`; only the
      window's length depends on the arguments. Registered as a wrapper for `gradtx.metrics`,
      reporting `{"skipped": last_skipped, "total_skipped": ..., "consecutive_skips": ...}`.

    Examples:
      >>> import jax.numpy as jnp, gradtx
      >>> from gradtx.wrappers._spikes import skip_on_spikes
      >>> tx = skip_on_spikes(gradtx.sgd(1.0), window=4, threshold=3.0, warmup=3)
      >>> params = {"w": jnp.zeros(1)}
      >>> state = tx.init(params)
      >>> for loss in (1.0, 1.1, 0.9):
      ...     _, state = tx.update({"w": jnp.ones(1)}, state, params, value=loss)
      >>> u, state = tx.update({"w": jnp.ones(1)}, state, params, value=9.0)  # 9 > 1 + 3 * 0.1
      >>> u["w"], bool(state.last_skipped), int(state.total_skipped)
      (Array([0.], dtype=float32), True, 1)
      >>> u, state = tx.update({"w": jnp.ones(1)}, state, params, value=1.05)
      >>> u["w"], bool(state.last_skipped)
      (Array([-1.], dtype=float32), False)

    Reference: OLMo-core's `SkipStepOptimizer` (`rolling_interval_length=128`, `sigma_factor=6`,
    `torch.std_mean`: the sample standard deviation) and MaxText's `skip_step_on_spikes` (a port
    with Bessel's correction, one-sided). Differences: only accepted, finite values enter the
    window (both record every step, so one NaN spoils their statistics and a skipped spike
    widens them), one metric per wrapper (nest two wrappers to watch both), and
    `max_consecutive`.
    """
    who = "skip_on_spikes"
    tx = as_transformation(tx, who, "tx")
    check_one_of(who, "metric", metric, METRICS)
    check_int(who, "window", window, minimum=2)
    check_positive(who, "threshold", threshold)
    if warmup is None:
        warmup = min(window, max(20, window // 2) - 1)
    check_int(who, "warmup", warmup, minimum=2)
    if warmup > window:
        raise ValueError(
            f"{who}: warmup must be <= window ({window}), got {warmup}; the window never holds "
            "more than `window` values, so no step would ever be skipped (raise window or "
            "lower warmup)"
        )
    if max_consecutive is not None:
        check_int(who, "max_consecutive", max_consecutive, minimum=0)
    window, warmup = int(window), int(warmup)
    inner_update = forward_extra_args(tx.update)

    def init(params):
        values, filled, position = ring_init(window)
        return SkipOnSpikesState(
            count=zero_count(),
            last_skipped=jnp.asarray(False),
            consecutive_skips=zero_count(),
            total_skipped=zero_count(),
            window=values,
            filled=filled,
            position=position,
            inner_state=tx.init(params),
        )

    def update(updates, state, params=None, **extra_args):
        expect_state(who, state, SkipOnSpikesState)
        if metric == "loss":
            x = monitored_value(who, extra_args)
        else:
            x = norm(updates).astype(jnp.float32)
        finite = jnp.isfinite(x)
        mean, std = ring_stats(state.window, state.filled, ddof=1)
        limit = mean + jnp.asarray(threshold, jnp.float32) * std
        spike = (state.filled >= warmup) & (x > limit)
        if max_consecutive is not None:  # forces a finite spike only, never a NaN / Inf
            spike = spike & (state.consecutive_skips < max_consecutive)
        skip = ~finite | spike

        new_updates, inner_state = run_or_skip(
            who, ~skip, inner_update, updates, state.inner_state, params, extra_args
        )
        values, filled, position = ring_push(
            state.window, state.filled, state.position, x, ~skip & finite
        )
        zero = jnp.zeros_like(state.consecutive_skips)
        return new_updates, SkipOnSpikesState(
            count=safe_increment(state.count),
            last_skipped=skip,
            consecutive_skips=jnp.where(skip, safe_increment(state.consecutive_skips), zero),
            total_skipped=jnp.where(skip, safe_increment(state.total_skipped), state.total_skipped),
            window=values,
            filled=filled,
            position=position,
            inner_state=inner_state,
        )

    return register_wrapper(GradientTransformation(init, update), tx, report=_report)


__all__ = ["SkipOnSpikesState", "skip_on_spikes"]
