"""`python -m benchmarks --population`: K members of one optimizer trained in one vmapped program
(`gradtx.population`) against K runs one after the other, and against Optax's way.

Two MLPs on the demo's spirals (`gradtx.cli._demo`: 4 classes, ReLU, softmax cross-entropy):
2-32-32-4 with batch 16, where the per-step dispatch dominates, and the demo's own 2-64-64-4
with batch 128, where the arithmetic does. The optimizer is `adamw`; the K = 64 members are an
8 x 8 grid of learning rate x weight decay (`gradtx.sweep`). Every member sees the same batches.

Throughput (time per training step of all K members; interleaved rounds, median of the
per-round ratios):

- `population`: one jitted step of `gradtx.population(adamw, sweep)` with the forward/backward
  `jax.vmap`ped over the member axis, params and state donated;
- `population, lax.map`: the same, the members' gradients computed one after the other inside
  the program (`jax.lax.map`), which XLA's CPU backend runs faster than the batched computation
  when the model is compute-bound;
- `sequential`: K runs one after the other, each `calls` calls of one compiled step that takes
  the run's hyperparameters as a jit argument (`gradtx.with_hyperparameters` inside): compiled
  once, reused by every run;
- `optax`: Optax's `inject_hyperparams(adamw)` vmapped by hand over the member axis (each
  member's learning rate and weight decay set in a vmapped `init`), the same step otherwise;
- `floor`: the same vmapped forward/backward with a stateless `p - lr * g`, no optimizer state:
  what any population step of this model costs at least.

End to end (compiles included, a fresh `jax.jit` each): `separate` builds, compiles and trains K
runs of `e2e_steps` steps one after the other, each with its own `gradtx.adamw(lr,
weight_decay=wd)` and its own jitted step (the numbers Python constants: what a sweep script does
today); `population` (and `population, lax.map`) builds, compiles and trains the K members in
one program; `optax` the same with Optax's vmapped `inject_hyperparams`. The floor is the
population's build and compile time plus `e2e_steps - 1` floor steps.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .harness import Budget, Stats, interleaved, machine_facts, paired_ratio
from .report import write_result

MODELS = {
    "MLP 2-32-32-4, batch 16": {"sizes": (2, 32, 32, 4), "batch": 16, "target": 15.0},
    "demo MLP 2-64-64-4, batch 128": {"sizes": (2, 64, 64, 4), "batch": 128, "target": 2.0},
}
E2E_TARGET = 10.0
FULL = {"members": 64, "calls": 50, "e2e_steps": 500}
QUICK = {"members": 2, "calls": 2, "e2e_steps": 3}
LEARNING_RATES = (3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 1e-1, 3e-1, 1.0)
WEIGHT_DECAYS = (0.0, 1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 1e-1)
BATCHES = 8  # distinct batches, cycled


def grid(members: int) -> tuple[list[float], list[float]]:
    """The first `members` (learning rate, weight decay) pairs of the 8 x 8 grid, the learning
    rate varying slowest (64 members: the whole grid; 4: the 2 x 2 corner)."""
    side = int(np.ceil(np.sqrt(members)))
    if side > len(LEARNING_RATES):
        raise ValueError(f"at most {len(LEARNING_RATES) ** 2} members, got {members}")
    pairs = [(a, b) for a in LEARNING_RATES[:side] for b in WEIGHT_DECAYS[:side]][:members]
    return [a for a, _ in pairs], [b for _, b in pairs]


def problem(sizes: tuple[int, ...], batch: int) -> tuple[Any, list[tuple[jax.Array, jax.Array]]]:
    """The demo's initial MLP params and `BATCHES` minibatches of its spirals, on the device."""
    from gradtx.cli._demo import init_mlp, spirals

    x, y = spirals(seed=0)
    order = np.random.default_rng(0).permutation(len(x))
    batches = []
    for i in range(BATCHES):
        idx = np.take(order, np.arange(i * batch, (i + 1) * batch), mode="wrap")
        batches.append((jnp.asarray(x[idx]), jnp.asarray(y[idx])))
    return init_mlp(jax.random.key(0), sizes), batches


def stacked(tree: Any, k: int) -> Any:
    """`tree` with a leading member axis of `k` copies (distinct buffers: they are donated)."""
    return jax.tree.map(lambda a: jnp.broadcast_to(a, (k, *a.shape)).copy(), tree)


def population_step(pop: Any, gradients: str = "vmap") -> Any:
    """The population's jitted training step: the members' gradients (`jax.vmap`ped, or
    `jax.lax.map`ped: one member after the other inside the program), then one `pop.update`."""
    import gradtx
    from gradtx.cli._demo import loss_fn

    grad = jax.grad(loss_fn)

    def grads(params, x, y):
        if gradients == "vmap":
            return jax.vmap(grad, in_axes=(0, None, None))(params, x, y)
        return jax.lax.map(lambda p: grad(p, x, y), params)

    def step(params, state, x, y):
        updates, state = pop.update(grads(params, x, y), state, params)
        return gradtx.apply_updates(params, updates), state

    return jax.jit(step, donate_argnums=(0, 1))


def sequential_step(tx: Any) -> Any:
    """One run's jitted step with the hyperparameters as an argument (compiled once)."""
    import gradtx
    from gradtx.cli._demo import loss_fn

    def step(params, state, x, y, hp):
        tx_hp = gradtx.with_hyperparameters(tx, hp)
        updates, state = tx_hp.update(jax.grad(loss_fn)(params, x, y), state, params)
        return gradtx.apply_updates(params, updates), state

    return jax.jit(step, donate_argnums=(0, 1))


def plain_step(tx: Any) -> Any:
    """One run's jitted step with `tx`'s numbers as constants (what a sweep script writes)."""
    import gradtx
    from gradtx.cli._demo import loss_fn

    def step(params, state, x, y):
        updates, state = tx.update(jax.grad(loss_fn)(params, x, y), state, params)
        return gradtx.apply_updates(params, updates), state

    return jax.jit(step, donate_argnums=(0, 1))


def optax_population(lr: list[float], wd: list[float], params: Any) -> tuple[Any, Any]:
    """Optax's `inject_hyperparams(adamw)` vmapped by hand: (jitted step, stacked state)."""
    import optax

    from gradtx.cli._demo import loss_fn

    tx = optax.inject_hyperparams(optax.adamw)(learning_rate=1e-3, weight_decay=1e-4)

    def init(lr, wd):
        state = tx.init(params)
        hp = dict(state.hyperparams, learning_rate=lr, weight_decay=wd)
        return state._replace(hyperparams=hp)

    state = jax.jit(jax.vmap(init))(jnp.asarray(lr, jnp.float32), jnp.asarray(wd, jnp.float32))

    def one(p, s, x, y):
        updates, s = tx.update(jax.grad(loss_fn)(p, x, y), s, p)
        return optax.apply_updates(p, updates), s

    step = jax.jit(jax.vmap(one, in_axes=(0, 0, None, None)), donate_argnums=(0, 1))
    return step, state


def floor_step(lr: list[float]) -> Any:
    """The vmapped forward/backward and `p - lr * g`: no optimizer state at all."""
    from gradtx.cli._demo import loss_fn

    def one(p, lr, x, y):
        g = jax.grad(loss_fn)(p, x, y)
        return jax.tree.map(lambda a, b: a - lr * b, p, g)

    sgd = jax.vmap(one, in_axes=(0, 0, None, None))
    lrs = jnp.asarray(lr, jnp.float32)

    def step(params, state, x, y):
        return sgd(params, lrs, x, y), state

    return jax.jit(step, donate_argnums=(0,))


class _Loop:
    """Drives a compiled step: each carry (params, state, *extra arguments) `calls` steps per
    block, one carry after the other; returns seconds per step of all members."""

    def __init__(self, step: Callable, carries: list[tuple], batches: list, calls: int):
        self.step, self.carries, self.batches, self.calls = step, carries, batches, calls
        self.i = 0

    def run_block(self) -> float:
        t = time.perf_counter()
        for j, (p, s, *extra) in enumerate(self.carries):
            for c in range(self.calls):
                p, s = self.step(p, s, *self.batches[(self.i + c) % BATCHES], *extra)
            self.carries[j] = (p, s, *extra)
        jax.block_until_ready([c[:2] for c in self.carries])
        self.i += self.calls
        return (time.perf_counter() - t) / self.calls


def throughput(model: dict, size: dict, budget: Budget, log: Callable[[str], None]) -> dict:
    import gradtx

    k, calls = size["members"], size["calls"]
    params, batches = problem(model["sizes"], model["batch"])
    lr, wd = grid(k)
    tx = gradtx.adamw(1e-3, weight_decay=1e-4)
    hp = gradtx.sweep(tx, mode="zip", learning_rate=lr, weight_decay=wd)
    pop = gradtx.population(tx, hp)
    optax_step, optax_state = optax_population(lr, wd, params)
    seq = sequential_step(tx)
    alone = [
        (jax.tree.map(jnp.copy, params), tx.init(params), gradtx.population_member(hp, m))
        for m in range(k)
    ]

    # `pop.init` puts the population's own hyperparameter arrays in the state; two donated
    # states must not share them, hence the copies.
    def pop_state() -> Any:
        return jax.tree.map(jnp.copy, pop.init(params))

    runners: dict[str, Any] = {
        "population": _Loop(
            population_step(pop), [(stacked(params, k), pop_state())], batches, calls
        ),
        "population, lax.map": _Loop(
            population_step(pop, "map"), [(stacked(params, k), pop_state())], batches, calls
        ),
        "sequential": _Loop(seq, alone, batches, calls),
        "optax": _Loop(optax_step, [(stacked(params, k), optax_state)], batches, calls),
        "floor": _Loop(floor_step(lr), [(stacked(params, k), ())], batches, calls),
    }
    for name, r in runners.items():
        log(f"  compiling {name}")
        r.run_block()
    times = interleaved(runners, budget)
    if seq._cache_size() != 1:  # the premise of the sequential baseline
        raise AssertionError(f"the sequential step compiled {seq._cache_size()} times, not once")
    out: dict[str, Any] = {
        "step_ms": {n: Stats.of(t).median * 1e3 for n, t in times.items()},
        "rounds": len(times["population"]),
    }
    for a, b in (
        ("sequential", "population"),
        ("sequential", "population, lax.map"),
        ("sequential", "optax"),
        ("sequential", "floor"),
        ("population", "optax"),
        ("population", "floor"),
    ):
        ratio = paired_ratio(times, a, b)
        assert ratio is not None
        out[f"{a}/{b}"] = ratio.as_dict()
    return out


def _timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    t = time.perf_counter()
    out = fn()
    jax.block_until_ready(out)
    return out, time.perf_counter() - t


def end_to_end(model: dict, size: dict, floor_ms: float, log: Callable[[str], None]) -> dict:
    """Each variant once, from building the optimizer to the last step's result."""
    import gradtx

    k, steps = size["members"], size["e2e_steps"]
    params, batches = problem(model["sizes"], model["batch"])
    lr, wd = grid(k)

    def train(step: Callable, p: Any, s: Any) -> tuple[Any, float, float]:
        (p, s), first = _timed(lambda: step(p, s, *batches[0]))  # compiles
        t = time.perf_counter()
        for i in range(1, steps):
            p, s = step(p, s, *batches[i % BATCHES])
        jax.block_until_ready((p, s))
        return p, first, time.perf_counter() - t

    def population_run(gradients: str) -> dict:
        t = time.perf_counter()
        tx = gradtx.adamw(1e-3, weight_decay=1e-4)
        pop = gradtx.population(tx, gradtx.sweep(tx, mode="zip", learning_rate=lr, weight_decay=wd))
        state = pop.init(params)
        jax.block_until_ready(state)
        build = time.perf_counter() - t
        _, first, _ = train(population_step(pop, gradients), stacked(params, k), state)
        return {"total_s": time.perf_counter() - t, "build_s": build, "first_step_s": first}

    def optax_run() -> dict:
        t = time.perf_counter()
        step, state = optax_population(lr, wd, params)
        jax.block_until_ready(state)
        build = time.perf_counter() - t
        _, first, _ = train(step, stacked(params, k), state)
        return {"total_s": time.perf_counter() - t, "build_s": build, "first_step_s": first}

    def separate_runs() -> dict:
        t = time.perf_counter()
        firsts = []
        for m in range(k):
            tx = gradtx.adamw(lr[m], weight_decay=wd[m])
            p = jax.tree.map(jnp.copy, params)
            _, first, _ = train(plain_step(tx), p, tx.init(p))
            firsts.append(first)
        return {"total_s": time.perf_counter() - t, "first_step_s": float(np.median(firsts))}

    log("  end to end: population")
    pop = population_run("vmap")
    log("  end to end: population, lax.map")
    pop_map = population_run("map")
    log("  end to end: optax")
    opt = optax_run()
    log(f"  end to end: {k} separate runs")
    sep = separate_runs()
    floor_s = pop["build_s"] + pop["first_step_s"] + (steps - 1) * floor_ms * 1e-3
    return {
        "steps": steps,
        "population": pop,
        "population, lax.map": pop_map,
        "optax": opt,
        "separate": sep,
        "floor_s": floor_s,
        "separate/population": sep["total_s"] / pop["total_s"],
        "separate/population, lax.map": sep["total_s"] / pop_map["total_s"],
        "separate/optax": sep["total_s"] / opt["total_s"],
        "population/optax": pop["total_s"] / opt["total_s"],
        "separate/floor": sep["total_s"] / floor_s,
    }


def run(quick: bool, rounds: int | None, log: Callable[[str], None]) -> dict[str, Any]:
    size = QUICK if quick else FULL
    budget = (
        Budget(warmup=1, min_rounds=2, max_rounds=rounds or 2, seconds=0.0)
        if quick
        else Budget(warmup=1, min_rounds=rounds or 7, max_rounds=rounds or 15, seconds=30.0)
    )
    t0 = time.perf_counter()
    load_before = os.getloadavg()
    rows, targets = [], []
    for name, model in MODELS.items():
        log(f"{name}: throughput")
        tp = throughput(model, size, budget, log)
        log(f"{name}: end to end")
        e2e = end_to_end(model, size, tp["step_ms"]["floor"], log)
        rows.append({"model": name, **model, "throughput": tp, "end_to_end": e2e})
        for variant, gradients in (("population", "vmap"), ("population, lax.map", "lax.map")):
            value = tp[f"sequential/{variant}"]["median"]
            targets.append(
                {
                    "target": f"{name}: {size['members']} members vs sequential runs "
                    f"(gradients: {gradients})",
                    "value": value,
                    "limit": model["target"],
                    "met": value >= model["target"],
                }
            )
            value = e2e[f"separate/{variant}"]
            targets.append(
                {
                    "target": f"{name}: end to end vs separately built runs "
                    f"(gradients: {gradients})",
                    "value": value,
                    "limit": E2E_TARGET,
                    "met": value >= E2E_TARGET,
                }
            )
    return {
        "machine": machine_facts(),
        "load_average": {"before": load_before, "after": os.getloadavg()},
        "size": size,
        "optimizer": "adamw; members: a learning rate x weight decay grid",
        "rows": rows,
        "targets": targets,
        "seconds": time.perf_counter() - t0,
    }


def _ratio(d: dict) -> str:
    return f"{d['median']:.2f} ({d['q1']:.2f}–{d['q3']:.2f})"


THROUGHPUT_COLUMNS = ("population", "population, lax.map", "sequential", "optax", "floor")
THROUGHPUT_RATIOS = (
    "sequential/population",
    "sequential/population, lax.map",
    "sequential/optax",
    "sequential/floor",
    "population/optax",
    "population/floor",
)
E2E_COLUMNS = ("population", "population, lax.map", "optax", "separate")
E2E_RATIOS = (
    "separate/population",
    "separate/population, lax.map",
    "separate/optax",
    "population/optax",
    "separate/floor",
)


def markdown(result: dict[str, Any]) -> str:
    size, rows = result["size"], result["rows"]
    k = size["members"]
    lines = [
        f"Throughput: ms per training step of all {k} members (median of "
        f"{rows[0]['throughput']['rounds']} interleaved rounds of {size['calls']} steps).",
        "",
        "| model | " + " | ".join(THROUGHPUT_COLUMNS) + " |",
        "|---|" + "---:|" * len(THROUGHPUT_COLUMNS),
    ]
    for r in rows:
        ms = r["throughput"]["step_ms"]
        cells = " | ".join(f"{ms[c]:.3f}" for c in THROUGHPUT_COLUMNS)
        lines.append(f"| {r['model']} | {cells} |")
    lines += [
        "",
        "Ratios of those times: median (IQR) of the per-round ratios.",
        "",
        "| model | " + " | ".join(THROUGHPUT_RATIOS) + " |",
        "|---|" + "---:|" * len(THROUGHPUT_RATIOS),
    ]
    for r in rows:
        tp = r["throughput"]
        lines.append(
            f"| {r['model']} | " + " | ".join(_ratio(tp[c]) for c in THROUGHPUT_RATIOS) + " |"
        )
    lines += [
        "",
        f"End to end, compiles included: {k} runs of {size['e2e_steps']} steps, seconds (in "
        "brackets: the first step, which compiles; for the separate runs, the median one's).",
        "",
        "| model | " + " | ".join(E2E_COLUMNS) + " | floor |",
        "|---|" + "---:|" * (len(E2E_COLUMNS) + 1),
    ]
    for r in rows:
        e = r["end_to_end"]
        totals = [f"{e[c]['total_s']:.2f} ({e[c]['first_step_s']:.2f})" for c in E2E_COLUMNS]
        lines.append(f"| {r['model']} | " + " | ".join(totals) + f" | {e['floor_s']:.2f} |")
    lines += ["", "| model | " + " | ".join(E2E_RATIOS) + " |", "|---|" + "---:|" * len(E2E_RATIOS)]
    for r in rows:
        e = r["end_to_end"]
        lines.append(f"| {r['model']} | " + " | ".join(f"{e[c]:.2f}" for c in E2E_RATIOS) + " |")
    lines += ["", "| target | value | limit | met |", "|---|---:|---:|---|"]
    for t in result["targets"]:
        met = "yes" if t["met"] else "**no**"
        lines.append(f"| {t['target']} | {t['value']:.2f} | ≥ {t['limit']:.0f} | {met} |")
    before, after = result["load_average"]["before"], result["load_average"]["after"]
    lines += [
        "",
        f"Load average (1, 5, 15 min) before: {', '.join(f'{x:.2f}' for x in before)}; after: "
        f"{', '.join(f'{x:.2f}' for x in after)}. Whole run {result['seconds']:.0f} s.",
    ]
    return "\n".join(lines)


def main(quick: bool, out: str, rounds: int | None, log: Callable[[str], None]) -> int:
    result = run(quick, rounds, log)
    write_result(result, markdown(result), out, "population")
    return 0
