"""The demo job (`make demo` = `python -m gradtx demo`) and the command line."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import gradtx
from gradtx import __main__ as cli
from gradtx.cli import _demo


@pytest.mark.subprocess
def test_demo_trains_every_optimizer_of_its_config_and_writes_table_and_plot(tmp_path, capsys):
    out = tmp_path / "out"
    assert cli.main(["demo", "--steps", "300", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    _, runs = _demo.load_demo_config(_demo.DEFAULT_CONFIG)
    assert len(runs) >= 5
    table = (out / "results.md").read_text()
    assert table.strip() in printed
    results = json.loads((out / "results.json").read_text())
    assert [r["name"] for r in results] == list(runs)
    # the demo config covers the families the README promises
    assert {r["optimizer"] for r in results} >= {"sgd", "adam", "adamw", "adabound", "eve"}
    for r in results:
        assert r["steps"] == 300 and r["steps_per_s"] > 0
        # 300 steps on 4 spirals: every optimizer learns (chance is 25%, initial loss ~1.4)
        assert r["final_loss"] < 0.9, r
        assert r["test_accuracy"] > 0.5, r
    # the training-health columns: every run is measured by with_metrics
    assert "| grad norm | clipped % | skipped |" in table
    clipping = {"adamw_warmup_cosine"}  # the one run of demo.yaml with a `clip` section
    for r in results:
        assert r["grad_norm"] > 0 and r["skipped"] == 0, r
        assert (r["clipped"] is not None) == (r["name"] in clipping), r
    png = out / "demo.png"
    assert png.exists() and png.stat().st_size > 20_000


@pytest.mark.across_versions
@pytest.mark.subprocess
def test_demo_runs_a_subset_from_another_config(tmp_path, capsys):
    config = tmp_path / "mine.json"
    config.write_text(
        json.dumps(
            {
                "train": {"steps": 50, "hidden": [16], "batch_size": 32},
                "optimizers": {
                    "plain": {"optimizer": {"name": "sgd", "learning_rate": 0.1}},
                    "lion": {"optimizer": {"name": "lion", "learning_rate": 1e-3}},
                },
            }
        )
    )
    out = tmp_path / "o"
    args = ["--config", str(config), "--optimizers", "lion", "--out", str(out), "--no-plot"]
    assert _demo.main(args) == 0
    results = json.loads((out / "results.json").read_text())
    assert [(r["name"], r["steps"]) for r in results] == [("lion", 50)]
    assert not (out / "demo.png").exists()


@pytest.mark.parametrize(
    ("config", "args", "message"),
    [
        (
            {"optimizers": {"a": {"optimizer": {"name": "adam", "learning_rate": 0.1}}}},
            ["--optimizers", "b"],
            "unknown run",
        ),
        ({"optimizers": {"a": {"optimizer": {"name": "adamm"}}}}, [], "optimizers.a"),
        ({"optimizers": {}}, [], "`optimizers` must map"),
        (
            {
                "optimizers": {"a": {"optimizer": {"name": "adam", "learning_rate": 0.1}}},
                "trian": {},
            },
            [],
            "trian",
        ),
        ({"optimizers": {"a": {"optimizer": {"name": "sgd"}}}, "train": {"lr": 1}}, [], "lr"),
        (
            {"optimizers": {"a": {"optimizer": {"name": "adam", "learning_rate": 0.1}}}},
            ["--steps", "0"],
            "--steps",
        ),
    ],
)
def test_demo_rejects_bad_configs_and_flags_before_training(
    tmp_path, capsys, config, args, message
):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(config))
    assert _demo.main(["--config", str(path), "--out", str(tmp_path), *args]) == 2
    err = capsys.readouterr().err
    assert message in err
    assert not (tmp_path / "results.md").exists()


def test_the_demo_config_ships_with_the_package():
    from importlib.resources import files

    assert (files("gradtx.cli") / "demo.yaml").is_file()
    pyproject = (Path(gradtx.__file__).parent.parent / "pyproject.toml").read_text()
    # installed (non-editable) copies have it too
    assert 'gradtx = ["py.typed", "cli/demo.yaml"]' in pyproject


def test_cli_lists_commands_and_suggests_close_matches(capsys):
    assert cli.main([]) == 2
    assert "demo" in capsys.readouterr().out
    assert cli.main(["dmeo"]) == 2
    assert "did you mean 'demo'" in capsys.readouterr().err


def test_step_health_counts_clipped_and_skipped_steps_from_per_step_metrics():
    values = {
        "grad_norm": [1.0, 2.0, 9.0, float("nan"), 1.0],
        "clip_fraction/0": [0.0, 0.5, 0.0, 0.0, 0.0],
        "clip_fraction/1": [0.0, 0.0, 0.25, 0.0, 0.0],
        "total_skipped": [0, 0, 1, 1, 1],  # skip_on_spikes dropped step 3
        "inner_state/total_notfinite": [0, 0, 0, 1, 1],  # apply_if_finite: step 4
    }
    clip, skipped = _demo.step_health({k: np.asarray(v) for k, v in values.items()})
    np.testing.assert_allclose(clip, [0.0, 0.5, 0.25, 0.0, 0.0])
    assert skipped.tolist() == [False, False, True, True, False]
    clip, skipped = _demo.step_health({"grad_norm": np.ones(3)})
    assert clip is None and not skipped.any()
