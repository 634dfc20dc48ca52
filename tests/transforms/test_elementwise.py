"""`elementwise`: custom optimizers from a per-leaf rule with named slots."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradtx

from ..helpers import compare_to_numpy, grad_sequence, mixed_params


def sign_momentum_rule(g, m, t):
    """The docstring's example: a momentum of gradient signs."""
    del t
    m = 0.9 * m + 0.1 * jnp.sign(g)
    return m, m


def test_the_docstring_optimizer_matches_numpy():
    def make():
        slots: dict = {}

        def ref(grads, params):
            del params
            out = []
            for i, g in enumerate(grads):
                slots[i] = 0.9 * slots.get(i, np.zeros_like(g)) + 0.1 * np.sign(g)
                out.append(-0.1 * slots[i])
            return out

        return ref

    tx = gradtx.chain(
        gradtx.elementwise(sign_momentum_rule, slots={"m": 0.0}), gradtx.scale_by_learning_rate(0.1)
    )
    compare_to_numpy(tx, make, jit=True)


def test_two_slots_params_initial_values_and_the_step_number():
    # A made-up rule touching everything: initial values, the parameter, the step t (from 1),
    # a per-leaf reduction and the slot order.
    def rule(g, w, a, b, t):
        tf = t.astype(jnp.float32)
        a = 0.5 * a + g * tf / 100.0
        b = 0.5 * b + jnp.mean(g)
        return a / (1.0 + jnp.abs(b)) + 0.01 * w, a, b

    def make():
        state = {"t": 0, "a": None, "b": None}

        def ref(grads, params):
            state["t"] += 1
            if state["a"] is None:
                state["a"] = [np.full_like(g, 2.0) for g in grads]
                state["b"] = [np.full_like(g, -1.0) for g in grads]
            out = []
            for i, (g, w) in enumerate(zip(grads, params, strict=True)):
                state["a"][i] = 0.5 * state["a"][i] + g * state["t"] / 100.0
                state["b"][i] = 0.5 * state["b"][i] + np.mean(g)
                out.append(state["a"][i] / (1.0 + np.abs(state["b"][i])) + 0.01 * w)
            return out

        return ref

    tx = gradtx.elementwise(rule, {"a": 2.0, "b": -1.0}, uses_params=True, name="my_rule")
    compare_to_numpy(tx, make, jit=True)


def test_state_slots_are_readable_by_name_and_keep_their_dtypes():
    params = mixed_params(dtype=jnp.bfloat16)
    tx = gradtx.elementwise(
        lambda g, m, v, t: (g, m + g, v + g * g),
        {"m": 0.0, "v": 1.0},
        slot_dtype={"v": jnp.float32},
    )
    state = tx.init(params)
    assert isinstance(state, gradtx.ElementwiseState)
    m, v = gradtx.tree.get(state, "m"), gradtx.tree.get(state, "v")
    assert all(x.dtype == jnp.bfloat16 for x in jax.tree.leaves(m))
    assert all(x.dtype == jnp.float32 and bool(jnp.all(x == 1.0)) for x in jax.tree.leaves(v))
    g = grad_sequence(params, 1)[0]
    updates, state = jax.jit(tx.update)(g, state)
    assert int(state.count) == 1
    assert [x.dtype for x in jax.tree.leaves(updates)] == [x.dtype for x in jax.tree.leaves(g)]
    assert all(x.dtype == jnp.float32 for x in jax.tree.leaves(gradtx.tree.get(state, "v")))


def test_no_slots_and_a_bare_update():
    tx = gradtx.elementwise(lambda g, t: 2.0 * g)
    params = {"w": jnp.ones(3), "b": None}
    updates, state = tx.update({"w": jnp.arange(3.0), "b": None}, tx.init(params))
    np.testing.assert_array_equal(np.asarray(updates["w"]), [0.0, 2.0, 4.0])
    assert updates["b"] is None and state.slots == {}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"rule": 3}, "elementwise: rule must be a function rule(g, *slots, t) -> "
         "(update, *new_slots), got int"),
        ({"slots": [0.0]}, "elementwise: slots must be a dict of slot name -> initial value "
         "(e.g. {'m': 0.0}), got list"),
        ({"slots": {"1m": 0.0}}, "elementwise: slot names must be Python identifiers, got '1m'"),
        ({"slots": {"count": 0.0}}, "elementwise: the slot name 'count' is taken by the step "
         "counter; pick another name"),
        ({"slots": {"m": np.zeros(2)}}, "elementwise: the initial value of slot 'm' must be a "
         "real scalar, got array([0., 0.])"),
        ({"slots": {"m": 0.0}, "slot_dtype": {"v": jnp.float32}}, "elementwise: slot_dtype "
         "names unknown slots ['v']; the slots are ['m']"),
        ({"name": ""}, "elementwise: name must be a non-empty string, got ''"),
    ],
)  # fmt: skip
def test_invalid_arguments_raise(kwargs, message):
    args = {"rule": lambda g, t: g, **kwargs}
    with pytest.raises(ValueError) as info:
        gradtx.elementwise(**args)
    assert str(info.value) == message


def test_a_rule_returning_the_wrong_things_raises_at_trace_time():
    params = {"w": jnp.ones((2, 3))}
    wrong_count = gradtx.elementwise(lambda g, m, t: g, {"m": 0.0}, name="mine")
    with pytest.raises(ValueError) as info:
        wrong_count.update(params, wrong_count.init(params))
    assert str(info.value) == "mine: the rule must return (update, new m), got a single array"
    wrong_shape = gradtx.elementwise(lambda g, m, t: (g, jnp.sum(m)), {"m": 0.0}, name="mine")
    with pytest.raises(ValueError) as info:
        jax.jit(wrong_shape.update)(params, wrong_shape.init(params))
    assert str(info.value) == (
        "mine: the rule returned m of shape () for a leaf of shape (2, 3); it must keep the "
        "leaf's shape"
    )


def test_uses_params_needs_params_and_the_state_must_match():
    tx = gradtx.elementwise(lambda g, w, t: g + w, uses_params=True, name="decayed")
    params = {"w": jnp.ones(2)}
    with pytest.raises(ValueError, match="decayed needs the current parameters"):
        tx.update(params, tx.init(params))
    other = gradtx.elementwise(lambda g, m, t: (g, m), {"m": 0.0})
    with pytest.raises(ValueError) as info:
        tx.update(params, other.init(params), params)
    assert str(info.value).startswith("decayed: expected an ElementwiseState with slots []")
