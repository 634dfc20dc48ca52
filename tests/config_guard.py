"""A guard on JAX's global configuration: every test leaves `jax.config` as the session had it.

A test (or a fixture) that calls `jax.config.update` without restoring the value it found changes
how the rest of its worker compiles and computes, which makes results depend on test order. The
guard compares every `jax.config` value with the session's after each test's teardown (its
fixtures included), reports the test whose teardown ended with a change as an error, naming the
options, and restores them so that the rest of the run is unaffected. The only fixture that
changes a flag, `optimized_xla`, is function-scoped and restores it.

tests/conftest.py registers it; tests/test_config_guard.py checks that it catches a leak.
"""

from __future__ import annotations

from typing import Any

import jax
import pytest


def config_snapshot() -> dict[str, Any]:
    """Every `jax.config` value, by name."""
    return dict(jax.config.values)


def changed_config(before: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """The options whose value differs from `before`, with (before, now)."""
    now = config_snapshot()
    return {
        name: (before.get(name), now.get(name))
        for name in sorted(set(before) | set(now))
        if before.get(name) != now.get(name)
    }


class ConfigLeakError(AssertionError):
    """A test left JAX's global configuration changed."""


class ConfigGuard:
    def __init__(self) -> None:
        self.session = config_snapshot()

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_teardown(self, item: pytest.Item, nextitem: Any):
        try:
            return (yield)
        finally:
            leaked = changed_config(self.session)
            if leaked:
                for name, (before, _) in leaked.items():
                    jax.config.update(name, before)
                raise ConfigLeakError(
                    f"{item.nodeid} left JAX's configuration changed (now restored): "
                    + ", ".join(f"{k} {a!r} -> {b!r}" for k, (a, b) in leaked.items())
                    + "; restore what you change (e.g. a fixture that reads the value first "
                    "and sets it back on teardown)"
                )
