"""Momentum: the `trace` of past updates (heavy ball and Nesterov), with the learning rate outside
the buffer (`trace`, Optax / PyTorch) or inside it (`trace_with_lr`, nnabla)."""

from typing import Any, NamedTuple

import jax

from .._base._checks import check_in_range, check_non_negative
from .._base._typing import ScalarOrSchedule, Updates
from ..core._transformation import GradientTransformation
from ..state import _quantize
from ..tree import assert_same_structure
from ._moments import packs_leaves, step_buffer
from ._tier import (
    check_float_dtype,
    check_moment_dtype,
    moment_buffers,
    safe_increment,
    value_at,
    widen,
    zero_count,
    zeros_like_params,
)


class TraceState(NamedTuple):
    count: jax.Array  # type: ignore[assignment]  # int32, saturating
    trace: Updates  # the momentum buffer, dtype fixed at init


def trace(
    decay: ScalarOrSchedule, nesterov: bool = False, accumulator_dtype: Any = None
) -> GradientTransformation:
    r"""Momentum: accumulate a decaying sum of past updates.

    .. math::

      m_t = g_t + \mu\, m_{t-1}, \qquad
      u_t = \begin{cases} g_t + \mu\, m_t & \text{Nesterov} \\ m_t & \text{otherwise} \end{cases}

    This is the "trace, then scale" form used by Optax and PyTorch (the learning rate is applied
    afterwards). nnabla's Momentum keeps the learning rate inside the buffer, which differs when
    the learning rate changes over time.

    Args:
      decay: the momentum :math:`\mu` in [0, 1], a float or a schedule `count -> mu`.
      nesterov: use Nesterov's accelerated form.
      accumulator_dtype: dtype of the buffer (default: the parameters' dtype), or
        `gradtx.quantized()` for block-wise 8-bit storage (signed code; the update then reads
        the buffer as stored).

    Returns:
      A `GradientTransformation` with state `TraceState(count, trace)`.

    Reference: Polyak (1964); Sutskever et al., "On the importance of initialization and
    momentum in deep learning" (2013).
    """
    check_in_range("trace", "decay", decay, 0.0, 1.0)
    check_moment_dtype("trace", "accumulator_dtype", accumulator_dtype)
    pack = packs_leaves(accumulator_dtype)

    def init(params):
        buffers = moment_buffers(params, accumulator_dtype, signed=True)
        return TraceState(count=zero_count(), trace=buffers)

    def update(updates, state, params=None, **extra_args):
        del params, extra_args
        trace_view = _quantize.as_leaves(state.trace)
        assert_same_structure("trace", updates=updates, **{"state.trace": trace_view})
        mu = value_at(decay, state.count)

        def rule(g, t):  # t: the buffer as read (its own dtype; float32 when quantized)
            if not nesterov:  # the update is the new buffer as stored
                return g + mu * t, lambda new: new
            # `mu * m_t` rounds in the buffer's dtype, as `mu * m_{t-1}` does
            return g + mu * t, lambda new: g + mu * new.astype(t.dtype)

        updates, buffers = step_buffer(rule, updates, state.trace, pack=pack)
        return updates, TraceState(count=safe_increment(state.count), trace=buffers)

    return GradientTransformation(init, update)


def trace_with_lr(
    learning_rate: ScalarOrSchedule,
    decay: ScalarOrSchedule = 0.9,
    *,
    nesterov: bool = False,
    flip_sign: bool = True,
    accumulator_dtype: Any = None,
) -> GradientTransformation:
    r"""Momentum whose buffer accumulates learning-rate-scaled gradients (nnabla's form).

    .. math::

      v_t = \mu\, v_{t-1} + \eta_t\, g_t, \qquad
      u_t = -\begin{cases} \eta_t g_t + \mu\, v_t & \text{Nesterov} \\
                           v_t & \text{otherwise} \end{cases}

    With a constant learning rate this equals `trace` followed by `scale_by_learning_rate`; when
    the learning rate changes it does not: here a new learning rate applies to new gradients only,
    while "trace, then scale" rescales the whole accumulated momentum at once. nnabla's
    `Momentum` (:math:`v = \gamma v + \eta g;\ w \mathrel{-}= v`) and `Nesterov`
    (:math:`v' = \gamma v - \eta g;\ w \mathrel{+}= -\gamma v + (1+\gamma) v'`, which is the
    Nesterov line above with :math:`v \to -v`) use this form. Like `scale_by_learning_rate` it
    ends a chain.

    Args:
      learning_rate: :math:`\eta_t` >= 0, a float or a schedule `count -> lr`.
      decay: the momentum :math:`\mu` in [0, 1], a float or a schedule.
      nesterov: Nesterov's form.
      flip_sign: negate the step (gradient descent).
      accumulator_dtype: dtype of the buffer (default: the params' dtype).

    Returns:
      A `GradientTransformation` with state `TraceState(count, trace)`.

    Reference: nnabla `Momentum`, `Nesterov` (`src/nbla/solver/generic/momentum.cpp`,
    `nesterov.cpp`); Sutskever et al. (ICML 2013).
    """
    who = "trace_with_lr"
    check_non_negative(who, "learning_rate", learning_rate)
    check_in_range(who, "decay", decay, 0.0, 1.0)
    check_float_dtype(who, "accumulator_dtype", accumulator_dtype)
    sign = -1.0 if flip_sign else 1.0

    def init(params):
        return TraceState(count=zero_count(), trace=zeros_like_params(params, accumulator_dtype))

    def update(updates, state, params=None, **extra_args):
        del params, extra_args
        assert_same_structure(who, updates=updates, **{"state.trace": state.trace})
        eta = value_at(learning_rate, state.count)
        mu = value_at(decay, state.count)

        def rule(g, v):
            step = eta * g
            if nesterov:
                return mu * widen(v) + step, lambda new: sign * (step + mu * new)
            return mu * widen(v) + step, lambda new: sign * new

        updates, trace = step_buffer(rule, updates, state.trace)
        return updates, TraceState(count=safe_increment(state.count), trace=trace)

    return GradientTransformation(init, update)


__all__ = ["TraceState", "trace", "trace_with_lr"]
