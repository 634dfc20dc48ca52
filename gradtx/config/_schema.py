"""The config schema: validation of every section, before anything is built.

`validate(raw)` checks the structure, names and value types of a config and returns its
normalized form (canonical solver and schedule names, sections as mappings, numbers given as
strings such as YAML's `1e-3` turned into floats). Range checks are the factories' own, run when
the optimizer is constructed (`_build`), with their messages moved under the config path.
"""

from __future__ import annotations

import inspect
import math
import re
from collections.abc import Mapping
from typing import Any

from ._errors import ConfigError, did_you_mean, join, shown
from ._kinds import params_of
from ._limits import INT32_MAX, INT32_MIN
from ._registry import Entry, lookup
from ._sweep import validate_sweep

SECTIONS = (
    "optimizer",
    "weight_decay",
    "clip",
    "noise",
    "nonfinite",
    "lr_multipliers",
    "accumulate",
    "ema",
    "sweep",
)
# section -> {key: (kind, required, default)}; the kinds are those of `check_value`
SECTION_KEYS: dict[str, dict[str, tuple[str, bool, Any]]] = {
    "weight_decay": {
        "rate": ("scalar_or_schedule", True, None),
        "mode": ("str", True, None),
        "mask": ("mask", False, None),
    },
    "clip": {
        "value": ("number", False, None),
        "norm": ("number", False, None),
        "global_norm": ("number", False, None),
    },
    "noise": {
        "eta": ("number", True, None),
        "gamma": ("number", False, 0.55),
        "seed": ("int", False, 0),
        "truncation": ("number", False, None),
    },
    "nonfinite": {"action": ("str", True, None), "max_consecutive_errors": ("int", False, None)},
    "lr_multipliers": {
        "rules": ("rules", True, None),
        "default": ("number", False, 1.0),
        "strict": ("bool", False, True),
    },
    "accumulate": {"k": ("int", True, None), "average": ("bool", False, True)},
    "ema": {"decay": ("number", True, None), "debias": ("bool", False, True)},
}
WARMUP_KEYS: dict[str, tuple[str, bool, Any]] = {
    "steps": ("int", True, None),
    "init_value": ("number", False, 0.0),
    "mode": ("str", False, "linear"),
}
WEIGHT_DECAY_MODES = ("coupled", "decoupled")
NONFINITE_ACTIONS = ("zero", "skip")


_shown = shown
# a number given as text: at most this many characters (Python reads longer integers slowly)
_MAX_NUMBER_TEXT = 100


# --------------------------------------------------------------------------------------------
# Values
# --------------------------------------------------------------------------------------------


def _number(value: Any, path: str) -> float | int:
    """A finite number; an integer beyond int32 (which JAX cannot hold) becomes a float."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ConfigError(f"must be a number, got {_shown(value)}", path)
    if isinstance(value, str):
        try:
            if len(value) > _MAX_NUMBER_TEXT:
                raise ValueError
            value = float(value.strip())
        except ValueError:
            raise ConfigError(f"must be a number, got {_shown(value)}", path) from None
    if isinstance(value, int) and not INT32_MIN <= value <= INT32_MAX:
        try:
            value = float(value)
        except OverflowError:
            raise ConfigError(f"must be a finite number, got {_shown(value)}", path) from None
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"must be a finite number, got {_shown(value)}", path)
    return value


def _int(value: Any, path: str) -> int:
    """An integer that fits int32, the dtype of every step counter."""
    if isinstance(value, str):
        try:
            if len(value) > _MAX_NUMBER_TEXT:
                raise ValueError
            value = float(value.strip()) if any(c in value for c in ".eE") else int(value)
        except ValueError:
            raise ConfigError(f"must be an integer, got {_shown(value)}", path) from None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"must be an integer, got {_shown(value)}", path)
    if not INT32_MIN <= value <= INT32_MAX:
        raise ConfigError(
            f"out of range: must be an int32 (-2**31 .. 2**31 - 1, the range of step counters), "
            f"got {_shown(value)}",
            path,
        )
    return value


def _dtype(value: Any, path: str) -> str:
    import jax.numpy as jnp

    if not isinstance(value, str):
        raise ConfigError(
            f"must be a dtype name such as 'float32' or 'bfloat16', got {_shown(value)}", path
        )
    try:
        return jnp.dtype(value).name
    except (TypeError, ValueError):
        raise ConfigError(
            f"must be a dtype name such as 'float32' or 'bfloat16', got {_shown(value)}", path
        ) from None


def check_value(kind: str, value: Any, path: str, *, nullable: bool = False) -> Any:
    """`value` checked and normalized for an argument of `kind` (one of `_kinds.KINDS`)."""
    if value is None:
        if nullable or kind == "any":
            return None
        raise ConfigError("must not be null", path)
    if kind == "number":
        return _number(value, path)
    if kind == "int":
        return _int(value, path)
    if kind in ("bool", "str"):
        wanted = bool if kind == "bool" else str
        if not isinstance(value, wanted):
            label = "true or false" if kind == "bool" else "a string"
            raise ConfigError(f"must be {label}, got {_shown(value)}", path)
        return value
    if kind == "scalar_or_schedule":
        if isinstance(value, Mapping):
            return validate_schedule(value, path)
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            raise ConfigError(
                f"must be a number or a schedule block {{name: ..., ...}}, got {_shown(value)}",
                path,
            )
        return _number(value, path)
    if kind == "schedule":
        if not isinstance(value, Mapping):
            raise ConfigError(
                f"must be a schedule block {{name: ..., ...}}, got {_shown(value)}", path
            )
        return validate_schedule(value, path)
    if kind == "schedule_list":
        if not isinstance(value, list | tuple):
            raise ConfigError(f"must be a list of schedule blocks, got {_shown(value)}", path)
        return [check_value("schedule", v, join(path, i)) for i, v in enumerate(value)]
    if kind == "optimizer":
        if not isinstance(value, Mapping):
            raise ConfigError(
                f"must be an optimizer block {{name: ..., ...}}, got {_shown(value)}", path
            )
        return validate_optimizer(value, path)
    if kind == "mask":
        if isinstance(value, str | bool):
            return value
        if isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
            return list(value)
        raise ConfigError(
            f"must be a glob pattern or a list of patterns (see docs/patterns.md), "
            f"got {_shown(value)}",
            path,
        )
    if kind == "dtype":
        return _dtype(value, path)
    if kind == "int_list":
        if not isinstance(value, list | tuple):
            raise ConfigError(f"must be a list of integers, got {_shown(value)}", path)
        return [_int(v, join(path, i)) for i, v in enumerate(value)]
    if kind == "rules":
        if not isinstance(value, Mapping):
            raise ConfigError(
                f"must be a mapping {{pattern: multiplier}}, got {_shown(value)}", path
            )
        return dict(value)
    if kind == "mapping":
        if not isinstance(value, Mapping):
            raise ConfigError(f"must be a mapping, got {_shown(value)}", path)
        out = {}
        for k, v in value.items():
            key = _key(k, path)
            if key in out:
                raise ConfigError(f"duplicate key {_shown(key)} (given as {_shown(k)})", path)
            out[key] = _mapping_value(v, join(path, key))
        return out
    return value


def _mapping_value(value: Any, path: str) -> Any:
    """Integers in a mapping argument count steps (`max_iter`, boundaries): int32 ones."""
    if isinstance(value, int) and not isinstance(value, bool):
        return _int(value, path)
    if isinstance(value, list | tuple):
        return [_mapping_value(v, join(path, i)) for i, v in enumerate(value)]
    return value


def _key(key: Any, path: str) -> Any:
    """Mapping keys: integer strings become ints (JSON has only string keys)."""
    if isinstance(key, str) and re.fullmatch(r"-?\d+", key.strip()):
        return _int(key, join(path, key))
    if isinstance(key, int) and not isinstance(key, bool):
        return _int(key, join(path, key))
    return key


# --------------------------------------------------------------------------------------------
# Blocks
# --------------------------------------------------------------------------------------------


def _block_name(block: Mapping[str, Any], path: str, label: str) -> Any:
    if "name" not in block:
        example = "'adamw'" if label == "solver" else "'cosine_decay'"
        raise ConfigError(
            f"missing the {label} name: add `name: ...` (e.g. {example})", join(path, "name")
        )
    return block["name"]


def _hyperparameters(
    entry: Entry, block: Mapping[str, Any], path: str, skip: tuple[str, ...] = ()
) -> dict[str, Any]:
    params, var_kw = params_of(entry.factory)
    out: dict[str, Any] = {}
    for key, value in block.items():
        if key == "name" or key in skip:
            continue
        where = join(path, key)
        if not isinstance(key, str):
            raise ConfigError(f"keys must be strings, got {_shown(key)}", path)
        param = params.get(key)
        if param is None:
            if var_kw:
                out[key] = value
                continue
            raise ConfigError(
                f"{entry.name} has no hyperparameter {_shown(key)}{did_you_mean(key, params)}; its "
                f"hyperparameters are {list(params)}",
                where,
            )
        out[key] = check_value(
            entry.kinds.get(key, "any"), value, where, nullable=key in entry.nullable
        )
    for name, param in params.items():
        if param.default is inspect.Parameter.empty and name not in out:
            raise ConfigError(f"missing: {entry.name} requires {name!r}", join(path, name))
    return out


def validate_optimizer(block: Mapping[str, Any], path: str = "optimizer") -> dict[str, Any]:
    """An optimizer block `{name, <hyperparameters>}`, normalized."""
    if not isinstance(block, Mapping):
        raise ConfigError(
            f"must be an optimizer block {{name: ..., ...}}, got {_shown(block)}", path
        )
    entry = lookup(_block_name(block, path, "solver"), "optimizer", join(path, "name"))
    return {"name": entry.name, **_hyperparameters(entry, block, path)}


def validate_schedule(block: Mapping[str, Any], path: str) -> dict[str, Any]:
    """A schedule block `{name, <arguments>, warmup?}`, normalized."""
    entry = lookup(_block_name(block, path, "schedule"), "schedule", join(path, "name"))
    out = {"name": entry.name, **_hyperparameters(entry, block, path, skip=("warmup",))}
    if "warmup" in block:
        params, _ = params_of(entry.factory)
        if "warmup_steps" in params:
            raise ConfigError(
                f"contradictory: {entry.name} has its own warm-up (warmup_steps); drop the "
                f"warmup block or use a schedule without one",
                join(path, "warmup"),
            )
        out["warmup"] = validate_section_keys(block["warmup"], join(path, "warmup"), WARMUP_KEYS)
    return out


def validate_section_keys(
    value: Any, path: str, keys: Mapping[str, tuple[str, bool, Any]]
) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        example = ", ".join(f"{k}: ..." for k, (_, req, _) in keys.items() if req)
        raise ConfigError(f"must be a mapping {{{example}}}, got {_shown(value)}", path)
    out: dict[str, Any] = {}
    for key, item in value.items():
        if key not in keys:
            raise ConfigError(
                f"unknown key {_shown(key)}{did_you_mean(key, keys)}; the keys are {list(keys)}",
                join(path, key),
            )
        kind, _, _ = keys[key]
        out[key] = check_value(kind, item, join(path, key), nullable=not keys[key][1])
    for key, (_, required, _) in keys.items():
        if required and key not in out:
            raise ConfigError("missing", join(path, key))
    return out


def _section(name: str, value: Any) -> dict[str, Any]:
    if name == "nonfinite" and isinstance(value, str):
        value = {"action": value}
    out = validate_section_keys(value, name, SECTION_KEYS[name])
    if name == "weight_decay" and out["mode"] not in WEIGHT_DECAY_MODES:
        raise ConfigError(
            f"must be 'coupled' (L2 added to the gradient before the solver) or 'decoupled' "
            f"(AdamW-style, scaled by the learning rate), got {_shown(out['mode'])}"
            f"{did_you_mean(out['mode'], WEIGHT_DECAY_MODES)}",
            "weight_decay.mode",
        )
    if name == "clip" and not any(out.get(k) is not None for k in ("value", "norm", "global_norm")):
        raise ConfigError("give at least one of value, norm, global_norm", "clip")
    if name == "nonfinite":
        action = out["action"]
        if action not in NONFINITE_ACTIONS:
            raise ConfigError(
                f"must be 'zero' (replace NaN/Inf elements by 0) or 'skip' (skip the step), got "
                f"{_shown(action)}{did_you_mean(action, NONFINITE_ACTIONS)}",
                "nonfinite.action",
            )
        if action == "skip" and out.get("max_consecutive_errors") is None:
            raise ConfigError(
                "missing: action 'skip' needs it (e.g. 5)", "nonfinite.max_consecutive_errors"
            )
        if action == "zero" and out.get("max_consecutive_errors") is not None:
            raise ConfigError(
                "contradictory: only action 'skip' takes it", "nonfinite.max_consecutive_errors"
            )
    if name == "lr_multipliers":
        for pattern, factor in out["rules"].items():
            if not isinstance(pattern, str):
                raise ConfigError(
                    f"patterns must be strings, got {_shown(pattern)}", "lr_multipliers.rules"
                )
            out["rules"][pattern] = _number(factor, f"lr_multipliers.rules[{_shown(pattern)}]")
    return out


def _check_weight_decay_once(config: Mapping[str, Any]) -> None:
    if "weight_decay" not in config:
        return
    block = config["optimizer"]
    params, _ = params_of(lookup(block["name"]).factory)
    if "weight_decay" not in params:
        return
    own = block.get("weight_decay", params["weight_decay"].default)
    if own is None or (isinstance(own, int | float) and own == 0):
        return
    given = "" if "weight_decay" in block else ", its default"
    raise ConfigError(
        f"contradictory: the solver {block['name']} decays weights itself "
        f"(weight_decay={own!r}{given}) and the weight_decay section adds more; set "
        "optimizer.weight_decay: 0 or drop the weight_decay section",
        "weight_decay",
    )


def validate(raw: Mapping[str, Any]) -> dict[str, Any]:
    """The normalized form of a whole config; raises `ConfigError` naming the path.

    A config with a `sweep` section is validated member by member (`_sweep.validate_sweep`).
    """
    if raw.get("sweep") is not None:
        return validate_sweep(raw, _validate_one, {s: SECTION_KEYS.get(s, {}) for s in SECTIONS})
    return _validate_one(raw)


def _validate_one(raw: Mapping[str, Any]) -> dict[str, Any]:
    """`validate` of a config without a sweep."""
    for key in raw:
        if key not in SECTIONS:
            raise ConfigError(
                f"unknown section {_shown(key)}{did_you_mean(key, SECTIONS)}; the sections are "
                f"{list(SECTIONS)}",
                join("", key),
            )
    if "optimizer" not in raw:
        raise ConfigError(
            "missing the optimizer section: add `optimizer: {name: ..., learning_rate: ...}`",
            "optimizer",
        )
    out: dict[str, Any] = {"optimizer": validate_optimizer(raw["optimizer"])}
    for name in SECTIONS[1:-1]:  # the sweep section is `validate`'s
        if name in raw and raw[name] is not None:
            out[name] = _section(name, raw[name])
    _check_weight_decay_once(out)
    return out


__all__ = [
    "SECTIONS",
    "SECTION_KEYS",
    "check_value",
    "validate",
    "validate_optimizer",
    "validate_schedule",
]
