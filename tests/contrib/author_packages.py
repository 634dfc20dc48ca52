"""Import the optimizer modules of the authors' packages (apollo-torch for APOLLO, fira for
Fira, NVIDIA's emerging-optimizers for NorMuon) without their heavy dependencies, for the
reference tests.

Both packages are installed without their dependencies: `apollo_torch/__init__.py` imports
its 8-bit optimizers, hence bitsandbytes (CUDA), and every optimizer module does
`from transformers.utils.versions import require_version`, only to check the torch version.
`load` therefore imports one module of a package under a private, synthetic parent package
(a `types.ModuleType` whose `__path__` is the installed package's folder, so the package's
`__init__` never runs and the modules' relative imports resolve inside it), with a stand-in
`transformers.utils.versions` (a `require_version` that does nothing) where the real
transformers is not importable. The sys.modules entries it makes are removed again once the
module is loaded (the loaded module keeps its references), so nothing else sees them; the
real packages, if imported elsewhere, are untouched.

emerging-optimizers (0.3.0) imports itself by absolute names, so `load(..., absolute=True)`
imports its module under its real name, with two stand-ins while it does: its `triton_kernels`
module (the Triton SYRK kernels, CUDA only and used only with `use_syrk=True`; it imports
`triton`, which the CPU venv does not have) is a module saying they are absent
(`HAS_TRITON_340 = False`), and, on Python < 3.12 (the package asks for 3.12 only for it; the
Makefile installs it with `--ignore-requires-python`), `typing.override` is the identity
decorator it is at run time. Both, and every module of the package, leave sys.modules / typing
again once the module is loaded.

Where torch or a package is missing (the version lanes have no torch), `load` skips the calling
test (pytest.skip, as `pytest.importorskip` does)."""

from __future__ import annotations

import functools
import importlib
import importlib.util
import sys
import types
import typing

import numpy as np
import pytest

_PREFIX = "_gradtx_authors_"  # the synthetic parents: _gradtx_authors_apollo_torch, ...
_STUBS = ("transformers", "transformers.utils", "transformers.utils.versions")


def _transformers_importable() -> bool:
    try:
        importlib.import_module("transformers.utils.versions")
    except Exception:  # absent, or present but broken: the stand-in will do
        return False
    return True


def _stand_in_transformers() -> dict[str, types.ModuleType]:
    """`transformers.utils.versions.require_version` as a no-op (the modules only call it to
    check "torch>=1.5.0", which the installed torch satisfies)."""
    mods = {name: types.ModuleType(name) for name in _STUBS}
    mods["transformers"].__path__ = []  # type: ignore[attr-defined]
    mods["transformers.utils"].__path__ = []  # type: ignore[attr-defined]
    mods["transformers"].utils = mods["transformers.utils"]  # type: ignore[attr-defined]
    mods["transformers.utils"].versions = mods["transformers.utils.versions"]  # type: ignore[attr-defined]
    mods["transformers.utils.versions"].require_version = lambda *a, **k: None  # type: ignore[attr-defined]
    return mods


def _import_isolated(name: str, added: dict[str, types.ModuleType], owned: str) -> types.ModuleType:
    """Import `name` with the modules `added` in sys.modules, then undo: the added entries, and
    every module newly imported under the package `owned`, leave sys.modules again (the loaded
    module keeps its references); entries the added ones replaced are restored."""
    saved = {n: sys.modules[n] for n in added if n in sys.modules}
    before = set(sys.modules)
    sys.modules.update(added)
    try:
        return importlib.import_module(name)
    finally:
        for n in set(sys.modules) - before:
            if n == owned or n.startswith(owned + "."):
                del sys.modules[n]
        for n in added:
            sys.modules.pop(n, None)
        sys.modules.update(saved)


@functools.cache
def _load(package: str, module: str) -> types.ModuleType | str:
    """The module `package.module`, or the reason it cannot be loaded."""
    if importlib.util.find_spec("torch") is None:
        return "torch is not installed"
    spec = importlib.util.find_spec(package)  # a top-level name: its __init__ is not run
    if spec is None or not spec.submodule_search_locations:
        return f"{package} is not installed"
    parent_name = _PREFIX + package
    parent = types.ModuleType(parent_name)
    parent.__path__ = list(spec.submodule_search_locations)  # type: ignore[attr-defined]
    parent.__package__ = parent_name
    added = {parent_name: parent}
    if not _transformers_importable():
        added.update(_stand_in_transformers())
    try:
        return _import_isolated(f"{parent_name}.{module}", added, parent_name)
    except ImportError as e:
        return f"cannot import {package}.{module}: {e}"


@functools.cache
def _load_absolute(package: str, module: str) -> types.ModuleType | str:
    """The module `package.module` imported under its own name (see the module docstring), or
    the reason it cannot be."""
    for needed in ("torch", "absl", package):
        if importlib.util.find_spec(needed) is None:
            return f"{needed} is not installed"
    kernels = types.ModuleType(f"{package}.triton_kernels")
    kernels.HAS_TRITON_340 = False  # type: ignore[attr-defined]
    added_override = not hasattr(typing, "override")
    if added_override:
        typing.override = lambda f: f  # type: ignore[attr-defined]
    try:
        return _import_isolated(f"{package}.{module}", {kernels.__name__: kernels}, package)
    except ImportError as e:
        return f"cannot import {package}.{module}: {e}"
    finally:
        if added_override:
            del typing.override  # type: ignore[attr-defined]


def load(package: str, module: str, *, absolute: bool = False) -> types.ModuleType:
    """`package.module` of an installed authors' package, imported on its own under a private
    parent, or under its own name with `absolute=True` (a package that imports itself by
    absolute names, as NVIDIA's emerging-optimizers does; see the module docstring); skips the
    calling test where torch or the package is missing."""
    pytest.importorskip("torch")
    mod = (_load_absolute if absolute else _load)(package, module)
    if isinstance(mod, str):
        pytest.skip(mod)
    return mod


def decay_recursions(params: dict, plain: dict, lr: float, wd: float) -> tuple[dict, dict]:
    """The two weight-decay recursions built from an undecayed run's params after each step
    (`plain[k]`, shape (steps, *shape)), in float64: the authors' packages decay after the
    step, w <- (w + d)(1 - lr wd); AdamW's (the papers', gradtx's) is w <- w(1 - lr wd) + d.
    Valid where the steps d do not depend on the params (the gradients are given)."""
    after, adamw = {}, {}
    for k, p0 in params.items():
        steps = np.diff(np.concatenate([p0[None], plain[k]]).astype(np.float64), axis=0)
        a = b = p0.astype(np.float64)
        after[k], adamw[k] = [], []
        for d in steps:
            a = (a + d) * (1 - lr * wd)
            b = b * (1 - lr * wd) + d
            after[k].append(a)
            adamw[k].append(b)
        after[k], adamw[k] = np.stack(after[k]), np.stack(adamw[k])
    return after, adamw
