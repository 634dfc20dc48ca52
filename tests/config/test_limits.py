"""Bounded time, memory and numbers: YAML alias bombs, deep nesting, integers beyond 64 bits or
int32, values that overflow a dialect's arithmetic and files over 16 MiB are ConfigErrors naming
the file / config path; messages show values shortened (docs/config.md, "Guarantees")."""

from __future__ import annotations

import tracemalloc

import pytest

from gradtx import config as gc
from gradtx.config._errors import shown
from gradtx.config._limits import MAX_DEPTH
from gradtx.nnabla import from_nnabla
from gradtx.returnn import from_returnn

from .shared import LINEAR, SGD, config_error, one_update

# --------------------------------------------------------------------------------------------
# a YAML alias bomb, and bounded messages
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
    # Refused before it is expanded: 9**9 strings would take gigabytes (and minutes); the
    # refusal's peak Python allocation is measured instead of its time, which load changes.
    tracemalloc.start()
    try:
        err = config_error(gc.from_config, path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64 * 2**20, peak  # measured: 16 MB
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
    err = config_error(gc.from_config, {"optimizer": {"name": "x" * 100_000}})
    assert "unknown solver 'xxxx" in str(err)
    err = config_error(gc.from_config, {"optimizer": {**SGD, "momentum": "y" * 100_000}})
    assert str(err).startswith("optimizer.momentum: must be a number, got 'yyy")


# --------------------------------------------------------------------------------------------
# deep nesting, and integers too large for a training run
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
    err = config_error(call)
    assert f"nested deeper than {MAX_DEPTH} levels" in str(err) or "nesting depth" in str(err)
    assert err.path.startswith(path)


def test_nesting_up_to_the_limit_builds():
    tx = gc.from_config(_nested_join(MAX_DEPTH // 2 - 2))
    assert float(tx.learning_rate_at(0)) == pytest.approx(0.1)
    one_update(gc.from_config(_nested_mechanize(2)))


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
    err = config_error(gc.from_config, config)
    assert err.path.startswith(path), err


def test_int32_max_step_counts_are_accepted_and_update():
    config = {
        "optimizer": {"name": "sgd", "learning_rate": {**LINEAR, "transition_steps": 2**31 - 1}},
        "accumulate": {"k": 2**31 - 1},
    }
    one_update(gc.from_config(config))


@pytest.mark.parametrize("fmt", ["yaml", "json", "nntxt"])
def test_integer_literals_of_5000_digits_are_config_errors(fmt):
    digits = "1" * 5000
    if fmt == "yaml":
        err = config_error(gc.from_config, f"optimizer:\n  name: sgd\n  learning_rate: {digits}\n")
        assert err.path == "optimizer.learning_rate"
    elif fmt == "json":
        text = f'{{"optimizer": {{"name": "sgd", "learning_rate": {digits}}}}}'
        err = config_error(gc.from_config, text)
        assert err.path == "optimizer.learning_rate"
    else:
        err = config_error(from_nnabla, f'solver {{ type: "Sgd" sgd_param {{ lr: {digits} }} }}')
        assert err.path == "solver.sgd_param.lr"
    assert "5000 digits" in str(err)


def test_dialect_values_that_overflowed_are_config_errors():
    err = config_error(from_returnn, {"optimizer": {"class": "adam"}, "gradient_noise": 1e200})
    assert err.path == "gradient_noise"
    err = config_error(from_returnn, {"optimizer": {"class": "adam"}, "learning_rate": 10**400})
    assert err.path == "learning_rate"
    err = config_error(
        from_returnn,
        {"optimizer": {"class": "adam", "learning_rate_multiplier": 1e300}, "learning_rate": 1e300},
    )
    assert err.path == "learning_rate" and "finite" in str(err)
    err = config_error(from_nnabla, {"solver": {"type": "Sgd", "sgd_param": {"lr": 10**400}}})
    assert err.path == "solver.sgd_param.lr"
    err = config_error(from_nnabla, {"type": "Sgd"}, comm_size=2**31)
    assert "comm_size" in str(err)


def test_config_files_over_16_mib_are_refused_unread(tmp_path):
    path = tmp_path / "huge.yaml"
    path.write_bytes(b"optimizer: {name: sgd, learning_rate: 0.1}\n" + b"#" * (16 * 2**20))
    assert "larger than" in str(config_error(gc.from_config, path))
