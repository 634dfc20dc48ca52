"""`to_config`: a config-built optimizer written back out."""

from __future__ import annotations

import copy
import os
from typing import Any

from ..core._transformation import GradientTransformation
from ._errors import ConfigError
from ._from_config import ConfiguredOptimizer, load_config
from ._load import dump


def to_config(optimizer: Any, path: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """The normalized config of an optimizer built by `from_config`, `from_nnabla` or
    `from_returnn`, optionally written to a file.

    `from_config(to_config(tx))` builds an optimizer with identical updates. For the dialects the
    result is the equivalent gradtx config (e.g. nnabla's `Adam` with its scheduler becomes
    `optimizer: {name: nnabla.adam, learning_rate: {name: nnabla_solver_schedule, ...}}`).

    Args:
      optimizer: a `ConfiguredOptimizer`, or a config (dict, file, string) to normalize.
      path: when given, also write the config there as YAML (`.yaml`, `.yml`) or JSON (`.json`).

    Returns:
      The normalized config (a new dict, plain data).

    Raises:
      ConfigError: `optimizer` is a `GradientTransformation` built in Python (it carries no
        config; build it with `from_config` to be able to write it out), or an invalid config.
    """
    if isinstance(optimizer, ConfiguredOptimizer):
        config = copy.deepcopy(optimizer.config)
    elif isinstance(optimizer, GradientTransformation) or (
        callable(getattr(optimizer, "init", None)) and callable(getattr(optimizer, "update", None))
    ):
        raise ConfigError(
            "to_config: this optimizer was built in Python and carries no config; build it with "
            "gradtx.from_config (or from_nnabla / from_returnn) to be able to write it out"
        )
    else:
        config = load_config(optimizer)
    if path is not None:
        dump(config, path)
    return config


__all__ = ["to_config"]
