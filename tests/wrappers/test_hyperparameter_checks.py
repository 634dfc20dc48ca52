"""Validation of hyperparameters given as data (issue 49): concrete values are checked as the
factory checks them; traced ones, with `checked=True`, through `checkify`, naming the argument."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest
from jax.experimental import checkify

import gradtx


def test_concrete_values_are_validated_when_rebuilt():
    tx = gradtx.adamw(gradtx.warmup_cosine_decay_schedule(0.0, 1e-3, 10, 100))
    hp = gradtx.hyperparameters(tx)
    with pytest.raises(ValueError, match=r"b1 must be in \[0.0, 1.0\), got 1.5"):
        gradtx.with_hyperparameters(tx, {**hp, "b1": 1.5})
    bad = {**hp, "learning_rate": {**hp["learning_rate"], "warmup_steps": 2.5}}
    with pytest.raises(ValueError, match=r"warmup_steps"):
        gradtx.with_hyperparameters(tx, bad)
    with pytest.raises(ValueError, match=r"with_hyperparameters: .*learning_rate"):
        gradtx.with_hyperparameters(tx, {**hp, "learning_rate": 1e-3})  # not the schedule's tree
    with pytest.raises(TypeError, match="not built by a gradtx factory"):
        gradtx.hyperparameters(lambda count: 0.1)


def test_traced_values_are_checked_under_checkify():
    tx = gradtx.adamw(1e-3)
    hp = gradtx.hyperparameters(tx)
    params = {"w": jnp.ones(3)}
    state = tx.init(params)

    def step(g, s, p, hp):
        return gradtx.with_hyperparameters(tx, hp, checked=True).update(g, s, p)

    checked = jax.jit(checkify.checkify(step))
    err, _ = checked(params, state, params, hp)
    assert err.get() is None
    for name, value, message in [
        ("b1", 1.5, r"b1 must be in \[0.0, 1.0\), got 1.5"),
        ("learning_rate", -1.0, r"learning_rate must be finite and >= 0, got -1.0"),
        ("eps", float("nan"), r"eps must be >= 0, got nan"),
    ]:
        err, _ = checked(params, state, params, {**hp, name: value})
        with pytest.raises(checkify.JaxRuntimeError, match=message):
            err.throw()
    assert checked._cache_size() == 1
    with pytest.raises(ValueError, match="checkify"):  # checked=True needs checkify around it
        jax.jit(step)(params, state, params, hp)
