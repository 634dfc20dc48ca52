"""Argument kinds (config/_kinds.py), read from the annotations: every argument of every catalog
factory has one, the few given by hand are consistent, and the kind decides what a config may
hold, the same for every factory taking that argument."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

import pytest

import gradtx
from gradtx import config as gc
from gradtx._base._typing import ArrayLike, DType, Mask, MaskOrFn, ScalarOrSchedule, Schedule, Seed
from gradtx.config import _catalog, _kinds, _registry
from gradtx.state._quantize import MomentDType


def _catalog_factories():
    return [(s.kind, f"{s.prefix}{name}", fn) for s, name, fn in _catalog.entries()]


# Arguments still annotated `Any`, for which no type alias says their kind yet (dimension numbers,
# Newton-Schulz coefficients, scion's per-leaf norms and radii, weight decays that take per-leaf
# trees, Sophia's optional seed): their kinds are their names' (`_catalog.by_name`). The list may
# only shrink.
STILL_ANY = {
    "contrib.apollo": {"weight_dimension_numbers"},
    "contrib.dion": {"weight_decay"},
    "contrib.fira": {"weight_dimension_numbers"},
    "contrib.galore": {"weight_decay", "weight_dimension_numbers"},
    "contrib.hutchinson_estimator_diag_hessian": {"random_seed"},
    "contrib.muon": {"ns_coeffs"},
    "contrib.normuon": {"ns_coeffs"},
    "contrib.scion": {"gluon_l0", "gluon_l1", "norm", "ns_coeffs", "radius"},
}


def test_every_argument_of_every_catalog_factory_has_a_kind_from_its_annotation():
    missing = {}
    for kind, name, fn in _catalog_factories():
        left = set(_kinds.undeclared(kind, name, fn)) - STILL_ANY.get(name, set())
        if left:
            missing[name] = sorted(left)
    assert not missing, (
        f"annotate these arguments with a type that says their kind (gradtx/config/_kinds.py): "
        f"{missing}"
    )


def test_a_new_argument_without_a_kind_is_reported():
    def new_optimizer(learning_rate: ScalarOrSchedule, frobnication_level: Any = 3, knob=1):
        return gradtx.sgd(learning_rate)

    assert _kinds.undeclared("optimizer", "new_optimizer", new_optimizer) == [
        "frobnication_level",
        "knob",
    ]


@pytest.mark.parametrize(
    ("annotation", "expected"),
    [
        (ScalarOrSchedule, ("scalar_or_schedule", False)),
        (ScalarOrSchedule | None, ("scalar_or_schedule", True)),
        (float | Schedule, ("scalar_or_schedule", False)),
        (Schedule, ("schedule", False)),
        (Callable[[Any], ArrayLike], ("schedule", False)),
        (Callable[[Any, Any], ArrayLike], ("any", False)),
        (Sequence[Schedule], ("schedule_list", False)),
        (ArrayLike, ("number", False)),
        (ArrayLike | None, ("number", True)),
        (float, ("number", False)),
        (int | float, ("number", False)),
        (int, ("int", False)),
        (int | None, ("int", True)),
        (Seed | None, ("int", True)),
        (bool, ("bool", False)),
        (str, ("str", False)),
        (Literal["a", "b"], ("str", False)),
        (DType, ("dtype", False)),
        (MomentDType | None, ("dtype", True)),
        (Mask | None, ("mask", True)),
        (MaskOrFn, ("mask", True)),
        (gradtx.GradientTransformation, ("optimizer", False)),
        (gradtx.GradientTransformation | None, ("optimizer", True)),
        (Sequence[int], ("int_list", False)),
        (tuple[int, ...], ("int_list", False)),
        (tuple[ArrayLike, ArrayLike], ("any", False)),
        (Mapping[int, float] | None, ("mapping", True)),
        (dict, ("mapping", False)),
        (Callable[[Any], Any], ("any", False)),
        (gradtx.contrib.MuonDimensionNumbers | Any | None, ("any", True)),
        (Any, (None, False)),
        (Any | None, (None, True)),
    ],
)
def test_the_kind_of_an_annotation(annotation, expected):
    assert _kinds.kind_of(annotation) == expected


def test_an_annotation_written_as_text_is_resolved_in_the_factory_module():
    warmup = gradtx.schedules.warmup
    assert isinstance(_kinds.signature(warmup).parameters["schedule"].annotation, str)
    assert _kinds.declared("schedule", "warmup", warmup)[0]["schedule"] == "schedule"

    def unresolvable(learning_rate: NoSuchType = 0.1):  # noqa: F821
        return gradtx.sgd(learning_rate)

    assert _kinds.undeclared("optimizer", "unresolvable", unresolvable) == ["learning_rate"]


def test_the_explicit_table_names_real_arguments_and_says_what_annotations_do_not():
    catalog = {(kind, name): fn for kind, name, fn in _catalog_factories()}
    for kind, factories in _kinds.EXPLICIT.items():
        for name, args in factories.items():
            assert (kind, name) in catalog, f"{name} is not a catalog {kind}"
            params, _ = _kinds.params_of(catalog[kind, name])
            assert set(args) <= set(params), f"{name} has no argument {set(args) - set(params)}"
            annotated = _kinds._annotated(catalog[kind, name])
            for arg, arg_kind in args.items():
                assert arg_kind in _kinds.KINDS
                assert annotated[arg][0] != arg_kind, f"{name}.{arg}: its annotation says it"


def test_the_kind_of_an_argument_name_is_the_one_most_catalog_factories_give_it():
    names = _catalog.by_name()
    assert names["learning_rate"] == "scalar_or_schedule"
    assert names["weight_decay"] == "scalar_or_schedule"  # a number only in a few contrib ones
    assert names["mu_dtype"] == "dtype"
    assert names["nesterov"] == "bool"
    assert names["decay"] == "number"  # a flag only in returnn.amsgrad
    assert set(names.values()) <= set(_kinds.KINDS)


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
    # annotated `ScalarOrSchedule` (it takes a schedule), `ArrayLike` (rprop refuses one)
    assert _registry.lookup("schedule_free_adamw").kinds["learning_rate"] == "scalar_or_schedule"
    assert _registry.lookup("rprop").kinds["learning_rate"] == "number"
    assert _registry.lookup("contrib.dion").kinds["weight_decay"] == "scalar_or_schedule"  # table
    assert _registry.lookup("adam").kinds["mu_dtype"] == "dtype"  # `MomentDType | None`
    assert "mu_dtype" in _registry.lookup("adam").nullable


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
