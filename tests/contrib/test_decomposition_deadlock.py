"""Shampoo's and SOAP's decompositions run one at a time: on XLA:CPU with one device and a
2-thread intra-op pool, two batched eighs (or QRs) running at once each block a pool thread
waiting for the batch tasks they queued behind each other, and the step never returns (jaxlib
0.10.2: the Shampoo refresh of a (512, 512) and a (4, 512, 512) leaf hung in 4 runs of 5).

Each child process has one CPU device (the suite's 8-device flag removed) and two CPUs (its
affinity, so the pool has the 2 threads of the failing host on any machine); it runs the
Shampoo refresh and SOAP's first step and refresh a few times, and must finish in time.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.subprocess  # the second lane of `make test`

ROOT = Path(__file__).resolve().parents[2]
RUNS = 2  # child processes
TIMEOUT_S = 90  # a passing child takes about 8 s

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
    for tx in (shampoo, soap):
        step = jax.jit(tx.update)
        state = tx.init(grads)
        for _ in range(4):  # Shampoo refreshes at every step; SOAP: eigh, then power + QR
            updates, state = jax.block_until_ready(step(grads, state))
        assert all(bool(jnp.isfinite(u).all()) for u in jax.tree.leaves(updates))
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
        except subprocess.TimeoutExpired:
            pytest.fail(f"run {run}: the step did not finish in {TIMEOUT_S} s (deadlock)")
        assert done.returncode == 0 and "finished" in done.stdout, done.stdout + done.stderr
