"""nnabla's text format (`.nntxt` / `.prototxt`: protobuf text of `NNablaProtoBuf`) read into the
dicts `from_nnabla` takes: a whole training file (its `optimizer` messages), one `Optimizer`
message, or one `Solver` message."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NoReturn

from ..config._errors import ConfigError, did_you_mean, shown
from ..config._limits import MAX_DEPTH, check_document, int_literal
from ..config._load import read_text

SUFFIXES = (".nntxt", ".prototxt")
# Fields that nnabla's .proto declares `repeated`: lists even when they appear once.
_REPEATED = {
    "network",
    "dataset",
    "optimizer",
    "monitor",
    "executor",
    "parameter_variable",
    "data_variable",
    "generator_variable",
    "loss_variable",
    "dataset_name",
    "iter_steps",
}
# What an `Optimizer` message holds besides its optimizer settings: how the training loop feeds
# and orders it. Present in every file nnabla writes, so dropped here (and refused in dicts).
LOOP_FIELDS = {
    "name",
    "order",
    "network_name",
    "dataset_name",
    "data_variable",
    "generator_variable",
    "loss_variable",
    "start_iter",
    "end_iter",
}
_TOKEN = re.compile(
    r"""(?P<space>[ \t\r\n]+|\#[^\n]*)
    |(?P<string>"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*')
    |(?P<number>[-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?)[fF]?(?![\w.]))
    |(?P<word>-?[A-Za-z_][\w.]*)
    |(?P<punct>[{}<>\[\]:,;])""",
    re.VERBOSE,
)
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", "'": "'", '"': '"'}
_WORDS = {"true": True, "True": True, "false": False, "False": False}
_SPECIAL = {"inf": "inf", "infinity": "inf", "-inf": "-inf", "-infinity": "-inf", "nan": "nan"}


def looks_like_nntxt(text: str) -> bool:
    """Whether `text` is protobuf text rather than YAML / JSON: a field opening a message with a
    brace and no colon (`solver {`), which YAML and JSON never have."""
    return re.search(r"^\s*[A-Za-z_]\w*\s*[{<]", text, re.MULTILINE) is not None


class _Parser:
    def __init__(self, text: str, where: str) -> None:
        self.text, self.where = text, where
        self.tokens: list[tuple[str, str, int]] = []  # (kind, text, offset)
        pos = 0
        while pos < len(text):
            m = _TOKEN.match(text, pos)
            if m is None:
                self.fail(pos, f"unexpected character {text[pos]!r}")
            kind = m.lastgroup or ""
            if kind != "space":
                self.tokens.append((kind, m.group(), pos))
            pos = m.end()
        self.i = 0
        self.fields: list[str] = []  # the field path of the message being read

    def fail(self, offset: int, message: str) -> NoReturn:
        line = self.text.count("\n", 0, offset) + 1
        column = offset - (self.text.rfind("\n", 0, offset) + 1) + 1
        raise ConfigError(f"{self.where}:{line}:{column}: invalid nnabla text format: {message}")

    def peek(self) -> tuple[str, str, int]:
        if self.i < len(self.tokens):
            return self.tokens[self.i]
        return ("end", "", len(self.text))

    def take(self, *texts: str) -> tuple[str, str, int]:
        token = self.peek()
        if texts and token[1] not in texts:
            shown = repr(token[1]) if token[0] != "end" else "the end of the text"
            self.fail(token[2], f"expected {' or '.join(repr(t) for t in texts)}, got {shown}")
        self.i += 1
        return token

    def message(self, close: str | None) -> dict[str, Any]:
        out: dict[str, list[Any]] = {}
        while True:
            kind, text, offset = self.peek()
            if close is not None and text == close:
                self.i += 1
                break
            if kind == "end":
                if close is not None:
                    self.fail(offset, f"missing {close!r} to close a message")
                break
            if kind != "word":
                self.fail(offset, f"expected a field name, got {text!r}")
            self.i += 1
            self.fields.append(text)
            self._add(out, text, self.field_value())
            self.fields.pop()
            if self.peek()[1] in (";", ","):
                self.i += 1
        return {k: (v if k in _REPEATED or len(v) > 1 else v[0]) for k, v in out.items()}

    @staticmethod
    def _add(out: dict[str, list[Any]], name: str, value: Any) -> None:
        values = out.setdefault(name, [])
        values.extend(value if isinstance(value, list) else [value])

    def field_value(self) -> Any:
        colon = self.peek()[1] == ":"
        if colon:
            self.i += 1
        _, text, offset = self.peek()
        if not colon and text not in ("{", "<"):
            self.fail(offset, f"expected ':' or '{{' after the field name, got {text!r}")
        if text == "[":
            self.i += 1
            items: list[Any] = []
            while self.peek()[1] != "]":
                if items:
                    self.take(",")
                items.append(self.message_or_scalar())
            self.i += 1
            return items
        return self.message_or_scalar()

    def message_or_scalar(self) -> Any:
        if self.peek()[1] in ("{", "<"):
            _, text, offset = self.take()
            if len(self.fields) > MAX_DEPTH:
                self.fail(
                    offset,
                    f"messages nested deeper than {MAX_DEPTH} levels (at "
                    f"{'.'.join(self.fields[:MAX_DEPTH])}...)",
                )
            return self.message("}" if text == "{" else ">")
        return self.scalar()

    def scalar(self) -> Any:
        kind, text, offset = self.take()
        if kind == "string":
            parts = [text]
            while self.peek()[0] == "string":  # adjacent strings concatenate
                parts.append(self.take()[1])
            return "".join(_unquote(p) for p in parts)
        if kind == "number":
            body = text.rstrip("fF")
            if re.fullmatch(r"[-+]?\d+", body):
                return int_literal(body)
            return float(body)
        if kind == "word":
            if text in _WORDS:
                return _WORDS[text]
            if text.lower() in _SPECIAL:
                return float(_SPECIAL[text.lower()])
            return text  # an enum value
        self.fail(offset, f"expected a value, got {text!r}")


def _unquote(token: str) -> str:
    return re.sub(r"\\(.)", lambda m: _ESCAPES.get(m.group(1), m.group(1)), token[1:-1])


def parse(text: str, where: str = "<string>") -> dict[str, Any]:
    """The message of protobuf text `text` as a dict (repeated fields as lists); a syntax error
    raises a `ConfigError` with the line and the column."""
    return _Parser(text, where).message(None)


def load(source: Any) -> tuple[dict[str, Any], str] | None:
    """`(message, where)` when `source` is a `.nntxt` / `.prototxt` file or protobuf text;
    None for anything else (dicts, YAML, JSON)."""
    if isinstance(source, os.PathLike) or (
        isinstance(source, str) and "\n" not in source and source.strip().endswith(SUFFIXES)
    ):
        path = Path(os.fspath(source))
        if path.suffix not in SUFFIXES:
            return None
        return parse(read_text(path, "nnabla config"), str(path)), str(path)
    if isinstance(source, str) and looks_like_nntxt(source):
        return parse(source), "<string>"
    return None


def optimizer_message(doc: Mapping[str, Any], where: str, name: str | None) -> dict[str, Any]:
    """The optimizer settings in a parsed file: the `optimizer` message named `name` (or the
    only one) of a whole `NNablaProtoBuf`, or an `Optimizer` / `Solver` message itself; without
    the training-loop fields (`LOOP_FIELDS`)."""
    if "optimizer" in doc:
        field = doc["optimizer"]
        if isinstance(field, Mapping):
            field = [field]
        if not isinstance(field, list | tuple):
            raise ConfigError(
                f"must be an Optimizer message (a mapping) or a list of them, got {shown(field)}",
                "optimizer",
            )
        optimizers = [o for o in field if isinstance(o, Mapping)]
        names = [str(o.get("name", "")) for o in optimizers]
        if name is not None:
            if name not in names:
                raise ConfigError(
                    f"{where}: no optimizer named {shown(name)}{did_you_mean(name, names)}; the "
                    f"file's optimizers are {names}"
                )
            chosen = optimizers[names.index(name)]
        elif len(optimizers) == 1:
            chosen = optimizers[0]
        else:
            raise ConfigError(
                f"{where}: the file has {len(optimizers)} optimizers {names}; pick one with "
                "from_nnabla(..., name=...)"
                if optimizers
                else f"{where}: the file's optimizer field holds no message"
            )
        message = {k: v for k, v in chosen.items() if k not in LOOP_FIELDS}
        check_document(message)
        return message
    if name is not None:
        raise ConfigError(
            f"{where}: name={shown(name)} picks an optimizer of a whole file; this has none"
        )
    message = {k: v for k, v in doc.items() if k not in LOOP_FIELDS}
    check_document(message)
    return message


__all__ = ["LOOP_FIELDS", "SUFFIXES", "load", "looks_like_nntxt", "optimizer_message", "parse"]
