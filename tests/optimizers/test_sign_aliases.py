"""The sign-family aliases (`sign_sgd`, `lion`): against Optax, against their hand-written
chains, validation, traced hyperparameters and low-precision state."""

from __future__ import annotations

import inspect

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gradtx

from ..helpers import grad_sequence, mixed_params
from ..optax_reference import compare_to_optax

LR = lambda count: 3e-3 / (1.0 + 0.01 * count)
WD = lambda count: 0.05 * 0.99**count
MASK = lambda params: jax.tree.map(lambda p: p.ndim > 1, params)


@pytest.mark.parametrize(
    ("ours", "reference"),
    [(gradtx.sign_sgd, optax.sign_sgd), (gradtx.lion, optax.lion)],
    ids=["sign_sgd", "lion"],
)
def test_signature_and_defaults_match_optax(ours, reference):
    theirs = inspect.signature(reference).parameters.values()
    mine = inspect.signature(ours).parameters.values()
    assert [(p.name, p.kind, p.default) for p in mine] == [
        (p.name, p.kind, p.default) for p in theirs
    ]


@pytest.mark.across_versions
@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
def test_sign_sgd_with_schedule_matches_optax(jit):
    compare_to_optax(
        gradtx.sign_sgd(LR),
        optax.sign_sgd(LR),
        jit=jit,
        atol=1e-9,
        reference_key=f"{__name__}:sign_sgd",
    )


@pytest.mark.across_versions
@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
def test_lion_with_schedules_and_custom_hyperparameters_matches_optax(jit):
    # Positional, in Optax's order: b1, b2, mu_dtype, weight_decay, mask. A float32 momentum:
    # XLA rounds bf16 arithmetic differently eagerly and fused, and a sign amplifies any
    # rounding difference near 0 to 2 lr (bf16 momentum is compared under jit in test_sign.py).
    args = (0.8, 0.95, jnp.float32, WD, MASK)
    compare_to_optax(
        gradtx.lion(LR, *args),
        optax.lion(LR, *args),
        jit=jit,
        atol=1e-9,
        reference_key=f"{__name__}:lion",
    )


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (
            lambda: gradtx.sign_sgd(-1.0),
            "sign_sgd: scale_by_learning_rate: learning_rate must be >= 0, got -1.0",
        ),
        (
            lambda: gradtx.lion(-1e-4),
            "lion: scale_by_learning_rate: learning_rate must be >= 0, got -0.0001",
        ),
        (
            lambda: gradtx.lion(1e-4, b1=1.5),
            "lion: scale_by_lion: b1 must be in [0.0, 1.0), got 1.5",
        ),
        (
            lambda: gradtx.lion(1e-4, b2=-0.1),
            "lion: scale_by_lion: b2 must be in [0.0, 1.0), got -0.1",
        ),
        (
            # The alias's argument is named first; the primitive's message follows.
            lambda: gradtx.lion(1e-4, weight_decay=-1.0),
            "lion: weight_decay must be >= 0, got -1.0"
            " (from weight_decay: rate must be >= 0, got -1.0)",
        ),
    ],
)
def test_invalid_hyperparameters_raise_at_construction(make, message):
    with pytest.raises(ValueError) as info:
        make()
    assert str(info.value) == message


def test_traced_hyperparameters_are_accepted_inside_jit():
    params = mixed_params()
    grads = grad_sequence(params, 2)

    def two_steps(lr, b1, b2, wd):
        out = []
        for tx in (gradtx.sign_sgd(lr), gradtx.lion(lr, b1, b2, weight_decay=wd)):
            s = tx.init(params)
            for g in grads:
                u, s = tx.update(g, s, params)
            out.append(u)
        return out

    values = (1e-3, 0.7, 0.9, 0.1)
    traced = jax.jit(two_steps)(*(jnp.float32(v) for v in values))
    concrete = two_steps(*values)
    for a, b in zip(jax.tree.leaves(traced), jax.tree.leaves(concrete), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6)


def test_lion_bf16_momentum_stays_bf16_and_still_converges():
    rng = np.random.default_rng(0)
    params = mixed_params(seed=2)  # float32
    curv = jax.tree.map(lambda x: jnp.asarray(rng.uniform(0.5, 2.0, x.shape), x.dtype), params)
    target = jax.tree.map(lambda x: jnp.asarray(rng.normal(size=x.shape), x.dtype), params)

    def loss(p):
        terms = jax.tree.map(lambda x, a, b: 0.5 * jnp.sum(a * (x - b) ** 2), p, curv, target)
        return sum(jax.tree.leaves(terms))

    # Sign steps have a fixed size, so the learning rate decays to let the iterates settle.
    tx = gradtx.lion(lambda t: 0.05 * 0.995**t, mu_dtype=jnp.bfloat16, weight_decay=0.0)

    @jax.jit
    def minimise(params):
        def body(_, carry):
            p, s = carry
            u, s = tx.update(jax.grad(loss)(p), s, p)
            return gradtx.apply_updates(p, u), s

        p, s = jax.lax.fori_loop(0, 500, body, (params, tx.init(params)))
        return loss(p), s

    final, state = minimise(params)
    assert {x.dtype for x in jax.tree.leaves(state[0].mu)} == {jnp.dtype(jnp.bfloat16)}
    assert float(final) < 1e-2 * float(loss(params)), float(final)
