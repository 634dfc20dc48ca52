"""Rprop (`scale_by_rprop` and the `rprop` alias): the published iRprop- rule as a NumPy
transcription, Optax 0.2.8's state (its update lags one step, optax PR #1725), validation."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gradtx

from ..helpers import assert_trees_close, compare_to_numpy, grad_sequence, mixed_params
from .common import describe, invalid_ids

RPROP = {"learning_rate": 0.1, "min_step_size": 1e-3, "max_step_size": 0.3}


def make_rprop_reference(
    learning_rate, eta_minus=0.5, eta_plus=1.2, min_step_size=1e-6, max_step_size=50.0, sign=1.0
):
    """iRprop- (Igel & Hüsken 2003, as torch.optim.Rprop) over float64 leaves."""

    def make():
        state: dict = {}

        def ref(grads, params):
            del params
            if not state:
                state["step"] = [np.full_like(g, learning_rate) for g in grads]
                state["prev"] = [np.zeros_like(g) for g in grads]
            out = []
            for i, g in enumerate(grads):
                agreement = g * state["prev"][i]
                step = state["step"][i]
                step = np.where(agreement > 0, np.minimum(step * eta_plus, max_step_size), step)
                step = np.where(agreement < 0, np.maximum(step * eta_minus, min_step_size), step)
                update = np.where(agreement < 0, 0.0, step * np.sign(g))
                state["step"][i], state["prev"][i] = step, update
                out.append(sign * update)
            return out

        return ref

    return make


@pytest.mark.across_versions
def test_scale_by_rprop_follows_the_published_rule(use_jit):
    compare_to_numpy(gradtx.scale_by_rprop(**RPROP), make_rprop_reference(**RPROP), jit=use_jit)


def test_rprop_descends_by_the_published_rule():
    kwargs = {"learning_rate": 0.05, "eta_minus": 0.3, "eta_plus": 1.5, "max_step_size": 1.0}
    compare_to_numpy(gradtx.rprop(**kwargs), make_rprop_reference(**kwargs, sign=-1.0))


def test_rprop_state_matches_optax_and_its_update_is_not_a_step_late():
    """Optax 0.2.8 evolves the same state but emits the previous step's update (zeroed where
    the sign just flipped): google-deepmind/optax PR #1725. gradtx emits the update it stores."""
    params = mixed_params()
    ours, theirs = gradtx.scale_by_rprop(**RPROP), optax.scale_by_rprop(**RPROP)
    ours_step, theirs_step = jax.jit(ours.update), jax.jit(theirs.update)
    s, t = ours.init(params), theirs.init(params)
    previous = None
    for i, g in enumerate(grad_sequence(params, 100)):
        u, s = ours_step(g, s)
        v, t = theirs_step(g, t)
        assert_trees_close(s.step_sizes, t.step_sizes, 1e-6, 0.0, msg=f"step sizes, step {i}")
        assert_trees_close(s.prev_updates, t.prev_updates, 1e-6, 0.0, msg=f"updates, step {i}")
        assert_trees_close(u, s.prev_updates, 0.0, 0.0, msg=f"emitted update, step {i}")
        if previous is None:
            late = jax.tree.map(jnp.zeros_like, g)
            assert all(bool(jnp.all(x != 0)) for x in jax.tree.leaves(u))
        else:
            late = jax.tree.map(lambda gi, p: jnp.where(gi * p < 0, 0.0, p), g, previous)
        assert_trees_close(v, late, 1e-6, 0.0, msg=f"Optax's update, step {i}")
        previous = u


@pytest.mark.parametrize("name", ["rprop", "scale_by_rprop"])
def test_signature_is_optaxs(name):
    """Argument names, order, kinds and defaults are Optax 0.2.8's."""
    assert describe(getattr(gradtx, name)) == describe(getattr(optax, name))


INVALID = [
    (lambda: gradtx.scale_by_rprop(0.0), "scale_by_rprop: learning_rate must be > 0, got 0.0"),
    (
        lambda: gradtx.rprop(0.1, eta_plus=0.0),
        "rprop: scale_by_rprop: eta_plus must be > 1, got 0.0",
    ),
    (
        lambda: gradtx.rprop(0.1, min_step_size=1.0, max_step_size=0.5),
        "rprop: scale_by_rprop: max_step_size must be >= min_step_size (1.0), got 0.5",
    ),
]


@pytest.mark.parametrize(("build", "message"), INVALID, ids=invalid_ids(INVALID))
def test_invalid_hyperparameters_raise_at_construction(build, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        build()


def test_rprop_learning_rate_is_a_number_not_a_schedule():
    with pytest.raises(ValueError, match="scale_by_rprop: learning_rate is the initial step size"):
        gradtx.scale_by_rprop(lambda count: 0.1)
