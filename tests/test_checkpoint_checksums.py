"""Checksums are bound to keys: swapped or renamed keys are detected, a file re-saved by the
safetensors library still loads, and files of format version 1 still load and are verified."""

from __future__ import annotations

import base64
import re
from typing import Any

import jax.numpy as jnp
import numpy as np
import pytest

import gradtx
from gradtx.checkpoint import _io as io

from .checkpoint_helpers import (
    assert_bitwise_equal,
    saved_adam_checkpoint,
    split_header,
)


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> tuple[Any, Any, bytes]:
    return saved_adam_checkpoint(tmp_path_factory)


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
    before, after = split_header(raw)[0], split_header(resaved.read_bytes())[0]
    assert before["__metadata__"] == after["__metadata__"]
    offsets = {k: v["data_offsets"] for k, v in before.items() if k != "__metadata__"}
    assert offsets != {k: v["data_offsets"] for k, v in after.items() if k != "__metadata__"}
    assert_bitwise_equal(gradtx.load(resaved, template), state)


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
    assert split_header(FORMAT_1_FILE)[0]["__metadata__"]["version"] == "1"
    path = tmp_path / "v1.safetensors"
    path.write_bytes(FORMAT_1_FILE)
    d = gradtx.state_dict(gradtx.load(path, template), keys="paths")
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
    assert split_header(path.read_bytes())[0]["__metadata__"]["version"] == io.VERSION == "2"


def test_sum64_wraps_modulo_2_64_like_a_python_sum():
    # the checksum is the sum of little-endian 64-bit words mod 2**64 (a last partial word
    # zero-padded): all-0xff words overflow at every step
    from gradtx.checkpoint._format import sum64

    rng = np.random.default_rng(0)
    for data in (b"\xff" * 8 * 9 + b"\xff\x01", rng.bytes(8 * 1000 + 5), b"", b"\x01\x02"):
        words = [int.from_bytes(data[i : i + 8], "little") for i in range(0, len(data), 8)]
        assert sum64(memoryview(data)) == sum(words) % (1 << 64)
