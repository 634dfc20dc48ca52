"""`from_nnabla` on nnabla's own text format (`.nntxt` / `.prototxt`): a whole training file as
nnabla's tools write it, one `Optimizer` or `Solver` message, and the parser's syntax."""

from __future__ import annotations

import math

import pytest

from gradtx.config import ConfigError
from gradtx.nnabla import from_nnabla
from gradtx.nnabla._nntxt import parse

# A training file laid out as nnabla's tools save it (fields and nesting of NNablaProtoBuf):
# the network, datasets, monitors and executors around two optimizers.
TRAINING_FILE = """\
global_config {
  default_context {
    array_class: "CpuCachedArray"
    device_id: "0"
    backend: "cpu:float"
  }
}
training_config {
  max_epoch: 100
  iter_per_epoch: 23
  save_best: true
  monitor_interval: 10
}
network {
  name: "Main"
  batch_size: 64
  variable {
    name: "x"
    type: "Buffer"
    shape: { dim: -1 dim: 1 dim: 28 dim: 28 }
  }
  variable {
    name: "Affine/affine/W"
    type: "Parameter"
    shape: { dim: 784 dim: 10 }
    initializer { type: "NormalAffineGlorot" multiplier: 1 }
  }
  function {
    name: "Affine"
    type: "Affine"
    input: "x"
    input: "Affine/affine/W"
    output: "Affine"
    affine_param { base_axis: 1 }
  }
}
dataset {
  name: "Training"
  uri: "mnist_training.csv"
  shuffle: true
  batch_size: 64
}
optimizer {
  start_iter: 0
  end_iter: 0
  name: "Optimizer"
  update_interval: 2
  network_name: "Main"
  dataset_name: "Training"
  solver {
    type: "Adam"
    weight_decay: 0.0001
    adam_param {
      alpha: 0.001
      beta1: 0.9
      beta2: 0.999
      eps: 1e-08
    }
    lr_scheduler_type: "Step"
    step_scheduler_param {
      gamma: 0.5
      iter_steps: 40
    }
    lr_decay: 1
    lr_decay_interval: 1
  }
  data_variable {
    variable_name: "x"
    data_name: "x"
  }
  loss_variable {
    variable_name: "SquaredError_T"
  }
  parameter_variable {
    variable_name: "w"
    learning_rate_multiplier: 1
  }
}
optimizer {
  name: "Finetune"  # a second optimizer, e.g. for another network
  network_name: "Main"
  solver {
    type: "Momentum"
    momentum_param: { lr: 0.01 momentum: 0.9 }
  }
}
monitor {
  name: "train_error"
  network_name: "MainValidation"
  dataset_name: "Training"
}
executor {
  name: "Executor"
  network_name: "MainRuntime"
  data_variable { variable_name: "x" data_name: "x" }
}
"""

# The same "Optimizer" message as gradtx's nnabla dialect takes it from YAML or a dict.
AS_DICT = {
    "solver": {
        "type": "Adam",
        "weight_decay": 0.0001,
        "adam_param": {"alpha": 0.001, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8},
        "lr_scheduler_type": "Step",
        "step_scheduler_param": {"gamma": 0.5, "iter_steps": [40]},
        "lr_decay": 1,
        "lr_decay_interval": 1,
    },
    "update_interval": 2,
    "parameter_variable": [{"variable_name": "w", "learning_rate_multiplier": 1}],
}


def test_a_training_file_builds_its_named_optimizer(tmp_path):
    path = tmp_path / "net.nntxt"
    path.write_text(TRAINING_FILE)
    reference = from_nnabla(AS_DICT)  # the same config: the same optimizer (from_config)
    for source in (path, str(path), TRAINING_FILE):
        tx = from_nnabla(source, name="Optimizer")
        assert tx.config == reference.config
    momentum = {"type": "Momentum", "momentum_param": {"lr": 0.01, "momentum": 0.9}}
    assert from_nnabla(path, name="Finetune").config == from_nnabla(momentum).config


def test_a_file_with_one_optimizer_needs_no_name(tmp_path):
    one = TRAINING_FILE[: TRAINING_FILE.index('optimizer {\n  name: "Finetune"')]
    path = tmp_path / "one.prototxt"
    path.write_text(one)
    assert from_nnabla(path).config == from_nnabla(AS_DICT).config


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, r"the file has 2 optimizers \['Optimizer', 'Finetune'\]; pick one with "),
        ({"name": "Optimiser"}, r"no optimizer named 'Optimiser' \(did you mean 'Optimizer'\?\)"),
    ],
)
def test_choosing_among_optimizers_is_explicit(tmp_path, kwargs, message):
    path = tmp_path / "net.nntxt"
    path.write_text(TRAINING_FILE)
    with pytest.raises(ConfigError, match=message):
        from_nnabla(path, **kwargs)


def test_an_optimizer_or_solver_message_alone():
    optimizer = """
    update_interval: 2
    solver {
      type: "Adam"
      weight_decay: 0.0001
      adam_param { alpha: 0.001 beta1: 0.9 beta2: 0.999 eps: 1e-08 }
      lr_scheduler_type: "Step"
      step_scheduler_param { gamma: 0.5 iter_steps: 40 }
    }
    parameter_variable { variable_name: "w" learning_rate_multiplier: 1 }
    network_name: "Main"  # a training-loop field: the loop's business, dropped
    """
    assert from_nnabla(optimizer).config == from_nnabla(AS_DICT).config
    solver = 'type: "Sgd"\nsgd_param { lr: 0.1 }\n'
    assert (
        from_nnabla(solver).config == from_nnabla({"type": "Sgd", "sgd_param": {"lr": 0.1}}).config
    )


def test_parser_reads_the_text_formats_syntax():
    doc = parse(
        """
        # a comment
        a: 1  b: -2.5e-3 c: 1.5f d: true e: false f: inf g: -inf h: ENUM_VALUE
        s: "two " 'parts\\n'
        m: { x: 1 } m { x: 2 }; n < y: [1, 2, 3] >
        iter_steps: 7
        """
    )
    assert doc["a"] == 1 and isinstance(doc["a"], int)
    assert doc["b"] == -2.5e-3 and doc["c"] == 1.5
    assert doc["d"] is True and doc["e"] is False
    assert doc["f"] == math.inf and doc["g"] == -math.inf and doc["h"] == "ENUM_VALUE"
    assert doc["s"] == "two parts\n"
    assert doc["m"] == [{"x": 1}, {"x": 2}]  # a field given twice is a list
    assert doc["n"] == {"y": [1, 2, 3]}
    assert doc["iter_steps"] == [7]  # repeated in nnabla's .proto: a list even once


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('solver {\n  type: "Adam"\n', r"<string>:3:1: invalid nnabla text format: missing '\}'"),
        ('solver {\n  type "Adam"\n}', r"<string>:2:8: .*expected ':' or '\{' after the field"),
        ("solver {\n  type: }\n", r"<string>:2:9: .*expected a value, got '\}'"),
        ("solver {\n  type: @\n}", r"<string>:2:9: .*unexpected character '@'"),
    ],
)
def test_syntax_errors_name_the_line_and_column(text, message):
    with pytest.raises(ConfigError, match=message):
        from_nnabla(text)


def test_missing_file_and_unknown_fields_are_reported(tmp_path):
    with pytest.raises(ConfigError, match=r"nnabla config file not found: '.*nope\.nntxt'"):
        from_nnabla(tmp_path / "nope.nntxt")
    with pytest.raises(ConfigError, match=r"solver\.adam_param\.alpah"):
        from_nnabla('solver { type: "Adam" adam_param { alpah: 0.1 } }')
