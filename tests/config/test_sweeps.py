"""Sweeps from config: a `sweep` section of lists of values (grid or zip, by config path) builds
the population `gradtx.population(tx, gradtx.sweep(tx, ...))`; `to_config` writes the sweep
back exactly; `describe` lists the members; mistakes are refused naming the config path."""

from __future__ import annotations

import json
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradtx
from gradtx import config as gc

from .shared import config_error

PARAMS = {"w": jnp.asarray([1.0, -2.0, 0.5]), "b": jnp.asarray([0.25])}
LR = [1e-3, 3e-3]
WD = [0.0, 0.1, 0.2]
ADAMW = {"name": "adamw", "b2": 0.95}
SWEEP_YAML = """
optimizer: {name: adamw, b2: 0.95}
sweep:
  mode: grid
  values:
    optimizer.learning_rate: [1.0e-3, 3.0e-3]
    optimizer.weight_decay: [0.0, 0.1, 0.2]
"""


def _sweep(mode: str, **values) -> dict:
    return {"optimizer": ADAMW, "sweep": {"mode": mode, "values": values}}


def _grads(k: int) -> dict:
    return jax.tree.map(lambda p: jnp.stack([p * (i + 1.0) for i in range(k)]), PARAMS)


def _same_tree(a, b) -> None:
    assert jax.tree.structure(a) == jax.tree.structure(b)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        assert np.asarray(x).dtype == np.asarray(y).dtype
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


# --------------------------------------------------------------------------------------------
# The population
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mode", "lrs", "wds"), [("grid", LR, WD), ("zip", [1e-3, 2e-3, 3e-3], WD)]
)
def test_the_population_is_gradtx_population_of_gradtx_sweep(mode, lrs, wds):
    tx = gc.from_config(
        _sweep(mode, **{"optimizer.learning_rate": lrs, "optimizer.weight_decay": wds})
    )
    base = gradtx.adamw(lrs[0], b2=0.95)
    expected = gradtx.population(
        base, gradtx.sweep(base, mode=mode, learning_rate=lrs, weight_decay=wds)
    )
    k = 6 if mode == "grid" else 3
    state, want = tx.init(PARAMS), expected.init(PARAMS)
    assert isinstance(state, gradtx.PopulationState)
    _same_tree(state.hyperparams, want.hyperparams)  # the swept values, None for the shared
    assert state.hyperparams["b1"] is None
    params = jax.tree.map(lambda p: jnp.broadcast_to(p, (k, *p.shape)), PARAMS)
    got, _ = jax.jit(tx.update)(_grads(k), state, params)
    ref, _ = jax.jit(expected.update)(_grads(k), want, params)
    _same_tree(got, ref)


def test_each_member_updates_as_its_own_config_would():
    # a schedule's number and the decoupled decay's rate, zipped: the decay is -lr_t * rate * w,
    # so the swept peak reaches it too (a population of standalone configs, not of copies)
    config = {
        "optimizer": {
            "name": "adam",
            "learning_rate": {"name": "linear_schedule", "init_value": 0.0, "transition_steps": 4},
        },
        "weight_decay": {"mode": "decoupled"},
        "sweep": {
            "mode": "zip",
            "values": {
                "optimizer.learning_rate.end_value": [0.1, 0.3],
                "weight_decay.rate": [0.5, 0.0],
            },
        },
    }
    tx = gc.from_config(config)
    members = tx.member_configs
    assert [m["weight_decay"] for m in members] == [
        {"mode": "decoupled", "rate": 0.5},
        {"mode": "decoupled", "rate": 0.0},
    ]
    starts = [PARAMS, jax.tree.map(lambda p: 2 * p, PARAMS)]  # init takes K params trees

    def two_steps(opt, start, params, grads):
        state = opt.init(start)
        for _ in range(2):
            updates, state = opt.update(grads, state, params)
            params = gradtx.apply_updates(params, updates)
        return params

    stacked = jax.tree.map(lambda *xs: jnp.stack(xs), *starts)
    got = jax.jit(lambda p, g: two_steps(tx, starts, p, g))(stacked, _grads(2))
    for k, member in enumerate(members):
        alone = gc.from_config(member)
        grads = jax.tree.map(lambda x, k=k: x[k], _grads(2))
        want = jax.jit(lambda p, g, alone=alone: two_steps(alone, p, p, g))(starts[k], grads)
        jax.tree.map(
            lambda a, b, k=k: np.testing.assert_allclose(a[k], b, rtol=1e-6, atol=0), got, want
        )
        assert not np.allclose(got["w"][k], starts[k]["w"])  # the members moved


def test_members_in_grid_and_zip_order_and_their_learning_rates():
    grid = gc.from_config(
        _sweep("grid", **{"optimizer.learning_rate": LR, "optimizer.b1": [0.8, 0.9]})
    )
    assert [
        (m["optimizer"]["learning_rate"], m["optimizer"]["b1"]) for m in grid.member_configs
    ] == [
        (1e-3, 0.8),
        (1e-3, 0.9),
        (3e-3, 0.8),
        (3e-3, 0.9),
    ]  # the first path varies slowest, as in gradtx.sweep
    assert grid.learning_rate == [1e-3, 1e-3, 3e-3, 3e-3]
    np.testing.assert_allclose(
        grid.learning_rate_at([0, 10]), np.float32([[1e-3] * 2] * 2 + [[3e-3] * 2] * 2)
    )
    zipped = gc.from_config(
        _sweep("zip", **{"optimizer.learning_rate": LR, "optimizer.b1": [0.8, 0.9]})
    )
    assert [m["optimizer"]["b1"] for m in zipped.member_configs] == [0.8, 0.9]
    assert gc.from_config({"optimizer": {**ADAMW, "learning_rate": 1e-3}}).member_configs is None


def test_a_sweep_may_give_a_value_the_config_leaves_out_and_a_section_it_lacks():
    tx = gc.from_config(
        {
            "optimizer": {"name": "sgd", "learning_rate": 0.1},
            "sweep": {"values": {"clip.global_norm": [0.5, 1.0]}},
        }
    )
    assert tx.config == {
        "optimizer": {"name": "sgd", "learning_rate": 0.1},
        "sweep": {"mode": "grid", "values": {"clip.global_norm": [0.5, 1.0]}},
    }  # mode defaults to grid; no empty clip section is left behind
    assert [m["clip"] for m in tx.member_configs] == [{"global_norm": 0.5}, {"global_norm": 1.0}]


def test_list_arguments_are_not_sweeps():
    # milestones is a list argument: the config is one optimizer; a sweep is only `sweep:`
    schedule = {"name": "multistep", "init_value": 0.1, "milestones": [10, 20]}
    plain = gc.from_config(
        {"optimizer": {"name": "sgd", "learning_rate": {**schedule, "gamma": 0.5}}}
    )
    assert plain.member_configs is None
    swept = gc.from_config(
        {
            "optimizer": {"name": "sgd", "learning_rate": schedule},
            "sweep": {"values": {"optimizer.learning_rate.gamma": [0.1, 0.5]}},
        }
    )
    assert len(swept.member_configs) == 2
    np.testing.assert_allclose(swept.learning_rate_at(15), [0.01, 0.05], rtol=1e-6)


# --------------------------------------------------------------------------------------------
# Sources and round trips
# --------------------------------------------------------------------------------------------


def test_yaml_json_dict_and_files_build_the_same_sweep(tmp_path):
    as_dict = _sweep("grid", **{"optimizer.learning_rate": LR, "optimizer.weight_decay": WD})
    yaml_file, json_file = tmp_path / "s.yaml", tmp_path / "s.json"
    yaml_file.write_text(SWEEP_YAML)
    json_file.write_text(json.dumps(as_dict))
    configs = [
        gc.from_config(source).config
        for source in (as_dict, SWEEP_YAML, json.dumps(as_dict), yaml_file, str(json_file))
    ]
    assert all(c == configs[0] for c in configs)
    assert configs[0]["sweep"] == {
        "mode": "grid",
        "values": {"optimizer.learning_rate": LR, "optimizer.weight_decay": WD},
    }
    assert gc.load_config(SWEEP_YAML) == configs[0]


@pytest.mark.parametrize("suffix", [".yaml", ".json"])
def test_to_config_round_trips_the_sweep_exactly(tmp_path, suffix):
    tx = gc.from_config(SWEEP_YAML)
    out = tmp_path / f"out{suffix}"
    written = gc.to_config(tx, out)
    assert written == tx.config
    again = gc.from_config(out)
    assert again.config == tx.config
    assert again.member_configs == tx.member_configs
    assert gc.from_config(gc.to_config(again)).config == tx.config
    _same_tree(again.init(PARAMS).hyperparams, tx.init(PARAMS).hyperparams)


def test_a_null_sweep_is_no_sweep():
    tx = gc.from_config({"optimizer": {"name": "sgd", "learning_rate": 0.1}, "sweep": None})
    assert tx.member_configs is None and "sweep" not in tx.config


# --------------------------------------------------------------------------------------------
# describe
# --------------------------------------------------------------------------------------------


def _describe(argv, capsys) -> tuple[int, str, str]:
    from gradtx.__main__ import main

    code = main(["describe", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_describe_lists_the_members_of_a_grid(tmp_path, capsys):
    path = tmp_path / "grid.yaml"
    path.write_text(SWEEP_YAML)
    code, out, err = _describe([str(path)], capsys)
    assert code == 0, err
    assert "adamw(b2=0.95, learning_rate=<swept>, weight_decay=<swept>)" in out
    rows = [re.split(r"\s{2,}", line.strip()) for line in out.splitlines()]
    assert ["optimizer.weight_decay", "0, 0.1, 0.2 (3 values)", "swept"] in rows
    assert "sweep: 6 members, grid of 2 x 3 values" in out
    table = out.split("sweep: ")[1].splitlines()
    assert table[1].split() == ["member", "optimizer.learning_rate", "optimizer.weight_decay"]
    assert [line.split() for line in table[3:9]] == [
        [str(k), lr, wd]
        for k, (lr, wd) in enumerate(
            (lr, wd) for lr in ("0.001", "0.003") for wd in ("0", "0.1", "0.2")
        )
    ]
    # the learning rate differs between members: one row per member
    rates = out.split("learning rate: per member")[1].splitlines()
    assert rates[1].split()[:3] == ["member", "step", "0"]
    assert rates[3].split()[:2] == ["0", "0.001"] and rates[8].split()[:2] == ["5", "0.003"]


def test_describe_of_a_zip_with_one_learning_rate(tmp_path, capsys):
    path = tmp_path / "zip.json"
    path.write_text(
        json.dumps(
            {
                "optimizer": {**ADAMW, "learning_rate": 1e-3},
                "sweep": {"mode": "zip", "values": {"optimizer.b1": [0.8, 0.9]}},
            }
        )
    )
    code, out, err = _describe([str(path), "--steps", "10"], capsys)
    assert code == 0, err
    assert "sweep: 2 members, zip" in out
    assert "learning rate: 0.001" in out and "per member" not in out
    assert "over steps 0 .. 9: 0.001 .. 0.001" in out


def test_describe_names_a_bad_sweep_and_exits_2(tmp_path, capsys):
    path = tmp_path / "bad.yaml"
    path.write_text("optimizer: {name: adamw}\nsweep: {values: {optimizer.learnig_rate: [0.1]}}\n")
    code, _, err = _describe([str(path)], capsys)
    assert code == 2
    assert "sweep.values.optimizer.learnig_rate" in err and "did you mean 'learning_rate'" in err


def test_plot_schedule_draws_a_curve_per_member(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    from gradtx.__main__ import main

    path = tmp_path / "grid.yaml"
    path.write_text(SWEEP_YAML)
    png = tmp_path / "lr.png"
    assert main(["plot-schedule", str(path), "-o", str(png), "--steps", "5"]) == 0
    assert png.stat().st_size > 0
    assert "learning rate 0.001 .. 0.003" in capsys.readouterr().out


def test_the_demo_refuses_a_sweep(tmp_path):
    from gradtx.cli._demo import load_demo_config

    path = tmp_path / "demo.yaml"
    path.write_text(
        "optimizers:\n  grid:\n    optimizer: {name: sgd}\n"
        "    sweep: {values: {optimizer.learning_rate: [0.1, 0.2]}}\n"
    )
    error = config_error(load_demo_config, path)
    assert "optimizers.grid.sweep: the demo trains one optimizer per run" in str(error)


# --------------------------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------------------------

OPT = {"name": "adam", "learning_rate": 1e-3}


@pytest.mark.parametrize(
    ("config", "path", "message"),
    [
        (
            {"optimizer": {"name": "adam"}, "sweep": {"values": {"learning_rate": [1e-3]}}},
            "sweep.values.learning_rate",
            "starts with a section (optimizer, weight_decay, clip, noise, nonfinite, "
            "lr_multipliers, accumulate, ema) (did you mean 'optimizer.learning_rate'?)",
        ),
        (
            {"optimizer": {"name": "adam"}, "sweep": {"values": {"optimizer.lr": [1e-3]}}},
            "sweep.values.optimizer.lr[0]",
            "adam has no hyperparameter 'lr' (did you mean 'learning_rate'?); its "
            "hyperparameters are ['learning_rate', 'b1'",
        ),
        (
            {
                "optimizer": OPT,
                "sweep": {
                    "mode": "zip",
                    "values": {"optimizer.b1": [0.8, 0.9], "optimizer.b2": [0.99]},
                },
            },
            "sweep.values",
            "mode 'zip' needs equally many values per path (one per member), got "
            "optimizer.b1: 2, optimizer.b2: 1",
        ),
        (
            {"optimizer": OPT, "sweep": {"values": {"optimizer.b1": []}}},
            "sweep.values.optimizer.b1",
            "has no values; give at least one",
        ),
        (
            {"optimizer": OPT, "sweep": {"values": {"optimizer.b1": 0.9}}},
            "sweep.values.optimizer.b1",
            "must be a list of values, got 0.9",
        ),
        (
            {"optimizer": OPT, "sweep": {"values": {"optimizer.b1": [0.9, "high"]}}},
            "sweep.values.optimizer.b1[1]",
            "must be a number, got 'high'",
        ),
        (
            {
                "optimizer": OPT,
                "sweep": {"values": {"optimizer.b1": [0.9, {"name": "constant_schedule"}]}},
            },
            "sweep.values.optimizer.b1[1]",
            "must be a number, got a mapping (a sweep varies numbers",
        ),
        (
            {"optimizer": OPT, "sweep": {"values": {"optimizer.b1": [0.9, 1.5]}}},
            "sweep.values.optimizer.b1[1]",
            "must be in [0.0, 1.0), got 1.5",
        ),
        (
            {"optimizer": OPT, "sweep": {"values": {"optimizer.learning_rate": [0.1]}}},
            "sweep.values.optimizer.learning_rate",
            "contradictory: optimizer.learning_rate is also given in the config",
        ),
        (
            {
                "optimizer": {"name": "adam"},
                "sweep": {
                    "values": {
                        "optimizer.learning_rate": [0.1],
                        "optimizer.learning_rate.peak_value": [1.0],
                    }
                },
            },
            "sweep.values.optimizer.learning_rate.peak_value",
            "contradictory: optimizer.learning_rate and optimizer.learning_rate.peak_value are "
            "both swept",
        ),
        (
            {"optimizer": OPT, "sweep": {"mode": "grd", "values": {"optimizer.b1": [0.9]}}},
            "sweep.mode",
            "got 'grd' (did you mean 'grid'?)",
        ),
        (
            {"optimizer": OPT, "sweep": {"value": {"optimizer.b1": [0.9]}}},
            "sweep.value",
            "unknown key 'value' (did you mean 'values'?); the keys are ['mode', 'values']",
        ),
        ({"optimizer": OPT, "sweep": {"mode": "grid"}}, "sweep.values", "missing"),
        ({"optimizer": OPT, "sweep": {"values": {}}}, "sweep.values", "got an empty mapping"),
        ({"optimizer": OPT, "sweep": [0.1, 0.2]}, "sweep", "must be a mapping {mode: grid | zip"),
        (
            {
                "optimizer": OPT,
                "sweep": {"values": {"optimizer.b1": [0.5] * 64, "optimizer.b2": [0.9] * 65}},
            },
            "sweep.values",
            "too large: the grid has 64 x 65 = 4160 members; at most 4096",
        ),
        (
            {
                "optimizer": {"name": "sgd", "learning_rate": 0.1},
                "sweep": {"values": {"accumulate.k": [1, 2]}},
            },
            "sweep.values.accumulate.k",
            "a population cannot vary it: no hyperparameter of the built optimizer changes with it",
        ),
        (
            {
                "optimizer": {"name": "sgd", "learning_rate": 0.1},
                "sweep": {"values": {"optimizer.nesterov": [0, 1]}},
            },
            "sweep.values.optimizer.nesterov[0]",
            "must be true or false, got 0",
        ),
        (
            {"optimizer": {"name": "adam"}, "sweep": {"values": {"optimizer.b1": [0.9]}}},
            "optimizer.learning_rate",
            "missing: adam requires 'learning_rate'",
        ),
        (
            # member 1's value contradicts the weight_decay section: named with the member
            {
                "optimizer": {"name": "adamw", "learning_rate": 0.1},
                "weight_decay": {"rate": 0.1, "mode": "coupled"},
                "sweep": {"values": {"optimizer.weight_decay": [0.0, 0.1]}},
            },
            "weight_decay",
            "(in sweep member 1: optimizer.weight_decay = 0.1)",
        ),
    ],
)
def test_a_bad_sweep_is_refused_naming_the_config_path(config, path, message):
    error = config_error(gc.from_config, config)
    assert error.path == path, str(error)
    assert message in error.message, str(error)


def test_the_unknown_section_message_lists_sweep():
    error = config_error(gc.from_config, {"optimizer": OPT, "sweeps": {}})
    assert "(did you mean 'sweep'?)" in str(error)
