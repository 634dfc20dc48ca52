"""Test configuration: 8 host CPU devices (set before JAX is imported) and shared fixtures."""

import os

_flags = os.environ.get("XLA_FLAGS", "")
if "xla_force_host_platform_device_count" not in _flags:
    os.environ["XLA_FLAGS"] = (_flags + " --xla_force_host_platform_device_count=8").strip()

import jax  # noqa: E402
import pytest  # noqa: E402


@pytest.fixture(params=[False, True], ids=["eager", "jit"])
def use_jit(request) -> bool:
    """Run a check both eagerly and under `jax.jit`."""
    return request.param


@pytest.fixture(scope="session")
def cpu_devices():
    devices = jax.devices("cpu")
    assert len(devices) >= 8, "conftest must set 8 host devices before JAX is imported"
    return devices
