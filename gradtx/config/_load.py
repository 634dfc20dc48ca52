"""Reading a config: a dict, a YAML or JSON file, or a YAML / JSON string."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ._errors import ConfigError

_SUFFIXES = (".yaml", ".yml", ".json")


def _yaml() -> Any:
    try:
        import yaml
    except ImportError:  # pragma: no cover - pyyaml is in the test environment
        raise ConfigError(
            "reading YAML configs needs PyYAML: pip install 'gradtx[config]'"
        ) from None
    return yaml


def _parse_json(text: str, where: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError(f"{where}:{e.lineno}:{e.colno}: invalid JSON: {e.msg}") from None


def _parse_yaml(text: str, where: str) -> Any:
    yaml = _yaml()
    try:
        return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        line = f":{mark.line + 1}:{mark.column + 1}" if mark is not None else ""
        problem = " ".join(str(p) for p in (e.context, e.problem) if p)
        raise ConfigError(f"{where}{line}: invalid YAML: {problem}") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{where}: invalid YAML: {e}") from None


def _looks_like_path(text: str) -> bool:
    return "\n" not in text and (text.strip().endswith(_SUFFIXES) or os.path.isfile(text))


def read_text(path: Path, what: str = "config") -> str:
    """The text of the `what` file `path`; a missing or unreadable file is a `ConfigError`."""
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{what} file not found: {str(path)!r}") from None
    except OSError as e:
        raise ConfigError(f"cannot read the {what} file {str(path)!r}: {e}") from None


def read(source: Any, what: str = "config") -> tuple[dict[str, Any], str]:
    """`(mapping, where)` from a dict, a file path, or YAML / JSON text.

    `where` names the source in messages (the file name, "<string>" or "<dict>"). A syntax error
    raises a `ConfigError` with the file, the line and the column.
    """
    if isinstance(source, Mapping):
        return dict(source), "<dict>"
    if isinstance(source, os.PathLike) or (isinstance(source, str) and _looks_like_path(source)):
        path = Path(os.fspath(source))
        text = read_text(path, what)
        where = str(path)
        data = _parse_json(text, where) if path.suffix == ".json" else _parse_yaml(text, where)
    elif isinstance(source, str):
        where = "<string>"
        stripped = source.lstrip()
        data = (
            _parse_json(source, where) if stripped.startswith("{") else _parse_yaml(source, where)
        )
    else:
        raise ConfigError(
            f"a {what} must be a dict, a YAML / JSON file path or a YAML / JSON string, got "
            f"{type(source).__name__}"
        )
    if not isinstance(data, Mapping):
        shown = "empty" if data is None else f"a {type(data).__name__}"
        raise ConfigError(f"{where}: the {what} must be a mapping of sections, got {shown}")
    return dict(data), where


def dump(config: Mapping[str, Any], path: str | os.PathLike[str]) -> None:
    """Write `config` to `path` as YAML (`.yaml` / `.yml`) or JSON (`.json`)."""
    target = Path(os.fspath(path))
    if target.suffix == ".json":
        target.write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    elif target.suffix in (".yaml", ".yml"):
        text = _yaml().safe_dump(dict(config), sort_keys=False, default_flow_style=False)
        target.write_text(text, encoding="utf-8")
    else:
        raise ConfigError(f"to_config: path must end in .yaml, .yml or .json, got {str(target)!r}")


__all__ = ["dump", "read", "read_text"]
