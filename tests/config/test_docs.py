"""The Python code in docs/config.md runs as shown, and its printed values are right."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "config.md"


def test_docs_python_blocks_run_and_print_what_the_comments_say():
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.DOTALL)
    assert len(blocks) >= 2
    namespace: dict = {}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        for block in blocks:
            exec(compile(block, str(DOC), "exec"), namespace)
    printed = out.getvalue().splitlines()
    expected = [
        m.split("  # ", 1)[1]
        for b in blocks
        for m in b.splitlines()
        if m.startswith("print(") and "  # " in m
    ]
    assert printed == expected
    assert namespace["tx"].config["optimizer"]["name"] == "nnabla.adam"  # the RETURNN example
