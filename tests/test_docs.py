"""The documentation: the site builds strictly, its examples run, its tables match the code.

- `mkdocs build --strict` succeeds (broken links, anchors and cross-references are errors), and
  every documented API block is on the rendered reference page.
- Every ```python block of every page in docs/ runs, in order, one namespace per page (as
  tests/test_readme.py does for the README). A block is skipped only when the line right before
  its fence is `<!-- docs-test: skip: REASON -->` with a reason the page shows.
- The doctests (`>>>` examples) in gradtx's docstrings pass, and the central functions have one.
- The migration tables name real gradtx objects and list every optimizer of the registry, and the
  nnabla / RETURNN rows name what `from_nnabla` / `from_returnn` build.
"""

from __future__ import annotations

import doctest
import importlib
import inspect
import os
import pkgutil
import re
import subprocess
import sys
from pathlib import Path

import pytest

import gradtx

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
PAGES = sorted(DOCS.glob("*.md"))

_FENCE = re.compile(r"^```python\n(.*?)^```", flags=re.DOTALL | re.MULTILINE)
_SKIP = re.compile(r"^<!-- docs-test: skip: (\S.*?) -->$")


def _blocks(page: Path) -> list[tuple[int, str, str | None]]:
    """The page's python blocks as (line, code, skip reason or None)."""
    text = page.read_text()
    out = []
    for match in _FENCE.finditer(text):
        line = text.count("\n", 0, match.start()) + 1
        before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        skip = _SKIP.match(before)
        out.append((line, match.group(1), skip.group(1) if skip else None))
    return out


# -- the site --------------------------------------------------------------------------------------


@pytest.mark.subprocess
def test_site_builds_strictly(tmp_path):
    site = tmp_path / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    log = result.stdout + result.stderr
    assert result.returncode == 0, log[-5000:]
    assert "WARNING" not in log, log[-5000:]
    # Every `::: name` block of the API reference is rendered (an anchor with its name).
    api = (site / "api" / "index.html").read_text()
    documented = re.findall(r"^::: (\S+)$", (DOCS / "api.md").read_text(), flags=re.MULTILINE)
    missing = [name for name in documented if f'id="{name}"' not in api]
    assert len(documented) > 300 and not missing, missing
    # Docstring math reaches MathJax as display math, not as reST.
    assert ".. math::" not in api and ":math:`" not in api
    assert "<blockquote>" not in api  # no `>>>` or `>= 0` line read as a Markdown quote
    assert api.count('class="arithmatex"') > 100
    # The benchmarks page is benchmarks/README.md, included at build time.
    readme_title = (ROOT / "benchmarks" / "README.md").read_text().splitlines()[0].lstrip("# ")
    assert readme_title in (site / "benchmarks" / "index.html").read_text()


# -- the pages' examples ---------------------------------------------------------------------------


def test_pages_have_examples():
    assert len(PAGES) >= 15
    exempt = ("api.md", "benchmarks.md", "contributing.md")  # generated, included, prose
    without = [p.name for p in PAGES if p.name not in exempt and not _blocks(p)]
    assert not without, f"pages without a python example: {without}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_page_python_blocks_run(page, monkeypatch):
    monkeypatch.chdir(ROOT)
    namespace: dict = {"__name__": f"docs_{page.stem}"}
    for line, code, skip in _blocks(page):
        if skip is not None:
            continue
        source = "\n" * (line) + code  # tracebacks point at the page's own line numbers
        exec(compile(source, str(page), "exec"), namespace)


def test_skip_marker_is_read(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        "text\n\n<!-- docs-test: skip: needs a GPU -->\n```python\nraise SystemExit\n```\n\n"
        "```python\nx = 1\n```\n"
    )
    assert [(line, skip) for line, _, skip in _blocks(page)] == [(4, "needs a GPU"), (8, None)]


def test_skipped_blocks_say_why():
    """The skip marker needs a reason, and the marker is the only way to skip."""
    for page in PAGES:
        for line in page.read_text().splitlines():
            if line.startswith("<!-- docs-test"):
                assert _SKIP.match(line), f"{page.name}: malformed marker {line!r}"


# -- doctests in docstrings ------------------------------------------------------------------------

_FLAGS = doctest.NORMALIZE_WHITESPACE | doctest.ELLIPSIS
_MODULES = sorted(
    ["gradtx", *(m.name for m in pkgutil.walk_packages(gradtx.__path__, "gradtx."))],
)


def _doctests(module_name: str) -> list[doctest.DocTest]:
    module = importlib.import_module(module_name)
    tests = doctest.DocTestFinder(exclude_empty=True).find(module, module_name, globs={})
    return [t for t in tests if t.examples]


_WITH_DOCTESTS = [m for m in _MODULES if _doctests(m)]

# Central functions whose docstrings must carry a runnable example.
CENTRAL = [
    "chain",
    "apply_updates",
    "adam",
    "adamw",
    "sgd",
    "clip_by_global_norm",
    "accumulate_k_steps",
    "apply_if_finite",
    "inject_hyperparams",
    "multi_transform",
    "masked",
    "from_config",
    "warmup_cosine_decay_schedule",
    "schedules.exponential_decay",
    "schedules.piecewise_constant",
    "schedules.join",
    "lookahead",
    "jit_step",
]


@pytest.fixture
def restored_registry():
    """The config registry as it was: examples register names (`register`'s `my_sgd`), which
    would otherwise stay for the tests that run after them in this process."""
    from gradtx.config._registry import _ensure

    reg = _ensure()
    saved = {k: dict(v) for k, v in reg.entries.items()}, {k: dict(v) for k, v in reg.names.items()}
    aliases = {id(e): list(e.aliases) for kind in reg.entries.values() for e in kind.values()}
    yield
    reg.entries, reg.names = saved
    for kind in reg.entries.values():
        for e in kind.values():
            e.aliases = aliases[id(e)]


@pytest.mark.parametrize("module_name", _WITH_DOCTESTS)
def test_docstring_examples(module_name, restored_registry):
    runner = doctest.DocTestRunner(optionflags=_FLAGS)
    for test in _doctests(module_name):
        runner.run(test, out=lambda text: None)
    results = runner.summarize(verbose=False)
    if results.failed:  # run again, reporting, for a readable failure
        report: list[str] = []
        reporter = doctest.DocTestRunner(optionflags=_FLAGS)
        for test in _doctests(module_name):
            reporter.run(test, out=report.append)
        pytest.fail("".join(report))


@pytest.mark.parametrize("name", CENTRAL)
def test_central_functions_have_examples(name):
    obj = gradtx
    for part in name.split("."):
        obj = getattr(obj, part)
    doc = inspect.getdoc(obj) or ""
    assert ">>> " in doc, f"gradtx.{name} has no doctest example"
    assert re.search(r"^Examples?:$", doc, flags=re.MULTILINE), f"gradtx.{name}: no Examples:"


def test_enough_doctests():
    count = sum(len(_doctests(m)) for m in _WITH_DOCTESTS)
    assert count >= 90, count


# -- the migration tables --------------------------------------------------------------------------

MIGRATION = DOCS / "migration.md"
# The library's own optimizers (tests and doctests register more, named `test_*` / `my_*`).
BUILTIN = [n for n in gradtx.available() if not n.startswith(("test_", "my_"))]
_LINK = re.compile(r"\[`(gradtx\.[\w.]+)`\]\[(gradtx\.[\w.]+)\]")


def _section(title: str) -> str:
    text = MIGRATION.read_text()
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end >= 0 else None]


def _rows(title: str) -> list[tuple[list[str], list[str]]]:
    """Each table row of a section: (the backticked names of its first cell, its gradtx links)."""
    rows = []
    for line in _section(title).splitlines():
        if not line.startswith("| `"):
            continue
        first, rest = line[1:].split("|", 1)
        rows.append((re.findall(r"`([^`]+)`", first), [m[1] for m in _LINK.findall(rest)]))
    return rows


def _resolve(dotted: str):
    obj = gradtx
    for part in dotted.split(".")[1:]:
        obj = getattr(obj, part)
    return obj


def test_migration_links_name_real_objects():
    for shown, target in _LINK.findall(MIGRATION.read_text()):
        assert shown == target, (shown, target)
        _resolve(target)


def test_migration_lists_every_optimizer():
    linked = {id(_resolve(target)) for _, target in _LINK.findall(MIGRATION.read_text())}
    missing = [n for n in BUILTIN if id(gradtx.get_optimizer(n)) not in linked]
    assert not missing, missing


def test_migration_optax_rows_match_optax():
    optax = pytest.importorskip("optax")

    rows = _rows("Optax")
    for names, links in rows:
        assert links, names
        for theirs in names:
            obj = optax
            for part in theirs.split("(")[0].split(".")[1:]:  # `optax.MultiSteps(opt, k)`
                obj = getattr(obj, part, None) or importlib.import_module(f"{obj.__name__}.{part}")
    for name in BUILTIN:  # every registry optimizer Optax has, by the same name
        ours = gradtx.get_optimizer(name)
        short = name.rsplit(".", 1)[-1]
        if "." in name or not (hasattr(optax.contrib, short) or hasattr(optax, short)):
            continue
        listed = [links for names, links in rows if names[0].endswith(f".{short}")]
        assert listed and _resolve(listed[0][0]) is ours, name


def test_migration_nnabla_and_returnn_rows_match_the_loaders():
    from gradtx.nnabla._config import _SOLVERS
    from gradtx.returnn._config import _CLASSES

    for title, table in (("nnabla", _SOLVERS), ("RETURNN", _CLASSES)):
        rows = {names[0]: links for names, links in _rows(title)}
        assert set(rows) == set(table), (title, set(rows) ^ set(table))
        for key, links in rows.items():
            built = table[key][0]
            assert links[0] == f"gradtx.{built}", (title, key, links[0], built)
