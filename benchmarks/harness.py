"""Timing, compile-time, memory and bandwidth measurements.

Every comparison runs both libraries in the same process, interleaved round by round (A, B, A, B,
...), after warm-up; a round's ratio is taken between its two neighbouring measurements, so a
burst of load from other processes on the machine hits both sides. Reported: medians, the
interquartile range, and the number of rounds.
"""

from __future__ import annotations

import gc
import os
import platform
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .workloads import TreeSpec, Workload, state_bytes, step_fn

LIBS = ("gradtx", "optax")


@dataclass
class Stats:
    """Median, quartiles and count of a sample (seconds or a ratio)."""

    median: float
    q1: float
    q3: float
    n: int

    @classmethod
    def of(cls, xs: Sequence[float]) -> Stats:
        xs = sorted(xs)
        if len(xs) == 1:
            return cls(xs[0], xs[0], xs[0], 1)
        q = statistics.quantiles(xs, n=4, method="inclusive")
        return cls(statistics.median(xs), q[0], q[2], len(xs))

    def as_dict(self) -> dict[str, float]:
        return {"median": self.median, "q1": self.q1, "q3": self.q3, "n": self.n}


@dataclass
class Budget:
    """How long to measure: at least `min_rounds`, then until `seconds` or `max_rounds`."""

    min_rounds: int = 5
    max_rounds: int = 30
    seconds: float = 3.0
    warmup: int = 2


def _block(x: Any) -> None:
    jax.block_until_ready(x)


@dataclass
class Compiled:
    """A compiled step with its build times and memory figures."""

    lib: str
    donate: bool
    fn: Any
    trace_s: float
    lower_s: float
    compile_s: float
    state_bytes: int
    peak_bytes: int | None
    temp_bytes: int | None


def compile_step(
    workload: Workload, tree: TreeSpec, lib: str, donate: bool, params: Any, grads: Any
) -> Compiled:
    """Trace, lower and compile the jitted step of `workload` for `lib`, timing each stage."""
    tx = workload.make(lib)
    state = jax.eval_shape(tx.init, params)
    jitted = jax.jit(step_fn(tx, lib), donate_argnums=(0, 1) if donate else ())
    t0 = time.perf_counter()
    traced = jitted.trace(params, state, grads)
    t1 = time.perf_counter()
    lowered = traced.lower()
    t2 = time.perf_counter()
    compiled = lowered.compile()
    t3 = time.perf_counter()
    peak = temp = None
    try:
        mem = compiled.memory_analysis()
        if mem is not None:
            temp = int(mem.temp_size_in_bytes)
            # Live at once while the step runs: its inputs, its outputs not written in place,
            # and its scratch space.
            peak = int(
                mem.argument_size_in_bytes
                + mem.output_size_in_bytes
                - mem.alias_size_in_bytes
                + mem.temp_size_in_bytes
            )
    except (AttributeError, NotImplementedError):  # backends without memory analysis
        pass
    return Compiled(
        lib, donate, compiled, t1 - t0, t2 - t1, t3 - t2, state_bytes(state), peak, temp
    )


@dataclass
class Runner:
    """A compiled step and the buffers it is driven with (fed back, as in a training loop)."""

    compiled: Compiled
    params: Any
    state: Any
    grads: Any
    calls: int

    def run_block(self) -> float:
        """Seconds per update call over one block of `calls` calls."""
        fn = self.compiled.fn
        p, s, g = self.params, self.state, self.grads
        t = time.perf_counter()
        for _ in range(self.calls):
            p, s = fn(p, s, g)
        _block((p, s))
        dt = time.perf_counter() - t
        self.params, self.state = p, s
        return dt / self.calls


def make_runner(workload: Workload, lib: str, compiled: Compiled, tree: TreeSpec) -> Runner:
    tx = workload.make(lib)
    params = tree.params()
    return Runner(compiled, params, jax.jit(tx.init)(params), tree.grads(), workload.calls)


def interleaved(runners: dict[str, Runner], budget: Budget) -> dict[str, list[float]]:
    """Time the runners round by round (the order alternates between rounds); returns each
    runner's seconds per call, one entry per round."""
    for r in runners.values():
        for _ in range(budget.warmup):
            r.run_block()
    times: dict[str, list[float]] = {k: [] for k in runners}
    start = time.perf_counter()
    rounds = 0
    gc.collect()
    while rounds < budget.max_rounds and (
        rounds < budget.min_rounds or time.perf_counter() - start < budget.seconds
    ):
        order = list(runners) if rounds % 2 == 0 else list(reversed(runners))
        for k in order:
            times[k].append(runners[k].run_block())
        rounds += 1
    return times


def paired_ratio(times: dict[str, list[float]], a: str, b: str) -> Stats | None:
    """Statistics of the per-round ratio `a / b` (None when either was not timed)."""
    if a not in times or b not in times:
        return None
    return Stats.of([x / y for x, y in zip(times[a], times[b], strict=True)])


# --------------------------------------------------------------------------------------------
# Memory bandwidth: a STREAM-like triad a = b + s c, in place (12 bytes moved per element)
# --------------------------------------------------------------------------------------------


def triad_bandwidth(n: int, budget: Budget) -> dict[str, Any]:
    """Bytes/s of an in-place triad on `n` float32 elements: with XLA (jitted, `a` donated, so
    the result is written over it; all threads) and with NumPy (one thread, in cache-sized
    chunks, so no temporary array goes through memory). 12 bytes per element are counted
    (read b and c, write a), as STREAM does."""
    rng = np.random.default_rng(0)
    b_np = rng.standard_normal(n, np.float32)
    c_np = rng.standard_normal(n, np.float32)
    a_np = np.empty_like(b_np)

    # keep_unused: `a` is only the destination; without it jit drops the argument, and the
    # result goes to a fresh buffer instead of over `a`.
    triad = jax.jit(lambda a, b, c: b + 0.5 * c, donate_argnums=0, keep_unused=True)
    a, b, c = jnp.zeros(n, jnp.float32), jnp.asarray(b_np), jnp.asarray(c_np)

    def xla_once() -> float:
        nonlocal a
        t = time.perf_counter()
        a = triad(a, b, c)
        a.block_until_ready()
        return time.perf_counter() - t

    chunk = 1 << 15
    tmp = np.empty(chunk, np.float32)

    def numpy_once() -> float:
        t = time.perf_counter()
        for i in range(0, n, chunk):
            j = min(i + chunk, n)
            np.multiply(c_np[i:j], np.float32(0.5), out=tmp[: j - i])
            np.add(b_np[i:j], tmp[: j - i], out=a_np[i:j])
        return time.perf_counter() - t

    out: dict[str, Any] = {"elements": n, "bytes_per_element": 12}
    for name, once in (("xla", xla_once), ("numpy", numpy_once)):
        for _ in range(budget.warmup):
            once()
        ts = []
        start = time.perf_counter()
        while len(ts) < budget.min_rounds or (
            time.perf_counter() - start < budget.seconds / 2 and len(ts) < 4 * budget.max_rounds
        ):
            ts.append(once())
        st = Stats.of(ts)
        # The best repeat is the closest to the physical limit; the median is reported too.
        out[name] = {"best_Bps": 12 * n / min(ts), "median_Bps": 12 * n / st.median}
    out["reference_Bps"] = max(out["xla"]["best_Bps"], out["numpy"]["best_Bps"])
    return out


# --------------------------------------------------------------------------------------------
# torch.optim (optional)
# --------------------------------------------------------------------------------------------


def torch_available() -> tuple[bool, str]:
    try:
        import torch
    except ImportError:
        return False, "torch is not installed (pip install torch to add its columns)"
    return True, str(torch.__version__)


def torch_adam_step_time(tree: TreeSpec, variant: str, budget: Budget) -> Stats:
    """Seconds per `torch.optim.Adam(lr=1e-3, foreach= / fused=).step()` on `tree`'s leaves."""
    import torch

    torch.manual_seed(0)
    params = [torch.randn(tree.shape) for _ in range(tree.count)]
    for p in params:
        p.grad = 1e-2 * torch.randn(tree.shape)
    kw = {"foreach": True} if variant == "foreach" else {"fused": True}
    opt = torch.optim.Adam(params, lr=1e-3, **kw)
    with torch.no_grad():
        for _ in range(budget.warmup):
            opt.step()
        ts = []
        start = time.perf_counter()
        while len(ts) < budget.min_rounds or (
            time.perf_counter() - start < budget.seconds and len(ts) < budget.max_rounds
        ):
            t = time.perf_counter()
            opt.step()
            ts.append(time.perf_counter() - t)
    del opt, params
    return Stats.of(ts)


# --------------------------------------------------------------------------------------------
# Machine facts
# --------------------------------------------------------------------------------------------


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _mem_total() -> int | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def machine_facts() -> dict[str, Any]:
    import jaxlib
    import optax

    facts: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "platform": platform.platform(),
        "cpu": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "memory_bytes": _mem_total(),
        "backend": jax.default_backend(),
        "devices": [str(d) for d in jax.devices()],
        "python": sys.version.split()[0],
        "jax": jax.__version__,
        "jaxlib": jaxlib.__version__,
        "optax": optax.__version__,
        "numpy": np.__version__,
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
    }
    try:
        import gradtx

        facts["gradtx"] = getattr(gradtx, "__version__", "source tree")
    except ImportError:  # pragma: no cover - the benchmarks run from the repository
        facts["gradtx"] = "missing"
    ok, version = torch_available()
    facts["torch"] = version if ok else None
    return facts
