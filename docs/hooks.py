"""MkDocs hooks for the gradtx site (mkdocs.yml `hooks:`).

`<!-- include: PATH -->` on a line of its own in a page is replaced, at build time, by the text of
PATH (relative to the repository root), so a page can show a file that lives elsewhere in the
repository (benchmarks/README.md) without a copy that could go stale. A missing file fails the
build.

MathJax ships with the site, so that its formulas render offline (the site opened from disk): the
build takes MathJax's `tex-mml-svg.js` bundle (SVG output: no web fonts to load, which browsers
restrict over file://) and the files it loads on demand from a cache directory
(`$GRADTX_MATHJAX_DIR`, by default `~/.cache/gradtx/mathjax-VERSION`), filling the cache once
with `npm pack` of the pinned version, checked against its pinned sha512. The bundle is copied
into the site as `javascripts/mathjax/` and replaces the CDN address in mkdocs.yml's
`extra_javascript`; it is never committed. Where the bundle cannot be had (no npm, no registry,
or `GRADTX_DOCS_MATHJAX=cdn`), the build says so and the site keeps the CDN address.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path, PurePosixPath
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parent.parent
_INCLUDE = re.compile(r"^<!-- include: (\S+) -->$", flags=re.MULTILINE)
log = logging.getLogger("mkdocs.hooks.gradtx")

MATHJAX_VERSION = "3.2.2"
MATHJAX_INTEGRITY = (  # npm's dist.integrity of mathjax@3.2.2
    "sha512-Bt+SSVU8eBG27zChVewOicYs7Xsdt40qm4+UpHyX7k0/O9NliPc+x77k1/FEsPsjKPZGJvtRZM1vO+geW0OhGw=="
)
MATHJAX_CDN = "https://cdn.jsdelivr.net/npm/mathjax@3/es5/tex-mml-svg.js"  # as in mkdocs.yml
MATHJAX_DIR = "javascripts/mathjax"  # where the bundle lies in the site
MATHJAX_SCRIPT = f"{MATHJAX_DIR}/tex-mml-svg.js"
# What the site needs of the package's es5/: the bundle, and what it loads on demand (TeX
# extensions, SVG font data, the menu's accessibility and speech parts).
_KEEP = ("tex-mml-svg.js", "input/", "output/svg", "a11y/", "ui/", "sre/", "adaptors/")

_bundle: Path | None = None  # this build's MathJax directory, if it has one (set by on_config)


def _include(match: re.Match[str]) -> str:
    path = ROOT / match.group(1)
    if not path.is_file():
        raise PluginError(f"docs include: {match.group(1)} does not exist")
    return path.read_text()


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    return _INCLUDE.sub(_include, markdown)


# -- MathJax, bundled ------------------------------------------------------------------------------


def mathjax_cache() -> Path:
    """The directory that holds (or will hold) the MathJax files of the site."""
    if os.environ.get("GRADTX_MATHJAX_DIR"):
        return Path(os.environ["GRADTX_MATHJAX_DIR"])
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "gradtx" / f"mathjax-{MATHJAX_VERSION}"


def mathjax_bundle(fetch: bool = False) -> tuple[Path | None, str]:
    """The MathJax directory (None if there is none) and why not; `fetch` fills an empty cache."""
    cache = mathjax_cache()
    if (cache / "tex-mml-svg.js").is_file():
        return cache, ""
    if os.environ.get("GRADTX_DOCS_MATHJAX") == "cdn":
        return None, "GRADTX_DOCS_MATHJAX=cdn"
    if not fetch:
        return None, f"{cache} holds no MathJax"
    why = _fetch(cache)
    return (None, why) if why else (cache, "")


def _fetch(dest: Path) -> str:
    """Fill `dest` with the needed part of the npm package; the reason if it could not."""
    npm = shutil.which("npm")
    if npm is None:
        return "npm is not installed"
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest.parent) as tmp:
        try:
            subprocess.run(
                [npm, "pack", f"mathjax@{MATHJAX_VERSION}", "--pack-destination", tmp, "--silent"],
                check=True,
                capture_output=True,
                timeout=180,
            )
        except (OSError, subprocess.SubprocessError) as error:
            return f"`npm pack mathjax@{MATHJAX_VERSION}` failed: {error}"
        tgz = Path(tmp) / f"mathjax-{MATHJAX_VERSION}.tgz"
        digest = "sha512-" + base64.b64encode(hashlib.sha512(tgz.read_bytes()).digest()).decode()
        if digest != MATHJAX_INTEGRITY:
            return f"{tgz.name} does not have the pinned sha512 ({digest})"
        staging = Path(tmp) / "es5"
        with tarfile.open(tgz) as tar:
            for member in tar.getmembers():
                name = PurePosixPath(member.name)
                if (
                    not member.isfile()
                    or name.parts[:2] != ("package", "es5")
                    or ".." in name.parts
                ):
                    continue
                rel = "/".join(name.parts[2:])
                if rel.startswith(_KEEP):
                    target = staging / rel
                    target.parent.mkdir(parents=True, exist_ok=True)
                    source = tar.extractfile(member)
                    assert source is not None  # a regular file
                    target.write_bytes(source.read())
        if not (staging / "tex-mml-svg.js").is_file():
            return f"{tgz.name} has no es5/tex-mml-svg.js"
        try:
            staging.rename(dest)
        except OSError:  # filled meanwhile by another build
            if not (dest / "tex-mml-svg.js").is_file():
                raise
    return ""


def on_config(config: MkDocsConfig) -> MkDocsConfig:
    """Point `extra_javascript` at the bundled MathJax, when this build has one."""
    global _bundle
    scripts = config.extra_javascript
    at = [i for i, script in enumerate(scripts) if str(script) == MATHJAX_CDN]
    if not at:
        raise PluginError(f"docs/hooks.py: mkdocs.yml's extra_javascript lacks {MATHJAX_CDN}")
    _bundle, why = mathjax_bundle(fetch=True)
    if _bundle is None:
        log.info("MathJax is not bundled (%s): the site loads it from %s", why, MATHJAX_CDN)
    else:
        scripts[at[0]] = MATHJAX_SCRIPT
    return config


def on_files(files: Files, config: MkDocsConfig) -> Files:
    """Add the bundled MathJax's files to the site."""
    if _bundle is not None:
        for path in sorted(p for p in _bundle.rglob("*") if p.is_file()):
            uri = f"{MATHJAX_DIR}/{path.relative_to(_bundle).as_posix()}"
            files.append(File.generated(config, uri, abs_src_path=str(path)))
    return files
