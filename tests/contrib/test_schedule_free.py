"""Schedule-free optimisation (`schedule_free` around a base optimizer, `schedule_free_adamw`,
`schedule_free_sgd`) against Optax 0.2.8's `optax.contrib`: the evaluation params, the
parameters each update needs, and validation.

Every alias runs against Optax eagerly and under jit (`with_modes`); variants run under jit.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import optax.contrib as oc
import pytest

import gradtx
from gradtx import contrib as gc

from ..helpers import grad_sequence, mixed_params
from ..optax_reference import compare_to_optax, with_modes
from .common import assert_needs_params, described


def _warmup(t):
    return jnp.minimum(1.0, (t + 1.0) / 10.0)


# A looser absolute tolerance where Optax's own eager and jitted runs differ (measured on these
# cases, beyond rtol 1e-5): updates that are differences of parameter-sized values carry the
# rounding of |params| (y_{t+1} - y_t with |y| up to ~10 at a learning rate of 1: 1.9e-6).
_SF_ATOL = 2.5e-6

CASES = [
    # id, ours, Optax, atol
    (
        "schedule_free",
        lambda: gc.schedule_free(gradtx.adam(_warmup, b1=0.0), _warmup, b1=0.95),
        lambda: oc.schedule_free(optax.adam(_warmup, b1=0.0), _warmup, b1=0.95),
        _SF_ATOL,
    ),
    (
        "schedule_free_adamw",
        lambda: gc.schedule_free_adamw(1.0, warmup_steps=10, weight_decay=1e-2),
        lambda: oc.schedule_free_adamw(1.0, warmup_steps=10, weight_decay=1e-2),
        _SF_ATOL,
    ),
    (
        "schedule_free_sgd",
        lambda: gc.schedule_free_sgd(warmup_steps=10, weight_decay=1e-3, weight_lr_power=1.0),
        lambda: oc.schedule_free_sgd(warmup_steps=10, weight_decay=1e-3, weight_lr_power=1.0),
        _SF_ATOL,
    ),
]

# Each alias once eagerly (`schedule_free` runs eagerly inside its two aliases).
EAGER = {"schedule_free_adamw", "schedule_free_sgd"}


@pytest.mark.across_versions
@pytest.mark.parametrize(("name", "ours", "ref", "atol", "jit"), with_modes(CASES, EAGER))
def test_matches_optax(name, ours, ref, atol, jit):
    compare_to_optax(ours(), ref(), jit=jit, atol=atol, reference_key=f"{__name__}:{name}")


SAME_SIGNATURE = [
    (gc.schedule_free, oc.schedule_free),
    (gc.schedule_free_adamw, oc.schedule_free_adamw),
    (gc.schedule_free_sgd, oc.schedule_free_sgd),
    (gc.schedule_free_eval_params, oc.schedule_free_eval_params),
]


@pytest.mark.parametrize(("ours", "ref"), SAME_SIGNATURE, ids=lambda f: f.__name__)
def test_optax_names_argument_names_and_defaults(ours, ref):
    assert described(ours) == described(ref)


# -- the evaluation params ----------------------------------------------------------------------


def _run(tx, params, grads):
    @jax.jit
    def go(params, stacked):
        def body(carry, g):
            p, s = carry
            u, s = tx.update(g, s, p)
            return (gradtx.apply_updates(p, u), s), None

        return jax.lax.scan(body, (params, tx.init(params)), stacked)[0]

    return go(params, jax.tree.map(lambda *xs: jnp.stack(xs), *grads))


def test_schedule_free_eval_params_match_optax():
    params = mixed_params()
    grads = grad_sequence(params, 100)
    p, s = _run(gc.schedule_free_adamw(0.5, warmup_steps=5), params, grads)
    p_ref, s_ref = _run(oc.schedule_free_adamw(0.5, warmup_steps=5), params, grads)
    ours = gc.schedule_free_eval_params(s, p)
    expected = oc.schedule_free_eval_params(s_ref, p_ref)
    for a, b in zip(jax.tree.leaves(ours), jax.tree.leaves(expected), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    # The evaluation point differs from the training point (it is the average x, not y).
    assert not np.allclose(jax.tree.leaves(ours)[0], jax.tree.leaves(p)[0])
    # A state holding the schedule-free state (here a chain) works too.
    chained = gc.schedule_free_eval_params((gradtx.EmptyState(), s), p)
    for a, b in zip(jax.tree.leaves(chained), jax.tree.leaves(ours), strict=True):
        np.testing.assert_array_equal(a, b)


def test_schedule_free_eval_params_needs_a_schedule_free_state():
    params = {"w": jnp.ones(2)}
    with pytest.raises(ValueError, match="schedule_free_eval_params: state must be"):
        gc.schedule_free_eval_params(gradtx.adam(0.1).init(params), params)


@pytest.mark.parametrize(
    ("make", "who"),
    [
        (lambda: gc.schedule_free_sgd(), "schedule_free"),
    ],
)
def test_needs_params(make, who):
    assert_needs_params(make, who)


# -- invalid hyperparameters raise at construction, naming the function, argument and value --

BAD = [
    (lambda: gc.schedule_free_adamw(b1=0.0), r"b1 must be in \(0.0, 1.0\], got 0.0"),
    (lambda: gc.schedule_free_adamw(b2=1.0), r"schedule_free_adamw: b2 must be in \[0.0, 1.0\)"),
    (lambda: gc.schedule_free_sgd(learning_rate=-1.0), "learning_rate must be .*>= 0, got -1.0"),
    (lambda: gc.schedule_free_sgd(warmup_steps=0), "warmup_steps must be >= 1, got 0"),
    # a schedule takes no warm-up of warmup_steps (a schedule without one is accepted)
    (
        lambda: gc.schedule_free_adamw(gradtx.schedules.constant(0.1), warmup_steps=5),
        "warmup_steps ramps up to a number learning_rate, got a schedule",
    ),
    (
        lambda: gc.schedule_free(gradtx.sgd(0.1), 0.1, weight_lr_power=-2.0),
        "weight_lr_power must be .*>= 0, got -2.0",
    ),
]


@pytest.mark.parametrize(("make", "message"), BAD, ids=range(len(BAD)))
def test_invalid_hyperparameters_raise_at_construction(make, message):
    with pytest.raises(ValueError, match=message):
        make()


# Schedule-free and Mechanic both wrap a base optimizer; one test names a factory for either.
def test_a_factory_instead_of_a_base_optimizer_is_named():
    with pytest.raises(
        TypeError, match=r"schedule_free: base_optimizer .* \(did you pass a factory"
    ):
        gc.schedule_free(gradtx.sgd, 0.1)
    with pytest.raises(TypeError, match="mechanize: base_optimizer must be a GradientTrans"):
        gc.mechanize(None)
