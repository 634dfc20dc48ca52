"""Hardening (issue 10): hyperparameters stay scalars, state kinds are decided by configuration,
state layouts never depend on numbers, and `value=` reaches gradtx transformations inside
`optax.chain`."""

from __future__ import annotations

import inspect

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gradtx

from .helpers import mixed_params
from .optimizer_table import CASES, OptCase

# -- defect 2: array hyperparameters, update shapes, moment dtypes -----------------------------


def test_an_array_learning_rate_is_rejected_at_construction():
    with pytest.raises(ValueError, match=r"learning_rate must be a scalar .* shape \(3,\)"):
        gradtx.adam(jnp.array([0.1, 0.2, 0.3]))
    with pytest.raises(ValueError, match=r"scale_by_adam: b1 must be a scalar"):
        gradtx.scale_by_adam(b1=np.array([0.9, 0.8]))


def _takes(case: OptCase, name: str) -> bool:
    return name in inspect.signature(case.factory).parameters


LR_CASES = [c for c in CASES if "learning_rate" in c.kwargs and _takes(c, "learning_rate")]


@pytest.mark.parametrize("case", LR_CASES, ids=[c.name for c in LR_CASES])
def test_every_optimizer_rejects_an_array_learning_rate(case):
    with pytest.raises(ValueError, match=r"must be a scalar"):
        case.factory(**{**case.kwargs, "learning_rate": jnp.full((3,), 0.1)})


def test_a_schedule_returning_an_array_is_rejected_when_called():
    tx = gradtx.adam(lambda count: jnp.full((3,), 0.1))
    params = {"w": jnp.zeros(())}
    with pytest.raises(ValueError, match=r"a schedule must return a scalar, got shape \(3,\)"):
        tx.update(params, tx.init(params))


def test_apply_updates_refuses_an_update_of_another_shape():
    params = {"enc": {"w": jnp.zeros(())}, "b": jnp.zeros(2)}
    updates = {"enc": {"w": jnp.zeros(3)}, "b": jnp.zeros(2)}
    with pytest.raises(
        ValueError, match=r"apply_updates: the update at \['enc'\]\['w'\] has shape"
    ):
        gradtx.apply_updates(params, updates)
    with pytest.raises(ValueError, match=r"has shape \(3,\) but its parameter has shape \(\)"):
        jax.jit(gradtx.apply_updates)(params, updates)


MU_DTYPE_FACTORIES = [
    (name, getattr(gradtx, name))
    for name in sorted(dir(gradtx))
    if callable(getattr(gradtx, name))
    and not isinstance(getattr(gradtx, name), type)
    and "mu_dtype" in inspect.signature(getattr(gradtx, name)).parameters
]


@pytest.mark.parametrize(
    ("name", "factory"), MU_DTYPE_FACTORIES, ids=[n for n, _ in MU_DTYPE_FACTORIES]
)
def test_integer_moment_dtypes_are_rejected(name, factory):
    kwargs = (
        {"learning_rate": 1e-3} if "learning_rate" in inspect.signature(factory).parameters else {}
    )
    with pytest.raises(ValueError, match=r"mu_dtype must be a floating-point dtype.*got int8"):
        factory(**kwargs, mu_dtype=jnp.int8)


def test_integer_accumulator_dtypes_are_rejected():
    with pytest.raises(ValueError, match=r"trace: accumulator_dtype must be a floating-point"):
        gradtx.trace(0.9, accumulator_dtype=jnp.int32)
    with pytest.raises(ValueError, match=r"accumulate_k_steps: accumulator_dtype must be"):
        gradtx.accumulate_k_steps(gradtx.sgd(0.1), 2, accumulator_dtype=jnp.int8)
    with pytest.raises(ValueError, match=r"adam: scale_by_adam: nu_dtype must be"):
        gradtx.adam(1e-3, nu_dtype=jnp.uint8)


# -- defect 4: the configuration, not the state's type, picks the algorithm ----------------------


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


# -- defect 5: state layouts depend on options, never on numbers ---------------------------------


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


def _numeric_variants(case: OptCase):
    """`case.kwargs` with each float hyperparameter halved, and the learning rate as a schedule."""
    for key, value in case.kwargs.items():
        if isinstance(value, float) and not isinstance(value, bool):
            yield key, {**case.kwargs, key: value * 0.5}
    if isinstance(case.kwargs.get("learning_rate"), float):
        lr = case.kwargs["learning_rate"]
        yield "learning_rate=schedule", {**case.kwargs, "learning_rate": lambda t: lr / (1 + t)}


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_state_layout_does_not_depend_on_hyperparameter_values(case):
    params = mixed_params()
    base = jax.tree.structure(jax.eval_shape(case.make().init, params))
    for what, kwargs in _numeric_variants(case):
        try:
            tx = case.factory(**kwargs)
        except ValueError:  # e.g. halving a value that must stay above a bound
            continue
        layout = jax.tree.structure(jax.eval_shape(tx.init, params))
        assert layout == base, f"{case.name}: the state layout changes with {what}"


# -- defect 6: value= through optax.chain ------------------------------------------------------


LOSS_USERS = [
    ("eve", lambda: gradtx.eve(0.1)),
    ("reduce_on_plateau", lambda: gradtx.reduce_on_plateau(patience=1)),
    ("newbob", lambda: gradtx.newbob()),
]


@pytest.mark.parametrize(("name", "make"), LOSS_USERS, ids=[n for n, _ in LOSS_USERS])
def test_value_reaches_gradtx_inside_optax_chain_through_as_optax(name, make):
    params = {"w": jnp.ones(3)}
    grads = {"w": jnp.full(3, 0.5)}
    losses = [3.0, 2.0, 2.5, 2.6, 2.7]
    ours = gradtx.chain(gradtx.clip(1.0), make())
    theirs = optax.chain(optax.clip(1.0), gradtx.as_optax(make()))
    s_ours, s_theirs = ours.init(params), theirs.init(params)
    for loss in losses:
        value = jnp.asarray(loss)
        u_ours, s_ours = ours.update(grads, s_ours, params, value=value)
        u_theirs, s_theirs = theirs.update(grads, s_theirs, params, value=value)
        np.testing.assert_array_equal(u_ours["w"], u_theirs["w"])
    # without the adapter Optax drops `value`, and the transformation says what to do
    plain = optax.chain(optax.clip(1.0), make())
    with pytest.raises(ValueError, match=r"needs the monitored value.*gradtx.as_optax"):
        plain.update(grads, plain.init(params), params, value=jnp.asarray(1.0))
