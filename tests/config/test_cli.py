"""The command line: `describe` and `plot-schedule`, run in a subprocess as a user would."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "configs"


def gradtx_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gradtx", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
        check=False,
    )


def test_describe_and_plot_schedule(tmp_path):
    out = gradtx_cli("describe", str(EXAMPLES / "adamw_cosine.yaml"), "--steps", "0,250,500,20000")
    assert out.returncode == 0, out.stderr
    text = out.stdout
    # the chain, outermost wrapper first
    assert (
        text.index("accumulate_k_steps(k=4")
        < text.index("apply_if_finite(")
        < text.index("clip_by_global_norm(max_norm=1)")
        < text.index("adamw(")
        < text.index("ema_params(")
    )
    # every hyperparameter, the solver's defaults marked
    assert "optimizer.b2                          0.95" in text
    assert "optimizer.nesterov" in text and "default" in text
    # the learning rate table: warm-up to the peak at step 500, end value at the end
    rows = dict(line.split() for line in text.split("learning rate:")[1].splitlines()[3:])
    assert float(rows["0"]) == 0.0
    assert float(rows["250"]) == pytest.approx(1.5e-4, rel=1e-5)
    assert float(rows["500"]) == pytest.approx(3e-4, rel=1e-5)
    assert float(rows["20000"]) == pytest.approx(1e-5, rel=1e-4)

    png = tmp_path / "lr.png"
    out = gradtx_cli(
        "plot-schedule",
        str(EXAMPLES / "nnabla_adam.yaml"),
        "--dialect",
        "nnabla",
        "-o",
        str(png),
        "--steps",
        "3000",
    )
    assert out.returncode == 0, out.stderr
    assert png.exists() and png.stat().st_size > 5_000
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_describe_the_dialects_and_report_config_errors(tmp_path, capsys):
    """In-process (the subprocess path is covered above): the same entry point, `main`."""
    from gradtx.__main__ import main

    assert main(["describe", str(EXAMPLES / "returnn_adam.yaml"), "--dialect", "returnn"]) == 0
    out = capsys.readouterr().out
    assert "nnabla.adam(" in out and "accumulate_k_steps(k=2, average=False)" in out
    bad = tmp_path / "bad.yaml"
    bad.write_text("optimizer: {name: adamm, learning_rate: 0.1}\n")
    assert main(["describe", str(bad)]) == 2
    assert "optimizer.name: unknown solver 'adamm' (did you mean" in capsys.readouterr().err
    assert main(["plot-schedule", str(bad), "-o", str(tmp_path / "x.png")]) == 2
    assert not (tmp_path / "x.png").exists()
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "describe" in out and "plot-schedule" in out and "demo" in out
