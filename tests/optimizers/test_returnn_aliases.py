"""RETURNN's optimizers as aliases: each against a NumPy transcription of its rule (reference
sheet §3a, with learning-rate schedules), and each equal to its documented chain."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradtx

from ..helpers import compare_to_numpy, mixed_params
from ..transforms.test_returnn import (
    grad_variance_reference,
    normalize_reference,
    sign_agreement_reference,
)

LR = lambda count: 0.05 / (1.0 + 0.02 * count)


def with_learning_rate(make_direction, lr):
    """A reference stepping by -lr_t times the direction of `make_direction`."""

    def make():
        direction, counter = make_direction(), {"t": 0}

        def ref(grads, params):
            eta = lr(counter["t"]) if callable(lr) else lr
            counter["t"] += 1
            return [-eta * d for d in direction(grads, params)]

        return ref

    return make


def nadam_reference(lr, b1=0.9, b2=0.999, eps=1e-8):
    """TF1 contrib's NadamOptimizer (RETURNN's): lr_t = lr sqrt(bc2) / bc1."""

    def make():
        state = {"t": 0, "m": None, "v": None}

        def ref(grads, params):
            del params
            eta = lr(state["t"]) if callable(lr) else lr
            state["t"] += 1
            t = state["t"]
            if state["m"] is None:
                state["m"] = [np.zeros_like(g) for g in grads]
                state["v"] = [np.zeros_like(g) for g in grads]
            lr_t = eta * np.sqrt(1 - b2**t) / (1 - b1**t)
            out = []
            for i, g in enumerate(grads):
                m = b1 * state["m"][i] + (1 - b1) * g
                v = b2 * state["v"][i] + (1 - b2) * g * g
                state["m"][i], state["v"][i] = m, v
                out.append(-lr_t * (b1 * m + (1 - b1) * g) / (np.sqrt(v) + eps))
            return out

        return ref

    return make


def amsgrad_reference(lr, decay=False, b1=0.9, b2=0.99, eps=0.0):
    """RETURNN's AMSGradOptimizer: t += 1 (float); lr_t = lr / sqrt(t) with decay."""

    def make():
        state = {"t": 0.0, "m": None, "v": None, "v_hat": None}

        def ref(grads, params):
            del params
            eta = lr(int(state["t"])) if callable(lr) else lr
            state["t"] += 1.0
            lr_t = eta / np.sqrt(state["t"]) if decay else eta
            if state["m"] is None:
                state["m"] = [np.zeros_like(g) for g in grads]
                state["v"] = [np.zeros_like(g) for g in grads]
                state["v_hat"] = [np.zeros_like(g) for g in grads]
            out = []
            for i, g in enumerate(grads):
                m = b1 * state["m"][i] + (1 - b1) * g
                v = b2 * state["v"][i] + (1 - b2) * g * g
                v_hat = np.maximum(state["v_hat"][i], v)
                state["m"][i], state["v"][i], state["v_hat"][i] = m, v, v_hat
                out.append(-lr_t * m / (eps + np.sqrt(v_hat)))
            return out

        return ref

    return make


# (id, ours, reference factory, jit).
CASES = [
    (
        "normalized_sgd",
        lambda: gradtx.normalized_sgd(LR),
        lambda: with_learning_rate(normalize_reference(), LR),
        True,
    ),
    (
        "neural_optimizer1",
        lambda: gradtx.neural_optimizer1(LR, 0.8, 0.2),
        lambda: with_learning_rate(sign_agreement_reference(0.8, 0.2), LR),
        True,
    ),
    (
        "grad_variance_scaled",
        lambda: gradtx.grad_variance_scaled(LR, 0.8, 0.9, 1e-3),
        lambda: with_learning_rate(grad_variance_reference(0.8, 0.9, 1e-3), LR),
        True,
    ),
    ("returnn.nadam", lambda: gradtx.returnn.nadam(0.01), lambda: nadam_reference(0.01), True),
    (
        "nadam_returnn_schedule_custom",
        lambda: gradtx.returnn.nadam(LR, 0.8, 0.99, 1e-3),
        lambda: nadam_reference(LR, 0.8, 0.99, 1e-3),
        True,
    ),
    (
        "returnn.amsgrad",
        lambda: gradtx.returnn.amsgrad(0.01),
        lambda: amsgrad_reference(0.01),
        True,
    ),
    (
        "amsgrad_returnn_decay_schedule_custom",
        lambda: gradtx.returnn.amsgrad(LR, True, 0.8, 0.9, 1e-3),
        lambda: amsgrad_reference(LR, True, 0.8, 0.9, 1e-3),
        True,
    ),
]


@pytest.mark.across_versions
@pytest.mark.parametrize(("ours", "make_ref", "jit"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])  # fmt: skip
def test_matches_the_returnn_rule(ours, make_ref, jit):
    compare_to_numpy(ours(), make_ref(), jit=jit)


def test_nadam_returnn_is_not_dozat_nadam():
    # Guards the reference above: the TF1 contrib form differs from gradtx.nadam (Dozat's).
    with pytest.raises(AssertionError):
        compare_to_numpy(gradtx.nadam(0.01), nadam_reference(0.01), steps=3)


def test_amsgrad_returnn_with_zero_eps_and_zero_gradients_does_not_divide_by_zero():
    tx = gradtx.returnn.amsgrad(0.1)
    params = {"w": jnp.zeros(3)}
    state = tx.init(params)
    for g in ([0.0, 1.0, 0.0], [0.0, -1.0, 2.0]):
        updates, state = tx.update({"w": jnp.array(g)}, state)
        assert bool(jnp.all(jnp.isfinite(updates["w"])))
    assert float(updates["w"][0]) == 0.0


def test_amsgrad_returnn_state_layout_does_not_depend_on_decay():
    params = mixed_params()
    a = gradtx.returnn.amsgrad(1e-3, decay=False).init(params)
    b = gradtx.returnn.amsgrad(1e-3, decay=True).init(params)
    assert jax.tree.structure(a) == jax.tree.structure(b)
    with pytest.raises(ValueError) as info:
        gradtx.returnn.amsgrad(1e-3, decay=0.5)  # type: ignore[arg-type]
    assert str(info.value) == "returnn.amsgrad: decay must be True or False, got 0.5"


@pytest.mark.parametrize(
    "name",
    [
        "returnn.nadam",
        "returnn.amsgrad",
        "normalized_sgd",
        "neural_optimizer1",
        "grad_variance_scaled",
    ],
)
def test_construction_errors_name_the_alias(name):
    factory = gradtx
    for part in name.split("."):
        factory = getattr(factory, part)
    with pytest.raises(ValueError) as info:
        factory(-1.0)
    assert str(info.value).startswith(f"{name}: "), str(info.value)
    assert "learning_rate must be >= 0, got -1.0" in str(info.value)
    with pytest.raises(ValueError) as info:
        gradtx.grad_variance_scaled(0.1, beta1=1.0)
    assert str(info.value) == (
        "grad_variance_scaled: scale_by_grad_variance: beta1 must be in [0.0, 1.0), got 1.0"
    )
