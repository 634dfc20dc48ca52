"""Schedule tests, folded: every schedule a test module evaluates under jit runs in one jitted
program per module, compiled the first time one of its tests asks for a value, instead of one or
two programs per schedule (a schedule is a fresh closure, so each `jax.jit` of one compiles anew).

A module lists its cases once (`fold(build)`, `build` returning `{key: Case}`); a test looks its
case up by key and checks it (`check`, the folded `common.assert_schedule`). What stays eager is
what checks eager calls: the schedule called with Python ints on a few of the steps."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Hashable, Mapping
from typing import Any

import jax
import numpy as np

from .common import INT32_MAX


@dataclasses.dataclass(frozen=True)
class Case:
    """A schedule and what to evaluate it on under jit: its curve over `steps` (vmapped); with
    `array`, also one call on the whole int32 array of them; and one call per entry of `ints`
    (Python ints enter weakly typed, as in `jax.jit(schedule)(7)`; NumPy int32 scalars as
    int32). `picks`: the indices of the steps `check` calls with Python ints."""

    schedule: Callable[[Any], Any]
    steps: np.ndarray
    array: bool = False
    ints: tuple[Any, ...] = ()
    picks: tuple[int, ...] | None = None


def checked(schedule: Callable[[Any], Any], steps: Any, *, eager: int = 6) -> Case:
    """A case for `check`: `eager` of the steps are called with Python ints (as
    `common.assert_schedule` picks them)."""
    steps = np.asarray(list(steps), np.int64)
    picks = tuple(int(i) for i in np.unique(np.linspace(0, len(steps) - 1, eager).astype(int)))
    ints = tuple(int(steps[i]) for i in picks)
    return Case(schedule, steps, array=True, ints=ints, picks=picks)


def curve_of(schedule: Callable[[Any], Any], steps: Any, *, array: bool = False) -> Case:
    """A case whose jit+vmap curve (and with `array`, unbatched call) a test compares itself."""
    return Case(schedule, np.asarray(list(steps), np.int64), array=array)


def at(schedule: Callable[[Any], Any], ints: Any) -> Case:
    """A case of single calls under jit, one per entry of `ints` (`Values.jitted`)."""
    ints = tuple(ints)
    return Case(schedule, np.asarray([int(i) for i in ints], np.int64), ints=ints)


@dataclasses.dataclass(frozen=True)
class Values:
    """A case's values from the module's one jitted program."""

    case: Case
    curve: np.ndarray  # vmap(schedule) over the steps clipped to int32 (common.curve)
    array: np.ndarray | None  # schedule(int32 array of the steps), unbatched
    jitted: tuple[np.ndarray, ...]  # schedule(i) for each i of case.ints


def _int32(steps: np.ndarray) -> np.ndarray:
    return steps.clip(0, INT32_MAX).astype(np.int32)


def fold(build: Callable[[], Mapping[Hashable, Case]]) -> Callable[..., Values]:
    """`build()`'s cases, all evaluated by one jitted program on the first lookup
    (`lookup(*key)`; a one-element key is looked up as itself)."""

    @functools.cache
    def table() -> dict[Hashable, Values]:
        cases = dict(build())
        schedules = [(c.schedule, c.array) for c in cases.values()]

        def folded_schedules(steps, ints):
            out = []
            for (schedule, array), arr, scalars in zip(schedules, steps, ints, strict=True):
                out.append(
                    (
                        jax.vmap(schedule)(arr),
                        schedule(arr) if array else None,
                        tuple(schedule(i) for i in scalars),
                    )
                )
            return out

        steps = [_int32(c.steps) for c in cases.values()]
        out = jax.jit(folded_schedules)(steps, [c.ints for c in cases.values()])
        return {
            key: Values(
                case,
                np.asarray(curve),
                None if array is None else np.asarray(array),
                tuple(np.asarray(v) for v in jitted),
            )
            for (key, case), (curve, array, jitted) in zip(cases.items(), out, strict=True)
        }

    def lookup(*key: Hashable) -> Values:
        return table()[key[0] if len(key) == 1 else key]

    return lookup


def check(
    values: Values,
    expected: Callable[[int], float] | np.ndarray,
    *,
    rtol: float = 1e-5,
    atol: float = 1e-7,
) -> None:
    """`common.assert_schedule` on a folded case: the schedule equals `expected` (a reference
    function of the step, or its values) on every step, under jit+vmap and called on the whole
    int32 array (both in the module's program), and on a few of the steps called with Python
    ints, under jit (in the module's program) and eagerly (here)."""
    case = values.case
    assert case.picks is not None, "check needs a case built with `checked`"
    steps = case.steps
    if callable(expected):
        want = np.asarray([expected(int(s)) for s in steps], np.float64)
    else:
        want = np.asarray(expected, np.float64)
    assert values.curve.dtype == np.float32, values.curve.dtype
    np.testing.assert_allclose(values.curve, want, rtol=rtol, atol=atol, err_msg="vmap")
    direct = values.array
    assert direct is not None and direct.dtype == np.float32 and direct.shape == steps.shape
    np.testing.assert_allclose(direct, want, rtol=rtol, atol=atol, err_msg="array")
    for i, jitted in zip(case.picks, values.jitted, strict=True):
        s = int(steps[i])
        for how, value in (("eager", case.schedule(s)), ("jit", jitted)):
            assert np.asarray(value).dtype == np.float32, (how, s)
            np.testing.assert_allclose(
                float(value), want[i], rtol=rtol, atol=atol, err_msg=f"{how} at step {s}"
            )
