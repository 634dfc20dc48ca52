"""MkDocs hooks for the gradtx site (mkdocs.yml `hooks:`).

`<!-- include: PATH -->` on a line of its own in a page is replaced, at build time, by the text of
PATH (relative to the repository root), so a page can show a file that lives elsewhere in the
repository (benchmarks/README.md) without a copy that could go stale. A missing file fails the
build.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from mkdocs.exceptions import PluginError

ROOT = Path(__file__).resolve().parent.parent
_INCLUDE = re.compile(r"^<!-- include: (\S+) -->$", flags=re.MULTILINE)


def _include(match: re.Match[str]) -> str:
    path = ROOT / match.group(1)
    if not path.is_file():
        raise PluginError(f"docs include: {match.group(1)} does not exist")
    return path.read_text()


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    return _INCLUDE.sub(_include, markdown)
