"""Differential privacy: `dpsgd` and `differentially_private_aggregate` (per-example gradients
clipped and noised, the same key as Optax) against Optax 0.2.8's `optax.contrib` over 100 steps,
eager and jit; reproducibility, clipping, signatures, validation."""

from __future__ import annotations

import warnings
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax.contrib as oc
import pytest

import gradtx
from gradtx import contrib as gc

from ..helpers import assert_trees_close, mixed_params, random_like
from ..optax_reference import with_modes
from .common import LR, SMALL_LR, assert_signature_matches_optax, compare_with_extra

BATCH = 4


def _per_example_grads(params: Any, steps: int) -> list:
    rng = np.random.default_rng(7)
    batched = jax.tree.map(lambda x: jnp.zeros((BATCH, *jnp.shape(x)), x.dtype), params)
    return [random_like(batched, rng, scale=0.5) for _ in range(steps)]


DPSGD = [
    (
        "dpsgd",
        lambda: gc.dpsgd(LR, 1.0, 0.5, seed=3),
        lambda: oc.dpsgd(LR, 1.0, 0.5, seed=3),
    ),
    (
        "dpsgd_nesterov",
        lambda: gc.dpsgd(SMALL_LR, 0.7, 1.1, 11, 0.9, True),
        lambda: oc.dpsgd(SMALL_LR, 0.7, 1.1, 11, 0.9, True),
    ),
    (
        "differentially_private_aggregate_key",
        lambda: gc.differentially_private_aggregate(2.0, 0.3, jax.random.key(9)),
        lambda: oc.differentially_private_aggregate(2.0, 0.3, jax.random.key(9)),
    ),
]


@pytest.mark.across_versions
@pytest.mark.parametrize(("name", "ours", "reference", "jit"), with_modes(DPSGD, eager={"dpsgd"}))
def test_dpsgd_against_optax(name, ours, reference, jit):
    params = mixed_params()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # Optax's dpsgd passes `seed=`
        reference = reference()
    compare_with_extra(
        ours(), reference, jit=jit, params=params, grads=_per_example_grads(params, 100)
    )


def test_dpsgd_is_reproducible_from_its_seed_and_clips():
    params = {"w": jnp.zeros(3), "b": jnp.zeros(())}
    grads = {"w": 100.0 * jnp.ones((BATCH, 3)), "b": jnp.ones((BATCH,))}
    run = lambda tx: tx.update(grads, tx.init(params), params)[0]
    a, b = run(gc.dpsgd(1.0, 1.0, 0.5, seed=0)), run(gc.dpsgd(1.0, 1.0, 0.5, seed=0))
    c = run(gc.dpsgd(1.0, 1.0, 0.5, seed=jax.random.key(1)))
    assert_trees_close(a, b, 0, 0)
    assert not np.allclose(a["w"], c["w"])
    # Without noise every example is clipped to norm 1, so the mean has norm 1.
    quiet = run(gc.dpsgd(1.0, 1.0, 0.0, seed=0))
    np.testing.assert_allclose(gradtx.tree.norm(quiet), 1.0, rtol=1e-6)
    tx = gc.differentially_private_aggregate(1.0, 0.0, 0)
    with pytest.raises(ValueError, match="expects per-example gradients"):
        tx.update({"w": jnp.ones((2, 3)), "b": jnp.ones((3,))}, tx.init(params))


SIGNATURES = [
    (gc.dpsgd, oc.dpsgd),
    (gc.differentially_private_aggregate, oc.differentially_private_aggregate),
]


@pytest.mark.parametrize(("ours", "theirs"), SIGNATURES, ids=[s[0].__name__ for s in SIGNATURES])
def test_signature_matches_optax(ours, theirs):
    assert_signature_matches_optax(ours, theirs)


INVALID = [
    (gc.dpsgd, {"learning_rate": 0.1, "l2_norm_clip": -1.0, "noise_multiplier": 1.0, "seed": 0},
     "dpsgd: differentially_private_aggregate: l2_norm_clip must be >= 0, got -1.0"),
    (gc.dpsgd, {"learning_rate": 0.1, "l2_norm_clip": 1.0, "noise_multiplier": 1.0, "seed": 0,
                "momentum": 1.5}, "dpsgd: momentum must be in"),
    (gc.differentially_private_aggregate, {"l2_norm_clip": 1.0, "noise_multiplier": 1.0},
     "differentially_private_aggregate: needs an explicit key"),
    (gc.differentially_private_aggregate,
     {"l2_norm_clip": 1.0, "noise_multiplier": -1.0, "key": 0}, "noise_multiplier must be >= 0"),
]  # fmt: skip


@pytest.mark.parametrize(("factory", "kwargs", "message"), INVALID)
def test_invalid_hyperparameters_raise_at_construction(factory, kwargs, message):
    with pytest.raises((ValueError, TypeError), match=message):
        factory(**kwargs)
