"""Checkpoint reliability: full disks, malformed headers, key-bound checksums, files that are not
files, and bounded fuzzing of headers and bytes (docs/checkpoint.md, "Guarantees").

Each defect's test failed on the version before (its docstring says how); the others guard
what already worked."""

from __future__ import annotations

import base64
import copy
import errno
import json
import os
import re
import stat
import struct
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gradtx
from gradtx.checkpoint import _io as io

from .helpers import mixed_params

ROOT = Path(__file__).parent.parent
TIMEOUT_S = 120


def _assert_bitwise_equal(actual: Any, expected: Any) -> None:
    assert jax.tree.structure(actual) == jax.tree.structure(expected)
    for a, e in zip(jax.tree.leaves(actual), jax.tree.leaves(expected), strict=True):
        a, e = np.asarray(a), np.asarray(e)
        assert (a.dtype, a.shape) == (e.dtype, e.shape)
        assert a.tobytes() == e.tobytes()


def _adam(seed: int = 0) -> tuple[Any, Any]:
    """A template and a trained-looking Adam state (distinct mu and nu) of `mixed_params`."""
    tx = gradtx.adam(0.01)
    params = mixed_params(seed)
    state = tx.init(params)
    for i in range(2):
        grads = jax.tree.map(lambda p, i=i: p * (i + 1.5), params)
        _, state = tx.update(grads, state, params)
    return tx.init(params), state


def _split(raw: bytes) -> tuple[dict, bytes]:
    (n,) = struct.unpack("<Q", raw[:8])
    return json.loads(raw[8 : 8 + n]), raw[8 + n :]


def _join(header: Any, data: bytes) -> bytes:
    text = header if isinstance(header, bytes) else json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + data


def _temporaries(folder: Path) -> list[str]:
    return [p.name for p in folder.iterdir() if io._TMP_TAG in p.name]


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> tuple[Any, Any, bytes]:
    template, state = _adam()
    path = gradtx.save(tmp_path_factory.mktemp("ckpt") / "adam.safetensors", state)
    return template, state, Path(path).read_bytes()


# --------------------------------------------------------------------------------------------
# 1. A full disk: the error surfaces, the previous checkpoint stays
# --------------------------------------------------------------------------------------------

# The child saves a 4 MiB + 400 byte tensor (written by the large-buffer path, whose last 400
# bytes the C library buffers) under a file size limit: writes past it fail with EFBIG, as
# they fail with ENOSPC on a full disk. "last-bytes" puts the limit inside that buffered tail.
FULL_DISK_CHILD = r"""
import json, os, resource, signal, sys
import jax.numpy as jnp
import gradtx

path, limit = sys.argv[1], int(sys.argv[2])
state = {"big": jnp.full(((1 << 20) + 100,), 3.0, jnp.float32)}
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
try:
    gradtx.save(path, state)
    print(json.dumps({"raised": None}))
except BaseException as e:
    print(json.dumps({"raised": type(e).__name__, "errno": getattr(e, "errno", None),
                      "message": str(e), "is_oserror": isinstance(e, OSError)}))
"""


@pytest.mark.parametrize("cut", ["mid-tensor", "last-bytes"])
def test_save_past_a_file_size_limit_raises_and_keeps_the_previous_checkpoint(tmp_path, cut):
    """Was: NumPy's `tofile` dropped the error of its final short write; `save` renamed the
    truncated file over the good checkpoint and returned normally."""
    resource = pytest.importorskip("resource")
    path = tmp_path / "ckpt.safetensors"
    old = {"big": jnp.full(((1 << 20) + 100,), 1.0, jnp.float32)}
    gradtx.save(path, old)
    size = path.stat().st_size
    limit = size // 2 if cut == "mid-tensor" else size - 100
    soft = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    assert soft == resource.RLIM_INFINITY or limit < soft
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(ROOT)}
    env.pop("XLA_FLAGS", None)
    done = subprocess.run(
        [sys.executable, "-c", FULL_DISK_CHILD, str(path), str(limit)],
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,  # kills the child if it hangs
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    outcome = json.loads(done.stdout.strip().splitlines()[-1])
    assert outcome["raised"] is not None, "save returned normally past the file size limit"
    assert outcome["is_oserror"], outcome
    assert outcome["errno"] == errno.EFBIG, outcome
    assert os.strerror(errno.EFBIG) in outcome["message"]  # "File too large"
    assert str(path) in outcome["message"]
    assert _temporaries(tmp_path) == []
    _assert_bitwise_equal(gradtx.load(path, old), old)


def _disk_filling_write(monkeypatch, budget: int) -> None:
    """`os.write` as on a disk with `budget` bytes free: a short write, then ENOSPC."""
    real = os.write
    left = [budget]

    def write(fd: int, data: Any) -> int:
        if left[0] == 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        n = real(fd, memoryview(data)[: left[0]])
        left[0] -= n
        return n

    monkeypatch.setattr(io.os, "write", write)


@pytest.mark.parametrize("free", ["none", "in-header", "after-header", "all-but-3-bytes"])
def test_save_on_a_full_disk_raises_enospc_and_keeps_the_previous_checkpoint(
    tmp_path, monkeypatch, saved, free
):
    """Was: the write path did not use (nor check) the low-level writes; now every byte is
    checked and the system's reason is raised, wherever the disk fills up."""
    template, state, raw = saved
    _, other = _adam(seed=1)
    header_end = 8 + struct.unpack("<Q", raw[:8])[0]
    budget = {"none": 0, "in-header": 5, "after-header": header_end, "all-but-3-bytes": -3}[free]
    path = tmp_path / "ckpt"
    gradtx.save(path, state)
    _disk_filling_write(monkeypatch, budget % len(raw))
    with pytest.raises(OSError) as info:
        gradtx.save(path, other)
    monkeypatch.undo()
    assert info.value.errno == errno.ENOSPC
    assert "No space left on device" in str(info.value) and str(path) in str(info.value)
    assert not isinstance(info.value, gradtx.CheckpointError)
    assert _temporaries(tmp_path) == []
    _assert_bitwise_equal(gradtx.load(path, template), state)


def test_short_writes_are_completed(tmp_path, monkeypatch, saved):
    template, state, _ = saved
    real = os.write
    monkeypatch.setattr(io.os, "write", lambda fd, data: real(fd, memoryview(data)[:7]))
    monkeypatch.setattr(io, "_DIRECT_WRITE", 1 << 62)  # every buffer through the write loop
    path = gradtx.save(tmp_path / "ckpt", state)
    monkeypatch.undo()
    _assert_bitwise_equal(gradtx.load(path, template), state)


def test_a_write_that_reports_bytes_it_did_not_write_is_caught_before_the_rename(
    tmp_path, monkeypatch, saved
):
    """The file size is checked before the rename (a lying or buggy layer below)."""
    template, state, _ = saved
    _, other = _adam(seed=1)
    path = gradtx.save(tmp_path / "ckpt", state)
    real = os.write
    monkeypatch.setattr(io.os, "write", lambda fd, data: real(fd, data[:-1]) + 1 if data else 0)
    with pytest.raises(OSError, match="bytes") as info:
        gradtx.save(path, other)
    monkeypatch.undo()
    assert str(path) in str(info.value)
    assert _temporaries(tmp_path) == []
    _assert_bitwise_equal(gradtx.load(path, template), state)


# --------------------------------------------------------------------------------------------
# 2. Malformed headers: CheckpointError naming the file and the field
# --------------------------------------------------------------------------------------------


def _edit(change):
    def apply(header: dict) -> Any:
        header = copy.deepcopy(header)
        return change(header) or header

    return apply


MALFORMED = {
    "json-array": (lambda h: [1, 2], "not a JSON object"),
    "json-string": (lambda h: "header", "not a JSON object"),
    "no-metadata": (_edit(lambda h: h.pop("__metadata__") and None), "'__metadata__' is missing"),
    "metadata-list": (
        _edit(lambda h: h.update(__metadata__=[1])),
        "'__metadata__' is missing or not an object",
    ),
    "checksum-int": (_edit(lambda h: h["__metadata__"].update(sum64=5)), "field 'sum64'"),
    "checksum-short": (_edit(lambda h: h["__metadata__"].update(sum64="12,34")), "field 'sum64'"),
    "checksum-not-hex": (
        _edit(lambda h: h["__metadata__"].update(sum64=",".join(["0x" + "0" * 14] * 8))),
        "field 'sum64'",
    ),
    "version-int": (_edit(lambda h: h["__metadata__"].update(version=2)), "field 'version'"),
    "index-missing": (
        _edit(lambda h: h["__metadata__"].pop("index64") and None),
        "field 'index64'",
    ),
    "shape-infinity": (
        _edit(lambda h: h["0/mu/dense/bias"].update(shape=[float("inf")])),
        "field 'shape'",
    ),
    "shape-nan": (
        _edit(lambda h: h["0/mu/dense/bias"].update(shape=[float("nan")])),
        "field 'shape'",
    ),
    "shape-float": (_edit(lambda h: h["0/mu/dense/bias"].update(shape=[4.0])), "field 'shape'"),
    "shape-bool": (_edit(lambda h: h["0/count"].update(shape=[True])), "field 'shape'"),
    "shape-negative": (_edit(lambda h: h["0/mu/dense/bias"].update(shape=[-4])), "field 'shape'"),
    "shape-string": (_edit(lambda h: h["0/mu/dense/bias"].update(shape="4")), "field 'shape'"),
    "offset-infinity": (
        _edit(lambda h: h["0/mu/dense/bias"].update(data_offsets=[0, float("inf")])),
        "field 'data_offsets'",
    ),
    "offsets-three": (
        _edit(lambda h: h["0/mu/dense/bias"].update(data_offsets=[0, 1, 2])),
        "field 'data_offsets'",
    ),
    "offsets-overlap": (
        _edit(lambda h: h["0/count"].update(data_offsets=[4, 8])),
        "tensor '0/count'",
    ),
    "dtype-unknown": (_edit(lambda h: h["0/count"].update(dtype="Q99")), "field 'dtype'"),
    "dtype-list": (_edit(lambda h: h["0/count"].update(dtype=["I32"])), "field 'dtype'"),
    "info-string": (_edit(lambda h: h.update({"0/count": "I32"})), "tensor '0/count'"),
    "info-missing-field": (
        _edit(lambda h: h["0/count"].pop("shape") and None),
        "missing fields ['shape']",
    ),
    "info-extra-field": (
        _edit(lambda h: h["0/count"].update(stride=[1])),
        "unknown fields ['stride']",
    ),
}


@pytest.mark.parametrize(("edit", "field"), MALFORMED.values(), ids=MALFORMED.keys())
def test_malformed_headers_raise_checkpoint_errors_naming_the_file_and_field(
    saved, tmp_path, edit, field
):
    """Was: TypeError (an array header), AttributeError (a non-string checksum), OverflowError
    (Infinity in a shape or offset), or silently accepted (bools and floats as sizes)."""
    template, _, raw = saved
    header, data = _split(raw)
    path = tmp_path / "bad.safetensors"
    path.write_bytes(_join(edit(header), data))
    with pytest.raises(gradtx.CheckpointError) as info:
        gradtx.load(path, template)
    assert str(path) in str(info.value)
    assert field in str(info.value)


@pytest.mark.parametrize(
    ("text", "what"),
    [
        (b"[" * 100_000 + b"]" * 100_000, "nested"),
        (b'{"__metadata__": ' * 50_000 + b"1" + b"}" * 50_000, "nested"),
        (b'{"a": 1, "a": 2}', "'a' twice"),
    ],
    ids=["deep-array", "deep-object", "duplicate-key"],
)
def test_deeply_nested_or_duplicated_json_is_a_checkpoint_error(tmp_path, text, what):
    """Was: RecursionError (deep nesting); a duplicated key silently kept the last value."""
    path = tmp_path / "bad.safetensors"
    path.write_bytes(_join(text, b""))
    with pytest.raises(gradtx.CheckpointError, match=what) as info:
        gradtx.load(path, {"x": np.zeros(())})
    assert str(path) in str(info.value)


# --------------------------------------------------------------------------------------------
# 3. Checksums are bound to keys; safetensors re-saves and files of format 1 still load
# --------------------------------------------------------------------------------------------


def _swap(raw: bytes, a: bytes, b: bytes) -> bytes:
    assert len(a) == len(b) and raw.count(a) == raw.count(b) == 1
    return re.sub(re.escape(a) + b"|" + re.escape(b), lambda m: b if m[0] == a else a, raw)


def test_swapping_two_key_names_in_the_header_is_detected(saved, tmp_path):
    """Was: renaming '0/mu/...' <-> '0/nu/...' (two bytes) loaded the moments swapped."""
    template, _, raw = saved
    path = tmp_path / "swapped.safetensors"
    path.write_bytes(_swap(raw, b'"0/mu/dense/kernel"', b'"0/nu/dense/kernel"'))
    with pytest.raises(gradtx.CheckpointError, match=r"0/[mn]u/dense/kernel") as info:
        gradtx.load(path, template)
    assert "not stored under this name" in str(info.value)


def test_a_renamed_key_is_detected_even_when_it_is_not_loaded(saved, tmp_path):
    """Was: with strict=False a corrupted key name made its tensor silently keep the template's
    value; the header's index checksum covers every key, dtype and shape."""
    template, _, raw = saved
    path = tmp_path / "renamed.safetensors"
    path.write_bytes(raw.replace(b'"0/mu/dense/kernel"', b'"0/mu/dense/kernex"'))
    with pytest.raises(gradtx.CheckpointError, match="index64") as info:
        gradtx.load(path, template, strict=False)
    assert str(path) in str(info.value)


def test_a_file_resaved_by_the_safetensors_library_still_loads(saved, tmp_path):
    """safetensors re-sorts the tensors (new offsets, new header order): checksums bound to
    keys, not positions, still verify."""
    safetensors = pytest.importorskip("safetensors")
    safetensors_numpy = pytest.importorskip("safetensors.numpy")
    template, state, raw = saved
    ours = tmp_path / "ours.safetensors"
    ours.write_bytes(raw)
    with safetensors.safe_open(str(ours), "np") as f:
        metadata = f.metadata()
    resaved = tmp_path / "resaved.safetensors"
    safetensors_numpy.save_file(safetensors_numpy.load_file(str(ours)), str(resaved), metadata)
    before, after = _split(raw)[0], _split(resaved.read_bytes())[0]
    assert before["__metadata__"] == after["__metadata__"]
    offsets = {k: v["data_offsets"] for k, v in before.items() if k != "__metadata__"}
    assert offsets != {k: v["data_offsets"] for k, v in after.items() if k != "__metadata__"}
    _assert_bitwise_equal(gradtx.load(resaved, template), state)


# Written by gradtx's format-1 writer (before key-bound checksums): adam(0.1) state of
# {"w": zeros(3)} with count 7, mu [0.5, -1.25, 3], nu [0.25, 1.5625, 9].
FORMAT_1_FILE = base64.b64decode(
    "qAEAAAAAAAB7Il9fbWV0YWRhdGFfXyI6IHsic3VtNjQiOiAiMDAwMDAwMDAwMDAwMDAwNyxiZmEwMDAwMDdmNDAwMDAw"
    "LDNmYzgwMDAwN2Y5MDAwMDAsMDAwMDAwMDAwMDAwMDAwNyIsICJmb3JtYXQiOiAiZ3JhZHR4Lm9wdGltaXplcl9zdGF0"
    "ZSIsICJ2ZXJzaW9uIjogIjEifSwgIjAvY291bnQiOiB7ImR0eXBlIjogIkkzMiIsICJzaGFwZSI6IFtdLCAiZGF0YV9v"
    "ZmZzZXRzIjogWzAsIDRdfSwgIjAvbXUvdyI6IHsiZHR5cGUiOiAiRjMyIiwgInNoYXBlIjogWzNdLCAiZGF0YV9vZmZz"
    "ZXRzIjogWzQsIDE2XX0sICIwL251L3ciOiB7ImR0eXBlIjogIkYzMiIsICJzaGFwZSI6IFszXSwgImRhdGFfb2Zmc2V0"
    "cyI6IFsxNiwgMjhdfSwgIjEvY291bnQiOiB7ImR0eXBlIjogIkkzMiIsICJzaGFwZSI6IFtdLCAiZGF0YV9vZmZzZXRz"
    "IjogWzI4LCAzMl19fSAgICAgBwAAAAAAAD8AAKC/AABAQAAAgD4AAMg/AAAQQQcAAAA="
)


def test_files_of_format_version_1_still_load_and_are_still_verified(tmp_path):
    template = gradtx.adam(0.1).init({"w": jnp.zeros(3)})
    assert _split(FORMAT_1_FILE)[0]["__metadata__"]["version"] == "1"
    path = tmp_path / "v1.safetensors"
    path.write_bytes(FORMAT_1_FILE)
    d = gradtx.state_dict(gradtx.load(path, template))
    assert {k: v.tolist() for k, v in d.items()} == {
        "0/count": 7,
        "0/mu/w": [0.5, -1.25, 3.0],
        "0/nu/w": [0.25, 1.5625, 9.0],
        "1/count": 7,
    }
    path.write_bytes(FORMAT_1_FILE[:-5] + b"\1" + FORMAT_1_FILE[-4:])
    with pytest.raises(gradtx.CheckpointError, match="the data of '0/nu/w' is corrupt"):
        gradtx.load(path, template)
    # Saving again writes the current format.
    gradtx.save(path, gradtx.load_state_dict(template, d))
    assert _split(path.read_bytes())[0]["__metadata__"]["version"] == io.VERSION == "2"


# --------------------------------------------------------------------------------------------
# 4. Paths that are not checkpoint files; byte order
# --------------------------------------------------------------------------------------------


def test_load_refuses_a_fifo_without_blocking(tmp_path):
    """Was: `load` on a FIFO blocked forever, waiting for a writer."""
    if not hasattr(os, "mkfifo"):
        pytest.skip("no FIFOs on this platform")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            gradtx.load(fifo, {"x": np.zeros(())})
            outcome.append(None)
        except BaseException as e:
            outcome.append(e)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout=20)
    if thread.is_alive():  # unblock the reader (opening the write end), then fail
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        os.close(fd)
        thread.join(timeout=20)
        pytest.fail("load blocked on a FIFO")
    assert isinstance(outcome[0], gradtx.CheckpointError), outcome
    assert "not a regular file" in str(outcome[0]) and str(fifo) in str(outcome[0])
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)


def test_load_refuses_a_directory_with_a_checkpoint_error(tmp_path):
    with pytest.raises(gradtx.CheckpointError, match=r"not a regular file \(a directory\)"):
        gradtx.load(tmp_path, {"x": np.zeros(())})


def test_a_byte_order_mismatch_names_the_byte_order(tmp_path):
    """Was: `the template has float32[5], the checkpoint has float32[5]`."""
    path = gradtx.save(tmp_path / "x", {"x": np.arange(5, dtype=np.float32)})
    template = {"x": np.zeros(5, ">f4")}
    with pytest.raises(gradtx.CheckpointError, match=r"float32\[5\] \(big-endian\)") as info:
        gradtx.load(path, template)
    assert "little-endian" in str(info.value)
    with pytest.raises(gradtx.CheckpointError, match="big-endian"):
        gradtx.load_state_dict(template, {"x": np.arange(5, dtype=np.float32)})


@pytest.mark.parametrize("path", ["bad\0name", b"bad\0name"], ids=["str", "bytes"])
def test_a_nul_byte_in_a_path_is_a_checkpoint_error_naming_the_path(path):
    """Was: a bare `ValueError: embedded null byte`."""
    for call in (
        lambda: gradtx.load(path, {"x": np.zeros(())}),
        lambda: gradtx.save(path, {"x": np.zeros(())}),
    ):
        with pytest.raises(gradtx.CheckpointError, match=r"NUL byte.*bad\\x00name"):
            call()


# --------------------------------------------------------------------------------------------
# 5. Bounded fuzzing: load raises CheckpointError or returns the saved state bit-exact
# --------------------------------------------------------------------------------------------

FUZZ = settings(
    derandomize=True,
    max_examples=120,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)

JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats()
    | st.text(max_size=6)
    | st.sampled_from(["F32", "I32", "2", "1", "gradtx.optimizer_state", "0/count"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner),
    max_leaves=8,
)


@st.composite
def _mutated_headers(draw, header: dict) -> bytes:
    header = copy.deepcopy(header)
    for _ in range(draw(st.integers(1, 3))):
        keys = list(header)
        kind = draw(st.sampled_from(["tensor", "field", "item", "meta", "drop", "add", "order"]))
        key = draw(st.sampled_from(keys)) if keys else None
        node = header.get(key) if key is not None else None
        if kind == "tensor" and key is not None:
            header[key] = draw(JSON)
        elif kind in ("field", "meta") and isinstance(node, dict) and node:
            if kind == "meta" and isinstance(header.get("__metadata__"), dict):
                node = header["__metadata__"]
            field = draw(st.sampled_from(sorted(node)))
            node[field] = draw(JSON)
        elif kind == "item" and isinstance(node, dict):
            for value in node.values():
                if isinstance(value, list) and value:
                    value[draw(st.integers(0, len(value) - 1))] = draw(JSON)
                    break
        elif kind == "drop" and key is not None:
            del header[key]
        elif kind == "add":
            header[draw(st.text(max_size=6))] = draw(JSON)
        elif kind == "order":  # the same entries in another order: still a valid file
            header = dict(draw(st.permutations(list(header.items()))))
    return json.dumps(header).encode()


@pytest.fixture(scope="module")
def fuzz_case(tmp_path_factory) -> tuple[Path, Any, Any, bytes]:
    """A real small checkpoint (NumPy leaves: no device transfers, so many loads are fast)."""
    rng = np.random.default_rng(0)
    state = {
        "mu": {"w": rng.normal(size=(3, 2)).astype(np.float32), "b": np.float32([1.5, -2])},
        "nu": {"w": rng.random(size=(3, 2)).astype(np.float32), "b": np.float32([0.25, 4])},
        "count": np.asarray(9, np.int32),
        "flag": np.asarray([True, False]),
    }
    template = jax.tree.map(np.zeros_like, state)
    folder = tmp_path_factory.mktemp("fuzz")
    raw = Path(gradtx.save(folder / "real.safetensors", state)).read_bytes()
    return folder / "fuzzed.safetensors", template, state, raw


def _loads_exactly_or_refuses(path: Path, template: Any, state: Any) -> None:
    try:
        restored = gradtx.load(path, template)
    except gradtx.CheckpointError as e:
        message = str(e)
    else:
        _assert_bitwise_equal(restored, state)
        return
    assert str(path) in message


def test_fuzz_random_headers_raise_only_checkpoint_errors(fuzz_case):
    path, template, state, raw = fuzz_case
    header, data = _split(raw)

    @FUZZ
    @given(
        st.one_of(
            _mutated_headers(header),
            JSON.map(lambda v: json.dumps(v).encode()),
            st.binary(max_size=40),
        )
    )
    def check(text: bytes) -> None:
        path.write_bytes(_join(text, data))
        _loads_exactly_or_refuses(path, template, state)

    check()


def test_fuzz_random_byte_corruptions_raise_only_checkpoint_errors(fuzz_case):
    path, template, state, raw = fuzz_case
    header_end = 8 + struct.unpack("<Q", raw[:8])[0]
    position = st.one_of(st.integers(0, len(raw) - 1), st.integers(0, header_end - 1))

    @FUZZ
    @given(
        flips=st.lists(st.tuples(position, st.integers(1, 255)), min_size=1, max_size=4),
        cut=st.one_of(st.none(), st.integers(0, len(raw) + 3)),
    )
    def check(flips: list[tuple[int, int]], cut: int | None) -> None:
        damaged = bytearray(raw)
        for at, xor in flips:
            damaged[at] ^= xor
        if cut is not None:
            damaged = damaged[:cut] + b"\0" * max(0, cut - len(raw))
        path.write_bytes(bytes(damaged))
        _loads_exactly_or_refuses(path, template, state)

    check()
