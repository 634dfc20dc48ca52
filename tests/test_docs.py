"""The documentation: the site builds strictly, its examples run, its tables match the code.

- `mkdocs build --strict` succeeds (broken links, anchors and cross-references are errors), and
  every documented API block is on the rendered reference page. The site works opened from disk:
  its links name .html files, no `:math:` role is left raw, and MathJax is bundled into it when
  the build can fetch it (docs/hooks.py), the CDN otherwise.
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
import importlib.util
import inspect
import os
import pkgutil
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

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


def _docs_module(name: str):
    """docs/NAME.py (the site's hooks and Griffe extension), imported from its path."""
    spec = importlib.util.spec_from_file_location(f"gradtx_docs_{name}", DOCS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The site, built once for this module's tests: (its directory, the build's log)."""
    site = tmp_path_factory.mktemp("docs") / "site"
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
    return site, log


@pytest.mark.subprocess
def test_site_builds_strictly(site):
    site, log = site
    assert "WARNING" not in log, log[-5000:]
    # Every `::: name` block of the API reference is rendered (an anchor with its name).
    api = (site / "api.html").read_text()
    documented = re.findall(r"^::: (\S+)$", (DOCS / "api.md").read_text(), flags=re.MULTILINE)
    missing = [name for name in documented if f'id="{name}"' not in api]
    assert len(documented) > 300 and not missing, missing
    # Docstring math reaches MathJax as display math, not as reST.
    assert ".. math::" not in api and ":math:`" not in api
    assert "<blockquote>" not in api  # no `>>>` or `>= 0` line read as a Markdown quote
    assert api.count('class="arithmatex"') > 100
    # The benchmarks page is benchmarks/README.md, included at build time.
    readme_title = (ROOT / "benchmarks" / "README.md").read_text().splitlines()[0].lstrip("# ")
    assert readme_title in (site / "benchmarks.html").read_text()


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        href = dict(attrs).get("href")
        if tag == "a" and href is not None:
            self.hrefs.append(href)


@pytest.mark.subprocess
def test_site_links_work_from_disk(site):
    """Opened as files (file://, no server to map a folder to its index.html), every link of
    every page, the navigation's included, names an existing .html file (or an anchor, or an
    outside address)."""
    site, _ = site
    # 404.html is the page a server answers for any missing path: its links are absolute.
    pages = sorted(p for p in site.glob("*.html") if p.name != "404.html")
    assert len(pages) > 20 and not list(site.glob("*/index.html"))
    nav = 0
    for page in pages:
        links = _Links()
        links.feed(page.read_text())
        for href in links.hrefs:
            target = urlsplit(href)
            if target.scheme or href.startswith("#"):
                continue
            assert target.path.endswith(".html"), (page.name, href)
            assert (page.parent / unquote(target.path)).is_file(), (page.name, href)
            nav += page.name == "index.html"
    assert nav > 20  # the navigation's links are among them


@pytest.mark.subprocess
def test_site_has_no_raw_math_roles(site):
    """No `:math:` role reaches a page unconverted (one wrapped across a docstring's lines did),
    outside code that shows the role itself."""
    site, _ = site
    for page in [*site.glob("*.html"), site / "search" / "search_index.json"]:
        text = re.sub(r"<code>.*?</code>", "", page.read_text(), flags=re.DOTALL)
        assert ":math:" not in text, (page.name, text[text.index(":math:") - 200 :][:400])


@pytest.mark.subprocess
def test_site_bundles_mathjax(site):
    """The pages load MathJax from the site itself when the build could bundle it (the cache is
    filled with npm), and from the CDN only otherwise, saying why."""
    site, log = site
    hooks = _docs_module("hooks")
    bundle, why = hooks.mathjax_bundle()
    for page in (site / "index.html", site / "api.html"):
        scripts = re.findall(r'<script src="([^"]+)"', page.read_text())
        assert "javascripts/mathjax.js" in scripts, scripts  # the settings, before MathJax
        if bundle is not None:
            assert hooks.MATHJAX_SCRIPT in scripts and hooks.MATHJAX_CDN not in scripts, scripts
            assert scripts.index("javascripts/mathjax.js") < scripts.index(hooks.MATHJAX_SCRIPT)
        else:
            assert hooks.MATHJAX_CDN in scripts, scripts
            assert "MathJax is not bundled" in log, why
    if bundle is not None:
        copied = site / hooks.MATHJAX_DIR
        assert (copied / "tex-mml-svg.js").read_bytes() == (bundle / "tex-mml-svg.js").read_bytes()
        assert (copied / "input" / "tex" / "extensions").is_dir()  # what it loads on demand


def _mkdocs_config():
    from mkdocs.config import load_config

    return load_config(str(ROOT / "mkdocs.yml"))


def test_mathjax_hook_uses_a_filled_cache(tmp_path, monkeypatch):
    hooks = _docs_module("hooks")
    cache = tmp_path / "mathjax"
    (cache / "input" / "tex").mkdir(parents=True)
    (cache / "tex-mml-svg.js").write_text("// MathJax")
    (cache / "input" / "tex" / "ext.js").write_text("// an extension")
    monkeypatch.setenv("GRADTX_MATHJAX_DIR", str(cache))
    config = _mkdocs_config()
    config = config.plugins.on_config(config)  # the events as a build runs them, hooks included
    scripts = [str(s) for s in config.extra_javascript]
    assert hooks.MATHJAX_SCRIPT in scripts and hooks.MATHJAX_CDN not in scripts
    from mkdocs.structure.files import Files

    files = config.plugins.on_files(Files([]), config=config)
    uris = sorted(f.dest_uri for f in files)
    assert uris == [f"{hooks.MATHJAX_DIR}/input/tex/ext.js", hooks.MATHJAX_SCRIPT]


def test_mathjax_hook_keeps_the_cdn_without_a_bundle(tmp_path, monkeypatch):
    hooks = _docs_module("hooks")
    monkeypatch.setenv("GRADTX_MATHJAX_DIR", str(tmp_path / "empty"))
    monkeypatch.setenv("GRADTX_DOCS_MATHJAX", "cdn")  # no fetching
    config = _mkdocs_config()
    config = config.plugins.on_config(config)  # the events as a build runs them, hooks included
    assert [str(s) for s in config.extra_javascript] == [
        "javascripts/mathjax.js",
        hooks.MATHJAX_CDN,
    ]
    from mkdocs.structure.files import Files

    assert not list(config.plugins.on_files(Files([]), config=config))
    assert not (tmp_path / "empty").exists()


def test_math_role_wrapped_across_lines_is_converted():
    to_markdown = _docs_module("griffe_math").to_markdown
    doc = "With :math:`a +\n    b` and :math:`c`.\n\nArgs:\n  x: :math:`\\lambda\n    y` >= 0."
    assert (
        to_markdown(doc)
        == "With \\( a + b \\) and \\( c \\).\n\nArgs:\n  x: \\( \\lambda y \\) >= 0."
    )
    with pytest.raises(ValueError, match="not closed"):
        to_markdown("An open :math:`role\n\nends the paragraph.")


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
