"""`from_optax_state`: an Optax run, converted mid-way, goes on in gradtx as it does in Optax.

Each case runs an Optax optimizer for `SPLIT` steps, converts its state, then continues
`RESUME` steps in both libraries from the same point: the parameters must agree to 1e-6. The
reference is Optax's own continuation, not gradtx's code; a resume from a fresh gradtx state
must differ, so the comparison can fail.
"""

from __future__ import annotations

import logging

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gradtx
from gradtx.checkpoint import CheckpointError
from gradtx.checkpoint._optax_state import OPTAX_STATE_NAMES, from_optax_state
from gradtx.checkpoint._roles import roles

SPLIT, RESUME = 10, 50

PARAMS = {
    "w": jnp.asarray(np.random.default_rng(0).normal(size=(8, 4)), jnp.float32),
    "b": jnp.asarray(np.linspace(-1.0, 1.0, 4), jnp.float32),
}
TARGET = jax.tree.map(lambda p: jnp.full_like(p, 0.5), PARAMS)
CURVATURE = {"w": jnp.linspace(0.5, 3.0, 32).reshape(8, 4), "b": jnp.asarray([1.0, 2.0, 0.5, 4.0])}


def grads_at(params):
    """The gradient of 0.5 * sum(c * (p - 0.5)^2): deterministic, norm > 1 (clipping acts)."""
    return jax.tree.map(lambda p, t, c: c * (p - t), params, TARGET, CURVATURE)


def run(tx, params, state, steps):
    """`steps` updates of `tx` (a traced count: one compilation per optimizer)."""

    def body(_, carry):
        params, state = carry
        updates, state = tx.update(grads_at(params), state, params)
        return optax.apply_updates(params, updates), state

    return jax.lax.fori_loop(0, steps, body, (params, state))


def optax_sched():
    return optax.warmup_cosine_decay_schedule(0.0, 1e-2, 5, 100)


def gradtx_sched():
    return gradtx.warmup_cosine_decay_schedule(0.0, 1e-2, 5, 100)


# name -> (Optax optimizer, the same gradtx optimizer)
CASES = {
    "adam": lambda: (optax.adam(1e-2), gradtx.adam(1e-2)),
    "adamw": lambda: (optax.adamw(1e-2, weight_decay=0.1), gradtx.adamw(1e-2, weight_decay=0.1)),
    "sgd_momentum": lambda: (optax.sgd(1e-2, momentum=0.9), gradtx.sgd(1e-2, momentum=0.9)),
    "sgd_nesterov": lambda: (
        optax.sgd(1e-2, momentum=0.9, nesterov=True),
        gradtx.sgd(1e-2, momentum=0.9, nesterov=True),
    ),
    "lion": lambda: (optax.lion(5e-2, weight_decay=0.1), gradtx.lion(5e-2, weight_decay=0.1)),
    # min_dim_size_to_factor=4: the (8, 4) matrix is factored (v_row, v_col), the vector is not
    "adafactor": lambda: (
        optax.adafactor(1e-2, min_dim_size_to_factor=4),
        gradtx.adafactor(1e-2, min_dim_size_to_factor=4),
    ),
    "adafactor_momentum": lambda: (
        optax.adafactor(1e-2, min_dim_size_to_factor=4, momentum=0.9),
        gradtx.adafactor(1e-2, min_dim_size_to_factor=4, momentum=0.9),
    ),
    "lamb": lambda: (optax.lamb(1e-2, weight_decay=0.01), gradtx.lamb(1e-2, weight_decay=0.01)),
    "rmsprop": lambda: (optax.rmsprop(1e-2), gradtx.rmsprop(1e-2)),
    # Optax's ScaleByRStdDevState / ScaleByRmsWithCountState: gradtx names them otherwise
    "rmsprop_centered_momentum": lambda: (
        optax.rmsprop(1e-2, centered=True, momentum=0.9),
        gradtx.rmsprop(1e-2, centered=True, momentum=0.9),
    ),
    "adadelta": lambda: (optax.adadelta(1.0), gradtx.adadelta(1.0)),  # ScaleByAdaDeltaState
    "rmsprop_bias_correction": lambda: (
        optax.rmsprop(1e-2, bias_correction=True),
        gradtx.rmsprop(1e-2, bias_correction=True),
    ),
    "clip_adamw_cosine": lambda: (
        optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(optax_sched())),
        gradtx.chain(gradtx.clip_by_global_norm(1.0), gradtx.adamw(gradtx_sched())),
    ),
    # the warmup spans the conversion: the schedule must go on from step SPLIT
    "adam_warmup": lambda: (
        optax.adam(optax.linear_schedule(0.0, 1e-2, 4 * SPLIT)),
        gradtx.adam(gradtx.linear_schedule(0.0, 1e-2, 4 * SPLIT)),
    ),
}

# Optax states that hold no step count: gradtx's counters start at 0 there (they change nothing)
NO_OPTAX_COUNT = {
    "sgd_momentum",
    "sgd_nesterov",
    "rmsprop",
    "rmsprop_centered_momentum",
    "adadelta",
}


def _max_diff(a, b):
    return max(
        float(jnp.max(jnp.abs(x - y)))
        for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True)
    )


@pytest.mark.parametrize("name", sorted(CASES))
def test_resume_matches_optax_continuation(name):
    optax_tx, tx = CASES[name]()
    optax_run = jax.jit(lambda p, s, n: run(optax_tx, p, s, n))
    params, optax_state = optax_run(PARAMS, optax_tx.init(PARAMS), SPLIT)

    state = from_optax_state(optax_state, optax_tx, tx, params)

    expected, _ = optax_run(params, optax_state, RESUME)
    gradtx_run = jax.jit(lambda p, s: run(tx, p, s, RESUME))
    got, _ = gradtx_run(params, state)
    diff = _max_diff(got, expected)
    assert diff <= 1e-6, f"{name}: gradtx's resume is {diff:.2e} off Optax's"
    # the same state as tx's own: structure, shapes, dtypes
    template = tx.init(params)
    assert jax.tree.structure(state) == jax.tree.structure(template)
    for a, b in zip(jax.tree.leaves(state), jax.tree.leaves(template), strict=True):
        assert (a.shape, a.dtype) == (b.shape, b.dtype)
    # every step counter is the Optax run's step (0 where Optax keeps none)
    counts = {int(r.value) for r in roles(state) if r.field == "count"}
    assert counts == ({0} if name in NO_OPTAX_COUNT else {SPLIT}), counts
    # the comparison can fail: resuming from a fresh state leaves Optax's trajectory
    fresh, _ = gradtx_run(params, template)
    assert _max_diff(fresh, expected) > 1e-4, f"{name}: a fresh state resumes as well"


def test_step_given_sets_the_counters_optax_lacks():
    optax_tx, tx = CASES["sgd_momentum"]()
    optax_state = optax_tx.init(PARAMS)
    state = from_optax_state(optax_state, optax_tx, tx, PARAMS, step=7)
    assert [int(r.value) for r in roles(state) if r.field == "count"] == [7, 7]


def test_the_report_is_logged(caplog):
    optax_tx, tx = CASES["adam"]()
    with caplog.at_level(logging.INFO, logger="gradtx.checkpoint"):
        from_optax_state(optax_tx.init(PARAMS), optax_tx, tx, PARAMS)
    assert "from_optax_state: migrated: 5 carried" in caplog.text
    assert "1/count (ScaleByScheduleState.count)" in caplog.text


def test_aliases_name_gradtx_classes():
    """Each renamed Optax class exists in gradtx under the new name, with the same fields (and
    a count): a rename in either library shows up here."""
    from gradtx.transforms import _adaptive

    for optax_name, gradtx_name in OPTAX_STATE_NAMES.items():
        theirs = getattr(optax, optax_name, None) or getattr(optax._src.transform, optax_name)
        ours = getattr(_adaptive, gradtx_name)
        assert set(theirs._fields) - {"count"} == set(ours._fields) - {"count"}, optax_name


# -- refusals ------------------------------------------------------------------------------------


def test_state_of_another_optax_optimizer_is_refused():
    state = optax.adam(1e-2).init(PARAMS)
    with pytest.raises(
        CheckpointError, match=r"does not come from optax_tx.*ScaleByAdamState\.count"
    ):
        from_optax_state(state, optax.sgd(1e-2, momentum=0.9), gradtx.adam(1e-2), PARAMS)


def test_same_values_other_state_objects_are_refused():
    """lamb's state holds adam's values and three EmptyStates: only the outline tells them apart."""
    state = optax.adam(1e-2).init(PARAMS)
    with pytest.raises(
        CheckpointError, match=r"state objects differ at '2'.*nothing in optax_state"
    ):
        from_optax_state(state, optax.lamb(1e-2), gradtx.lamb(1e-2), PARAMS)


def test_state_with_other_options_is_refused():
    state = optax.sgd(1e-2, momentum=0.9).init(PARAMS)
    with pytest.raises(CheckpointError, match=r"optax_state holds '0/trace/b'.*no value there"):
        from_optax_state(state, optax.sgd(1e-2), gradtx.sgd(1e-2, momentum=0.9), PARAMS)


def test_state_of_other_parameters_is_refused():
    params = {"w": jnp.zeros((8, 5)), "b": jnp.zeros(4)}
    state = optax.adam(1e-2).init(params)
    with pytest.raises(CheckpointError, match=r"ScaleByAdamState\.mu\[w\], float32\[8, 5\]"):
        from_optax_state(state, optax.adam(1e-2), gradtx.adam(1e-2), PARAMS)


def test_not_an_optimizer_is_refused():
    with pytest.raises(TypeError, match="optax_tx must be the Optax optimizer"):
        from_optax_state(optax.adam(1e-2).init(PARAMS), "adam", gradtx.adam(1e-2), PARAMS)


def test_optax_values_without_a_place_in_tx_are_refused():
    optax_tx = optax.adam(1e-2)
    with pytest.raises(CheckpointError) as info:
        from_optax_state(optax_tx.init(PARAMS), optax_tx, gradtx.sgd(1e-2, momentum=0.9), PARAMS)
    message = str(info.value)
    assert "tx is not the gradtx optimizer that optax_tx is" in message
    assert "0/mu/w (ScaleByAdamState.mu[w])" in message  # left over in the Optax state
    assert "0/trace/w (TraceState.trace[w])" in message  # with no source in it
    assert "count" not in message.split("no counterpart")[1]  # counts are never missing


def test_tx_values_without_a_source_are_refused():
    optax_tx = optax.sgd(1e-2)
    with pytest.raises(
        CheckpointError, match=r"(?s)no counterpart.*0/trace/b \(TraceState\.trace\[b\]\)"
    ):
        from_optax_state(optax_tx.init(PARAMS), optax_tx, gradtx.sgd(1e-2, momentum=0.9), PARAMS)


def test_optax_values_gradtx_has_no_place_for_are_refused():
    optax_tx = optax.sgd(1e-2, momentum=0.9)
    with pytest.raises(CheckpointError, match=r"no place in tx's state:\s+0/trace/b"):
        from_optax_state(optax_tx.init(PARAMS), optax_tx, gradtx.sgd(1e-2), PARAMS)


# -- states of eager runs, typed keys, colliding paths ----------------------------------------


def _eager(optax_tx, params, steps):
    """`steps` updates of an Optax optimizer run eagerly (no jit): dicts in its state keep
    the insertion order Optax builds them in, not JAX's sorted order."""
    state = optax_tx.init(params)
    for _ in range(steps):
        updates, state = optax_tx.update(grads_at(params), state, params)
        params = optax.apply_updates(params, updates)
    return params, state


def _resumes_as_optax(optax_tx, tx, params, optax_state, steps=20, tol=1e-6):
    state = from_optax_state(optax_state, optax_tx, tx, params)
    expected, _ = run(optax_tx, params, optax_state, steps)
    got, _ = run(tx, params, state, steps)
    assert _max_diff(got, expected) <= tol
    return state


def test_eager_multi_transform_with_unsorted_labels_converts():
    """Eagerly, `optax.multi_transform` keeps its dict of sub-states in the order of its labels
    ('y' before 'x'); jitted, JAX sorts it. Both convert, to the same state."""
    labels = {"w": "y", "b": "x"}
    optax_tx = optax.multi_transform(
        {"y": optax.adam(1e-2), "x": optax.sgd(1e-2, momentum=0.9)}, labels
    )
    tx = gradtx.multi_transform(
        {"y": gradtx.adam(1e-2), "x": gradtx.sgd(1e-2, momentum=0.9)}, labels
    )
    params, optax_state = _eager(optax_tx, PARAMS, 3)
    assert list(optax_state.inner_states) == ["y", "x"]
    state = _resumes_as_optax(optax_tx, tx, params, optax_state)
    jitted = jax.jit(lambda s: s)(optax_state)
    assert list(jitted.inner_states) == ["x", "y"]
    again = from_optax_state(jitted, optax_tx, tx, params)
    for a, b in zip(jax.tree.leaves(state), jax.tree.leaves(again), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_eager_optax_contrib_muon_converts():
    """`optax.contrib.muon`: a multi_transform ('muon' before 'adam' in its eager dict) whose
    MuonState also holds `ns_coeffs`, a constant gradtx keeps in `tx` (its `ns_coeffs=`)."""
    optax_tx, tx = optax.contrib.muon(1e-2), gradtx.contrib.muon(1e-2)
    params, optax_state = _eager(optax_tx, PARAMS, 3)
    state = _resumes_as_optax(optax_tx, tx, params, optax_state, tol=1e-5)
    assert int(gradtx.tree.get(state, "MuonState").count) == 3
    # another ns_coeffs in the Optax state than optax_tx's is refused, naming it
    changed = jax.tree.map(lambda x: x, optax_state)
    muon = changed.inner_states["muon"].inner_state[0]
    changed.inner_states["muon"] = changed.inner_states["muon"]._replace(
        inner_state=(
            muon._replace(ns_coeffs=muon.ns_coeffs * 2),
            *changed.inner_states["muon"].inner_state[1:],
        )
    )
    with pytest.raises(CheckpointError, match=r"MuonState\.ns_coeffs.*not the one optax_tx"):
        from_optax_state(changed, optax_tx, tx, params)


def test_other_state_objects_at_other_paths_are_named_at_both_paths():
    """Two states whose outlines differ only in a label: the message names both paths, never
    'MaskedState in optax_state, MaskedState in optax_tx.init(params)'."""
    made = optax.multi_transform(
        {"a": optax.adam(1e-2), "z": optax.set_to_zero()}, {"w": "a", "b": "z"}
    )
    other = optax.multi_transform(
        {"a": optax.adam(1e-2), "f": optax.set_to_zero()}, {"w": "a", "b": "f"}
    )
    with pytest.raises(CheckpointError) as info:
        from_optax_state(made.init(PARAMS), other, gradtx.adam(1e-2), PARAMS)
    message = str(info.value)
    assert "'inner_states/z'" in message and "'inner_states/f'" in message
    assert "MaskedState in optax_state, MaskedState in" not in message


def test_a_typed_prng_key_converts_to_gradtx_key_data():
    """`optax.noisy_sgd` keeps a typed key (`key<fry>`); gradtx's `AddNoiseState` keeps its raw
    data: the key goes on, so the noise stream continues Optax's."""
    optax_tx = optax.noisy_sgd(1e-2, key=jax.random.key(3))
    tx = gradtx.noisy_sgd(1e-2)
    params, optax_state = _eager(optax_tx, PARAMS, 3)
    assert jax.dtypes.issubdtype(optax_state[0].rng_key.dtype, jax.dtypes.prng_key)
    state = _resumes_as_optax(optax_tx, tx, params, optax_state)
    np.testing.assert_array_equal(
        np.asarray(state[0].rng_key), np.asarray(jax.random.key_data(optax_state[0].rng_key))
    )
    # a key of another implementation than gradtx's raw key data stands for is refused
    rbg = optax_state[0]._replace(rng_key=jax.random.key(3, impl="rbg"))
    rbg_tx = optax.noisy_sgd(1e-2, key=jax.random.key(3, impl="rbg"))
    with pytest.raises(CheckpointError, match=r"rng_key.*rbg.*threefry"):
        from_optax_state((rbg, optax_state[1]), rbg_tx, tx, params)


def test_colliding_parameter_paths_are_refused():
    """Parameters 'a/b' and a/b share a path: refused (as state_dict does), naming both."""
    params = {"a/b": jnp.ones(2), "a": {"b": jnp.full(2, 2.0)}}
    optax_tx = optax.adam(1e-2)
    _, optax_state = _eager(optax_tx, params, 0)
    optax_state = optax_tx.update(params, optax_state, params)[1]
    with pytest.raises(CheckpointError) as info:
        from_optax_state(optax_state, optax_tx, gradtx.adam(1e-2), params)
    message = str(info.value)
    assert message.startswith("from_optax_state: two leaves have the path '0/mu/a/b'")
    assert "[0].mu['a/b']" in message and "[0].mu['a']['b']" in message
