"""multi_transform, masked, freeze, lr_multipliers, scale_gradient_by; against Optax: single-array
trees, 0-d boolean masks, callable pytree masks (an Equinox-like module), inner error types kept,
the pruned state layout (`MaskedNode()` per pruned subtree), `map_params` through the wrappers, and
Optax's state names (PartitionState, freeze's MaskedState, MaskedNode)."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gradtx
from gradtx import wrappers as gw
from gradtx.wrappers._partition import MaskedNode

from ..helpers import assert_trees_close, grad_sequence, mixed_params, run
from .common import _grads, _steps, adam_01, assert_close, normal_grads, small_tree

STEPS = 30


def _clipped_adam():
    # the global-norm clip makes the group's result depend on which leaves are in the group
    return gradtx.chain(gradtx.clip_by_global_norm(0.5), gradtx.adam(0.05))


def _momentum():
    return gradtx.sgd(0.1, momentum=0.9)


def _flat(tree):
    return dict(zip(gradtx.tree.paths(tree), jax.tree.leaves(tree), strict=True))


def _run_alone(tx, params, grads, group):
    """`tx` run on a flat dict of just the leaves in `group` (paths): per-path updates per step."""
    sub = lambda t: {p: x for p, x in _flat(t).items() if p in group}
    ups, _, _ = run(tx, sub(params), [sub(g) for g in grads])
    return ups


def _check_groups(tx, groups, params, grads):
    """Each group's updates equal its optimizer run alone on that group."""
    ours, _, _ = run(tx, params, grads)
    for group_tx, group in groups:
        ref = _run_alone(group_tx, params, grads, group)
        for i, (u, r) in enumerate(zip(ours, ref, strict=True)):
            got = {p: x for p, x in _flat(u).items() if p in group}
            assert set(got) == set(group)
            for p in group:
                np.testing.assert_allclose(got[p], r[p], rtol=1e-6, atol=1e-7, err_msg=f"{i} {p}")


ADAM_PATHS = ["dense/kernel", "layers/1/w", "pair/b/1"]


def _labels_tree(params):
    return gradtx.tree.map_with_path(lambda p, _: "adam" if p in ADAM_PATHS else "sgd", params)


@pytest.mark.parametrize("form", ["tree", "callable", "patterns", "prefix"])
def test_multi_transform_groups_equal_their_optimizer_alone(form):
    params = mixed_params()
    grads = grad_sequence(params, STEPS)
    labels = {
        "tree": _labels_tree(params),
        "callable": _labels_tree,
        "patterns": gradtx.labels_by_pattern(
            {"dense/kernel": "adam", "**/w": "adam", "pair/b/1": "adam", "**": "sgd"}
        ),
        "prefix": None,
    }[form]
    groups = [(_clipped_adam(), ADAM_PATHS)]
    if form == "prefix":
        labels = {"dense": "adam", "layers": "sgd", "pair": "sgd", "empty": "sgd", "none": "sgd"}
        groups = [(_clipped_adam(), ["dense/kernel", "dense/bias"])]
    all_paths = gradtx.tree.paths(params)
    adam_paths = groups[0][1]
    groups.append((_momentum(), [p for p in all_paths if p not in adam_paths]))
    tx = gradtx.multi_transform({"adam": _clipped_adam(), "sgd": _momentum()}, labels)
    _check_groups(tx, groups, params, grads)


def test_multi_transform_matches_optax():
    params = mixed_params()
    labels = _labels_tree(params)
    ours, _, _ = run(
        gradtx.multi_transform({"adam": gradtx.adam(0.05), "sgd": _momentum()}, labels),
        params,
        grad_sequence(params, STEPS),
    )
    ref, _, _ = run(
        optax.multi_transform({"adam": optax.adam(0.05), "sgd": optax.sgd(0.1, 0.9)}, labels),
        params,
        grad_sequence(params, STEPS),
    )
    for i, (a, b) in enumerate(zip(ours, ref, strict=True)):
        assert_trees_close(a, b, 1e-6, 1e-7, msg=f"step {i}")


def test_multi_transform_keeps_state_only_for_each_group():
    params = mixed_params()
    tx = gradtx.multi_transform(
        {"adam": gradtx.adam(0.1), "sgd": _momentum()}, _labels_tree(params)
    )
    state = tx.init(params)
    adam_state = state.inner_states["adam"]
    assert gradtx.tree.paths(gradtx.tree.get(adam_state, "mu")) == ADAM_PATHS
    n_leaves = len(jax.tree.leaves(params))
    assert len(jax.tree.leaves(gradtx.tree.get(state.inner_states["sgd"], "trace"))) == n_leaves - 3


def test_multi_transform_state_survives_jit_with_unsorted_labels():
    params = {"a": jnp.ones(2), "b": jnp.ones(2)}
    tx = gradtx.multi_transform(
        {"sgd": gradtx.sgd(0.1), "adam": gradtx.adam(0.1)}, {"a": "sgd", "b": "adam"}
    )
    step = jax.jit(tx.update)
    state = tx.init(params)
    for _ in range(3):  # the state comes back from jit with its dict keys sorted
        updates, state = step(params, state, params)
    np.testing.assert_allclose(updates["a"], -0.1)
    with pytest.raises(ValueError, match=r"expected inner states for labels \['sgd', 'adam'\]"):
        tx.update(params, gradtx.MultiTransformState({"sgd": state.inner_states["sgd"]}))


def test_first_matching_pattern_wins_and_default_label():
    params = {"a": {"w": jnp.ones(2), "b": jnp.ones(2)}, "c": jnp.ones(2)}
    tx = gradtx.multi_transform(
        {"zero": gradtx.freeze(True), "sgd": gradtx.sgd(1.0)},
        gradtx.labels_by_pattern({"a/b": "zero", "a/*": "sgd"}),
        default_label="zero",
    )
    u, _ = tx.update(jax.tree.map(jnp.ones_like, params), tx.init(params), params)
    np.testing.assert_array_equal(u["a"]["b"], 0.0)  # "a/b" came first
    np.testing.assert_array_equal(u["a"]["w"], -1.0)
    np.testing.assert_array_equal(u["c"], 0.0)  # default label


def test_label_errors_are_raised_at_init():
    params = {"enc": {"w": jnp.ones(2)}, "head": {"w": jnp.ones(2), "b": jnp.ones(1)}}
    txs = {"adam": gradtx.adam(0.1), "sgd": gradtx.sgd(0.1)}
    by = gradtx.labels_by_pattern
    with pytest.raises(
        ValueError,
        match=r"^multi_transform: labels_by_pattern: pattern 'encoder/\*\*' in rules "
        r"matches no parameter.*available paths: \['enc/w', 'head/b', 'head/w'\]",
    ):
        gradtx.multi_transform(txs, by({"encoder/**": "adam", "**": "sgd"})).init(params)
    # strict=False accepts it
    gradtx.multi_transform(txs, by({"encoder/**": "adam", "**": "sgd"}, strict=False)).init(params)
    with pytest.raises(ValueError, match=r"only matches paths that earlier patterns already took"):
        gradtx.multi_transform(txs, by({"**": "sgd", "enc/**": "adam"})).init(params)
    with pytest.raises(ValueError, match=r"these parameters have no label: \['head/b', 'head/w'\]"):
        gradtx.multi_transform(txs, by({"enc/**": "adam"})).init(params)
    with pytest.raises(ValueError, match=r"label 'adma'.*did you mean 'adam'"):
        gradtx.multi_transform(txs, by({"**": "adma"})).init(params)
    with pytest.raises(ValueError, match=r"these parameters have no label: \['head/b'\]"):
        gradtx.multi_transform(
            txs, lambda p: {"enc": "adam", "head": {"w": "sgd", "b": None}}
        ).init(params)
    with pytest.raises(ValueError, match=r"default_label 'sdg'.*did you mean 'sgd'"):
        gradtx.multi_transform(txs, by({"**": "sgd"}), default_label="sdg")
    with pytest.raises(
        ValueError,
        match=r"multi_transform: param_labels must have the params' tree structure or be a "
        r"prefix of it; they differ at 'head': param_labels has a dict with keys \['w'\], "
        r"params have a dict with keys \['b', 'w'\]",
    ):
        gradtx.multi_transform(txs, {"enc": "adam", "head": {"w": "sgd"}}).init(params)


def test_a_dict_of_labels_is_always_a_tree_never_patterns():
    # Today's guess read these keys as globs; a dict is a (prefix) tree of labels.
    params = {"encoder": {"w": jnp.ones(2)}, "head": {"w": jnp.ones(2)}, "embed": jnp.ones(3)}
    txs = {"a": gradtx.sgd(0.1), "b": gradtx.sgd(1.0)}
    with pytest.raises(
        ValueError,
        match=r"^multi_transform: param_labels must have the params' tree structure or be a "
        r"prefix of it; they differ at the root: param_labels has a dict with keys "
        r"\['encoder', 'head'\], params have a dict with keys \['embed', 'encoder', 'head'\]$",
    ):
        gradtx.multi_transform(txs, {"encoder": "a", "head": "b"}).init(params)
    # the same keys as the params: a prefix tree
    tx = gradtx.multi_transform(txs, {"encoder": "a", "head": "b", "embed": "a"})
    u, _ = tx.update(params, tx.init(params))
    np.testing.assert_allclose(u["head"]["w"], -1.0)
    np.testing.assert_allclose(u["encoder"]["w"], -0.1)
    # glob-looking keys are not guessed either: the error says how to use patterns
    with pytest.raises(
        ValueError,
        match=r"they differ at the root.*to label them by glob patterns, pass "
        r"gradtx.labels_by_pattern\(\{'encoder/\*\*': 'a', '\*\*': 'b'\}\)",
    ):
        gradtx.multi_transform(txs, {"encoder/**": "a", "**": "b"}).init(params)


def test_labels_by_pattern_is_a_callable_that_optax_accepts_too():
    params = mixed_params()
    labels = gradtx.labels_by_pattern({"dense/**": "adam", "**/w": "adam", "**": "sgd"})
    assert jax.tree.leaves(labels(params)) == [
        "sgd" if p not in [*ADAM_PATHS[:2], "dense/bias"] else "adam"
        for p in gradtx.tree.paths(params)
    ]
    ours, _, _ = run(
        gradtx.multi_transform({"adam": gradtx.adam(0.05), "sgd": _momentum()}, labels),
        params,
        grad_sequence(params, 5),
    )
    ref, _, _ = run(
        optax.multi_transform({"adam": optax.adam(0.05), "sgd": optax.sgd(0.1, 0.9)}, labels),
        params,
        grad_sequence(params, 5),
    )
    for i, (a, b) in enumerate(zip(ours, ref, strict=True)):
        assert_trees_close(a, b, 1e-6, 1e-7, msg=f"step {i}")


@pytest.mark.parametrize(
    ("rules", "message"),
    [
        ({}, "rules must be a non-empty dict"),
        ([("**", "a")], "rules must be a non-empty dict"),
        ({1: "a"}, "the keys of rules must be glob patterns, got 1"),
        ({"**": None}, r"rules\['\*\*'\] must be a label .*got None"),
        ({"**": ["a"]}, r"rules\['\*\*'\] must be a label .*got \['a'\]"),
    ],
)
def test_labels_by_pattern_validates_eagerly(rules, message):
    with pytest.raises(ValueError, match=rf"^labels_by_pattern: {message}"):
        gradtx.labels_by_pattern(rules)


def test_masked_matches_optax_and_passes_others_through():
    params = mixed_params()
    mask = lambda p: jax.tree.map(lambda x: x.ndim >= 2, p)
    ours, _, _ = run(gradtx.masked(gradtx.adam(0.05), mask), params, grad_sequence(params, STEPS))
    ref, _, _ = run(optax.masked(optax.adam(0.05), mask), params, grad_sequence(params, STEPS))
    grads = grad_sequence(params, STEPS)
    for i, (a, b) in enumerate(zip(ours, ref, strict=True)):
        assert_trees_close(a, b, 1e-6, 1e-7, msg=f"step {i}")
        for x, g, m in zip(
            jax.tree.leaves(a),
            jax.tree.leaves(grads[i]),
            jax.tree.leaves(mask(params)),
            strict=True,
        ):
            if not m:
                np.testing.assert_array_equal(x, g)  # passed through unchanged
    state = gradtx.masked(gradtx.adam(0.05), mask).init(params)
    assert gradtx.tree.paths(gradtx.tree.get(state, "mu")) == [
        "dense/kernel",
        "layers/1/w",
        "pair/a",
        "pair/b/1",
    ]


@pytest.mark.parametrize("form", ["with_tx", "stateless"])
def test_freeze_gives_exact_zeros_and_no_state(form):
    params = mixed_params()
    frozen = ["dense/**", "pair/b/0"]
    grads = grad_sequence(params, STEPS)
    if form == "with_tx":
        tx = gradtx.freeze(frozen, tx=_clipped_adam())
        state = tx.init(params)
        mu_paths = gradtx.tree.paths(gradtx.tree.get(state, "mu"))
        assert not any(p.startswith("dense/") or p == "pair/b/0" for p in mu_paths)
        assert len(mu_paths) == len(gradtx.tree.paths(params)) - 3
        trainable = [p for p in gradtx.tree.paths(params) if p not in mu_paths]
        assert sorted(trainable) == ["dense/bias", "dense/kernel", "pair/b/0"]
        _check_groups(tx, [(_clipped_adam(), mu_paths)], params, grads)
    else:
        tx = gradtx.chain(gradtx.adam(0.1), gradtx.freeze(frozen))
    ours, _, final = run(tx, params, grads)
    for u in ours:
        flat = _flat(u)
        for p in ["dense/kernel", "dense/bias", "pair/b/0"]:
            assert np.all(np.asarray(flat[p]) == 0.0)
    np.testing.assert_array_equal(final["dense"]["kernel"], params["dense"]["kernel"])


def test_lr_multipliers_scale_the_optimizer_and_freeze_zero():
    params = mixed_params()
    grads = grad_sequence(params, STEPS)
    rules = {"dense/kernel": 0.0, "layers/**": 0.5, "pair/a": 3.0}
    tx = gradtx.lr_multipliers(rules, default=1.0, tx=gradtx.adam(0.05))
    state = tx.init(params)
    assert "dense/kernel" not in gradtx.tree.paths(gradtx.tree.get(state, "mu"))
    ours, _, _ = run(tx, params, grads)
    trained = [p for p in gradtx.tree.paths(params) if p != "dense/kernel"]
    ref = _run_alone(gradtx.adam(0.05), params, grads, trained)
    factor = {"layers/0": 0.5, "layers/1/w": 0.5, "pair/a": 3.0}
    for i, (u, r) in enumerate(zip(ours, ref, strict=True)):
        flat = _flat(u)
        assert np.all(np.asarray(flat["dense/kernel"]) == 0.0)
        for p in trained:
            np.testing.assert_allclose(
                flat[p], factor.get(p, 1.0) * r[p], rtol=1e-6, atol=1e-7, err_msg=f"step {i} {p}"
            )
    # stateless form: scales whatever comes in
    u, _ = gradtx.lr_multipliers({"a": 2.0, "b": 0.0}).update(
        {"a": jnp.ones(2), "b": jnp.ones(2)}, gradtx.EmptyState()
    )
    np.testing.assert_array_equal(u["a"], 2.0)
    np.testing.assert_array_equal(u["b"], 0.0)


def test_factor_validation():
    with pytest.raises(
        ValueError,
        match=r"lr_multipliers: rules\['a'\] must be a finite number "
        r">= 0, got -1.0",
    ):
        gradtx.lr_multipliers({"a": -1.0})
    with pytest.raises(ValueError, match=r"lr_multipliers: default must be a finite number"):
        gradtx.lr_multipliers({"a": 1.0}, default=float("nan"))
    with pytest.raises(ValueError, match=r"scale_gradient_by: rules must be a dict"):
        gradtx.scale_gradient_by([("a", 1.0)])  # type: ignore[arg-type]
    with pytest.raises(
        ValueError,
        match=r"lr_multipliers: pattern 'dens/\*\*' in rules matches "
        r"no parameter \(did you mean",
    ):
        gradtx.lr_multipliers({"dens/**": 0.1}, tx=gradtx.sgd(0.1)).init({"dense": {"w": 1.0}})


def test_scale_gradient_by():
    params = {"q": {"d": jnp.ones(2), "xmax": jnp.ones(1)}, "w": jnp.ones(3)}
    tx = gradtx.scale_gradient_by({"q/d": 0.01, "q/*": -1.0})
    g = jax.tree.map(lambda x: 2 * jnp.ones_like(x), params)
    u, _ = jax.jit(tx.update)(g, tx.init(params))
    np.testing.assert_allclose(u["q"]["d"], 0.02)
    np.testing.assert_array_equal(u["q"]["xmax"], -2.0)
    np.testing.assert_array_equal(u["w"], 2.0)
    bf = jax.tree.map(lambda x: x.astype(jnp.bfloat16), g)
    assert all(x.dtype == jnp.bfloat16 for x in jax.tree.leaves(tx.update(bf, tx.init(params))[0]))


def test_masked_and_freeze_patterns_that_match_nothing():
    params = {"enc": {"w": jnp.ones(2)}, "head": {"b": jnp.ones(1)}}
    for make in (
        lambda strict: gradtx.masked(gradtx.adam(0.1), "**/kernel", strict=strict),
        lambda strict: gradtx.freeze("encoder/**", tx=gradtx.adam(0.1), strict=strict),
        lambda strict: gradtx.freeze("encoder/**", strict=strict),
    ):
        tx = make(True)
        with pytest.raises(
            ValueError,
            match=r"(masked|freeze): .*matches no parameter.*"
            r"available paths: \['enc/w', 'head/b'\]",
        ):
            tx.update(params, tx.init(params), params)
        tx = make(False)  # the opt-out: nothing selected, nothing frozen
        u, _ = tx.update(params, tx.init(params), params)
        assert all(np.all(np.asarray(x) != 0.0) for x in jax.tree.leaves(u))


# --------------------------------------------------------------------------------------------
# single-array trees, inner error types, 0-d and callable pytree masks (against Optax)
# --------------------------------------------------------------------------------------------


# --- an empty partition of a single-array tree gets the (pruned) params, never None ----------


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


# --- an inner ValueError subclass keeps its type ---------------------------------------------


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


# --- freeze broadcasts a 0-d boolean array mask ----------------------------------------------


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


# --- a callable pytree mask is a tree (Optax issue #913) --------------------------------------


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


# --------------------------------------------------------------------------------------------
# the pruned layout and map_params through masked / freeze / multi_transform
# --------------------------------------------------------------------------------------------


def _params():
    return {
        "a": [jnp.ones(1), (jnp.ones(2), jnp.ones(3))],
        "b": {"c": jnp.ones(4), "d": jnp.ones(5)},
    }


def test_masked_state_layout_is_optax_with_masked_nodes_per_prefix():
    mask = {"a": [True, (True, False)], "b": False}
    ours = gradtx.masked(gradtx.trace(0.0), mask).init(_params())
    theirs = optax.masked(optax.trace(0.0), mask).init(_params())
    assert isinstance(ours.inner_state.trace["b"], gradtx.MaskedNode)
    assert isinstance(ours.inner_state.trace["a"][1][1], gradtx.MaskedNode)
    names = lambda t: str(jax.tree.structure(t)).replace("optax", "").replace("gradtx", "")
    assert names(ours.inner_state.trace) == names(theirs.inner_state.trace)


def test_masked_prefix_mask_updates_and_nested_masks():
    params = {"a": jnp.ones(2), "b": {"f": jnp.ones(2)}, "c": {"d": jnp.ones(1), "e": jnp.ones(3)}}
    mask = {"a": True, "b": False, "c": {"d": False, "e": True}}
    tx = gradtx.masked(gradtx.sgd(1.0, momentum=0.0), mask)
    state = jax.jit(tx.init)(params)
    u, state = jax.jit(tx.update)(params, state, params)
    np.testing.assert_allclose(u["a"], -1.0)
    np.testing.assert_allclose(u["b"]["f"], 1.0)
    np.testing.assert_allclose(u["c"]["e"], -1.0)
    outer = gradtx.masked(tx, lambda p: jax.tree.map(lambda x: x.shape[0] > 1, p))
    u, _ = outer.update(params, outer.init(params), params)
    np.testing.assert_allclose(u["c"]["d"], 1.0)
    np.testing.assert_allclose(u["a"], -1.0)


def test_map_params_reaches_through_masked_freeze_and_multi_transform():
    params = {"w": jnp.zeros((1, 2)), "b": jnp.zeros((3,))}
    mask = {"w": True, "b": False}
    for tx in (
        gradtx.masked(gradtx.sgd(1.0, momentum=0.9), mask),
        gradtx.freeze(mask, tx=gradtx.sgd(1.0, momentum=0.9)),
        gradtx.freeze(mask),
        gradtx.lr_multipliers({"b": 0.0}, tx=gradtx.sgd(1.0, momentum=0.9)),
        gradtx.lr_multipliers({"b": 2.0}),
        gradtx.multi_transform(
            {"x": gradtx.sgd(1.0, momentum=0.9), "y": gradtx.adam(1.0)},
            mask and {"w": "x", "b": "y"},
        ),
    ):
        state = tx.init(params)
        out = gradtx.tree.map_params(tx, lambda v: v + 1, state)
        assert jax.tree.structure(out) == jax.tree.structure(state)
    tx = gradtx.masked(gradtx.sgd(1.0, momentum=0.9), mask)
    specs = gradtx.tree.map_params(
        tx,
        lambda p, axis: None if isinstance(p, gradtx.MaskedNode) else axis,
        tx.init(params),
        {"w": 1, "b": 2},
        is_leaf=lambda v: isinstance(v, gradtx.MaskedNode),
        transform_non_params=lambda _: None,
    )
    assert gradtx.tree.get(specs, "trace") == {"w": 1, "b": None}


# --------------------------------------------------------------------------------------------
# PartitionState, freeze's MaskedState, MaskedNode
# --------------------------------------------------------------------------------------------


def test_partition_state_is_optax_partition_state():
    assert gw.PartitionState is gw.MultiTransformState
    assert gw.PartitionState.__name__ == "PartitionState"
    assert gw.PartitionState._fields == optax.PartitionState._fields
    params = small_tree()
    labels = {"w": "adam", "b": "sgd"}
    ours = gradtx.partition({"adam": adam_01(gradtx), "sgd": gradtx.sgd(0.1)}, labels)
    theirs = optax.partition({"adam": adam_01(optax), "sgd": optax.sgd(0.1)}, labels)
    s, r = ours.init(params), theirs.init(params)
    assert type(s) is gw.PartitionState and set(s.inner_states) == set(r.inner_states)
    assert type(gradtx.multi_transform({"a": gradtx.sgd(1.0)}, "a").init(params)) is (
        gw.PartitionState
    )
    for g in normal_grads(params, 3, seed=11):
        u, s = ours.update(g, s, params)
        v, r = theirs.update(g, r, params)
        assert_close(u, v)


@pytest.mark.parametrize("mask", [{"w": True, "b": False}, True, False], ids=str)
def test_freeze_state_is_optax_masked_state(mask):
    params = small_tree()
    ours, theirs = gradtx.freeze(mask), optax.freeze(mask)
    s, r = ours.init(params), theirs.init(params)
    assert type(s) is gradtx.MaskedState and type(s.inner_state) is gradtx.EmptyState
    assert type(r).__name__ == "MaskedState" and type(r.inner_state).__name__ == "EmptyState"
    assert gradtx.MaskedState._fields == type(r)._fields
    for g in normal_grads(params, 2, seed=12):
        u, s = ours.update(g, s, params)
        v, r = theirs.update(g, r, params)
        jax.tree.map(np.testing.assert_array_equal, u, v)
    assert type(s) is gradtx.MaskedState
    # a state from before (EmptyState) still works: the state holds no buffers
    u, legacy = ours.update(params, gradtx.EmptyState(), params)
    assert legacy == gradtx.EmptyState()
    jax.tree.map(np.testing.assert_array_equal, u, ours.update(params, s, params)[0])


def test_masked_node_is_an_empty_tree_in_pruned_states():
    assert jax.tree.leaves(gw.MaskedNode()) == []
    assert type(optax.MaskedNode()).__name__ == gw.MaskedNode.__name__
    state = gradtx.masked(gradtx.adam(0.1), False).init(jnp.ones(2))
    nodes = jax.tree.leaves(state, is_leaf=lambda x: isinstance(x, gw.MaskedNode))
    assert any(isinstance(x, gw.MaskedNode) for x in nodes)
