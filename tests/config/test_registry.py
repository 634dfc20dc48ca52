"""The registry: discovery, case- and separator-insensitive names, third-party factories."""

from __future__ import annotations

import pytest

import gradtx
from gradtx import config as gc


@pytest.mark.parametrize(
    ("spelling", "factory"),
    [
        ("AMSGRAD", gradtx.amsgrad),
        ("amsgrad", gradtx.amsgrad),
        ("Sgd", gradtx.sgd),
        ("SGD", gradtx.sgd),
        ("adam_w", gradtx.adamw),
        ("Adam-W", gradtx.adamw),
        ("nnabla.adam", gradtx.nnabla.adam),
        ("NNABLA_ADAM", gradtx.nnabla.adam),
        ("returnn.nadam", gradtx.returnn.nadam),
        ("muon", gradtx.contrib.muon),
        ("contrib.muon", gradtx.contrib.muon),
        ("rmsprop graves", gradtx.rmsprop_graves),
    ],
)
def test_names_are_case_and_separator_insensitive(spelling, factory):
    assert gc.get_optimizer(spelling) is factory


def test_schedules_have_their_own_names_and_optax_aliases():
    assert gc.get_schedule("Cosine-Decay") is gradtx.schedules.cosine_decay
    assert gc.get_schedule("cosine_decay_schedule") is gradtx.schedules.cosine_decay
    assert "cosine_decay" in gc.available("schedule")
    assert "cosine_decay_schedule" not in gc.available("schedule")  # an alias, not a name
    with pytest.raises(gc.ConfigError, match="unknown solver 'cosine_decay'"):
        gc.get_optimizer("cosine_decay")


def test_unknown_names_list_close_matches():
    with pytest.raises(
        gc.ConfigError, match=r"unknown solver 'adamx' \(did you mean 'adamax' or 'adam'"
    ):
        gc.get_optimizer("adamx")
    with pytest.raises(gc.ConfigError, match="did you mean 'adamw'"):
        gc.get_optimizer("adamww")
    with pytest.raises(gc.ConfigError, match="did you mean 'warmup_cosine_decay'"):
        gc.get_schedule("warmup_cosine_decy")


def test_available_is_sorted_canonical_and_complete():
    names = gc.available()
    assert names == sorted(names)
    for n in ("adam", "adamw", "sgd", "lion", "nnabla.adam", "returnn.amsgrad", "muon"):
        assert n in names
    with pytest.raises(gc.ConfigError, match="kind must be one of"):
        gc.available("optimiser")


def test_register_a_third_party_factory_and_build_it_from_a_config():
    def my_clipped_sgd(learning_rate: float, max_norm: float = 1.0):
        """A user factory."""
        return gradtx.chain(gradtx.clip_by_global_norm(max_norm), gradtx.sgd(learning_rate))

    assert gc.register("my_clipped_sgd", my_clipped_sgd, aliases=["my-csgd"]) is my_clipped_sgd
    assert gc.get_optimizer("MyClippedSGD") is my_clipped_sgd
    assert gc.get_optimizer("my_csgd") is my_clipped_sgd
    tx = gc.from_config(
        {"optimizer": {"name": "my-clipped-sgd", "learning_rate": 0.5, "max_norm": 2.0}}
    )
    assert tx.config["optimizer"] == {
        "name": "my_clipped_sgd",
        "learning_rate": 0.5,
        "max_norm": 2.0,
    }
    with pytest.raises(gc.ConfigError, match="has no hyperparameter 'max_nrm'"):
        gc.from_config({"optimizer": {"name": "my_clipped_sgd", "learning_rate": 1, "max_nrm": 2}})
    # a taken name is refused unless overwrite=True
    with pytest.raises(gc.ConfigError, match="'adam' is taken by 'adam'"):
        gc.register("adam", my_clipped_sgd)
    with pytest.raises(gc.ConfigError, match="alias 'SGD' is taken by 'sgd'"):
        gc.register("my_other", my_clipped_sgd, aliases=["SGD"])
    with pytest.raises(gc.ConfigError, match="unknown solver 'my_other'"):
        gc.get_optimizer("my_other")  # a refused registration leaves nothing behind
    gc.register("my_clipped_sgd", gradtx.sgd, overwrite=True)
    assert gc.get_optimizer("my_clipped_sgd") is gradtx.sgd


def test_register_checks_its_arguments():
    with pytest.raises(gc.ConfigError, match="factory must be callable"):
        gc.register("my_thing", 3)  # type: ignore[arg-type]
    with pytest.raises(gc.ConfigError, match="must contain a letter"):
        gc.register("__", gradtx.sgd)
    with pytest.raises(gc.ConfigError, match="kind must be one of"):
        gc.register("my_sched", gradtx.sgd, kind="scheduler")
