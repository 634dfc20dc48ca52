"""The public API: documented, listed in docs/api.md, and re-exported explicitly."""

from __future__ import annotations

import importlib.util
import inspect
from pathlib import Path

import gradtx

ROOT = Path(__file__).parent.parent


def _make_api():
    spec = importlib.util.spec_from_file_location("make_api", ROOT / "docs" / "make_api.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


NAMESPACES = ("nnabla", "returnn", "contrib", "config")


def _public():
    names = {n: getattr(gradtx, n) for n in dir(gradtx) if not n.startswith("_")}
    for ns in NAMESPACES:  # the namespaces' names are public too
        module = getattr(gradtx, ns)
        listed = getattr(module, "__all__", None) or [n for n in dir(module) if n[0] != "_"]
        names.update({f"{ns}.{n}": getattr(module, n) for n in listed})
    return names


def test_every_public_name_has_a_docstring():
    missing = [n for n, o in _public().items() if not (inspect.getdoc(o) or "").strip()]
    assert not missing


def test_every_public_factory_documents_its_arguments():
    undocumented = []
    for name, obj in _public().items():
        if not inspect.isfunction(obj) or not inspect.signature(obj).parameters:
            continue
        doc = inspect.getdoc(obj) or ""
        # Optax-named schedule aliases document themselves by pointing at the gradtx function.
        if "Args:" not in doc and "under Optax's name" not in doc:
            undocumented.append(name)
    assert not undocumented


def test_api_reference_is_current():
    expected = _make_api().render()
    actual = (ROOT / "docs" / "api.md").read_text()
    assert actual == expected, "docs/api.md is out of date: run `python docs/make_api.py`"


def test_init_only_re_exports():
    source = (ROOT / "gradtx" / "__init__.py").read_text()
    body = [
        line
        for line in source.splitlines()
        if line.strip() and not line.startswith(("#", "from ", '"""', "__version__"))
    ]
    # The module docstring's text lines are the only other lines.
    assert all(not line.startswith(("def ", "class ", "import ")) for line in body), body
