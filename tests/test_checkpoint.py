"""Checkpoints: state_dict / load_state_dict, save / load (format, atomicity, errors), migration,
inspect_state, and round trips through orbax-checkpoint and flax.serialization."""

from __future__ import annotations

import json
import os
import pathlib
import re
import struct
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradtx
from gradtx.checkpoint import _io as _checkpoint_io

from .helpers import assert_trees_bitwise_equal, grad_sequence, mixed_params

pytestmark = pytest.mark.across_versions  # the version lanes of `make test` run this file

# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------


def _trained(tx: gradtx.GradientTransformation, params: Any, steps: int = 3) -> Any:
    state = tx.init(params)
    for g in grad_sequence(params, steps, scale=0.1):
        _, state = tx.update(g, state, params, value=jnp.float32(1.0))
    return state


def _adam_state(seed: int = 0) -> tuple[gradtx.GradientTransformation, Any, Any]:
    tx = gradtx.adam(0.01)
    params = mixed_params(seed)
    return tx, params, _trained(tx, params)


def _files(folder) -> list[str]:
    return sorted(os.listdir(folder))


# --------------------------------------------------------------------------------------------
# state_dict / load_state_dict
# --------------------------------------------------------------------------------------------


def test_state_dict_keys_name_roles_not_positions():
    params = {"encoder": {"dense": {"kernel": jnp.ones((2, 3)), "bias": jnp.ones(3)}}}
    plain = gradtx.chain(gradtx.scale_by_adam(), gradtx.scale_by_learning_rate(0.1))
    keys = list(gradtx.state_dict(plain.init(params)))
    assert keys == [
        "adam/count",
        "adam/mu/encoder/dense/bias",
        "adam/mu/encoder/dense/kernel",
        "adam/nu/encoder/dense/bias",
        "adam/nu/encoder/dense/kernel",
        "schedule/count",
    ]
    # Wrapping and adding stateless transformations changes no key.
    wrapped = gradtx.apply_if_finite(
        gradtx.chain(gradtx.clip_by_global_norm(1.0), plain), max_consecutive_errors=3
    )
    wrapped_keys = list(gradtx.state_dict(wrapped.init(params)))
    assert set(keys) < set(wrapped_keys)
    assert "apply_if_finite/notfinite_count" in wrapped_keys
    # Labels come first: named_chain names (a name equal to the kind is said once) ...
    named = gradtx.named_chain(
        ("adam", gradtx.scale_by_adam()), ("lr", gradtx.scale_by_learning_rate(0.1))
    )
    named_keys = list(gradtx.state_dict(named.init(params)))
    assert "adam/mu/encoder/dense/kernel" in named_keys and "lr/schedule/count" in named_keys
    # ... and multi_transform labels; a kind that occurs twice is numbered.
    multi = gradtx.multi_transform(
        {"a": gradtx.adam(1e-3), "s": gradtx.sgd(0.1, momentum=0.9)},
        {"encoder": {"dense": {"kernel": "a", "bias": "s"}}},
    )
    assert {"a/adam/mu/encoder/dense/kernel", "s/trace/trace/encoder/dense/bias"} <= set(
        gradtx.state_dict(multi.init(params))
    )
    twice = gradtx.chain(gradtx.scale_by_adam(), gradtx.scale_by_adam())
    assert list(gradtx.state_dict(twice.init(params)))[::5] == ["adam.0/count", "adam.1/count"]
    # keys="paths": the tree paths (the keys of earlier versions and of gradtx.save's file).
    state = named.init(params)
    d = gradtx.state_dict(state, keys="paths")
    assert list(d) == gradtx.tree.paths(state)
    assert "0/mu/encoder/dense/kernel" in gradtx.state_dict(plain.init(params), keys="paths")
    # One entry per leaf, equal to the leaf, in either form.
    short = gradtx.state_dict(state)
    for value, same, leaf in zip(d.values(), short.values(), jax.tree.leaves(state), strict=True):
        assert isinstance(value, np.ndarray)
        np.testing.assert_array_equal(value, same)
        np.testing.assert_array_equal(value, np.asarray(leaf))
    with pytest.raises(gradtx.CheckpointError, match=r"keys must be one of \('short', 'paths'\)"):
        gradtx.state_dict(state, keys="path")


def test_load_state_dict_takes_short_keys_and_the_paths_of_earlier_versions():
    tx, params, state = _adam_state()
    template = tx.init(params)
    for form in ("short", "paths"):
        d = gradtx.state_dict(state, keys=form)
        assert_trees_bitwise_equal(gradtx.load_state_dict(template, d), state)
    # A dict written before short keys existed (paths), errors named in its own form.
    old = gradtx.state_dict(state, keys="paths")
    del old["0/mu/dense/bias"]
    with pytest.raises(
        gradtx.CheckpointError, match=r"missing from the state dict \(1\): \['0/mu/dense/bias'\]"
    ):
        gradtx.load_state_dict(template, old)
    # Short keys come from the leaves' roles: the same state from another chain keeps its keys.
    assert list(gradtx.state_dict(state)) == list(
        gradtx.state_dict(gradtx.chain(gradtx.clip(1.0), tx).init(params))
    )


def test_load_state_dict_round_trips_none_leaves_and_empty_subtrees():
    tx, params, state = _adam_state()
    # mixed_params has None leaves and an empty dict: they have no entry and come back.
    assert jax.tree.structure(state) != jax.tree.structure(jax.tree.leaves(state))
    restored = gradtx.load_state_dict(tx.init(params), gradtx.state_dict(state))
    assert_trees_bitwise_equal(restored, state)
    assert restored[0].mu["none"] is None and restored[0].mu["empty"] == {}
    assert restored[0].mu["layers"][1]["frozen"] is None


def test_load_state_dict_errors_list_missing_unexpected_and_mismatched_keys():
    tx, params, state = _adam_state()
    template = tx.init(params)
    d = gradtx.state_dict(state)
    bad = dict(d)
    del bad["adam/mu/dense/bias"]
    bad["adam/mu/dense/extra"] = np.zeros(4, np.float32)
    bad["adam/nu/dense/kernel"] = np.zeros((4, 3), np.float32)  # wrong shape
    bad["adam/count"] = np.asarray(3, np.int64)  # wrong dtype
    with pytest.raises(gradtx.CheckpointError) as info:
        gradtx.load_state_dict(template, bad)
    msg = str(info.value)
    assert "missing from the state dict (1): ['adam/mu/dense/bias']" in msg
    assert "unexpected in the state dict (1): ['adam/mu/dense/extra']" in msg
    assert "adam/nu/dense/kernel: float32[3, 4] vs float32[4, 3]" in msg
    assert "adam/count: int32[] vs int64[]" in msg
    assert "first mismatch 'adam/count'" in msg
    assert isinstance(info.value, ValueError)


def test_load_state_dict_non_strict_keeps_template_values_for_missing_keys():
    tx, params, state = _adam_state()
    template = tx.init(params)
    d = {k: v for k, v in gradtx.state_dict(state).items() if not k.startswith("adam/nu/")}
    d["something/else"] = np.zeros(2)
    restored = gradtx.load_state_dict(template, d, strict=False)
    assert_trees_bitwise_equal(restored[0].mu, state[0].mu)
    assert_trees_bitwise_equal(restored[0].nu, template[0].nu)
    # Shapes are still checked.
    d["adam/mu/dense/bias"] = np.zeros(5, np.float32)
    with pytest.raises(gradtx.CheckpointError, match="adam/mu/dense/bias"):
        gradtx.load_state_dict(template, d, strict=False)


def test_load_keeps_template_placement_weak_types_and_leaf_kinds(tmp_path):
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:8]), ("d",))
    sharded = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("d"))
    state = {
        "sharded": jax.device_put(jnp.arange(16.0), sharded),
        "default": jnp.arange(3.0),  # uncommitted: a jitted step is not recompiled
        "weak": jnp.asarray(2.5),
        "numpy": np.arange(4, dtype=np.float64),
        "python": 7,
        "key": jax.random.key(3),
        "legacy_key": jax.random.PRNGKey(4),
    }
    template = jax.tree.map(lambda x: x * 0 if not isinstance(x, jax.Array) else x, state)
    template["key"] = jax.random.key(0)
    for restored in (
        gradtx.load_state_dict(template, gradtx.state_dict(state)),
        gradtx.load(gradtx.save(tmp_path / "s", state), template),
    ):
        assert_trees_bitwise_equal(restored, state)
        assert restored["sharded"].sharding == sharded
        assert not restored["default"].committed
        assert restored["weak"].weak_type
        assert isinstance(restored["numpy"], np.ndarray) and type(restored["python"]) is int


def test_load_into_abstract_template(tmp_path):
    tx, params, state = _adam_state()
    path = gradtx.save(tmp_path / "adam.safetensors", state)
    abstract = jax.eval_shape(tx.init, params)
    assert_trees_bitwise_equal(gradtx.load(path, abstract), state)


# --------------------------------------------------------------------------------------------
# The file: format, dtypes
# --------------------------------------------------------------------------------------------


def test_bf16_int32_and_other_dtypes_round_trip(tmp_path):
    tx = gradtx.adam(0.01, mu_dtype=jnp.bfloat16)
    params = mixed_params(dtype=jnp.bfloat16)
    state = _trained(tx, params)
    dtypes = {x.dtype for x in jax.tree.leaves(state)}
    assert {jnp.dtype(jnp.bfloat16), jnp.dtype(jnp.int32)} <= dtypes
    restored = gradtx.load(gradtx.save(tmp_path / "bf16", state), tx.init(params))
    assert_trees_bitwise_equal(restored, state)
    rng = np.random.default_rng(0)
    other = {
        str(np.dtype(d)): np.asarray(rng.normal(size=(2, 3)) * 10).astype(d)
        for d in (np.float16, np.float64, np.int8, np.uint8, np.int64, np.uint32, np.bool_)
    }
    other["complex64"] = (rng.normal(size=3) + 1j).astype(np.complex64)
    other["scalar_int32"] = np.asarray(-5, np.int32)
    other["zero_size"] = np.zeros((0, 4), np.float32)
    restored = gradtx.load(gradtx.save(tmp_path / "other", other), other)
    assert_trees_bitwise_equal(restored, other)


def test_file_has_the_safetensors_layout_and_no_pickle(tmp_path):
    _, _, state = _adam_state()
    path = gradtx.save(tmp_path / "adam.safetensors", state)
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    assert header.pop("__metadata__")["format"] == "gradtx.optimizer_state"
    assert list(header) == list(gradtx.state_dict(state, keys="paths"))  # the tree paths
    assert header["0/count"] == {"dtype": "I32", "shape": [], "data_offsets": [0, 4]}
    assert len(raw) == 8 + n + max(v["data_offsets"][1] for v in header.values())
    kernel = header["0/mu/dense/kernel"]
    b, e = kernel["data_offsets"]
    stored = np.frombuffer(raw[8 + n + b : 8 + n + e], np.float32).reshape(kernel["shape"])
    np.testing.assert_array_equal(stored, np.asarray(state[0].mu["dense"]["kernel"]))


def test_safetensors_reads_the_file(tmp_path):
    safetensors_numpy = pytest.importorskip("safetensors.numpy")
    _, _, state = _adam_state()
    path = gradtx.save(tmp_path / "adam.safetensors", state)
    loaded = safetensors_numpy.load_file(path)
    np.testing.assert_array_equal(loaded["0/nu/layers/0"], np.asarray(state[0].nu["layers"][0]))


# --------------------------------------------------------------------------------------------
# Atomic saves
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("fail_at", ["header", "data", "fsync", "rename"])
def test_failed_save_leaves_the_previous_checkpoint_readable(tmp_path, monkeypatch, fail_at):
    tx, params, old = _adam_state(seed=0)
    _, _, new = _adam_state(seed=1)
    path = gradtx.save(tmp_path / "ckpt", old)
    real_write = _checkpoint_io._write_all
    calls = []

    def write(fd, view):
        calls.append(len(view))
        if (fail_at == "header" and len(calls) == 1) or (fail_at == "data" and len(calls) == 4):
            real_write(fd, view[: len(view) // 2])
            raise OSError(28, "No space left on device (simulated)")
        real_write(fd, view)

    def fail(*args):
        raise OSError(5, f"simulated {fail_at} failure")

    monkeypatch.setattr(_checkpoint_io, "_write_all", write)
    if fail_at == "fsync":
        monkeypatch.setattr(_checkpoint_io.os, "fsync", fail)
    if fail_at == "rename":
        monkeypatch.setattr(_checkpoint_io.os, "replace", fail)
    with pytest.raises(OSError, match="simulated"):
        gradtx.save(path, new)
    monkeypatch.undo()
    assert_trees_bitwise_equal(gradtx.load(path, tx.init(params)), old)
    assert _files(tmp_path) == ["ckpt"]  # the temporary file is gone
    gradtx.save(path, new)
    assert_trees_bitwise_equal(gradtx.load(path, tx.init(params)), new)


def test_stale_temporaries_of_dead_processes_are_removed(tmp_path):
    _, _, state = _adam_state()
    path = str(tmp_path / "ckpt")
    stale = _checkpoint_io.temp_path(path).replace(f"-{os.getpid()}-", "-999999999-")
    live = _checkpoint_io.temp_path(path).replace(f"-{os.getpid()}-", f"-{os.getppid()}-")
    for name in (stale, live):
        with open(name, "wb") as f:
            f.write(b"partial")
    gradtx.save(path, state)
    assert _files(tmp_path) == sorted(["ckpt", os.path.basename(live)])


# --------------------------------------------------------------------------------------------
# Corrupt, truncated, foreign and mismatched files
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    tx, params, state = _adam_state()
    path = gradtx.save(tmp_path_factory.mktemp("ckpt") / "adam.safetensors", state)
    return tx.init(params), open(path, "rb").read()


def _header_size(raw: bytes) -> int:
    return 8 + struct.unpack("<Q", raw[:8])[0]


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda raw: raw[:5], "too short for a header"),
        (lambda raw: raw[: _header_size(raw) - 10], "header length field"),
        (lambda raw: raw[: _header_size(raw) + 7], "truncated"),
        (lambda raw: raw[:-1], "truncated"),
        (lambda raw: raw + b"\0", "the header describes"),
        (lambda raw: raw[:20] + b"\xff" + raw[21:], "header is not valid"),
        (lambda raw: raw[:-4] + bytes([raw[-4] ^ 1]) + raw[-3:], r"the data of '[^']+' is corrupt"),
        (lambda raw: raw[: _header_size(raw)] + b"\1" + raw[_header_size(raw) + 1 :], "0/count"),
        (lambda raw: b"\x93NUMPY" + raw[6:], "header length field"),
        (lambda raw: b"not a checkpoint at all", "header length field"),
    ],
    ids=[
        "tiny",
        "cut-in-header",
        "cut-in-data",
        "last-byte-missing",
        "extra-byte",
        "header-byte",
        "last-tensor-bit",
        "first-tensor-byte",
        "npy-magic",
        "text",
    ],
)
def test_damaged_files_give_a_clear_error_naming_the_file(saved, tmp_path, damage, message):
    template, raw = saved
    path = tmp_path / "damaged.safetensors"
    path.write_bytes(damage(raw))
    with pytest.raises(gradtx.CheckpointError, match=message) as info:
        gradtx.load(path, template)
    assert str(path) in str(info.value)


def test_files_of_other_formats_are_refused(tmp_path):
    np.save(tmp_path / "a.npy", np.zeros(3))
    np.savez(tmp_path / "b.npz", a=np.zeros(3))
    other = {
        "__metadata__": {"format": "pt"},
        "x": {"dtype": "F32", "shape": [], "data_offsets": [0, 4]},
    }
    body = json.dumps(other).encode()
    (tmp_path / "c.safetensors").write_bytes(struct.pack("<Q", len(body)) + body + b"\0" * 4)
    for name in ("a.npy", "b.npz", "c.safetensors"):
        with pytest.raises(gradtx.CheckpointError, match="not a readable gradtx checkpoint"):
            gradtx.load(tmp_path / name, {"x": jnp.zeros(())})


def test_wrong_structure_names_the_first_mismatch(saved, tmp_path):
    _, raw = saved
    path = tmp_path / "adam.safetensors"
    path.write_bytes(raw)
    params = mixed_params()
    sgd = gradtx.sgd(0.1, momentum=0.9).init(params)
    with pytest.raises(gradtx.CheckpointError) as info:
        gradtx.load(path, sgd)
    msg = str(info.value)
    assert "first mismatch '0/trace/dense/bias': in the template, not in the checkpoint" in msg
    assert "missing from the checkpoint" in msg and "'0/trace/dense/bias'" in msg
    assert "unexpected in the checkpoint" in msg and "'0/mu/dense/bias'" in msg
    assert str(path) in msg
    # Same optimizer, different parameter shapes: the mismatched shapes are listed.
    other = gradtx.adam(0.01).init(jax.tree.map(lambda x: jnp.zeros((7,)), params))
    with pytest.raises(gradtx.CheckpointError, match=r"kernel: float32\[7\] vs float32\[3, 4\]"):
        gradtx.load(path, other)
    # bf16 moments where the file has float32: a dtype mismatch, not a silent cast.
    bf16 = gradtx.adam(0.01, mu_dtype=jnp.bfloat16).init(params)
    with pytest.raises(gradtx.CheckpointError, match=r"0/mu/dense/bias: bfloat16\[4\] vs float32"):
        gradtx.load(path, bf16)


# --------------------------------------------------------------------------------------------
# Migration: hyperparameters may change, the structure may not
# --------------------------------------------------------------------------------------------


def test_loading_into_a_reconfigured_optimizer_works(tmp_path):
    params = mixed_params()
    old_tx = gradtx.adamw(1e-3, b1=0.9, weight_decay=1e-4)
    state = _trained(old_tx, params)
    path = gradtx.save(tmp_path / "adamw", state)
    new_tx = gradtx.adamw(gradtx.linear_schedule(1e-3, 0.0, 100), b1=0.8, weight_decay=0.1)
    restored = gradtx.load(path, new_tx.init(params))
    assert_trees_bitwise_equal(restored, state)
    new_tx.update(grad_sequence(params, 1)[0], restored, params)  # it runs


def test_injected_hyperparameters_are_restored_or_replaced_on_request(tmp_path):
    params = mixed_params()
    make = gradtx.inject_hyperparams(gradtx.adam)
    state = _trained(make(learning_rate=1e-3, b1=0.9), params)
    path = gradtx.save(tmp_path / "adam", state)
    template = make(learning_rate=0.5, b1=0.8).init(params)
    restored = gradtx.load(path, template)
    assert gradtx.inspect_state(restored).hyperparam("learning_rate") == np.float32(1e-3)
    # The documented recipe to keep the new configuration's values instead.
    d = {k: v for k, v in gradtx.state_dict(restored).items() if "/hyperparams/" not in f"/{k}"}
    kept = gradtx.load_state_dict(template, d, strict=False)
    assert gradtx.inspect_state(kept).hyperparam("learning_rate") == np.float32(0.5)
    assert_trees_bitwise_equal(kept.inner_state, state.inner_state)


# --------------------------------------------------------------------------------------------
# inspect_state
# --------------------------------------------------------------------------------------------


def test_inspect_state_reports_fields_step_and_current_hyperparameters():
    params = mixed_params()
    schedule = gradtx.linear_schedule(0.1, 0.0, 10)
    tx = gradtx.named_chain(
        ("clip", gradtx.clip_by_global_norm(1.0)),
        ("opt", gradtx.inject_hyperparams(gradtx.adam)(learning_rate=schedule, b1=0.9)),
    )
    steps = 4
    state = _trained(tx, params, steps)
    summary = gradtx.inspect_state(state)
    leaves = jax.tree.leaves(state)
    assert [f.path for f in summary.fields] == gradtx.tree.paths(state)
    assert [f.shape for f in summary.fields] == [x.shape for x in leaves]
    assert [f.dtype for f in summary.fields] == [x.dtype.name for x in leaves]
    assert [f.nbytes for f in summary.fields] == [x.nbytes for x in leaves]
    assert summary.total_bytes == sum(x.nbytes for x in leaves)
    assert (summary.step, summary.step_path) == (steps, "opt/count")
    # The stored value is the one used at the last step (count steps - 1).
    expected_lr = float(np.float32(schedule(steps - 1)))
    assert summary.hyperparams == {"opt/learning_rate": expected_lr, "opt/b1": np.float32(0.9)}
    assert summary.hyperparam("learning_rate") == expected_lr
    assert summary.hyperparam("learning_rate") == float(gradtx.tree.get(state, "learning_rate"))
    text = str(summary)
    assert f"step: {steps} (from 'opt/inject_hyperparams/count')" in text  # its short key
    assert f"hyperparameter opt/learning_rate = {expected_lr:.6g}" in text
    row = r"\nopt/adam/mu/dense/kernel +opt:ScaleByAdamState.mu\[dense/kernel\] +"
    assert re.search(row + r"\(3, 4\) +float32 +48\n", text)
    assert summary.fields[0].role == "opt:InjectHyperparamsState.count"
    assert [f.key for f in summary.fields] == list(gradtx.state_dict(state))
    with pytest.raises(KeyError, match="did you mean 'learning_rate'"):
        summary.hyperparam("learnig_rate")


def test_inspect_state_without_injection_abstract_and_ambiguous():
    params = mixed_params()
    tx = gradtx.adam(0.1)
    summary = gradtx.inspect_state(jax.eval_shape(tx.init, params))
    assert summary.step is None and summary.step_path == "0/count"
    leaves = jax.tree.leaves(tx.init(params))
    assert summary.total_bytes == sum(x.nbytes for x in leaves) > 2 * 4 * gradtx.tree.size(params)
    assert all(f.value is None for f in summary.fields)
    with pytest.raises(KeyError, match="inject_hyperparams"):
        summary.hyperparam("learning_rate")
    inject = gradtx.inject_hyperparams(gradtx.sgd)
    both = gradtx.chain(inject(learning_rate=0.1), inject(learning_rate=0.2))
    summary = gradtx.inspect_state(both.init(params))
    assert summary.hyperparams == {
        "0/learning_rate": np.float32(0.1),
        "1/learning_rate": np.float32(0.2),
    }
    with pytest.raises(KeyError, match="ambiguous"):
        summary.hyperparam("learning_rate")
    assert summary.hyperparam("1/learning_rate") == np.float32(0.2)
    many = gradtx.inspect_state({str(i): jnp.zeros(2) for i in range(70)})
    assert "10 more fields" in str(many) and "10 more" not in many.table(None)


# --------------------------------------------------------------------------------------------
# The ecosystem's checkpointers (optional dependencies)
# --------------------------------------------------------------------------------------------


def _wrapped_state():
    params = mixed_params()
    tx = gradtx.named_chain(
        ("clip", gradtx.clip_by_global_norm(1.0)),
        ("opt", gradtx.inject_hyperparams(gradtx.adam)(learning_rate=0.01, mu_dtype=jnp.bfloat16)),
    )
    return tx.init(params), _trained(tx, params)


def test_round_trip_through_orbax(tmp_path):
    ocp = pytest.importorskip("orbax.checkpoint")
    template, state = _wrapped_state()
    with ocp.StandardCheckpointer() as ckptr:
        ckptr.save(tmp_path / "flat", gradtx.state_dict(state))
        ckptr.wait_until_finished()
        flat = ckptr.restore(tmp_path / "flat", gradtx.state_dict(template))
    assert_trees_bitwise_equal(gradtx.load_state_dict(template, flat), state)


def test_round_trip_through_flax_serialization():
    serialization = pytest.importorskip("flax.serialization")
    template, state = _wrapped_state()
    restored = serialization.from_bytes(template, serialization.to_bytes(state))
    assert_trees_bitwise_equal(restored, state)
    flat = serialization.msgpack_restore(serialization.msgpack_serialize(gradtx.state_dict(state)))
    assert_trees_bitwise_equal(gradtx.load_state_dict(template, flat), state)


def test_checkpoint_benchmark_runs_on_a_tiny_tree(tmp_path):
    from benchmarks.checkpoint import checkpoint_markdown, throughput
    from benchmarks.workloads import TreeSpec

    result = throughput(TreeSpec("tiny", 3, (8, 8)), rounds=2, folder=str(tmp_path))
    assert result["leaves"] == 8 and result["state_bytes"] == 2 * 3 * 64 * 4 + 2 * 4
    assert all(r["median"] > 0 and r["n"] == 2 for r in result["rates_MBps"].values())
    run = {"machine": {"date": "d", "cpu": "c", "cpu_count": 1, "jax": "j", "numpy": "n"}}
    text = checkpoint_markdown({**run, "quick": True, "results": [{**result, "memory": {}}]})
    assert "| tiny |" in text and "load / numpy.load" in text


def test_inspect_state_with_the_optimizer_shows_every_schedules_current_value():
    # without the optimizer a schedule's value is not in the state (only its count); with it,
    # inspect_state holds gradtx.metrics: the value the latest update used, for a config's chain
    import yaml

    root = pathlib.Path(__file__).resolve().parent.parent
    config = yaml.safe_load((root / "examples" / "configs" / "adamw_cosine.yaml").read_text())
    tx = gradtx.from_config(config)
    params = {"dense": {"kernel": jnp.ones((2, 3)), "bias": jnp.ones(3)}}
    state = tx.init(params)
    grads = jax.tree.map(jnp.ones_like, params)
    k = int(config["accumulate"]["k"])  # micro-steps per optimizer step
    for _ in range(3 * k):
        _, state = tx.update(grads, state, params)
    alone = gradtx.inspect_state(state)
    summary = gradtx.inspect_state(state, tx)
    assert not alone.metrics and "learning_rate" in summary.metrics
    assert summary.hyperparam("learning_rate") == pytest.approx(
        float(gradtx.metrics(tx, state)["learning_rate"])
    )
    assert "learning_rate = " in summary.table()
    with pytest.raises(KeyError, match=r"inspect_state\(state, tx\)"):
        alone.hyperparam("learning_rate")
