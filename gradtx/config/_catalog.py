"""The catalog: what the config registry offers, listed explicitly by module.

Each entry names a module, the kind of factory, the registry prefix and the names it
contributes. Nothing is discovered by sniffing return annotations or name prefixes: a new
optimizer is offered to configs by listing it here (a test checks that every public alias is).
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any, NamedTuple

from .. import contrib, optimizers, schedules
from ..optimizers import _nnabla, _returnn


class Section(NamedTuple):
    """Names of one module offered under one prefix (`""`: top level)."""

    kind: str
    origin: str
    prefix: str
    module: ModuleType
    names: tuple[str, ...]


# gradtx.contrib's optimizers and wrappers (optax.contrib's, and those Optax lacks: mars, laprop,
# cautious, the matrix optimizers soap, shampoo, kron, dion, ...),
# under their bare names where gradtx has none.
CONTRIB = (
    "acprop",
    "adam_mini",
    "ademamix",
    "adopt",
    "apollo",
    "cautious",
    "cautious_adamw",
    "cocob",
    "dadapt_adamw",
    "differentially_private_aggregate",
    "dion",
    "dog",
    "dowg",
    "dpsgd",
    "fira",
    "galore",
    "hutchinson_estimator_diag_hessian",
    "kron",
    "laprop",
    "madgrad",
    "mars",
    "mechanize",
    "momo",
    "momo_adam",
    "muon",
    "normalize",
    "normuon",
    "prodigy",
    "sam",
    "schedule_free",
    "schedule_free_adamw",
    "schedule_free_sgd",
    "scion",
    "shampoo",
    "simplified_ademamix",
    "soap",
    "sophia",
)

# contrib names that gradtx's top level gives to another object (`gradtx.normalize` is a
# primitive): registered only as `contrib.<name>`.
PREFIXED_ONLY = ("normalize",)

# Schedules by their gradtx names; Optax's names for the same functions become aliases.
SCHEDULES = tuple(n for n in schedules.__all__ if n not in ("plot", "NamedSchedule"))

SECTIONS = (
    Section("optimizer", "gradtx", "", optimizers, tuple(optimizers.__all__)),
    Section("optimizer", "contrib", "contrib.", contrib, CONTRIB),
    Section("optimizer", "nnabla", "nnabla.", _nnabla, tuple(_nnabla.__all__)),
    Section("optimizer", "returnn", "returnn.", _returnn, tuple(_returnn.__all__)),
    Section("schedule", "gradtx", "", schedules, SCHEDULES),
)


def entries() -> list[tuple[Section, str, Callable[..., Any]]]:
    """Every `(section, name, factory)` of the catalog, in order."""
    return [(s, name, getattr(s.module, name)) for s in SECTIONS for name in s.names]


__all__ = ["CONTRIB", "PREFIXED_ONLY", "SCHEDULES", "SECTIONS", "Section", "entries"]
