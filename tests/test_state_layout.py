"""State kinds and layouts: the configuration, not the state's type, picks the algorithm (a
state of the other kind is refused, naming both), and a wrapper's layout does not depend on
its numbers. (That no table optimizer's layout depends on its hyperparameter values:
tests/test_hyperparameters.py.)"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradtx

from .helpers import mixed_params

# -- the configuration, not the state's type, picks the algorithm ---------------------------------


def test_eps_hat_state_kind_follows_the_amsgrad_option():
    params = {"w": jnp.ones(3)}
    plain = gradtx.scale_by_adam_eps_hat(amsgrad=False)
    ams = gradtx.scale_by_adam_eps_hat(amsgrad=True)
    with pytest.raises(ValueError, match=r"expected a ScaleByAdamState .* got ScaleByAmsgradState"):
        plain.update(params, ams.init(params))
    with pytest.raises(ValueError, match=r"expected a ScaleByAmsgradState .* got ScaleByAdamState"):
        ams.update(params, plain.init(params))
    with pytest.raises(ValueError, match=r"bound_lr: expected a ScaleByAmsgradState"):
        gradtx.bound_lr(amsgrad=True).update(params, plain.init(params))


# -- state layouts depend on options, never on numbers ---------------------------------------------


def test_accumulate_k_steps_layout_does_not_depend_on_k():
    params = mixed_params()
    layouts = {
        k: jax.tree.structure(gradtx.accumulate_k_steps(gradtx.adam(1e-3), k).init(params))
        for k in (1, 2, 5)
    }
    assert layouts[1] == layouts[2] == layouts[5]


def test_accumulate_one_step_is_the_inner_step():
    params = mixed_params()
    grads = jax.tree.map(jnp.ones_like, params)
    inner, wrapped = gradtx.adam(0.1), gradtx.accumulate_k_steps(gradtx.adam(0.1), 1)
    s_in, s_wr = inner.init(params), wrapped.init(params)
    for _ in range(3):
        u_in, s_in = inner.update(grads, s_in, params)
        u_wr, s_wr = wrapped.update(grads, s_wr, params)
        jax.tree.map(np.testing.assert_array_equal, u_in, u_wr)


def test_weight_decay_names_a_wrong_state():
    weights = {"w": jnp.ones(2)}
    tx = gradtx.add_decayed_weights(0.1)
    with pytest.raises(ValueError, match=r"expected a WeightDecayState .* got int"):
        tx.update(weights, 0, weights)
