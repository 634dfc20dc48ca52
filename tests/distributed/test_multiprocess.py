"""Two processes on 127.0.0.1, joined by `jax.distributed.initialize` with gloo CPU collectives
(4 host devices each), train data-parallel with ZeRO-1, global-norm clipping and accumulation for
20 steps, then with Streaming DiLoCo (4-bit pseudo-gradients, one replica per device), and end
with the params of single-process runs on 8 devices.

The processes are started by the example's own launcher (examples/multihost_data_parallel.py),
which bounds them in time and kills their process groups on any exit, so no process and no port
outlives the test.
"""

from __future__ import annotations

import importlib.util
import socket
import time
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.subprocess  # the second lane of `make test`

EXAMPLE = Path(__file__).parents[2] / "examples" / "multihost_data_parallel.py"


def load_example():
    spec = importlib.util.spec_from_file_location("multihost_data_parallel", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def assert_port_free(port: int) -> None:
    """Nothing listens on `port` any more (closed connections may linger in TIME_WAIT, which
    SO_REUSEADDR allows; a live listener still makes the bind fail)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", port))
        s.listen(1)


@pytest.mark.slow
def test_two_processes_train_like_one_process(tmp_path):
    example = load_example()
    out = tmp_path / "params.npz"
    port = example.free_port()
    results = example.launch_local(
        2, ["--local-devices=4", f"--out={out}"], timeout=240.0, port=port
    )
    for i, (code, text) in enumerate(results):
        assert code == 0, f"process {i} exited with {code}:\n{text[-4000:]}"
    assert "process 0/2: 4 local devices, 8 in all" in results[0][1]
    assert "process 1/2: 4 local devices, 8 in all" in results[1][1]
    assert_port_free(port)
    saved = dict(np.load(out))
    got = {k: v for k, v in saved.items() if not k.startswith("diloco/")}
    # the same training in this process, on its 8 host devices
    expected = example.train(example.STEPS)
    start = example.init_params()
    assert got.keys() == expected.keys()
    for k in expected:
        assert not np.allclose(expected[k], start[k])  # it trained
        np.testing.assert_allclose(got[k], expected[k], rtol=1e-6, atol=1e-6, err_msg=k)
    # DiLoCo with 4-bit pseudo-gradients, each device a replica: the gloo all-to-all and
    # all-gather move the same codes as the in-process collectives
    diloco = {k.removeprefix("diloco/"): v for k, v in saved.items() if k.startswith("diloco/")}
    expected = example.train_diloco(example.STEPS)
    assert diloco.keys() == expected.keys()
    assert float(diloco["total_bytes_sent"]) > 0
    for k in expected:
        if k in start:
            assert not np.allclose(expected[k], start[k])
        np.testing.assert_allclose(diloco[k], expected[k], rtol=1e-6, atol=1e-6, err_msg=k)


def test_launcher_is_bounded_in_time_and_cleans_up():
    example = load_example()
    port = example.free_port()
    begin = time.monotonic()
    # far too little time to even import jax: every process is killed at the deadline
    results = example.launch_local(2, ["--local-devices=4"], timeout=0.5, port=port)
    assert time.monotonic() - begin < 30
    assert [code for code, _ in results] == [-9, -9]
    assert_port_free(port)
