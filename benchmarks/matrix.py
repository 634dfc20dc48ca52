"""`python -m benchmarks --matrix`: the matrix optimizers on FSDP-sharded params (8 host devices).

Setup (issue 51): a mesh axis `fsdp` over 8 host CPU devices; params `{"w": (512, 512), "stack":
(4, 512, 512)}` with rows sharded (`P("fsdp", None)`, `P(None, "fsdp", None)`; the stack's axis
0 a batch axis, given as dimension numbers), the state built in its derived shardings by
`gradtx.init_sharded`. Per optimizer:

- collective bytes per step: every all-gather, all-reduce, reduce-scatter, all-to-all and
  collective-permute of a compiled training step (the update and `apply_updates`, params and
  state in and out in their shardings: the update must come back to the params' layout), by
  result size (`benchmarks.zero1.collectives_with_bytes`), divided by the parameter bytes. For
  SOAP, Shampoo and Kron the program holds the refresh branch too (their refreshes sit under
  `lax.cond` / `lax.switch`), so theirs is an upper bound of an ordinary step's;
- step time, sharded (8 devices) and on one device: the median over timed rounds of a jitted
  update (compiled first, inputs not donated), and the ratio to AdamW's in the same process;
- Muon with `distributed="owner"` and Optax's `contrib.muon` (the same dimension numbers) in
  the same run.

Dion is left out, and SOAP, Shampoo and Kron are compiled (bytes) but not run sharded: on this
mesh each of the 8 host devices runs their whole eigh / QR / fit on 2 shared cores, and their
first sharded step at 512 x 512 did not finish within 10 minutes
(`tests/distributed/test_matrix_collectives.py` runs all of them sharded on small matrices).

The refresh cost, on one device: SOAP, Shampoo and Kron recompute their preconditioners every
few steps (a refresh branch under `lax.cond` / `lax.switch`), so the same compiled update is
timed at a state whose next step refreshes and at one whose next step does not (their factors
filled by one step of the benchmark's gradients first), interleaved, the median of each; the
refresh cost is the difference. Shampoo with each `inverse_root` ("eigh", "newton"), SOAP's
refresh (one power step + QR) and its first step (the full eigendecomposition it starts from),
Kron at refit probability 1 against 0 (a schedule of the step count).

And the Newton-Schulz coefficients: the orthogonality error `||U U^T - I||_2` after k iterations
of the standard and the Polar Express rows on Gaussian (512, 128) matrices, and the step time
of Muon with each on one device.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from .zero1 import _FLAG, DEVICES, collectives_with_bytes

SHAPES = {"w": (512, 512), "stack": (4, 512, 512)}
QUICK_SHAPES = {"w": (64, 64), "stack": (4, 64, 64)}
# compiled and measured in bytes, not run sharded: 8 host devices on 2 cores each running the
# whole eigh / QR / fit did not finish a first step at 512 x 512 within 10 minutes
COMPILED_ONLY = ("soap", "shampoo", "kron")


def optimizers() -> dict[str, Callable[[], Any]]:
    import optax

    import gradtx

    C = gradtx.contrib
    muon_dims = {"w": C.MuonDimensionNumbers(), "stack": C.MuonDimensionNumbers(1, 2)}
    optax_dims = {
        "w": optax.contrib.MuonDimensionNumbers(0, 1),
        "stack": optax.contrib.MuonDimensionNumbers(1, 2),
    }
    return {
        "adamw": lambda: gradtx.adamw(1e-3),
        "muon": lambda: C.muon(1e-3, muon_weight_dimension_numbers=muon_dims),
        "muon (owner)": lambda: C.muon(
            1e-3, muon_weight_dimension_numbers=muon_dims, distributed="owner"
        ),
        "muon (polar_express)": lambda: C.muon(
            1e-3, muon_weight_dimension_numbers=muon_dims, ns_coeffs="polar_express"
        ),
        "optax muon": lambda: optax.contrib.muon(1e-3, muon_weight_dimension_numbers=optax_dims),
        "normuon": lambda: C.normuon(1e-3, weight_dimension_numbers=muon_dims),
        "scion": lambda: C.scion(1e-3, weight_dimension_numbers=muon_dims),
        "soap": lambda: C.soap(
            1e-3,
            weight_dimension_numbers={
                "w": C.SoapDimensionNumbers(),
                "stack": C.SoapDimensionNumbers(1, 2),
            },
        ),
        "shampoo": lambda: C.shampoo(
            1e-3,
            weight_dimension_numbers={
                "w": C.ShampooDimensionNumbers(),
                "stack": C.ShampooDimensionNumbers(1, 2),
            },
        ),
        "kron": lambda: C.kron(1e-3, batch_axes={"w": (), "stack": (0,)}),
    }


def _median_time(fn: Callable[[], Any], rounds: int) -> float:
    import jax

    jax.block_until_ready(fn())
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        jax.block_until_ready(fn())
        times.append(time.perf_counter() - start)
    times.sort()
    return times[len(times) // 2]


def measure(quick: bool = False, rounds: int | None = None) -> dict[str, Any]:
    import jax
    import numpy as np
    from jax.sharding import AxisType, NamedSharding
    from jax.sharding import PartitionSpec as P

    import gradtx

    from .harness import machine_facts

    rounds = rounds or (2 if quick else 10)
    shapes = QUICK_SHAPES if quick else SHAPES
    mesh = jax.make_mesh((DEVICES,), ("fsdp",), axis_types=(AxisType.Auto,))
    specs = {"w": P("fsdp", None), "stack": P(None, "fsdp", None)}
    shardings = {k: NamedSharding(mesh, s) for k, s in specs.items()}
    rng = np.random.default_rng(0)
    host = {k: rng.normal(size=s).astype(np.float32) for k, s in shapes.items()}
    grads = {k: rng.normal(size=s).astype(np.float32) for k, s in shapes.items()}
    sharded = jax.device_put(host, shardings)
    sharded_grads = jax.device_put(grads, shardings)
    param_bytes = sum(4 * int(np.prod(s)) for s in shapes.values())
    rows: list[dict[str, Any]] = []
    for name, make in optimizers().items():
        tx = make()
        state = gradtx.init_sharded(tx, sharded)
        step = jax.jit(tx.update)
        _, moved = training_step(tx, sharded, state, sharded_grads)
        sharded_s = (
            float("nan")
            if name in COMPILED_ONLY
            else _median_time(lambda: step(sharded_grads, state, sharded), rounds)
        )
        single_state = jax.jit(tx.init)(host)
        single_s = _median_time(lambda: step(grads, single_state, host), rounds)
        rows.append(
            {
                "name": name,
                "collectives": moved,
                "bytes_ratio": sum(c["bytes"] for c in moved.values()) / param_bytes,
                "sharded_s": sharded_s,
                "single_s": single_s,
            }
        )
        print(f"{name}: {rows[-1]['bytes_ratio']:.2f}x the params moved", flush=True)
    base = {r["name"]: r for r in rows}["adamw"]
    for r in rows:
        r["sharded_vs_adamw"] = r["sharded_s"] / base["sharded_s"]
        r["single_vs_adamw"] = r["single_s"] / base["single_s"]
    return {
        "machine": machine_facts(),
        "shapes": {k: list(v) for k, v in shapes.items()},
        "param_bytes": param_bytes,
        "rounds": rounds,
        "rows": rows,
        "owner": owner_stack(quick),
        "refresh": refresh_costs(quick, rounds),
        "orthogonality": orthogonality(quick),
    }


def training_step(tx: Any, params: Any, state: Any, grads: Any) -> tuple[Any, dict[str, Any]]:
    """A compiled training step of `tx` (the update and `apply_updates`, params and state in and
    out in their shardings, so the update comes back to the params' layout) and its
    collectives (`collectives_with_bytes`)."""
    import jax

    import gradtx

    where = jax.tree.map(lambda x: x.sharding, (params, state))

    def train(p, s, g):
        u, s = tx.update(g, s, p)
        return gradtx.apply_updates(p, u), s

    training = jax.jit(train, in_shardings=(*where, where[0]), out_shardings=where)
    compiled = training.lower(params, state, grads).compile()
    return compiled, collectives_with_bytes(compiled.as_text() or "")


def owner_stack(quick: bool) -> dict[str, Any]:
    """Muon on a stack of 16 same-shape layers (rows sharded, so every device owns 2 whole
    matrices) in each layout: the collective bytes of a compiled training step over the
    parameter bytes, and the per-device FLOPs of XLA's cost analysis."""
    import jax
    import numpy as np
    from jax.sharding import AxisType, NamedSharding
    from jax.sharding import PartitionSpec as P

    import gradtx

    shape = (16, 64, 64) if quick else (16, 512, 512)
    mesh = jax.make_mesh((DEVICES,), ("fsdp",), axis_types=(AxisType.Auto,))
    rows = NamedSharding(mesh, P(None, "fsdp", None))
    params = {"stack": jax.device_put(np.ones(shape, np.float32), rows)}
    dims = gradtx.contrib.MuonDimensionNumbers(reduction_axis=1, output_axis=2)
    out: dict[str, Any] = {"shape": list(shape)}
    for layout in ("replicated", "owner"):
        tx = gradtx.contrib.muon(1e-3, muon_weight_dimension_numbers=dims, distributed=layout)
        state = gradtx.init_sharded(tx, params)
        compiled, moved = training_step(tx, params, state, params)
        cost = compiled.cost_analysis()
        cost = cost[0] if isinstance(cost, list) else cost
        out[layout] = {
            "collectives": moved,
            "bytes_ratio": sum(c["bytes"] for c in moved.values()) / (4 * int(np.prod(shape))),
            "flops": float(cost["flops"]),
        }
    out["flops_ratio"] = out["owner"]["flops"] / out["replicated"]["flops"]
    print(
        f"owner on a stack {shape}: {out['owner']['bytes_ratio']:.2f}x the params moved, "
        f"{out['flops_ratio']:.3f}x the replicated layout's FLOPs per device",
        flush=True,
    )
    return out


def refresh_variants() -> dict[str, tuple[Any, int, int]]:
    """name -> (transformation, state count whose next step refreshes, one whose does not)."""
    import jax.numpy as jnp

    import gradtx

    C = gradtx.contrib
    sdims = {"w": C.ShampooDimensionNumbers(), "stack": C.ShampooDimensionNumbers(1, 2)}
    odims = {"w": C.SoapDimensionNumbers(), "stack": C.SoapDimensionNumbers(1, 2)}
    soap = C.scale_by_soap(weight_dimension_numbers=odims, precondition_frequency=10)
    # refresh at the steps t = 10 + 10 k: the state count before such a step is 9 + 10 k
    shampoo = {
        m: C.scale_by_shampoo(weight_dimension_numbers=sdims, inverse_root=m)
        for m in ("eigh", "newton")
    }
    kron = C.scale_by_kron(
        preconditioner_update_probability=lambda c: jnp.where(c < 100, 1.0, 0.0),
        batch_axes={"w": (), "stack": (0,)},
    )
    return {
        "shampoo (eigh)": (shampoo["eigh"], 19, 20),
        "shampoo (newton)": (shampoo["newton"], 19, 20),
        "soap (power + QR)": (soap, 20, 21),  # refreshes at count % 10 == 1 after the step
        "soap (first step: eigh)": (soap, 0, 21),
        "kron (refit)": (kron, 1, 101),
    }


def refresh_costs(quick: bool, rounds: int) -> dict[str, Any]:
    """Each variant's ordinary and refresh step on one device, interleaved, medians (s)."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    shapes = QUICK_SHAPES if quick else SHAPES
    rng = np.random.default_rng(2)
    grads = {k: jnp.asarray(rng.normal(size=s).astype(np.float32)) for k, s in shapes.items()}
    rows = []
    for name, (tx, refresh_count, plain_count) in refresh_variants().items():
        step = jax.jit(tx.update)
        _, filled = step(grads, tx.init(grads))  # factors of one step's gradients
        states = {
            "refresh": filled._replace(count=jnp.int32(refresh_count)),
            "plain": filled._replace(count=jnp.int32(plain_count)),
        }
        times: dict[str, list[float]] = {"refresh": [], "plain": []}
        for state in states.values():  # compiled once, warmed on both branches
            jax.block_until_ready(step(grads, state))
        for _ in range(rounds):
            for kind, state in states.items():
                start = time.perf_counter()
                jax.block_until_ready(step(grads, state))
                times[kind].append(time.perf_counter() - start)
        plain, refresh = (float(np.median(times[k])) for k in ("plain", "refresh"))
        rows.append(
            {"name": name, "plain_s": plain, "refresh_s": refresh, "cost_s": refresh - plain}
        )
        print(f"{name}: refresh {1e3 * refresh:.1f} ms, ordinary {1e3 * plain:.1f} ms", flush=True)
    return {"shapes": {k: list(v) for k, v in shapes.items()}, "rounds": rounds, "rows": rows}


def orthogonality(quick: bool) -> dict[str, Any]:
    """||U U^T - I||_2 after 1..8 iterations of each coefficient table, Gaussian matrices."""
    import jax.numpy as jnp
    import numpy as np

    from gradtx.contrib._muon import _NS_COEFFS_PRESETS, _newton_schulz

    shape = (128, 32) if quick else (512, 128)
    x = np.random.default_rng(1).normal(size=shape).astype(np.float32)
    out: dict[str, list[float]] = {}
    for name in ("standard", "polar_express"):
        table = _NS_COEFFS_PRESETS[name]
        errors = []
        for k in range(1, 9):
            rows = tuple([table] * k) if name == "standard" else table[:k]
            u = np.asarray(_newton_schulz(jnp.asarray(x)[None], rows, "frobenius", 1e-7))[0]
            u = u.astype(np.float64)
            gram = u.T @ u
            errors.append(float(np.linalg.norm(gram - np.eye(gram.shape[0]), 2)))
        out[name] = errors
    return {"shape": list(shape), "errors": out}


def markdown(res: dict[str, Any]) -> str:
    lines = [
        f"Matrix optimizers on FSDP-sharded params: {DEVICES} host devices, params "
        + ", ".join(f"{k} {tuple(v)}" for k, v in res["shapes"].items())
        + " (rows sharded), state from `init_sharded`; median of "
        f"{res['rounds']} timed steps.",
        "",
        "| optimizer | collective bytes / param bytes | collectives (count) | "
        "step, 8 devices (ms) | vs AdamW | step, 1 device (ms) | vs AdamW |",
        "|---|---:|---|---:|---:|---:|---:|",
    ]

    def ms(seconds: float, ratio: float) -> str:
        if seconds != seconds:  # NaN: not run (COMPILED_ONLY)
            return "- | -"
        return f"{1e3 * seconds:.1f} | {ratio:.1f}x"

    for r in res["rows"]:
        kinds = ", ".join(f"{k} {v['count']}" for k, v in sorted(r["collectives"].items()))
        lines.append(
            f"| {r['name']} | {r['bytes_ratio']:.2f} | {kinds or '-'} | "
            f"{ms(r['sharded_s'], r['sharded_vs_adamw'])} | "
            f"{ms(r['single_s'], r['single_vs_adamw'])} |"
        )
    own = res["owner"]
    lines += [
        "",
        f"Muon on a stack {tuple(own['shape'])} of same-shape layers (rows sharded; every device "
        "owns whole matrices), a compiled training step:",
        "",
        "| layout | collective bytes / param bytes | collectives (count) | FLOPs per device |",
        "|---|---:|---|---:|",
    ]
    for layout in ("replicated", "owner"):
        r = own[layout]
        kinds = ", ".join(f"{k} {v['count']}" for k, v in sorted(r["collectives"].items()))
        lines.append(f"| {layout} | {r['bytes_ratio']:.3f} | {kinds or '-'} | {r['flops']:.3g} |")
    lines += ["", f"Owner / replicated FLOPs per device: {own['flops_ratio']:.3f}."]
    ref = res["refresh"]
    costs = {r["name"]: r["cost_s"] for r in ref["rows"]}
    lines += [
        "",
        "Refresh cost on one device (params "
        + ", ".join(f"{k} {tuple(v)}" for k, v in ref["shapes"].items())
        + f"; the same compiled update at a refresh step and an ordinary one, interleaved, "
        f"median of {ref['rounds']}):",
        "",
        "| optimizer (refresh) | ordinary step (ms) | refresh step (ms) | refresh cost (ms) |",
        "|---|---:|---:|---:|",
    ]
    for r in ref["rows"]:
        lines.append(
            f"| {r['name']} | {1e3 * r['plain_s']:.1f} | {1e3 * r['refresh_s']:.1f} | "
            f"{1e3 * r['cost_s']:.1f} |"
        )
    pairs = [
        ("shampoo (eigh)", "shampoo (newton)"),
        ("soap (first step: eigh)", "soap (power + QR)"),
    ]
    ratios = [
        f"{new}: {costs[old] / costs[new]:.1f}x cheaper than {old}"
        for old, new in pairs
        if costs.get(new, 0) > 0 and old in costs
    ]
    if ratios:
        lines += ["", "; ".join(ratios) + "."]
    o = res["orthogonality"]
    lines += [
        "",
        f"Orthogonality error ||U U^T - I||_2 of Gaussian {tuple(o['shape'])} matrices after k "
        "Newton-Schulz iterations:",
        "",
        "| coefficients | " + " | ".join(f"k={k}" for k in range(1, 9)) + " |",
        "|---|" + "---:|" * 8,
    ]
    for name, errors in o["errors"].items():
        lines.append(f"| {name} | " + " | ".join(f"{e:.3f}" for e in errors) + " |")
    return "\n".join(lines)


def main(quick: bool = False, out: str = "benchmarks/results", rounds: int | None = None) -> int:
    import jax

    if jax.device_count() < DEVICES:  # JAX started without the flag: measure in a subprocess
        env = dict(os.environ)
        env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " " + _FLAG).strip()
        args = [sys.executable, "-m", "benchmarks", "--matrix", "--out", out]
        args += ["--quick"] if quick else []
        args += ["--repeats", str(rounds)] if rounds else []
        return subprocess.run(args, env=env, check=False).returncode
    from .report import write_result

    res = measure(quick=quick, rounds=rounds)
    write_result(res, markdown(res), out, "matrix")
    return 0
