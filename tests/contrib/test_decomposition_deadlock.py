"""The decompositions of one step run one at a time (Shampoo's and SOAP's eighs and QRs, Dion's
QRs, PSGD-Kron's triangular solves, the SVDs of GaLore and Fira): on XLA:CPU with one device
and a 2-thread intra-op pool, two batched decompositions running at once each block a pool
thread waiting for the batch tasks they queued behind each other, and the step never returns
(jaxlib 0.10.2: the Shampoo refresh of a (512, 512) and a (4, 512, 512) leaf hung in 4 runs of
5; Dion's step of a (4, 512, 512) and a (4, 256, 512) leaf in 9 of 9; Kron's fit of those
leaves in 5 of 5).

Each child process has one CPU device (the suite's 8-device flag removed) and two CPUs (its
affinity, so the pool has the 2 threads of the failing host on any machine); it runs the
Shampoo refresh, SOAP's first step and refresh, and Dion's and Kron's steps a few times, and
must finish in time. The SVDs (batched by Fira's batch axes, or by `jax.vmap` over a GaLore
population) never hung in 13 such runs, so no child can show theirs; the traced steps show, for
all of them, that every two decompositions of a step are ordered by a data dependency, as
`after` makes them.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import jax.extend
import jax.numpy as jnp
import pytest

import gradtx

C = gradtx.contrib
ROOT = Path(__file__).resolve().parents[2]
RUNS = 2  # child processes
TIMEOUT_S = 90  # a passing child takes about 10 s

CHILD = textwrap.dedent(
    """
    import os
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:2])
    import jax, jax.numpy as jnp, numpy as np
    import gradtx

    C = gradtx.contrib
    assert jax.device_count() == 1, jax.devices()
    rng = np.random.default_rng(0)
    shapes = {"w": (512, 512), "stack": (4, 512, 512)}
    grads = {k: jnp.asarray(rng.normal(size=s), jnp.float32) for k, s in shapes.items()}
    shampoo = C.scale_by_shampoo(
        weight_dimension_numbers={
            "w": C.ShampooDimensionNumbers(), "stack": C.ShampooDimensionNumbers(1, 2)
        },
        start_preconditioning_step=1,
        precondition_frequency=1,
    )
    odims = {"w": C.SoapDimensionNumbers(), "stack": C.SoapDimensionNumbers(1, 2)}
    soap = C.scale_by_soap(weight_dimension_numbers=odims, precondition_frequency=1)
    dion = C.scale_by_dion(weight_dimension_numbers=C.DionDimensionNumbers(1, 2))
    # Dion's QRs at every step, two of them batched (batch-1 decompositions run inline)
    stacks = {"stack": grads["stack"], "stack2": grads["stack"][:, :256]}
    kron = C.scale_by_kron(  # its triangular solves at every step, batched by the stack axes
        preconditioner_update_probability=1.0, batch_axes={"stack": (0,), "stack2": (0,)}
    )
    runs = {
        "shampoo": (shampoo, grads),
        "soap": (soap, grads),
        "dion": (dion, stacks),
        "kron": (kron, stacks),
    }
    for name, (tx, g) in runs.items():
        print(name, flush=True)
        step = jax.jit(tx.update)
        state = tx.init(g)
        for _ in range(4):  # Shampoo refreshes at every step; SOAP: eigh, then power + QR
            updates, state = jax.block_until_ready(step(g, state))
        assert all(bool(jnp.isfinite(u).all()) for u in jax.tree.leaves(updates)), name
    print("finished")
    """
)


def _one_device_env() -> dict[str, str]:
    flags = [
        f
        for f in os.environ.get("XLA_FLAGS", "").split()
        if "xla_force_host_platform_device_count" not in f
    ]
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(ROOT)}
    env["XLA_FLAGS"] = " ".join(flags)
    return env


@pytest.mark.subprocess  # the second lane of `make test`
def test_refreshes_finish_on_one_device_with_two_threads():
    for run in range(RUNS):
        try:
            done = subprocess.run(
                [sys.executable, "-c", CHILD],
                env=_one_device_env(),
                cwd=ROOT,
                capture_output=True,
                text=True,
                timeout=TIMEOUT_S,
            )
        except subprocess.TimeoutExpired as e:
            out = e.stdout.decode() if isinstance(e.stdout, bytes) else e.stdout or ""
            stuck = out.split()[-1:]  # the optimizer whose step hung
            pytest.fail(f"run {run}: the step of {stuck} did not finish in {TIMEOUT_S} s")
        assert done.returncode == 0 and "finished" in done.stdout, done.stdout + done.stderr


DECOMPOSITIONS = {"cholesky", "eig", "eigh", "lu", "qr", "svd", "triangular_solve"}


def _decompositions(eqn) -> set[str]:
    """The decompositions that `eqn` runs (itself, or in the jaxprs inside it)."""
    found = {eqn.primitive.name} & DECOMPOSITIONS
    for sub in jax.extend.core.jaxprs_in_params(eqn.params):
        for e in sub.eqns:
            found |= _decompositions(e)
    return found


def _unordered(jaxpr) -> list[str]:
    """The pairs of equations of `jaxpr` (and of the jaxprs inside it, each branch on its own)
    that both decompose and that no data dependency orders: XLA may run those at once."""
    found, made_by, needs, decomposing = [], {}, [], []
    for i, eqn in enumerate(jaxpr.eqns):
        deps: set[int] = set()
        for v in eqn.invars:
            if not isinstance(v, jax.extend.core.Literal) and v in made_by:
                deps |= needs[made_by[v]] | {made_by[v]}
        needs.append(deps)
        made_by.update((v, i) for v in eqn.outvars)
        if names := _decompositions(eqn):
            found += [f"{sorted(n)} | {sorted(names)}" for j, n in decomposing if j not in deps]
            decomposing.append((i, names))
        for sub in jax.extend.core.jaxprs_in_params(eqn.params):
            found += _unordered(sub)
    return found


_G, _D = C.GaLoreDimensionNumbers, C.DionDimensionNumbers
STEPS = {
    "shampoo": C.scale_by_shampoo(weight_dimension_numbers=C.ShampooDimensionNumbers(1, 2)),
    "soap": C.scale_by_soap(weight_dimension_numbers=C.SoapDimensionNumbers(1, 2)),
    "dion": C.scale_by_dion(weight_dimension_numbers=_D(1, 2)),
    "galore": C.scale_by_galore(rank=4, weight_dimension_numbers=_G((0, 1), 2)),
    "fira": C.scale_by_fira(rank=4, weight_dimension_numbers=_G(1, 2)),
    "kron": C.scale_by_kron(
        preconditioner_update_probability=1.0, batch_axes={"a": (0,), "b": (0,), "c": (0,)}
    ),
}
POPULATION = {"galore"}  # its SVDs are of single matrices: a population (`jax.vmap`) batches them


@pytest.mark.parametrize("name", sorted(STEPS))
def test_the_decompositions_of_a_step_run_one_at_a_time(name):
    tx = STEPS[name]
    shapes = {"a": (3, 8, 6), "b": (2, 6, 8), "c": (4, 8, 8)}
    grads = {k: jax.ShapeDtypeStruct(s, jnp.float32) for k, s in shapes.items()}
    step, args = tx.update, (grads, jax.eval_shape(tx.init, grads))  # traced, not compiled
    if name in POPULATION:
        two = lambda x: jax.ShapeDtypeStruct((2, *x.shape), x.dtype)
        step, args = jax.vmap(step), jax.tree.map(two, args)
    jaxpr = jax.make_jaxpr(step)(*args).jaxpr
    assert any(_decompositions(e) for e in jaxpr.eqns)
    assert not _unordered(jaxpr), _unordered(jaxpr)
