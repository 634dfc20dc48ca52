"""Config inputs that used to hang, crash with raw exceptions or be silently misread: each is a
`ConfigError` naming the file / config path now (docs/config.md, "Guarantees")."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest

import gradtx
from gradtx import config as gc
from gradtx.cli import _demo
from gradtx.config._errors import shown
from gradtx.config._limits import MAX_DEPTH
from gradtx.nnabla import from_nnabla
from gradtx.returnn import from_returnn

SGD = {"name": "sgd", "learning_rate": 0.1}
PARAMS = {"w": jnp.ones((2,), jnp.float32)}


def _error(call, *args, **kwargs) -> gc.ConfigError:
    with pytest.raises(gc.ConfigError) as info:
        call(*args, **kwargs)
    assert len(str(info.value)) < 2_000, str(info.value)[:200]
    return info.value


def _one_update(tx) -> None:
    state = tx.init(PARAMS)
    tx.update(PARAMS, state, PARAMS)


# --------------------------------------------------------------------------------------------
# 3: a YAML alias bomb, and bounded messages
# --------------------------------------------------------------------------------------------


def _alias_bomb(levels: int = 9) -> str:
    """A YAML flow list defining its anchors inline: 9**levels strings once expanded."""
    bomb = '&l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]'
    for i in range(1, levels):
        bomb = f"&l{i} [{bomb}, {', '.join([f'*l{i - 1}'] * 8)}]"
    return bomb


@pytest.mark.parametrize(
    "where",
    [
        "optimizer: {name: BOMB}",
        "optimizer: {name: sgd, learning_rate: {name: BOMB}}",
        "optimizer: {name: sgd, learning_rate: 0.1, momentum: BOMB}",
        "optimizer: {name: sgd, learning_rate: 0.1}\nclip: BOMB",
        "optimizer: {name: sgd, learning_rate: 0.1}\nlr_multipliers: {rules: {a: BOMB}}",
    ],
)
def test_a_yaml_alias_bomb_under_1kb_is_refused_at_once(tmp_path, where):
    path = tmp_path / "bomb.yaml"
    text = where.replace("BOMB", _alias_bomb()) + "\n"
    path.write_text(text)
    assert len(text.encode()) < 1_024
    start = time.perf_counter()
    err = _error(gc.from_config, path)
    assert time.perf_counter() - start < 1.0
    assert "too large" in str(err) or "unknown section" in str(err)


def test_yaml_anchors_and_merge_keys_still_work():
    tx = gc.from_config(
        "optimizer:\n  name: sgd\n  learning_rate: &lr 0.1\n  momentum: *lr\n"
        "ema: {<<: {decay: 0.5, debias: false}, decay: 0.9}\n"  # later keys override merged ones
    )
    assert tx.config["optimizer"]["momentum"] == 0.1
    assert tx.config["ema"] == {"decay": 0.9, "debias": False}


def test_messages_show_values_shortened():
    shared: list = ["lol"] * 9
    for _ in range(9):
        shared = [shared] * 9  # 9**10 values when printed whole
    for value in (shared, "x" * 100_000, 10**5000, {"a": shared}, b"\x00" * 10_000):
        assert len(shown(value)) < 200
    err = _error(gc.from_config, {"optimizer": {"name": "x" * 100_000}})
    assert "unknown solver 'xxxx" in str(err)
    err = _error(gc.from_config, {"optimizer": {**SGD, "momentum": "y" * 100_000}})
    assert str(err).startswith("optimizer.momentum: must be a number, got 'yyy")


# --------------------------------------------------------------------------------------------
# 4: files that are not UTF-8
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("suffix", [".yaml", ".json", ".nntxt"])
def test_a_config_file_that_is_not_utf8_names_the_file_and_byte(tmp_path, suffix):
    path = tmp_path / f"latin1{suffix}"
    path.write_bytes(b"optimizer:\n  name: sgd \xe9t\xe9\n")
    call = from_nnabla if suffix == ".nntxt" else gc.from_config
    err = _error(call, path)
    assert str(path) in str(err) and "not UTF-8" in str(err) and "byte 23 (0xe9)" in str(err)


def test_a_utf8_bom_is_accepted(tmp_path):
    path = tmp_path / "bom.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps({"optimizer": SGD}).encode())
    assert gc.from_config(path).config["optimizer"]["name"] == "sgd"


# --------------------------------------------------------------------------------------------
# 8: inputs that crashed with RecursionError, OverflowError, ValueError, TypeError
# --------------------------------------------------------------------------------------------


def _nested_mechanize(n: int) -> dict:
    block: dict = dict(SGD)
    for _ in range(n):
        block = {"name": "contrib.mechanize", "base_optimizer": block}
    return {"optimizer": block}


def _nested_join(n: int) -> dict:
    block: dict = {"name": "constant_schedule", "value": 0.1}
    for _ in range(n):
        block = {"name": "join_schedules", "schedules": [block], "boundaries": []}
    return {"optimizer": {"name": "sgd", "learning_rate": block}}


DEEP = [
    ("json-text", lambda: gc.from_config('{"optimizer": ' + "[" * 1000 + "]" * 1000 + "}"), ""),
    ("json-list", lambda: gc.from_config("[" * 5000 + "]" * 5000), ""),
    ("mechanize", lambda: gc.from_config(_nested_mechanize(2000)), "optimizer.base_optimizer."),
    ("join", lambda: gc.from_config(_nested_join(2000)), "optimizer.learning_rate.schedules[0]"),
    ("nntxt", lambda: from_nnabla("solver {" * 2000 + "}" * 2000), ""),
    ("returnn", lambda: from_returnn({"optimizer": _nested_mechanize(2000)}), "optimizer."),
]


@pytest.mark.parametrize(("case", "call", "path"), DEEP, ids=[c[0] for c in DEEP])
def test_deeply_nested_inputs_are_config_errors(case, call, path):
    err = _error(call)
    assert f"nested deeper than {MAX_DEPTH} levels" in str(err) or "nesting depth" in str(err)
    assert err.path.startswith(path)


def test_nesting_up_to_the_limit_builds():
    tx = gc.from_config(_nested_join(MAX_DEPTH // 2 - 2))
    assert float(tx.learning_rate_at(0)) == pytest.approx(0.1)
    _one_update(gc.from_config(_nested_mechanize(2)))


LINEAR = {"name": "linear_schedule", "init_value": 1.0, "end_value": 0.0}
BIG = [
    (
        "lr-10**400",
        {"optimizer": {"name": "sgd", "learning_rate": 10**400}},
        "optimizer.learning_rate",
    ),
    (
        "lr-5000-digits",
        {"optimizer": {"name": "sgd", "learning_rate": 10**4999}},
        "optimizer.learning_rate",
    ),
    (
        "decay_steps-2**31",
        {"optimizer": {"name": "sgd", "learning_rate": {**LINEAR, "transition_steps": 2**31}}},
        "optimizer.learning_rate.transition_steps",
    ),
    (
        "cosine-decay_steps-2**31",
        {
            "optimizer": {
                "name": "sgd",
                "learning_rate": {"name": "cosine_decay", "init_value": 1.0, "decay_steps": 2**31},
            }
        },
        "optimizer.learning_rate.decay_steps",
    ),
    ("accumulate.k-2**31", {"optimizer": SGD, "accumulate": {"k": 2**31}}, "accumulate.k"),
    (
        "boundaries-2**40",
        {
            "optimizer": {
                "name": "sgd",
                "learning_rate": {
                    "name": "piecewise_constant",
                    "init_value": 0.1,
                    "boundaries_and_scales": {str(2**40): 0.1},
                },
            }
        },
        "optimizer.learning_rate.boundaries_and_scales",
    ),
    ("noise.seed-2**31", {"optimizer": SGD, "noise": {"eta": 0.1, "seed": 2**31}}, "noise.seed"),
]


@pytest.mark.parametrize(("case", "config", "path"), BIG, ids=[c[0] for c in BIG])
def test_out_of_range_integers_are_refused_before_any_update(case, config, path):
    err = _error(gc.from_config, config)
    assert err.path.startswith(path), err


def test_int32_max_step_counts_are_accepted_and_update():
    config = {
        "optimizer": {"name": "sgd", "learning_rate": {**LINEAR, "transition_steps": 2**31 - 1}},
        "accumulate": {"k": 2**31 - 1},
    }
    _one_update(gc.from_config(config))


@pytest.mark.parametrize("fmt", ["yaml", "json", "nntxt"])
def test_integer_literals_of_5000_digits_are_config_errors(fmt):
    digits = "1" * 5000
    if fmt == "yaml":
        err = _error(gc.from_config, f"optimizer:\n  name: sgd\n  learning_rate: {digits}\n")
        assert err.path == "optimizer.learning_rate"
    elif fmt == "json":
        text = f'{{"optimizer": {{"name": "sgd", "learning_rate": {digits}}}}}'
        err = _error(gc.from_config, text)
        assert err.path == "optimizer.learning_rate"
    else:
        err = _error(from_nnabla, f'solver {{ type: "Sgd" sgd_param {{ lr: {digits} }} }}')
        assert err.path == "solver.sgd_param.lr"
    assert "5000 digits" in str(err)


def test_dialect_values_that_overflowed_are_config_errors():
    err = _error(from_returnn, {"optimizer": {"class": "adam"}, "gradient_noise": 1e200})
    assert err.path == "gradient_noise"
    err = _error(from_returnn, {"optimizer": {"class": "adam"}, "learning_rate": 10**400})
    assert err.path == "learning_rate"
    err = _error(
        from_returnn,
        {"optimizer": {"class": "adam", "learning_rate_multiplier": 1e300}, "learning_rate": 1e300},
    )
    assert err.path == "learning_rate" and "finite" in str(err)
    err = _error(from_nnabla, {"solver": {"type": "Sgd", "sgd_param": {"lr": 10**400}}})
    assert err.path == "solver.sgd_param.lr"
    err = _error(from_nnabla, {"type": "Sgd"}, comm_size=2**31)
    assert "comm_size" in str(err)


@pytest.mark.parametrize("value", [5, "text", None, 1.5])
def test_an_nnabla_optimizer_field_that_is_no_message_is_a_config_error(value):
    err = _error(from_nnabla, {"optimizer": value})
    assert err.path == "optimizer" or "optimizer" in str(err)


def test_an_nnabla_optimizer_field_may_be_one_message():
    tx = from_nnabla({"optimizer": {"name": "o", "solver": {"type": "Sgd"}}})
    assert tx.config["optimizer"]["name"] == "sgd"


# --------------------------------------------------------------------------------------------
# 9: YAML flow mappings as text
# --------------------------------------------------------------------------------------------


def test_yaml_flow_mapping_text_is_read_as_yaml():
    tx = gc.from_config("{optimizer: {name: sgd, learning_rate: 0.1}}")
    assert tx.config["optimizer"] == {"name": "sgd", "learning_rate": 0.1}
    tx = gc.from_config("  {optimizer: {name: adam, learning_rate: 1e-3}, clip: {norm: 1}}")
    assert tx.config["clip"] == {"norm": 1}
    # text that opens as a JSON object is JSON, with JSON's messages
    assert "invalid JSON" in str(_error(gc.from_config, '{"optimizer": {"name": "adam",}}'))
    assert gc.from_config('{ "optimizer": {"name": "sgd", "learning_rate": 1}}').config


# --------------------------------------------------------------------------------------------
# 10: non-finite numbers, duplicate keys
# --------------------------------------------------------------------------------------------

NONFINITE = [
    (
        "lr-inf",
        lambda: gc.from_config({"optimizer": {**SGD, "learning_rate": math.inf}}),
        "optimizer.learning_rate",
    ),
    (
        "lr-nan",
        lambda: gc.from_config({"optimizer": {**SGD, "learning_rate": math.nan}}),
        "optimizer.learning_rate",
    ),
    (
        "lr-yaml-inf",
        lambda: gc.from_config("optimizer: {name: sgd, learning_rate: .inf}"),
        "optimizer.learning_rate",
    ),
    (
        "lr-string-inf",
        lambda: gc.from_config({"optimizer": {**SGD, "learning_rate": "inf"}}),
        "optimizer.learning_rate",
    ),
    (
        "lr-string-1e999",
        lambda: gc.from_config("optimizer: {name: sgd, learning_rate: 1e999}"),
        "optimizer.learning_rate",
    ),
    (
        "lr-json-Infinity",
        lambda: gc.from_config('{"optimizer": {"name": "sgd", "learning_rate": Infinity}}'),
        "optimizer.learning_rate",
    ),
    (
        "adamw-weight_decay-nan",
        lambda: gc.from_config(
            {"optimizer": {"name": "adamw", "learning_rate": 0.1, "weight_decay": math.nan}}
        ),
        "optimizer.weight_decay",
    ),
    (
        "weight_decay-section-inf",
        lambda: gc.from_config(
            {"optimizer": SGD, "weight_decay": {"rate": math.inf, "mode": "coupled"}}
        ),
        "weight_decay.rate",
    ),
    (
        "schedule-value-inf",
        lambda: gc.from_config(
            {
                "optimizer": {
                    "name": "sgd",
                    "learning_rate": {**LINEAR, "end_value": -math.inf, "transition_steps": 5},
                }
            }
        ),
        "optimizer.learning_rate.end_value",
    ),
    (
        "nnabla-alpha-inf",
        lambda: from_nnabla({"solver": {"type": "Adam", "adam_param": {"alpha": math.inf}}}),
        "solver.adam_param.alpha",
    ),
    (
        "nntxt-lr-1e999",
        lambda: from_nnabla('solver {\n  type: "Sgd"\n  sgd_param { lr: 1e999 }\n}\n'),
        "solver.sgd_param.lr",
    ),
    (
        "nntxt-lr-nan",
        lambda: from_nnabla('solver { type: "Sgd" sgd_param { lr: nan } }'),
        "solver.sgd_param.lr",
    ),
    (
        "returnn-lr-inf",
        lambda: from_returnn({"optimizer": "adam", "learning_rate": math.inf}),
        "learning_rate",
    ),
    (
        "returnn-clip-nan",
        lambda: from_returnn({"optimizer": "adam", "gradient_clip_global_norm": math.nan}),
        "gradient_clip_global_norm",
    ),
]


@pytest.mark.parametrize(("case", "call", "path"), NONFINITE, ids=[c[0] for c in NONFINITE])
def test_non_finite_numbers_are_refused_naming_the_field(case, call, path):
    err = _error(call)
    assert err.path == path, err
    assert "must be a finite number" in err.message


DUPLICATES = [
    ("yaml", "optimizer:\n  name: sgd\n  learning_rate: 0.1\n  learning_rate: 50.0\n"),
    ("yaml-flow", "{optimizer: {name: sgd, learning_rate: 0.1, learning_rate: 50.0}}"),
    ("json", '{"optimizer": {"name": "sgd", "learning_rate": 0.1, "learning_rate": 50.0}}'),
]


@pytest.mark.parametrize(("case", "text"), DUPLICATES, ids=[c[0] for c in DUPLICATES])
def test_duplicate_keys_are_refused_naming_the_key(tmp_path, case, text):
    assert "duplicate key 'learning_rate'" in str(_error(gc.from_config, text))
    path = tmp_path / ("c.json" if case == "json" else "c.yaml")
    path.write_text(text)
    err = _error(gc.from_config, path)
    assert str(path) in str(err) and "duplicate key 'learning_rate'" in str(err)


def test_duplicate_sections_and_dialect_keys_are_refused():
    text = "optimizer: {name: sgd, learning_rate: 0.1}\noptimizer: {name: adam}\n"
    assert "duplicate key 'optimizer'" in str(_error(gc.from_config, text))
    text = "solver:\n  type: Sgd\n  sgd_param: {lr: 0.1, lr: 5}\n"
    assert "duplicate key 'lr'" in str(_error(from_nnabla, text))
    text = "optimizer: adam\nlearning_rate: 0.1\nlearning_rate: 5\n"
    assert "duplicate key 'learning_rate'" in str(_error(from_returnn, text))


# --------------------------------------------------------------------------------------------
# 11: learning rates at steps beyond int32
# --------------------------------------------------------------------------------------------


def test_learning_rate_at_saturates_steps_at_int32_max():
    tx = gc.from_config(
        {"optimizer": {"name": "sgd", "learning_rate": {**LINEAR, "transition_steps": 10}}}
    )
    assert float(tx.learning_rate_at(2**31)) == 0.0  # not the initial value (a wrapped step)
    assert float(tx.learning_rate_at(10**30)) == 0.0
    assert float(tx.learning_rate_at(np.uint64(2**63))) == 0.0
    np.testing.assert_array_equal(tx.learning_rate_at([0, 5, 2**40]), [1.0, 0.5, 0.0])
    np.testing.assert_allclose(tx.learning_rate_at(np.arange(3)), [1.0, 0.9, 0.8], rtol=1e-6)
    assert tx.learning_rate_at(np.zeros((2, 3), np.int64)).shape == (2, 3)


def test_describe_shows_the_saturated_value_for_huge_steps(tmp_path, capsys):
    from gradtx.__main__ import main

    path = tmp_path / "lin.yaml"
    path.write_text(
        "optimizer:\n  name: sgd\n  learning_rate: {name: linear_schedule, init_value: 1.0, "
        "end_value: 0.0, transition_steps: 10}\n"
    )
    assert main(["describe", str(path), "--steps", f"0,{2**31},{10**30}"]) == 0
    out = capsys.readouterr().out
    rows = dict(line.split()[:2] for line in out.split("learning rate:")[1].splitlines()[3:6])
    assert rows == {"0": "1", str(2**31): "0", str(10**30): "0"}
    assert "2**31 - 1" in out


# --------------------------------------------------------------------------------------------
# 12: the command line: `error: ...` and exit 2, checked before any work
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


def test_a_missing_path_given_as_text_says_so():
    err = _error(gc.from_config, "configs/missing_config")
    assert "no file 'configs/missing_config' exists" in str(err)


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


def test_gradtx_main_is_reexported():
    assert gradtx.from_config is gc.from_config


def test_config_files_over_16_mib_are_refused_unread(tmp_path):
    path = tmp_path / "huge.yaml"
    path.write_bytes(b"optimizer: {name: sgd, learning_rate: 0.1}\n" + b"#" * (16 * 2**20))
    assert "larger than" in str(_error(gc.from_config, path))
