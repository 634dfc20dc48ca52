"""partition (Optax's name for multi_transform with a state of its own) against Optax 0.2.8:
label trees, label functions and prefixes, extra arguments masked to each group, unknown labels,
argument errors, bf16 updates."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gradtx

from ..helpers import mixed_params, random_like
from ..optax_reference import compare_to_optax, with_modes
from .common import (
    adam_from_one,
    assert_bf16_updates_stable_state_and_abstract_init,
    assert_raises_starting_with,
    compare_with_extra_args,
    momentum_from_one,
)

ADAM_PATHS = ("dense/kernel", "layers/1/w", "pair/b/1")


def _label_tree(params):
    return gradtx.tree.map_with_path(lambda p, _: "adam" if p in ADAM_PATHS else "sgd", params)


def _prefix_labels(params):
    pair = type(params["pair"])("sgd", "adam")
    return {"dense": "adam", "layers": "sgd", "pair": pair, "empty": {}, "none": None}


def _partition(lib, labels, **kw):
    return lib.partition({"adam": adam_from_one(lib), "sgd": momentum_from_one(lib)}, labels, **kw)


PARTITIONS = [
    ("tree", lambda lib: _partition(lib, _label_tree(mixed_params()))),
    ("callable", lambda lib: _partition(lib, _label_tree)),
    ("prefix", lambda lib: _partition(lib, _prefix_labels(mixed_params()))),
    ("unused_label", lambda lib: lib.partition({"a": adam_from_one(lib), "b": lib.sgd(1.0)}, "a")),
]


@pytest.mark.parametrize(
    ("name", "make", "use_jit"),
    with_modes(PARTITIONS, eager={"tree", "prefix"}, jit={"callable", "unused_label"}),
)
def test_partition_matches_optax(name, make, use_jit):
    # atol 1e-6: heavy-ball sums of O(1) terms cancel to ~1e-3 in places, where float32 rounding
    # (eager against a fused jitted step) leaves ~1e-7 absolute; rtol stays 1e-5
    compare_to_optax(
        make(gradtx), make(optax), jit=use_jit, atol=1e-6, reference_key=f"{__name__}:p-{name}"
    )


def test_partition_label_dict_is_a_tree_not_patterns():
    # a dict whose keys look like glob patterns is still a tree of labels for partition
    params = {"*": jnp.ones(3), "w": jnp.ones(2)}
    labels = {"*": "sgd", "w": "adam"}
    compare_to_optax(
        _partition(gradtx, labels), _partition(optax, labels), jit=True, params=params, steps=20
    )


def _scaled_by_tree():
    """A transformation scaling the updates by an extra argument shaped like them."""

    def init(params):
        return optax.EmptyState()

    def update(updates, state, params=None, *, scales=None):
        return jax.tree.map(lambda u, s: u * s, updates, scales), state

    return optax.GradientTransformationExtraArgs(init, update)


@pytest.mark.parametrize("use_jit", [False, True], ids=["eager", "jit"])
def test_partition_masks_compatible_extra_args_like_optax(use_jit):
    params = mixed_params()
    rng = np.random.default_rng(2)
    extra = [{"scales": random_like(params, rng)} for _ in range(20)]

    def make(lib):
        return lib.partition(
            {"adam": lib.chain(_scaled_by_tree(), adam_from_one(lib)), "sgd": _scaled_by_tree()},
            _label_tree,
            mask_compatible_extra_args=True,
        )

    compare_with_extra_args(make(gradtx), make(optax), extra, use_jit)


def test_partition_unknown_label_names_partition():
    tx = gradtx.partition({"adam": gradtx.adam(0.1)}, {"w": "adma"})
    with pytest.raises(ValueError, match=r"^partition: .*'adma'"):
        tx.init({"w": jnp.ones(2)})


# --------------------------------------------------------------------------------------------
# invalid arguments raise at construction, naming the function, the argument and the value
# --------------------------------------------------------------------------------------------

_ok = gradtx.sgd(0.1)

BAD = [
    (
        "partition_empty",
        lambda: gradtx.partition({}, "a"),
        ValueError,
        "partition: transforms must be",
    ),
    (
        "partition_flag",
        lambda: gradtx.partition({"a": _ok}, "a", mask_compatible_extra_args=1),
        ValueError,
        "partition: mask_compatible_extra_args must be True or False, got 1",
    ),
    (
        "partition_tx",
        lambda: gradtx.partition({"a": 0.1}, "a"),
        TypeError,
        "partition: transforms['a'] must be a GradientTransformation",
    ),
]


@pytest.mark.parametrize(("name", "build", "error", "message"), BAD, ids=[b[0] for b in BAD])
def test_invalid_arguments_raise_with_name_and_value(name, build, error, message):
    assert_raises_starting_with(build, error, message)


# --------------------------------------------------------------------------------------------
# bf16 in -> bf16 out, state dtypes stable, init from shapes alone
# --------------------------------------------------------------------------------------------

HOUSE = [
    ("partition", lambda: _partition(gradtx, _label_tree)),
]


@pytest.mark.parametrize(("name", "make"), HOUSE, ids=[h[0] for h in HOUSE])
def test_bf16_updates_stable_state_and_abstract_init(name, make):
    assert_bf16_updates_stable_state_and_abstract_init(make)
