"""`from_config`: a config (dict, YAML / JSON file or string) to a gradtx optimizer."""

from __future__ import annotations

import copy
import os
from collections.abc import Mapping
from typing import Any

import jax.numpy as jnp
import numpy as np

from ..core._transformation import GradientTransformation
from ._build import build, built_learning_rate, solver_learning_rate
from ._errors import ConfigError
from ._load import read
from ._schema import validate
from ._sweep import build_population, member_configs


class ConfiguredOptimizer(GradientTransformation):
    """A `GradientTransformation` built from a config, which it keeps.

    It is the `GradientTransformation` itself (`init`, `update`; accepted wherever one is), with
    two more attributes: `config`, the normalized config it was built from (what `to_config`
    returns), and `source`, where that config came from (a file name, "<dict>", "<string>", or
    "nnabla" / "returnn" for the dialects).

    A config with a `sweep` section builds a population (`gradtx.population`) of K members;
    `member_configs` lists their configs, and the learning rate is given per member.
    """

    config: dict[str, Any]
    source: str

    @property
    def member_configs(self) -> list[dict[str, Any]] | None:
        """For a sweep, the normalized config of each member (what `from_config` of it builds
        on its own, the member's values at the swept paths); None for a single optimizer."""
        return member_configs(self.config) if "sweep" in self.config else None

    @property
    def learning_rate(self) -> Any:
        """The solver's learning rate: a float, a schedule `step -> value`, or None; for a
        sweep, a list of them, one per member."""
        members = self.member_configs
        if members is not None:
            return [built_learning_rate(m) for m in members]
        return built_learning_rate(self.config)

    def learning_rate_at(self, steps: Any) -> np.ndarray:
        """The solver's learning rate at `steps` (an int or an array of ints), as float32.

        Steps count the solver's own updates (with `accumulate`, one per `k` micro-steps).
        Steps beyond int32 give the value at 2**31 - 1, where the solver's step counter stops
        (counters saturate, they never wrap). Solvers without a learning rate give NaN. For a
        sweep the result has a leading member axis: shape `(K, *np.shape(steps))`.
        """
        steps_arr = saturated_steps(steps)
        members = self.member_configs
        if members is None:
            return _rate_at(built_learning_rate(self.config), steps_arr)
        rows: dict[str, np.ndarray] = {}  # members with the same learning rate share a row
        for member in members:
            key = repr(solver_learning_rate(member["optimizer"]))
            if key not in rows:
                rows[key] = _rate_at(built_learning_rate(member), steps_arr)
        return np.stack([rows[repr(solver_learning_rate(m["optimizer"]))] for m in members])


def _rate_at(lr: Any, steps: np.ndarray) -> np.ndarray:
    if lr is None:
        return np.full(steps.shape, np.nan, np.float32)
    if callable(lr):
        return np.asarray(lr(jnp.asarray(steps, jnp.int32)), np.float32)
    return np.full(steps.shape, lr, np.float32)


def saturated_steps(steps: Any) -> np.ndarray:
    """`steps` as int32, those beyond int32 clipped to its range (as the step counters are)."""
    arr = np.asarray(steps)
    lo, hi = np.iinfo(np.int32).min, np.iinfo(np.int32).max
    if arr.dtype == object:
        try:
            clipped = [min(max(int(s), lo), hi) for s in arr.ravel().tolist()]
        except (TypeError, ValueError, OverflowError):
            raise TypeError(f"learning_rate_at: steps must be integers, got {steps!r}") from None
        return np.asarray(clipped, np.int64).reshape(arr.shape).astype(np.int32)
    if arr.dtype.kind == "f":
        if not np.all(np.isfinite(arr)):
            raise ValueError("learning_rate_at: steps must be finite")
        return np.clip(np.trunc(arr), lo, hi).astype(np.int32)
    if arr.dtype.kind not in "iub":
        raise TypeError(f"learning_rate_at: steps must be integers, got dtype {arr.dtype}")
    if arr.dtype.kind == "u":
        return np.minimum(arr, np.uint64(hi)).astype(np.int32)
    return np.clip(arr.astype(np.int64), lo, hi).astype(np.int32)


def configured(tx: Any, config: dict[str, Any], source: str) -> ConfiguredOptimizer:
    out = ConfiguredOptimizer(tx.init, tx.update)
    out.config = config
    out.source = source
    return out


def load_config(source: Any) -> dict[str, Any]:
    """A config read and validated, in normalized form, without building anything.

    Args:
      source: a dict, a path to a `.yaml` / `.yml` / `.json` file, or YAML / JSON text.

    Returns:
      The normalized config: canonical solver and schedule names, one mapping per section.

    Raises:
      ConfigError: naming the config path (`optimizer.b1: must be a number, got 'x'`), or the
        file, line and column of a syntax error.
    """
    if isinstance(source, ConfiguredOptimizer):
        return copy.deepcopy(source.config)
    raw, _ = read(source)
    return validate(raw)


def from_config(source: Any) -> ConfiguredOptimizer:
    """Build an optimizer from a config: a dict, a YAML / JSON file, or a YAML / JSON string.

    The config has an `optimizer` block (`name` and the solver's hyperparameters by their Python
    argument names; `learning_rate` a number or a schedule block) and optional sections beside
    it: `weight_decay`, `clip`, `noise`, `nonfinite`, `lr_multipliers`, `accumulate`, `ema`.
    A `sweep` section gives lists of values by config path (`{mode: grid | zip, values:
    {optimizer.learning_rate: [1.0e-4, 1.0e-3], ...}}`): the config then builds a population,
    one member per combination (grid) or position (zip) of the values. The whole config is
    validated before anything is built; docs/config.md is the schema.

    Args:
      source: a dict, a path to a `.yaml` / `.yml` / `.json` file, or YAML / JSON text.

    Returns:
      A `ConfiguredOptimizer`: the `GradientTransformation`, which also keeps its normalized
      config (`to_config` writes it back out). With a sweep, the transformation is
      `gradtx.population(tx, hyperparams)`: params, updates and state carry a leading member
      axis, and member k updates as `from_config(tx.member_configs[k])` would.

    Raises:
      ConfigError: unknown names (with close matches), wrong types, out-of-range values,
        missing fields and contradictory options, naming the config path; syntax errors name
        the file and line.

    Example:
      >>> import gradtx
      >>> tx = gradtx.from_config('''
      ... optimizer:
      ...   name: adamw
      ...   learning_rate: {name: warmup_cosine_decay, init_value: 0.0, peak_value: 0.001,
      ...                   warmup_steps: 100, decay_steps: 1000}
      ...   weight_decay: 0.01
      ...   mask: "!**/bias"
      ... clip: {global_norm: 1.0}
      ... ''')
      >>> float(tx.learning_rate_at(100))
      0.0010000000474974513
    """
    if isinstance(source, ConfiguredOptimizer):
        source = source.config
    raw, where = read(source)
    config = validate(raw)
    tx = build_population(config) if "sweep" in config else build(config)
    return configured(tx, config, where if isinstance(source, str | os.PathLike) else "<dict>")


def _origin(path: str, origins: Mapping[str, str]) -> str:
    """The dialect field a config path came from (the longest mapped prefix), or `path`."""
    for key in sorted(origins, key=len, reverse=True):
        if path == key or path.startswith((f"{key}.", f"{key}[")):
            return origins[key] + path[len(key) :]
    return path


def from_dialect(
    config: Mapping[str, Any], source: str, origins: Mapping[str, str]
) -> ConfiguredOptimizer:
    """Build the plain config that a dialect translated a whole document into.

    The config is validated once, like any other, and built; an error at a path that the
    dialect filled from one of its own fields (`origins`: config path -> dialect field, e.g.
    `optimizer.b1` -> `solver.adam_param.beta1`) names that field instead.
    """
    try:
        normalized = validate(config)
        return configured(build(normalized), normalized, source)
    except ConfigError as e:
        where = _origin(e.path, origins)
        if where == e.path:
            raise
        raise ConfigError(e.message, where) from e


__all__ = ["ConfiguredOptimizer", "configured", "from_config", "from_dialect", "load_config"]
