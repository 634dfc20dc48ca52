"""A fast side-by-side run of a gradtx transformation and its Optax reference.

Like `helpers.compare_transformations`, but cheaper: the reference runs (by default) as a jitted
`lax.scan` over all steps, cached by `reference_key`, and with `jit=True` ours runs as a second
scan inside the *same* jitted function (one compilation, one dispatch); with `jit=False` ours
runs eagerly, step by step. Each applies its own updates to its own parameters. (By default
Optax is not run eagerly: there `b ** count` with a concrete integer count compiles a new
integer power for every step, which is slow and rounds differently from its jitted update;
`reference_jit=False` opts in where that does not matter.)
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradtx

from .helpers import (
    EAGER_STEPS,
    as_float64,
    assert_trees_close,
    assert_within_noise,
    float64_reference,
    grad_sequence,
    mixed_params,
)


def _scan_updates(tx: Any, params: Any, stacked_grads: Any) -> Any:
    def body(carry, g):
        p, s = carry
        u, s = tx.update(g, s, p)
        return (gradtx.apply_updates(p, u), s), u

    return jax.lax.scan(body, (params, tx.init(params)), stacked_grads)[1]


def _both_scanned(txs: tuple, params: Any, stacked_grads: Any) -> list:
    return [_scan_updates(tx, params, stacked_grads) for tx in txs]


_jitted_scans = jax.jit(_both_scanned, static_argnums=0)


def _eager_updates(tx: Any, params: Any, grads: list) -> list:
    state = tx.init(params)
    out = []
    for g in grads:
        u, state = tx.update(g, state, params)
        params = gradtx.apply_updates(params, u)
        out.append(u)
    return out


def _unstack(tree: Any, steps: int) -> list:
    tree = jax.tree.map(np.asarray, tree)
    return [jax.tree.map(lambda x, i=i: x[i], tree) for i in range(steps)]


_REFERENCE_RUNS: dict[tuple, list] = {}

# Eagerly, ours runs only the first EAGER_STEPS steps (tests/helpers.py): the eager test checks
# that nothing needs tracing and that the first steps agree; the whole trajectory is checked
# under jit (every case runs jitted, see `with_modes`). Eager steps dispatch op by op, ~0.1 s per
# step on a mixed tree.


def compare_to_optax(
    ours: gradtx.GradientTransformation,
    reference: Any,
    *,
    jit: bool,
    steps: int = 100,
    rtol: float = 1e-5,
    atol: float = 1e-7,
    params: Any = None,
    grad_scale: float = 1.0,
    seed: int = 1,
    reference_key: str | None = None,
    reference_jit: bool = True,
    float64_noise: bool = False,
) -> None:
    """`ours` and `reference` give the same updates at each of `steps` steps (random gradients on
    a mixed pytree by default); ours runs eagerly or under jit, the reference under jit (or
    eagerly, see `reference_jit`).

    `reference_key` (unique per reference configuration, e.g. "module:case") caches the
    reference's updates for the process, so the eager and the jit test of one case compile the
    reference once. It needs the default `params`.

    `float64_noise=True` also runs the reference (jitted) in float64 and checks ours against
    that, each leaf to twice the reference's own float32 error there
    (`helpers.float64_reference`): for rules whose float32 result depends on how XLA fuses them
    (Newton-Schulz matmuls, branches on near-ties), a tolerance measured, not chosen.

    `reference_jit=False` runs the reference eagerly, step by step (cached like a jitted one).
    On CPU, with small trees and JAX's per-op caches warm, that is cheaper than compiling the
    reference; with `jit=False` nothing is compiled at all. It also rounds like ours does
    eagerly, which a trajectory decided by rounding needs (an update that cancels a parameter to
    exactly zero or to a residue, depending on how the step was compiled). The default (jitted)
    suits Adam-like references checked to ~1e-8: eagerly, Optax computes `b ** count` with a
    concrete count, compiling it anew at every step and rounding it unlike its jitted update.
    """
    if reference_key is not None and params is not None:
        raise ValueError("compare_to_optax: reference_key caches runs on the default params only")
    key = (reference_key, steps, seed, grad_scale, reference_jit)
    params = mixed_params() if params is None else params
    grads = grad_sequence(params, steps, seed=seed, scale=grad_scale)
    stacked = lambda: jax.tree.map(lambda *xs: jnp.stack(xs), *grads)
    expected = _REFERENCE_RUNS.get(key) if reference_key is not None else None
    if jit:
        both = expected is None and reference_jit
        txs = (ours, reference) if both else (ours,)
        scanned = [_unstack(u, steps) for u in _jitted_scans(txs, params, stacked())]
        got = scanned[0]
        expected = scanned[1] if both else expected
    else:
        got = _eager_updates(ours, params, grads[:EAGER_STEPS])
    if expected is None and reference_jit:
        expected = _unstack(_jitted_scans((reference,), params, stacked())[0], steps)
    elif expected is None:  # an eager reference runs only as far as ours does
        expected = _eager_updates(reference, params, grads[: steps if jit else EAGER_STEPS])
    if reference_key is not None and len(expected) == steps:
        _REFERENCE_RUNS[key] = expected
    if float64_noise:  # the reference in float64: how much float32 rounding moves it here
        expected64, noise = float64_reference(
            lambda: _unstack(
                _jitted_scans((reference,), as_float64(params), as_float64(stacked()))[0], steps
            ),
            expected,
        )
        for i, u in enumerate(got):
            assert_within_noise(u, expected64[i], noise[i], rtol, atol, msg=f"step {i}")
        return
    for i, (u, e) in enumerate(zip(got, expected[: len(got)], strict=True)):
        assert_trees_close(u, e, rtol, atol, msg=f"step {i}")


def with_modes(cases: list[tuple], eager: set[str], jit: set[str] | None = None) -> list:
    """`pytest.param(*case, use_jit)` for the cases whose id (`case[0]`) is in `eager` (run
    eagerly) and in `jit` (run under `jax.jit`; default: every case).

    Each primitive's base configuration runs eagerly and its variants under jit, so that every
    primitive is checked both ways without compiling every configuration twice. Pass the id as
    `compare_to_optax(..., reference_key=f"{__name__}:{id}")` so that a case run both ways
    computes its reference once.
    """
    ids = [c[0] for c in cases]
    jit = set(ids) if jit is None else jit
    unknown = (eager | jit) - set(ids)
    assert not unknown, f"ids not in the cases: {unknown}"
    missing = set(ids) - eager - jit
    assert not missing, f"cases that would never run: {missing}"
    out = []
    for case in cases:
        for use_jit in (False, True):
            if case[0] in (jit if use_jit else eager):
                mode = "jit" if use_jit else "eager"
                out.append(pytest.param(*case, use_jit, id=f"{mode}-{case[0]}"))
    return out
