"""multi_transform, masked, freeze, lr_multipliers, scale_gradient_by."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gradtx

from ..helpers import assert_trees_close, grad_sequence, mixed_params, run

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
