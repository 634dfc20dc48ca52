"""RETURNN's custom rules (`normalize`, `scale_by_sign_agreement`, `scale_by_grad_variance`)
against NumPy transcriptions of `returnn/tf/updater.py` (reference sheet §3a)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradtx

from ..helpers import compare_to_numpy, mixed_params


def normalize_reference(eps=1e-12):
    def make():
        def ref(grads, params):
            del params
            return [g / np.sqrt(max(np.sum(g * g), eps)) for g in grads]

        return ref

    return make


def sign_agreement_reference(beta1=0.9, decrease_factor=0.1, stats=None):
    def make():
        slots: dict = {}

        def ref(grads, params):
            del params
            out = []
            for i, g in enumerate(grads):
                m = beta1 * slots.get(i, np.zeros_like(g)) + (1 - beta1) * g
                slots[i] = m
                agree = np.sign(g) == np.sign(m)
                if stats is not None:
                    stats["agree"] += int(agree.sum())
                    stats["disagree"] += int((~agree).sum())
                out.append(np.where(agree, g, decrease_factor * g))
            return out

        return ref

    return make


def grad_variance_reference(beta1=0.9, beta2=0.999, eps=1e-8, stats=None):
    def make():
        m_slots: dict = {}
        v_slots: dict = {}

        def ref(grads, params):
            del params
            out = []
            for i, g in enumerate(grads):
                m = beta1 * m_slots.get(i, np.zeros_like(g)) + (1 - beta1) * g
                var = (g - m) ** 2
                v = beta2 * v_slots.get(i, np.zeros_like(g)) + (1 - beta2) * var
                m_slots[i], v_slots[i] = m, v
                ratio = v / (var + eps)
                if stats is not None:
                    stats["scaled"] += int((ratio < 1).sum())
                    stats["kept"] += int((ratio >= 1).sum())
                out.append(g * np.minimum(ratio, 1.0))
            return out

        return ref

    return make


def test_normalize_matches_l2_normalize():
    compare_to_numpy(gradtx.normalize(), normalize_reference(), jit=False)


def test_normalize_of_zero_is_zero_and_eps_bounds_the_norm():
    updates, _ = gradtx.normalize().update({"w": jnp.zeros(3)}, gradtx.normalize().init(None))
    np.testing.assert_array_equal(np.asarray(updates["w"]), np.zeros(3))
    tx = gradtx.normalize(eps=1.0)
    updates, _ = tx.update({"w": jnp.array([0.3, 0.4])}, tx.init(None))
    np.testing.assert_allclose(np.asarray(updates["w"]), [0.3, 0.4])  # norm 0.5 < sqrt(eps)


@pytest.mark.parametrize(
    ("beta1", "factor", "jit"), [(0.9, 0.1, False), (0.5, 0.135, True)], ids=["eager", "jit"]
)
def test_sign_agreement_matches_neural_optimizer1(beta1, factor, jit):
    stats = {"agree": 0, "disagree": 0}
    compare_to_numpy(
        gradtx.scale_by_sign_agreement(beta1, factor),
        sign_agreement_reference(beta1, factor, stats),
        jit=jit,
    )
    assert stats["agree"] > 0 and stats["disagree"] > 0, stats


@pytest.mark.parametrize(
    ("args", "jit"), [((0.9, 0.999, 1e-8), False), ((0.8, 0.9, 1e-2), True)], ids=["eager", "jit"]
)
def test_grad_variance_matches_grad_variance_scaled_optimizer(args, jit):
    stats = {"scaled": 0, "kept": 0}
    compare_to_numpy(
        gradtx.scale_by_grad_variance(*args), grad_variance_reference(*args, stats=stats), jit=jit
    )
    assert stats["scaled"] > 0 and stats["kept"] > 0, stats


def test_grad_variance_with_zero_eps_keeps_a_gradient_equal_to_its_mean():
    # var = 0 and v = 0: RETURNN divides 0 by 0; the factor's limit 1 is used instead.
    tx = gradtx.scale_by_grad_variance(beta1=0.0, eps=0.0)
    updates, _ = tx.update({"w": jnp.array([2.0, -1.0])}, tx.init({"w": jnp.zeros(2)}))
    np.testing.assert_array_equal(np.asarray(updates["w"]), [2.0, -1.0])


def test_slots_are_named_and_dtypes_selectable():
    params = mixed_params()
    state = gradtx.scale_by_grad_variance(mu_dtype=jnp.bfloat16).init(params)
    assert sorted(state.slots) == ["m", "v"]
    assert all(x.dtype == jnp.bfloat16 for x in jax.tree.leaves(gradtx.tree.get(state, "m")))
    assert all(x.dtype == jnp.float32 for x in jax.tree.leaves(gradtx.tree.get(state, "v")))
    state = gradtx.scale_by_sign_agreement(mu_dtype=jnp.bfloat16).init(params)
    assert all(x.dtype == jnp.bfloat16 for x in jax.tree.leaves(gradtx.tree.get(state, "m")))


@pytest.mark.parametrize(
    ("factory", "kwargs", "message"),
    [
        (gradtx.normalize, {"eps": 0.0}, "normalize: eps must be > 0, got 0.0"),
        (
            gradtx.scale_by_sign_agreement,
            {"beta1": 1.0},
            "scale_by_sign_agreement: beta1 must be in [0.0, 1.0), got 1.0",
        ),
        (
            gradtx.scale_by_sign_agreement,
            {"decrease_factor": -0.1},
            "scale_by_sign_agreement: decrease_factor must be >= 0, got -0.1",
        ),
        (
            gradtx.scale_by_grad_variance,
            {"beta2": -0.1},
            "scale_by_grad_variance: beta2 must be in [0.0, 1.0), got -0.1",
        ),
        (
            gradtx.scale_by_grad_variance,
            {"eps": -1.0},
            "scale_by_grad_variance: eps must be >= 0, got -1.0",
        ),
    ],
)
def test_invalid_hyperparameters_raise(factory, kwargs, message):
    with pytest.raises(ValueError) as info:
        factory(**kwargs)
    assert str(info.value) == message
