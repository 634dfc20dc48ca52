"""diloco: data-parallel SGD recovered exactly (H = 1) over 8 devices, no collective between
synchronisations and 1/F of the bytes per streaming step (read from the compiled HLO), DiLoCo and
Streaming DiLoCo (inner AdamW, outer Nesterov) against a NumPy transcription, checkpoints and
restored counters, construction errors."""

from __future__ import annotations

import functools
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

import gradtx
from benchmarks.comm import _computations, _reachable  # the HLO reader of `--comm`
from gradtx._base._checks import HyperparameterError
from gradtx.wrappers._diloco import DiLoCoState, _fragments

AXIS = "replica"
N = 8  # replicas: the 8 host devices of tests/conftest.py


def _mesh():
    return jax.sharding.Mesh(np.array(jax.devices()[:N]), (AXIS,))


def _sharded_step(tx):
    """One step of `tx` per replica under `shard_map` (params and state with a leading replica
    axis, each device holding its replica's copy): (grads, state, params) -> (params, state)."""

    def step(grads, state, params):
        grads, state, params = jax.tree.map(lambda x: x[0], (grads, state, params))
        updates, state = tx.update(grads, state, params)
        out = gradtx.apply_updates(params, updates), state
        return jax.tree.map(lambda x: x[None], out)

    return jax.jit(jax.shard_map(step, mesh=_mesh(), in_specs=P(AXIS), out_specs=P(AXIS)))


def _replicated(params, n=N):
    """`params` with a leading replica axis of `n` copies, broadcast in NumPy and put on the
    device (an eager broadcast compiles one program per shape)."""
    return jax.tree.map(lambda x: jax.device_put(np.broadcast_to(x, (n, *np.shape(x)))), params)


@functools.cache
def _init_program(tx):
    return jax.jit(jax.vmap(tx.init))


def _vmapped_init(tx, params):
    """`tx.init` per replica, as one compiled program (one per `tx`)."""
    return _init_program(tx)(params)


def _first(x):
    """Replica 0's value of `x`, read in NumPy."""
    return np.asarray(x)[0]


# -- (a) H = 1, SGD inside, outer SGD(1): data-parallel SGD ----------------------------------------


def test_h1_equals_data_parallel_sgd_over_8_devices():
    lr, steps = 0.1, 10
    rng = np.random.default_rng(0)
    p0 = {
        "a": rng.normal(size=(4, 3)).astype(np.float32),
        "b": rng.normal(size=5).astype(np.float32),
    }
    grads = {k: rng.normal(size=(N, steps, *v.shape)).astype(np.float32) for k, v in p0.items()}
    tx = gradtx.diloco(gradtx.sgd(lr), gradtx.sgd(1.0), sync_every=1, axis_name=AXIS)

    def run(grads, state, params):  # per replica: `steps` steps, the params after each
        grads, state, params = jax.tree.map(lambda x: x[0], (grads, state, params))

        def body(carry, g):
            params, state = carry
            updates, state = tx.update(g, state, params)
            params = gradtx.apply_updates(params, updates)
            return (params, state), params

        _, trajectory = jax.lax.scan(body, (params, state), jax.tree.map(lambda x: x, grads))
        return jax.tree.map(lambda x: x[None], trajectory)

    params = _replicated(p0)
    state = _vmapped_init(tx, params)
    run = jax.jit(jax.shard_map(run, mesh=_mesh(), in_specs=P(AXIS), out_specs=P(AXIS)))
    trajectory = jax.tree.map(np.asarray, run(grads, state, params))

    expected = {k: v.astype(np.float64) for k, v in p0.items()}
    for t in range(steps):
        for k in p0:
            expected[k] = expected[k] - lr * grads[k][:, t].astype(np.float64).mean(0)
            got = np.asarray(trajectory[k][:, t])  # every replica
            np.testing.assert_allclose(got, np.broadcast_to(expected[k], got.shape), atol=1e-6)


# -- (b) the compiled step: collectives only in the synchronising branches -------------------------

_ITEMSIZE = {"f64": 8, "f32": 4, "bf16": 2, "f16": 2, "s32": 4, "u32": 4, "s8": 1, "pred": 1}


def _all_reduce_bytes(body: str) -> int:
    """The bytes of the results of the all-reduces written in `body` (not in its callees)."""
    total = 0
    for line in body.splitlines():
        m = re.search(r"= (.*?) all-reduce(-start)?\(", line)
        if m:
            for dtype, dims in re.findall(r"(\w+)\[([\d,]*)\]", m.group(1)):
                total += _ITEMSIZE[dtype] * int(np.prod([int(d) for d in dims.split(",") if d]))
    return total


def _branch_bytes(hlo: str) -> list[int]:
    """The all-reduce bytes of each branch of the step's one conditional (in index order),
    after checking that no all-reduce runs outside it."""
    entry, comps = _computations(hlo)
    conds = [
        line for body in comps.values() for line in body.splitlines() if " conditional(" in line
    ]
    assert len(conds) == 1, conds
    branches = re.search(r"branch_computations=\{([^}]*)\}", conds[0]).group(1)
    names = [b.strip().lstrip("%") for b in branches.split(",")]
    inside = set().union(*(_reachable(comps, b) for b in names))
    outside = _reachable(comps, entry) - inside
    assert sum(_all_reduce_bytes(comps[c]) for c in outside) == 0
    return [sum(_all_reduce_bytes(comps[c]) for c in _reachable(comps, b)) for b in names]


def _equal_leaves():
    # 8 leaves of 16 floats
    return {f"w{i}": jax.device_put(np.full((N, 16), 1.0 + i, np.float32)) for i in range(8)}


def test_no_collective_between_syncs_and_streaming_bytes():
    params = _equal_leaves()
    scale = np.arange(1.0, N + 1, dtype=np.float32)[:, None]
    grads = jax.tree.map(lambda p: jax.device_put(np.asarray(p) * scale), params)
    full = 8 * 16 * 4  # every leaf in float32

    tx = gradtx.diloco(gradtx.adamw(1e-2), sync_every=5, axis_name=AXIS)
    state = _vmapped_init(tx, params)
    compiled = _sharded_step(tx).lower(grads, state, params).compile()
    assert _branch_bytes(compiled.as_text()) == [0, full]  # no sync, sync
    sent = []
    p = params
    for _ in range(10):
        p, state = compiled(grads, state, p)
        sent.append(float(_first(state.bytes_sent)))
        assert np.all(np.asarray(state.bytes_sent) == sent[-1])
    assert sent == [0, 0, 0, 0, full] * 2  # the accounting says what the HLO moves
    assert float(_first(state.total_bytes_sent)) == 2 * full
    spread = jax.tree.map(lambda x: float(np.ptp(np.asarray(x), axis=0).max()), p)
    assert max(spread.values()) == 0.0  # the replicas agree after a sync

    fragments = 4
    streaming = gradtx.diloco(gradtx.adamw(1e-2), sync_every=8, axis_name=AXIS, fragments=fragments)
    state = _vmapped_init(streaming, params)
    step = _sharded_step(streaming)
    per_branch = _branch_bytes(step.lower(grads, state, params).compile().as_text())
    assert per_branch[0] == 0 and len(per_branch) == fragments + 1
    assert max(per_branch) <= full / fragments and sum(per_branch) == full
    sent = []
    for _ in range(8):
        params, state = step(grads, state, params)
        sent.append(float(_first(state.bytes_sent)))
    assert sent == [0, full / 4] * 4  # offsets 0, 2, 4, 6 within 8: steps 8, 2, 4, 6

    # bf16 pseudo-gradients: the all-reduce is in bf16 (XLA:CPU widens it when compiling, as it
    # cannot reduce bf16; GPU and TPU keep it), half the bytes again
    bf16 = gradtx.diloco(
        gradtx.adamw(1e-2),
        sync_every=8,
        axis_name=AXIS,
        fragments=fragments,
        pseudo_gradient_dtype=jnp.bfloat16,
    )
    state = _vmapped_init(bf16, params)
    hlo = _sharded_step(bf16).lower(grads, state, params).as_text(dialect="hlo")
    reduced = re.findall(r"= (\S+) all-reduce\(", hlo)
    assert len(reduced) == 8 and all(r.startswith("bf16[") for r in reduced), reduced
    assert _branch_bytes(hlo) == [0] + [full // 8] * fragments


@pytest.mark.parametrize(
    "spec",
    [
        gradtx.quantized(bits=4),
        gradtx.quantized(block_size=128, mapping="sqrt"),
        gradtx.quantized(block_size=128),
    ],
    ids=["4-bit", "8-bit-sqrt", "8-bit"],
)
def test_quantized_pseudo_gradients(spec):
    """`pseudo_gradient_dtype=quantized(...)`: the replicas agree, the mean is within the two
    roundings' bounds, the codes travel as bytes (all-to-all, all-gather), a NaN stays NaN and
    `bytes_sent` counts codes and scales."""
    from gradtx.state import _quantize

    rng = np.random.default_rng(3)
    p0 = {"a": rng.normal(size=(64, 128)).astype(np.float32), "b": np.ones(5, np.float32)}
    grads = {k: rng.normal(size=(N, *v.shape)).astype(np.float32) for k, v in p0.items()}
    grads["a"][:, 7] *= 100.0  # one column of outliers: blocks of very different scales
    lr = 0.1
    tx = gradtx.diloco(
        gradtx.sgd(lr), gradtx.sgd(1.0), sync_every=1, axis_name=AXIS, pseudo_gradient_dtype=spec
    )
    params = _replicated(p0)
    state = _vmapped_init(tx, params)
    step = _sharded_step(tx)
    hlo = step.lower(grads, state, params).as_text(dialect="hlo")
    moved = re.findall(r"= (\S+) (all-reduce|all-to-all|all-gather)\(", hlo)
    code = "u8" if spec.bits == 4 else "s8"
    assert {(t.split("[")[0], op) for t, op in moved} == {
        ("f32", "all-reduce"),  # b, below min_size: float32
        (code, "all-to-all"),
        ("f32", "all-to-all"),  # the block scales
        (code, "all-gather"),
        ("f32", "all-gather"),
    }, moved
    assert [t for t, op in moved if op == "all-reduce"] == ["f32[5]{0}"]
    new, state = step(grads, state, params)

    got = np.asarray(new["a"])
    assert np.all(got == got[0])  # every replica lands on the same params
    deltas = lr * grads["a"].reshape(N, -1)
    exact = deltas.mean(0)
    codec, block = spec.codec(True), spec.block_size

    @jax.jit  # one program for every call (the deltas and their mean share a shape)
    def _bound(x):
        q = _quantize.encode(x, block_size=block, signed=True, codec=codec)
        return _quantize.error_bound(q)

    bound = lambda x: np.asarray(_bound(x))

    first = np.mean([bound(d) for d in deltas], axis=0)  # each replica's rounding, averaged
    second = bound(exact)  # the mean's own rounding (its scales move by at most `first`)
    err = np.abs((p0["a"].reshape(-1) - got[0].reshape(-1)) - exact)
    assert np.all(err <= 1.1 * (first + second) + 1e-7)
    assert err.max() > 0  # it was rounded
    np.testing.assert_allclose(_first(new["b"]), 1.0 - lr * grads["b"].mean(0), atol=1e-6)
    # codes and float32 scales: 8 shares of 1024 values out, and this replica's share back
    share = 1024 * spec.bits // 8 + (1024 // block) * 4
    assert float(_first(state.bytes_sent)) == 9 * share + 5 * 4

    grads["a"][3, 2, 9] = np.nan  # one replica's pseudo-gradient holds a NaN
    new, _ = step(grads, _vmapped_init(tx, params), params)
    got = np.asarray(new["a"])
    assert np.isnan(got[:, 2, 9]).all()  # visible on every replica, not averaged to a number
    assert np.isfinite(got[:, 40:]).all()  # blocks without the NaN are untouched


def test_optax_optimizers_and_replicated_outer_state_under_shard_map():
    """Optax inner and outer; the anchor, the outer state and the counters replicated (`P()`:
    invariant across replicas), the inner state per replica, through a `lax.scan` carry."""
    optax = pytest.importorskip("optax")
    p0 = {"a": np.ones((4, 3), np.float32), "b": np.arange(5.0, dtype=np.float32)}  # [a], [b]
    outer = optax.sgd(0.7, momentum=0.9, nesterov=True)
    tx = gradtx.diloco(optax.adamw(1e-2), outer, sync_every=3, axis_name=AXIS, fragments=2)
    state = jax.jit(tx.init)(p0)
    state = state._replace(inner_state=_replicated(state.inner_state))
    specs = DiLoCoState(P(AXIS), P(), P(), P(), P(), P())
    params = _replicated(p0)
    # gradients of both signs: the replicas' Adam steps differ
    shift = np.arange(N, dtype=np.float32) - 3.5
    grads = {k: v + shift.reshape((N,) + (1,) * v.ndim) for k, v in p0.items()}
    grads = jax.device_put(grads)

    def run(grads, state, params):
        grads, params = jax.tree.map(lambda x: x[0], (grads, params))
        state = state._replace(inner_state=jax.tree.map(lambda x: x[0], state.inner_state))

        def body(carry, _):
            params, state = carry
            updates, state = tx.update(grads, state, params)
            return (optax.apply_updates(params, updates), state), None

        (params, state), _ = jax.lax.scan(body, (params, state), None, length=6)
        state = state._replace(inner_state=jax.tree.map(lambda x: x[None], state.inner_state))
        return jax.tree.map(lambda x: x[None], params), state

    run = jax.shard_map(
        run, mesh=_mesh(), in_specs=(P(AXIS), specs, P(AXIS)), out_specs=(P(AXIS), specs)
    )
    params, state = jax.jit(run)(grads, state, params)
    # a synchronised at steps 3 and 6 (offset 0), b at 1 and 4 (offset 3 // 2), then local
    assert float(np.ptp(np.asarray(params["a"]), axis=0).max()) == 0.0
    assert float(np.ptp(np.asarray(params["b"]), axis=0).max()) > 0.0
    np.testing.assert_array_equal(state.anchor["a"], _first(params["a"]))
    assert int(state.count) == 6 and float(state.total_bytes_sent) == 2 * (12 + 5) * 4


# -- (c) against a NumPy transcription (inner AdamW, outer Nesterov) -------------------------------

LR, B1, B2, EPS, WD = 0.05, 0.9, 0.999, 1e-8, 0.01
OUTER_LR, OUTER_MU = 0.7, 0.9


def _problem(n):
    """Per replica i a quadratic: g_i(p) = a_i (p - c_i) + noise_{t, i}."""
    rng = np.random.default_rng(1)
    shapes = {"a": (3, 2), "b": (4,), "c": (2,)}  # leaf sizes 6, 4, 2
    p0 = {k: rng.normal(size=s).astype(np.float32) for k, s in shapes.items()}
    scale = {k: rng.uniform(0.5, 2.0, size=(n, *s)).astype(np.float32) for k, s in shapes.items()}
    centre = {k: rng.normal(size=(n, *s)).astype(np.float32) for k, s in shapes.items()}
    return p0, scale, centre


def _numpy_diloco(p0, scale, centre, noise, steps, period, layout):
    """DiLoCo as the papers write it, replica by replica, in float64: `layout` lists each
    fragment's leaf names; fragment f synchronises on the steps n with n % period == f *
    period // len(layout). The params of every replica after every step."""
    n = next(iter(scale.values())).shape[0]
    names = list(p0)
    params = [{k: p0[k].astype(np.float64) for k in names} for _ in range(n)]
    m = [{k: np.zeros_like(p0[k], np.float64) for k in names} for _ in range(n)]
    v = [{k: np.zeros_like(p0[k], np.float64) for k in names} for _ in range(n)]
    anchor = {k: p0[k].astype(np.float64) for k in names}
    outer_m = {k: np.zeros_like(p0[k], np.float64) for k in names}
    offsets = [f * period // len(layout) for f in range(len(layout))]
    out = []
    for t in range(1, steps + 1):
        for i in range(n):
            for k in names:
                g = scale[k][i] * (params[i][k] - centre[k][i]) + noise[k][t - 1, i]
                m[i][k] = B1 * m[i][k] + (1 - B1) * g
                v[i][k] = B2 * v[i][k] + (1 - B2) * g * g
                m_hat, v_hat = m[i][k] / (1 - B1**t), v[i][k] / (1 - B2**t)
                u = -LR * (m_hat / (np.sqrt(v_hat) + EPS) + WD * params[i][k])
                params[i][k] = params[i][k] + u
        for leaves, offset in zip(layout, offsets, strict=True):
            if t % period != offset:
                continue
            for k in leaves:
                delta = np.mean([anchor[k] - params[i][k] for i in range(n)], axis=0)
                outer_m[k] = delta + OUTER_MU * outer_m[k]
                anchor[k] = anchor[k] - OUTER_LR * (delta + OUTER_MU * outer_m[k])
                for i in range(n):
                    params[i][k] = anchor[k].copy()
        out.append({k: np.stack([params[i][k] for i in range(n)]) for k in names})
    return out


@pytest.mark.parametrize(
    ("fragments", "layout"),
    [(1, [["a", "b", "c"]]), (2, [["a"], ["b", "c"]])],
    ids=["diloco", "streaming"],
)
def test_matches_numpy_transcription(fragments, layout):
    n, period, steps = 4, 4, 12  # 3 periods
    p0, scale, centre = _problem(n)
    rng = np.random.default_rng(2)
    noise = {
        k: 0.1 * rng.normal(size=(steps, n, *v.shape)).astype(np.float32) for k, v in p0.items()
    }
    inner = gradtx.adamw(LR, B1, B2, EPS, weight_decay=WD)
    tx = gradtx.diloco(inner, sync_every=period, axis_name=AXIS, fragments=fragments)

    def run(params, state, scale, centre, noise):  # one replica (vmapped), all steps
        def body(carry, e):
            params, state = carry
            grads = jax.tree.map(lambda p, a, c, e: a * (p - c) + e, params, scale, centre, e)
            updates, state = tx.update(grads, state, params)
            params = gradtx.apply_updates(params, updates)
            return (params, state), params

        (_, state), trajectory = jax.lax.scan(body, (params, state), noise)
        return trajectory, state

    params = _replicated(p0, n)
    state = _vmapped_init(tx, params)
    noise_by_replica = jax.tree.map(lambda x: np.moveaxis(x, 1, 0), noise)
    run = jax.jit(jax.vmap(run, axis_name=AXIS))
    trajectory, state = run(params, state, scale, centre, noise_by_replica)
    trajectory = jax.tree.map(np.asarray, trajectory)
    expected = _numpy_diloco(p0, scale, centre, noise, steps, period, layout)
    # float32 against float64: the inner AdamW's rounding grows to about 7e-6 in 12 steps; a
    # wrong outer step, offset or fragment is off by 1e-2 or more
    for t in range(steps):
        for k in p0:
            np.testing.assert_allclose(
                np.asarray(trajectory[k][:, t]), expected[t][k], rtol=1e-5, atol=1e-5
            )
    assert np.all(np.asarray(state.count) == steps)
    sizes = {"a": 6, "b": 4, "c": 2}
    per_sync = [4.0 * sum(sizes[k] for k in leaves) for leaves in layout]
    assert float(_first(state.total_bytes_sent)) == 3 * sum(per_sync)


def test_fragments_balanced_runs_of_leaves():
    assert _fragments([6, 4, 2], 2) == [[0], [1, 2]]
    assert _fragments([1, 1, 1, 1, 100], 3) == [[0, 1, 2], [3], [4]]
    assert _fragments([5, 5, 5, 5], 4) == [[0], [1], [2], [3]]
    assert _fragments([0, 0, 3], 2) == [[0, 1], [2]]


# -- (d) checkpoints, restored counters ------------------------------------------------------------


def _vmapped_step(tx):
    def step(grads, state, params):
        updates, state = tx.update(grads, state, params)
        return gradtx.apply_updates(params, updates), state

    return jax.jit(jax.vmap(step, axis_name=AXIS))


def test_checkpoint_round_trip_and_restore_under_smaller_period(tmp_path):
    n = 4
    p0 = {"w": np.ones(3, np.float32), "b": np.zeros(2, np.float32)}
    params = _replicated(p0, n)
    shift = np.arange(1.0, n + 1, dtype=np.float32)[:, None]
    grads = jax.tree.map(lambda p: jax.device_put(p + shift), p0)
    long = gradtx.diloco(gradtx.sgd(0.1), sync_every=10, axis_name=AXIS)
    state = _vmapped_init(long, params)
    step = _vmapped_step(long)
    for _ in range(7):
        params, state = step(grads, state, params)
    assert float(_first(state.total_bytes_sent)) == 0.0

    path = gradtx.save(tmp_path / "diloco.safetensors", state)
    short = gradtx.diloco(gradtx.sgd(0.1), sync_every=4, axis_name=AXIS)
    restored = gradtx.load(path, jax.eval_shape(jax.vmap(short.init), params))
    assert isinstance(restored, DiLoCoState)
    jax.tree.map(np.testing.assert_array_equal, restored, state)

    # step 8 is a multiple of the new period: it synchronises at once, and again at step 12
    step = _vmapped_step(short)
    sent = []
    for _ in range(5):
        params, restored = step(grads, restored, params)
        sent.append(float(_first(restored.bytes_sent)))
    assert sent == [20.0, 0.0, 0.0, 0.0, 20.0]
    assert np.all(np.asarray(restored.count) == 12)

    # a saturated counter neither wraps nor stops synchronising: 2**31 - 1 = 3 (mod 4), so the
    # next step is a multiple of 4 and every 4th one after it
    top = np.iinfo(np.int32).max
    saturated = restored._replace(count=jax.device_put(np.full((n,), top, np.int32)))
    params, saturated = step(grads, saturated, params)
    assert np.all(np.asarray(saturated.count) == top)
    assert float(_first(saturated.bytes_sent)) == 20.0


def test_migrate_a_plain_run_into_diloco_and_back():
    params = jax.device_put({"w": np.ones(3, np.float32), "b": np.zeros(2, np.float32)})
    plain = gradtx.adamw(1e-2)

    @jax.jit  # one program for the 3 steps
    def step(state, params):
        updates, state = plain.update(jax.tree.map(jnp.ones_like, params), state, params)
        return state, gradtx.apply_updates(params, updates)

    state = jax.jit(plain.init)(params)
    for _ in range(3):
        state, params = step(state, params)
    tx = gradtx.diloco(gradtx.adamw(1e-2), sync_every=4, axis_name=AXIS)
    moved = gradtx.migrate(state, tx, params, old_tx=plain).state
    jax.tree.map(np.testing.assert_array_equal, moved.inner_state, state)  # moments carried
    jax.tree.map(np.testing.assert_array_equal, moved.anchor, params)  # anchored here
    assert int(moved.count) == 3  # the run's step goes on
    back = gradtx.migrate(moved, plain, params, old_tx=tx).state
    jax.tree.map(np.testing.assert_array_equal, back, state)


def test_metrics_report_bytes_and_both_optimizers():
    tx = gradtx.diloco(gradtx.adamw(1e-3), sync_every=4, axis_name=AXIS)
    state = tx.init({"w": jnp.ones(3)})
    report = gradtx.metrics(tx, state)
    assert float(report["bytes_sent"]) == 0.0 and float(report["total_bytes_sent"]) == 0.0
    assert float(report["outer_state/0/1/learning_rate"]) == pytest.approx(0.7)
    assert any(k.startswith("inner_state/") and k.endswith("learning_rate") for k in report)


# -- (e) errors ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"sync_every": 0}, "sync_every"),
        ({"sync_every": 2.5}, "sync_every"),
        ({"sync_every": jnp.int32(4)}, "sync_every"),
        ({"sync_every": 4, "fragments": 0}, "fragments"),
        ({"sync_every": 4, "fragments": 5}, "fragments"),
        ({"sync_every": 4, "fragments": 2.0}, "fragments"),
        ({"sync_every": 4, "axis_name": None}, "axis_name"),
        ({"sync_every": 4, "axis_name": ("replica", 3)}, "axis_name"),
        ({"sync_every": 4, "pseudo_gradient_dtype": jnp.int8}, "pseudo_gradient_dtype"),
        ({"sync_every": 4, "pseudo_gradient_dtype": "float8"}, "pseudo_gradient_dtype"),
    ],
)
def test_construction_errors_name_the_argument(kwargs, name):
    kwargs = {"axis_name": AXIS, **kwargs}
    with pytest.raises(HyperparameterError, match=f"diloco: {name}") as info:
        gradtx.diloco(gradtx.sgd(0.1), **kwargs)
    assert info.value.name == name


def test_usage_errors():
    with pytest.raises(TypeError, match="diloco: inner must be a GradientTransformation"):
        gradtx.diloco(gradtx.sgd, sync_every=4, axis_name=AXIS)
    with pytest.raises(TypeError, match="diloco: outer must be a GradientTransformation"):
        gradtx.diloco(gradtx.sgd(0.1), 0.7, sync_every=4, axis_name=AXIS)
    with pytest.raises(ValueError, match="fragments=3 but the params have only 2 leaves"):
        gradtx.diloco(gradtx.sgd(0.1), sync_every=4, axis_name=AXIS, fragments=3).init(
            {"a": jnp.ones(2), "b": jnp.ones(2)}
        )
    tx = gradtx.diloco(gradtx.sgd(0.1), sync_every=4, axis_name=AXIS)
    params = {"w": jnp.ones(2)}
    with pytest.raises(ValueError, match="diloco needs the current parameters"):
        tx.update(params, tx.init(params))


def test_init_state_shares_no_buffer_with_params_or_itself():
    """Every state leaf its own buffer (a donated step cannot take one buffer twice)."""
    tx = gradtx.diloco(gradtx.sgd(0.1, momentum=0.9), sync_every=2, axis_name=AXIS, fragments=2)
    params = {"a": jnp.ones(3), "b": jnp.zeros(2)}
    state = tx.init(params)
    ids = [id(x) for x in jax.tree.leaves(state)]
    assert len(set(ids)) == len(ids)
    assert not set(ids) & {id(x) for x in jax.tree.leaves(params)}
