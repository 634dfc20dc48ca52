"""The core protocol: GradientTransformation, chain, named_chain, identity, stateless,
apply_updates, extra-argument forwarding and structure errors; the helpers that build or adapt a
transformation (`init_empty_state`, `stateless_with_tree_map`, `with_extra_args_support`) and
`incremental_update` (Polyak averaging), against Optax."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gradtx
from gradtx import core

from .helpers import assert_trees_close, compare_transformations, grad_sequence, mixed_params
from .optax_reference import compare_to_optax
from .transforms.common import ATOL, RTOL


def _recorder(log: list, factor: float = 1.0) -> gradtx.GradientTransformation:
    """Scales by `factor` and records the extra arguments it was given."""

    def init(params):
        del params
        return gradtx.EmptyState()

    def update(updates, state, params=None, **extra_args):
        log.append(dict(extra_args))
        return jax.tree.map(lambda g: g * factor, updates), state

    return gradtx.GradientTransformation(init, update)


def test_gradient_transformation_is_a_named_tuple_of_two_functions():
    tx = gradtx.identity()
    assert isinstance(tx, tuple)
    assert tx._fields == ("init", "update")
    init, update = tx
    assert init is tx.init and update is tx.update


def test_identity_and_empty_state():
    params = mixed_params()
    tx = gradtx.identity()
    state = tx.init(params)
    assert state == gradtx.EmptyState()
    g = grad_sequence(params, 1)[0]
    out, new_state = tx.update(g, state, value=1.0)
    assert out is g and new_state == state


def test_stateless_gets_updates_and_params():
    params = {"w": jnp.array([1.0, 2.0])}
    tx = gradtx.stateless(lambda u, p: jax.tree.map(lambda g, w: g * w, u, p))
    state = tx.init(params)
    out, _ = tx.update({"w": jnp.array([3.0, 3.0])}, state, params, value=0.0)
    np.testing.assert_allclose(out["w"], [3.0, 6.0])
    with pytest.raises(TypeError, match="stateless: fn must be callable"):
        gradtx.stateless(3.0)  # type: ignore[arg-type]


def test_chain_applies_in_order_and_keeps_a_tuple_state(use_jit):
    params = mixed_params()
    tx = gradtx.chain(gradtx.scale(2.0), gradtx.trace(0.5), gradtx.scale(-0.1))
    state = tx.init(params)
    assert isinstance(state, tuple) and len(state) == 3
    step = jax.jit(tx.update) if use_jit else tx.update
    trace = jax.tree.map(jnp.zeros_like, params)
    for g in grad_sequence(params, 5):
        out, state = step(g, state)
        trace = jax.tree.map(lambda t, x: 2.0 * x + 0.5 * t, trace, g)
        for a, b in zip(jax.tree.leaves(out), jax.tree.leaves(trace), strict=True):
            np.testing.assert_allclose(a, -0.1 * b, rtol=1e-6, atol=1e-7)


def test_chain_forwards_extra_args_to_every_member():
    log: list = []
    tx = gradtx.chain(_recorder(log), gradtx.sgd(0.1), _recorder(log))
    params = {"w": jnp.ones(2)}
    tx.update({"w": jnp.ones(2)}, tx.init(params), params, value=3.0, other="x")
    assert log == [{"value": 3.0, "other": "x"}] * 2


def test_optax_transformation_inside_gradtx_chain_gets_only_what_it_accepts():
    # optax.scale_by_adam's update takes no **extra_args: the chain must not pass `value`.
    tx = gradtx.chain(optax.scale_by_adam(), gradtx.scale_by_learning_rate(1e-2))
    compare_transformations(tx, optax.adam(1e-2), steps=50, extra_args=[{"value": 1.0}] * 50)


def test_chain_rejects_non_transformations_with_a_hint():
    with pytest.raises(TypeError, match=r"chain: argument 1 .*did you pass a factory"):
        gradtx.chain(gradtx.identity(), gradtx.sgd)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="chain: argument 0 must be a GradientTransformation"):
        gradtx.chain(1.0)  # type: ignore[arg-type]


def test_chain_rejects_a_state_of_the_wrong_shape():
    tx = gradtx.chain(gradtx.identity(), gradtx.identity())
    with pytest.raises(ValueError, match="chain: expected a state tuple of 2"):
        tx.update({"w": jnp.ones(1)}, (gradtx.EmptyState(),))


def test_named_chain_state_is_addressable_by_name():
    params = mixed_params()
    tx = gradtx.named_chain(("momentum", gradtx.trace(0.9)), ("lr", gradtx.scale(-0.1)))
    state = tx.init(params)
    assert list(state) == ["momentum", "lr"]
    g = grad_sequence(params, 1)[0]
    updates, state = tx.update(g, state, value=1.0)
    np.testing.assert_allclose(
        gradtx.tree.get(state, "momentum").trace["dense"]["kernel"], g["dense"]["kernel"]
    )
    ref, _ = gradtx.chain(gradtx.trace(0.9), gradtx.scale(-0.1)).update(
        g, gradtx.chain(gradtx.trace(0.9), gradtx.scale(-0.1)).init(params)
    )
    for a, b in zip(jax.tree.leaves(updates), jax.tree.leaves(ref), strict=True):
        np.testing.assert_array_equal(a, b)


def test_named_chain_accepts_its_state_back_from_jit_with_sorted_keys():
    # regression: JAX rebuilds dicts with sorted keys, so a state returned by a jitted step came
    # back as {"lr", "momentum"} and the next update rejected it
    tx = gradtx.named_chain(("momentum", gradtx.trace(0.9)), ("lr", gradtx.scale(-0.1)))
    params = {"w": jnp.ones(2)}
    step = jax.jit(tx.update)
    state = tx.init(params)
    for _ in range(2):
        updates, state = step(params, state)
    assert sorted(state) == ["lr", "momentum"]
    np.testing.assert_allclose(updates["w"], -0.1 * 1.9)


def test_named_chain_validates_its_arguments():
    with pytest.raises(ValueError, match="'a' is used twice"):
        gradtx.named_chain(("a", gradtx.identity()), ("a", gradtx.identity()))
    with pytest.raises(TypeError, match=r"argument 0 must be a \(name, transformation\) pair"):
        gradtx.named_chain(gradtx.identity())  # type: ignore[arg-type]
    tx = gradtx.named_chain(("a", gradtx.identity()))
    with pytest.raises(ValueError, match=r"expected a state dict with keys \['a'\]"):
        tx.update({}, {"b": gradtx.EmptyState()})


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16, jnp.float32])
def test_apply_updates_keeps_param_dtypes_and_passes_none(dtype):
    params = mixed_params(dtype=dtype)
    updates = jax.tree.map(lambda p: jnp.ones(p.shape, jnp.float32), params)
    out = gradtx.apply_updates(params, updates)
    assert jax.tree.structure(out) == jax.tree.structure(params)
    assert out["none"] is None and out["layers"][1]["frozen"] is None
    for p, o in zip(jax.tree.leaves(params), jax.tree.leaves(out), strict=True):
        assert o.dtype == dtype
        np.testing.assert_allclose(np.float32(o), np.float32((p + 1.0).astype(dtype)))


def test_apply_updates_names_the_first_differing_path():
    params = {"a": jnp.ones(2), "b": {"c": jnp.ones(1)}}
    with pytest.raises(ValueError, match=r"apply_updates: params and updates differ at 'b'"):
        gradtx.apply_updates(params, {"a": jnp.ones(2), "b": {"d": jnp.ones(1)}})
    with pytest.raises(ValueError, match=r"differ at 'b/c': params has a leaf float32\[1\]"):
        gradtx.apply_updates(params, {"a": jnp.ones(2), "b": {"c": None}})


def test_mismatched_updates_and_state_name_transformation_path_and_kinds():
    tx = gradtx.sgd(0.1, momentum=0.9)
    state = tx.init({"layer": {"w": jnp.ones(3), "b": jnp.ones(2)}})
    with pytest.raises(ValueError) as err:
        tx.update({"layer": {"w": jnp.ones(3), "bias": jnp.ones(2)}}, state)
    msg = str(err.value)
    # raised by the primitive `trace`, named after the alias the user called
    assert msg.startswith("sgd: trace: updates and state.trace differ at 'layer'")
    assert "only in updates: ['bias']" in msg and "only in state.trace: ['b']" in msg
    with pytest.raises(ValueError, match=r"differ at the root: updates has a list of length 1"):
        tx.update([jnp.ones(3)], state)


def test_transformation_that_needs_params_names_itself():
    tx = gradtx.weight_decay(1e-4)
    with pytest.raises(ValueError, match=r"^weight_decay needs the current parameters"):
        tx.update({"w": jnp.ones(2)}, tx.init({"w": jnp.ones(2)}))


def test_apply_updates_refuses_an_update_of_another_shape():
    params = {"enc": {"w": jnp.zeros(())}, "b": jnp.zeros(2)}
    updates = {"enc": {"w": jnp.zeros(3)}, "b": jnp.zeros(2)}
    with pytest.raises(
        ValueError, match=r"apply_updates: the update at \['enc'\]\['w'\] has shape"
    ):
        gradtx.apply_updates(params, updates)
    with pytest.raises(ValueError, match=r"has shape \(3,\) but its parameter has shape \(\)"):
        jax.jit(gradtx.apply_updates)(params, updates)


# --------------------------------------------------------------------------------------------
# helpers that build or adapt a transformation: init_empty_state, stateless_with_tree_map,
# with_extra_args_support
# --------------------------------------------------------------------------------------------


def test_init_empty_state_and_stateless_with_tree_map():
    assert core.init_empty_state({"a": jnp.ones(2)}) == gradtx.EmptyState()
    params = mixed_params()
    f = lambda g, p: g * 2.0 if p is None else g * p
    compare_to_optax(
        core.stateless_with_tree_map(f),
        optax.stateless_with_tree_map(f),
        jit=False,
        steps=3,
        params=params,
        reference_jit=False,
    )
    ours, ref = core.stateless_with_tree_map(f), optax.stateless_with_tree_map(f)
    g = grad_sequence(params, 1)[0]
    u, state = ours.update(g, ours.init(params))  # no params: f gets None
    assert_trees_close(u, ref.update(g, ref.init(params))[0], RTOL, ATOL)
    assert state == gradtx.EmptyState()
    with pytest.raises(TypeError, match="stateless_with_tree_map: f must be callable"):
        core.stateless_with_tree_map(3)
    with pytest.raises(ValueError, match="stateless_with_tree_map"):
        ours.update({"a": jnp.ones(1)}, gradtx.EmptyState(), {"b": jnp.ones(1)})


def test_with_extra_args_support():
    tx = gradtx.adam(1e-3)
    assert core.with_extra_args_support(tx) is tx  # already accepts **extra_args
    plain = optax.sgd(0.1)  # an update without **extra_args
    wrapped = core.with_extra_args_support(plain)
    params = {"w": jnp.ones(2)}
    u, _ = wrapped.update(params, wrapped.init(params), params, value=1.0, other="x")
    ref = optax.with_extra_args_support(plain)
    ue, _ = ref.update(params, ref.init(params), params, value=1.0)
    assert_trees_close(u, ue, 0, 0)
    with pytest.raises(TypeError, match="with_extra_args_support: tx must be"):
        core.with_extra_args_support(optax.sgd)


# --------------------------------------------------------------------------------------------
# incremental_update (Polyak averaging), with periodic_update alongside
# --------------------------------------------------------------------------------------------


def test_incremental_and_periodic_update_match_optax():
    rng = np.random.default_rng(3)
    new = {"w": jnp.asarray(rng.normal(size=(3, 2)), jnp.float32), "s": jnp.float32(2.0)}
    old = {"w": jnp.asarray(rng.normal(size=(3, 2)), jnp.float32), "s": jnp.float32(-1.0)}
    for tau in (0.0, 0.01, 0.5, 1.0):
        got = core.incremental_update(new, old, tau)
        assert_trees_close(got, optax.incremental_update(new, old, tau), RTOL, ATOL)
    traced = jax.jit(core.incremental_update)(new, old, 0.3)
    assert_trees_close(traced, optax.incremental_update(new, old, 0.3), RTOL, ATOL)
    for step in range(6):
        got = gradtx.periodic_update(new, old, step, 3)
        assert_trees_close(got, optax.periodic_update(new, old, step, 3), 0, 0)
    # None leaves pass through; the average keeps its dtype
    got = core.incremental_update(
        {"a": jnp.ones(2), "n": None}, {"a": jnp.zeros(2, jnp.bfloat16), "n": None}, 0.5
    )
    assert got["n"] is None and got["a"].dtype == jnp.bfloat16


def test_incremental_update_errors():
    with pytest.raises(gradtx.HyperparameterError, match=r"incremental_update.*step_size.*\[0"):
        core.incremental_update({"a": 1.0}, {"a": 0.0}, 1.5)
    with pytest.raises(ValueError, match=r"incremental_update.*'b'"):
        core.incremental_update({"a": jnp.ones(1)}, {"b": jnp.ones(1)}, 0.5)


def test_an_eager_adamw_update_stays_shallow():
    # Issue 46's targets for the path of one optimizer step (counts, not times; Optax: 14
    # functions, 7 files, 6 deep): python -m benchmarks.code_shape prints them.
    from benchmarks.code_shape import adamw_trace

    trace = adamw_trace()
    assert trace["functions"] <= 20, trace
    assert len(trace["files"]) <= 6, trace
    assert trace["depth"] <= 6, trace
