"""The suite's shared compilation tier: what the optimizer table's checks compile, compiled once.

Every case of the table (tests/optimizer_table.py) gets every generic check (tests/test_generic.py).
Compiling is most of what those checks cost, so they draw on a few programs per case, built here
on first use and cached for the session (xdist keeps a case's tests on one worker:
`--dist loadgroup`, with the group set in tests/conftest.py):

- `trajectory(case)`: the case's training step, `gradtx.jit_step(tx)` (the donating step users
  run), on the canonical tree `mixed_params()`, run for `STEPS` steps; every step's params, state
  and updates are kept (host copies; `recording(tx)` carries the updates out in the state).
  Resume, no-retrace, injection and finiteness checks read it, and so does the golden record
  (tests/golden.py), which every refactoring must reproduce bit for bit.
- `injected(case)`: the same steps with `inject_hyperparams(factory)(**kwargs)`.
- `numerics(case)`: the case's quadratic, run by the trajectory's own compiled step (the same
  optimizer on a tree of the same shapes, so nothing recompiles; the loss and its gradient are one
  program shared by the table), then its Rosenbrock problem and one bf16 and one f16 step in one
  program, called once per low-precision step (one program per case compiles faster than one for
  the whole table, with XLA's optimizations on; a step called per step faster than a scan).

Checks that need no numbers (state layout, scan stability, extra arguments, `jit_step` against
the plain step) trace (`jax.eval_shape`, `jax.make_jaxpr`, `.lower`) and compile nothing. A new
case in the table costs three compilations; tests/compile_counter.py reports them per case.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import gradtx

from .helpers import grad_sequence, mixed_params
from .optimizer_table import CASES, OptCase

STEPS = 20  # the trajectory's length
MIDPOINT = 10  # resume checks save here and continue to STEPS
DTYPE_STEPS = 3

BY_NAME: dict[str, OptCase] = {c.name: c for c in CASES}


def host(tree: Any) -> Any:
    """A host (NumPy) copy of every leaf: the tier keeps these, the step may donate the rest."""
    return jax.tree.map(lambda x: np.array(x, copy=True), tree)


def device(tree: Any) -> Any:
    """Fresh device arrays (owned by XLA, so a donating step may reuse them) from host copies."""
    return jax.tree.map(lambda x: jnp.array(x, copy=True), tree)


def host_loss(params: Any) -> np.float32:
    """The `value=` of each step: the squared norm of the params (computed on the host)."""
    return np.float32(
        sum(np.sum(np.square(np.asarray(x, np.float64))) for x in jax.tree.leaves(params))
    )


@functools.cache
def canonical() -> tuple[Any, list]:
    """The canonical tree (host copies) and the trajectory's gradients."""
    params = mixed_params()
    return host(params), [host(g) for g in grad_sequence(params, STEPS, scale=0.1)]


def plain_step(tx: gradtx.GradientTransformation) -> Any:
    """`jax.jit` of the step `jit_step` documents (same function name, so the same module name)."""

    def apply_step(params: Any, state: Any, grads: Any, **extra_args: Any):
        updates, state = tx.update(grads, state, params, **extra_args)
        return gradtx.apply_updates(params, updates), state

    return jax.jit(apply_step)


_DONATION = re.compile(r"(tf\.aliasing_output = \d+ : i32|jax\.buffer_donor = true)(, )?")


def without_donation(text: str) -> str:
    """Lowered StableHLO text with the donation attributes (and the braces they leave) removed."""
    text = _DONATION.sub("", text)
    text = re.sub(r", \}", "}", text)
    return re.sub(r"\s*\{\}", "", text)


def recording(tx: gradtx.GradientTransformation) -> gradtx.GradientTransformation:
    """`tx` with its last updates carried in the state, `(state, updates)`, so that the
    trajectory's one compiled step also gives each step's updates."""

    def init(params: Any) -> Any:
        return tx.init(params), jax.tree.map(jnp.zeros_like, params)

    def update(updates: Any, state: Any, params: Any = None, **extra_args: Any) -> Any:
        updates, inner = tx.update(updates, state[0], params, **extra_args)
        return updates, (inner, updates)

    return gradtx.GradientTransformation(init, update)


@dataclass
class Trajectory:
    """`STEPS` steps of `jit_step(recording(tx))` from the canonical tree: params[i], states[i]
    after i steps (host copies, i = 0..STEPS), updates[i] and values[i] (the `value=`) of step
    i + 1."""

    step: Any
    params: list
    states: list
    updates: list
    values: list

    def cache_size(self) -> int:
        return self.step.__wrapped__._cache_size()

    def resumed(self, state: Any) -> Any:
        """`state` (of the case's optimizer) as the recording step's state."""
        return state, device(self.updates[0])

    def run(self, p: Any, s: Any, grads: Any, value: Any) -> tuple[Any, Any]:
        """One step of the compiled step from `(params, state of the case's optimizer)`."""
        p, (s, _) = self.step(p, self.resumed(s), grads, value=value)
        return p, s


@functools.cache
def trajectory(name: str) -> Trajectory:
    tx = recording(BY_NAME[name].make())
    params0, grads = canonical()
    step = gradtx.jit_step(tx)
    p, s = device(params0), tx.init(device(params0))
    params, states, updates, values = [params0], [host(s[0])], [], []
    for g in grads:
        value = host_loss(params[-1])
        p, s = step(p, s, device(g), value=value)
        values.append(value)
        params.append(host(p))
        states.append(host(s[0]))
        updates.append(host(s[1]))
    return Trajectory(step, params, states, updates, values)


@functools.cache
def injected(name: str) -> tuple[list, Any]:
    """The params after each of the trajectory's steps and the final state (host copies), with
    the hyperparameters injected."""
    case = BY_NAME[name]
    tx = gradtx.inject_hyperparams(case.factory)(**case.kwargs)
    params0, grads = canonical()
    ref = trajectory(name)
    step = gradtx.jit_step(tx, donate=False)
    p, s = device(params0), tx.init(device(params0))
    out = [params0]
    for g, value in zip(grads, ref.values, strict=True):
        p, s = step(p, s, device(g), value=value)
        out.append(host(p))
    return out, host(s)


def quadratic_problem() -> tuple[Any, Any]:
    params = mixed_params(seed=3)
    rng = np.random.default_rng(4)
    curv = jax.tree.map(lambda x: jnp.asarray(rng.uniform(0.5, 2.0, np.shape(x)), x.dtype), params)
    target = jax.tree.map(lambda x: jnp.asarray(rng.normal(size=np.shape(x)), x.dtype), params)

    def loss(p):
        terms = jax.tree.map(lambda x, a, b: 0.5 * jnp.sum(a * (x - b) ** 2), p, curv, target)
        return sum(jax.tree.leaves(terms))

    return params, loss


@functools.cache
def _quadratic_value_and_grad() -> tuple[Any, Any]:
    """The quadratic's params (host copies) and its loss and gradient, jitted: one program for
    the whole table (`compile_counter.TABLE_WIDE`)."""
    params, loss = quadratic_problem()

    def table_wide_quadratic(p: Any) -> tuple[jax.Array, Any]:  # named for the compile counter
        return jax.value_and_grad(loss)(p)

    return host(params), jax.jit(table_wide_quadratic)


def _quadratic_by_the_trajectory_step(case: OptCase) -> tuple[float, float]:
    """The quadratic's initial and final loss after `quadratic_steps` steps of the trajectory's
    compiled `jit_step`, `value=` the loss each step (a host float32, as in the trajectory, so the
    step's cache is hit)."""
    params0, value_and_grad = _quadratic_value_and_grad()
    step = trajectory(case.name).step
    p = device(params0)
    s = recording(case.make()).init(p)
    value, grads = value_and_grad(p)
    start = float(value)
    for _ in range(case.quadratic_steps):
        p, s = step(p, s, grads, value=np.float32(value))
        value, grads = value_and_grad(p)
    return start, float(value)


def rosenbrock(p: Any) -> jax.Array:
    x, y = p["xy"][0], p["xy"][1]
    return (1.0 - x) ** 2 + 100.0 * (y - x**2) ** 2


def _minimize(
    tx: gradtx.GradientTransformation, loss: Any, params: Any, steps: jax.Array
) -> jax.Array:
    """`steps` steps in one fori_loop (traced inside the caller's jit); `value=loss` each step."""
    state = tx.init(params)

    def body(_, carry):
        p, s = carry
        value, grads = jax.value_and_grad(loss)(p)
        updates, s = tx.update(grads, s, p, value=value)
        return gradtx.apply_updates(p, updates), s

    p, _ = jax.lax.fori_loop(0, steps, body, (params, state))
    return loss(p)


LOW_PRECISION = ("bfloat16", "float16")


@dataclass
class DtypeRun:
    """`DTYPE_STEPS` steps on `mixed_params(dtype=...)`: the initial state, then per step the
    updates, state and params (host copies); or the error tracing them raised."""

    init_state: Any = None
    updates: list | None = None
    states: list | None = None
    params: list | None = None
    error: BaseException | None = None


def _dtype_start(dtype: str) -> tuple[Any, list]:
    """The low-precision run's params and its `DTYPE_STEPS` gradients."""
    params = mixed_params(dtype=jnp.dtype(dtype))
    return params, grad_sequence(params, DTYPE_STEPS, scale=0.1)


def _dtype_step(tx: gradtx.GradientTransformation, dtype: str, carry: Any, g: Any) -> Any:
    """One step of a low-precision run (traced inside the caller's jit): params, state, updates."""
    p, s = carry
    u, s = tx.update(g, s, p, value=jnp.asarray(1.0, dtype))
    return gradtx.apply_updates(p, u), s, u


@functools.cache
def numerics(name: str) -> dict[str, Any]:
    """The quadratic's initial and final loss, then one compiled program per case: the
    Rosenbrock's final loss (if the case runs it) and, for a low-precision case, one bf16 and
    one f16 step, called `DTYPE_STEPS` times (the first call runs the Rosenbrock's steps, the
    others none). A step called per step compiles about a third faster than the steps in a
    scan, whose stacked outputs are fusions of their own."""
    case = BY_NAME[name]
    rparams = {"xy": jnp.array([-1.0, 1.0], jnp.float32)}
    dtypes: dict[str, DtypeRun] = {}
    starts = {d: _dtype_start(d) for d in (LOW_PRECISION if case.low_precision else ())}
    txs: dict[str, gradtx.GradientTransformation] = {}
    carries: dict[str, Any] = {}
    for dtype, (params, grads) in starts.items():
        try:  # a failure here is reported by that dtype's test; the program runs the rest
            tx = case.make()
            carry = (params, tx.init(params))
            jax.eval_shape(functools.partial(_dtype_step, tx, dtype), carry, grads[0])
        except Exception as e:
            dtypes[dtype] = DtypeRun(error=e)
            continue
        txs[dtype], carries[dtype] = tx, carry

    @jax.jit
    def go(rparams, rosenbrock_steps, carries, grads):
        out: dict[str, Any] = {}
        if case.rosenbrock_tol is not None:
            out["rosenbrock"] = _minimize(
                case.make_rosenbrock(), rosenbrock, rparams, rosenbrock_steps
            )
        for dtype, carry in carries.items():
            out[dtype] = _dtype_step(txs[dtype], dtype, carry, grads[dtype])
        return out

    result: dict[str, Any] = {}
    runs = {d: DtypeRun(host(c[1]), [], [], []) for d, c in carries.items()}
    if case.rosenbrock_tol is not None or carries:
        for i in range(DTYPE_STEPS if carries else 1):
            steps = np.int32(case.rosenbrock_steps if i == 0 else 0)
            out = go(rparams, steps, carries, {d: starts[d][1][i] for d in carries})
            if i == 0 and "rosenbrock" in out:
                result["rosenbrock"] = float(out["rosenbrock"])
            for dtype, run in runs.items():
                p, s, u = out[dtype]
                carries[dtype] = (p, s)
                run.params.append(host(p))
                run.states.append(host(s))
                run.updates.append(host(u))
    dtypes.update(runs)
    result["quadratic_start"], result["quadratic"] = _quadratic_by_the_trajectory_step(case)
    result["dtypes"] = dtypes
    return result
