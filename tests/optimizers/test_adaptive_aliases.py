"""adagrad, adadelta, rmsprop and adafactor: against Optax, against their chains, validation."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gradtx

from ..helpers import grad_sequence, mixed_params
from ..optax_reference import compare_to_optax, with_modes


def _lr(count):
    """A cosine decay from 0.02 over 100 steps (jit-compatible)."""
    return 0.01 * (1.0 + jnp.cos(jnp.pi * jnp.minimum(count, 100) / 100.0))


def _decay(count):
    return 0.01 / (1.0 + 0.05 * count)


def _params_with_a_bias_mask(params):
    return jax.tree.map(lambda _: True, params) | {"dense": {"kernel": True, "bias": False}}


ADAFACTOR_ALL_OPTIONS = {
    "min_dim_size_to_factor": 2,
    "decay_offset": 2,
    "momentum": 0.9,
    "weight_decay_rate": _decay,
    "weight_decay_mask": _params_with_a_bias_mask,
}
ADAFACTOR_PLAIN = {
    "multiply_by_parameter_scale": False,
    "clipping_threshold": None,
    "factored": False,
}

# (id, ours, Optax's): the same updates over 100 steps.
MATCHES_OPTAX = [
    ("adagrad", lambda: gradtx.adagrad(0.1), lambda: optax.adagrad(0.1)),
    (
        "adagrad_schedule",
        lambda: gradtx.adagrad(_lr, 0.0, 1e-9),
        lambda: optax.adagrad(_lr, 0.0, 1e-9),
    ),
    (
        "adadelta",
        lambda: gradtx.adadelta(0.5),
        lambda: optax.adadelta(0.5),
    ),
    (
        "adadelta_decay_schedule",
        lambda: gradtx.adadelta(_lr, 0.95, 1e-5, weight_decay=_decay),
        lambda: optax.adadelta(_lr, 0.95, 1e-5, weight_decay=_decay),
    ),
    ("rmsprop", lambda: gradtx.rmsprop(0.01), lambda: optax.rmsprop(0.01)),
    (
        "rmsprop_momentum",
        lambda: gradtx.rmsprop(_lr, 0.9, 1e-6, 0.1, False, momentum=0.9, bias_correction=True),
        lambda: optax.rmsprop(_lr, 0.9, 1e-6, 0.1, False, momentum=0.9, bias_correction=True),
    ),
    (
        # nnabla's RMSpropGraves, as documented in rmsprop's docstring.
        "rmsprop_centered_nesterov",
        lambda: gradtx.rmsprop(1e-3, 0.95, 1e-4, centered=True, momentum=0.9, nesterov=True),
        lambda: optax.rmsprop(1e-3, 0.95, 1e-4, centered=True, momentum=0.9, nesterov=True),
    ),
    ("adafactor", lambda: gradtx.adafactor(), lambda: optax.adafactor()),
    (
        "adafactor_factored_all_options",
        lambda: gradtx.adafactor(_lr, **ADAFACTOR_ALL_OPTIONS),
        lambda: optax.adafactor(_lr, **ADAFACTOR_ALL_OPTIONS),
    ),
    (
        "adafactor_plain",
        lambda: gradtx.adafactor(0.05, **ADAFACTOR_PLAIN),
        lambda: optax.adafactor(0.05, **ADAFACTOR_PLAIN),
    ),
]


@pytest.mark.across_versions
@pytest.mark.parametrize(
    ("key", "ours", "reference", "jit"),
    with_modes(
        MATCHES_OPTAX,
        eager={"adagrad", "adadelta", "rmsprop", "adafactor"},
        jit={
            "adagrad_schedule",
            "adadelta_decay_schedule",
            "rmsprop_momentum",
            "rmsprop_centered_nesterov",
            "adafactor_factored_all_options",
            "adafactor_plain",
        },
    ),
)
def test_matches_optax(key, ours, reference, jit):
    compare_to_optax(
        ours(), reference(), jit=jit, reference_key=f"{__name__}:{key}", reference_jit=False
    )


def test_adadelta_without_learning_rate_is_the_paper_step_and_descends():
    # Optax 0.2.8's adadelta() leaves out the sign flip with the learning rate (it ascends);
    # without a learning rate ours is the paper's step, Optax's adadelta(1.0).
    mask = _params_with_a_bias_mask
    compare_to_optax(
        gradtx.adadelta(weight_decay=0.01, weight_decay_mask=mask),
        optax.adadelta(1.0, weight_decay=0.01, weight_decay_mask=mask),
        steps=5,
        jit=False,
        reference_jit=False,
    )
    params = {"w": jnp.array([1.0, -2.0])}
    tx = gradtx.adadelta()
    updates, _ = tx.update(params, tx.init(params), params)  # gradient of |w|^2 / 2
    assert bool(jnp.all(jnp.sign(updates["w"]) == -jnp.sign(params["w"])))


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: gradtx.adagrad(-0.1), "adagrad: learning_rate must be >= 0, got -0.1"),
        (
            # Raised by the primitive, named by the alias.
            lambda: gradtx.adagrad(0.1, initial_accumulator_value=-1.0),
            "adagrad: scale_by_rss: initial_accumulator_value must be >= 0, got -1.0",
        ),
        (
            lambda: gradtx.adagrad(0.1, eps=-1e-7),
            "adagrad: scale_by_rss: eps must be >= 0, got -1e-07",
        ),
        (lambda: gradtx.adadelta(-1.0), "adadelta: learning_rate must be >= 0, got -1.0"),
        (lambda: gradtx.adadelta(rho=1.0), r"adadelta: rho must be in \[0.0, 1.0\), got 1.0"),
        (lambda: gradtx.adadelta(eps=-1.0), "adadelta: eps must be >= 0, got -1.0"),
        (
            lambda: gradtx.adadelta(weight_decay=-0.5),
            "adadelta: weight_decay must be >= 0, got -0.5",
        ),
        (lambda: gradtx.rmsprop(-0.01), "rmsprop: learning_rate must be >= 0, got -0.01"),
        (lambda: gradtx.rmsprop(0.01, decay=1.2), r"rmsprop: decay must be in \[0.0, 1.0\)"),
        (lambda: gradtx.rmsprop(0.01, eps=-1), "rmsprop: eps must be >= 0, got -1"),
        (
            lambda: gradtx.rmsprop(0.01, initial_scale=-0.1),
            "rmsprop: initial_scale must be >= 0, got -0.1",
        ),
        (
            lambda: gradtx.rmsprop(0.01, momentum=1.5),
            r"rmsprop: momentum must be in \[0.0, 1.0\], got 1.5",
        ),
        (
            lambda: gradtx.rmsprop(0.01, nesterov=True),
            "rmsprop: nesterov=True needs a momentum value",
        ),
        (lambda: gradtx.adafactor(-1.0), "adafactor: learning_rate must be >= 0, got -1.0"),
        (
            lambda: gradtx.adafactor(min_dim_size_to_factor=1.5),
            "adafactor: min_dim_size_to_factor must be an integer, got 1.5",
        ),
        (lambda: gradtx.adafactor(decay_rate=-0.8), "adafactor: decay_rate must be >= 0"),
        (lambda: gradtx.adafactor(decay_offset=-3), "adafactor: decay_offset must be >= 0"),
        (
            lambda: gradtx.adafactor(clipping_threshold=0.0),
            "adafactor: clipping_threshold must be > 0, got 0.0",
        ),
        (
            lambda: gradtx.adafactor(momentum=-0.1),
            r"adafactor: momentum must be in \[0.0, 1.0\], got -0.1",
        ),
        (
            lambda: gradtx.adafactor(weight_decay_rate=-1e-3),
            "adafactor: weight_decay_rate must be >= 0, got -0.001",
        ),
        (lambda: gradtx.adafactor(eps=-1e-30), "adafactor: eps must be >= 0, got -1e-30"),
    ],
)
def test_invalid_hyperparameters_raise_naming_argument_and_value(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_traced_hyperparameters_are_accepted_under_jit():
    params = mixed_params()
    grads = grad_sequence(params, 2)

    def two_steps(lr, decay, momentum):
        out = []
        for tx in (
            gradtx.adagrad(lr),
            gradtx.adadelta(lr, decay, weight_decay=decay * 0.01),
            gradtx.rmsprop(lr, decay, momentum=momentum, centered=True),
            gradtx.adafactor(lr, momentum=momentum, weight_decay_rate=lr),
        ):
            state = tx.init(params)
            _, state = tx.update(grads[0], state, params)
            out.append(tx.update(grads[1], state, params)[0])
        return out

    traced = jax.jit(two_steps)(0.01, 0.9, 0.5)
    eager = two_steps(0.01, 0.9, 0.5)
    for a, b in zip(jax.tree.leaves(traced), jax.tree.leaves(eager), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-8)
