"""Dialect validation: the dialects translate a whole document in one pass and the config layer
validates it once: no value goes back and forth between a dialect and the config schema, and the
messages still name the dialect's own field with the received value."""

from __future__ import annotations

import os
import sys

import pytest

import gradtx
from gradtx import config as gc
from gradtx.config import _from_config, _schema
from gradtx.nnabla import from_nnabla
from gradtx.returnn import from_returnn

NNABLA = {
    "solver": {
        "type": "Adam",
        "adam_param": {"alpha": 0.001, "beta1": 0.9, "beta2": 0.999, "eps": 1.0e-8},
        "weight_decay": 0.0001,
        "lr_scheduler_type": "Cosine",
        "cosine_scheduler_param": {"max_iter": 10000},
        "lr_warmup_scheduler_type": "Linear",
        "linear_warmup_scheduler_param": {"warmup_iter": 500},
    },
    "update_interval": 2,
    "parameter_variable": [{"variable_name": "conv1/W", "learning_rate_multiplier": 1.0}],
}
RETURNN = {
    "optimizer": {"class": "adam", "beta1": 0.9, "learning_rate_multiplier": 0.5},
    "learning_rate": 1e-3,
    "optimizer_epsilon": 1e-8,
    "gradient_clip_global_norm": 5.0,
    "gradient_noise": 0.1,
    "accum_grad_multiple_step": 2,
    "gradient_nan_inf_filter": True,
}


@pytest.mark.parametrize(("build", "doc"), [(from_nnabla, NNABLA), (from_returnn, RETURNN)])
def test_a_document_is_validated_once_and_no_value_comes_back(build, doc, monkeypatch):
    validations = []
    validate = _from_config.validate

    def counting_validate(config):
        validations.append(config)
        return validate(config)

    monkeypatch.setattr(_from_config, "validate", counting_validate)
    dialects = (os.path.dirname(gradtx.nnabla.__file__), os.path.dirname(gradtx.returnn.__file__))
    crossings, checks = [], []

    def profile(frame, event, arg):
        if event != "call" or frame.f_code.co_filename != _schema.__file__:
            return
        checks.append(frame.f_code.co_name)
        caller = frame.f_back.f_code.co_filename if frame.f_back is not None else ""
        if caller.startswith(dialects):
            crossings.append((os.path.basename(caller), frame.f_code.co_name))

    sys.setprofile(profile)
    try:
        tx = build(doc)
    finally:
        sys.setprofile(None)
    assert crossings == []  # no schema check is called from a dialect module
    assert "check_value" in checks  # the values are checked, by the config layer
    assert len(validations) == 1
    assert tx.config == _schema.validate(validations[0])  # the plain config, validated once


@pytest.mark.parametrize(
    ("build", "doc", "message"),
    [
        # nnabla's default 0 means no decay; a negative rate is refused, not dropped
        (
            from_nnabla,
            {"type": "Adam", "weight_decay": -0.1},
            r"^solver\.weight_decay: must be (finite and )?>= 0, got -0\.1",
        ),
        (
            from_nnabla,
            {"type": "AdamW", "weight_decay": -0.1},
            r"^solver\.weight_decay: must be (finite and )?>= 0, got -0\.1",
        ),
        (
            from_nnabla,
            {"type": "Adam", "weight_decay": "x"},
            r"^solver\.weight_decay: must be a number, got 'x'",
        ),
        (
            from_nnabla,
            {"type": "Adam", "adam_param": {"alpha": {"name": "constant", "value": 1.0}}},
            r"^solver\.adam_param\.alpha: must be a number, got a mapping",
        ),
        (
            from_nnabla,
            {"type": "AMSGRAD", "amsgrad_param": {"bias_correction": "yes"}},
            r"^solver\.amsgrad_param\.bias_correction: must be true or false, got 'yes'",
        ),
        (
            from_nnabla,
            {"type": "Sgd", "lr_scheduler_type": 3},
            r"^solver\.lr_scheduler_type: must be a string, got 3",
        ),
        (from_nnabla, {"type": "Sgd", "lr_decay": "x"}, r"^solver\.lr_decay: must be a number"),
        (
            from_nnabla,
            {
                "type": "Sgd",
                "lr_scheduler_type": "Cosine",
                "cosine_scheduler_param": {"max_iter": "x"},
            },
            r"^solver: nnabla_cosine: max_iter must be an integer, got 'x'",
        ),
        (
            from_nnabla,
            {"solver": {"type": "Sgd"}, "update_interval": -2},
            r"^update_interval: must be >= 0, got -2",
        ),
        (
            from_nnabla,
            {"solver": {"type": "Sgd"}, "update_interval": 2.5},
            r"^update_interval: must be an integer, got 2\.5",
        ),
        (
            from_nnabla,
            {
                "solver": {"type": "Sgd"},
                "parameter_variable": [{"variable_name": "a", "learning_rate_multiplier": "x"}],
            },
            r"^parameter_variable\[0\]\.learning_rate_multiplier: must be a number, got 'x'",
        ),
        (
            from_returnn,
            {"optimizer": {"class": "adam", "learning_rate_multiplier": "x"}},
            r"^optimizer\.learning_rate_multiplier: must be a number, got 'x'",
        ),
        (
            from_returnn,
            {"optimizer": "adam", "learning_rate": {"name": "constant", "value": 1.0}},
            r"^learning_rate: must be a number, got a mapping",
        ),
        (
            from_returnn,
            {"optimizer": "adam", "gradient_noise": "x"},
            r"^gradient_noise: must be a number, got 'x'",
        ),
        (
            from_returnn,
            {"optimizer": "adam", "gradient_noise": -0.1},
            r"^gradient_noise: must be >= 0, got -0\.1",
        ),
        (
            from_returnn,
            {"optimizer": "adam", "gradient_nan_inf_filter": "yes"},
            r"^gradient_nan_inf_filter: must be true or false, got 'yes'",
        ),
        (
            from_returnn,
            {"optimizer": "adam", "optimizer_epsilon": "x"},
            r"^optimizer_epsilon: must be a number, got 'x'",
        ),
        (
            from_returnn,
            {"optimizer": "momentum", "momentum": "x"},
            r"^momentum: must be a number, got 'x'",
        ),
    ],
)
def test_the_config_layers_messages_name_the_dialect_field(build, doc, message):
    with pytest.raises(gc.ConfigError, match=message):
        build(doc)


def test_numbers_as_yaml_strings_are_read_once_by_the_config_layer():
    tx = from_nnabla("solver:\n  type: Adam\n  adam_param: {alpha: 1e-3}\n  weight_decay: 1e-4\n")
    assert tx.config["optimizer"]["learning_rate"] == 0.001
    assert tx.config["weight_decay"] == {"rate": 0.0001, "mode": "coupled"}
    tx = from_returnn(
        {
            "optimizer": {"class": "adam", "learning_rate_multiplier": "0.5"},
            "learning_rate": "1e-3",
        }
    )
    assert tx.config["optimizer"]["learning_rate"] == pytest.approx(5e-4)
