"""Every notebook in notebooks/ runs top to bottom without errors; their install cell installs
gradtx where it is missing."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from tests.test_wheel import clean_env

pytestmark = pytest.mark.subprocess  # the second lane of `make test`

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_executes(path, tmp_path, monkeypatch):
    # The matrix-optimizer comparison trains eight optimizers: 150 steps each is the reader's
    # default, 30 runs every cell; the kernel inherits this environment. The cell limit is a
    # bound for four lanes sharing two slow cores, not a wait.
    monkeypatch.setenv("NOTEBOOK_STEPS", "30")
    nb = nbformat.read(path, as_version=4)
    NotebookClient(
        nb, timeout=900, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    ).execute()
    errors = [
        o
        for c in nb.cells
        if c.cell_type == "code"
        for o in c.get("outputs", [])
        if o.get("output_type") == "error"
    ]
    assert not errors


def test_there_is_at_least_one_notebook():
    assert NOTEBOOKS


def install_cell() -> str:
    """The first code cell, the same in every notebook: it installs gradtx when it is missing."""
    cells = {
        str(next(c for c in nbformat.read(p, as_version=4).cells if c.cell_type == "code").source)
        for p in NOTEBOOKS
    }
    assert len(cells) == 1, "the notebooks' install cells differ"
    (cell,) = cells
    assert 'GRADTX_SOURCE = os.environ.get("GRADTX_SOURCE", "")' in cell
    return cell


@pytest.mark.slow
def test_install_cell_installs_gradtx_into_a_fresh_venv(tmp_path, request):
    """The install cell, run by a fresh venv's python (no gradtx in it): with GRADTX_SOURCE a
    missing path it fails, also inside the checkout (GRADTX_SOURCE comes first); outside a
    checkout without GRADTX_SOURCE it fails naming GRADTX_SOURCE; in notebooks/ without it, it
    installs the checkout, and gradtx then imports from the venv."""
    cell = install_cell()
    venv = tmp_path / "venv"
    request.addfinalizer(lambda: shutil.rmtree(venv, ignore_errors=True))  # ~1 GB with jax
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = str(venv / "bin" / "python")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    constraints = str(ROOT / "constraints.txt")

    def cell_run(cwd: Path, source: str | None, timeout: float = 60):
        env = clean_env(PIP_CONSTRAINT=constraints)
        env.pop("GRADTX_SOURCE", None)
        if source is not None:
            env["GRADTX_SOURCE"] = source
        return subprocess.run(
            [python, "-c", cell], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
        )

    missing = str(tmp_path / "no-such-gradtx")
    for cwd in (elsewhere, ROOT / "notebooks"):
        failed = cell_run(cwd, missing)
        assert failed.returncode != 0, failed.stdout
        assert "CalledProcessError" in failed.stderr, failed.stderr[-2000:]
    failed = cell_run(elsewhere, None)
    assert failed.returncode != 0
    assert "RuntimeError" in failed.stderr and "set GRADTX_SOURCE" in failed.stderr

    installed = cell_run(ROOT / "notebooks", None, timeout=480)
    assert installed.returncode == 0, installed.stderr[-4000:]
    assert f"installing gradtx from {ROOT}" in installed.stdout
    check = subprocess.run(
        [python, "-c", "import gradtx, sys; print(gradtx.__version__); print(gradtx.__file__)"],
        cwd=elsewhere,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    version, where = check.stdout.split()
    assert version and Path(where).resolve().is_relative_to(venv.resolve()), where
    again = cell_run(elsewhere, missing)  # gradtx is there now: the cell installs nothing
    assert again.returncode == 0 and "installing" not in again.stdout, again.stderr[-2000:]
