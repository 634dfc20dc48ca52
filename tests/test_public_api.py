"""The public API: documented, listed in docs/api.md, and re-exported explicitly."""

from __future__ import annotations

import importlib.util
import inspect
import re
import typing
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


def _is_type_alias(obj) -> bool:
    """`Schedule`, `ScalarOrSchedule`, `Params`: documented by the attribute docstrings of
    gradtx/_base/_typing.py (an alias object cannot carry a docstring of its own)."""
    return typing.get_origin(obj) is not None or obj is typing.Any


def test_every_public_name_has_a_docstring():
    missing = [
        n
        for n, o in _public().items()
        if not _is_type_alias(o) and not (inspect.getdoc(o) or "").strip()
    ]
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


def test_api_reference_lists_every_public_name_once():
    """Each public name is one `::: name` block (rendered by mkdocstrings) or one alias line
    linking to the block of the object it names; every object has exactly one block."""
    make_api = _make_api()
    text = (ROOT / "docs" / "api.md").read_text()
    blocks = re.findall(r"^::: (\S+)$", text, flags=re.MULTILINE)
    aliases = re.findall(r"^- `(\S+)` is \[`(\S+)`\]\[(\S+)\]\.$", text, flags=re.MULTILINE)
    listed = blocks + [alias for alias, _, _ in aliases]
    public = make_api.public_names()
    assert sorted(listed) == sorted(set(listed)), "a name is listed twice"
    assert set(listed) == set(public) - {"gradtx.__version__"}
    assert len({id(public[name]) for name in blocks}) == len(blocks), "an object has two blocks"
    for alias, shown, target in aliases:
        assert shown == target and target in blocks and public[alias] is public[target], alias
    # the namespaces of gradtx/__init__.py's `# --` families and of NAMESPACES are all covered
    assert {f"gradtx.{ns}.{n}" for ns in NAMESPACES for n in _namespace_names(ns)} <= set(listed)


def _namespace_names(namespace):
    module = getattr(gradtx, namespace)
    names = getattr(module, "__all__", None) or [n for n in dir(module) if n[0] != "_"]
    return [n for n in names if not inspect.ismodule(getattr(module, n))]


def test_init_only_re_exports():
    source = (ROOT / "gradtx" / "__init__.py").read_text()
    body = [
        line
        for line in source.splitlines()
        if line.strip() and not line.startswith(("#", "from ", '"""', "__version__"))
    ]
    # The module docstring's text lines are the only other lines.
    assert all(not line.startswith(("def ", "class ", "import ")) for line in body), body


def test_every_public_factory_records_how_it_was_called():
    """`gradtx.hyperparameters` reads a transformation's numbers from the record its factory
    attached: a public factory of transformations or schedules is `@recorded` (an alias by
    `alias_errors`), or its numbers would silently stay constants of the compiled step."""
    import gradtx.contrib
    import gradtx.nnabla
    import gradtx.returnn
    import gradtx.schedules

    unrecorded = []
    for module in (gradtx, gradtx.contrib, gradtx.nnabla, gradtx.returnn, gradtx.schedules):
        names = getattr(module, "__all__", None) or [n for n in dir(module) if n[0] != "_"]
        for name in names:
            obj = getattr(module, name)
            if not inspect.isfunction(obj):
                continue
            returns = str(inspect.signature(obj).return_annotation)
            if "GradientTransformation" not in returns and "Schedule" not in returns:
                continue
            if not getattr(obj, "__gradtx_records__", False):
                unrecorded.append(f"{module.__name__}.{name}")
    known = {
        "gradtx.inject_hyperparams",
        "gradtx.inject_stateful_hyperparams",
    }  # factories of factories
    assert sorted(set(unrecorded) - known) == []
