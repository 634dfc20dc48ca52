"""Reading config files and text: encodings (not UTF-8, a BOM), YAML flow mappings, duplicate
keys (YAML, JSON and the dialects), a missing path given as text, and the top-level
`gradtx.from_config` (docs/config.md, "Guarantees")."""

from __future__ import annotations

import json

import pytest

import gradtx
from gradtx import config as gc
from gradtx.nnabla import from_nnabla
from gradtx.returnn import from_returnn

from .shared import SGD, config_error

# --------------------------------------------------------------------------------------------
# files that are not UTF-8
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("suffix", [".yaml", ".json", ".nntxt"])
def test_a_config_file_that_is_not_utf8_names_the_file_and_byte(tmp_path, suffix):
    path = tmp_path / f"latin1{suffix}"
    path.write_bytes(b"optimizer:\n  name: sgd \xe9t\xe9\n")
    call = from_nnabla if suffix == ".nntxt" else gc.from_config
    err = config_error(call, path)
    assert str(path) in str(err) and "not UTF-8" in str(err) and "byte 23 (0xe9)" in str(err)


def test_a_utf8_bom_is_accepted(tmp_path):
    path = tmp_path / "bom.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps({"optimizer": SGD}).encode())
    assert gc.from_config(path).config["optimizer"]["name"] == "sgd"


# --------------------------------------------------------------------------------------------
# YAML flow mappings as text
# --------------------------------------------------------------------------------------------


def test_yaml_flow_mapping_text_is_read_as_yaml():
    tx = gc.from_config("{optimizer: {name: sgd, learning_rate: 0.1}}")
    assert tx.config["optimizer"] == {"name": "sgd", "learning_rate": 0.1}
    tx = gc.from_config("  {optimizer: {name: adam, learning_rate: 1e-3}, clip: {norm: 1}}")
    assert tx.config["clip"] == {"norm": 1}
    # text that opens as a JSON object is JSON, with JSON's messages
    assert "invalid JSON" in str(config_error(gc.from_config, '{"optimizer": {"name": "adam",}}'))
    assert gc.from_config('{ "optimizer": {"name": "sgd", "learning_rate": 1}}').config


# --------------------------------------------------------------------------------------------
# duplicate keys
# --------------------------------------------------------------------------------------------

DUPLICATES = [
    ("yaml", "optimizer:\n  name: sgd\n  learning_rate: 0.1\n  learning_rate: 50.0\n"),
    ("yaml-flow", "{optimizer: {name: sgd, learning_rate: 0.1, learning_rate: 50.0}}"),
    ("json", '{"optimizer": {"name": "sgd", "learning_rate": 0.1, "learning_rate": 50.0}}'),
]


@pytest.mark.parametrize(("case", "text"), DUPLICATES, ids=[c[0] for c in DUPLICATES])
def test_duplicate_keys_are_refused_naming_the_key(tmp_path, case, text):
    assert "duplicate key 'learning_rate'" in str(config_error(gc.from_config, text))
    path = tmp_path / ("c.json" if case == "json" else "c.yaml")
    path.write_text(text)
    err = config_error(gc.from_config, path)
    assert str(path) in str(err) and "duplicate key 'learning_rate'" in str(err)


def test_duplicate_sections_and_dialect_keys_are_refused():
    text = "optimizer: {name: sgd, learning_rate: 0.1}\noptimizer: {name: adam}\n"
    assert "duplicate key 'optimizer'" in str(config_error(gc.from_config, text))
    text = "solver:\n  type: Sgd\n  sgd_param: {lr: 0.1, lr: 5}\n"
    assert "duplicate key 'lr'" in str(config_error(from_nnabla, text))
    text = "optimizer: adam\nlearning_rate: 0.1\nlearning_rate: 5\n"
    assert "duplicate key 'learning_rate'" in str(config_error(from_returnn, text))


# --------------------------------------------------------------------------------------------
# paths and the entry point
# --------------------------------------------------------------------------------------------


def test_a_missing_path_given_as_text_says_so():
    err = config_error(gc.from_config, "configs/missing_config")
    assert "no file 'configs/missing_config' exists" in str(err)


def test_gradtx_main_is_reexported():
    assert gradtx.from_config is gc.from_config
