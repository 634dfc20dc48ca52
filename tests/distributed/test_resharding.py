"""Resharding on load: a state trained on 8 host devices, saved with orbax (`save_sharded`) or to
one file (`gradtx.save`), restores onto another mesh (4 devices in-process, 16 in a subprocess)
and layout (replicated <-> ZeRO-1) with the target shardings of `abstract_state`; each device
receives only its shards, and training goes on exactly like the run that never moved.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

import gradtx

ROOT = Path(__file__).resolve().parents[2]
SHAPES = {"w": (16, 8), "b": (16,)}  # every dimension of the moments divides by 4, 8 and 16
STEPS, MORE = 3, 3  # steps before the save, steps after the restore
LAYOUTS = {"replicated": None, "zero1": "data"}  # zero_axis of each layout


def make_tx() -> gradtx.GradientTransformation:
    return gradtx.chain(gradtx.clip_by_global_norm(1.0), gradtx.adamw(0.05, weight_decay=0.01))


def init_params() -> dict:
    rng = np.random.default_rng(0)
    return {k: rng.normal(size=s).astype(np.float32) for k, s in SHAPES.items()}


def batch(i: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(100 + i)
    return rng.normal(size=(4, 16)).astype(np.float32), rng.normal(size=(4, 8)).astype(np.float32)


def loss(params, x, y):
    pred = x @ params["w"] + params["b"][:8]
    return jnp.mean((pred - y) ** 2) + 1e-2 * jnp.sum(params["b"] ** 2)


def mesh_of(n: int) -> Mesh:
    return Mesh(np.array(jax.devices()[:n]), ("data",))


@functools.cache
def step_fn(n: int, layout: str):
    """The train step, jitted once per (device count, layout); n=0: unsharded, no shardings."""
    tx = make_tx()

    def step(params, state, x, y):
        grads = jax.grad(loss)(params, x, y)
        updates, state = tx.update(grads, state, params)
        return gradtx.apply_updates(params, updates), state

    if n == 0:
        return jax.jit(step)
    mesh = mesh_of(n)
    psh = jax.tree.map(lambda _: NamedSharding(mesh, P()), SHAPES, is_leaf=_is_shape)
    ssh = gradtx.state_sharding(tx, on_mesh(init_params(), n), zero_axis=LAYOUTS[layout])
    rep = NamedSharding(mesh, P())
    return jax.jit(step, in_shardings=(psh, ssh, rep, rep), out_shardings=(psh, ssh))


def _is_shape(x) -> bool:
    return isinstance(x, tuple)


def on_mesh(params: dict, n: int) -> dict:
    """Params replicated over the first `n` devices (data parallel)."""
    return jax.device_put(params, NamedSharding(mesh_of(n), P()))


def train(params, state, n: int, layout: str, steps: range):
    step = step_fn(n, layout)
    for i in steps:
        params, state = step(params, state, *batch(i))
    return params, state


def target(n: int, layout: str):
    """The restore target on `n` devices: shapes, dtypes and shardings, nothing allocated."""
    return gradtx.abstract_state(make_tx(), on_mesh(init_params(), n), zero_axis=LAYOUTS[layout])


def save(fmt: str, directory: Path, state) -> Path:
    if fmt == "orbax":
        return Path(gradtx.save_sharded(directory / "ckpt", state))
    return Path(gradtx.save(directory / "ckpt.safetensors", state))


def restore(fmt: str, path: Path, tgt):
    return gradtx.load_sharded(path, tgt) if fmt == "orbax" else gradtx.load(path, tgt)


def check_placement(restored, tgt, n: int) -> None:
    """Every leaf carries its target sharding on the `n` devices, and each device holds only its
    shard (ZeRO-1: a 1/n slice of each moment), never the whole state."""
    devices = set(jax.devices()[:n])
    for r, t in zip(jax.tree.leaves(restored), jax.tree.leaves(tgt), strict=True):
        assert r.sharding.is_equivalent_to(t.sharding, r.ndim), (r.sharding, t.sharding)
        assert r.sharding.device_set == devices
        shard_shape = t.sharding.shard_shape(t.shape)
        assert {s.data.shape for s in r.addressable_shards} == {shard_shape}
        assert {s.device for s in r.addressable_shards} == devices


def expected_bytes(tgt) -> int:
    """Bytes per device of the target: each leaf's shard (a moment split n ways: 1/n of it)."""
    total = 0
    for t in jax.tree.leaves(tgt):
        total += int(np.prod(t.sharding.shard_shape(t.shape))) * t.dtype.itemsize
    return total


@pytest.fixture(scope="module")
def reference():
    """The run that never moved: STEPS + MORE steps on one device (params and state after the
    first STEPS and at the end)."""
    tx = make_tx()
    params = jax.tree.map(jnp.asarray, init_params())
    state = tx.init(params)
    mid = train(params, state, 0, "", range(STEPS))
    end = train(*mid, 0, "", range(STEPS, STEPS + MORE))
    return mid, end


@pytest.fixture(scope="module")
def trained_on_8():
    """STEPS steps on the 8-device mesh, per layout: (params, state)."""
    out = {}
    for layout, zero_axis in LAYOUTS.items():
        params = on_mesh(init_params(), 8)
        state = gradtx.init_sharded(make_tx(), params, zero_axis=zero_axis)
        out[layout] = train(params, state, 8, layout, range(STEPS))
    return out


PARAM_KEYS = {f"params/{k}" for k in SHAPES}


def flat(params, state) -> dict[str, np.ndarray]:
    """Params and state as one flat dict of host arrays (for the subprocess's .npz files)."""
    return {**gradtx.state_dict(state), **{f"params/{k}": np.asarray(v) for k, v in params.items()}}


def assert_close(actual, expected, tol: float, msg: str) -> None:
    for (path, a), e in zip(
        jax.tree_util.tree_flatten_with_path(actual)[0], jax.tree.leaves(expected), strict=True
    ):
        np.testing.assert_allclose(
            np.asarray(a), np.asarray(e), rtol=tol, atol=tol, err_msg=f"{msg} at {path}"
        )


def test_sharded_runs_on_8_devices_match_the_unsharded_run(trained_on_8, reference):
    mid, _ = reference
    for layout, (params, state) in trained_on_8.items():
        assert not np.allclose(params["w"], init_params()["w"])  # it trained
        assert_close(params, mid[0], 1e-6, f"{layout} params")
        assert_close(state, mid[1], 1e-6, f"{layout} state")


@pytest.mark.parametrize("fmt", ["orbax", "file"])
@pytest.mark.parametrize(
    ("src", "dst"),
    [("replicated", "zero1"), ("zero1", "replicated"), ("zero1", "zero1"), ("replicated",) * 2],
)
def test_restore_from_8_onto_4_devices(tmp_path, trained_on_8, reference, fmt, src, dst):
    if fmt == "orbax":
        pytest.importorskip("orbax.checkpoint")
    params, state = trained_on_8[src]
    path = save(fmt, tmp_path, state)
    tgt = target(4, dst)
    restored = restore(fmt, path, tgt)

    check_placement(restored, tgt, 4)
    per_device = gradtx.bytes_per_device(restored)
    assert per_device == dict.fromkeys(jax.devices()[:4], expected_bytes(tgt))
    moments = 2 * sum(int(np.prod(s)) for s in SHAPES.values()) * 4
    if dst == "zero1":  # each device holds a quarter of the moments, plus 3 int32 counters
        assert set(per_device.values()) == {moments // 4 + 3 * 4}
    else:
        assert set(per_device.values()) == {moments + 3 * 4}
    jax.tree.map(np.testing.assert_array_equal, restored, state)  # bit-exact

    # go on training on the 4 devices: the run that never moved
    params4 = on_mesh(jax.tree.map(np.asarray, params), 4)  # the (small) params: via the host
    params4, state4 = train(params4, restored, 4, dst, range(STEPS, STEPS + MORE))
    _, (params_ref, state_ref) = reference
    assert_close(params4, params_ref, 1e-6, f"{src}->{dst} params")
    assert_close(state4, state_ref, 1e-6, f"{src}->{dst} state")
    for r, t in zip(jax.tree.leaves(state4), jax.tree.leaves(tgt), strict=True):
        assert r.sharding.is_equivalent_to(t.sharding, r.ndim)  # the step kept the layout


@pytest.mark.parametrize("fmt", ["orbax", "file"])
def test_a_target_sharding_that_does_not_divide_is_refused(tmp_path, trained_on_8, fmt):
    if fmt == "orbax":
        pytest.importorskip("orbax.checkpoint")
    _, state = trained_on_8["zero1"]
    path = save(fmt, tmp_path, state)
    mesh3 = mesh_of(3)
    # hand-made: every array leaf split 3 ways over its first dimension (16 does not divide)
    bad = jax.tree.map(
        lambda t: jax.ShapeDtypeStruct(
            t.shape, t.dtype, sharding=NamedSharding(mesh3, P("data") if t.ndim else P())
        ),
        target(8, "zero1"),
    )
    # checked before anything is placed (orbax: before anything is read), naming the leaf
    # and the way out
    who = "load_sharded" if fmt == "orbax" else r"load\(.*\)"
    with pytest.raises(
        ValueError, match=who + r": the target sharding of '1/0/mu/b' .*abstract_state"
    ):
        restore(fmt, path, bad)
    # abstract_state on that mesh leaves the axis out where it does not divide: it restores
    good = target(3, "zero1")
    assert all(tuple(t.sharding.spec) == () for t in jax.tree.leaves(good))
    restored = restore(fmt, path, good)
    check_placement(restored, good, 3)
    jax.tree.map(np.testing.assert_array_equal, restored, state)


# ----------------------------------------------------------------------------------------------
# 8 -> 16: a second process with 16 host devices
# ----------------------------------------------------------------------------------------------

CHILD = """
import sys
from pathlib import Path

import jax
import numpy as np

import gradtx
from tests.distributed import test_resharding as t

assert len(jax.devices()) == 16, jax.devices()
tmp = Path(sys.argv[1])
ref = dict(np.load(tmp / "reference.npz"))
for src in t.LAYOUTS:
    saved = dict(np.load(tmp / f"saved_{src}.npz"))
    for fmt in ("orbax", "file"):
        path = tmp / fmt / src / ("ckpt" if fmt == "orbax" else "ckpt.safetensors")
        for dst in t.LAYOUTS:
            tgt = t.target(16, dst)
            restored = t.restore(fmt, path, tgt)
            t.check_placement(restored, tgt, 16)
            per_device = gradtx.bytes_per_device(restored)
            assert per_device == dict.fromkeys(jax.devices(), t.expected_bytes(tgt))
            got = gradtx.state_dict(restored)
            assert got.keys() == saved.keys() - t.PARAM_KEYS
            for k in got:
                np.testing.assert_array_equal(got[k], saved[k], err_msg=k)  # bit-exact
            params = t.on_mesh({k: saved[f"params/{k}"] for k in t.SHAPES}, 16)
            params, state = t.train(params, restored, 16, dst, range(t.STEPS, t.STEPS + t.MORE))
            got = t.flat(params, state)
            assert got.keys() == ref.keys(), (sorted(got), sorted(ref))
            for k in ref:
                np.testing.assert_allclose(
                    got[k], ref[k], rtol=1e-6, atol=1e-6, err_msg=f"{fmt} {src}->{dst} {k}"
                )
            print(f"ok {fmt} {src}->{dst}", flush=True)
"""
CHILD_TIMEOUT_S = 120


@pytest.mark.subprocess
def test_restore_from_8_onto_16_devices_in_a_subprocess(tmp_path, trained_on_8, reference):
    pytest.importorskip("orbax.checkpoint")
    for layout, (params, state) in trained_on_8.items():
        for fmt in ("orbax", "file"):
            (tmp_path / fmt / layout).mkdir(parents=True)
            save(fmt, tmp_path / fmt / layout, state)
        np.savez(tmp_path / f"saved_{layout}.npz", **flat(params, state))
    np.savez(tmp_path / "reference.npz", **flat(*reference[1]))
    env = {
        **os.environ,
        "JAX_PLATFORMS": "cpu",
        "XLA_FLAGS": "--xla_force_host_platform_device_count=16",
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    # subprocess.run kills the child when the timeout expires (and on any other exception)
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(tmp_path)],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=CHILD_TIMEOUT_S,
        check=False,
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-6000:]
    done = [line for line in out.stdout.splitlines() if line.startswith("ok ")]
    assert len(done) == 8, out.stdout  # 2 formats x 2 saved layouts x 2 target layouts
