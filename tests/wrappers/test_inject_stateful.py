"""Stateful schedules: `StatefulSchedule` and `WrappedSchedule`, driven by
`inject_stateful_hyperparams` (schedules that keep a state and see extra arguments such as the
loss), against Optax."""

from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gradtx
from gradtx.wrappers._inject_stateful import (
    InjectStatefulHyperparamsState,
    StatefulSchedule,
    WrappedSchedule,
    WrappedScheduleState,
    inject_stateful_hyperparams,
)

RTOL, ATOL = 1e-5, 1e-6


def optax_stateful(factory, **kwargs):
    """Optax's (deprecated) inject_stateful_hyperparams, without its DeprecationWarning."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return optax.inject_stateful_hyperparams(factory, **kwargs)


def params_and_grads(steps, seed=0):
    rng = np.random.default_rng(seed)
    params = {"a": jnp.asarray(rng.normal(size=(3,)), jnp.float32), "b": jnp.ones((2, 2))}
    grads = [
        jax.tree.map(lambda p: jnp.asarray(rng.normal(size=p.shape), p.dtype), params)
        for _ in range(steps)
    ]
    return params, grads


class LossDrivenScale:
    """A stateful schedule: halves its value whenever the loss passed as `value=` rises."""

    def init(self):
        return {"scale": jnp.asarray(0.1, jnp.float32), "last": jnp.asarray(jnp.inf, jnp.float32)}

    def update(self, state, *, value, **extra_args):
        del extra_args
        worse = value > state["last"]
        return {
            "scale": jnp.where(worse, state["scale"] * 0.5, state["scale"]),
            "last": jnp.asarray(value, jnp.float32),
        }

    def __call__(self, state, **extra_args):
        del extra_args
        return state["scale"]


def drive_both(ours, theirs, params, grads, extra=None):
    s1, s2 = ours.init(params), theirs.init(params)
    step1, step2 = jax.jit(ours.update), jax.jit(theirs.update)
    out = []
    for i, g in enumerate(grads):
        kw = {} if extra is None else {"value": jnp.asarray(extra[i], jnp.float32)}
        u1, s1 = step1(g, s1, params, **kw)
        u2, s2 = step2(g, s2, params, **kw)
        for a, b in zip(jax.tree.leaves(u1), jax.tree.leaves(u2), strict=True):
            np.testing.assert_allclose(a, b, rtol=RTOL, atol=ATOL, err_msg=f"step {i}")
        out.append((s1, s2))
    return out


# -- inject_stateful_hyperparams -------------------------------------------------------------


def test_plain_schedule_and_constants_match_optax():
    schedule = optax.linear_schedule(0.1, 0.01, transition_steps=6)
    params, grads = params_and_grads(8)
    ours = inject_stateful_hyperparams(gradtx.adam)(learning_rate=schedule, b1=0.8)
    theirs = optax_stateful(optax.adam)(learning_rate=schedule, b1=0.8)
    states = drive_both(ours, theirs, params, grads)
    s1, s2 = states[-1]
    assert isinstance(s1, InjectStatefulHyperparamsState)
    assert s1._fields == s2._fields == ("count", "hyperparams", "hyperparams_states", "inner_state")
    assert int(s1.count) == int(s2.count) == 8
    # defaults are stored too, as in Optax
    assert (
        set(s1.hyperparams)
        == set(s2.hyperparams)
        == {"learning_rate", "b1", "b2", "eps", "eps_root"}
    )
    for k in s2.hyperparams:
        np.testing.assert_allclose(s1.hyperparams[k], s2.hyperparams[k], rtol=RTOL)
    assert set(s1.hyperparams_states) == {"learning_rate"}
    assert isinstance(s1.hyperparams_states["learning_rate"], WrappedScheduleState)
    assert int(s1.hyperparams_states["learning_rate"].count) == 8
    assert int(s2.hyperparams_states["learning_rate"].count) == 8


def test_stateful_schedule_with_extra_args_matches_optax():
    params, grads = params_and_grads(10, seed=1)
    losses = [3.0, 2.0, 2.5, 1.0, 1.5, 1.4, 0.9, 1.1, 1.0, 1.2]
    ours = inject_stateful_hyperparams(gradtx.sgd)(learning_rate=LossDrivenScale(), momentum=0.9)
    theirs = optax_stateful(optax.sgd)(learning_rate=LossDrivenScale(), momentum=0.9)
    states = drive_both(ours, theirs, params, grads, extra=losses)
    s1, s2 = states[-1]
    # the value used at a step is the schedule's before that step's update: 4 rises, 4 halvings
    # but the last halving only shows at the next step
    np.testing.assert_allclose(s1.hyperparams["learning_rate"], 0.1 * 0.5**3, rtol=1e-6)
    np.testing.assert_allclose(s1.hyperparams_states["learning_rate"]["scale"], 0.1 * 0.5**4)
    np.testing.assert_allclose(
        s1.hyperparams_states["learning_rate"]["scale"],
        s2.hyperparams_states["learning_rate"]["scale"],
    )


class Accumulating:
    """Optax's own example: an int32 total that becomes a float once `addendum`s are added."""

    def init(self):
        return {"total": jnp.zeros([], jnp.int32)}

    def update(self, state, **extra_args):
        return {"total": state["total"] + extra_args["addendum"]}

    def __call__(self, state, **extra_args):
        del extra_args
        return state["total"]


class StrictAccumulating(Accumulating):
    """The same, declaring only the extra argument it uses."""

    def update(self, state, *, addendum):  # type: ignore[override]
        return {"total": state["total"] + addendum}

    def __call__(self, state):  # type: ignore[override]
        return state["total"]


def test_schedule_values_are_converted_per_step_as_in_optax():
    params = (jnp.ones(3), jnp.ones(2))
    ours = inject_stateful_hyperparams(gradtx.scale)(step_size=StrictAccumulating())
    theirs = optax_stateful(optax.scale)(step_size=Accumulating())
    s1, s2 = jax.jit(ours.init)(params), jax.jit(theirs.init)(params)
    assert s1.hyperparams["step_size"].dtype == s2.hyperparams["step_size"].dtype == jnp.int32
    addendum = jnp.asarray(0.3, jnp.float32)
    for _ in range(3):
        # gradtx passes a schedule only the extra arguments it declares (Optax passes all)
        u1, s1 = jax.jit(ours.update)(params, s1, params, addendum=addendum, value=1.0)
        u2, s2 = jax.jit(theirs.update)(params, s2, params, addendum=addendum)
        for a, b in zip(jax.tree.leaves(u1), jax.tree.leaves(u2), strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-6)
    np.testing.assert_allclose(s1.hyperparams["step_size"], 0.6, rtol=1e-6)
    assert s1.hyperparams["step_size"].dtype == jnp.float32
    np.testing.assert_allclose(s1.hyperparams_states["step_size"]["total"], 0.9, rtol=1e-6)
    np.testing.assert_allclose(s2.hyperparams_states["step_size"]["total"], 0.9, rtol=1e-6)


def test_jit_scan_structure_and_optax_schedule_objects():
    """Optax's WrappedSchedule is a StatefulSchedule for gradtx, and the other way round."""
    schedule = optax.exponential_decay(0.2, transition_steps=1, decay_rate=0.9)
    assert isinstance(optax.WrappedSchedule(schedule), StatefulSchedule)
    assert isinstance(WrappedSchedule(schedule), optax.schedules.StatefulSchedule)
    assert isinstance(LossDrivenScale(), StatefulSchedule)
    assert not isinstance(schedule, StatefulSchedule)
    params, grads = params_and_grads(6, seed=2)
    ours = inject_stateful_hyperparams(gradtx.sgd)(learning_rate=optax.WrappedSchedule(schedule))
    theirs = optax.sgd(schedule)
    state, ref = ours.init(params), theirs.init(params)

    @jax.jit
    def run(state, gs):
        def body(s, g):
            u, s = ours.update(g, s, params)
            return s, u

        return jax.lax.scan(body, state, gs)

    stacked = jax.tree.map(lambda *x: jnp.stack(x), *grads)
    final, ups = run(state, stacked)
    assert jax.tree.structure(final) == jax.tree.structure(state)
    for i, g in enumerate(grads):
        want, ref = theirs.update(g, ref, params)
        got = jax.tree.map(lambda u, i=i: u[i], ups)
        for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
            np.testing.assert_allclose(a, b, rtol=RTOL, atol=ATOL)


def test_wrapped_schedule_matches_optax():
    schedule = optax.cosine_decay_schedule(1.0, decay_steps=5)
    ours, theirs = WrappedSchedule(schedule), optax.WrappedSchedule(schedule)
    s1, s2 = ours.init(), theirs.init()
    assert s1._fields == s2._fields == ("count",) and s1.count.dtype == jnp.int32
    for _ in range(7):
        np.testing.assert_allclose(ours(s1, value=1.0), theirs(s2), rtol=1e-6)
        s1, s2 = ours.update(s1, value=1.0), theirs.update(s2)
        assert int(s1.count) == int(s2.count)
    assert ours.schedule_fn is schedule
    with pytest.raises(TypeError, match="schedule_fn must be callable"):
        WrappedSchedule(0.1)


def test_numeric_hyperparams_can_be_set_and_schedules_win():
    params, grads = params_and_grads(3, seed=3)
    tx = inject_stateful_hyperparams(gradtx.sgd)(learning_rate=0.1, momentum=lambda c: 0.0 * c)
    state = tx.init(params)
    _, state = tx.update(grads[0], state, params)
    # a scheduled name is also a key of hyperparams_states: address its value by path
    state = gradtx.tree.set(state, {"hyperparams/momentum": 0.9}, learning_rate=0.5)
    assert state.hyperparams["learning_rate"].dtype == jnp.float32
    u, state = tx.update(grads[1], state, params)
    np.testing.assert_allclose(u["a"], -0.5 * grads[1]["a"], rtol=1e-6)  # momentum re-scheduled
    np.testing.assert_allclose(state.hyperparams["momentum"], 0.0)


def test_dtypes_and_static_arguments():
    tx = inject_stateful_hyperparams(gradtx.sgd, hyperparam_dtype=jnp.bfloat16)(
        learning_rate=lambda c: 0.1, momentum=0.5, nesterov=True
    )
    state = tx.init({"w": jnp.zeros(2)})
    assert state.hyperparams["learning_rate"].dtype == jnp.bfloat16
    assert state.hyperparams["momentum"].dtype == jnp.bfloat16
    assert "nesterov" not in state.hyperparams and "accumulator_dtype" not in state.hyperparams
    # defaults are stored in hyperparam_dtype too: adam's b2 = 0.999 rounds to 1 in bf16, and
    # gradtx says so at construction (Optax runs with b2 = 1)
    with pytest.raises(ValueError, match="b2 must be in"):
        inject_stateful_hyperparams(gradtx.adam, hyperparam_dtype=jnp.bfloat16)(learning_rate=0.1)
    # float32 params: same values as without the wrapper
    tx = inject_stateful_hyperparams(gradtx.adam)(learning_rate=0.1)
    assert {v.dtype for v in tx.init({"w": jnp.zeros(2, jnp.bfloat16)}).hyperparams.values()} == {
        jnp.dtype(jnp.float32)
    }

    # a callable listed in static_args is passed through, not scheduled
    def fn(c):
        return 0.1

    tx = inject_stateful_hyperparams(gradtx.sgd, static_args="learning_rate")(learning_rate=fn)
    state = tx.init({"w": jnp.zeros(2)})
    assert (
        "learning_rate" not in state.hyperparams and "learning_rate" not in state.hyperparams_states
    )


def test_errors():
    with pytest.raises(TypeError, match="inner_factory must be callable"):
        inject_stateful_hyperparams(0.1)
    with pytest.raises(ValueError, match=r"static_args names \['lr'\]"):
        inject_stateful_hyperparams(gradtx.sgd, static_args=["lr"])
    with pytest.raises(TypeError, match="hyperparam_dtype must be a floating dtype"):
        inject_stateful_hyperparams(gradtx.sgd, hyperparam_dtype=jnp.int32)
    with pytest.raises(TypeError, match=r"no argument 'lr'.*did you mean 'learning_rate'"):
        inject_stateful_hyperparams(gradtx.sgd)(lr=0.1)
    with pytest.raises(ValueError, match="momentum"):
        inject_stateful_hyperparams(gradtx.sgd)(learning_rate=0.1, momentum=-0.5)
    with pytest.raises(TypeError, match="missing a required argument"):
        inject_stateful_hyperparams(gradtx.sgd)()
    tx = inject_stateful_hyperparams(gradtx.sgd)(learning_rate=0.1)
    with pytest.raises(ValueError, match="expected a InjectStatefulHyperparamsState"):
        tx.update({"w": jnp.ones(2)}, gradtx.sgd(0.1).init({"w": jnp.ones(2)}))
