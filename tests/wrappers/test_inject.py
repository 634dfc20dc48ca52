"""inject_hyperparams: same results as the plain optimizer, values readable and settable."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gradtx

from ..helpers import assert_trees_close, grad_sequence, mixed_params
from ..optimizer_table import CASES, OptCase

# Cases of the shared table that need extra static arguments, or cannot be injected at all (with
# the reason, reported as the skip message). Both are empty while every alias injects as is.
STATIC_ARGS: dict[str, tuple[str, ...]] = {}
NOT_INJECTABLE: dict[str, str] = {}

STEPS = 100


def _scan_both(tx_a, tx_b, params, grads):
    """Run two transformations side by side over `grads` (stacked) in one jitted scan."""

    @jax.jit
    def go(params, grads):
        def body(carry, g):
            (pa, sa), (pb, sb) = carry
            ua, sa = tx_a.update(g, sa, pa, value=jnp.float32(1.0))
            ub, sb = tx_b.update(g, sb, pb, value=jnp.float32(1.0))
            pa, pb = gradtx.apply_updates(pa, ua), gradtx.apply_updates(pb, ub)
            return ((pa, sa), (pb, sb)), (ua, ub)

        init = ((params, tx_a.init(params)), (params, tx_b.init(params)))
        return jax.lax.scan(body, init, grads)

    stacked = jax.tree.map(lambda *xs: jnp.stack(xs), *grads)
    return go(params, stacked)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_equals_the_plain_optimizer_for_every_table_case(case: OptCase):
    if case.name in NOT_INJECTABLE:
        pytest.skip(f"{case.name} cannot be injected: {NOT_INJECTABLE[case.name]}")
    injected = gradtx.inject_hyperparams(case.factory, static_args=STATIC_ARGS.get(case.name, ()))
    tx = injected(**case.kwargs)
    params = mixed_params()
    grads = grad_sequence(params, STEPS, scale=0.1)
    ((p_inj, s_inj), (p_ref, _)), (u_inj, u_ref) = _scan_both(tx, case.make(), params, grads)
    # Stored hyperparameters are float32, while the plain optimizer may fold Python-float
    # expressions such as 1 - b2 in double precision (1.3e-5 relative for b2 = 0.999), hence the
    # absolute part of the tolerance.
    assert_trees_close(u_inj, u_ref, 1e-6, 1e-6, msg=f"{case.name} updates")
    assert_trees_close(p_inj, p_ref, 1e-6, 1e-6, msg=f"{case.name} params")
    for name, value in s_inj.hyperparams.items():
        assert value.dtype == jnp.float32, (name, value.dtype)


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
    # (an int one stays int32, as in Optax: test_inject_optax_bugs.py)
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
