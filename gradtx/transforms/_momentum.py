"""Momentum: the `trace` of past updates (heavy ball and Nesterov)."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax

from .._checks import check_in_range
from .._core import GradientTransformation
from .._numerics import safe_increment, value_at, zero_count
from .._typing import ScalarOrSchedule, Updates
from ..tree import assert_same_structure, zeros_like


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
      accumulator_dtype: dtype of the buffer (default: the parameters' dtype).

    Returns:
      A `GradientTransformation` with state `TraceState(count, trace)`.

    Reference: Polyak (1964); Sutskever et al., "On the importance of initialization and
    momentum in deep learning" (2013).
    """
    check_in_range("trace", "decay", decay, 0.0, 1.0)

    def init(params):
        return TraceState(count=zero_count(), trace=zeros_like(params, accumulator_dtype))

    def update(updates, state, params=None, **extra_args):
        del params, extra_args
        assert_same_structure("trace", updates=updates, **{"state.trace": state.trace})
        mu = value_at(decay, state.count)
        new_trace = jax.tree.map(lambda g, t: (g + mu * t).astype(t.dtype), updates, state.trace)
        if nesterov:
            updates = jax.tree.map(lambda g, t: (g + mu * t).astype(g.dtype), updates, new_trace)
        else:
            updates = jax.tree.map(lambda g, t: t.astype(g.dtype), updates, new_trace)
        return updates, TraceState(count=safe_increment(state.count), trace=new_trace)

    return GradientTransformation(init, update)


__all__ = ["TraceState", "trace"]
