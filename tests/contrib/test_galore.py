"""GaLore (gradients projected onto a low-rank subspace) against Optax 0.2.8's
`optax.contrib.galore` over 100 steps, eager and jit; None leaves, dimension numbers,
signatures, validation."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax
import optax.contrib as oc
import pytest

import gradtx
from gradtx import contrib as gc

from ..helpers import assert_trees_close, grad_sequence, mixed_params
from ..optax_reference import with_modes
from .common import LR, MASK, SMALL_LR, assert_signature_matches_optax, compare_with_extra

# Optax's GaLore fails on None leaves, so the comparison tree has none.


def _dense_params() -> dict:
    p = mixed_params()
    return {"dense": p["dense"], "w": p["layers"][1]["w"], "row": p["pair"].a,
            "cube": p["pair"].b[1], "scalar": p["pair"].b[0], "vec": p["layers"][0]}  # fmt: skip


def _all_axes(gn):
    return lambda params: jax.tree.map(
        lambda p: gn(0, tuple(range(1, p.ndim))) if p.ndim >= 2 else None, params
    )


GALORE = [
    (
        "scale_by_galore",
        lambda: gc.scale_by_galore(2, 4, 2.0),
        lambda: oc.scale_by_galore(2, 4, 2.0),
    ),
    (
        "galore",
        lambda: gc.galore(LR, rank=2, update_proj_gap=7),
        lambda: oc.galore(LR, rank=2, update_proj_gap=7),
    ),
    (
        "galore_dims_wd_base",
        lambda: gc.galore(
            SMALL_LR,
            1,
            3,
            0.5,
            gradtx.scale_by_rms(),
            0.1,
            MASK,
            _all_axes(gc.GaLoreDimensionNumbers),
        ),
        lambda: oc.galore(
            SMALL_LR,
            1,
            3,
            0.5,
            optax.scale_by_rms(),
            0.1,
            MASK,
            _all_axes(oc.GaLoreDimensionNumbers),
        ),
    ),
]


@pytest.mark.across_versions
@pytest.mark.parametrize(
    ("name", "ours", "reference", "jit"),
    with_modes(GALORE, eager={"galore"}),
)
def test_galore_against_optax(name, ours, reference, jit):
    compare_with_extra(ours(), reference(), jit=jit, params=_dense_params(),
             grads=grad_sequence(_dense_params(), 100))  # fmt: skip


def test_galore_passes_none_leaves_through():
    full = mixed_params()
    dense = {"dense": full["dense"], "layers": [full["layers"][0], {"w": full["layers"][1]["w"]}],
             "pair": full["pair"]}  # fmt: skip
    tx = gc.galore(0.1, rank=1, update_proj_gap=2)
    grads = grad_sequence(full, 3)
    s_full, s_dense = tx.init(full), tx.init(dense)
    for g in grads:
        g_dense = {"dense": g["dense"], "layers": [g["layers"][0], {"w": g["layers"][1]["w"]}],
                   "pair": g["pair"]}  # fmt: skip
        u_full, s_full = tx.update(g, s_full, full)
        u_dense, s_dense = tx.update(g_dense, s_dense, dense)
        assert u_full["layers"][1]["frozen"] is None and u_full["none"] is None
        assert_trees_close(jax.tree.leaves(u_full), jax.tree.leaves(u_dense), 0, 0)


def test_galore_rejects_bad_dimension_numbers_at_init():
    params = {"w": jnp.ones((2, 3))}
    bad = gc.galore(0.1, weight_dimension_numbers={"w": gc.GaLoreDimensionNumbers(0, 0)})
    with pytest.raises(ValueError, match="scale_by_galore: reduction axes"):
        bad.init(params)
    vector = gc.galore(0.1, weight_dimension_numbers={"w": gc.GaLoreDimensionNumbers(0, 1)})
    with pytest.raises(ValueError, match="scale_by_galore: GaLore projects leaves of rank"):
        vector.init({"w": jnp.ones(3)})


SIGNATURES = [
    (gc.galore, oc.galore),
    (gc.scale_by_galore, oc.scale_by_galore),
]


@pytest.mark.parametrize(("ours", "theirs"), SIGNATURES, ids=[s[0].__name__ for s in SIGNATURES])
def test_signature_matches_optax(ours, theirs):
    assert_signature_matches_optax(ours, theirs)


INVALID = [
    (gc.galore, {"learning_rate": 0.1, "rank": 0}, "galore: scale_by_galore: rank must be >= 1"),
    (gc.galore, {"learning_rate": 0.1, "update_proj_gap": 1.5}, "galore: .*update_proj_gap"),
]  # fmt: skip


@pytest.mark.parametrize(("factory", "kwargs", "message"), INVALID)
def test_invalid_hyperparameters_raise_at_construction(factory, kwargs, message):
    with pytest.raises((ValueError, TypeError), match=message):
        factory(**kwargs)
