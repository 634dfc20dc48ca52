"""Momentum: the `trace` of past updates (heavy ball and Nesterov), with the learning rate outside
the buffer (`trace`, Optax / PyTorch) or inside it (`trace_with_lr`, nnabla)."""

from typing import Any, NamedTuple

import jax

from .._base._checks import check_in_range
from .._base._numerics import widen
from .._base._recipe import recorded
from .._base._typing import DType, ScalarOrSchedule, Updates
from ..core._transformation import GradientTransformation
from ..state._quantize import MomentDType
from ._rule import non_negative, rule, slot


def _momentum(who: str, name: str, value: Any) -> None:
    check_in_range(who, name, value, 0.0, 1.0)


class TraceState(NamedTuple):
    count: jax.Array  # type: ignore[assignment]  # int32, saturating
    trace: Updates  # the momentum buffer, dtype fixed at init


@recorded
def trace(
    decay: ScalarOrSchedule, nesterov: bool = False, accumulator_dtype: MomentDType | None = None
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
    return _trace(decay=decay, nesterov=nesterov, accumulator_dtype=accumulator_dtype)


@rule(
    "trace",
    TraceState,
    slots={"trace": slot(dtype="accumulator_dtype")},
    checks={"decay": _momentum},
    schedules=("decay",),
)
def _trace(t, *, decay, nesterov):
    def leaf(g, s):
        old = s.trace  # its own dtype (float32 when quantized)
        new = s.keep("trace", g + decay * old)
        if not nesterov:  # the update is the new buffer as stored
            return new
        return g + decay * new.astype(old.dtype)  # rounds in the buffer's dtype, as `decay * old`

    return leaf


@recorded
def trace_with_lr(
    learning_rate: ScalarOrSchedule,
    decay: ScalarOrSchedule = 0.9,
    *,
    nesterov: bool = False,
    flip_sign: bool = True,
    accumulator_dtype: DType | None = None,
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
    return _trace_with_lr(
        learning_rate=learning_rate,
        decay=decay,
        nesterov=nesterov,
        sign=-1.0 if flip_sign else 1.0,
        accumulator_dtype=accumulator_dtype,
    )


@rule(
    "trace_with_lr",
    TraceState,
    slots={"trace": slot(dtype="accumulator_dtype", quantizable=False)},
    checks={"learning_rate": non_negative, "decay": _momentum},
    schedules=("learning_rate", "decay"),
)
def _trace_with_lr(t, *, learning_rate, decay, nesterov, sign):
    def leaf(g, s):
        step = learning_rate * g
        new = s.keep("trace", decay * widen(s.trace) + step)
        return sign * (step + decay * new) if nesterov else sign * new

    return leaf


__all__ = ["TraceState", "trace", "trace_with_lr"]
