"""Sweeps in a config: a `sweep` section gives lists of values, and the config builds a
population of K members, one per combination (`grid`) or per position (`zip`).

    optimizer: {name: adamw, b2: 0.95}
    sweep:
      mode: grid                          # or zip; grid when not given
      values:
        optimizer.learning_rate: [1.0e-4, 3.0e-4, 1.0e-3]
        optimizer.weight_decay: [0.0, 0.1]

A swept value is named by its config path (the paths errors and `describe` show), never inside
the value itself: arguments that take lists (`boundaries`, `milestones`) keep their meaning. A
swept path is not also given in the config (one place per value). Member k's config is the
config with member k's values at the swept paths (`member_configs`); each member is validated and
built as that config would be on its own, and the population is
`gradtx.population(tx_0, hyperparams)` with every member's `gradtx.hyperparameters` stacked
(the numbers that differ between members as arrays over them, the shared ones as they are).
A swept value must reach only hyperparameters of the built optimizer (numbers the population
holds in its state); one that sets its structure (`accumulate.k`, a flag) is refused.
"""

from __future__ import annotations

import copy
import itertools
import math
import re
from collections.abc import Callable, Mapping
from typing import Any

import jax
import numpy as np

from ..wrappers import population
from ..wrappers._hyperparameters import hyperparameters, skeleton
from ._build import build
from ._errors import ConfigError, did_you_mean, join, shown
from ._kinds import params_of
from ._registry import lookup

MODES = ("grid", "zip")
KEYS = ("mode", "values")
MAX_MEMBERS = 4096  # each member is validated and built once (about 2 ms each)

Path = tuple[str | int, ...]
_PART = re.compile(r"([^.\[\]]+)((?:\[\d+\])*)")


# --------------------------------------------------------------------------------------------
# Config paths
# --------------------------------------------------------------------------------------------


def parse_path(text: str) -> Path | None:
    """`"optimizer.learning_rate.schedules[1].peak_value"` as its keys and list indices."""
    tokens: list[str | int] = []
    for part in text.split("."):
        match = _PART.fullmatch(part)
        if match is None:
            return None
        tokens.append(match.group(1))
        tokens.extend(int(i) for i in re.findall(r"\d+", match.group(2)))
    return tuple(tokens)


def path_text(path: Path) -> str:
    out = ""
    for token in path:
        out = f"{out}[{token}]" if isinstance(token, int) else f"{out}.{token}" if out else token
    return out


def _key(mapping: Mapping[Any, Any], token: str) -> Any:
    """The key of `mapping` that `token` names (`"30000"` names the integer key 30000)."""
    if token in mapping:
        return token
    return next((k for k in mapping if str(k) == token), None)


def _get(config: Any, path: Path) -> tuple[bool, Any]:
    node = config
    for token in path:
        if isinstance(token, int):
            if not isinstance(node, list) or token >= len(node):
                return False, None
            node = node[token]
        else:
            key = _key(node, token) if isinstance(node, Mapping) else None
            if key is None:
                return False, None
            node = node[key]
    return True, node


def set_path(config: dict[str, Any], path: Path, value: Any, where: str) -> None:
    """Put `value` at `path`, adding the mappings on the way that the config does not have."""
    node: Any = config
    for i, token in enumerate(path):
        last = i == len(path) - 1
        if isinstance(token, int):
            if not isinstance(node, list) or token >= len(node):
                raise ConfigError(
                    f"{path_text(path[:i]) or 'the config'} has no item [{token}] to set", where
                )
            node = node[token]
            continue
        if not isinstance(node, dict):
            raise ConfigError(
                f"cannot set it: {path_text(path[:i])} is {shown(node)} in the config, not a "
                "mapping",
                where,
            )
        key = _key(node, token)
        if last:
            node[token if key is None else key] = value
        else:
            if key is None:
                key = token
                node[key] = {}
            node = node[key]


def _delete(config: dict[str, Any], path: Path, added: set[Path]) -> None:
    """Remove the value at `path`, and the mappings on the way that `set_path` added (`added`)
    and that are left empty."""
    for depth in range(len(path), 0, -1):
        if depth < len(path) and path[:depth] not in added:
            return
        found, parent = _get(config, path[: depth - 1])
        token = path[depth - 1]
        key = _key(parent, str(token)) if found and isinstance(parent, Mapping) else None
        if key is None or (depth < len(path) and parent[key] != {}):
            return
        del parent[key]


# --------------------------------------------------------------------------------------------
# Validation
# --------------------------------------------------------------------------------------------


def _suggestions(name: str, candidates: list[str]) -> str:
    ends = [c for c in candidates if c.endswith(f".{name}")]
    if ends:
        return f" (did you mean {' or '.join(repr(c) for c in ends[:3])}?)"
    return did_you_mean(name, candidates)


def _candidates(base: Mapping[str, Any], sections: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Config paths a sweep may name, for messages: the solver's arguments and section keys."""
    out = []
    block = base.get("optimizer")
    if isinstance(block, Mapping) and isinstance(block.get("name"), str):
        try:
            params, _ = params_of(lookup(block["name"]).factory)
            out += [f"optimizer.{p}" for p in params]
        except ConfigError:
            pass
    out += [f"{s}.{k}" for s, keys in sections.items() for k in keys]
    return out


def _paths(
    values: Any, base: Mapping[str, Any], sections: Mapping[str, Mapping[str, Any]]
) -> dict[Path, list[Any]]:
    """`sweep.values` checked: config paths to non-empty lists of numbers."""
    where = "sweep.values"
    if not isinstance(values, Mapping) or not values:
        raise ConfigError(
            "must be a mapping {config path: [values]}, e.g. {optimizer.learning_rate: "
            f"[1.0e-4, 1.0e-3]}}, got {'an empty mapping' if values == {} else shown(values)}",
            where,
        )
    out: dict[Path, list[Any]] = {}
    for key, column in values.items():
        if not isinstance(key, str):
            raise ConfigError(f"keys must be config paths (strings), got {shown(key)}", where)
        at = join(where, key)
        path = parse_path(key)
        if path is None:
            raise ConfigError(
                "not a config path: name a value as errors and `describe` do, e.g. "
                "optimizer.learning_rate or optimizer.learning_rate.peak_value",
                at,
            )
        if path[0] not in sections or path[0] == "sweep" or len(path) < 2:
            raise ConfigError(
                f"a swept value is named by its config path, which starts with a section "
                f"({', '.join(s for s in sections if s != 'sweep')})"
                f"{_suggestions(key, _candidates(base, sections))}",
                at,
            )
        if isinstance(path[-1], int):
            raise ConfigError(
                "a sweep sets a value held under a name; this path ends in a list item", at
            )
        for other in out:
            short, long = sorted((other, path), key=len)
            if long[: len(short)] == short:
                raise ConfigError(
                    f"contradictory: {path_text(other)} and {path_text(path)} are both swept; "
                    "sweep one of them",
                    at,
                )
        given, _ = _get(base, path)
        if given:
            raise ConfigError(
                f"contradictory: {path_text(path)} is also given in the config; give its values "
                "in one place (remove it there, or from the sweep)",
                at,
            )
        if not isinstance(column, list | tuple):
            raise ConfigError(f"must be a list of values, got {shown(column)}", at)
        if not column:
            raise ConfigError("has no values; give at least one", at)
        for i, value in enumerate(column):
            if isinstance(value, bool) or not isinstance(value, int | float | str):
                raise ConfigError(
                    f"must be a number, got {shown(value)} (a sweep varies numbers; schedules "
                    "and flags are swept by their numbers, e.g. ...learning_rate.peak_value)",
                    join(at, i),
                )
        out[path] = list(column)
    return out


def _rows(mode: str, paths: dict[Path, list[Any]]) -> list[tuple[int, ...]]:
    """The members: for each, the index of its value in each path's list."""
    sizes = [len(c) for c in paths.values()]
    if mode == "zip":
        if len(set(sizes)) > 1:
            given = ", ".join(f"{path_text(p)}: {len(c)}" for p, c in paths.items())
            raise ConfigError(
                f"mode 'zip' needs equally many values per path (one per member), got {given}",
                "sweep.values",
            )
        count = sizes[0]
    else:
        count = math.prod(sizes)
    if count > MAX_MEMBERS:
        shape = " x ".join(map(str, sizes)) + " = " if mode == "grid" else ""
        raise ConfigError(
            f"too large: the {mode} has {shape}{count} members; at most {MAX_MEMBERS}",
            "sweep.values",
        )
    if mode == "zip":
        return [(i,) * len(sizes) for i in range(count)]
    return list(itertools.product(*(range(n) for n in sizes)))


def _remapped(
    e: ConfigError, paths: list[Path], row: tuple[int, ...], member: int, values: Any
) -> ConfigError:
    """An error of member `member`'s config, at the sweep's path when it is about a swept
    value; otherwise at its own path, naming the member unless member 0 (the base) failed."""
    for path, i in zip(paths, row, strict=True):
        text = path_text(path)
        if e.path == text or e.path.startswith((f"{text}.", f"{text}[")):
            return ConfigError(e.message, join(join("sweep.values", text), i))
    if member == 0:
        return e
    chosen = ", ".join(
        f"{path_text(p)} = {values[p][i]!r}" for p, i in zip(paths, row, strict=True)
    )
    return ConfigError(f"{e.message} (in sweep member {member}: {chosen})", e.path)


def validate_sweep(
    raw: Mapping[str, Any],
    validate_plain: Callable[[Mapping[str, Any]], dict[str, Any]],
    sections: Mapping[str, Mapping[str, Any]],
) -> dict[str, Any]:
    """The normalized form of a config with a `sweep` section.

    Every member's config is validated (`validate_plain`); the normalized config is member 0's
    without the swept values, plus the sweep section with its values normalized as each
    member's config normalized them.
    """
    block = raw["sweep"]
    if not isinstance(block, Mapping):
        raise ConfigError(
            f"must be a mapping {{mode: grid | zip, values: {{config path: [values]}}}}, got "
            f"{shown(block)}",
            "sweep",
        )
    for key in block:
        if key not in KEYS:
            raise ConfigError(
                f"unknown key {shown(key)}{did_you_mean(key, KEYS)}; the keys are {list(KEYS)}",
                join("sweep", key),
            )
    mode = block.get("mode", "grid")
    if mode not in MODES:
        raise ConfigError(
            f"must be 'grid' (a member per combination of the values) or 'zip' (a member per "
            f"position in the lists), got {shown(mode)}{did_you_mean(mode, MODES)}",
            "sweep.mode",
        )
    if "values" not in block:
        raise ConfigError("missing: the config paths to sweep and their values", "sweep.values")
    base = {k: copy.deepcopy(v) for k, v in raw.items() if k != "sweep"}
    values = _paths(block["values"], base, sections)
    paths = list(values)
    rows = _rows(mode, values)
    normalized: dict[tuple[Path, int], Any] = {}
    first: dict[str, Any] = {}
    added: set[Path] = set()
    for member, row in enumerate(rows):
        config = copy.deepcopy(base)
        for path, i in zip(paths, row, strict=True):
            where = join(join("sweep.values", path_text(path)), i)
            for depth in range(1, len(path)):
                if not _get(config, path[:depth])[0]:
                    added.add(path[:depth])
            set_path(config, path, values[path][i], where)
        try:
            out = validate_plain(config)
        except ConfigError as e:
            raise _remapped(e, paths, row, member, values) from None
        for path, i in zip(paths, row, strict=True):
            value = _get(out, path)[1]
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ConfigError(
                    f"must be a number, got {shown(value)}",
                    join(join("sweep.values", path_text(path)), i),
                )
            normalized[(path, i)] = value
        if member == 0:
            first = out
    for path in paths:
        _delete(first, path, added)
    swept = {path_text(p): [normalized[(p, i)] for i in range(len(values[p]))] for p in paths}
    return {**first, "sweep": {"mode": mode, "values": swept}}


# --------------------------------------------------------------------------------------------
# Members and the population
# --------------------------------------------------------------------------------------------


def _columns(config: Mapping[str, Any]) -> dict[Path, list[Any]]:
    values = config["sweep"]["values"]
    return {parse_path(text) or (text,): list(column) for text, column in values.items()}


def member_values(config: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Each member's swept values, `{config path: value}`, in member order."""
    columns = _columns(config)
    rows = _rows(config["sweep"]["mode"], columns)
    return [
        {path_text(p): columns[p][i] for p, i in zip(columns, row, strict=True)} for row in rows
    ]


def member_configs(config: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The normalized config of each member of a normalized sweep config: the config without
    its sweep section, with the member's values at the swept paths."""
    base = {k: v for k, v in config.items() if k != "sweep"}
    out = []
    for chosen in member_values(config):
        member = copy.deepcopy(base)
        for text, value in chosen.items():
            set_path(member, parse_path(text) or (text,), value, join("sweep.values", text))
        out.append(member)
    return out


def _hyperparameters(tx: Any) -> Any:
    try:
        return hyperparameters(tx)
    except TypeError as e:
        raise ConfigError(
            f"this config builds a part that gradtx cannot rebuild with other numbers ({e}); "
            "it cannot be swept: run one config per value",
            "sweep",
        ) from None


def _same_numbers(a: Any, b: Any) -> bool:
    leaves_a, leaves_b = jax.tree.leaves(a), jax.tree.leaves(b)
    return len(leaves_a) == len(leaves_b) and all(
        np.array_equal(np.asarray(x), np.asarray(y))
        for x, y in zip(leaves_a, leaves_b, strict=True)
    )


def _shared(column: list[Any]) -> bool:
    """Whether every member has the same value of a hyperparameter."""
    return all(np.array_equal(np.asarray(v), np.asarray(column[0])) for v in column[1:])


def _not_varied(text: str, why: str) -> ConfigError:
    return ConfigError(
        f"a population cannot vary it: {why}. A population varies the numbers of one built "
        "optimizer (gradtx.hyperparameters); an integer size or period, a flag or a dtype sets "
        "the shape of the computation: run one config per value instead",
        join("sweep.values", text),
    )


def build_population(config: Mapping[str, Any]) -> Any:
    """The population transformation of a normalized sweep config."""
    members = member_configs(config)
    chosen = member_values(config)
    columns = _columns(config)
    rows = _rows(config["sweep"]["mode"], columns)
    paths = list(columns)
    txs = []
    for k, member in enumerate(members):
        try:
            txs.append(build(member))
        except ConfigError as e:
            raise _remapped(e, paths, rows[k], k, columns) from None
    hps = [_hyperparameters(tx) for tx in txs]
    first = skeleton(txs[0])
    if skeleton(build(members[0])) != first:
        raise ConfigError(
            "this config builds a part that is a new object at every build (one no gradtx "
            "factory recorded), so its members cannot be told apart from copies; it cannot be "
            "swept: run one config per value",
            "sweep",
        )

    def alone(text: str, value: Any) -> Any:
        """Member 0's optimizer with one swept value changed."""
        single = copy.deepcopy(members[0])
        set_path(single, parse_path(text) or (text,), value, join("sweep.values", text))
        return build(single)

    for text, column in config["sweep"]["values"].items():
        other = next((v for v in column if v != chosen[0][text]), None)
        if other is not None and _same_numbers(_hyperparameters(alone(text, other)), hps[0]):
            raise _not_varied(text, "no hyperparameter of the built optimizer changes with it")
    for k in range(1, len(txs)):
        same_tree = jax.tree.structure(hps[k]) == jax.tree.structure(hps[0])
        if same_tree and skeleton(txs[k]) == first:
            continue
        for text, value in chosen[k].items():
            if value != chosen[0][text] and skeleton(alone(text, value)) != first:
                raise _not_varied(text, "it changes the built optimizer beyond its numbers")
        raise ConfigError(
            f"members 0 and {k} build optimizers that differ beyond their numbers, which a "
            "population cannot hold; run them as separate configs",
            "sweep",
        )
    # a number that differs between members is swept (an array over them, held in the state);
    # one they share stays member 0's own value, a constant of the program
    columns_of_leaves = zip(*(jax.tree.leaves(hp) for hp in hps), strict=True)
    stacked = jax.tree.unflatten(
        jax.tree.structure(hps[0]),
        [
            column[0] if _shared(column) else np.asarray(column)
            for column in map(list, columns_of_leaves)
        ],
    )
    try:
        return population(txs[0], stacked)
    except (ValueError, TypeError) as e:
        raise ConfigError(f"{e}", "sweep") from e


__all__ = [
    "MAX_MEMBERS",
    "build_population",
    "member_configs",
    "member_values",
    "parse_path",
    "path_text",
    "set_path",
    "validate_sweep",
]
