"""Readable views of a normalized config: the chain it builds and every hyperparameter."""

from __future__ import annotations

import copy
import inspect
from collections.abc import Mapping
from typing import Any

from ._build import solver_learning_rate
from ._errors import join
from ._kinds import params_of
from ._registry import lookup
from ._sweep import member_values, parse_path, set_path


def _value(value: Any) -> str:
    if isinstance(value, Mapping) and "name" in value:
        args = ", ".join(f"{k}={_value(v)}" for k, v in value.items() if k != "name")
        return f"{value['name']}({args})"
    if isinstance(value, float):
        return f"{value:g}"
    return repr(value)


def _call(name: str, args: Mapping[str, Any]) -> str:
    return f"{name}(" + ", ".join(f"{k}={_value(v)}" for k, v in args.items()) + ")"


class _Swept:
    """A swept value in a description of a sweep config: each member has its own."""

    def __init__(self, values: list[Any]):
        self.values = values

    def __repr__(self) -> str:
        return "<swept>"

    def summary(self) -> str:
        shown = [_value(v) for v in self.values]
        if len(shown) > 6:
            shown = [*shown[:3], "...", *shown[-2:]]
        return f"{', '.join(shown)} ({len(self.values)} values)"


def _marked(config: Mapping[str, Any]) -> Mapping[str, Any]:
    """A sweep config's base with `_Swept` markers at the swept paths (others as they are)."""
    if "sweep" not in config:
        return config
    base = copy.deepcopy({k: v for k, v in config.items() if k != "sweep"})
    for text, values in config["sweep"]["values"].items():
        path = parse_path(text) or (text,)
        set_path(base, path, _Swept(list(values)), join("sweep.values", text))
    return base


def chain_lines(config: Mapping[str, Any]) -> list[str]:
    """The transformation a config builds, one part per line, wrappers indented around (a
    swept value shows as `<swept>`)."""
    config = _marked(config)
    block = config["optimizer"]
    core = [_call(block["name"], {k: v for k, v in block.items() if k != "name"})]
    wd = config.get("weight_decay")
    if wd is not None:
        args = {"rate": wd["rate"], **({"mask": wd["mask"]} if wd.get("mask") else {})}
        if wd["mode"] == "coupled":
            core.insert(0, _call("weight_decay", args) + "  # coupled (L2)")
        else:
            core.append(_call("weight_decay", args) + "  # decoupled, times the learning rate")
    lines: list[str] = []
    depth = 0

    def add(text: str) -> None:
        lines.append("  " * depth + text)

    acc = config.get("accumulate")
    if acc is not None:
        add(_call("accumulate_k_steps", acc))
        depth += 1
    nonfinite = config.get("nonfinite")
    if nonfinite is not None and nonfinite["action"] == "skip":
        add(
            _call(
                "apply_if_finite", {"max_consecutive_errors": nonfinite["max_consecutive_errors"]}
            )
        )
        depth += 1
    if config.get("noise") is not None:
        add(_call("add_noise", config["noise"]))
    clip = config.get("clip", {})
    for key, name, arg in (
        ("value", "clip", "max_delta"),
        ("norm", "clip_by_norm", "max_norm"),
        ("global_norm", "clip_by_global_norm", "max_norm"),
    ):
        if clip.get(key) is not None:
            add(_call(name, {arg: clip[key]}))
    if nonfinite is not None and nonfinite["action"] == "zero":
        add("zero_nans(non_finite=True)")
    mult = config.get("lr_multipliers")
    if mult is not None:
        add(_call("lr_multipliers", {k: v for k, v in mult.items()}) + "  # around:")
        depth += 1
    for text in core:
        add(text)
    if config.get("ema") is not None:
        depth = 0
        add(_call("ema_params", config["ema"]))
    return lines


def _flatten(prefix: str, value: Any, out: list[tuple[str, str, str]], note: str = "") -> None:
    if isinstance(value, Mapping) and value and all(isinstance(k, str) for k in value):
        for key, item in value.items():
            _flatten(f"{prefix}.{key}", item, out, note)
    elif isinstance(value, _Swept):
        out.append((prefix, value.summary(), "swept"))
    else:
        out.append((prefix, _value(value), note))


def hyperparameter_rows(config: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """(config path, value, note) for every setting, the solver's defaults included; a swept
    one shows its values, noted "swept"."""
    config = _marked(config)
    rows: list[tuple[str, str, str]] = []
    block = config["optimizer"]
    rows.append(("optimizer.name", block["name"], ""))
    params, _ = params_of(lookup(block["name"]).factory)
    for name, param in params.items():
        if name in block:
            _flatten(f"optimizer.{name}", block[name], rows)
        elif param.default is not inspect.Parameter.empty:
            rows.append((f"optimizer.{name}", _value(param.default), "default"))
    for section, value in config.items():
        if section not in ("optimizer", "sweep"):
            _flatten(section, value, rows)
    return rows


def sweep_table(config: Mapping[str, Any]) -> tuple[str, tuple[str, ...], list[tuple[str, ...]]]:
    """A sweep config's members: a title (K, grid or zip), a header (`member` and the swept
    paths) and a row of values per member."""
    sweep = config["sweep"]
    values = member_values(config)
    paths = tuple(sweep["values"])
    if sweep["mode"] == "grid":
        sizes = " x ".join(str(len(sweep["values"][p])) for p in paths)
        how = f"grid of {sizes} values (every combination; the first path varies slowest)"
    else:
        how = "zip (the values at each position of the lists)"
    title = f"{len(values)} member{'s' if len(values) != 1 else ''}, {how}"
    rows = [(str(k), *(_value(v[p]) for p in paths)) for k, v in enumerate(values)]
    return title, ("member", *paths), rows


def learning_rate_label(config: Mapping[str, Any]) -> str:
    lr = solver_learning_rate(config["optimizer"])
    return "none" if lr is None else _value(lr)


def _steps_of(value: Any) -> list[int]:
    """The integer steps of a config value (a mapping's keys or a list), [] for anything else."""
    if isinstance(value, Mapping):
        items: list[Any] = list(value)
    elif isinstance(value, list | tuple):
        items = list(value)
    else:
        return []
    out = []
    for item in items:
        if isinstance(item, bool):
            continue
        try:
            out.append(int(item))
        except (TypeError, ValueError):
            continue
    return sorted(out)


def _after(step: int, after: tuple[str, ...]) -> str:
    return f"{step}, after {' and '.join(after)}" if after else str(step)


def schedule_landmarks(
    block: Any, offset: int = 0, after: tuple[str, ...] = ()
) -> list[tuple[int, str]]:
    """Where a schedule block changes course, in absolute steps: `(step, what)`, sorted.

    The steps count from the optimizer's first update: a linear `warmup` block delays the
    schedule it wraps by its steps (a piecewise boundary of 29000 after a 1000-step warm-up is a
    drop at 30000), and each schedule of a `join` starts at its boundary; `what` names the
    schedule's own step and what came before it. Schedules whose shape has no named steps (a
    constant, a number) have none.
    """
    if not isinstance(block, Mapping) or not isinstance(block.get("name"), str):
        return []
    name = block["name"]
    out: list[tuple[int, str]] = []
    warm = block.get("warmup")
    if isinstance(warm, Mapping) and isinstance(warm.get("steps"), int) and warm["steps"] > 0:
        w = warm["steps"]
        linear = warm.get("mode", "linear") == "linear"
        out.append((offset + w, "warm-up ends" + ("; the schedule starts" if linear else "")))
        inner = {k: v for k, v in block.items() if k != "warmup"}
        if linear:
            return sorted(
                out + schedule_landmarks(inner, offset + w, (*after, f"the {w} warm-up steps"))
            )
        return sorted(out + schedule_landmarks(inner, offset, after))

    def at(step: int, what: str) -> None:
        out.append((offset + step, what))

    if name in ("piecewise_constant", "piecewise_interpolate"):
        scales = block.get("boundaries_and_scales") or {}
        for step in _steps_of(scales):
            scale = scales.get(step, scales.get(str(step)))
            at(step, f"boundary {_after(step, after)}: x{_value(scale)}")
    elif name in ("multistep", "nnabla_step") and block.get("comm_size", 1) == 1:
        key = "milestones" if name == "multistep" else "iter_steps"
        gamma = _value(block.get("gamma"))
        for step in _steps_of(block.get(key)):
            at(step, f"milestone {_after(step, after)}: x{gamma}")
    elif name == "join":
        subs = block.get("schedules") or []
        for i, step in enumerate(_steps_of(block.get("boundaries"))):
            at(step, f"join boundary {_after(step, after)}: schedule {i + 2} starts")
            if i + 1 < len(subs):
                since = (*after, f"the join boundary {step}")
                out.extend(schedule_landmarks(subs[i + 1], offset + step, since))
        if subs:
            out.extend(schedule_landmarks(subs[0], offset, after))
    elif name == "nnabla_solver_schedule" and block.get("comm_size", 1) == 1:
        param = block.get("linear_warmup_scheduler_param")
        if isinstance(param, Mapping) and isinstance(param.get("warmup_iter"), int):
            at(param["warmup_iter"], "warm-up ends")
        kind = str(block.get("lr_scheduler_type", "")).lower()
        param = block.get(f"{kind}_scheduler_param")
        max_iter = param.get("max_iter") if isinstance(param, Mapping) else None
        if kind in ("cosine", "polynomial") and isinstance(max_iter, int):
            at(max_iter, "decay ends")
    else:
        if isinstance(block.get("warmup_steps"), int) and block["warmup_steps"] > 0:
            at(block["warmup_steps"], "warm-up ends")
        if name in ("cosine_decay", "warmup_cosine_decay") and isinstance(
            block.get("decay_steps"), int
        ):
            at(block["decay_steps"], "decay ends")
        if name in ("linear", "polynomial") and isinstance(block.get("transition_steps"), int):
            begin = block.get("transition_begin", 0)
            if isinstance(begin, int) and begin > 0:
                at(begin, "transition begins")
            if isinstance(begin, int):
                at(begin + block["transition_steps"], "transition ends")
    return sorted(out)


def learning_rate_landmarks(config: Mapping[str, Any]) -> list[tuple[int, str]]:
    """`schedule_landmarks` of the solver's learning rate (none for a number)."""
    return schedule_landmarks(solver_learning_rate(config["optimizer"]))


__all__ = [
    "chain_lines",
    "hyperparameter_rows",
    "learning_rate_label",
    "learning_rate_landmarks",
    "schedule_landmarks",
    "sweep_table",
]
