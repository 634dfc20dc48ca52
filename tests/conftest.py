"""Test configuration: 8 host CPU devices (set before JAX is imported, and inherited by the
subprocesses tests start), the compile counter, the optimizer table's xdist groups, a guard on
JAX's global configuration, and shared fixtures.

The suite compiles with XLA's full optimizations, the programs users run. `GRADTX_FAST_COMPILE=1`
turns most of them off (`JAX_DISABLE_MOST_OPTIMIZATIONS`) for quicker local loops: XLA:CPU then
compiles 20-40% faster, and values may differ from an optimized build's in the last bit (every
tolerance covers that; tests that claim bit-identity between two *different* programs take the
`optimized_xla` fixture). CI never sets it. `make test`'s lanes compile the same optimized HLO
with XLA:CPU's classic kernel emitter, in about half the time (tests/lanes.py, `EMITTER_FLAG`).
"""

import os

_flags = os.environ.get("XLA_FLAGS", "")
if "xla_force_host_platform_device_count" not in _flags:
    os.environ["XLA_FLAGS"] = (_flags + " --xla_force_host_platform_device_count=8").strip()
if os.environ.get("GRADTX_FAST_COMPILE", "") not in ("", "0"):
    os.environ["JAX_DISABLE_MOST_OPTIMIZATIONS"] = "1"

import jax  # noqa: E402
import pytest  # noqa: E402

from .compile_counter import CompileReportPlugin  # noqa: E402
from .config_guard import ConfigGuard  # noqa: E402
from .optimizer_table import OptCase  # noqa: E402


def pytest_report_header(config: pytest.Config) -> str:
    """The versions the suite runs on (the version lanes differ in them)."""
    import importlib.metadata as md
    import platform

    def version(name: str) -> str:
        try:
            return md.version(name)
        except md.PackageNotFoundError:
            return "-"

    names = ("jax", "jaxlib", "numpy", "ml_dtypes", "optax", "flax", "orbax-checkpoint", "torch")
    return f"versions: python {platform.python_version()}, " + ", ".join(
        f"{n} {version(n)}" for n in names
    )


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(CompileReportPlugin(config), "gradtx-compile-counter")
    if not config.pluginmanager.has_plugin("gradtx-config-guard"):
        config.pluginmanager.register(ConfigGuard(), "gradtx-config-guard")


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups into the node ids
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test of one table case runs on one xdist worker (`--dist loadgroup`), where the
    compilation tier (tests/compiled.py) has that case's programs cached. A test that sets its
    own `xdist_group` (the sharded table, one program for all cases) keeps it. Every other test
    runs on one worker with the rest of its module, which compiles the module's cached runners
    (`functools.cache`d trajectories and references) and its eager operations once, not on both
    workers."""
    for item in items:
        if item.get_closest_marker("xdist_group") is not None:
            continue
        callspec = getattr(item, "callspec", None)
        case = callspec.params.get("case") if callspec is not None else None
        if isinstance(case, OptCase):
            item.add_marker(pytest.mark.xdist_group(f"case-{case.name}"))
        else:
            item.add_marker(pytest.mark.xdist_group(f"module-{item.nodeid.partition('::')[0]}"))


def pytest_collection_finish(session: pytest.Session) -> None:
    """Under `--dist loadgroup` xdist marks a grouped test by a suffix of its node id; if that
    stopped working (pytest-xdist #1386: pytest 9.2 ignores it), every case would compile its
    programs on both workers. Say so instead of running twice as long."""
    config = session.config
    if not (hasattr(config, "workerinput") and config.getvalue("loadgroup")):
        return
    for item in session.items:
        if item.get_closest_marker("xdist_group") is not None:
            if "@" not in item.nodeid.rpartition("]")[2]:
                raise pytest.UsageError(
                    f"--dist loadgroup does not group {item.nodeid}: this pytest-xdist / pytest "
                    "pair ignores xdist_group (pytest-xdist #1386); use the versions in "
                    "constraints.txt"
                )
            return


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
