"""Data-parallel training across processes with gradtx on JAX's own runtime.

Every process runs this script; `jax.distributed.initialize` joins them into one runtime, and a
mesh over all processes' devices shards the batch (data parallel) and the optimizer state
(ZeRO-1: each device keeps 1/N of Adam's moments). The optimizer is global-norm clipping and
AdamW, accumulated over 2 micro-steps; nothing in it knows about processes. Then the same model
is trained with Streaming DiLoCo (`gradtx.diloco`), each device a replica that synchronises
every 5 steps, its pseudo-gradients sent as 4-bit codes.

Run it on one machine with two processes of 4 CPU devices each (gloo collectives)::

    python examples/multihost_data_parallel.py --launch 2

or start each process yourself (one per host, same coordinator address)::

    python examples/multihost_data_parallel.py --coordinator HOST:PORT \
        --num-processes 2 --process-id 0      # and --process-id 1 on the other

On GPU or TPU hosts leave out `--local-devices` (each process uses its accelerators).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from typing import Any

STEPS = 20
BATCH = 32  # global batch, split over every device of every process


def build_optimizer():
    import gradtx

    inner = gradtx.chain(gradtx.clip_by_global_norm(1.0), gradtx.adamw(0.02, weight_decay=1e-3))
    return gradtx.accumulate_k_steps(inner, k=2)


def init_params() -> dict:
    import numpy as np

    rng = np.random.default_rng(0)
    return {
        "w1": (rng.normal(size=(16, 32)) / 4).astype(np.float32),
        "b1": np.zeros(32, np.float32),
        "w2": (rng.normal(size=(32, 8)) / 6).astype(np.float32),
        "b2": np.zeros(8, np.float32),
    }


def batch(step: int) -> tuple[Any, Any]:
    """The global batch of `step` (the same on every process; each device takes its rows)."""
    import numpy as np

    rng = np.random.default_rng(1000 + step)
    x = rng.normal(size=(BATCH, 16)).astype(np.float32)
    y = np.tanh(x[:, :8] - 0.5 * x[:, 8:]).astype(np.float32)
    return x, y


def loss_fn(params, x, y):
    import jax.numpy as jnp

    h = jnp.tanh(x @ params["w1"] + params["b1"])
    return jnp.mean((h @ params["w2"] + params["b2"] - y) ** 2)


def train(steps: int = STEPS) -> dict:
    """Train on a mesh over all devices of all processes; returns the final params (NumPy)."""
    import jax
    import numpy as np
    from jax.sharding import AxisType, NamedSharding
    from jax.sharding import PartitionSpec as P

    import gradtx

    mesh = jax.make_mesh((jax.device_count(),), ("data",), (AxisType.Auto,))
    replicated = NamedSharding(mesh, P())
    rows = NamedSharding(mesh, P("data"))

    def global_array(value, sharding):  # every process supplies the slices of its devices
        return jax.make_array_from_callback(value.shape, sharding, lambda index: value[index])

    params = jax.tree.map(lambda v: global_array(v, replicated), init_params())
    params_sh = jax.tree.map(lambda _: replicated, params)
    tx = build_optimizer()
    state_sh = gradtx.state_sharding(tx, params, zero_axis="data")  # ZeRO-1
    state = gradtx.init_sharded(tx, params, zero_axis="data")

    def step(params, state, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        updates, state = tx.update(grads, state, params)
        return gradtx.apply_updates(params, updates), state, loss

    step = jax.jit(step, out_shardings=(params_sh, state_sh, replicated), donate_argnums=(0, 1))
    for i in range(steps):
        x, y = batch(i)
        params, state, loss = step(params, state, global_array(x, rows), global_array(y, rows))
        if jax.process_index() == 0 and (i % 5 == 4 or i == steps - 1):
            print(f"step {i + 1:3d}  loss {float(loss):.6f}", flush=True)
    return {k: np.asarray(v.addressable_data(0)) for k, v in params.items()}


def build_diloco():
    """DiLoCo over the same devices, each device a replica: 5 local AdamW steps, then the outer
    Nesterov step on the averaged pseudo-gradient; two fragments synchronised in turn, sent as
    4-bit codes (every leaf: min_size=0)."""
    import gradtx

    return gradtx.diloco(
        gradtx.adamw(0.02, weight_decay=1e-3),
        sync_every=5,
        axis_name="replica",
        fragments=2,
        pseudo_gradient_dtype=gradtx.quantized(bits=4, block_size=32, min_size=0),
    )


def train_diloco(steps: int = STEPS) -> dict:
    """DiLoCo on a mesh over all devices of all processes, one replica per device (each with
    its own copy of the params and its rows of the global batch); returns replica 0's final
    params and its count of bytes sent (NumPy)."""
    import jax
    import numpy as np
    from jax.sharding import AxisType, NamedSharding
    from jax.sharding import PartitionSpec as P

    import gradtx

    n = jax.device_count()
    mesh = jax.make_mesh((n,), ("replica",), (AxisType.Explicit,))
    per_replica = NamedSharding(mesh, P("replica"))

    def global_array(value):  # every process supplies the slices of its devices
        return jax.make_array_from_callback(value.shape, per_replica, lambda index: value[index])

    params = {k: global_array(np.stack([v] * n)) for k, v in init_params().items()}
    tx = build_diloco()
    state = jax.jit(jax.vmap(tx.init), out_shardings=per_replica)(params)

    def local_step(params, state, x, y):  # one replica: its params, its state, its rows
        params, state = jax.tree.map(lambda a: a[0], (params, state))
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        updates, state = tx.update(grads, state, params)
        params = gradtx.apply_updates(params, updates)
        return jax.tree.map(lambda a: a[None], (params, state, loss))

    rows = P("replica")
    step = jax.jit(
        jax.shard_map(local_step, mesh=mesh, in_specs=rows, out_specs=rows),
        donate_argnums=(0, 1),
    )
    for i in range(steps):
        x, y = batch(i)
        params, state, loss = step(params, state, global_array(x), global_array(y))
        if jax.process_index() == 0 and (i % 5 == 4 or i == steps - 1):
            print(f"diloco step {i + 1:3d}  loss {float(loss.addressable_data(0)[0]):.6f}")
    out = {k: np.asarray(v.addressable_data(0)[0]) for k, v in params.items()}
    out["total_bytes_sent"] = np.asarray(state.total_bytes_sent.addressable_data(0)[0])
    return out


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def launch_local(
    num_processes: int, extra_args: list[str], timeout: float = 240.0, port: int | None = None
) -> list[tuple[int, str]]:
    """Start `num_processes` copies of this script on 127.0.0.1 and wait for them.

    Bounded in time: after `timeout` seconds (or as soon as one process fails) every process
    group still running is killed, so no process and no port outlives the call.

    Returns:
      (exit code, combined output) per process.
    """
    port = free_port() if port is None else port
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env["JAX_PLATFORMS"] = env.get("JAX_PLATFORMS", "cpu")
    procs: list[subprocess.Popen] = []
    logs = []
    try:
        for i in range(num_processes):
            args = [
                sys.executable,
                os.path.abspath(__file__),
                f"--coordinator=127.0.0.1:{port}",
                f"--num-processes={num_processes}",
                f"--process-id={i}",
                *extra_args,
            ]
            log = open(_log_path(port, i), "w+")  # noqa: SIM115 (closed below)
            logs.append(log)
            procs.append(
                subprocess.Popen(
                    args, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
                )
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            codes = [p.poll() for p in procs]
            if all(c is not None for c in codes) or any(c not in (None, 0) for c in codes):
                break
            time.sleep(0.2)
    finally:
        for p in procs:
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):  # it exited meanwhile
                    os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    out = []
    for p, log in zip(procs, logs, strict=True):
        log.seek(0)
        out.append((p.returncode, log.read()))
        log.close()
        os.unlink(log.name)
    return out


def _log_path(port: int, i: int) -> str:
    import tempfile

    return os.path.join(tempfile.gettempdir(), f"gradtx-multihost-{port}-{i}.log")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--launch", type=int, metavar="N", help="start N local processes")
    parser.add_argument("--coordinator", help="HOST:PORT of process 0")
    parser.add_argument("--num-processes", type=int, default=1)
    parser.add_argument("--process-id", type=int, default=0)
    parser.add_argument("--local-devices", type=int, default=4, help="CPU devices per process")
    parser.add_argument("--steps", type=int, default=STEPS)
    parser.add_argument("--out", help="write the final params here (.npz), from process 0")
    args = parser.parse_args(argv)
    if args.launch:
        extra = [f"--local-devices={args.local_devices}", f"--steps={args.steps}"]
        if args.out:
            extra.append(f"--out={args.out}")
        results = launch_local(args.launch, extra)
        for i, (code, text) in enumerate(results):
            print(f"--- process {i} (exit {code})\n{text}")
        return max(abs(code) for code, _ in results)

    flags = os.environ.get("XLA_FLAGS", "")
    if "xla_force_host_platform_device_count" not in flags:  # CPU only; ignored on GPU / TPU
        flag = f"--xla_force_host_platform_device_count={args.local_devices}"
        os.environ["XLA_FLAGS"] = (flags + " " + flag).strip()
    import jax
    import numpy as np

    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    if args.coordinator:
        jax.distributed.initialize(
            coordinator_address=args.coordinator,
            num_processes=args.num_processes,
            process_id=args.process_id,
            initialization_timeout=60,
        )
    print(
        f"process {jax.process_index()}/{jax.process_count()}: {jax.local_device_count()} local "
        f"devices, {jax.device_count()} in all",
        flush=True,
    )
    params = train(args.steps)
    diloco = train_diloco(args.steps)
    if args.out and jax.process_index() == 0:
        np.savez(args.out, **params, **{f"diloco/{k}": v for k, v in diloco.items()})
    if args.coordinator:
        jax.distributed.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
