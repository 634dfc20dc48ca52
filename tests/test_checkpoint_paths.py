"""Paths that are not checkpoint files (FIFOs, folders, NUL bytes) and byte-order mismatches:
each a CheckpointError naming the path or the byte order, never a hang."""

from __future__ import annotations

import os
import stat
import threading

import numpy as np
import pytest

import gradtx


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
