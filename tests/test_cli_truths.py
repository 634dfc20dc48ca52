"""What the command line says is true: `describe` takes several files, tells the config
dialects apart, `--steps N` means the first N steps in every command, `--version` is the
package's version, and the example ResNet recipe drops where its comment says. In-process,
through the same entry point as `python -m gradtx` (`gradtx.__main__.main`)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np
import pytest

from gradtx import config as gc
from gradtx._base._version import __version__
from gradtx.cli._commands import detect_dialect

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples" / "configs"


def _cli(argv, capsys) -> tuple[int, str, str]:
    from gradtx.__main__ import main

    try:
        code = main(argv)
    except SystemExit as e:  # argparse
        code = int(e.code or 0)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _table(text: str, title: str) -> dict[str, list[str]]:
    """The rows (step -> the other columns) of the table that follows the line `title`."""
    lines = text.split(title, 1)[1].splitlines()[1:]
    start = next(i for i, line in enumerate(lines) if set(line.strip()) == {"-", " "}) + 1
    rows = {}
    for line in lines[start:]:
        if not line.startswith("  ") or not line.strip():
            break
        step, *rest = re.split(r"\s{2,}", line.strip())
        rows[step] = rest
    return rows


# --------------------------------------------------------------------------------------------
# 1. several files, a header per file
# --------------------------------------------------------------------------------------------


def test_describe_takes_several_files_with_a_header_each(capsys):
    files = sorted(str(p) for p in EXAMPLES.glob("*.yaml"))
    assert len(files) >= 4
    code, out, err = _cli(["describe", *files], capsys)
    assert code == 0, err
    headers = re.findall(r"^==> (.*) <==$", out, flags=re.MULTILINE)
    assert headers == files
    assert out.count("chain (gradients enter at the top):") == len(files)


def test_describe_goes_on_after_a_bad_file_and_exits_2(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("optimizer: {name: adamm}\n")
    good = str(EXAMPLES / "sgd_step.yaml")
    code, out, err = _cli(["describe", str(bad), good], capsys)
    assert code == 2
    assert "unknown solver 'adamm'" in err
    assert f"==> {good} <==" in out and "sgd(" in out


# --------------------------------------------------------------------------------------------
# 2. the dialect, detected (and said), or a hint at --dialect
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "dialect", "why"),
    [
        ("nnabla_adam.yaml", "nnabla", "its 'solver' section"),
        ("returnn_adam.yaml", "returnn", "its optimizer 'class'"),
        ("adamw_cosine.yaml", "gradtx", "its optimizer 'name'"),
        ("sgd_step.yaml", "gradtx", "its optimizer 'name'"),
    ],
)
def test_describe_detects_the_dialect_and_says_so(capsys, name, dialect, why):
    code, out, err = _cli(["describe", str(EXAMPLES / name)], capsys)
    assert code == 0, err
    assert out.splitlines()[0] == f"config: {EXAMPLES / name} ({dialect}, detected from {why})"


@pytest.mark.parametrize(
    ("text", "dialect"),
    [
        ("optimizer: [{name: train, solver: {type: Sgd}}]\n", "nnabla"),  # a whole protobuf
        ("type: Adam\nadam_param: {alpha: 0.01}\n", "nnabla"),  # a Solver message alone
        ('{"optimizer": "adam", "learning_rate": 0.001}', "returnn"),
        ("learning_rate: 0.1\ngradient_clip: 1.0\n", "returnn"),  # RETURNN's default class
        ("adam: true\nlearning_rate: 0.1\n", "returnn"),  # a legacy flag, refused by name
        ("optimizer: {name: sgd, learning_rate: 0.1}\n", "gradtx"),
    ],
)
def test_detect_dialect_reads_the_top_level_keys(tmp_path, text, dialect):
    path = tmp_path / ("c.json" if text.startswith("{") else "c.yaml")
    path.write_text(text)
    assert detect_dialect(str(path))[0] == dialect


def test_an_unknown_section_suggests_the_dialects(tmp_path, capsys):
    path = tmp_path / "odd.yaml"
    path.write_text("solverr: {type: Adam}\n")
    code, _, err = _cli(["describe", str(path)], capsys)
    assert code == 2
    assert "unknown section 'solverr'" in err
    assert "--dialect nnabla" in err and "--dialect returnn" in err
    # an explicit --dialect gradtx on an nnabla file: the same hint
    code, _, err = _cli(
        ["describe", str(EXAMPLES / "nnabla_adam.yaml"), "--dialect", "gradtx"], capsys
    )
    assert code == 2 and "unknown section 'solver'" in err and "--dialect nnabla" in err


def test_a_control_character_in_yaml_is_one_line_naming_where(tmp_path, capsys):
    """PyYAML's reader error spans two lines ('... not allowed' then '  in "<unicode
    string>", position 15'); the CLI prints one line with the line and column."""
    path = tmp_path / "nul.yaml"
    path.write_bytes(b"optimizer: adam\x00\nlearning_rate: 0.1\n")
    code, _, err = _cli(["describe", str(path)], capsys)
    assert code == 2
    assert err.count("\n") == 1, err
    assert f"{path}:1:16: invalid YAML: unacceptable character #x0000" in err
    assert "unicode string" not in err


def test_plot_schedule_detects_the_dialect_too(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    png = tmp_path / "lr.png"
    code, _, err = _cli(
        ["plot-schedule", str(EXAMPLES / "nnabla_adam.yaml"), "-o", str(png), "--steps", "10"],
        capsys,
    )
    assert code == 0, err
    assert png.read_bytes()[:4] == b"\x89PNG"


# --------------------------------------------------------------------------------------------
# 3. --version, from the one place the version lives
# --------------------------------------------------------------------------------------------


def test_version_prints_the_package_version(capsys):
    for flag in ("--version", "-V"):
        code, out, _ = _cli([flag], capsys)
        assert code == 0 and out == f"gradtx {__version__}\n"


def test_pyproject_version_agrees_with_the_package():
    text = (ROOT / "pyproject.toml").read_text()
    if sys.version_info >= (3, 11):
        import tomllib

        project = tomllib.loads(text)["project"]
    else:  # pragma: no cover
        project = {"version": re.search(r'^version = "(.*)"$', text, re.MULTILINE).group(1)}
    if "version" in project.get("dynamic", []):  # read from gradtx._base._version
        attr = tomllib.loads(text)["tool"]["setuptools"]["dynamic"]["version"]["attr"]
        assert attr == "gradtx._base._version.__version__"
    else:
        assert project["version"] == __version__


# --------------------------------------------------------------------------------------------
# 4. one meaning of --steps: the first N steps; --at lists steps
# --------------------------------------------------------------------------------------------


def test_describe_steps_n_summarizes_the_first_n_steps(capsys):
    code, out, err = _cli(
        ["describe", str(EXAMPLES / "adamw_cosine.yaml"), "--steps", "1000"], capsys
    )
    assert code == 0, err
    assert "over steps 0 .. 999: 0 .. 0.0003" in out
    rows = _table(out, "learning rate:")
    assert list(rows) == ["0", "499", "500", "999"]  # the decay end (20000) is out of range
    assert rows["500"] == ["0.0003", "warm-up ends"]
    assert rows["999"][1] == "last step"


def test_describe_at_lists_steps_and_steps_as_a_list_is_deprecated(capsys):
    config = str(EXAMPLES / "adamw_cosine.yaml")
    code, out_at, err = _cli(["describe", config, "--at", "0,250,500"], capsys)
    assert code == 0 and not err
    assert _table(out_at, "learning rate:") == {"0": ["0"], "250": ["0.00015"], "500": ["0.0003"]}
    code, out_old, err = _cli(["describe", config, "--steps", "0,250,500"], capsys)
    assert code == 0
    assert "deprecated" in err and "--at 0,250,500" in err
    assert out_old == out_at
    code, _, err = _cli(["describe", config, "--steps", "10", "--at", "5"], capsys)
    assert code == 2 and "not allowed with" in err


@pytest.mark.parametrize("steps", ["0", "-1", str(2**31 + 1), "abc"])
def test_describe_bounds_its_steps_as_plot_schedule_does(capsys, steps):
    code, _, err = _cli(["describe", str(EXAMPLES / "sgd_step.yaml"), "--steps", steps], capsys)
    assert code == 2 and "--steps" in err and len(err) < 1_000


def test_the_help_texts_say_what_steps_means(capsys):
    for command in ("describe", "plot-schedule"):
        code, out, _ = _cli([command, "--help"], capsys)
        assert code == 0
        assert "the first N steps, 0 .. N-1" in " ".join(out.split())
    code, out, _ = _cli(["describe", "--help"], capsys)
    assert "--at" in out and "deprecated" in out


# --------------------------------------------------------------------------------------------
# 5. the ResNet recipe drops at 30k / 60k / 80k, and describe says where
# --------------------------------------------------------------------------------------------


def test_sgd_step_example_drops_where_it_says():
    tx = gc.from_config(EXAMPLES / "sgd_step.yaml")
    steps = [0, 999, 1000, 29999, 30000, 59999, 60000, 79999, 80000]
    got = np.asarray(tx.learning_rate_at(np.asarray(steps)))
    want = [0.0, 0.0999, 0.1, 0.1, 0.01, 0.01, 0.001, 0.001, 0.0001]
    np.testing.assert_allclose(got, want, rtol=1e-5)
    assert "30k, 60k, 80k" in (EXAMPLES / "sgd_step.yaml").read_text()


def test_describe_names_the_absolute_drops_of_a_warmed_up_piecewise_schedule(capsys):
    code, out, err = _cli(["describe", str(EXAMPLES / "sgd_step.yaml")], capsys)
    assert code == 0, err
    rows = _table(out, "where the learning rate changes course")
    assert rows["1000"] == ["0.1", "warm-up ends; the schedule starts"]
    for step, before, after, boundary in [
        (30000, "0.1", "0.01", 29000),
        (60000, "0.01", "0.001", 59000),
        (80000, "0.001", "0.0001", 79000),
    ]:
        assert rows[str(step - 1)] == [before]
        assert rows[str(step)] == [
            after,
            f"boundary {boundary}, after the 1000 warm-up steps: x0.1",
        ]
    code, out, _ = _cli(["describe", str(EXAMPLES / "sgd_step.yaml"), "--steps", "90000"], capsys)
    assert code == 0
    assert {"30000", "60000", "80000", "89999"} <= set(_table(out, "learning rate:"))


def test_landmarks_of_joined_and_nested_schedules():
    from gradtx.config._describe import schedule_landmarks

    block = {
        "name": "join",
        "boundaries": [100],
        "schedules": [
            {"name": "constant", "value": 1.0},
            {"name": "piecewise_constant", "init_value": 1.0, "boundaries_and_scales": {50: 0.5}},
        ],
    }
    assert schedule_landmarks(block) == [
        (100, "join boundary 100: schedule 2 starts"),
        (150, "boundary 50, after the join boundary 100: x0.5"),
    ]
    tx = gc.from_config({"optimizer": {"name": "sgd", "learning_rate": block}})
    np.testing.assert_allclose(tx.learning_rate_at(np.asarray([149, 150])), [1.0, 0.5])
