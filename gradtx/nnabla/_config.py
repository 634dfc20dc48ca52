"""`from_nnabla`: nnabla's optimizer configuration (the NNP `Optimizer` / `Solver` messages) as a
gradtx optimizer.

The translation follows nnabla's loader (`nnabla.utils.load._create_optimizer`) and training
loop: the solver `type` with its `<type>_param` block, `weight_decay` (coupled L2 before the
solver, as `Solver.weight_decay` does for the non-fused solvers; the rate of the fused ones),
the learning-rate scheduler fields (`schedules.nnabla_solver_schedule`, with the division of step
counts by the number of workers), `update_interval` (gradients summed over the interval) and
`parameter_variable` (which parameters are trained). The result is an ordinary gradtx config
(`to_config` shows it) built by `from_config`. Unknown or unused fields raise a `ConfigError`
naming them.

The translation is one pass over the whole document: it renames nnabla's fields to gradtx's,
raises only for what is nnabla's own (an unknown field or solver type, an unused block), and hands
the values over as they are; the config layer validates the result once (`from_dialect`), and
its messages name the nnabla field a value came from (`solver.adam_param.beta1`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ..config._errors import ConfigError, did_you_mean, join, shown
from ..config._from_config import ConfiguredOptimizer, from_dialect
from ..config._load import read
from ._nntxt import LOOP_FIELDS, optimizer_message
from ._nntxt import load as load_nntxt

# the fields (and nnabla defaults) of the Adam family's `<type>_param` blocks
_ADAM_FIELDS: dict[str, tuple[str, Any]] = {
    "alpha": ("learning_rate", 1e-3),
    "beta1": ("b1", 0.9),
    "beta2": ("b2", 0.999),
    "eps": ("eps", 1e-8),
}
# type -> (gradtx solver, {nnabla field: (gradtx argument, nnabla default)}, fixed arguments,
#          how `solver.weight_decay` applies: "coupled", or the argument taking the rate)
_SOLVERS: dict[str, tuple[str, dict[str, tuple[str, Any]], dict[str, Any], str]] = {
    "Sgd": ("sgd", {"lr": ("learning_rate", 1e-3)}, {}, "coupled"),
    "Momentum": (
        "nnabla.momentum",
        {"lr": ("learning_rate", 1e-3), "momentum": ("momentum", 0.9)},
        {},
        "coupled",
    ),
    "Nesterov": (
        "nnabla.momentum",
        {"lr": ("learning_rate", 1e-3), "momentum": ("momentum", 0.9)},
        {"nesterov": True},
        "coupled",
    ),
    "Adagrad": (
        "adagrad",
        {"lr": ("learning_rate", 1e-2), "eps": ("eps", 1e-8)},
        {"initial_accumulator_value": 0.0, "eps_in_sqrt": False},
        "coupled",
    ),
    "Adadelta": (
        "adadelta",
        {"lr": ("learning_rate", 1.0), "decay": ("rho", 0.95), "eps": ("eps", 1e-6)},
        {},
        "coupled",
    ),
    "Adam": (
        "nnabla.adam",
        dict(_ADAM_FIELDS),
        {},
        "coupled",
    ),
    "Adamax": (
        "adamax",
        {**_ADAM_FIELDS, "alpha": ("learning_rate", 2e-3)},
        {},
        "coupled",
    ),
    "AdaBound": (
        "adabound",
        {
            **_ADAM_FIELDS,
            "final_lr": ("final_lr", 0.1),
            "gamma": ("gamma", 1e-3),
        },
        {},
        "coupled",
    ),
    "AMSGRAD": (
        "nnabla.amsgrad",
        {
            **_ADAM_FIELDS,
            "bias_correction": ("bias_correction", False),
        },
        {},
        "coupled",
    ),
    "AMSBound": (
        "amsbound",
        {
            **_ADAM_FIELDS,
            "final_lr": ("final_lr", 0.1),
            "gamma": ("gamma", 1e-3),
            "bias_correction": ("bias_correction", False),
        },
        {},
        "coupled",
    ),
    "Eve": (
        "eve",
        {
            "alpha": ("learning_rate", 1e-3),
            "beta1": ("b1", 0.9),
            "beta2": ("b2", 0.999),
            "beta3": ("b3", 0.999),
            "k": ("k", 0.1),
            "k2": ("K", 10.0),
            "eps": ("eps", 1e-8),
        },
        {},
        "coupled",
    ),
    "RMSprop": (
        "rmsprop",
        {"lr": ("learning_rate", 1e-3), "decay": ("decay", 0.9), "eps": ("eps", 1e-8)},
        {"eps_in_sqrt": False},
        "coupled",
    ),
    "RMSpropGraves": (
        "rmsprop_graves",
        {
            "lr": ("learning_rate", 1e-4),
            "decay": ("decay", 0.95),
            "momentum": ("momentum", 0.9),
            "eps": ("eps", 1e-4),
        },
        {},
        "coupled",
    ),
    "AdamW": (
        "nnabla.adamw",
        {
            **_ADAM_FIELDS,
            "wd": ("weight_decay", 1e-4),
        },
        {},
        "weight_decay",
    ),
    "SgdW": (
        "sgdw",
        {
            "lr": ("learning_rate", 1e-3),
            "momentum": ("momentum", 0.9),
            "wd": ("weight_decay", 1e-4),
        },
        {},
        "weight_decay",
    ),
    "Lars": (
        "nnabla.lars",
        {
            "lr": ("learning_rate", 1e-3),
            "momentum": ("momentum", 0.9),
            "coefficient": ("coefficient", 1e-3),
            "eps": ("eps", 1e-6),
        },
        {"weight_decay": 0.0},
        "weight_decay",
    ),
    "Lamb": (
        "nnabla.lamb",
        {
            "eta": ("learning_rate", 1e-3),
            "beta1": ("b1", 0.9),
            "beta2": ("b2", 0.999),
            "gamma_l": ("gamma_l", 0.0),
            "gamma_u": ("gamma_u", 10.0),
            "eps": ("eps", 1e-6),
            "bias_correction": ("bias_correction", False),
        },
        {"weight_decay": 0.0},
        "weight_decay",
    ),
    "AdaBelief": (
        "nnabla.adabelief",
        {
            **_ADAM_FIELDS,
            "wd": ("weight_decay", 0.0),
            "amsgrad": ("amsgrad", False),
            "weight_decouple": ("weight_decouple", False),
            "fixed_decay": ("fixed_decay", False),
            "rectify": ("rectify", False),
        },
        {},
        "weight_decay",
    ),
    "Lion": (
        "lion",
        {"lr": ("learning_rate", 1e-4), "beta1": ("b1", 0.9), "beta2": ("b2", 0.99)},
        {"weight_decay": 0.0},
        "weight_decay",
    ),
}
_SOLVERS["SGD"] = _SOLVERS["Sgd"]
SOLVER_TYPES = sorted(_SOLVERS)
_PARAM_BLOCK = {t: f"{t.lower()}_param" for t in _SOLVERS}  # nnabla's field names
_PARAM_BLOCK["RMSpropGraves"] = "rmsprop_graves_param"
_SCHEDULER_BLOCKS = {
    "Polynomial": "polynomial_scheduler_param",
    "Cosine": "cosine_scheduler_param",
    "Exponential": "exponential_scheduler_param",
    "Step": "step_scheduler_param",
}
_SOLVER_FIELDS = {
    "type",
    "weight_decay",
    "lr_decay",
    "lr_decay_interval",
    "lr_scheduler_type",
    "lr_warmup_scheduler_type",
    "linear_warmup_scheduler_param",
    *_SCHEDULER_BLOCKS.values(),
}
_OPTIMIZER_FIELDS = {"solver", "update_interval", "parameter_variable"}


def _is(value: Any, *literals: float) -> bool:
    """Whether `value` is one of `literals` given as a number (not a bool, not a string)."""
    return type(value) in (int, float) and value in literals


def _scalar(value: Any, default: Any, path: str) -> Any:
    """A solver field's value as given: nnabla's solver fields are protobuf scalars, so a mapping
    or a list is refused here (gradtx would read a mapping as a schedule block)."""
    if isinstance(value, Mapping | list | tuple):
        wanted = "true or false" if isinstance(default, bool) else "a number"
        got = "a mapping" if isinstance(value, Mapping) else "a list"
        raise ConfigError(f"must be {wanted}, got {got}", path)
    return value


def _trained(multiplier: Any) -> Any:
    """nnabla's loader trains a parameter whose multiplier is > 0 (1.0) and no other (0.0); a
    value that is no number is handed on as it is, for the config layer to name."""
    if isinstance(multiplier, bool) or not isinstance(multiplier, int | float | str):
        return multiplier
    try:
        return 1.0 if float(multiplier) > 0 else 0.0
    except ValueError:
        return multiplier


def _pattern(name: Any, path: str) -> str:
    """nnabla's variable-name prefix (`re.match`) as a glob on parameter paths."""
    if not isinstance(name, str) or not name:
        raise ConfigError(f"must be a variable name, got {shown(name)}", path)
    if re.search(r"[\\^$|?*+()\[\]{}]", name):
        raise ConfigError(
            f"{shown(name)} is a regular expression; give the variable name or its prefix (gradtx "
            "matches parameter paths by glob patterns, see docs/patterns.md)",
            path,
        )
    return f"{name.strip('/')}*/**"


def _multipliers(entries: Any, apply: bool, paths: dict[str, str]) -> dict[str, Any]:
    path = "parameter_variable"
    if not isinstance(entries, list):
        raise ConfigError("must be a list of {variable_name, learning_rate_multiplier}", path)
    rules: dict[str, Any] = {}
    for i, entry in enumerate(entries):
        where = join(path, i)
        if not isinstance(entry, Mapping):
            raise ConfigError("must be a mapping {variable_name, learning_rate_multiplier}", where)
        for key in entry:
            if key not in ("variable_name", "learning_rate_multiplier"):
                raise ConfigError(
                    f"unknown field {shown(key)}; the fields are variable_name, "
                    "learning_rate_multiplier",
                    join(where, key),
                )
        pattern = _pattern(entry.get("variable_name"), join(where, "variable_name"))
        mult = entry.get("learning_rate_multiplier", 0.0)
        rules.pop(pattern, None)
        rules[pattern] = mult if apply else _trained(mult)
        paths[f"lr_multipliers.rules[{shown(pattern)}]"] = join(where, "learning_rate_multiplier")
    # nnabla: a later entry overrides an earlier one for the same variable -> first match wins
    return {"rules": dict(reversed(list(rules.items()))), "default": 0.0, "strict": False}


def _learning_rate(solver: Mapping[str, Any], init_lr: Any, comm_size: int) -> Any:
    """The learning rate: `init_lr`, or nnabla's scheduler fields as a schedule block."""
    kind = solver.get("lr_scheduler_type", "")
    warm = solver.get("lr_warmup_scheduler_type", "")
    decay = solver.get("lr_decay", 0.0)
    interval = solver.get("lr_decay_interval", 0)
    if isinstance(kind, str):  # otherwise the config layer names the wrong type
        for name in _SCHEDULER_BLOCKS.values():
            if name in solver and _SCHEDULER_BLOCKS.get(kind) != name:
                raise ConfigError(
                    f"unused: lr_scheduler_type is {shown(kind)}", join("solver", name)
                )
        if kind != "" and not (_is(decay, 0, 1) and _is(interval, 0, 1)):
            raise ConfigError(
                f"unused: nnabla reads lr_decay / lr_decay_interval only when lr_scheduler_type "
                f"is '' (here {shown(kind)}); remove them",
                "solver.lr_decay",
            )
    if "linear_warmup_scheduler_param" in solver and isinstance(warm, str) and warm != "Linear":
        raise ConfigError(
            f"unused: lr_warmup_scheduler_type is {shown(warm)}",
            "solver.linear_warmup_scheduler_param",
        )
    if kind == "" and warm == "" and _is(decay, 0) and _is(interval, 0) and comm_size == 1:
        return init_lr
    block: dict[str, Any] = {"name": "nnabla_solver_schedule", "init_lr": init_lr}
    for key in ("lr_scheduler_type", "lr_warmup_scheduler_type", "linear_warmup_scheduler_param"):
        if key in solver:
            block[key] = solver[key]
    if isinstance(kind, str) and kind in _SCHEDULER_BLOCKS and _SCHEDULER_BLOCKS[kind] in solver:
        block[_SCHEDULER_BLOCKS[kind]] = solver[_SCHEDULER_BLOCKS[kind]]
    if kind == "":
        block.update(lr_decay=decay, lr_decay_interval=interval)
    if comm_size != 1:
        block["comm_size"] = comm_size
    return block


def _solver(solver: Mapping[str, Any], comm_size: int) -> tuple[dict[str, Any], dict, dict]:
    """(optimizer block, weight_decay section or {}, config path -> nnabla field)."""
    kind = solver.get("type")
    if not isinstance(kind, str | None):
        raise ConfigError(
            f"must be a solver type name such as 'Adam', got {shown(kind)}", "solver.type"
        )
    if kind not in _SOLVERS:
        label = "missing" if kind is None else f"unsupported solver type {shown(kind)}"
        raise ConfigError(
            f"{label}{did_you_mean(kind, SOLVER_TYPES) if kind else ''}; the types are "
            f"{SOLVER_TYPES}",
            "solver.type",
        )
    name, fields, fixed, decay_mode = _SOLVERS[kind]
    block_name = _PARAM_BLOCK[kind]
    for key in solver:
        if key in _SOLVER_FIELDS or key == block_name:
            continue
        if isinstance(key, str) and key.endswith("_param"):
            raise ConfigError(
                f"unused: the solver type is {shown(kind)} (its block is {block_name!r})",
                join("solver", key),
            )
        raise ConfigError(
            f"unsupported solver field {shown(key)}"
            f"{did_you_mean(key, [*_SOLVER_FIELDS, block_name])}",
            join("solver", key),
        )
    given = solver.get(block_name, {})
    if not isinstance(given, Mapping):
        raise ConfigError("must be a mapping of the solver's parameters", f"solver.{block_name}")
    for key in given:
        if key not in fields:
            raise ConfigError(
                f"{kind} has no parameter {shown(key)}{did_you_mean(key, fields)}; its "
                f"parameters are {list(fields)}",
                f"solver.{block_name}.{key}",
            )
    block: dict[str, Any] = {"name": name}
    paths = {}
    for field, (arg, default) in fields.items():
        where = f"solver.{block_name}.{field}"
        block[arg] = _scalar(given.get(field, default), default, where)
        paths[join("optimizer", arg)] = where
    block.update(fixed)
    rate = _scalar(solver.get("weight_decay", 0.0), 0.0, "solver.weight_decay")
    section: dict[str, Any] = {}
    if not _is(rate, 0):  # nnabla's default 0: no decay; a wrong value goes on to be named
        if decay_mode == "coupled":
            section = {"rate": rate, "mode": "coupled"}
            paths["weight_decay.rate"] = "solver.weight_decay"
        else:
            block[decay_mode] = rate  # the training loop's Solver.weight_decay(rate) every step
            paths[join("optimizer", decay_mode)] = "solver.weight_decay"
    block["learning_rate"] = _learning_rate(solver, block["learning_rate"], comm_size)
    if isinstance(block["learning_rate"], dict):
        lr_path = paths["optimizer.learning_rate"]
        paths["optimizer.learning_rate"] = "solver"  # the scheduler's own messages
        for key in block["learning_rate"]:
            paths[f"optimizer.learning_rate.{key}"] = f"solver.{key}"
        paths["optimizer.learning_rate.init_lr"] = lr_path
    return block, section, paths


def nnabla_config(
    config: Any, *, comm_size: int = 1, apply_multipliers: bool = False, name: str | None = None
) -> tuple[dict[str, Any], dict[str, str]]:
    """The plain gradtx config (not yet validated) that an nnabla optimizer config translates
    to, and the map from its paths to the nnabla fields they came from."""
    loaded = load_nntxt(config)
    if loaded is None:
        raw, where = read(config, "nnabla config")
        if "optimizer" in raw or name is not None:  # a whole NNablaProtoBuf as a dict
            raw = optimizer_message(raw, where, name)
    else:
        raw = optimizer_message(*loaded, name)
    if isinstance(comm_size, bool) or not isinstance(comm_size, int) or not 1 <= comm_size < 2**31:
        raise ConfigError(
            f"from_nnabla: comm_size must be an integer in 1 .. 2**31 - 1, got {shown(comm_size)}"
        )
    if "solver" in raw:
        for key in raw:
            if key in _OPTIMIZER_FIELDS:
                continue
            why = (
                " (a training-loop setting, not an optimizer one; remove it)"
                if key in LOOP_FIELDS
                else did_you_mean(key, _OPTIMIZER_FIELDS)
            )
            raise ConfigError(f"unsupported optimizer field {shown(key)}{why}", join("", key))
        solver = raw["solver"]
        if not isinstance(solver, Mapping):
            raise ConfigError("must be a mapping with the solver fields (type, ...)", "solver")
    else:
        solver, raw = raw, {}
    block, section, paths = _solver(solver, comm_size)
    out: dict[str, Any] = {"optimizer": block}
    if section:
        out["weight_decay"] = section
    if "parameter_variable" in raw:
        out["lr_multipliers"] = _multipliers(raw["parameter_variable"], apply_multipliers, paths)
    interval = raw.get("update_interval", 1)
    if type(interval) in (int, float) and interval < 0:  # nnabla's 0 and 1: no accumulation
        raise ConfigError(f"must be >= 0, got {interval}", "update_interval")
    if not _is(interval, 0, 1):
        out["accumulate"] = {"k": interval, "average": False}
        paths["accumulate.k"] = "update_interval"
    return out, paths


def from_nnabla(
    config: Any, *, comm_size: int = 1, apply_multipliers: bool = False, name: str | None = None
) -> ConfiguredOptimizer:
    """Build the gradtx optimizer that nnabla builds from an optimizer configuration.

    `config` is nnabla's own training file (`.nntxt` / `.prototxt`, protobuf text of
    `NNablaProtoBuf`: its `optimizer` message named `name`, or its only one), or nnabla's
    `Optimizer` message (with `solver`, `update_interval`, `parameter_variable`) or its `Solver`
    message alone, as protobuf text, a dict or a YAML / JSON file or string, with nnabla's field
    names::

        solver:
          type: Adam
          adam_param: {alpha: 0.001, beta1: 0.9, beta2: 0.999, eps: 1.0e-8}
          weight_decay: 0.0001
          lr_scheduler_type: Cosine
          cosine_scheduler_param: {max_iter: 10000}
          lr_warmup_scheduler_type: Linear
          linear_warmup_scheduler_param: {warmup_iter: 500}
        update_interval: 2
        parameter_variable:
          - {variable_name: conv1/W, learning_rate_multiplier: 1.0}

    Solver types: Sgd (SGD), Momentum, Nesterov, Adagrad, Adadelta, Adam, Adamax, AdaBound,
    AMSGRAD, AMSBound, Eve (the paper's; nnabla's loader names it but nnabla has none), RMSprop,
    RMSpropGraves, AdamW, SgdW, Lars, Lamb, AdaBelief, Lion. A missing parameter takes the
    nnabla solver class's default. `weight_decay` is coupled L2 for the non-fused solvers and the
    decay rate of the fused ones (AdamW, SgdW, Lars, Lamb, AdaBelief, Lion), as the training loop
    calls `Solver.weight_decay(rate)` before every update. `update_interval` sums the gradients
    of that many steps per update; the learning-rate schedule counts updates. Parameters that no
    `parameter_variable` entry names (by prefix) are not trained; nnabla's loader uses the
    multiplier only to decide that (> 0), `apply_multipliers=True` also scales the updates by it.

    Args:
      config: the nnabla optimizer (or solver) configuration.
      comm_size: the number of data-parallel workers; step counts of the schedulers are divided
        by it as nnabla's loader does.
      apply_multipliers: scale each parameter's updates by its `learning_rate_multiplier`.
      name: which `optimizer` of a whole training file to build (needed when it has several).
        The training-loop fields of an `optimizer` message (`network_name`, `dataset_name`,
        `loss_variable`, `start_iter`, ...) are left to the loop; in a lone `Optimizer` dict
        they raise an error.

    Returns:
      A `ConfiguredOptimizer`; `to_config` gives the equivalent gradtx config.

    Raises:
      ConfigError: unknown, unsupported or unused fields (named), wrong types and values.

    Reference: nnabla `utils/load.py` (`_create_optimizer`), `utils/cli/train.py`.
    """
    native, paths = nnabla_config(
        config, comm_size=comm_size, apply_multipliers=apply_multipliers, name=name
    )
    return from_dialect(native, "nnabla", paths)


__all__ = ["SOLVER_TYPES", "from_nnabla", "nnabla_config"]
