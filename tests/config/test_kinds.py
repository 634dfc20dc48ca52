"""Declared argument kinds (config/_kinds.py): every argument of every catalog factory has one,
the tables are consistent, and the kind decides what a config may hold, the same for every
factory taking that argument."""

from __future__ import annotations

import pytest

import gradtx
from gradtx import config as gc
from gradtx.config import _catalog, _kinds, _registry


def _catalog_factories():
    return [(s.kind, f"{s.prefix}{name}", fn) for s, name, fn in _catalog.entries()]


def test_every_argument_of_every_catalog_factory_has_a_declared_kind():
    missing = {
        name: _kinds.undeclared(kind, name, fn)
        for kind, name, fn in _catalog_factories()
        if _kinds.undeclared(kind, name, fn)
    }
    assert not missing, (
        f"declare the kinds of these arguments in gradtx/config/_kinds.py: {missing}"
    )


def test_a_new_argument_without_a_kind_is_reported():
    def new_optimizer(learning_rate, frobnication_level=3):
        return gradtx.sgd(learning_rate)

    assert _kinds.undeclared("optimizer", "new_optimizer", new_optimizer) == ["frobnication_level"]


def test_the_declaration_tables_are_consistent():
    listed = [n for names in _kinds._BY_KIND.values() for n in names]
    assert len(listed) == len(set(listed)), "an argument name is listed under two kinds"
    assert set(_kinds.ARGUMENT_KINDS.values()) <= set(_kinds.KINDS)
    catalog = {(kind, name): fn for kind, name, fn in _catalog_factories()}
    for table in (_kinds.OVERRIDES, _kinds.NULLABLE):
        for kind, factories in table.items():
            for name, args in factories.items():
                assert (kind, name) in catalog, f"{name} is not a catalog {kind}"
                params, _ = _kinds.params_of(catalog[kind, name])
                assert set(args) <= set(params), f"{name} has no argument {set(args) - set(params)}"
    for factories in _kinds.OVERRIDES.values():
        for name, args in factories.items():
            for arg, arg_kind in args.items():
                assert arg_kind in _kinds.KINDS
                assert arg_kind != _kinds.ARGUMENT_KINDS.get(arg), f"{name}.{arg}: not an override"


def test_registry_entries_carry_the_declared_kinds():
    adamw = _registry.lookup("adamw")
    assert adamw.kinds["mask"] == "mask"
    assert adamw.kinds["learning_rate"] == "scalar_or_schedule"
    assert "mask" in adamw.nullable
    assert _registry.lookup("returnn.amsgrad").kinds["decay"] == "bool"
    assert _registry.lookup("rmsprop").kinds["decay"] == "number"
    assert _registry.lookup("muon").kinds["weight_decay"] == "number"  # contrib, bare name
    assert "clipping_threshold" in _registry.lookup("adafactor").nullable
    assert _registry.lookup("cosine_decay_schedule", "schedule").kinds["decay_steps"] == "int"


# every optimizer with a `mask` argument (adamw, adan, lion, the contrib ones, ...)
MASKED = sorted(e.name for e in _registry.entries("optimizer") if e.kinds.get("mask") == "mask")


def test_adan_refuses_a_mask_that_is_no_pattern_like_adamw():
    """Regression: adan's `mask: Any` was read as "any" from its annotation and accepted 3."""
    for name in ("adamw", "adan"):
        with pytest.raises(gc.ConfigError, match=r"^optimizer\.mask: must be a glob pattern"):
            gc.from_config({"optimizer": {"name": name, "learning_rate": 1e-3, "mask": 3}})
    tx = gc.from_config({"optimizer": {"name": "adan", "learning_rate": 1e-3, "mask": "**/w"}})
    assert tx.config["optimizer"]["mask"] == "**/w"


@pytest.mark.parametrize("name", MASKED)
def test_every_mask_argument_is_checked_alike(name):
    with pytest.raises(gc.ConfigError) as info:
        gc.from_config({"optimizer": {"name": name, "mask": 3}})
    assert info.value.path == "optimizer.mask"
    assert info.value.message.startswith("must be a glob pattern")


def test_register_takes_kinds_and_names_the_others_by_argument_name():
    def warm_sgd(learning_rate, warmup=None, nesterov=False, knob=0):
        return gradtx.sgd(learning_rate, nesterov=nesterov)

    gc.register("test_warm_sgd", warm_sgd, kinds={"warmup": "schedule"}, overwrite=True)
    entry = _registry.lookup("test_warm_sgd")
    assert entry.kinds == {
        "learning_rate": "scalar_or_schedule",
        "warmup": "schedule",
        "nesterov": "bool",
        "knob": "any",
    }
    with pytest.raises(gc.ConfigError, match=r"^optimizer\.warmup: must be a schedule block"):
        gc.from_config({"optimizer": {"name": "test_warm_sgd", "learning_rate": 0.1, "warmup": 3}})
    with pytest.raises(gc.ConfigError, match=r"must be one of .*got 'schedul' \(did you mean"):
        gc.register("test_bad_kind", warm_sgd, kinds={"warmup": "schedul"})
    with pytest.raises(gc.ConfigError, match=r"does not take \(did you mean 'warmup'"):
        gc.register("test_bad_kind", warm_sgd, kinds={"warmpu": "schedule"})
