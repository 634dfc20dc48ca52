"""Polyak step sizes (`scale_by_polyak` and `polyak_sgd`, the loss given as `value=`) against
Optax 0.2.8, a one-step check on a quadratic, and validation."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gradtx

from ..helpers import compare_transformations
from .common import describe, invalid_ids


def _values(steps: int = 100, seed: int = 2) -> list[dict]:
    """Loss values, some below f_min (a negative gap), as `value=` extra arguments."""
    rng = np.random.default_rng(seed)
    return [{"value": jnp.float32(v)} for v in rng.uniform(-1.0, 4.0, steps)]


LR = lambda count: 0.5 * 0.5 * (1.0 + jnp.cos(jnp.pi * jnp.minimum(count, 100) / 120))


@pytest.mark.across_versions
@pytest.mark.parametrize(
    ("ours", "reference", "jit"),
    [
        pytest.param(gradtx.polyak_sgd, optax.polyak_sgd, False, id="eager-polyak_sgd"),
        pytest.param(
            lambda: gradtx.polyak_sgd(0.05, scaling=LR, f_min=0.5, eps=0.1, variant="sps+"),
            lambda: optax.polyak_sgd(0.05, scaling=LR, f_min=0.5, eps=0.1, variant="sps+"),
            True,
            id="jit-polyak_sgd_schedule_sps_plus",
        ),
        pytest.param(
            lambda: gradtx.scale_by_polyak(f_min=-0.5, max_learning_rate=0.3, variant="sps+"),
            lambda: optax.scale_by_polyak(f_min=-0.5, max_learning_rate=0.3, variant="sps+"),
            True,
            id="jit-scale_by_polyak",
        ),
    ],
)
def test_polyak_matches_optax(ours, reference, jit):
    compare_transformations(ours(), reference(), extra_args=_values(), jit=jit)


def test_scale_by_polyak_needs_the_value_and_gives_zero_for_a_zero_gradient():
    tx = gradtx.scale_by_polyak()
    g = {"w": jnp.zeros(3)}
    with pytest.raises(ValueError, match="scale_by_polyak needs the monitored value"):
        tx.update(g, tx.init(g))
    updates, _ = tx.update(g, tx.init(g), value=jnp.float32(2.0))
    np.testing.assert_array_equal(np.asarray(updates["w"]), np.zeros(3))


def test_polyak_sgd_lands_on_the_minimum_of_a_quadratic_in_one_step():
    # f(w) = |w|^2 / 2: gap / |g|^2 = 1/2 is too short, the cap 1.0 is not hit; f_min = 0.
    tx = gradtx.polyak_sgd()
    w = jnp.array([3.0, -4.0])
    value, grad = jax.value_and_grad(lambda w: 0.5 * jnp.sum(w**2))(w)
    updates, _ = tx.update(grad, tx.init(w), w, value=value)
    np.testing.assert_allclose(np.asarray(w + updates), 0.5 * np.asarray(w), rtol=1e-6)


@pytest.mark.parametrize("name", ["polyak_sgd", "scale_by_polyak"])
def test_signature_is_optaxs(name):
    """Argument names, order, kinds and defaults are Optax 0.2.8's."""
    assert describe(getattr(gradtx, name)) == describe(getattr(optax, name))


INVALID = [
    (
        lambda: gradtx.scale_by_polyak(variant="spss"),
        "scale_by_polyak: variant must be one of ['sps', 'sps+'], got 'spss' (did you mean",
    ),
    (
        lambda: gradtx.polyak_sgd(max_learning_rate=-1.0),
        "polyak_sgd: scale_by_polyak: max_learning_rate must be >= 0, got -1.0",
    ),
    (
        lambda: gradtx.polyak_sgd(scaling=-1.0),
        "polyak_sgd: scaling must be >= 0, got -1.0 (from scale_by_learning_rate: learning_rate",
    ),
]


@pytest.mark.parametrize(("build", "message"), INVALID, ids=invalid_ids(INVALID))
def test_invalid_hyperparameters_raise_at_construction(build, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        build()


@pytest.mark.parametrize("name", ["polyak_sgd", "scale_by_polyak"])
def test_a_schedule_as_max_learning_rate_is_refused_at_construction(name):
    # Optax's max_learning_rate, f_min and eps are numbers; a schedule there used to fail at the
    # first update with a raw TypeError from jnp
    prefix = "polyak_sgd: scale_by_polyak" if name == "polyak_sgd" else "scale_by_polyak"
    with pytest.raises(TypeError, match=f"^{prefix}: max_learning_rate must be a number.*scaling"):
        getattr(gradtx, name)(max_learning_rate=LR)
    for arg in ("f_min", "eps"):
        with pytest.raises(TypeError, match=f"^{prefix}: {arg} must be a number"):
            getattr(gradtx, name)(**{arg: LR})
