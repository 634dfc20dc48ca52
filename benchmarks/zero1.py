"""ZeRO-1 against a replicated optimizer state on 8 host devices: per-device bytes, step time and
the collectives XLA inserts (read from the compiled HLO).

`python -m benchmarks --zero1` (or `python -m benchmarks.zero1`) prints a Markdown table and
writes `zero1.json` to `--out`. The process needs 8 host devices, so when JAX is already running
with fewer, the measurement runs in a fresh subprocess with
`XLA_FLAGS=--xla_force_host_platform_device_count=8`.

The workload is one data-parallel training step (loss, gradients, `clip_by_global_norm(1)` +
`adamw`, `apply_updates`) of an MLP, jitted with params and state donated, the batch split over
the 8 devices. Both layouts run the same function; only the state's shardings differ
(`gradtx.state_sharding(tx, params)` vs `gradtx.state_sharding(tx, params, zero_axis="data")`).
Rounds alternate the two layouts; times are medians and the ratio is ZeRO-1 / replicated per
round (median and interquartile range).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import time
from typing import Any

DEVICES = 8
_FLAG = f"--xla_force_host_platform_device_count={DEVICES}"

if "jax" not in sys.modules and "xla_force_host_platform_device_count" not in os.environ.get(
    "XLA_FLAGS", ""
):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + _FLAG).strip()

_COLLECTIVE = re.compile(
    r"=\s*(?P<shape>\S.*?)\s(?P<op>all-reduce|all-gather|reduce-scatter|all-to-all|"
    r"collective-permute)(?:-start)?\("
)
_ARRAY = re.compile(r"(?P<dtype>[a-z]+\d*)\[(?P<dims>[\d,]*)\]")
_BYTES = {"f32": 4, "f16": 2, "bf16": 2, "s32": 4, "u32": 4, "f64": 8, "s8": 1, "u8": 1, "pred": 1}


def collectives_with_bytes(hlo: str) -> dict[str, dict[str, int]]:
    """Count and output bytes of each collective in optimized HLO text."""
    out: dict[str, dict[str, int]] = {}
    for m in _COLLECTIVE.finditer(hlo):
        nbytes = 0
        for a in _ARRAY.finditer(m.group("shape")):
            dims = [int(d) for d in a.group("dims").split(",") if d]
            size = 1
            for d in dims:
                size *= d
            nbytes += size * _BYTES.get(a.group("dtype"), 4)
        entry = out.setdefault(m.group("op"), {"count": 0, "bytes": 0})
        entry["count"] += 1
        entry["bytes"] += nbytes
    return out


def _quantiles(xs: list[float]) -> dict[str, float]:
    import numpy as np

    q = np.percentile(xs, [25, 50, 75])
    return {"q1": float(q[0]), "median": float(q[1]), "q3": float(q[2]), "n": len(xs)}


def measure(quick: bool = False, rounds: int | None = None) -> dict[str, Any]:
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import AxisType, NamedSharding
    from jax.sharding import PartitionSpec as P

    import gradtx

    if jax.device_count() < DEVICES:
        raise RuntimeError(f"benchmarks.zero1 needs {DEVICES} devices, got {jax.device_count()}")
    mesh = jax.make_mesh((DEVICES,), ("data",), axis_types=(AxisType.Auto,))
    width = 256 if quick else 2048
    rng = np.random.default_rng(0)
    host = {
        "w1": rng.normal(size=(width // 4, width)).astype(np.float32) / 16,
        "b1": np.zeros(width, np.float32),
        "w2": rng.normal(size=(width, width)).astype(np.float32) / np.sqrt(width),
        "b2": np.zeros(width, np.float32),
        "w3": rng.normal(size=(width, width // 4)).astype(np.float32) / np.sqrt(width),
    }
    replicated = NamedSharding(mesh, P())
    rows = NamedSharding(mesh, P("data"))
    x = jax.device_put(rng.normal(size=(64, width // 4)).astype(np.float32), rows)
    y = jax.device_put(rng.normal(size=(64, width // 4)).astype(np.float32), rows)
    tx = gradtx.chain(gradtx.clip_by_global_norm(1.0), gradtx.adamw(1e-3, weight_decay=1e-4))
    params_sh = jax.tree.map(lambda _: replicated, host)

    def loss_fn(p, x, y):
        h = jax.nn.relu(x @ p["w1"] + p["b1"])
        h = jax.nn.relu(h @ p["w2"] + p["b2"])
        return jnp.mean((h @ p["w3"] - y) ** 2)

    def train_step(p, s, x, y):
        loss, g = jax.value_and_grad(loss_fn)(p, x, y)
        u, s = tx.update(g, s, p)
        return gradtx.apply_updates(p, u), s, loss

    layouts: dict[str, dict[str, Any]] = {}
    for name, zero_axis in (("replicated state", None), ("ZeRO-1", "data")):
        params = jax.device_put(host, params_sh)
        state_sh = gradtx.state_sharding(tx, params, zero_axis=zero_axis)
        state = gradtx.init_sharded(tx, params, zero_axis=zero_axis)
        step = jax.jit(
            train_step, out_shardings=(params_sh, state_sh, replicated), donate_argnums=(0, 1)
        )
        compiled = step.lower(params, state, x, y).compile()
        mem = compiled.memory_analysis()
        layouts[name] = {
            "step": step,
            "carry": (params, state),
            "state_bytes_per_device": max(gradtx.bytes_per_device(state).values()),
            "params_bytes_per_device": max(gradtx.bytes_per_device(params).values()),
            "temp_bytes_per_device": int(getattr(mem, "temp_size_in_bytes", 0) or 0),
            "collectives": collectives_with_bytes(compiled.as_text()),
            "times": [],
        }
        for _ in range(2):  # warm-up
            p, s, loss = step(*layouts[name]["carry"], x, y)
            layouts[name]["carry"] = (p, s)
        jax.block_until_ready(loss)
    n_rounds = rounds or (3 if quick else 30)
    ratios = []
    names = list(layouts)
    for r in range(n_rounds):
        order = names if r % 2 == 0 else names[::-1]
        for name in order:
            lay = layouts[name]
            t0 = time.perf_counter()
            p, s, loss = lay["step"](*lay["carry"], x, y)
            jax.block_until_ready((p, s, loss))
            lay["times"].append(time.perf_counter() - t0)
            lay["carry"] = (p, s)
        ratios.append(layouts["ZeRO-1"]["times"][-1] / layouts["replicated state"]["times"][-1])
    final = {k: jax.device_get(v["carry"][0]) for k, v in layouts.items()}
    diff = max(
        float(np.max(np.abs(final["ZeRO-1"][k] - final["replicated state"][k]))) for k in host
    )
    return {
        "machine": {
            "processor": platform.processor() or platform.machine(),
            "cpus": os.cpu_count(),
            "jax": jax.__version__,
            "backend": jax.default_backend(),
            "devices": jax.device_count(),
            "python": platform.python_version(),
        },
        "parameters": int(sum(v.size for v in host.values())),
        "optimizer": "clip_by_global_norm(1) + adamw",
        "max_abs_param_difference": diff,
        "ratio_zero1_to_replicated": _quantiles(ratios),
        "layouts": {
            name: {
                "state_bytes_per_device": v["state_bytes_per_device"],
                "params_bytes_per_device": v["params_bytes_per_device"],
                "temp_bytes_per_device": v["temp_bytes_per_device"],
                "step_ms": _quantiles([t * 1e3 for t in v["times"]]),
                "collectives": v["collectives"],
            }
            for name, v in layouts.items()
        },
    }


def _mib(n: int) -> str:
    return f"{n / 2**20:.2f} MiB"


def _coll(c: dict[str, dict[str, int]]) -> str:
    return ", ".join(
        f"{op} x{v['count']} ({v['bytes'] / 2**20:.2f} MiB)" for op, v in sorted(c.items())
    )


def markdown(res: dict[str, Any]) -> str:
    m = res["machine"]
    r = res["ratio_zero1_to_replicated"]
    lines = [
        f"{res['parameters']:,} float32 parameters, {res['optimizer']}, {m['devices']} "
        f"{m['backend']} devices ({m['cpus']} cores, jax {m['jax']}).",
        "",
        "| state layout | state / device | params / device | XLA temp / device | step ms "
        "(median, IQR) | collectives in the compiled step (count, output bytes) |",
        "|---|---|---|---|---|---|",
    ]
    for name, v in res["layouts"].items():
        t = v["step_ms"]
        lines.append(
            f"| {name} | {_mib(v['state_bytes_per_device'])} | "
            f"{_mib(v['params_bytes_per_device'])} | {_mib(v['temp_bytes_per_device'])} | "
            f"{t['median']:.1f} ({t['q1']:.1f}-{t['q3']:.1f}) | {_coll(v['collectives'])} |"
        )
    lines += [
        "",
        f"Step time ratio ZeRO-1 / replicated: {r['median']:.2f} ({r['q1']:.2f}-{r['q3']:.2f}) "
        f"over {r['n']} alternating rounds; largest |params difference| after the run: "
        f"{res['max_abs_param_difference']:.1e}.",
    ]
    return "\n".join(lines)


def main(quick: bool = False, out: str = "benchmarks/results", rounds: int | None = None) -> int:
    import jax

    if jax.device_count() < DEVICES:  # JAX started without the flag: measure in a subprocess
        env = dict(os.environ)
        env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " " + _FLAG).strip()
        args = [sys.executable, "-m", "benchmarks.zero1", "--out", out]
        args += ["--quick"] if quick else []
        args += ["--repeats", str(rounds)] if rounds else []
        return subprocess.run(args, env=env, check=False).returncode
    res = measure(quick=quick, rounds=rounds)
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, "zero1.json")
    with open(path, "w") as f:
        json.dump(res, f, indent=2)
    print(markdown(res))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m benchmarks.zero1", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="a small model and 3 rounds")
    parser.add_argument("--repeats", type=int, help="timed rounds (default 30)")
    parser.add_argument("--out", default="benchmarks/results")
    a = parser.parse_args()
    sys.exit(main(quick=a.quick, out=a.out, rounds=a.repeats))
