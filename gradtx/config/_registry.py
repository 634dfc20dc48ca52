"""The registry of optimizer and schedule factories, filled from the catalog.

Names are case- and separator-insensitive: a name is compared after lower-casing it and removing
`_`, `-`, `.` and spaces, so `"AdamW"`, `"adam_w"` and `"adam-w"` are all `adamw`, and
`"nnabla_adam"` is `nnabla.adam`. The registry is filled on first use from the explicit catalog
(`_catalog.SECTIONS`):

- the top-level aliases of `gradtx.optimizers`;
- the optax.contrib optimizers of `gradtx.contrib`, under their bare name (`muon`) and as
  `contrib.<name>`; where the bare name is already a top-level gradtx name, `contrib.<name>` is
  the canonical name;
- the solvers of `gradtx.nnabla` and `gradtx.returnn` as `nnabla.<name>` and `returnn.<name>`
  (`nnabla.adam` is nnabla's Adam, `adam` is Optax's);
- the schedule constructors of `gradtx.schedules` (schedules have their own namespace; the Optax
  spellings such as `cosine_decay_schedule` are aliases of the same constructor).

Each entry carries the kind of each of its factory's arguments, read from its annotation
(`_kinds`).
"""

from __future__ import annotations

import difflib
import re
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ._errors import ConfigError, did_you_mean, shown
from ._kinds import KINDS, declared, params_of

REGISTRY_KINDS = ("optimizer", "schedule")
_SEPARATORS = re.compile(r"[\s_\-.]+")


def normalize(name: str) -> str:
    """The registry key of `name`: lower case, without `_`, `-`, `.` and spaces."""
    return _SEPARATORS.sub("", name.lower())


@dataclass
class Entry:
    """A registered factory: its canonical name, kind, origin, aliases, and the kind of each
    argument (`_kinds`; "any" for arguments it takes through `**kwargs`)."""

    name: str
    factory: Callable[..., Any]
    kind: str
    origin: str
    aliases: list[str] = field(default_factory=list)
    kinds: dict[str, str] = field(default_factory=dict)
    nullable: frozenset[str] = frozenset()


class _Registry:
    def __init__(self) -> None:
        self.entries: dict[str, dict[str, Entry]] = {k: {} for k in REGISTRY_KINDS}  # key -> entry
        self.names: dict[str, dict[str, str]] = {k: {} for k in REGISTRY_KINDS}  # key -> shown name
        self.discovered = False
        self.lock = threading.RLock()

    def add(
        self,
        kind: str,
        name: str,
        factory: Callable[..., Any],
        origin: str,
        aliases: Iterable[str] = (),
        *,
        overwrite: bool = False,
        kinds: tuple[dict[str, str], frozenset[str]] | None = None,
    ) -> Entry:
        entries, names = self.entries[kind], self.names[kind]
        key = normalize(name)
        if not key:
            raise ConfigError(f"register: the name must contain a letter or digit, got {name!r}")
        old = entries.get(key)
        if old is not None and old.factory is not factory and not overwrite:
            raise ConfigError(
                f"register: the {kind} name {name!r} is taken by {old.name!r} "
                f"({_describe(old.factory)}); pick another name or pass overwrite=True"
            )
        for alias in aliases:  # check every alias first: a refused call changes nothing
            taken = entries.get(normalize(alias))
            if overwrite or taken is None or taken is old or taken.factory is factory:
                continue
            raise ConfigError(
                f"register: the {kind} alias {alias!r} is taken by {taken.name!r}; pick "
                "another alias or pass overwrite=True"
            )
        if old is not None and old.name != name and normalize(old.name) != key:
            old.aliases = [a for a in old.aliases if normalize(a) != key]
        arg_kinds, nullable = kinds if kinds is not None else declared(kind, name, factory)
        entry = Entry(
            name=name,
            factory=factory,
            kind=kind,
            origin=origin,
            kinds=arg_kinds,
            nullable=nullable,
        )
        entries[key] = entry
        names[key] = name
        for alias in aliases:
            self.alias(kind, alias, entry, overwrite=overwrite)
        return entry

    def alias(self, kind: str, alias: str, entry: Entry, *, overwrite: bool = False) -> bool:
        entries = self.entries[kind]
        key = normalize(alias)
        old = entries.get(key)
        if old is not None and old is not entry:
            if old.factory is entry.factory:
                return False
            if not overwrite:
                raise ConfigError(
                    f"register: the {kind} alias {alias!r} is taken by {old.name!r}; pick "
                    "another alias or pass overwrite=True"
                )
        if old is None or old is not entry:
            entries[key] = entry
            self.names[kind][key] = alias
            if normalize(entry.name) != key:
                entry.aliases.append(alias)
        return True

    def canonical(self, kind: str) -> list[Entry]:
        seen: dict[int, Entry] = {}
        for entry in self.entries[kind].values():
            seen.setdefault(id(entry), entry)
        return sorted(seen.values(), key=lambda e: e.name)


_REGISTRY = _Registry()


def _describe(factory: Any) -> str:
    module = getattr(factory, "__module__", "?")
    return f"{module}.{getattr(factory, '__qualname__', type(factory).__name__)}"


def _discover() -> None:
    """Register the catalog's factories (`config._catalog`, imported here: it imports every
    optimizer module, which the registry's users need not load to register their own)."""
    from ._catalog import PREFIXED_ONLY, by_name, entries

    reg = _REGISTRY
    top_level: set[str] = set()
    seen: dict[int, Entry] = {}
    for section, name, fn in entries():
        kinds = declared(section.kind, f"{section.prefix}{name}", fn, names=by_name())
        if section.kind == "schedule":
            if id(fn) in seen:
                reg.alias("schedule", name, seen[id(fn)])
            else:
                seen[id(fn)] = reg.add("schedule", name, fn, section.origin, kinds=kinds)
        elif section.origin == "gradtx":
            top_level.add(normalize(name))
            reg.add("optimizer", name, fn, "gradtx", kinds=kinds)
        elif section.origin == "contrib":
            taken = normalize(name) in top_level or name in PREFIXED_ONLY
            canonical = f"contrib.{name}" if taken else name
            aliases = [] if taken else [f"contrib.{name}"]
            reg.add("optimizer", canonical, fn, "contrib", aliases, kinds=kinds)
        else:
            reg.add("optimizer", f"{section.prefix}{name}", fn, section.origin, kinds=kinds)


def _ensure() -> _Registry:
    if not _REGISTRY.discovered:
        with _REGISTRY.lock:
            if not _REGISTRY.discovered:
                user = [
                    (e.kind, e.name, e.factory, list(e.aliases), (e.kinds, e.nullable))
                    for kind in REGISTRY_KINDS
                    for e in _REGISTRY.canonical(kind)
                ]
                _discover()
                _REGISTRY.discovered = True
                for kind, name, factory, aliases, kinds in user:  # registered before discovery
                    _REGISTRY.add(kind, name, factory, "user", aliases, overwrite=True, kinds=kinds)
    return _REGISTRY


def _check_kind(who: str, kind: str) -> None:
    if kind not in REGISTRY_KINDS:
        raise ConfigError(f"{who}: kind must be one of {list(REGISTRY_KINDS)}, got {kind!r}")


def _user_kinds(
    factory: Callable[..., Any], kinds: Mapping[str, str] | None
) -> tuple[dict[str, str], frozenset[str]]:
    given = dict(kinds or {})
    try:
        params, var_kw = params_of(factory)
    except (TypeError, ValueError):
        params, var_kw = {}, True
    for arg, kind in given.items():
        if kind not in KINDS:
            raise ConfigError(
                f"register: the kind of {arg!r} must be one of {list(KINDS)}, got {kind!r}"
                f"{did_you_mean(kind, KINDS)}"
            )
        if arg not in params and not var_kw:
            raise ConfigError(
                f"register: kinds names {arg!r}, which the factory does not take"
                f"{did_you_mean(arg, params)}; its arguments are {list(params)}"
            )
    from ._catalog import by_name  # the kinds of argument names, read from every optimizer

    return declared("user", "", factory, given, names=by_name())


def register(
    name: str,
    factory: Callable[..., Any],
    *,
    aliases: Iterable[str] = (),
    kind: str = "optimizer",
    overwrite: bool = False,
    kinds: Mapping[str, str] | None = None,
) -> Callable[..., Any]:
    """Register a factory so that configs can name it.

    The factory's arguments become the config block's hyperparameters. How a config gives each
    is its kind (docs/config.md): the one given in `kinds`, else the one its annotation says
    (`ScalarOrSchedule` a number or a schedule block, `float` a number, `bool` a flag, ...: see
    `gradtx/config/_kinds.py`), else, for an argument annotated `Any` or not at all, the kind
    gradtx's own optimizers give that argument name (`learning_rate` a number or a schedule
    block, `mask` patterns, `nesterov` a flag, `mu_dtype` a dtype name, ...), else "any"
    (handed over unchecked). Names are case- and separator-insensitive.

    Args:
      name: the canonical name, e.g. `"my_adam"`.
      factory: a function returning a `GradientTransformation` (kind "optimizer") or a schedule
        `step -> value` (kind "schedule").
      aliases: other names for it.
      kind: "optimizer" or "schedule".
      overwrite: replace an existing factory of the same (normalized) name instead of raising.
      kinds: `{argument: kind}` for arguments whose annotation does not say their kind, e.g.
        `{"warmup": "schedule"}`; the kinds are "number", "int", "bool", "str", "dtype",
        "scalar_or_schedule", "schedule", "schedule_list", "optimizer", "mask", "int_list",
        "mapping", "rules" and "any".

    Returns:
      `factory`, so that `register` can be used as `register("x", fn)` or via `functools.partial`
      as a decorator.

    Example:
      >>> import gradtx
      >>> def my_sgd(learning_rate: float, nesterov: bool = False):
      ...     return gradtx.sgd(learning_rate, momentum=0.9, nesterov=nesterov)
      >>> _ = gradtx.register("my_sgd", my_sgd, aliases=["mysgd2"])
      >>> tx = gradtx.from_config({"optimizer": {"name": "My-SGD", "learning_rate": 0.1}})
    """
    _check_kind("register", kind)
    if not isinstance(name, str):
        raise ConfigError(f"register: name must be a string, got {name!r}")
    if not callable(factory):
        raise ConfigError(f"register: factory must be callable, got {type(factory).__name__}")
    if isinstance(aliases, str):
        aliases = [aliases]
    declared_kinds = _user_kinds(factory, kinds)
    with _REGISTRY.lock:
        _ensure().add(
            kind, name, factory, "user", list(aliases), overwrite=overwrite, kinds=declared_kinds
        )
    return factory


def lookup(name: Any, kind: str = "optimizer", path: str = "") -> Entry:
    """The entry registered under `name` (any spelling); a `ConfigError` with close matches."""
    reg = _ensure()
    label = "solver" if kind == "optimizer" else "schedule"
    if not isinstance(name, str):
        raise ConfigError(f"the {label} name must be a string, got {shown(name)}", path)
    entry = reg.entries[kind].get(normalize(name))
    if entry is None:
        if len(name) > 100:
            raise ConfigError(f"unknown {label} {shown(name)}", path)
        keys = list(reg.entries[kind])
        close = difflib.get_close_matches(normalize(name), keys, n=3, cutoff=0.6)
        matches: list[str] = []
        for key in close:
            canonical = reg.entries[kind][key].name
            if canonical not in matches:
                matches.append(canonical)
        hint = f" (did you mean {' or '.join(repr(s) for s in matches)}?)" if matches else ""
        raise ConfigError(
            f"unknown {label} {shown(name)}{hint}; `gradtx.available({kind!r})` lists them all",
            path,
        )
    return entry


def get_optimizer(name: str) -> Callable[..., Any]:
    """The optimizer factory registered under `name` (case- and separator-insensitive).

    Args:
      name: e.g. `"adamw"`, `"AdamW"`, `"adam_w"`, `"nnabla.adam"`, `"muon"`.

    Returns:
      The factory, e.g. `gradtx.adamw`.

    Raises:
      ConfigError: unknown name; the message lists close matches ("did you mean 'adamw'?").
    """
    return lookup(name, "optimizer").factory


def get_schedule(name: str) -> Callable[..., Any]:
    """The schedule constructor registered under `name` (case- and separator-insensitive).

    Args:
      name: e.g. `"warmup_cosine_decay"`, `"nnabla_step"`.

    Returns:
      The constructor, e.g. `gradtx.schedules.warmup_cosine_decay`.
    """
    return lookup(name, "schedule").factory


def available(kind: str = "optimizer") -> list[str]:
    """The canonical names of every registered optimizer (or schedule), sorted.

    Args:
      kind: "optimizer" or "schedule".

    Returns:
      A list of names; each is accepted by `get_optimizer` / a config's `name` field.
    """
    _check_kind("available", kind)
    return [e.name for e in _ensure().canonical(kind)]


def entries(kind: str = "optimizer") -> list[Entry]:
    """Every registered entry of `kind` (internal: the CLI and the tests read the aliases)."""
    return _ensure().canonical(kind)


__all__ = [
    "Entry",
    "available",
    "entries",
    "get_optimizer",
    "get_schedule",
    "lookup",
    "normalize",
    "register",
]
