"""The suite's compile counter: how many XLA compilations each test file (and each optimizer-table
case) caused, printed at the end of every run, so a new test that recompiles the table shows up.

JAX reports every backend compilation through `jax.monitoring` (the duration event
`/jax/core/compile/backend_compile_duration`, with the function's name); a listener attributes it
to the test running at the time, or to "(collection)" outside a test. A compilation is either a
program (a function someone jitted: a training step, a scan) or an eager operation (`jnp.add`
called outside jit compiles `jit(add)` once per shape and dtype, cached for the process); both
are counted, and the per-case numbers count programs only. Under xdist each worker sends its
counts to the controller (`workeroutput`), which sums them. `GRADTX_COMPILE_REPORT=path.json`
also writes the counts as JSON.

Under `make pytest` the processes of a run share a persistent compilation cache (tests/lanes.py):
a compilation another process of the run did already is loaded from it (JAX's event
`/jax/compilation_cache/cache_hits`, just before the compile event). Such a load still counts as
a compilation (the program was asked for again) and is also counted as `cached`; its seconds are
the load's.
"""

from __future__ import annotations

import json
import os
from collections import Counter, defaultdict
from typing import Any

import jax
import pytest

_EVENT = "/jax/core/compile/backend_compile_duration"
_CACHE_HIT = "/jax/compilation_cache/cache_hits"
_COLLECTION = "(collection)"
WHOLE_TABLE = "(whole table)"
# A program the tier compiles once for the whole table (tests/compiled.py) is built by whichever
# case's test needs it first; a function named with this prefix is counted as the whole table's.
TABLE_WIDE = "table_wide_"


def _eager_names() -> frozenset[str]:
    import jax.lax
    import jax.numpy

    return frozenset(dir(jax.lax)) | frozenset(dir(jax.numpy)) | frozenset(dir(jax.random))


def is_eager_op(fun_name: str) -> bool:
    """`jit(add)`, `jit(_reduce_sum)`: what one eager JAX operation compiles."""
    name = fun_name.removeprefix("jit(").removesuffix(")")
    return name.startswith("_") or name in _EAGER


_EAGER = _eager_names()


class CompileCounter:
    def __init__(self, listen: bool = True) -> None:
        self.current_file = _COLLECTION
        self.current_case: str | None = None
        self.files: Counter[str] = Counter()
        self.programs: Counter[str] = Counter()
        self.seconds: defaultdict[str, float] = defaultdict(float)
        self.cases: Counter[str] = Counter()
        self.cached: Counter[str] = Counter()
        self._loading = False  # a cache hit was reported; its compile event comes next
        if listen:  # tests/test_compile_counter.py feeds events by hand
            jax.monitoring.register_event_duration_secs_listener(self._on_event)
            jax.monitoring.register_event_listener(self._on_plain_event)

    def _on_plain_event(self, event: str, **_: Any) -> None:
        if event == _CACHE_HIT:
            self._loading = True

    def _on_event(self, event: str, duration: float, *, fun_name: str = "", **_: Any) -> None:
        if event != _EVENT:
            return
        self.files[self.current_file] += 1
        if self._loading:
            self.cached[self.current_file] += 1
            self._loading = False
        self.seconds[self.current_file] += duration
        if is_eager_op(fun_name):
            return
        self.programs[self.current_file] += 1
        if self.current_case is not None:
            name = fun_name.removeprefix("jit(").removesuffix(")")
            self.cases[WHOLE_TABLE if name.startswith(TABLE_WIDE) else self.current_case] += 1

    def as_dict(self) -> dict[str, Any]:
        return {
            "files": dict(self.files),
            "programs": dict(self.programs),
            "seconds": dict(self.seconds),
            "cases": dict(self.cases),
            "cached": dict(self.cached),
        }

    def merge(self, data: dict[str, Any]) -> None:
        self.files.update(data["files"])
        self.programs.update(data["programs"])
        for k, v in data["seconds"].items():
            self.seconds[k] += v
        self.cases.update(data["cases"])
        self.cached.update(data.get("cached", {}))


def _case_name(item: pytest.Item) -> str | None:
    """The table case a test checks; `WHOLE_TABLE` for a check that compiles one program for all
    cases (its xdist group is not a case's: the sharded table)."""
    callspec = getattr(item, "callspec", None)
    if callspec is None:
        return None
    name = getattr(callspec.params.get("case"), "name", None)
    if not isinstance(name, str):
        return None
    group = item.get_closest_marker("xdist_group")
    if group is not None and group.args and not str(group.args[0]).startswith("case-"):
        return WHOLE_TABLE
    return name


class CompileReportPlugin:
    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.counter = CompileCounter()
        self.is_worker = hasattr(config, "workerinput")

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: Any):
        self.counter.current_file = item.location[0]
        self.counter.current_case = _case_name(item)
        yield
        self.counter.current_file = _COLLECTION
        self.counter.current_case = None

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self.is_worker:
            self.config.workeroutput["gradtx_compiles"] = json.dumps(self.counter.as_dict())

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        data = getattr(node, "workeroutput", {}).get("gradtx_compiles")
        if data:
            self.counter.merge(json.loads(data))

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.is_worker:
            return
        c = self.counter
        total = sum(c.files.values())
        if not total:
            return
        tr = terminalreporter
        tr.section("XLA compilations")
        programs = sum(c.programs.values())
        tr.write_line(
            f"{total} compilations ({programs} programs, {total - programs} eager operations; "
            f"{sum(c.cached.values())} loaded from the run's compilation cache), "
            f"{sum(c.seconds.values()):.0f} s compiling in all"
        )
        tr.write_line(
            "per file (most first): compilations, programs, loaded from the cache, seconds"
        )
        for name, n in c.files.most_common(25):
            tr.write_line(
                f"  {n:6d} {c.programs[name]:6d} {c.cached[name]:6d} {c.seconds[name]:7.1f} s  "
                f"{name}"
            )
        if len(c.files) > 25:
            rest = sum(n for _, n in c.files.most_common()[25:])
            tr.write_line(f"  {rest:6d}                          ({len(c.files) - 25} more files)")
        cases = {k: v for k, v in c.cases.items() if k != WHOLE_TABLE}
        if cases:
            counts = sorted(cases.values())
            worst = Counter(cases).most_common(3)
            tr.write_line(
                f"optimizer-table cases: {len(counts)}, programs compiled per case: "
                f"median {counts[len(counts) // 2]}, max {counts[-1]} "
                f"({', '.join(f'{k} {v}' for k, v in worst)}), {sum(counts)} in all; "
                f"{c.cases.get(WHOLE_TABLE, 0)} more for the whole table at once"
            )
        path = os.environ.get("GRADTX_COMPILE_REPORT")
        if path:
            with open(path, "w") as f:
                json.dump(c.as_dict(), f, indent=1, sort_keys=True)
