"""The one error type of config-driven construction, and the pieces of its messages: config
paths and close matches."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class ConfigError(ValueError):
    """A config that cannot be turned into an optimizer; the message names the config path.

    Raised by `from_config`, `to_config`, `from_nnabla`, `from_returnn`, `register` and
    `get_optimizer` for unknown names (with close matches), wrong types, out-of-range values,
    missing fields, contradictory options, unsupported dialect fields and malformed files. It is a
    `ValueError`, so existing `except ValueError` handlers keep working.

    Attributes:
      path: the dotted config path the error is about (`"optimizer.b1"`), or "" for the whole
        config.
      message: the message without the path.
    """

    def __init__(self, message: str, path: str = ""):
        super().__init__(f"{path}: {message}" if path else message)
        self.path = path
        self.message = message


def join(path: str, key: object) -> str:
    """`path.key` (`path[3]` for list indices)."""
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else str(key)


# other libraries' spellings of gradtx's argument names (nnabla, PyTorch, TF, Keras)
_SYNONYMS = {
    "beta1": "b1",
    "beta2": "b2",
    "beta3": "b3",
    "betas": "b1",
    "epsilon": "eps",
    "lr": "learning_rate",
    "alpha": "learning_rate",
    "eta": "learning_rate",
    "wd": "weight_decay",
    "rho": "decay",
    "use_nesterov": "nesterov",
    "max_grad_norm": "global_norm",
    "clip_norm": "norm",
}


def did_you_mean(name: object, candidates: Iterable[object]) -> str:
    """' (did you mean 'x'?)' for the closest candidates (also known synonyms), or ''."""
    names = [str(c) for c in candidates]
    close = difflib.get_close_matches(str(name), names, n=3)
    synonym = _SYNONYMS.get(str(name).lower())
    if synonym in names and synonym not in close:
        close.insert(0, synonym)
    return f" (did you mean {' or '.join(repr(c) for c in close)}?)" if close else ""


__all__ = ["ConfigError", "did_you_mean", "join"]
