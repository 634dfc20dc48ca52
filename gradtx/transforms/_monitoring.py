"""Monitoring the updates inside a chain: `snapshot` (a stateless measurement) and `monitor`
(several measurements, stateful ones such as `measure_with_ema` included). Both pass the updates
through unchanged and keep the measurements in their state."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from .._base._checks import error_context, expect_state
from .._base._recipe import recorded
from .._base._typing import OptState, PyTree, Updates
from ..core._transformation import (
    GradientTransformation,
    as_transformation,
    forward_extra_args,
    stateless,
)


class SnapshotState(NamedTuple):
    measurement: dict[str, Any]  # {measure_name: the measurement of the last updates}


class MonitorState(NamedTuple):
    measurements: dict[str, PyTree]  # measure name -> its measurement of the last updates
    measure_states: tuple[OptState, ...]  # the measures' own states, in the order given


def _is_abstract(tree: PyTree) -> bool:
    return any(isinstance(x, jax.ShapeDtypeStruct) for x in jax.tree.leaves(tree))


def _zeros_of(shapes: PyTree) -> PyTree:
    return jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)


@recorded
def snapshot(measure_name: str, measure: Callable[[Updates], PyTree]) -> GradientTransformation:
    r"""Pass the updates through and keep `measure(updates)` in the state, under `measure_name`.

    .. math::  u = g, \qquad \text{state} = \{\text{name}: \mathrm{measure}(g)\}

    For looking at intermediate updates of a chain (e.g. the norm before clipping): read it
    with `gradtx.tree.get(state, measure_name)`. At `init` the state holds `measure(params)`
    (zeros of its shape for abstract `jax.ShapeDtypeStruct` params).

    Args:
      measure_name: the key of the measurement in the state.
      measure: a function `updates -> pytree of arrays`; in a chain it sees the updates as
        transformed up to this point.

    Returns:
      A `GradientTransformation` with state `SnapshotState(measurement)`.

    Examples:
      >>> import jax.numpy as jnp, gradtx
      >>> tx = gradtx.chain(
      ...     gradtx.transforms.snapshot("norm_before_clip", gradtx.tree.norm),
      ...     gradtx.clip_by_global_norm(1.0),
      ... )
      >>> grads = jnp.array([3.0, 4.0])
      >>> _, state = tx.update(grads, tx.init(grads))
      >>> float(gradtx.tree.get(state, "norm_before_clip"))
      5.0

    Reference: matches `optax.snapshot`.
    """
    who = "snapshot"
    if not isinstance(measure_name, str):
        raise TypeError(f"{who}: measure_name must be a string, got {measure_name!r}")
    if not callable(measure):
        raise TypeError(f"{who}: measure must be callable, got {type(measure).__name__}")

    def init(params):
        with error_context(who):
            if _is_abstract(params):
                return SnapshotState({measure_name: _zeros_of(jax.eval_shape(measure, params))})
            return SnapshotState({measure_name: measure(params)})

    def update(updates, state, params=None, **extra_args):
        del state, params, extra_args
        with error_context(who):
            return updates, SnapshotState({measure_name: measure(updates)})

    return GradientTransformation(init, update)


def _as_measure(who: str, name: str, measure: Any) -> GradientTransformation:
    if callable(measure):  # a function of the updates (a transformation is not callable)
        fn: Callable[[Updates], PyTree] = measure
        return stateless(lambda updates, params: fn(updates))
    tx = as_transformation(measure, who, f"measures[{name!r}]")
    return GradientTransformation(tx.init, forward_extra_args(tx.update))


@recorded
def monitor(
    measures: Mapping[str, GradientTransformation | Callable[[Updates], PyTree]],
) -> GradientTransformation:
    r"""Pass the updates through and keep several (possibly stateful) measurements of them.

    .. math::  u = g, \qquad \text{measurements}[k] = \mathrm{measure}_k(g)

    Each measure is either a function `updates -> pytree` (as for `snapshot`) or a
    transformation whose *output* is the measurement (e.g. `gradtx.measure_with_ema(fn, decay)`,
    a moving average); a transformation gets the params and the extra arguments of `update`.
    Read a measurement with `gradtx.tree.get(state, name)`.

    Args:
      measures: name -> measure, in the order they are computed.

    Returns:
      A `GradientTransformation` with state `MonitorState(measurements, measure_states)`.
      Unlike Optax's (whose `init` gives an empty `measurements` dict, so the state's structure
      changes at the first step), `init` fills `measurements` with zeros shaped like the
      measurements, so the state keeps one structure (through `jax.lax.scan`, checkpoints);
      the updates and the measurements after each step are Optax's.

    Examples:
      >>> import jax.numpy as jnp, gradtx
      >>> tx = gradtx.chain(
      ...     gradtx.transforms.monitor({"norm": gradtx.tree.norm}),
      ...     gradtx.clip_by_global_norm(1.0),
      ... )
      >>> grads = jnp.array([3.0, 4.0])
      >>> _, state = tx.update(grads, tx.init(grads))
      >>> float(gradtx.tree.get(state, "norm"))
      5.0

    Reference: matches `optax.monitor` (except the state at `init`, see above).
    """
    who = "monitor"
    if not isinstance(measures, Mapping):
        raise TypeError(
            f"{who}: measures must be a dict name -> measure (a function of the updates or a "
            f"transformation), got {type(measures).__name__}"
        )
    for name in measures:
        if not isinstance(name, str):
            raise TypeError(f"{who}: the names of measures must be strings, got {name!r}")
    txs = {name: _as_measure(who, name, m) for name, m in measures.items()}
    names = tuple(txs)

    def init(params):
        states = []
        for name in names:
            with error_context(f"{who}[{name!r}]"):
                states.append(txs[name].init(params))
        states_t = tuple(states)

        def measure_all(p):
            return {n: txs[n].update(p, s, p)[0] for n, s in zip(names, states_t, strict=True)}

        try:
            shapes = jax.eval_shape(measure_all, params)
        except (TypeError, ValueError):
            # a measure that cannot run on the params alone (e.g. it needs an extra argument of
            # update): Optax's layout, measurements filled at the first update
            return MonitorState({}, states_t)
        return MonitorState(_zeros_of(shapes), states_t)

    def update(updates, state, params=None, **extra_args):
        expect_state(who, state, MonitorState)
        if len(state.measure_states) != len(names):
            raise ValueError(
                f"{who}: expected {len(names)} measure states (from this monitor's init), got "
                f"{len(state.measure_states)}"
            )
        measurements, states = {}, []
        for name, s in zip(names, state.measure_states, strict=True):
            with error_context(f"{who}[{name!r}]"):
                measurements[name], s = txs[name].update(updates, s, params, **extra_args)
            states.append(s)
        return updates, MonitorState(measurements, tuple(states))

    return GradientTransformation(init, update)


__all__ = ["MonitorState", "SnapshotState", "monitor", "snapshot"]
