"""The shape of the code: how much there is, and how deep one optimizer step goes.

`python -m benchmarks.code_shape` prints

- the code lines of `gradtx/` (no blank lines, comments or docstrings), and
- what one eager `gradtx.adamw(1e-3).update(...)` runs inside the package: calls, distinct
  functions (comprehensions count: they are frames in Python 3.11), files, and the deepest
  stack of package frames.

Counts, not times: the same on every machine for one Python version.
"""

from __future__ import annotations

import ast
import io
import os
import pathlib
import sys
import tokenize
from typing import Any


def code_lines(source: str) -> int:
    """Lines holding code: not blank, not only a comment, not part of a docstring."""
    docstrings: set[int] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            first = body[0] if body else None
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                docstrings.update(range(first.lineno, (first.end_lineno or first.lineno) + 1))
    skip = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT}
    lines: set[int] = set()
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type in skip or tok.type == tokenize.ENDMARKER:
            continue
        lines.update(n for n in range(tok.start[0], tok.end[0] + 1) if n not in docstrings)
    return len(lines)


def package_lines(root: pathlib.Path) -> int:
    return sum(code_lines(p.read_text()) for p in sorted(root.rglob("*.py")))


def adamw_trace() -> dict[str, Any]:
    """Calls into the package during one eager `adamw` update (after a first, warming one)."""
    import jax
    import jax.numpy as jnp

    import gradtx

    package = os.path.dirname(gradtx.__file__)
    tx = gradtx.adamw(1e-3)
    params = {"w": jnp.ones((3, 4)), "b": jnp.zeros(4)}
    state = tx.init(params)
    grads = jax.tree.map(jnp.ones_like, params)
    tx.update(grads, state, params)
    calls, functions, files, deepest = 0, set(), set(), 0
    stack: list[bool] = []

    def profile(frame: Any, event: str, arg: Any) -> None:
        nonlocal calls, deepest
        if event == "call":
            inside = frame.f_code.co_filename.startswith(package)
            stack.append(inside)
            if inside:
                calls += 1
                code = frame.f_code
                functions.add((code.co_filename, code.co_name, code.co_firstlineno))
                files.add(os.path.relpath(code.co_filename, package))
                deepest = max(deepest, sum(stack))
        elif event == "return" and stack:
            stack.pop()

    sys.setprofile(profile)
    try:
        tx.update(grads, state, params)
    finally:
        sys.setprofile(None)
    return {"calls": calls, "functions": len(functions), "files": sorted(files), "depth": deepest}


def main() -> None:
    root = pathlib.Path(__file__).resolve().parents[1] / "gradtx"
    print(f"code lines of gradtx/: {package_lines(root)}")
    trace = adamw_trace()
    print(
        f"one eager adamw update: {trace['calls']} calls, {trace['functions']} distinct "
        f"functions, {len(trace['files'])} files, {trace['depth']} package frames deep"
    )
    for name in trace["files"]:
        print(f"  {name}")


if __name__ == "__main__":
    main()
