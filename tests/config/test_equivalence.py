"""Every registered optimizer built from a config equals the one built in Python.

Both sides' 50 steps on a small quadratic lower to the same program (StableHLO text, traced, not
compiled: equal programs compute equal numbers), and three eager steps of the config-built
optimizer move the params (so the comparison is not vacuous). The registry is filled by
discovery, so optimizers added to gradtx later are covered without editing this file; one that
needs arguments a config cannot give by default gets them in `SETUP` (a missing entry fails with
the name and the missing argument).
"""

from __future__ import annotations

import inspect
from typing import Any

import jax
import numpy as np
import pytest

import gradtx
from gradtx import config as gc

from .common import eager_steps, lowered_trajectory, small_params


def _squared_gradient() -> gradtx.GradientTransformation:
    """A Hessian-diagonal estimate for Sophia that needs no objective (registered below)."""
    return gradtx.stateless(lambda g, p: jax.tree.map(lambda x: x * x, g))


gc.register("test_squared_gradient", _squared_gradient)

SGD = {"name": "sgd", "learning_rate": 0.05}
# name -> (config hyperparameters, update extra args, per-example gradients)
SETUP: dict[str, tuple[dict[str, Any], dict[str, Any], bool]] = {
    "lbfgs": ({"learning_rate": 0.5, "memory_size": 3, "linesearch": None}, {}, False),
    "sophia": (
        {"learning_rate": 0.01, "hessian_diagonal_fn": {"name": "test_squared_gradient"}},
        {},
        False,
    ),
    "sam": ({"optimizer": SGD, "adv_optimizer": {"name": "sgd", "learning_rate": 0.01}}, {}, False),
    "mechanize": ({"base_optimizer": SGD}, {}, False),
    "cautious": ({"tx": {"name": "adam", "learning_rate": 0.05}}, {}, False),
    "split_real_and_imaginary": ({"inner": SGD}, {}, False),
    "schedule_free": ({"base_optimizer": SGD, "learning_rate": 0.05}, {}, False),
    "dpsgd": (
        {"learning_rate": 0.05, "l2_norm_clip": 1.0, "noise_multiplier": 0.1, "seed": 0},
        {},
        True,
    ),
    "differentially_private_aggregate": (
        {"l2_norm_clip": 1.0, "noise_multiplier": 0.1, "key": 0},
        {},
        True,
    ),
    "hutchinson_estimator_diag_hessian": ({}, {"obj_fn": True}, False),
    "galore": ({"learning_rate": 0.05, "rank": 2, "update_proj_gap": 5}, {}, False),
    "adadelta": ({"learning_rate": 0.5}, {}, False),
}


def _fill_required(name: str) -> dict[str, Any]:
    factory = gc.get_optimizer(name)
    out = {}
    for p in inspect.signature(factory).parameters.values():
        if p.default is inspect.Parameter.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            if p.name != "learning_rate":
                pytest.fail(f"{name}: add its required argument {p.name!r} to SETUP")
            out["learning_rate"] = 0.05
    return out


def _python_kwargs(hyper: dict[str, Any]) -> dict[str, Any]:
    """The same hyperparameters as Python objects (nested blocks built by hand)."""
    out = {}
    for key, value in hyper.items():
        if isinstance(value, dict):
            kwargs = {k: v for k, v in value.items() if k != "name"}
            out[key] = gc.get_optimizer(value["name"])(**kwargs)
        else:
            out[key] = value
    return out


# every registered name, less helpers that other test modules register for their own tests
NAMES = [n for n in gc.available() if not n.startswith(("test_", "my_"))]


@pytest.mark.parametrize("name", NAMES)
def test_config_equals_python(name):
    hyper, extra, batch = SETUP.get(name, (None, {}, False))
    if hyper is None:
        hyper = _fill_required(name)
    from_cfg = gc.from_config({"optimizer": {"name": name, **hyper}})
    by_hand = gc.get_optimizer(name)(**_python_kwargs(hyper))
    assert isinstance(from_cfg, gradtx.GradientTransformation)
    params = small_params()
    ours = lowered_trajectory(from_cfg, params, extra=extra, batch_axis=batch)
    ref = lowered_trajectory(by_hand, params, extra=extra, batch_axis=batch)
    assert ours == ref, f"{name}: the config-built optimizer compiles to another program"
    updates = eager_steps(from_cfg, params, extra=extra, batch_axis=batch)
    for u in jax.tree.leaves(updates):
        assert np.all(np.isfinite(np.asarray(u))), name
    moved = sum(float(np.abs(np.asarray(u)).sum()) for u in jax.tree.leaves(updates))
    assert moved > 0, f"{name}: no updates, the comparison would be vacuous"


def test_every_alias_and_schedule_is_registered():
    """Independent of the discovery code: every alias module's __all__, every nnabla / RETURNN
    solver, every contrib optimizer, every schedule constructor."""
    import importlib
    import pkgutil

    import gradtx.optimizers as opt_pkg

    keys = {e.factory for e in gc._registry.entries("optimizer")}
    for info in pkgutil.iter_modules(opt_pkg.__path__):
        module = importlib.import_module(f"gradtx.optimizers.{info.name}")
        for n in getattr(module, "__all__", ()):
            assert getattr(module, n) in keys, n
    for ns in (gradtx.nnabla, gradtx.returnn):
        for n in ns.__all__:
            if not n.startswith("from_"):
                assert getattr(ns, n) in keys, f"{ns.__name__}.{n}"
    for n in ("muon", "prodigy", "schedule_free_adamw", "sophia", "adopt"):
        assert gc.get_optimizer(n) is getattr(gradtx.contrib, n)
        assert gc.get_optimizer(f"contrib.{n}") is getattr(gradtx.contrib, n)
    schedules = {e.factory for e in gc._registry.entries("schedule")}
    for n in gradtx.schedules.__all__:
        fn = getattr(gradtx.schedules, n)
        if n != "plot" and inspect.isfunction(fn):
            assert fn in schedules, n
