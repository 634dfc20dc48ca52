"""Atomic, verified writes: on a full disk, past a file size limit, with short writes or a write
layer that reports bytes it did not write, `save` raises the system's error and the previous
checkpoint stays (docs/checkpoint.md, "Guarantees")."""

from __future__ import annotations

import errno
import json
import os
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import jax.numpy as jnp
import pytest

import gradtx
from gradtx.checkpoint import _io as io

from .checkpoint_helpers import (
    assert_bitwise_equal,
    saved_adam_checkpoint,
    temporaries,
    trained_adam,
)

ROOT = Path(__file__).parent.parent
TIMEOUT_S = 120


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> tuple[Any, Any, bytes]:
    return saved_adam_checkpoint(tmp_path_factory)


# --------------------------------------------------------------------------------------------
# a full disk: the error surfaces, the previous checkpoint stays
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


@pytest.mark.subprocess
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
    assert temporaries(tmp_path) == []
    assert_bitwise_equal(gradtx.load(path, old), old)


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
    _, other = trained_adam(seed=1)
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
    assert temporaries(tmp_path) == []
    assert_bitwise_equal(gradtx.load(path, template), state)


def test_short_writes_are_completed(tmp_path, monkeypatch, saved):
    template, state, _ = saved
    real = os.write
    monkeypatch.setattr(io.os, "write", lambda fd, data: real(fd, memoryview(data)[:7]))
    monkeypatch.setattr(io, "_DIRECT_WRITE", 1 << 62)  # every buffer through the write loop
    path = gradtx.save(tmp_path / "ckpt", state)
    monkeypatch.undo()
    assert_bitwise_equal(gradtx.load(path, template), state)


def test_a_write_that_reports_bytes_it_did_not_write_is_caught_before_the_rename(
    tmp_path, monkeypatch, saved
):
    """The file size is checked before the rename (a lying or buggy layer below)."""
    template, state, _ = saved
    _, other = trained_adam(seed=1)
    path = gradtx.save(tmp_path / "ckpt", state)
    real = os.write
    monkeypatch.setattr(io.os, "write", lambda fd, data: real(fd, data[:-1]) + 1 if data else 0)
    with pytest.raises(OSError, match="bytes") as info:
        gradtx.save(path, other)
    monkeypatch.undo()
    assert str(path) in str(info.value)
    assert temporaries(tmp_path) == []
    assert_bitwise_equal(gradtx.load(path, template), state)
