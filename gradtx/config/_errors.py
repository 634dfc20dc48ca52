"""The one error type of config-driven construction."""

from __future__ import annotations


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


__all__ = ["ConfigError", "join"]
