"""Helpers for the schedule tests: evaluate a schedule every way it can be called and compare."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

INT32_MAX = 2**31 - 1


SIZE = 48  # every test uses arrays of this many steps, so eager op compilations are shared


def boundary_steps(*points: int, high: int | None = None, seed: int = 0):
    """`SIZE` sorted steps: 0, 1, each point and its neighbours, far past the end, the int32
    limit, and random steps below `high` (default: twice the largest point) to fill up."""
    top = max([2, *points])
    high = 2 * top + 2 if high is None else high
    rng = np.random.default_rng(seed)
    steps = {0, 1, 10 * top, INT32_MAX}
    for p in points:
        steps.update(q for q in (p - 1, p, p + 1) if q >= 0)
    assert len(steps) < SIZE
    extra = [int(s) for s in rng.integers(0, high, size=4 * SIZE)]
    while len(steps) < SIZE and extra:
        steps.add(extra.pop())
    out = sorted(steps)
    while len(out) < SIZE:  # a short range has fewer distinct steps: repeat some
        out.append(out[len(out) % len(steps)])
    return np.asarray(sorted(out), np.int64)


def curve(schedule: Callable[[Any], Any], steps: Iterable[int]) -> np.ndarray:
    """The schedule over `steps` in one jitted `vmap` over an int32 array (the fast path)."""
    arr = jnp.asarray(np.asarray(list(steps), np.int64).clip(0, INT32_MAX), jnp.int32)
    out = jax.jit(jax.vmap(schedule))(arr)
    assert out.dtype == jnp.float32, out.dtype
    return np.asarray(out)


def assert_schedule(
    schedule: Callable[[Any], Any],
    expected: Callable[[int], float] | np.ndarray,
    steps: Iterable[int],
    *,
    rtol: float = 1e-5,
    atol: float = 1e-7,
    eager: int = 6,
) -> None:
    """`schedule` equals `expected` (a reference function of the step, or its values) on every
    step: under jit+vmap, called on a whole int32 array, and eagerly / jitted with Python ints
    on a few of the steps."""
    steps = np.asarray(list(steps), np.int64)
    if callable(expected):
        want = np.asarray([expected(int(s)) for s in steps], np.float64)
    else:
        want = np.asarray(expected, np.float64)
    np.testing.assert_allclose(curve(schedule, steps), want, rtol=rtol, atol=atol, err_msg="vmap")
    direct = schedule(jnp.asarray(steps.clip(0, INT32_MAX), jnp.int32))
    assert direct.dtype == jnp.float32 and direct.shape == steps.shape
    np.testing.assert_allclose(np.asarray(direct), want, rtol=rtol, atol=atol, err_msg="array")
    jitted = jax.jit(schedule)
    pick = np.unique(np.linspace(0, len(steps) - 1, eager).astype(int))
    for i in pick:
        s = int(steps[i])
        for how, value in (("eager", schedule(s)), ("jit", jitted(s))):
            assert jnp.asarray(value).dtype == jnp.float32, (how, s)
            np.testing.assert_allclose(
                float(value), want[i], rtol=rtol, atol=atol, err_msg=f"{how} at step {s}"
            )
