"""Reliability II: infinite clipping thresholds, non-finite hyperparameters and schedules, and
parameter leaves an optimizer cannot train (each of these failed, or passed silently, before)."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gradtx

GRADS = {"a": jnp.array([3.0, -1e30]), "b": jnp.array([4.0]), "c": jnp.zeros((2, 2))}


@pytest.mark.parametrize("name", ["clip_by_global_norm", "clip_by_norm"])
def test_an_infinite_clipping_threshold_leaves_the_updates_unchanged(name):
    """Even when the norm itself overflows to inf (the 1e30 leaf): inf / inf would be NaN."""
    tx = getattr(gradtx, name)(math.inf)
    out, _ = tx.update(GRADS, tx.init(GRADS))
    for key in GRADS:
        np.testing.assert_array_equal(out[key], GRADS[key])


def test_an_infinite_global_norm_threshold_matches_optax_on_ordinary_gradients():
    grads = {"a": jnp.array([3.0, -2.0]), "b": jnp.array([4.0])}
    tx = gradtx.clip_by_global_norm(math.inf)
    out, _ = tx.update(grads, tx.init(grads))
    reference, _ = optax.clip_by_global_norm(math.inf).update(grads, optax.EmptyState())
    for key in grads:
        np.testing.assert_array_equal(out[key], reference[key])


@pytest.mark.parametrize("name", ["clip_by_global_norm", "clip_by_norm"])
def test_a_finite_threshold_still_clips_and_a_nan_norm_stays_nan(name):
    tx = getattr(gradtx, name)(1.0)
    grads = {"a": jnp.array([3.0, 4.0])}
    out, _ = tx.update(grads, tx.init(grads))
    np.testing.assert_allclose(out["a"], [0.6, 0.8], rtol=1e-6)
    nan = {"a": jnp.array([jnp.nan, 1.0])}
    out, _ = tx.update(nan, tx.init(nan))
    assert bool(jnp.isnan(out["a"]).all())


@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan])
@pytest.mark.parametrize(
    "make",
    [
        lambda v: gradtx.sgd(v),
        lambda v: gradtx.adam(v),
        lambda v: gradtx.adamw(1e-3, weight_decay=v),
        lambda v: gradtx.weight_decay(v),
        lambda v: gradtx.scale_by_learning_rate(v),
    ],
    ids=["sgd", "adam", "adamw-weight_decay", "weight_decay", "scale_by_learning_rate"],
)
def test_a_non_finite_learning_rate_or_weight_decay_is_refused(make, value):
    with pytest.raises(gradtx.HyperparameterError, match="finite"):
        make(value)


@pytest.mark.parametrize(
    ("make", "name"),
    [
        (lambda: gradtx.cosine_decay_schedule(math.nan, 10), "init_value"),
        (lambda: gradtx.schedules.linear(0.1, math.inf, 10), "end_value"),
        (lambda: gradtx.exponential_decay(math.inf, 10, 0.5), "init_value"),
        (lambda: gradtx.warmup_cosine_decay_schedule(0.0, math.nan, 5, 10), "peak_value"),
        (lambda: gradtx.schedules.constant(-math.inf), "value"),
    ],
)
def test_a_non_finite_schedule_value_is_refused_at_construction(make, name):
    with pytest.raises(gradtx.HyperparameterError, match=f"{name} must be finite"):
        make()


def test_finite_schedules_are_still_built():
    schedule = gradtx.cosine_decay_schedule(0.1, 10)
    assert float(schedule(0)) == pytest.approx(0.1)


@pytest.mark.parametrize(
    ("params", "leaf", "what"),
    [
        ({"w": jnp.ones(3), "step": jnp.arange(3)}, "step", "dtype int32"),
        ({"w": jnp.ones(3), "mask": jnp.ones(3, bool)}, "mask", "dtype bool"),
        ({"layer": {"w": 1.0}}, "layer/w", "is a float"),
        ({"layers": [jnp.ones(2), 3]}, "layers/1", "is a int"),
    ],
)
@pytest.mark.parametrize("alias", ["adam", "sgd", "lion", "adafactor"])
def test_a_leaf_an_optimizer_cannot_train_is_named_at_init(alias, params, leaf, what):
    tx = getattr(gradtx, alias)(1e-3)
    with pytest.raises(TypeError) as info:
        tx.init(params)
    message = str(info.value)
    assert message.startswith(f"{alias}: the params leaf {leaf!r}")
    assert what in message


def test_float_complex_and_abstract_leaves_are_accepted():
    params = {
        "w": jnp.ones(3),
        "z": jnp.ones(2, jnp.complex64),
        "h": jnp.ones(2, jnp.bfloat16),
        "abstract": jax.ShapeDtypeStruct((2,), jnp.float32),
        "absent": None,
    }
    gradtx.adam(1e-3).init(params)
