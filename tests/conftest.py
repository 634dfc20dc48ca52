"""Test configuration: 8 host CPU devices (set before JAX is imported, and inherited by the
subprocesses tests start), the compile counter, the optimizer table's xdist groups, the version
lanes' `version_lane` marker and `--table-cases` (tests/lanes.py, tests/check.py), a guard on
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
from .lanes import VERSION_MARKER, in_version_subset  # noqa: E402
from .optimizer_table import CASES, OptCase  # noqa: E402


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


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--table-cases",
        default=None,
        metavar="NAMES",
        help="comma-separated optimizer-table case names: tests parametrized by a table case run "
        "only these (`make check`'s table smoke); the other tests are not affected",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{VERSION_MARKER}: set by tests/conftest.py on the tests the version lanes of `make test` "
        "run (compiled cases of tests marked `across_versions`); `-m version_lane` selects them",
    )
    config.pluginmanager.register(CompileReportPlugin(config), "gradtx-compile-counter")
    if not config.pluginmanager.has_plugin("gradtx-config-guard"):
        config.pluginmanager.register(ConfigGuard(), "gradtx-config-guard")


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups, and before `-m` selects
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test of one table case runs on one xdist worker (`--dist loadgroup`), where the
    compilation tier (tests/compiled.py) has that case's programs cached. A test that sets its
    own `xdist_group` (the sharded table, one program for all cases) keeps it. Every other test
    runs on one worker with the rest of its module, which compiles the module's cached runners
    (`functools.cache`d trajectories and references) and its eager operations once, not on both
    workers.

    The tests of the version lanes' subset get the `version_lane` marker, and with
    `--table-cases` the tests of other table cases are deselected."""
    _select_table_cases(config, items)
    for item in items:
        if in_version_subset(item):
            item.add_marker(VERSION_MARKER)
        if item.get_closest_marker("xdist_group") is not None:
            continue
        case = _table_case(item)
        if case is not None:
            item.add_marker(pytest.mark.xdist_group(f"case-{case.name}"))
        else:
            item.add_marker(pytest.mark.xdist_group(f"module-{item.nodeid.partition('::')[0]}"))


def _table_case(item: pytest.Item) -> OptCase | None:
    callspec = getattr(item, "callspec", None)
    case = callspec.params.get("case") if callspec is not None else None
    return case if isinstance(case, OptCase) else None


def _select_table_cases(config: pytest.Config, items: list[pytest.Item]) -> None:
    """With `--table-cases a,b`: only those table cases' tests of the table-parametrized ones."""
    given = config.getoption("table_cases")
    if given is None:
        return
    names = {n.strip() for n in given.split(",") if n.strip()}
    known = {c.name for c in CASES}
    unknown = sorted(names - known)
    if unknown:
        import difflib

        named = [
            repr(n)
            + "".join(f" (did you mean {c!r}?)" for c in difflib.get_close_matches(n, known, 1))
            for n in unknown
        ]
        raise pytest.UsageError(
            f"--table-cases: no table case named {', '.join(named)}; give the OptCase names of "
            "tests/cases/*.py"
        )
    keep, drop = [], []
    for item in items:
        case = _table_case(item)
        (drop if case is not None and case.name not in names else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


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
