"""A Griffe extension for the docs build: docstrings' reST math to arithmatex, `Example:` sections.

gradtx's docstrings write update rules as reST (`.. math::` blocks and :math:`x` roles, which read
well in `help()`); mkdocstrings renders Markdown. This rewrites, in every docstring of the
package, a `.. math::` block into `$$ ... $$` display math (one block per blank-line separated
equation; lines joined by `\\` are wrapped in a `gathered` or, with `&`, an `aligned`
environment) and a :math:`x` role into `\\( x \\)`, both of which pymdownx.arithmatex passes to
MathJax untouched (a role that wraps onto the next line of its paragraph is joined into one line
first; one still open at the paragraph's end fails the build, naming the docstring). A section
titled `Example:` (the house style's singular) is renamed `Examples:`, the title Griffe's Google
parser reads as examples (`>>>` lines rendered as code, not as Markdown); a doctest in running
text (outside such a section) becomes a `pycon` code block; a line or an argument's description
starting with `>` (as in `>= 0`) is escaped so that it does not turn into a quote. It changes only
the text given to the renderer, never the package.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_ROLE = re.compile(r":math:`([^`]*)`")
_OPEN_ROLE = re.compile(r":math:`")  # left once the closed roles are taken out: an open one
_DIRECTIVE = re.compile(r"^(\s*)\.\. math::\s*(.*)$")
_EXAMPLE = re.compile(r"^(\s*)Examples?:\s*$")
_QUOTE_LIKE = re.compile(r"^(\s*(?:\**\w+:\s+)?)>")  # a line or an argument's text starting with >


def _display(indent: str, lines: list[str]) -> list[str]:
    text = "\n".join(indent + line.strip() for line in lines if line.strip())
    if not text:
        return []
    if "\\\\" in text:
        env = "aligned" if "&" in text else "gathered"
        text = f"{indent}\\begin{{{env}}}\n{text}\n{indent}\\end{{{env}}}"
    return ["", f"{indent}$$", text, f"{indent}$$", ""]


def to_markdown(doc: str) -> str:
    """`doc` for the Markdown renderer (see the module docstring)."""
    lines = doc.split("\n")
    out: list[str] = []
    examples_indent: int | None = None  # inside an `Examples:` section: its title's indentation
    i = 0
    while i < len(lines):
        line = lines[i]
        if examples_indent is not None and line.strip() and _indent(line) <= examples_indent:
            examples_indent = None
        title = _EXAMPLE.match(line)
        directive = _DIRECTIVE.match(line)
        if title:
            examples_indent = len(title.group(1))
            out.append(f"{title.group(1)}Examples:")
            i += 1
        elif examples_indent is None and line.lstrip().startswith(">>>"):
            indent = line[: _indent(line)]  # a doctest in running text: a console code block
            block = []
            while i < len(lines) and lines[i].strip():
                block.append(lines[i])
                i += 1
            out.extend(["", f"{indent}```pycon", *block, f"{indent}```", ""])
        elif directive:
            i = _math_block(lines, i + 1, directive.group(1), directive.group(2), out)
        else:
            i += 1
            while _OPEN_ROLE.search(_ROLE.sub("", line)):  # a role wrapped onto the next line
                if i == len(lines) or not lines[i].strip():
                    raise ValueError(
                        f"a :math: role is not closed in its paragraph: {line.strip()!r}"
                    )
                line = f"{line.rstrip()} {lines[i].strip()}"
                i += 1
            if examples_indent is None:  # `x: >= 0` or a wrapped `>= 0`: not a Markdown quote
                line = _QUOTE_LIKE.sub(r"\1\\>", line)
            out.append(_ROLE.sub(lambda m: f"\\( {m.group(1)} \\)", line))
    return "\n".join(out)


def _math_block(lines: list[str], i: int, indent: str, first: str, out: list[str]) -> int:
    """Append the `.. math::` block whose body starts at line `i`; the index after it."""
    body, equation = [], [first] if first else []
    while i < len(lines) and (not lines[i].strip() or _indent(lines[i]) > len(indent)):
        if lines[i].strip():
            equation.append(lines[i])
        elif equation:
            body.append(equation)
            equation = []
        i += 1
    if equation:
        body.append(equation)
    for eq in body:
        out.extend(_display(indent, eq))
    return i


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


class RstMath(griffe.Extension):
    """Rewrite reST math in every docstring of the loaded package (see the module docstring)."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        self._walk(pkg, set())

    def _walk(self, obj: Any, seen: set[str]) -> None:
        if obj.is_alias or obj.path in seen:
            return
        seen.add(obj.path)
        if obj.docstring is not None:
            try:
                obj.docstring.value = to_markdown(obj.docstring.value)
            except ValueError as error:  # fails the build, naming the docstring
                raise ValueError(f"{obj.path}: {error}") from error
        for member in obj.members.values():
            self._walk(member, seen)
