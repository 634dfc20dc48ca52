"""Readable views of a normalized config: the chain it builds and every hyperparameter."""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

from ._build import solver_learning_rate
from ._kinds import params_of
from ._registry import lookup


def _value(value: Any) -> str:
    if isinstance(value, Mapping) and "name" in value:
        args = ", ".join(f"{k}={_value(v)}" for k, v in value.items() if k != "name")
        return f"{value['name']}({args})"
    if isinstance(value, float):
        return f"{value:g}"
    return repr(value)


def _call(name: str, args: Mapping[str, Any]) -> str:
    return f"{name}(" + ", ".join(f"{k}={_value(v)}" for k, v in args.items()) + ")"


def chain_lines(config: Mapping[str, Any]) -> list[str]:
    """The transformation a config builds, one part per line, wrappers indented around."""
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
    else:
        out.append((prefix, _value(value), note))


def hyperparameter_rows(config: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """(config path, value, note) for every setting, the solver's defaults included."""
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
        if section != "optimizer":
            _flatten(section, value, rows)
    return rows


def learning_rate_label(config: Mapping[str, Any]) -> str:
    lr = solver_learning_rate(config["optimizer"])
    return "none" if lr is None else _value(lr)


__all__ = ["chain_lines", "hyperparameter_rows", "learning_rate_label"]
