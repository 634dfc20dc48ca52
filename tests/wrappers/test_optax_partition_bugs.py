"""Partition / mask cases that Optax 0.2.8's own test suite found when run against gradtx.

Each test failed before its fix: an empty partition of a single-array tree got `params=None`;
`freeze` did not broadcast a 0-d boolean array mask; a callable pytree mask (an Equinox-like
module) was called as a function. Error types raised inside partitions are kept as they are.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gradtx
from gradtx.wrappers._partition import MaskedNode


def _steps(tx, params, grads):
    state = tx.init(params)
    out = []
    for g in grads:
        u, state = tx.update(g, state, params)
        params = jax.tree.map(lambda p, d: p + d, params, u)
        out.append(params)
    return out


def _grads(shape, n=4, seed=0):
    keys = jax.random.split(jax.random.PRNGKey(seed), n)
    return [jax.random.normal(k, shape) for k in keys]


# --- 1. an empty partition of a single-array tree gets the (pruned) params, never None -------


@pytest.mark.parametrize("labels", ["a", lambda _: "a"], ids=["label", "function"])
def test_single_array_multi_transform_with_weight_decay_in_both_partitions(labels):
    params = jnp.linspace(-1.0, 1.0, 6).reshape(2, 3)
    grads = _grads(params.shape)
    ours = gradtx.multi_transform(
        {"a": gradtx.adamw(1e-2, weight_decay=0.1), "b": gradtx.adamw(1e-3, weight_decay=0.5)},
        labels,
    )
    ref = optax.multi_transform(
        {"a": optax.adamw(1e-2, weight_decay=0.1), "b": optax.adamw(1e-3, weight_decay=0.5)},
        labels,
    )
    for got, want in zip(_steps(ours, params, grads), _steps(ref, params, grads), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)


def test_empty_partition_of_single_array_gets_masked_node_params():
    seen = []

    def update(updates, state, params=None):
        seen.append(params)
        return updates, state

    spy = gradtx.GradientTransformation(lambda p: (), update)
    tx = gradtx.multi_transform({"a": gradtx.sgd(0.1), "b": spy}, "a")
    p = jnp.ones(3)
    tx.update(p, tx.init(p), p)
    assert seen == [MaskedNode()]
    seen.clear()
    tx.update(p, tx.init(p))  # no params given: None is passed on
    assert seen == [None]


@pytest.mark.parametrize("make", ["masked", "freeze", "lr_multipliers"])
def test_single_array_unselected_by_masked_freeze_lr_multipliers(make):
    p = jnp.ones(3)
    inner = gradtx.adamw(1e-2, weight_decay=0.1)
    tx = {
        "masked": lambda: gradtx.masked(inner, False),
        "freeze": lambda: gradtx.freeze(True, tx=inner),
        "lr_multipliers": lambda: gradtx.lr_multipliers({"**": 0.0}, tx=inner),
    }[make]()
    u, _ = tx.update(p, tx.init(p), p)
    np.testing.assert_array_equal(u, p if make == "masked" else jnp.zeros(3))


def test_contrib_muon_on_a_single_matrix_matches_optax():
    params = jnp.linspace(-1.0, 1.0, 12).reshape(3, 4)
    grads = _grads(params.shape)
    ours = _steps(gradtx.contrib.muon(1e-3), params, grads)
    ref = _steps(optax.contrib.muon(1e-3), params, grads)
    for got, want in zip(ours, ref, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)


# --- 2. an inner ValueError subclass keeps its type ------------------------------------------


class MyError(ValueError):
    pass


def _raising(error):
    def update(updates, state, params=None):
        raise error

    return gradtx.GradientTransformation(lambda p: (), update)


@pytest.mark.parametrize("part", [gradtx.multi_transform, gradtx.partition])
@pytest.mark.parametrize(
    "error",
    [MyError("boom"), MyError(), gradtx.HyperparameterError("inner", "rate", -1, ">= 0")],
    ids=["subclass", "no-args", "hyperparameter"],
)
def test_inner_error_keeps_its_type(part, error):
    params = ({"u": jnp.ones(1)}, {"v": jnp.ones(1)})
    tx = part({"a": gradtx.sgd(0.1), "b": _raising(error)}, ("a", "b"))
    with pytest.raises(type(error)) as info:
        tx.update(params, tx.init(params), params)
    assert type(info.value) is type(error)
    assert "multi_transform['b']" in str(info.value)


def test_error_from_labels_function_keeps_its_type():
    def labels(_):
        raise MyError("no labels")

    tx = gradtx.partition({"a": gradtx.sgd(0.1)}, labels)
    with pytest.raises(MyError, match=r"partition: .*no labels"):
        tx.init({"w": jnp.ones(2)})


# --- 3. freeze broadcasts a 0-d boolean array mask -------------------------------------------


@pytest.mark.parametrize(
    "mask",
    [jnp.array(True), np.array(True), np.bool_(True), True],
    ids=["jnp", "np", "np_bool", "bool"],
)
@pytest.mark.parametrize("with_tx", [False, True])
def test_freeze_broadcasts_a_0d_bool_mask(mask, with_tx):
    params = {"a": jnp.ones(2), "b": {"c": jnp.ones(3)}}
    tx = gradtx.freeze(mask, tx=gradtx.sgd(0.1) if with_tx else None)
    u, _ = tx.update(params, tx.init(params), params)
    ref = optax.freeze(mask)
    want, _ = ref.update(params, ref.init(params), params)
    jax.tree.map(np.testing.assert_array_equal, u, want)
    jax.tree.map(lambda x: np.testing.assert_array_equal(x, 0.0), u)


def test_0d_bool_array_in_a_prefix_mask():
    params = {"a": jnp.ones(2), "b": {"c": jnp.ones(3), "d": jnp.ones(1)}}
    tx = gradtx.masked(gradtx.scale(10.0), {"a": jnp.array(False), "b": np.array(True)})
    u, _ = tx.update(params, tx.init(params))
    np.testing.assert_array_equal(u["a"], jnp.ones(2))
    np.testing.assert_array_equal(u["b"]["c"], 10 * jnp.ones(3))


def test_non_bool_0d_array_mask_is_still_an_error():
    params = {"a": jnp.ones(2)}
    with pytest.raises(ValueError, match="freeze: "):
        gradtx.freeze(jnp.array(1.0)).init(params)


# --- 4. a callable pytree mask is a tree (Optax issue #913) -----------------------------------


@jax.tree_util.register_pytree_node_class
class Module:
    """An Equinox-like module: a registered pytree that is also callable."""

    def __init__(self, a, b):
        self.a, self.b = a, b

    def tree_flatten(self):
        return (self.a, self.b), None

    @classmethod
    def tree_unflatten(cls, aux, children):
        return cls(*children)

    def __call__(self, x):
        raise AssertionError("a mask tree must not be called")


def test_callable_pytree_mask_is_a_tree():
    params = Module(jnp.ones(2), {"w": jnp.ones(3)})
    tx = gradtx.masked(gradtx.scale(10.0), Module(True, False))
    u, _ = tx.update(params, tx.init(params), params)
    np.testing.assert_array_equal(u.a, 10 * jnp.ones(2))
    np.testing.assert_array_equal(u.b["w"], jnp.ones(3))
    ref = optax.masked(optax.scale(10.0), Module(True, {"w": False}))
    want, _ = ref.update(params, ref.init(params), params)
    jax.tree.map(np.testing.assert_array_equal, u, want)


def test_callable_pytree_freeze_mask_and_labels():
    params = Module(jnp.ones(2), jnp.ones(3))
    tx = gradtx.freeze(Module(False, True))
    u, _ = tx.update(params, tx.init(params))
    np.testing.assert_array_equal(u.a, jnp.ones(2))
    np.testing.assert_array_equal(u.b, jnp.zeros(3))
    for part in (gradtx.multi_transform, gradtx.partition):
        tx = part({"s": gradtx.sgd(1.0), "z": gradtx.set_to_zero()}, Module("s", "z"))
        u, _ = tx.update(params, tx.init(params))
        np.testing.assert_array_equal(u.a, -jnp.ones(2))
        np.testing.assert_array_equal(u.b, jnp.zeros(3))


def test_plain_functions_and_partials_stay_mask_functions():
    params = {"a": jnp.ones(2), "b": jnp.ones(3)}

    def pick(tree, key):
        return {k: k == key for k in tree}

    for mask in (
        lambda t: pick(t, "a"),
        functools.partial(pick, key="a"),
        jax.tree_util.Partial(pick, key="a"),
    ):
        tx = gradtx.masked(gradtx.scale(10.0), mask)
        u, _ = tx.update(params, tx.init(params))
        np.testing.assert_array_equal(u["a"], 10 * jnp.ones(2))
        np.testing.assert_array_equal(u["b"], jnp.ones(3))


def test_callable_pytree_not_shaped_like_params_is_called():
    class Chooser(Module):
        def __call__(self, tree):
            return jax.tree.map(lambda _: True, tree)

    jax.tree_util.register_pytree_node_class(Chooser)
    params = {"a": jnp.ones(2), "b": jnp.ones(3)}
    tx = gradtx.freeze(Chooser(1.0, 2.0))
    u, _ = tx.update(params, tx.init(params))
    jax.tree.map(lambda x: np.testing.assert_array_equal(x, 0.0), u)
