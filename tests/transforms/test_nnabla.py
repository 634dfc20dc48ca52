"""The primitives behind nnabla's rules: ε-hat Adam, momentum with the learning rate inside,
decay by eta_t / eta_0, the LARS / LAMB trust ratios and AdaBelief's options. The full solver
rules are checked against the reference sheet in tests/optimizers/test_nnabla_aliases.py; this
file checks each primitive's own rule, its edge cases and its validation."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradtx

from ..helpers import compare_to_numpy, grad_sequence, mixed_params


def eps_hat_reference(b1, b2, eps, *, bias_correction=True, amsgrad=False, nesterov=False):
    """Kingma & Ba's formula before their Section 2.1; AMSGrad over the raw v; TF's Nesterov."""

    def make():
        state = {"t": 0, "m": {}, "v": {}, "v_max": {}}

        def ref(grads, params):
            del params
            state["t"] += 1
            t = state["t"]
            k = np.sqrt(1 - b2**t) / (1 - b1**t) if bias_correction else 1.0
            out = []
            for i, g in enumerate(grads):
                m = b1 * state["m"].get(i, 0.0) + (1 - b1) * g
                v = b2 * state["v"].get(i, 0.0) + (1 - b2) * g * g
                state["m"][i], state["v"][i] = m, v
                if amsgrad:
                    v = np.maximum(state["v_max"].get(i, 0.0), v)
                    state["v_max"][i] = v
                numerator = b1 * m + (1 - b1) * g if nesterov else m
                out.append(k * numerator / (np.sqrt(v) + eps))
            return out

        return ref

    return make


@pytest.mark.parametrize(
    ("flags", "jit"),
    [
        ({}, False),
        ({"nesterov": True}, True),
        ({"amsgrad": True, "bias_correction": False}, True),
        ({"amsgrad": True, "nesterov": True}, True),
    ],
    ids=["eager-default", "nesterov", "amsgrad-uncorrected", "amsgrad-nesterov"],
)
def test_adam_eps_hat_matches_the_formula(flags, jit):
    # The updates are O(1); moments that cancel to ~1e-3 carry float32 rounding of O(1) terms.
    compare_to_numpy(
        gradtx.scale_by_adam_eps_hat(0.8, 0.99, 1e-3, **flags),
        eps_hat_reference(0.8, 0.99, 1e-3, **flags),
        jit=jit,
        atol=1e-6,
    )


def test_adam_eps_hat_is_adam_with_a_step_dependent_eps():
    # u = k m / (sqrt(v) + eps) = m_hat / (sqrt(v_hat) + eps / sqrt(1 - b2^t)): one step checks it.
    params = {"w": jnp.array([0.3, -2.0, 1e-3])}
    g = {"w": jnp.array([0.5, 1.0, -3e-3])}
    ours = gradtx.scale_by_adam_eps_hat(eps=0.1)
    adam = gradtx.scale_by_adam(eps=0.1 / np.sqrt(1 - 0.999))
    np.testing.assert_allclose(
        np.asarray(ours.update(g, ours.init(params))[0]["w"]),
        np.asarray(adam.update(g, adam.init(params))[0]["w"]),
        rtol=1e-5,
    )


def test_trace_with_lr_applies_a_new_learning_rate_to_new_gradients_only():
    tx = gradtx.trace_with_lr(lambda count: jnp.where(count == 0, 1.0, 0.0), 0.5)
    state = tx.init({"w": jnp.zeros(1)})
    first, state = tx.update({"w": jnp.ones(1)}, state)
    second, state = tx.update({"w": jnp.ones(1)}, state)
    # v1 = 1 * g = 1; v2 = 0.5 * v1 + 0 * g = 0.5: the old momentum keeps its learning rate.
    np.testing.assert_allclose([float(first["w"][0]), float(second["w"][0])], [-1.0, -0.5])
    sgd = gradtx.sgd(lambda count: jnp.where(count == 0, 1.0, 0.0), 0.5)
    state = sgd.init({"w": jnp.zeros(1)})
    _, state = sgd.update({"w": jnp.ones(1)}, state)
    second_sgd, _ = sgd.update({"w": jnp.ones(1)}, state)
    assert float(second_sgd["w"][0]) == 0.0  # trace-then-scale drops the whole momentum


def test_trace_with_lr_keeps_the_accumulator_dtype():
    params = mixed_params(dtype=jnp.bfloat16)
    tx = gradtx.trace_with_lr(0.1, 0.9, accumulator_dtype=jnp.float32, nesterov=True)
    state = tx.init(params)
    updates, state = jax.jit(tx.update)(grad_sequence(params, 1)[0], state)
    assert all(x.dtype == jnp.float32 for x in jax.tree.leaves(state.trace))
    assert all(x.dtype == jnp.bfloat16 for x in jax.tree.leaves(updates))


def test_weight_decay_by_lr_ratio_follows_the_schedule():
    schedule = lambda count: 0.1 * 0.5**count
    tx = gradtx.weight_decay_by_lr_ratio(0.2, schedule)
    params = {"w": jnp.array([1.0, -2.0])}
    state = tx.init(params)
    zero = {"w": jnp.zeros(2)}
    for expected in (0.2, 0.1, 0.05):
        updates, state = tx.update(zero, state, params)
        np.testing.assert_allclose(np.asarray(updates["w"]), expected * np.array([1.0, -2.0]))
    # eta_0 given explicitly: the ratio is eta_t / 0.05
    tx = gradtx.weight_decay_by_lr_ratio(0.2, schedule, initial_learning_rate=0.05)
    updates, _ = tx.update(zero, tx.init(params), params)
    np.testing.assert_allclose(np.asarray(updates["w"]), 0.4 * np.array([1.0, -2.0]))
    with pytest.raises(ValueError, match="weight_decay_by_lr_ratio: the learning-rate schedule"):
        gradtx.weight_decay_by_lr_ratio(0.2, lambda count: 0.1 * count)


def test_lars_trust_ratio_edge_cases():
    tx = gradtx.scale_by_lars_trust_ratio(weight_decay=0.5, coefficient=0.1, eps=1e-3)
    params = {"small": jnp.full(2, 1e-4), "big": jnp.array([3.0, 4.0]), "zero_grad": jnp.ones(4)}
    g = {"small": jnp.array([1.0, 0.0]), "big": jnp.array([0.6, 0.8]), "zero_grad": jnp.zeros(4)}
    updates, _ = tx.update(g, tx.init(params), params)
    # ||w|| < eps: ratio 1, the decay still applies.
    np.testing.assert_allclose(np.asarray(updates["small"]), [1.0 + 0.5e-4, 0.5e-4], rtol=1e-6)
    # ratio = 0.1 * 5 / (1 + 0.5 * 5)
    np.testing.assert_allclose(
        np.asarray(updates["big"]), 0.1 * 5 / 3.5 * np.array([0.6 + 1.5, 0.8 + 2.0]), rtol=1e-6
    )
    # ||g|| = 0: x = lambda ||w|| = 1, ratio = 0.1 * 2 / 1
    np.testing.assert_allclose(np.asarray(updates["zero_grad"]), 0.2 * 0.5 * np.ones(4), rtol=1e-6)


def test_lamb_trust_ratio_edge_cases():
    tx = gradtx.scale_by_lamb_trust_ratio(gamma_l=1.0, gamma_u=4.0, eps=1e-3)
    params = {"clip_up": jnp.array([0.3, 0.4]), "clip_down": jnp.array([30.0, 40.0]),
              "tiny_r": jnp.ones(2)}  # fmt: skip
    r = {"clip_up": jnp.array([3.0, 4.0]), "clip_down": jnp.array([0.0, 2.0]),
         "tiny_r": jnp.array([1e-4, 0.0])}  # fmt: skip
    updates, _ = tx.update(r, tx.init(params), params)
    np.testing.assert_allclose(np.asarray(updates["clip_up"]), [0.6, 0.8], rtol=1e-6)  # phi = 1
    np.testing.assert_allclose(np.asarray(updates["clip_down"]), [0.0, 4.0], rtol=1e-6)  # phi = 4
    np.testing.assert_allclose(np.asarray(updates["tiny_r"]), [1e-4, 0.0])  # ||r|| <= eps: 1


@pytest.mark.parametrize(
    ("factory", "kwargs", "message"),
    [
        (gradtx.trace_with_lr, {"learning_rate": -0.1},
         "trace_with_lr: learning_rate must be >= 0, got -0.1"),
        (gradtx.trace_with_lr, {"learning_rate": 0.1, "decay": 1.5},
         "trace_with_lr: decay must be in [0.0, 1.0], got 1.5"),
        (gradtx.weight_decay_by_lr_ratio, {"rate": -1.0, "learning_rate": 0.1},
         "weight_decay_by_lr_ratio: rate must be >= 0, got -1.0"),
        (gradtx.weight_decay_by_lr_ratio,
         {"rate": 1.0, "learning_rate": 0.1, "initial_learning_rate": 0.0},
         "weight_decay_by_lr_ratio: initial_learning_rate must be > 0, got 0.0"),
        (gradtx.scale_by_lars_trust_ratio, {"coefficient": 0.0},
         "scale_by_lars_trust_ratio: coefficient must be > 0, got 0.0"),
        (gradtx.scale_by_lars_trust_ratio, {"weight_decay": -1e-4},
         "scale_by_lars_trust_ratio: weight_decay must be >= 0, got -0.0001"),
        (gradtx.scale_by_lamb_trust_ratio, {"gamma_l": 2.0, "gamma_u": 1.0},
         "scale_by_lamb_trust_ratio: gamma_l must be <= gamma_u, got gamma_l=2.0 and gamma_u=1.0"),
        (gradtx.scale_by_adam_eps_hat, {"b2": 1.0},
         "scale_by_adam_eps_hat: b2 must be in [0.0, 1.0), got 1.0"),
        (gradtx.scale_by_belief, {"eps": -1.0},
         "scale_by_belief: eps must be >= 0, got -1.0"),
    ],
)  # fmt: skip
def test_invalid_hyperparameters_raise(factory, kwargs, message):
    with pytest.raises(ValueError) as info:
        factory(**kwargs)
    assert str(info.value) == message


def test_trust_ratios_need_params():
    params = {"w": jnp.ones(2)}
    for tx in (gradtx.scale_by_lars_trust_ratio(), gradtx.scale_by_lamb_trust_ratio()):
        with pytest.raises(ValueError, match="needs the current parameters"):
            tx.update(params, tx.init(params))


def test_adabelief_state_layouts():
    params = mixed_params()
    assert isinstance(gradtx.scale_by_belief().init(params), gradtx.ScaleByBeliefState)
    ams = gradtx.scale_by_belief(amsgrad=True, nu_dtype=jnp.bfloat16).init(params)
    assert isinstance(ams, gradtx.ScaleByAmsgradState)
    assert all(x.dtype == jnp.bfloat16 for x in jax.tree.leaves(ams.nu_max))
