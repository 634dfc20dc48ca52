"""The catalog: what the config registry offers, read from the modules' `__all__`.

Each section names a module, the kind of factory, the registry prefix and the names it
contributes: the `__all__` of `gradtx.optimizers`, of the nnabla and RETURNN solver modules and of
`gradtx.schedules`, and the optimizers of `gradtx.contrib.__all__`. Nothing is listed here by
hand: a new optimizer is offered to configs by exporting it (a test checks that every public alias
is).
"""

from __future__ import annotations

import collections
import functools
import inspect
from collections.abc import Callable
from types import ModuleType
from typing import Any, NamedTuple

from .. import contrib, optimizers, schedules, transforms, wrappers
from ..optimizers import _nnabla, _returnn
from ._kinds import kind_of, own, resolved


class Section(NamedTuple):
    """Names of one module offered under one prefix (`""`: top level)."""

    kind: str
    origin: str
    prefix: str
    module: ModuleType
    names: tuple[str, ...]


def _is_optimizer(name: str, obj: Any) -> bool:
    """A function that `gradtx.contrib` defines and annotates as returning a transformation, and
    not a primitive (`scale_by_*`: primitives are offered to configs nowhere, as gradtx's are
    not): its optimizers and wrappers, not its helpers (`schedule_free_eval_params`)."""
    if not inspect.isfunction(obj) or name.startswith("scale_by_"):
        return False
    if not obj.__module__.startswith(f"{contrib.__name__}."):
        return False  # a re-export (`reduce_on_plateau` is a primitive of gradtx.transforms)
    returns = resolved(obj, inspect.signature(obj).return_annotation)
    return kind_of(returns)[0] == "optimizer"


# gradtx.contrib's optimizers and wrappers (optax.contrib's, and those Optax lacks: mars, laprop,
# cautious, the matrix optimizers soap, shampoo, kron, dion, ...), under their bare names where
# gradtx has none.
CONTRIB = tuple(sorted(n for n in contrib.__all__ if _is_optimizer(n, getattr(contrib, n))))

# contrib names that gradtx's top level gives to another object (`gradtx.normalize` is a
# primitive): registered only as `contrib.<name>`.
PREFIXED_ONLY = tuple(
    n
    for n in CONTRIB
    if any(getattr(m, n, None) not in (None, getattr(contrib, n)) for m in (transforms, wrappers))
)

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


@functools.cache
def by_name() -> dict[str, str]:
    """`{argument name: kind}`: the kind that the catalog's factories most often give an argument
    name (for the arguments of a factory that its annotations say nothing of)."""
    counts: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for section, name, factory in entries():
        for argument, kind in own(section.kind, f"{section.prefix}{name}", factory).items():
            if kind is not None:
                counts[argument][kind] += 1
    return {a: c.most_common(1)[0][0] for a, c in sorted(counts.items())}


__all__ = ["CONTRIB", "PREFIXED_ONLY", "SCHEDULES", "SECTIONS", "Section", "by_name", "entries"]
