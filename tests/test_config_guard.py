"""The guard on JAX's global configuration (tests/config_guard.py) reports a test that leaves a
flag changed, names the flag, restores it, and lets a test that restores its change pass."""

from __future__ import annotations

import jax
import pytest

from .config_guard import ConfigGuard, changed_config, config_snapshot

pytest_plugins = ["pytester"]

LEAKY = """
import jax
import pytest


def test_leaks_a_flag():
    jax.config.update("jax_disable_most_optimizations", not {before})


@pytest.fixture(scope="module")
def module_fixture_that_leaks():
    jax.config.update("jax_debug_nans", True)
    yield


def test_leaks_through_a_module_fixture(module_fixture_that_leaks):
    pass


def test_restores_what_it_changes():
    before = jax.config.values["jax_enable_checks"]
    jax.config.update("jax_enable_checks", not before)
    jax.config.update("jax_enable_checks", before)
"""


def test_changed_config_names_the_option():
    before = config_snapshot()
    flag = jax.config.values["jax_debug_infs"]
    jax.config.update("jax_debug_infs", not flag)
    try:
        assert changed_config(before) == {"jax_debug_infs": (flag, not flag)}
    finally:
        jax.config.update("jax_debug_infs", flag)
    assert changed_config(before) == {}


def test_a_leaked_flag_is_an_error_and_is_restored(pytester: pytest.Pytester):
    before = config_snapshot()
    flag = jax.config.values["jax_disable_most_optimizations"]
    pytester.makepyfile(test_leaky=LEAKY.replace("{before}", repr(flag)))
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", plugins=[ConfigGuard()])
    result.assert_outcomes(passed=3, errors=2)
    result.stdout.fnmatch_lines(
        [
            "*test_leaks_a_flag left JAX's configuration changed (now restored): "
            f"jax_disable_most_optimizations {flag!r} -> {not flag!r}*",
            "*test_leaks_through_a_module_fixture left JAX's configuration changed*jax_debug_nans*",
        ]
    )
    assert changed_config(before) == {}  # nothing leaked into this run
