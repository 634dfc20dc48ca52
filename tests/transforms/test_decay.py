"""`weight_decay`: coupled and decoupled placement, schedules and masks, against Optax."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gradtx

from ..helpers import grad_sequence, kernel_mask, mixed_params, run
from ..optax_reference import compare_to_optax, with_modes


def _rate_schedule(count):
    return 0.05 / (1.0 + 0.1 * count)


MATCHES_OPTAX = [
    (
        # Before the preconditioner: L2 regularisation, rescaled by Adam.
        "coupled",
        lambda: gradtx.chain(
            gradtx.weight_decay(0.05), gradtx.scale_by_adam(), gradtx.scale_by_learning_rate(0.01)
        ),
        lambda: optax.chain(
            optax.add_decayed_weights(0.05),
            optax.scale_by_adam(),
            optax.scale_by_learning_rate(0.01),
        ),
    ),
    (
        # After it: decoupled weight decay, i.e. AdamW.
        "decoupled",
        lambda: gradtx.chain(
            gradtx.scale_by_adam(), gradtx.weight_decay(0.05), gradtx.scale_by_learning_rate(0.01)
        ),
        lambda: optax.adamw(0.01, weight_decay=0.05),
    ),
    (
        "schedule",
        lambda: gradtx.chain(gradtx.weight_decay(_rate_schedule), gradtx.scale(-0.1)),
        lambda: optax.chain(optax.add_decayed_weights(_rate_schedule), optax.scale(-0.1)),
    ),
]


@pytest.mark.parametrize(
    ("key", "ours", "reference", "jit"),
    with_modes(MATCHES_OPTAX, eager={"coupled", "schedule"}, jit={"decoupled"}),
)
def test_matches_optax(key, ours, reference, jit):
    compare_to_optax(
        ours(), reference(), jit=jit, reference_key=f"{__name__}:{key}", reference_jit=False
    )


def test_placement_matters():
    params = mixed_params()
    grads = grad_sequence(params, 5)
    coupled = gradtx.chain(gradtx.weight_decay(0.1), gradtx.scale_by_adam())
    decoupled = gradtx.chain(gradtx.scale_by_adam(), gradtx.weight_decay(0.1))
    a, _, _ = run(coupled, params, grads, jit=False)
    b, _, _ = run(decoupled, params, grads, jit=False)
    assert not np.allclose(a[-1]["dense"]["kernel"], b[-1]["dense"]["kernel"], rtol=1e-3)


def _prefix_mask(params):
    # A prefix of the params tree: one bool for each whole subtree.
    return {
        "dense": False,
        "layers": True,
        "pair": True,
        "empty": {},
        "none": None,
    }


def _prefix_expanded(params):
    return {
        "dense": {"kernel": False, "bias": False},
        "layers": [True, {"w": True, "frozen": None}],
        "pair": type(params["pair"])(a=True, b=(True, True)),
        "empty": {},
        "none": None,
    }


def _not_bias(params):
    tree = _prefix_expanded(params)
    tree["dense"] = {"kernel": True, "bias": False}
    return tree


@pytest.mark.parametrize(
    ("mask", "expected"),
    [
        (kernel_mask(mixed_params()), kernel_mask),
        (kernel_mask, kernel_mask),
        (_prefix_mask(mixed_params()), _prefix_expanded),
        ("!**/bias", _not_bias),
        (["dense/kernel", "layers/1/*", "pair/a", "pair/b/1"], kernel_mask),
    ],
    ids=["tree", "callable", "prefix_tree", "glob", "glob_list"],
)
def test_mask_matches_optax(mask, expected):
    ours = gradtx.chain(gradtx.weight_decay(0.1, mask=mask), gradtx.scale(-0.1))
    reference = optax.chain(
        optax.add_decayed_weights(0.1, mask=expected(mixed_params())), optax.scale(-0.1)
    )
    # Which leaves decay is settled at the first step; a few eager steps show it.
    compare_to_optax(ours, reference, steps=5, jit=False, reference_jit=False)


def test_masked_leaves_are_left_exactly_unchanged():
    params = {"w": jnp.full(2, 3.0), "b": jnp.full(2, 3.0)}
    grads = {"w": jnp.ones(2), "b": jnp.ones(2)}
    tx = gradtx.weight_decay(0.5, mask="w")
    updates, _ = tx.update(grads, tx.init(params), params)
    np.testing.assert_array_equal(updates["w"], np.full(2, 2.5))
    np.testing.assert_array_equal(updates["b"], grads["b"])


@pytest.mark.parametrize("step", ["init", "update"])
def test_a_pattern_that_matches_nothing_raises_at_init_with_the_available_paths(step):
    params = {"dense": {"kernel": jnp.ones(2), "bias": jnp.ones(2)}}
    tx = gradtx.weight_decay(0.1, mask="dense/kernal")
    error = r"^weight_decay: pattern 'dense/kernal' matches no parameter.*dense/kernel"
    if step == "init":
        with pytest.raises(ValueError, match=error):
            tx.init(params)
    else:  # a state from elsewhere (a checkpoint): update checks too
        state = gradtx.weight_decay(0.1).init(params)
        with pytest.raises(ValueError, match=error):
            tx.update(params, state, params)


def test_non_boolean_mask_leaves_raise_at_init():
    params = {"w": jnp.ones(2)}
    tx = gradtx.weight_decay(0.1, mask={"w": 1.0})
    with pytest.raises(ValueError, match="weight_decay: mask leaves must be booleans"):
        tx.init(params)


def test_needs_params_and_rejects_negative_rates():
    tx = gradtx.weight_decay(0.1)
    with pytest.raises(ValueError, match="weight_decay needs the current parameters"):
        tx.update({"w": jnp.ones(2)}, tx.init({"w": jnp.ones(2)}))
    with pytest.raises(ValueError, match=r"weight_decay: rate must be >= 0, got -0\.1"):
        gradtx.weight_decay(-0.1)


def test_state_layout_is_the_same_for_a_constant_and_a_schedule():
    params = mixed_params()
    assert jax.tree.structure(gradtx.weight_decay(0.1).init(params)) == jax.tree.structure(
        gradtx.weight_decay(_rate_schedule).init(params)
    )


def test_traced_rate_is_accepted_and_dtypes_are_kept():
    params = mixed_params(dtype=jnp.bfloat16)
    g = grad_sequence(params, 1)[0]

    def step(rate):
        tx = gradtx.weight_decay(rate)
        return tx.update(g, tx.init(params), params)[0]

    traced, eager = jax.jit(step)(0.3), step(0.3)
    for a, b, p in zip(
        jax.tree.leaves(traced), jax.tree.leaves(eager), jax.tree.leaves(params), strict=True
    ):
        assert a.dtype == b.dtype == p.dtype == jnp.bfloat16
        np.testing.assert_allclose(
            np.asarray(a, np.float32), np.asarray(b, np.float32), rtol=1e-2, atol=1e-2
        )
