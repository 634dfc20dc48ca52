"""The pytest plugin of the Optax-suite runner (`python -m tests.optax_suite`, `make optax-suite`).

Loaded into a pytest run over the tests copied from the installed optax wheel. It always records
every test's outcome (one JSON line per test, in `$GRADTX_OPTAX_SUITE_OUT/<worker>.jsonl`); with
`GRADTX_OPTAX_SUITE_MODE=gradtx` it first substitutes gradtx for every public Optax name gradtx
shares (`substitution()`), wrapping each substituted function so that a test that calls one is
recorded as having *touched* gradtx, and skips the tests of `differences.SKIPS` with their reason.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import importlib
import inspect
import json
import os
import sys
import typing
from typing import Any

# Optax's public namespaces and their gradtx counterparts: (optax module, gradtx module, prefix
# Optax's names carry there and gradtx's do not, whether gradtx's face is a fallback). The
# specific namespaces come first: an object reachable under several names takes its first match.
NAMESPACES: tuple[tuple[str, str, str, bool], ...] = (
    ("optax.tree", "gradtx.tree", "", False),
    ("optax.tree_utils", "gradtx.tree", "tree_", False),
    ("optax.projections", "gradtx.projections", "", False),
    ("optax.microbatching", "gradtx.microbatching", "", False),
    ("optax.contrib", "gradtx.contrib", "", True),
    ("optax.schedules", "gradtx.schedules", "", True),
    ("optax.transforms", "gradtx.transforms", "", True),
    ("optax", "gradtx", "", False),
)

# Left as Optax's in the substituted run (gradtx has each under the same name, and its
# transformations are plain (init, update) NamedTuples accepted wherever Optax's are): the base
# types and type aliases the tests build on.
BASE_TYPES = frozenset(
    {
        "GradientTransformation",
        "GradientTransformationExtraArgs",
        "EmptyState",
        "OptState",
        "Params",
        "Updates",
        "Schedule",
        "ScalarOrSchedule",
        "StatefulSchedule",
        "TransformInitFn",
        "TransformUpdateFn",
        "TransformUpdateExtraArgsFn",
        "MaskOrFn",
        "ConditionFn",
        "ShouldSkipUpdateFunction",
    }
)

# Optax modules outside gradtx's scope: losses, perturbations, assignment, second-order helpers,
# the experimental aggregator (which is Optax code the tests run *on* gradtx's tree helpers).
OUT_OF_SCOPE = (
    "optax.losses",
    "optax._src.loss",
    "optax.perturbations",
    "optax.assignment",
    "optax.second_order",
    "optax.experimental",
    "optax._src.deprecations",
)

# Optax classes that are not public names but that tests check results against (`isinstance`),
# with gradtx's class of the same role: (optax module, name) -> (gradtx module, name).
PRIVATE_COUNTERPARTS = {
    ("optax._src.utils", "MultiNormalDiagFromLogScale"): (
        "gradtx._base._linalg",
        "MultiNormalDiagFromLogScale",
    ),
    ("optax.contrib._complex_valued", "SplitRealAndImaginaryArrays"): (
        "gradtx.contrib._complex",
        "SplitRealAndImaginaryArrays",
    ),
}

_TOUCHED = [False]


def _in_scope(obj: Any) -> bool:
    module = getattr(obj, "__module__", None) or ""
    return not any(module == m or module.startswith(m + ".") for m in OUT_OF_SCOPE)


def public_names(*, base_types: bool = True) -> list[tuple[str, str, Any]]:
    """(namespace, name, object) for every public Optax name gradtx is meant to have."""
    out = []
    for optax_name, _, _, _ in NAMESPACES:
        module = importlib.import_module(optax_name)
        for name in sorted(vars(module)):
            obj = getattr(module, name)
            if name.startswith("_") or inspect.ismodule(obj):
                continue
            if name in BASE_TYPES and not base_types:
                continue
            if not _in_scope(obj):
                continue
            out.append((optax_name, name, obj))
    return out


def counterpart(optax_name: str, name: str) -> Any:
    """gradtx's object for Optax's `optax_name.name`, or None."""
    for o, g, prefix, fallback in NAMESPACES:
        if o != optax_name:
            continue
        bare = name[len(prefix) :] if prefix and name.startswith(prefix) else name
        for candidate in (g, "gradtx") if fallback else (g,):
            try:
                module = importlib.import_module(candidate)
            except ImportError:
                continue
            if hasattr(module, bare):
                return getattr(module, bare)
    return None


def missing_names() -> list[str]:
    """The public Optax names (in scope) that have no gradtx counterpart."""
    return [f"{o}.{n}" for o, n, _ in public_names() if counterpart(o, n) is None]


def _touching(obj: Any) -> Any:
    """`obj` wrapped so that calling it marks the running test as touching gradtx."""
    if inspect.isclass(obj):
        value_like = dataclasses.is_dataclass(obj) or issubclass(
            obj, tuple | enum.Enum | BaseException
        )
        if value_like or obj.__init__ is object.__init__ or getattr(obj, "_is_protocol", False):
            return obj  # used as types or values: recorded only through the functions
        original = obj.__init__

        @functools.wraps(original)
        def __init__(self, *args, **kwargs):
            _TOUCHED[0] = True
            original(self, *args, **kwargs)

        return type(obj.__name__, (obj,), {"__init__": __init__, "__module__": obj.__module__})
    if callable(obj) and not isinstance(obj, typing.TypeVar):

        @functools.wraps(obj)
        def call(*args, **kwargs):
            _TOUCHED[0] = True
            return obj(*args, **kwargs)

        return call
    return obj


def substitution() -> dict[int, Any]:
    """Replace, in every loaded optax module, each public object gradtx shares by gradtx's."""
    import optax  # noqa: F401  (loads every public namespace)

    for o, _, _, _ in NAMESPACES:
        importlib.import_module(o)
    replacement: dict[int, Any] = {}
    for o, name, obj in public_names(base_types=False):
        if id(obj) in replacement:
            continue
        theirs = counterpart(o, name)
        if theirs is not None:
            replacement[id(obj)] = _touching(theirs)
    for (o, name), (g, gname) in PRIVATE_COUNTERPARTS.items():
        obj = getattr(importlib.import_module(o), name)
        replacement.setdefault(id(obj), getattr(importlib.import_module(g), gname))
    for module_name, module in list(sys.modules.items()):
        if not (module_name == "optax" or module_name.startswith("optax.")) or module is None:
            continue
        if any(module_name == m or module_name.startswith(m + ".") for m in OUT_OF_SCOPE):
            continue
        for attr, value in list(vars(module).items()):
            new = replacement.get(id(value))
            if new is not None and not attr.startswith("__"):
                setattr(module, attr, new)
    return replacement


# -- pytest hooks ---------------------------------------------------------------------------------

_MODE = os.environ.get("GRADTX_OPTAX_SUITE_MODE", "optax")
_RESULTS: dict[str, dict[str, Any]] = {}


def pytest_configure(config):
    if _MODE == "gradtx":
        substitution()


def pytest_collection_modifyitems(config, items):
    select = [f for f in os.environ.get("GRADTX_OPTAX_SUITE_SELECT", "").split(",") if f]
    if select:  # node-id prefixes relative to optax/ (the runner's --subset)
        keep = [i for i in items if any(i.nodeid.startswith(f"optax_tests/{f}") for f in select)]
        config.hook.pytest_deselected(items=[i for i in items if i not in keep])
        items[:] = keep
    if _MODE != "gradtx":
        return
    import pytest

    from .differences import skip_reason

    for item in items:
        reason = skip_reason(item.nodeid)
        if reason is not None:
            item.add_marker(pytest.mark.skip(reason=f"gradtx differs by design: {reason}"))


def pytest_runtest_setup(item):
    _TOUCHED[0] = False


def _signature(report) -> str:
    crash = getattr(report.longrepr, "reprcrash", None)
    text = crash.message if crash is not None else str(report.longrepr)
    first = text.strip().splitlines()[0] if text.strip() else ""
    return first[:200]


def pytest_runtest_logreport(report):
    entry = _RESULTS.setdefault(
        report.nodeid, {"nodeid": report.nodeid, "outcome": "passed", "touched": False}
    )
    if report.failed:
        if entry["outcome"] != "failed":
            entry["outcome"] = "failed"
            entry["signature"] = _signature(report)
    elif report.skipped and entry["outcome"] == "passed":
        entry["outcome"] = "skipped"
        longrepr = report.longrepr
        entry["signature"] = str(longrepr[2] if isinstance(longrepr, tuple) else longrepr)[:200]
    entry["touched"] = entry["touched"] or _TOUCHED[0]
    entry["seconds"] = round(entry.get("seconds", 0.0) + report.duration, 3)


def pytest_sessionfinish(session):
    out = os.environ.get("GRADTX_OPTAX_SUITE_OUT")
    config = session.config
    controller = getattr(config.option, "numprocesses", None) and not hasattr(config, "workerinput")
    if not out or controller:
        return  # the xdist controller: its workers write the results
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    with open(os.path.join(out, f"{_MODE}-{worker}.jsonl"), "w") as f:
        for entry in _RESULTS.values():
            f.write(json.dumps(entry) + "\n")
