"""Building a `GradientTransformation` from a normalized config (see `_schema.validate`).

The chain, from the gradients inwards (each part only when its section is given)::

    accumulate_k_steps(                                  # accumulate
      apply_if_finite(                                   # nonfinite: skip
        chain(add_noise, clip, clip_by_norm, clip_by_global_norm, zero_nans,
              lr_multipliers(tx=chain(weight_decay [coupled], <solver>,
                                      scale(-1), weight_decay [decoupled], scale(-1))))))
    then chain(..., ema_params)                          # ema

Every part is the public factory called with the config's values, so the result is the optimizer
one would write by hand and compiles to the same program.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from typing import Any

from .._base._recipe import recorded
from .._base._typing import ScalarOrSchedule
from ..core import chain
from ..transforms import add_noise as add_noise_tx
from ..transforms import clip as clip_tx
from ..transforms import clip_by_global_norm, clip_by_norm, scale, zero_nans
from ..transforms import weight_decay as weight_decay_tx
from ..wrappers import accumulate_k_steps as accumulate_k_steps_tx
from ..wrappers import apply_if_finite
from ..wrappers import ema_params as ema_params_tx
from ..wrappers import lr_multipliers as lr_multipliers_tx
from ._errors import ConfigError, join
from ._kinds import params_of
from ._registry import Entry, lookup

_MAX_MESSAGE = 1_000  # characters of a factory's message kept
_MUST = re.compile(r"\b([A-Za-z_]\w*) (?:must|needs|requires)\b")


def _locate(message: str, path: str, argmap: Mapping[str, str]) -> tuple[str, str]:
    """The config path an error message is about, and the message relative to it."""
    for match in _MUST.finditer(message):
        key = argmap.get(match.group(1))
        if key is not None:
            origin = message[: match.start()].rstrip(": ")
            rest = message[match.end(1) :].lstrip()
            return (f"{rest} (from {origin})" if origin else rest), join(path, key)
    return message, path


def call(
    factory: Callable[..., Any],
    kwargs: Mapping[str, Any],
    path: str,
    argmap: Mapping[str, str] | None = None,
) -> Any:
    """`factory(**kwargs)`; any error becomes a `ConfigError` at the config path it is about.

    `argmap` maps the factory's argument names to the config keys (default: the same names).
    """
    try:
        return factory(**kwargs)
    except ConfigError:
        raise
    except Exception as e:  # a factory's own validation (ValueError, TypeError, ...)
        names = dict(argmap) if argmap is not None else {k: k for k in kwargs}
        text = f"{e}"
        if len(text) > _MAX_MESSAGE:
            text = f"{text[: _MAX_MESSAGE - 3]}..."
        message, where = _locate(text, path, names)
        raise ConfigError(message, where) from e


def _argument(kind: str, value: Any, path: str) -> Any:
    if value is None:
        return None
    if kind == "scalar_or_schedule" and isinstance(value, Mapping):
        return build_schedule(value, path)
    if kind == "schedule":
        return build_schedule(value, path)
    if kind == "schedule_list":
        return [build_schedule(v, join(path, i)) for i, v in enumerate(value)]
    if kind == "optimizer":
        return build_optimizer(value, path)
    if kind == "dtype":
        import jax.numpy as jnp

        return jnp.dtype(value)
    return value


def _arguments(entry: Entry, block: Mapping[str, Any], path: str) -> dict:
    return {
        key: _argument(entry.kinds.get(key, "any"), value, join(path, key))
        for key, value in block.items()
        if key not in ("name", "warmup")
    }


def build_schedule(block: Mapping[str, Any], path: str) -> Any:
    """The schedule of a normalized schedule block."""
    from .. import schedules

    entry = lookup(block["name"], "schedule", join(path, "name"))
    schedule = call(entry.factory, _arguments(entry, block, path), path)
    warm = block.get("warmup")
    if warm is not None:
        kwargs = {"schedule": schedule, "warmup_steps": warm["steps"]}
        if "init_value" in warm:
            kwargs["init_value"] = warm["init_value"]
        if "mode" in warm:
            kwargs["mode"] = warm["mode"]
        argmap = {"warmup_steps": "steps", "init_value": "init_value", "mode": "mode"}
        schedule = call(schedules.warmup, kwargs, join(path, "warmup"), argmap)
    return schedule


def build_optimizer(block: Mapping[str, Any], path: str = "optimizer") -> Any:
    """The transformation of a normalized optimizer block."""
    entry = lookup(block["name"], "optimizer", join(path, "name"))
    return call(entry.factory, _arguments(entry, block, path), path)


def solver_learning_rate(block: Mapping[str, Any]) -> Any:
    """The solver's learning rate as configured: a number, a schedule block, or its default."""
    if "learning_rate" in block:
        return block["learning_rate"]
    params, _ = params_of(lookup(block["name"]).factory)
    if "learning_rate" in params:
        default = params["learning_rate"].default
        return None if default is params["learning_rate"].empty else default
    return None


def built_learning_rate(config: Mapping[str, Any]) -> Any:
    """The solver's learning rate, built: a float, a schedule, or None (the solver has none)."""
    lr = solver_learning_rate(config["optimizer"])
    if isinstance(lr, Mapping):
        return build_schedule(lr, "optimizer.learning_rate")
    return lr


@recorded(schedule=True)
def decoupled_weight_decay(rate: ScalarOrSchedule, learning_rate: ScalarOrSchedule) -> Any:
    """The schedule :math:`\\lambda_t \\eta_t` of a decoupled decay whose rate or learning rate
    is a schedule. Recorded like gradtx's own schedules, so that `gradtx.hyperparameters` reads
    (and a population varies) the numbers of both."""
    from ..schedules import NamedSchedule

    def at(step: Any, value: Any) -> Any:
        return value(step) if callable(value) else value

    return NamedSchedule(
        "decoupled_weight_decay",
        lambda step: at(step, rate) * at(step, learning_rate),
        rate=rate,
        lr=learning_rate,
    )


def _decoupled_rate(rate: Any, lr: Any) -> Any:
    """:math:`\\lambda_t \\eta_t`, the decoupled decay rate, as a number or a schedule."""
    if not callable(rate) and not callable(lr):
        product = float(rate) * float(lr)
        if not math.isfinite(product):
            raise ConfigError(
                f"out of range: rate {rate} times the learning rate {lr} overflows", "weight_decay"
            )
        return product
    return decoupled_weight_decay(rate, lr)


def _core(config: Mapping[str, Any]) -> Any:
    solver = build_optimizer(config["optimizer"])
    wd = config.get("weight_decay")
    if wd is None:
        return solver
    rate = _argument("scalar_or_schedule", wd["rate"], "weight_decay.rate")
    mask = wd.get("mask")
    if wd["mode"] == "coupled":
        decay = call(weight_decay_tx, {"rate": rate, "mask": mask}, "weight_decay")
        return chain(decay, solver)
    lr = built_learning_rate(config)
    if lr is None:
        raise ConfigError(
            f"mode 'decoupled' scales the decay by the learning rate, and the solver "
            f"{config['optimizer']['name']} has none; use mode: coupled",
            "weight_decay.mode",
        )
    decay = call(
        weight_decay_tx,
        {"rate": _decoupled_rate(rate, lr), "mask": mask},
        "weight_decay",
        {"rate": "rate", "mask": "mask"},
    )
    return chain(solver, scale(-1.0), decay, scale(-1.0))


def build(config: Mapping[str, Any]) -> Any:
    """The `GradientTransformation` of a normalized config."""
    tx = _core(config)
    mult = config.get("lr_multipliers")
    if mult is not None:
        kwargs = {"rules": mult["rules"], "tx": tx}
        kwargs.update({k: mult[k] for k in ("default", "strict") if k in mult})
        tx = call(lr_multipliers_tx, kwargs, "lr_multipliers")
    pre = []
    noise = config.get("noise")
    if noise is not None:
        pre.append(call(add_noise_tx, noise, "noise"))
    clip = config.get("clip", {})
    for key, factory, arg in (
        ("value", clip_tx, "max_delta"),
        ("norm", clip_by_norm, "max_norm"),
        ("global_norm", clip_by_global_norm, "max_norm"),
    ):
        if clip.get(key) is not None:
            pre.append(call(factory, {arg: clip[key]}, "clip", {arg: key}))
    nonfinite = config.get("nonfinite")
    if nonfinite is not None and nonfinite["action"] == "zero":
        pre.append(zero_nans(non_finite=True))
    if pre:
        tx = chain(*pre, tx)
    if nonfinite is not None and nonfinite["action"] == "skip":
        n = nonfinite["max_consecutive_errors"]
        tx = call(apply_if_finite, {"tx": tx, "max_consecutive_errors": n}, "nonfinite")
    acc = config.get("accumulate")
    if acc is not None:
        tx = call(accumulate_k_steps_tx, {"tx": tx, **acc}, "accumulate")
    ema = config.get("ema")
    if ema is not None:
        tx = chain(tx, call(ema_params_tx, ema, "ema"))
    return tx


__all__ = ["build", "build_optimizer", "build_schedule", "built_learning_rate", "call"]
