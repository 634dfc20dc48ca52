"""The built wheel installs and works outside the checkout.

Builds the sdist and, from it, the wheel (as `make dist` does), installs the wheel with its runtime
dependencies and the `config` extra (PyYAML, which the demo's config needs) into a fresh venv
outside the source tree, and from a folder outside the tree checks: the import comes from the venv,
the version is gradtx/_base/_version.py's, a few Adam steps, `from_config` of a dict and of YAML
text, the package data (`py.typed`, `cli/demo.yaml`), the `gradtx` console script and
`python -m gradtx demo`. One venv for the module; it is deleted afterwards. Versions are pinned by
constraints.txt and pip's cache is used, so the install is what `make` installs.
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.subprocess, pytest.mark.slow]  # the second lane of `make test`

ROOT = Path(__file__).resolve().parent.parent
CONSTRAINTS = ROOT / "constraints.txt"


def source_version() -> str:
    tree = ast.parse((ROOT / "gradtx" / "_base" / "_version.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__version__" for t in node.targets
        ):
            return ast.literal_eval(node.value)
    raise AssertionError("gradtx/_base/_version.py has no __version__")


def clean_env(**extra: str) -> dict[str, str]:
    """The environment without anything that would let the checkout leak into the venv."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONSTARTUP")
    }
    env.update(PYTHONNOUSERSITE="1", PIP_DISABLE_PIP_VERSION_CHECK="1", JAX_PLATFORMS="cpu")
    env.update(extra)
    return env


def run(cmd: list[str], *, cwd: Path, timeout: float, **env: str) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [str(c) for c in cmd],
        cwd=cwd,
        env=clean_env(**env),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert proc.returncode == 0, (
        f"{cmd} exited {proc.returncode}\n--- stdout\n{proc.stdout[-4000:]}\n"
        f"--- stderr\n{proc.stderr[-4000:]}"
    )
    return proc


class Installed:
    def __init__(self, base: Path, wheel: Path, venv: Path, work: Path):
        self.base, self.wheel, self.venv, self.work = base, wheel, venv, work
        self.python = venv / "bin" / "python"
        self.script = venv / "bin" / "gradtx"


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Installed:
    base = tmp_path_factory.mktemp("wheel")
    assert ROOT not in base.parents, "the venv must live outside the source tree"
    dist = base / "dist"
    run(
        [sys.executable, "-m", "build", "--outdir", dist, ROOT],
        cwd=ROOT,
        timeout=300,
    )
    wheels = sorted(dist.glob("gradtx-*.whl"))
    assert len(wheels) == 1, sorted(dist.iterdir())
    run([sys.executable, "-m", "twine", "check", "--strict", *dist.iterdir()], cwd=base, timeout=60)
    venv = base / "venv"
    run([sys.executable, "-m", "venv", venv], cwd=base, timeout=120)
    python = venv / "bin" / "python"
    run(
        [python, "-m", "pip", "install", "--quiet", "-c", CONSTRAINTS, f"{wheels[0]}[config]"],
        cwd=base,
        timeout=480,
    )
    work = base / "work"  # the cwd of every check: outside the checkout
    work.mkdir()
    yield Installed(base, wheels[0], venv, work)
    shutil.rmtree(base, ignore_errors=True)


SMOKE = r"""
import importlib.resources
import sys
from pathlib import Path

import jax.numpy as jnp

import gradtx

root, version = Path(sys.argv[1]), sys.argv[2]
where = Path(gradtx.__file__).resolve()
assert Path(sys.prefix).resolve() in where.parents, (where, sys.prefix)
assert root not in where.parents, f"gradtx imported from the checkout: {where}"
assert gradtx.__version__ == version, (gradtx.__version__, version)

params = {"w": jnp.array([1.0, -2.0, 3.0])}
loss = lambda p: jnp.sum(p["w"] ** 2)
configured = (
    gradtx.from_config({"optimizer": {"name": "adam", "learning_rate": 0.1}}),
    gradtx.from_config("optimizer: {name: sgd, learning_rate: 0.1, momentum: 0.9}"),  # PyYAML
)
for tx in (gradtx.adam(0.1), *configured):
    state = tx.init(params)
    p = params
    for _ in range(5):
        g = {"w": 2 * p["w"]}
        updates, state = tx.update(g, state, p)
        p = gradtx.apply_updates(p, updates)
    assert float(loss(p)) < float(loss(params)), (tx, loss(p))

files = importlib.resources.files("gradtx")
assert files.joinpath("py.typed").is_file()
assert files.joinpath("cli", "demo.yaml").is_file()
assert "optimizers:" in files.joinpath("cli", "demo.yaml").read_text(encoding="utf-8")
print("smoke ok", where)
"""


def test_wheel_imports_and_runs_from_the_venv(installed):
    proc = run(
        [installed.python, "-c", SMOKE, ROOT, source_version()],
        cwd=installed.work,
        timeout=180,
    )
    assert "smoke ok" in proc.stdout


def test_wheel_holds_only_the_package(installed):
    import zipfile

    names = zipfile.ZipFile(installed.wheel).namelist()
    tops = {n.split("/")[0] for n in names}
    assert tops == {"gradtx", f"gradtx-{source_version()}.dist-info"}, sorted(tops)
    assert "gradtx/py.typed" in names
    assert "gradtx/cli/demo.yaml" in names


def test_console_script_version(installed):
    proc = run([installed.script, "--version"], cwd=installed.work, timeout=60)
    assert proc.stdout.strip() == f"gradtx {source_version()}"


def test_demo_runs_from_the_wheel(installed):
    out = installed.work / "demo_out"
    proc = run(
        [installed.python, "-m", "gradtx", "demo", "--steps", "50", "--no-plot", "--out", out],
        cwd=installed.work,
        timeout=300,
    )
    assert f"gradtx {source_version()} demo" in proc.stdout
    assert (out / "results.json").is_file()
    assert (out / "results.md").is_file()
    assert not (out / "demo.png").exists()
