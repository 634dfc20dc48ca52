"""inject_hyperparams: values readable and settable, schedules stored as in Optax, static
arguments inferred. (Every table optimizer injected equals the plain one: tests/test_generic.py.)

Against `optax.inject_hyperparams` on the cases Optax's own tests raise: the Optax signature
(`inner_factory`, `static_args`, `hyperparam_dtype`, positional), PRNG keys and integer seeds,
bf16 arrays, schedules for an argument that takes only numbers, stateful schedules."""

from __future__ import annotations

import inspect
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gradtx

from ..helpers import assert_trees_close, grad_sequence, mixed_params


def test_changing_the_learning_rate_does_not_retrace():
    tx = gradtx.inject_hyperparams(gradtx.sgd)(learning_rate=0.1, momentum=0.9)
    params = {"w": jnp.ones(3)}
    traces = []

    @jax.jit
    def step(g, s):
        traces.append(1)
        return tx.update(g, s, params)

    state = tx.init(params)
    assert float(gradtx.tree.get(state, "learning_rate")) == pytest.approx(0.1)
    g = {"w": jnp.ones(3)}
    u1, state = step(g, state)
    state = gradtx.tree.set(state, learning_rate=0.01, momentum=0.0)
    u2, state = step(g, state)
    assert len(traces) == 1
    np.testing.assert_allclose(u1["w"], -0.1 * np.ones(3), rtol=1e-6)
    np.testing.assert_allclose(u2["w"], -0.01 * np.ones(3), rtol=1e-6)  # momentum 0: no trace
    assert gradtx.tree.get(state, "learning_rate").dtype == jnp.float32


def test_hyperparameters_stay_float32_with_bf16_params():
    tx = gradtx.inject_hyperparams(gradtx.scale_by_adam)(b1=0.9, b2=0.999)
    params = mixed_params(dtype=jnp.bfloat16)
    state = tx.init(params)
    b2 = gradtx.tree.get(state, "b2")
    assert b2.dtype == jnp.float32 and float(b2) < 1.0
    assert float(1 - b2) == pytest.approx(1e-3, rel=1e-4)
    updates, state = jax.jit(tx.update)(grad_sequence(params, 1)[0], state, params)
    assert all(u.dtype == jnp.bfloat16 for u in jax.tree.leaves(updates))
    assert gradtx.tree.get(state, "b2").dtype == jnp.float32


def test_schedules_are_stored_like_optax():
    schedule = lambda count: 0.1 / (1.0 + count)
    ours = gradtx.inject_hyperparams(gradtx.sgd)(learning_rate=schedule)
    ref = optax.inject_hyperparams(optax.sgd)(learning_rate=schedule)
    params = {"w": jnp.ones(2)}
    s_ours, s_ref = ours.init(params), ref.init(params)
    for g in grad_sequence(params, 5):
        u_ours, s_ours = ours.update(g, s_ours, params)
        u_ref, s_ref = ref.update(g, s_ref, params)
        assert_trees_close(u_ours, u_ref, 1e-7, 0)
        assert float(s_ours.hyperparams["learning_rate"]) == pytest.approx(
            float(s_ref.hyperparams["learning_rate"]), rel=1e-7
        )
    assert int(s_ours.count) == 5
    # a value set by hand is replaced by the schedule at the next step
    s_ours = gradtx.tree.set(s_ours, learning_rate=123.0)
    _, s_ours = ours.update(g, s_ours, params)
    assert float(gradtx.tree.get(s_ours, "learning_rate")) == pytest.approx(0.1 / 6)


def test_static_arguments_are_inferred():
    tx = gradtx.inject_hyperparams(gradtx.weight_decay)(rate=1e-2, mask=lambda p: {"w": True})
    state = tx.init({"w": jnp.ones(2)})
    assert list(state.hyperparams) == ["rate"]  # the mask function is not a schedule
    tx = gradtx.inject_hyperparams(gradtx.weight_decay)(rate=1e-2, mask="**/w")
    assert list(tx.init({"w": jnp.ones(2)}).hyperparams) == ["rate"]
    tx = gradtx.inject_hyperparams(gradtx.sgd)(0.1, momentum=0.9, nesterov=True)
    assert sorted(tx.init({"w": jnp.ones(2)}).hyperparams) == ["learning_rate", "momentum"]
    # an int the factory wants as an int stays static; a float hyperparameter becomes float32
    # (an int one stays int32, as in Optax: see below)
    tx = gradtx.inject_hyperparams(gradtx.lookahead)(
        gradtx.sgd(0.1), sync_period=3, slow_step_size=0.5
    )
    state = tx.init({"w": jnp.ones(2)})
    assert list(state.hyperparams) == ["slow_step_size"]
    assert state.hyperparams["slow_step_size"].dtype == jnp.float32
    # scalar arrays are injected (as float32); hyperparameters are never arrays of values
    tx = gradtx.inject_hyperparams(gradtx.scale)(np.array(2.0))
    state = tx.init(jnp.ones(2))
    assert state.hyperparams["step_size"].dtype == jnp.float32
    assert state.hyperparams["step_size"].shape == ()
    np.testing.assert_array_equal(tx.update(jnp.ones(2), state)[0], [2.0, 2.0])
    with pytest.raises(ValueError, match=r"scale: step_size must be a scalar"):
        gradtx.inject_hyperparams(gradtx.scale)(np.array([1.0, 2.0])).init(jnp.ones(2))


def test_static_args_override_and_errors():
    tx = gradtx.inject_hyperparams(gradtx.sgd, static_args="momentum")(0.1, momentum=0.9)
    assert list(tx.init({"w": jnp.ones(2)}).hyperparams) == ["learning_rate"]
    with pytest.raises(ValueError, match=r"inject_hyperparams\(sgd\): static_args names \['mom'\]"):
        gradtx.inject_hyperparams(gradtx.sgd, static_args=["mom"])(0.1)
    with pytest.raises(ValueError, match="scale_by_learning_rate: learning_rate must be >= 0"):
        gradtx.inject_hyperparams(gradtx.sgd)(learning_rate=-1.0)  # validated at construction
    with pytest.raises(TypeError, match=r"inject_hyperparams\(sgd\)"):
        gradtx.inject_hyperparams(gradtx.sgd)(0.1, bogus=1)


def test_results_equal_with_optax_inner():
    tx = gradtx.inject_hyperparams(optax.adam)(learning_rate=0.01, b1=0.8)
    params = mixed_params()
    state = tx.init(params)
    ref = optax.adam(0.01, b1=0.8)
    ref_state = ref.init(params)
    step, ref_step = jax.jit(tx.update), jax.jit(ref.update)
    for g in grad_sequence(params, 20):
        u, state = step(g, state, params)
        r, ref_state = ref_step(g, ref_state, params)
        assert_trees_close(u, r, 1e-5, 1e-7)


# --------------------------------------------------------------------------------------------
# against optax.inject_hyperparams
# --------------------------------------------------------------------------------------------

STEPS = 4


def _run(tx, params, steps=STEPS, jit=True):
    """Updates and the final state of `steps` steps of `tx` on fixed gradients."""
    update = jax.jit(tx.update) if jit else tx.update
    state = tx.init(params)
    out = []
    for i in range(steps):
        grads = jax.tree.map(lambda p, i=i: jnp.full_like(p, 0.5 - 0.1 * i), params)
        updates, state = update(grads, state, params)
        out.append(updates)
    return out, state


def _assert_same_as_optax(ours, ref, params, rtol=1e-6):
    u_ours, s_ours = _run(ours, params)
    u_ref, s_ref = _run(ref, params)
    assert_trees_close(u_ours, u_ref, rtol, 0)
    # both store the arguments left at their defaults; gradtx keeps PRNG keys out (static)
    assert set(s_ours.hyperparams) <= set(s_ref.hyperparams)
    for name, value in s_ours.hyperparams.items():
        expected = s_ref.hyperparams[name]
        assert value.dtype == expected.dtype, (name, value.dtype, expected.dtype)
        np.testing.assert_allclose(np.asarray(value, np.float64), np.asarray(expected, np.float64))
    return s_ours


# The signature.


def test_signature_is_optax_s():
    ours = inspect.signature(gradtx.inject_hyperparams).parameters
    ref = inspect.signature(optax.inject_hyperparams).parameters
    assert list(ours) == list(ref) == ["inner_factory", "static_args", "hyperparam_dtype"]
    for name in ref:
        assert ours[name].kind is ref[name].kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
    assert ours["static_args"].default == ()
    assert ours["hyperparam_dtype"].default is None


def test_positional_and_keyword_calls_agree_with_optax():
    params = {"w": jnp.ones(3)}
    for ours, ref in [
        (
            gradtx.inject_hyperparams(gradtx.sgd, "momentum", jnp.float32)(0.1, momentum=0.9),
            optax.inject_hyperparams(optax.sgd, "momentum", jnp.float32)(0.1, momentum=0.9),
        ),
        (
            gradtx.inject_hyperparams(inner_factory=gradtx.sgd, static_args=("momentum",))(0.1),
            optax.inject_hyperparams(inner_factory=optax.sgd, static_args=("momentum",))(0.1),
        ),
    ]:
        state = _assert_same_as_optax(ours, ref, params)
        assert list(state.hyperparams) == ["learning_rate"]


def test_hyperparam_dtype_must_be_a_float_dtype():
    with pytest.raises(TypeError, match="inject_hyperparams: hyperparam_dtype must be a floating"):
        gradtx.inject_hyperparams(gradtx.sgd, (), jnp.int32)
    with pytest.raises(TypeError, match="inject_hyperparams: inner_factory must be callable"):
        gradtx.inject_hyperparams(0.1)


# What is a number.


def test_typed_prng_key_is_passed_through():
    params = {"w": jnp.ones(3)}
    ours = gradtx.inject_hyperparams(gradtx.noisy_sgd)(learning_rate=0.1, key=jax.random.key(0))
    ref = optax.inject_hyperparams(optax.noisy_sgd)(learning_rate=0.1, key=jax.random.key(0))
    u_ours, s_ours = _run(ours, params)
    u_ref, s_ref = _run(ref, params)
    assert_trees_close(u_ours, u_ref, 1e-6, 0)  # the same noise stream
    # Optax stores the key among the hyperparameters; gradtx passes it to the factory as is
    assert "key" in s_ref.hyperparams
    assert "key" not in s_ours.hyperparams and "learning_rate" in s_ours.hyperparams
    plain = gradtx.noisy_sgd(0.1, key=jax.random.key(0))
    assert_trees_close(u_ours, _run(plain, params)[0], 1e-6, 0)


@pytest.mark.parametrize("jit", [True, False])
def test_an_integer_seed_stays_an_integer(jit):
    params = {"w": jnp.ones(3)}
    ours = gradtx.inject_hyperparams(gradtx.noisy_sgd)(learning_rate=0.1, key=3)
    ref = optax.inject_hyperparams(optax.noisy_sgd)(learning_rate=0.1, key=3)
    state = _assert_same_as_optax(ours, ref, params)
    assert state.hyperparams["key"].dtype == jnp.int32
    assert_trees_close(
        _run(ours, params, jit=jit)[0], _run(gradtx.noisy_sgd(0.1, key=3), params)[0], 1e-6, 0
    )
    # add_noise's own name for it, `seed`, too
    tx = gradtx.inject_hyperparams(gradtx.add_noise)(0.01, seed=3)
    assert tx.init(params).hyperparams["seed"].dtype == jnp.int32
    assert_trees_close(
        _run(tx, params, jit=jit)[0], _run(gradtx.add_noise(0.01, seed=3), params)[0], 1e-6, 0
    )


def test_integer_hyperparameters_keep_their_dtype_like_optax():
    params = {"w": jnp.ones(3)}
    ours = gradtx.inject_hyperparams(gradtx.sgd, hyperparam_dtype=jnp.float32)(learning_rate=1)
    ref = optax.inject_hyperparams(optax.sgd, hyperparam_dtype=jnp.float32)(learning_rate=1)
    state = _assert_same_as_optax(ours, ref, params)
    assert state.hyperparams["learning_rate"].dtype == jnp.int32


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16, jnp.float32])
def test_float_arrays_of_any_dtype_are_injected_keeping_it(dtype):
    params = {"w": jnp.ones(3)}
    lr = jnp.asarray(0.1, dtype)
    ours = gradtx.inject_hyperparams(gradtx.sgd)(learning_rate=lr)
    ref = optax.inject_hyperparams(optax.sgd)(learning_rate=lr)
    state = _assert_same_as_optax(ours, ref, params)
    assert state.hyperparams["learning_rate"].dtype == dtype
    # and changeable between steps, in that dtype
    state = gradtx.tree.set(state, learning_rate=0.5)
    updates, state = ours.update({"w": jnp.ones(3)}, state, params)
    assert state.hyperparams["learning_rate"].dtype == dtype
    np.testing.assert_allclose(updates["w"], -0.5 * np.ones(3))


def test_hyperparam_dtype_casts_floats_only():
    tx = gradtx.inject_hyperparams(gradtx.noisy_sgd, hyperparam_dtype=jnp.bfloat16)(
        learning_rate=jnp.asarray(0.1, jnp.float32), eta=0.01, key=1
    )
    state = tx.init({"w": jnp.ones(3)})
    assert state.hyperparams["learning_rate"].dtype == jnp.bfloat16
    assert state.hyperparams["eta"].dtype == jnp.bfloat16
    assert state.hyperparams["key"].dtype == jnp.int32
    _, state = jax.jit(tx.update)({"w": jnp.ones(3)}, state, {"w": jnp.ones(3)})
    assert state.hyperparams["learning_rate"].dtype == jnp.bfloat16


# Schedules for arguments that take only numbers.


def test_schedule_for_a_numbers_only_argument():
    params = {"w": jnp.ones(3)}
    schedule = lambda count: 0.1 * (count + 1)
    ours = gradtx.inject_hyperparams(gradtx.scale)(step_size=schedule)
    ref = optax.inject_hyperparams(optax.scale)(step_size=schedule)
    state = _assert_same_as_optax(ours, ref, params)
    assert float(state.hyperparams["step_size"]) == pytest.approx(0.1 * STEPS)
    ours = gradtx.inject_hyperparams(gradtx.scale)(lambda count: 0.1)
    ref = optax.inject_hyperparams(optax.scale)(lambda count: 0.1)
    _assert_same_as_optax(ours, ref, params)


def test_construction_checks_a_schedule_s_first_value():
    with pytest.raises(ValueError, match=r"learning_rate must be >= 0, got -0\.1"):
        gradtx.inject_hyperparams(gradtx.sgd)(learning_rate=lambda count: -0.1 + 0.0 * count)
    with pytest.raises(ValueError, match="step_size must be a scalar"):
        gradtx.inject_hyperparams(gradtx.scale)(lambda count: jnp.ones(2) * count)


# Optax 0.2.8's own suite (schedules/_inject_test.py).


def test_defaults_are_not_stored_so_the_plain_optimizer_is_reproduced_exactly():
    # optax: InjectHyperparamsTest::test_constant_hyperparams stores eps too (a difference by
    # design, docs/migration.md "inject-stores-passed-arguments"); an argument passed is stored
    tx = gradtx.inject_hyperparams(gradtx.scale_by_adam)(b1=0.0, b2=0.0)
    params = {"w": jnp.linspace(-1.0, 1.0, 3)}
    state = tx.init(params)
    assert set(state.hyperparams) == {"b1", "b2"}
    plain = gradtx.inject_hyperparams(gradtx.adam)(0.1)
    ref = gradtx.adam(0.1)
    g = {"w": jnp.array([0.3, -0.2, 0.1])}
    u1, _ = plain.update(g, plain.init(params), params)
    u2, _ = ref.update(g, ref.init(params), params)
    np.testing.assert_array_equal(u1["w"], u2["w"])


@pytest.mark.parametrize("static_args", ["lr", ["lr"]])
def test_unknown_static_args_fail_at_construction(static_args):
    # optax: InjectHyperparamsTest::test_static_args_error_{string,list}
    with pytest.raises(
        ValueError, match=r"inject_hyperparams\(scale\): static_args names \['lr'\]"
    ):
        gradtx.inject_hyperparams(gradtx.scale, static_args=static_args)


class _TotalState(NamedTuple):
    total: jax.Array


class _Total:
    """A stateful schedule: the sum of the `addendum` extra arguments seen so far."""

    def init(self):
        return _TotalState(jnp.zeros([], jnp.float32))

    def update(self, state, **extra_args):
        return _TotalState(state.total + extra_args["addendum"])

    def __call__(self, state, **extra_args):
        return state.total


def test_a_stateful_schedule_gets_its_own_state():
    # optax: StatefulTest::test_inject_stateful_hyperparams ('ArrayImpl' has no 'total' before)
    params = {"w": jnp.ones(3)}
    tx = gradtx.inject_hyperparams(gradtx.scale)(step_size=_Total())
    state = jax.jit(tx.init)(params)
    assert isinstance(state, gradtx.InjectStatefulHyperparamsState)
    step = jax.jit(tx.update)
    addendum = jnp.asarray(0.3, jnp.float32)
    updates, state = step({"w": jnp.ones(3)}, state, params, addendum=addendum)
    np.testing.assert_allclose(updates["w"], 0.0)
    updates, state = step({"w": jnp.ones(3)}, state, params, addendum=addendum)
    np.testing.assert_allclose(updates["w"], 0.3, rtol=1e-6)
    np.testing.assert_allclose(state.hyperparams["step_size"], 0.3, rtol=1e-6)
    np.testing.assert_allclose(state.hyperparams_states["step_size"].total, 0.6, rtol=1e-6)
    # plain schedules keep the three-field state
    plain = gradtx.inject_hyperparams(gradtx.scale)(step_size=lambda count: 0.1)
    assert isinstance(plain.init(params), gradtx.InjectHyperparamsState)
