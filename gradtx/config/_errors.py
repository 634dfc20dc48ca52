"""The one error type of config-driven construction, and the pieces of its messages: config
paths and close matches."""

from __future__ import annotations

import difflib
import math
import reprlib
from collections.abc import Iterable, Mapping


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


_LONG_KEY = 60  # characters of a key shown in a path


def join(path: str, key: object) -> str:
    """`path.key` (`path[3]` for list indices); a long or odd key is shortened."""
    if isinstance(key, int) and not isinstance(key, bool):
        return f"{path}[{key}]"
    text = key if isinstance(key, str) else shown(key)
    if len(text) > _LONG_KEY:
        text = f"{text[: _LONG_KEY - 3]}..."
    return f"{path}.{text}" if path else text


_REPR = reprlib.Repr()
_REPR.maxstring = _REPR.maxother = 60
_REPR.maxlevel, _REPR.maxlist, _REPR.maxtuple, _REPR.maxdict, _REPR.maxset = 2, 4, 4, 4, 4


def digits(value: int) -> int:
    """About how many decimal digits `value` has (without formatting it: Python refuses to
    format integers of more than 4300 digits)."""
    return max(1, math.ceil(abs(value).bit_length() * math.log10(2)))


def shown(value: object) -> str:
    """`value` for a message: its type and a repr bounded in length and depth, never the whole
    of a large value (a YAML alias bomb expands to gigabytes)."""
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list | tuple):
        return "a list"
    if callable(value):
        return f"a {type(value).__name__} (configs hold data; name a registered factory)"
    if isinstance(value, int) and not isinstance(value, bool) and abs(value).bit_length() > 64:
        return f"an integer of {digits(value)} digits"
    if isinstance(value, str | int | float | bool) or value is None:
        return _REPR.repr(value)
    return f"a {type(value).__name__} {_REPR.repr(value)}"


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
    if not isinstance(name, str) or len(name) > 100:
        return ""
    names = [str(c) for c in candidates]
    close = difflib.get_close_matches(str(name), names, n=3)
    synonym = _SYNONYMS.get(str(name).lower())
    if synonym in names and synonym not in close:
        close.insert(0, synonym)
    return f" (did you mean {' or '.join(repr(c) for c in close)}?)" if close else ""


__all__ = ["ConfigError", "did_you_mean", "digits", "join", "shown"]
