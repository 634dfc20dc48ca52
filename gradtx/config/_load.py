"""Reading a config: a dict, a YAML or JSON file, or a YAML / JSON string.

What is read is held to the bounds of `_limits` (depth, size, finite numbers) before anything
else looks at it; duplicate keys in YAML and JSON mappings are refused, not resolved.
"""

from __future__ import annotations

import codecs
import functools
import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ._errors import ConfigError, shown
from ._limits import (
    MAX_DEPTH,
    MAX_FILE_BYTES,
    MAX_INT_LITERAL,
    OversizedInt,
    check_document,
    int_literal,
)

_SUFFIXES = (".yaml", ".yml", ".json")
_JSON_OBJECT = re.compile(r'\s*\{\s*["}]')


def _yaml() -> Any:
    try:
        import yaml
    except ImportError:  # pragma: no cover - pyyaml is in the test environment
        raise ConfigError(
            "reading YAML configs needs PyYAML: pip install 'gradtx[config]' "
            "(from a checkout: pip install -e '.[config]')"
        ) from None
    return yaml


def _json_pairs(where: str) -> Any:
    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in items:
            if key in out:
                raise ConfigError(
                    f"{where}: invalid JSON: duplicate key {shown(key)} in one object; remove one"
                )
            out[key] = value
        return out

    return pairs


_JSON_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"?|[\[{]|[\]}]')


def _check_json_depth(text: str, where: str) -> None:
    """Refuse JSON nested deeper than `MAX_DEPTH` before parsing it (the parser recurses)."""
    depth = 0
    for m in _JSON_TOKEN.finditer(text):
        token = m.group()
        if token in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                line = text.count("\n", 0, m.start()) + 1
                column = m.start() - (text.rfind("\n", 0, m.start()) + 1) + 1
                raise ConfigError(
                    f"{where}:{line}:{column}: invalid JSON: nested deeper than {MAX_DEPTH} levels"
                )
        elif token in "]}":
            depth -= 1


def _parse_json(text: str, where: str) -> Any:
    _check_json_depth(text, where)
    try:
        return json.loads(text, parse_int=int_literal, object_pairs_hook=_json_pairs(where))
    except json.JSONDecodeError as e:
        raise ConfigError(f"{where}:{e.lineno}:{e.colno}: invalid JSON: {e.msg}") from None
    except RecursionError:  # pragma: no cover - the depth check comes first
        raise ConfigError(f"{where}: invalid JSON: nested too deeply") from None


@functools.cache
def _loader() -> Any:
    """PyYAML's safe loader (the C one where there is one) that refuses duplicate keys and
    leaves integer literals too long to convert to `check_document`."""
    yaml = _yaml()
    base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

    class Loader(base):  # type: ignore[misc, valid-type]
        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            if isinstance(node, yaml.MappingNode):
                seen: dict[Any, Any] = {}
                for key_node, _ in node.value:
                    if key_node.tag == "tag:yaml.org,2002:merge":
                        continue  # `<<: *defaults`: later keys override the merged ones
                    key = self.construct_object(key_node, deep=True)
                    try:
                        first = seen.setdefault(key, key_node)
                    except TypeError:  # unhashable: the base class names it
                        continue
                    if first is not key_node:
                        mark = key_node.start_mark
                        raise yaml.MarkedYAMLError(
                            problem=f"duplicate key {shown(key)} (first on line "
                            f"{first.start_mark.line + 1}); remove one",
                            problem_mark=mark,
                        )
            return super().construct_mapping(node, deep=deep)

        def construct_yaml_int(self, node: Any) -> Any:
            text = self.construct_scalar(node)
            if len(text) > MAX_INT_LITERAL:
                return OversizedInt(text)
            return super().construct_yaml_int(node)

    Loader.add_constructor("tag:yaml.org,2002:int", Loader.construct_yaml_int)
    return Loader


def _parse_yaml(text: str, where: str) -> Any:
    yaml = _yaml()
    try:
        return yaml.load(text, Loader=_loader())
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        line = f":{mark.line + 1}:{mark.column + 1}" if mark is not None else ""
        problem = " ".join(str(p) for p in (e.context, e.problem) if p)
        raise ConfigError(f"{where}{line}: invalid YAML: {problem}") from None
    except yaml.reader.ReaderError as e:
        # a character YAML does not allow (a NUL byte, a control character); `position` is its
        # index in `text`, and the message's second line names PyYAML's "<unicode string>"
        before = text[: e.position]
        line = f":{before.count(chr(10)) + 1}:{len(before) - before.rfind(chr(10))}"
        raise ConfigError(f"{where}{line}: invalid YAML: {str(e).splitlines()[0]}") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{where}: invalid YAML: {' '.join(str(e).split())}") from None
    except RecursionError:
        raise ConfigError(f"{where}: invalid YAML: nested too deeply") from None


def _parse_text(text: str, where: str) -> Any:
    """JSON where the text opens as a JSON object does (`{"` or `{}`), YAML otherwise (a YAML
    flow mapping `{optimizer: {name: sgd}}` opens with a brace too)."""
    if _JSON_OBJECT.match(text):
        return _parse_json(text, where)
    return _parse_yaml(text, where)


def _looks_like_path(text: str) -> bool:
    return "\n" not in text and (text.strip().endswith(_SUFFIXES) or os.path.isfile(text))


def read_text(path: Path, what: str = "config") -> str:
    """The text of the `what` file `path`.

    A missing, unreadable, too large or non-UTF-8 file, or a path that is no regular file (a
    folder, `/dev/null`), is a `ConfigError` naming it (and for bad UTF-8 the byte offset).
    """
    name = repr(str(path))
    try:
        if path.exists() and not path.is_file():
            kind = "a folder" if path.is_dir() else "not a regular file"
            raise ConfigError(f"the {what} path {name} is not a file ({kind})")
        with path.open("rb") as f:
            data = f.read(MAX_FILE_BYTES + 1)
    except FileNotFoundError:
        raise ConfigError(f"{what} file not found: {name}") from None
    except OSError as e:
        raise ConfigError(f"cannot read the {what} file {name}: {e}") from None
    if len(data) > MAX_FILE_BYTES:
        raise ConfigError(f"the {what} file {name} is larger than {MAX_FILE_BYTES} bytes")
    bom = len(codecs.BOM_UTF8) if data.startswith(codecs.BOM_UTF8) else 0
    try:
        return data[bom:].decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(
            f"{path}: the {what} file is not UTF-8 text: byte {e.start + bom} "
            f"(0x{data[e.start + bom]:02x}): {e.reason}; save it as UTF-8"
        ) from None


def read(source: Any, what: str = "config") -> tuple[dict[str, Any], str]:
    """`(mapping, where)` from a dict, a file path, or YAML / JSON text.

    `where` names the source in messages (the file name, "<string>" or "<dict>"). A syntax error
    raises a `ConfigError` with the file, the line and the column.
    """
    if isinstance(source, Mapping):
        check_document(source)
        return dict(source), "<dict>"
    if isinstance(source, os.PathLike) or (isinstance(source, str) and _looks_like_path(source)):
        path = Path(os.fspath(source))
        text = read_text(path, what)
        where = str(path)
        parse = {".json": _parse_json, ".yaml": _parse_yaml, ".yml": _parse_yaml}.get(
            path.suffix, _parse_text
        )
        data = parse(text, where)
    elif isinstance(source, str):
        where = "<string>"
        data = _parse_text(source, where)
    else:
        raise ConfigError(
            f"a {what} must be a dict, a YAML / JSON file path or a YAML / JSON string, got "
            f"{type(source).__name__}"
        )
    if not isinstance(data, Mapping):
        got = "empty" if data is None else f"a {type(data).__name__}"
        hint = ""
        if where == "<string>" and isinstance(data, str) and "\n" not in source.strip():
            hint = f" (and no file {shown(source.strip())} exists)"
        raise ConfigError(f"{where}: the {what} must be a mapping of sections, got {got}{hint}")
    check_document(data)
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
