"""`from_returnn`: RETURNN's optimizer options as a gradtx optimizer.

The translation follows RETURNN's TF updater (`returnn/tf/updater.py`): `optimizer={"class": ...}`
looked up ignoring case and an "Optimizer" suffix, `epsilon` injected from `optimizer_epsilon`
(1e-16 by default) into every class that takes one, `learning_rate` (times the dict's
`learning_rate_multiplier`), and the gradient pipeline in RETURNN's order: accumulation (a sum),
noise, value clipping, per-tensor and global norm clipping, NaN/Inf filtering. The result is an
ordinary gradtx config (`to_config` shows it) built by `from_config`. Options gradtx does not
reproduce raise a `ConfigError` naming them.

The translation is one pass over the whole document: it renames RETURNN's options to gradtx's,
raises only for what is RETURNN's own (an unknown option or class, an unused option), and hands
the values over as they are; the config layer validates the result once (`from_dialect`), and
its messages name the RETURNN option a value came from (`gradient_clip_global_norm`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ..config._errors import ConfigError, did_you_mean, join, shown
from ..config._from_config import ConfiguredOptimizer, from_dialect
from ..config._load import read

_ADAM_KW = {"beta1": "b1", "beta2": "b2", "epsilon": "eps"}
# class (lower case, no "Optimizer" suffix) -> (gradtx solver, {RETURNN kwarg: gradtx argument})
_CLASSES: dict[str, tuple[str, dict[str, str]]] = {
    "adam": ("nnabla.adam", _ADAM_KW),  # tf.compat.v1.train.AdamOptimizer: the epsilon-hat form
    "customadam": ("nnabla.adam", _ADAM_KW),
    "nadam": ("returnn.nadam", _ADAM_KW),
    "amsgrad": ("returnn.amsgrad", {**_ADAM_KW, "decay": "decay"}),
    "gradientdescent": ("sgd", {}),
    "customgradientdescent": ("sgd", {}),
    "sgd": ("sgd", {"momentum": "momentum", "nesterov": "nesterov"}),
    "momentum": ("sgd", {"momentum": "momentum", "use_nesterov": "nesterov"}),
    "normalizedsgd": ("normalized_sgd", {}),
    "neuraloptimizer1": (
        "neural_optimizer1",
        {"beta1": "beta1", "decrease_factor": "decrease_factor"},
    ),
    "gradvariancescaled": (
        "grad_variance_scaled",
        {"beta1": "beta1", "beta2": "beta2", "epsilon": "eps"},
    ),
}
CLASSES = sorted(_CLASSES)
_SUPPORTED = {
    "optimizer",
    "learning_rate",
    "optimizer_epsilon",
    "momentum",
    "gradient_clip",
    "gradient_clip_norm",
    "gradient_clip_global_norm",
    "gradient_noise",
    "accum_grad_multiple_step",
    "gradient_nan_inf_filter",
}
_WHY = {
    "learning_rate_control": "epoch-level learning-rate control (newbob) needs the epoch scores; "
    "use gradtx.newbob",
    "learning_rates": "per-epoch learning rates need the epoch; give a schedule in a gradtx config",
    "dynamic_learning_rate": "a Python callable; give a schedule in a gradtx config",
    "decouple_constraints": "layer L2 constraints belong to the network; use a gradtx "
    "weight_decay section",
    "gradient_clip_avg_norm": "not implemented in gradtx",
    "grad_norm_to_clip_to_zero": "not implemented in gradtx",
    "maximize_grad_norm": "changes the loss, not the optimizer",
    "global_norm_tag": "tags select variables of the network",
    "gradient_clip_global_norm_tag": "tags select variables of the network",
    "optimizer_use_locking": "TF locking has no JAX counterpart",
}
for _flag in ("adam", "nadam", "adadelta", "adagrad", "rmsprop"):
    _WHY[_flag] = "a legacy optimizer flag (BehaviorVersion < 2); use optimizer={'class': ...}"


def _is(value: Any, *literals: float) -> bool:
    """Whether `value` is one of `literals` given as a number (not a bool, not a string)."""
    return type(value) in (int, float) and value in literals


def _float(value: Any) -> float | None:
    """`value` as a float for the translation's own arithmetic, or None where it is no number
    (then it is handed on as it is, for the config layer to name)."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    try:
        return float(value)
    except ValueError:
        return None


def _scalar(value: Any, path: str) -> Any:
    """RETURNN's learning rate and momentum are numbers: a mapping or a list is refused here
    (gradtx would read a mapping as a schedule block)."""
    if isinstance(value, Mapping | list | tuple):
        got = "a mapping" if isinstance(value, Mapping) else "a list"
        raise ConfigError(f"must be a number, got {got}", path)
    return value


def _scaled(lr: Any, mult: Any, paths: dict[str, str]) -> Any:
    """RETURNN's `learning_rate` times the optimizer dict's `learning_rate_multiplier`."""
    paths["optimizer.learning_rate"] = "learning_rate"
    if mult is None:
        return lr
    lr_value, mult_value = _float(lr), _float(mult)
    if lr_value is None:
        return lr
    if mult_value is None:
        paths["optimizer.learning_rate"] = "optimizer.learning_rate_multiplier"
        return mult
    return lr_value * mult_value


def _class_name(value: Any, path: str) -> str:
    if not isinstance(value, str):
        raise ConfigError(f"must be a class name such as 'adam', got {shown(value)}", path)
    key = value.lower().replace("_", "")
    if key.endswith("optimizer") and key != "optimizer":
        key = key[: -len("optimizer")]
    if key not in _CLASSES:
        raise ConfigError(
            f"unsupported optimizer class {shown(value)}{did_you_mean(key, CLASSES)}; the classes "
            f"are {CLASSES}",
            path,
        )
    return key


def returnn_config(config: Any) -> tuple[dict[str, Any], dict[str, str]]:
    """The plain gradtx config (not yet validated) that RETURNN's optimizer options translate
    to, and the map from its paths to the RETURNN options they came from."""
    raw, _ = read(config, "RETURNN config")
    for key in raw:
        if key not in _SUPPORTED:
            why = _WHY.get(str(key))
            hint = f" ({why})" if why else did_you_mean(key, _SUPPORTED)
            raise ConfigError(f"unsupported RETURNN option {shown(key)}{hint}", join("", key))
    if "optimizer" not in raw:
        raise ConfigError("missing: give optimizer={'class': 'adam', ...}", "optimizer")
    opt = raw["optimizer"]
    if isinstance(opt, str):
        opt = {"class": opt}
    if not isinstance(opt, Mapping):
        raise ConfigError(
            f"must be a class name or a dict with 'class', got {shown(opt)}", "optimizer"
        )
    if "class" not in opt:
        raise ConfigError("missing: the optimizer dict needs 'class'", "optimizer.class")
    key = _class_name(opt["class"], "optimizer.class")
    name, kwargs = _CLASSES[key]
    paths: dict[str, str] = {}
    block: dict[str, Any] = {"name": name}
    lr = _scalar(raw.get("learning_rate", 1.0), "learning_rate")
    mult = None
    for item, value in opt.items():
        where = join("optimizer", item)
        if item == "class":
            continue
        if item in ("learning_rate", "lr"):
            raise ConfigError(
                "the learning rate is the config's learning_rate option "
                "(RETURNN rejects it here too)",
                where,
            )
        if item == "learning_rate_multiplier":
            mult = _scalar(value, where)
            continue
        if item not in kwargs:
            raise ConfigError(
                f"{opt['class']} takes no option {shown(item)}"
                f"{did_you_mean(item, [*kwargs, 'learning_rate_multiplier'])}; its options "
                f"are {[*kwargs, 'learning_rate_multiplier']}",
                where,
            )
        block[kwargs[item]] = _scalar(value, where) if kwargs[item] == "momentum" else value
        paths[join("optimizer", kwargs[item])] = where
    block["learning_rate"] = _scaled(lr, mult, paths)
    if "epsilon" in kwargs and "eps" not in block:
        block["eps"] = raw.get("optimizer_epsilon", 1e-16)
        paths["optimizer.eps"] = "optimizer_epsilon"
    momentum = raw.get("momentum")
    if momentum is not None:
        if "momentum" not in kwargs.values():
            raise ConfigError(
                f"unused: the class {shown(opt['class'])} takes no momentum", "momentum"
            )
        if "momentum" not in block and not _is(momentum, 0):
            block["momentum"] = _scalar(momentum, "momentum")
            paths["optimizer.momentum"] = "momentum"
    if key == "momentum" and "momentum" not in block:
        raise ConfigError(
            "missing: MomentumOptimizer needs a momentum (in the dict or the "
            "config's momentum option)",
            "optimizer.momentum",
        )
    out: dict[str, Any] = {"optimizer": block}
    clip = {}
    for option, section_key in (
        ("gradient_clip", "value"),
        ("gradient_clip_norm", "norm"),
        ("gradient_clip_global_norm", "global_norm"),
    ):
        if raw.get(option) is not None:
            clip[section_key] = raw[option]
            paths[f"clip.{section_key}"] = option
    if clip:
        out["clip"] = clip
    sigma = raw.get("gradient_noise")
    if sigma is not None:
        std = _float(sigma)
        if std is None:  # no number: handed on, named by the config layer
            out["noise"] = {"eta": sigma, "gamma": 0.0, "truncation": 2.0}
            paths["noise.eta"] = "gradient_noise"
        elif std < 0:  # its square, the variance, would hide the sign
            raise ConfigError(f"must be >= 0, got {std}", "gradient_noise")
        elif std > 0:
            variance = std * std
            if not math.isfinite(variance):  # its square, the variance, must be a float too
                raise ConfigError(
                    f"out of range: the noise variance, its square, overflows; got {shown(sigma)}",
                    "gradient_noise",
                )
            out["noise"] = {"eta": variance, "gamma": 0.0, "truncation": 2.0}
    nan_filter = raw.get("gradient_nan_inf_filter", False)
    if not isinstance(nan_filter, bool):  # a flag with no config value to hand it on as
        raise ConfigError(
            f"must be true or false, got {shown(nan_filter)}", "gradient_nan_inf_filter"
        )
    if nan_filter:
        out["nonfinite"] = {"action": "zero"}
    k = raw.get("accum_grad_multiple_step")
    if k is not None and not _is(k, 1):
        out["accumulate"] = {"k": k, "average": False}
        paths["accumulate.k"] = "accum_grad_multiple_step"
    return out, paths


def from_returnn(config: Any) -> ConfiguredOptimizer:
    """Build the gradtx optimizer of RETURNN's optimizer options.

    `config` holds RETURNN's config options (a dict, or a YAML / JSON file or string)::

        {"optimizer": {"class": "adam", "beta1": 0.9}, "learning_rate": 1e-3,
         "optimizer_epsilon": 1e-8, "gradient_clip_global_norm": 5.0,
         "accum_grad_multiple_step": 2, "gradient_nan_inf_filter": True}

    Classes (case-insensitive, with or without the "Optimizer" suffix): `adam` and `customadam`
    (TF's Adam, the ε-hat form: `nnabla.adam`), `nadam` (`returnn.nadam`), `amsgrad`
    (`returnn.amsgrad`), `gradientdescent`, `customgradientdescent`, `sgd`, `momentum`,
    `normalizedsgd`, `neuraloptimizer1`, `gradvariancescaled`. As in RETURNN's TF updater,
    `epsilon` defaults to `optimizer_epsilon` (1e-16) for every class taking one, and
    `learning_rate` defaults to 1.0. Gradient options, in RETURNN's order:
    `accum_grad_multiple_step` (a sum over the steps), `gradient_noise` (a normal with that
    standard deviation truncated at two of them, as RETURNN's; RETURNN draws from TF's
    generator, so the samples differ), `gradient_clip`, `gradient_clip_norm`,
    `gradient_clip_global_norm` (on the gradient after the steps before it; RETURNN takes the
    norm of the raw gradient, which is the same unless `gradient_clip` or noise changed it),
    `gradient_nan_inf_filter`.

    Args:
      config: RETURNN's optimizer options.

    Returns:
      A `ConfiguredOptimizer`; `to_config` gives the equivalent gradtx config.

    Raises:
      ConfigError: unsupported options and classes (named), wrong types and values.

    Reference: RETURNN `returnn/tf/updater.py` (`Updater`, `get_optimizer_class`).
    """
    native, paths = returnn_config(config)
    return from_dialect(native, "returnn", paths)


__all__ = ["CLASSES", "from_returnn", "returnn_config"]
