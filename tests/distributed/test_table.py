"""Sharded `jit` (FSDP, tensor parallel and ZeRO-1 in one params tree: one leaf of each, plus a
1-D leaf whose ZeRO-1 axis joins its tensor-parallel one) equals the unsharded run
for every optimizer in the shared table, and the state keeps its derived shardings.

The whole table is initialised by one jitted program and runs as one jitted step (two
compilations: a per-case step compiles ~40% slower in total); the reference, the same table
unsharded on one device, is two programs more (run eagerly, its ~1,000 operations compiled one by
one cost more). Each case's test then checks its own results against the reference.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradtx

from ..helpers import (
    as_float64,
    assert_trees_close,
    assert_within_noise,
    float64_reference,
    random_like,
)
from ..optimizer_table import CASES, OptCase
from ._meshes import host_params, mesh_4x2, param_shardings

# one program for the whole table: every case's test on one xdist worker, which compiles it once;
# the version lanes run the whole file
pytestmark = [pytest.mark.xdist_group("sharded-table"), pytest.mark.across_versions]

STEPS = 3
VALUE = 1.0  # the `value=` extra argument, as in tests/test_generic.py


class Record(NamedTuple):
    derived: Any = None  # the state's derived shardings
    states: list | None = None  # the state after init and after every update
    updates: list | None = None
    params: Any = None
    reference: list | None = None  # unsharded: the updates of every step, then params and state
    error: BaseException | None = None


def grads_sequence() -> list:
    rng = np.random.default_rng(1)
    params = host_params(odd=False)
    return [random_like(params, rng) for _ in range(STEPS)]


@functools.cache
def table_run() -> dict[str, Record]:
    mesh = mesh_4x2()
    psh = param_shardings(mesh, odd=False)
    p = jax.device_put(host_params(odd=False), psh)
    records: dict[str, Record] = {}
    traced: list[tuple[str, Any, Any]] = []
    for case in CASES:
        try:
            tx = case.make()
            derived = gradtx.state_sharding(tx, p, zero_axis="data", warn=False)
            state = jax.eval_shape(tx.init, p)
            jax.eval_shape(functools.partial(tx.update, value=VALUE), p, state, p)
        except Exception as e:  # reported by this case's test, the others still run
            records[case.name] = Record(error=e)
            continue
        traced.append((case.name, tx, derived))
    # every state built directly in its derived shardings, as `init_sharded` does (tested on its
    # own in test_sharding.py), by one program for the whole table
    init = jax.jit(
        lambda p_: [tx.init(p_) for _, tx, _ in traced],
        out_shardings=[d for _, _, d in traced],
    )
    ok = [(n, tx, d, s) for (n, tx, d), s in zip(traced, init(p), strict=True)]

    def step(ps, states, g):
        out = []
        for (_, tx, _, _), p_, s in zip(ok, ps, states, strict=True):
            u, s = tx.update(g, s, p_, value=VALUE)
            out.append((gradtx.apply_updates(p_, u), s, u))
        return out

    # the derived shardings are the states' in and out shardings
    jitted = jax.jit(
        step,
        in_shardings=([psh] * len(ok), [d for _, _, d, _ in ok], psh),
        out_shardings=[(psh, d, psh) for _, _, d, _ in ok],
    )
    ps, history, updates = _run(jitted, p, [s for _, _, _, s in ok])
    assert jitted._cache_size() == 1  # the states came back in the shardings they went in with
    # the reference: the same step function unsharded, on one device, jitted without shardings
    p1 = jax.device_put(host_params(odd=False), jax.devices()[0])
    ref_states = jax.jit(lambda p_: [tx.init(p_) for _, tx, _, _ in ok])(p1)
    ref_ps, ref_history, ref_updates = _run(jax.jit(step), p1, ref_states)
    for i, (name, _, derived, _) in enumerate(ok):
        reference = [*ref_updates[i], ref_ps[i], ref_history[i][-1]]
        records[name] = Record(derived, history[i], updates[i], ps[i], reference)
    return records


def _run(jitted: Any, p: Any, states: list) -> tuple[list, list[list], list[list]]:
    """`STEPS` steps of the table's jitted step from `p`: per case the final params, the state
    after init and after every step, and every step's updates."""
    ps = [p] * len(states)
    history: list[list] = [[s] for s in states]
    updates: list[list] = [[] for _ in states]
    for g in grads_sequence():
        out = jitted(ps, states, g)
        ps = [o[0] for o in out]
        states = [o[1] for o in out]
        for i, o in enumerate(out):
            history[i].append(o[1])
            updates[i].append(o[2])
    return ps, history, updates


def assert_shardings(state, expected, when: str) -> None:
    paths = gradtx.tree.paths(state)
    for path, leaf, sharding in zip(
        paths, jax.tree.leaves(state), jax.tree.leaves(expected), strict=True
    ):
        assert leaf.sharding.is_equivalent_to(sharding, leaf.ndim), (
            f"{when}: {path} is {leaf.sharding}, derived {sharding}"
        )


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_sharded_jit_equals_unsharded(case: OptCase):
    record = table_run()[case.name]
    if record.error is not None:
        raise record.error
    assert record.states is not None and record.updates is not None
    for i, state in enumerate(record.states):
        assert_shardings(state, record.derived, f"after update {i}" if i else "after init")
    assert record.reference is not None
    refs, sharded = record.reference, [*record.updates, record.params, record.states[-1]]
    # XLA keeps bf16 / f16 intermediates in float32 inside a fusion (excess precision), and the
    # sharded program fuses differently: a low-precision state differs by where it is rounded.
    low = any(x.dtype in (jnp.bfloat16, jnp.float16) for x in jax.tree.leaves(refs[-1]))
    tol = 1e-2 if low else 1e-6
    names = [f"update {i + 1}" for i in range(len(record.updates))] + ["params", "state"]
    try:
        for name, got, want in zip(names, sharded, refs, strict=True):
            assert_trees_close(got, want, rtol=tol, atol=tol, msg=f"{case.name} {name}")
    except AssertionError:
        if low:
            raise
        # Where float32 rounding depends on how the matmuls are split (Muon's Newton-Schulz on
        # a sharded matrix, jax 0.12's CPU fusions), sharded and unsharded may each be off by
        # float32 noise: the sharded run must then be within twice the unsharded run's own
        # float32 error of the float64 result (helpers.float64_reference).
        exact, noise = float64_reference(lambda: _float64_run(case), refs)
        for name, got, want, n in zip(names, sharded, exact, noise, strict=True):
            assert_within_noise(
                got, want, n, tol, tol, msg=f"{case.name} {name}", factor=case.float32_noise
            )


def _float64_run(case: OptCase) -> list:
    """The eager unsharded reference in float64: updates per step, then params and state."""
    tx = case.make()
    p = as_float64(host_params(odd=False))
    s = tx.init(p)
    out = []
    for g in grads_sequence():
        u, s = tx.update(as_float64(g), s, p, value=VALUE)
        p = gradtx.apply_updates(p, u)
        out.append(u)
    return [*out, p, s]
