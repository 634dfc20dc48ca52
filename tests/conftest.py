"""Test configuration: 8 host CPU devices and XLA's backend optimizations off (both set before
JAX is imported, and inherited by the subprocesses tests start), and shared fixtures.

The suite's programs are tiny, so compiling them is most of its time; without LLVM's
optimization passes (`JAX_DISABLE_MOST_OPTIMIZATIONS`) XLA:CPU compiles them 20-40% faster.
The values can differ from an optimized build's in the last bit (LLVM then contracts some
multiply-adds into FMAs; XLA:CPU allows no other fast-math), which every tolerance here covers;
tests that claim bit-identity between two *different* programs use the `optimized_xla`
fixture, so that they check what users run. JAX_DISABLE_MOST_OPTIMIZATIONS=0 runs everything
optimized.
"""

import os

_flags = os.environ.get("XLA_FLAGS", "")
if "xla_force_host_platform_device_count" not in _flags:
    os.environ["XLA_FLAGS"] = (_flags + " --xla_force_host_platform_device_count=8").strip()
os.environ.setdefault("JAX_DISABLE_MOST_OPTIMIZATIONS", "1")

import jax  # noqa: E402
import pytest  # noqa: E402


@pytest.fixture
def optimized_xla():
    """Compile with XLA's full optimization in this test (see the module docstring)."""
    before = jax.config.read("jax_disable_most_optimizations")
    jax.config.update("jax_disable_most_optimizations", False)
    yield
    jax.config.update("jax_disable_most_optimizations", before)


@pytest.fixture(params=[False, True], ids=["eager", "jit"])
def use_jit(request) -> bool:
    """Run a check both eagerly and under `jax.jit`."""
    return request.param


@pytest.fixture(scope="session")
def cpu_devices():
    devices = jax.devices("cpu")
    assert len(devices) >= 8, "conftest must set 8 host devices before JAX is imported"
    return devices
