"""The command line: `describe` and `plot-schedule`, run in a subprocess as a user would; bad
arguments to `plot-schedule`, `describe` and `demo` (`error: ...` and exit 2, checked before
any work), run in-process."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gradtx.cli import _demo

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


@pytest.mark.subprocess
def test_describe_and_plot_schedule(tmp_path):
    out = gradtx_cli("describe", str(EXAMPLES / "adamw_cosine.yaml"), "--at", "0,250,500,20000")
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
    rows = dict(line.split() for line in text.split("learning rate:")[1].splitlines()[3:7])
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


# --------------------------------------------------------------------------------------------
# bad arguments: `error: ...` and exit 2, checked before any work
# --------------------------------------------------------------------------------------------


@pytest.fixture
def config_file(tmp_path) -> Path:
    path = tmp_path / "sgd.yaml"
    path.write_text("optimizer: {name: sgd, learning_rate: 0.1}\n")
    return path


def _cli(argv, capsys) -> tuple[int, str]:
    from gradtx.__main__ import main

    try:
        code = main(argv)
    except SystemExit as e:  # argparse
        code = int(e.code or 0)
    return code, capsys.readouterr().err


@pytest.mark.parametrize(
    ("output", "message"),
    [
        ("missing_dir/x.png", "does not exist"),
        ("x.xyz", "image format"),
        ("noext", "image format"),
        (".", "is a folder"),
    ],
)
def test_plot_schedule_checks_the_output_first(tmp_path, config_file, capsys, output, message):
    code, err = _cli(["plot-schedule", str(config_file), "-o", str(tmp_path / output)], capsys)
    assert code == 2 and err.startswith("error: ") and message in err
    assert not list(tmp_path.glob("noext*")) and not (tmp_path / "x.xyz").exists()


@pytest.mark.parametrize("steps", ["10000000000", "0", "-1", "abc", "1" * 5000])
def test_plot_schedule_bounds_the_steps(tmp_path, config_file, capsys, steps):
    code, err = _cli(
        ["plot-schedule", str(config_file), "-o", str(tmp_path / "x.png"), "--steps", steps], capsys
    )
    assert code == 2 and "--steps" in err and len(err) < 1_000


def test_plot_schedule_samples_long_ranges(tmp_path, config_file, capsys):
    out = tmp_path / "long.png"
    code, err = _cli(
        ["plot-schedule", str(config_file), "-o", str(out), "--steps", str(2**31)], capsys
    )
    assert code == 0, err and out.read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ("missing_config", "not found"),
        ("missing.yaml", "not found"),
        (".", "not a file"),
        ("/dev/null", "not a file"),
    ],
)
def test_config_paths_that_are_no_files_are_named(tmp_path, capsys, monkeypatch, config, message):
    monkeypatch.chdir(tmp_path)
    for command in (["describe"], ["plot-schedule", "-o", str(tmp_path / "x.png")]):
        for dialect in ("gradtx", "nnabla", "returnn"):
            code, err = _cli([*command, config, "--dialect", dialect], capsys)
            assert code == 2 and message in err, err
            assert "must be a mapping" not in err


def _demo_config(tmp_path, train) -> Path:
    path = tmp_path / "demo.json"
    runs = {"a": {"optimizer": {"name": "sgd", "learning_rate": 0.1}}}
    path.write_text(json.dumps({"train": train, "optimizers": runs}))
    return path


@pytest.fixture
def no_training(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("trained although the arguments were invalid")

    monkeypatch.setattr(_demo, "train_run", refuse)


@pytest.mark.parametrize(
    ("train", "message"),
    [
        ({"batch_size": "abc"}, "train.batch_size: must be an integer, got 'abc'"),
        ({"batch_size": 0}, "train.batch_size: must be in 1 .. "),
        ({"batch_size": 2.5}, "train.batch_size: must be an integer"),
        ({"hidden": 5}, "train.hidden: must be a list"),
        ({"hidden": [8, 0]}, "train.hidden[1]: must be in 1 .. "),
        ({"hidden": ["x"]}, "train.hidden[0]: must be an integer"),
        ({"seed": -1}, "train.seed: must be in 0 .. "),
        ({"steps": True}, "train.steps: must be an integer, got True"),
        ({"steps": 10**12}, "train.steps: must be in 1 .. "),
        (5, "train: must be a mapping"),
    ],
)
def test_demo_refuses_bad_train_settings_before_training(
    tmp_path, capsys, no_training, train, message
):
    code, err = _cli(
        ["demo", "--config", str(_demo_config(tmp_path, train)), "--out", str(tmp_path / "o")],
        capsys,
    )
    assert code == 2 and err.startswith("error: ") and message in err, err


@pytest.mark.parametrize("steps", ["10000000", "0", "abc"])
def test_demo_bounds_its_steps(tmp_path, capsys, no_training, steps):
    args = ["--config", str(_demo_config(tmp_path, {})), "--out", str(tmp_path / "o")]
    code, err = _cli(["demo", *args, "--steps", steps], capsys)
    assert code == 2 and "--steps" in err


@pytest.mark.parametrize("out", ["file", "file/sub"])
def test_demo_checks_its_output_folder_before_training(tmp_path, capsys, no_training, out):
    (tmp_path / "file").write_text("not a folder")
    args = ["--config", str(_demo_config(tmp_path, {})), "--out", str(tmp_path / out)]
    code, err = _cli(["demo", *args], capsys)
    assert code == 2 and "--out" in err
