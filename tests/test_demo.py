"""The demo job and the command line."""

from __future__ import annotations

from gradtx import __main__ as cli
from gradtx import _demo


def test_demo_trains_and_plots(tmp_path, capsys):
    assert _demo.main(["--steps", "150", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    losses = [float(line.split()[4]) for line in out.splitlines() if line.startswith("step")]
    assert len(losses) >= 3
    assert losses[-1] < 0.5 * losses[0]
    png = tmp_path / "demo.png"
    assert png.exists() and png.stat().st_size > 10_000


def test_cli_lists_commands_and_suggests_close_matches(capsys):
    assert cli.main([]) == 2
    assert "demo" in capsys.readouterr().out
    assert cli.main(["dmeo"]) == 2
    assert "did you mean 'demo'" in capsys.readouterr().err
