"""gradtx.tree: creation, arithmetic, reductions, paths, prefixes, get/set by name (glob patterns:
test_patterns.py)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradtx
from gradtx import tree

from .helpers import Pair, leaves64, mixed_params

# The leaf paths of mixed_params(), in flattening order.
MIXED_PATHS = [
    "dense/bias",
    "dense/kernel",
    "layers/0",
    "layers/1/w",
    "pair/a",
    "pair/b/0",
    "pair/b/1",
]


def test_zeros_ones_full_like_keep_structure_and_choose_dtype():
    params = mixed_params()
    for fn, value in ((tree.zeros_like, 0.0), (tree.ones_like, 1.0)):
        out = fn(params)
        assert jax.tree.structure(out) == jax.tree.structure(params)
        assert all(np.all(np.asarray(x) == value) for x in jax.tree.leaves(out))
    full = tree.full_like(params, 3, dtype=jnp.bfloat16)
    assert all(
        x.dtype == jnp.bfloat16 and np.all(np.float32(x) == 3) for x in jax.tree.leaves(full)
    )


def test_creation_from_shape_dtype_structs():
    structs = {"a": jax.ShapeDtypeStruct((2, 3), jnp.float16), "b": None}
    out = tree.zeros_like(structs)
    assert out["b"] is None
    assert out["a"].shape == (2, 3) and out["a"].dtype == jnp.float16
    assert tree.size(structs) == 6


def test_cast_and_cast_like():
    params = mixed_params()
    half = tree.cast(params, jnp.bfloat16)
    assert all(x.dtype == jnp.bfloat16 for x in jax.tree.leaves(half))
    assert tree.cast(params, None) is params
    back = tree.cast_like(half, params)
    assert all(x.dtype == jnp.float32 for x in jax.tree.leaves(back))


def test_arithmetic_matches_numpy_and_keeps_first_dtype():
    x, y = mixed_params(1), mixed_params(2)
    xs, ys = leaves64(x), leaves64(y)
    cases = [
        (tree.add(x, y, y), [a + 2 * b for a, b in zip(xs, ys, strict=True)]),
        (tree.sub(x, y), [a - b for a, b in zip(xs, ys, strict=True)]),
        (tree.mul(x, y), [a * b for a, b in zip(xs, ys, strict=True)]),
        (tree.scale(0.5, x), [0.5 * a for a in xs]),
        (tree.add_scale(x, -2.0, y), [a - 2.0 * b for a, b in zip(xs, ys, strict=True)]),
    ]
    for got, want in cases:
        assert jax.tree.structure(got) == jax.tree.structure(x)
        for g, w in zip(leaves64(got), want, strict=True):
            np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)
    half = tree.cast(x, jnp.bfloat16)
    assert all(v.dtype == jnp.bfloat16 for v in jax.tree.leaves(tree.scale(jnp.float32(2), half)))
    with pytest.raises(ValueError, match="at least one tree"):
        tree.add()


def test_vdot_sum_and_norms():
    x, y = mixed_params(1), mixed_params(2)
    xs, ys = leaves64(x), leaves64(y)
    np.testing.assert_allclose(
        tree.vdot(x, y), sum(np.vdot(a, b) for a, b in zip(xs, ys, strict=True)), 1e-5
    )
    np.testing.assert_allclose(tree.sum(x), sum(a.sum() for a in xs), atol=1e-5)
    flat = np.concatenate([a.ravel() for a in xs])
    np.testing.assert_allclose(tree.norm(x), np.linalg.norm(flat), rtol=1e-6)
    np.testing.assert_allclose(tree.norm(x, squared=True), flat @ flat, rtol=1e-6)
    np.testing.assert_allclose(tree.norm(x, ord=1), np.abs(flat).sum(), rtol=1e-6)
    np.testing.assert_allclose(tree.norm(x, ord=jnp.inf), np.abs(flat).max(), rtol=1e-6)
    assert float(tree.norm({})) == 0.0 and float(tree.sum({})) == 0.0
    with pytest.raises(ValueError, match="ord must be 1, 2 or inf"):
        tree.norm(x, ord=3)


def test_global_norm_of_bf16_leaves_accumulates_in_float32():
    # 2**16 elements of 1/16: a bf16 running sum would stall far below the true 16.
    leaf = jnp.full((2**16,), 1.0 / 16, jnp.bfloat16)
    n = tree.norm({"a": leaf, "b": [leaf]})
    assert n.dtype == jnp.float32
    np.testing.assert_allclose(n, np.sqrt(2 * 2**16 / 256), rtol=1e-6)


def test_where_with_scalar_and_tree_conditions():
    x, y = {"a": jnp.ones(2), "b": jnp.zeros(1)}, {"a": jnp.zeros(2), "b": jnp.ones(1)}
    assert np.all(tree.where(True, x, y)["a"] == 1)
    out = tree.where({"a": False, "b": True}, x, y)
    assert np.all(out["a"] == 0) and np.all(out["b"] == 0)


def test_map_with_path_and_paths():
    params = mixed_params()
    expected = MIXED_PATHS
    assert tree.paths(params) == expected
    seen = []
    tree.map_with_path(lambda p, x: seen.append(p), params)
    assert seen == expected


def test_map_split_returns_one_tree_per_output():
    params = mixed_params()
    a, b = tree.map_split(lambda x: (x + 1, x * 2), 2, params)
    for x, u, v in zip(leaves64(params), leaves64(a), leaves64(b), strict=True):
        np.testing.assert_allclose(u, x + 1, rtol=1e-6)
        np.testing.assert_allclose(v, 2 * x, rtol=1e-6)
    assert a["none"] is None and b["layers"][1]["frozen"] is None


def test_broadcast_prefix_spreads_each_value_over_its_subtree():
    params = mixed_params()
    prefix = {
        "dense": "a",
        "layers": ["b", {"w": "c", "frozen": None}],
        "pair": "d",
        "empty": {},
        "none": None,
    }
    out = tree.broadcast_prefix(prefix, params)
    assert jax.tree.structure(out) == jax.tree.structure(params)
    assert jax.tree.leaves(out) == ["a", "a", "b", "c", "d", "d", "d"]
    # The full structure is a prefix of itself.
    same = tree.broadcast_prefix(jax.tree.map(lambda _: 1, params), params)
    assert jax.tree.structure(same) == jax.tree.structure(params)


def test_broadcast_prefix_names_the_path_where_it_stops_being_a_prefix():
    params = {"a": {"v": jnp.ones(1), "w": jnp.ones(1)}, "b": {"x": jnp.ones(2), "y": jnp.ones(2)}}
    with pytest.raises(
        ValueError,
        match=r"^labels_for: labels must have the params' tree structure or be a prefix of it; "
        r"they differ at 'b': labels has a dict with keys \['x', 'z'\], params have a dict with "
        r"keys \['x', 'y'\]$",
    ):
        tree.broadcast_prefix(
            {"a": 0, "b": {"x": 1, "z": 2}}, params, who="labels_for", what="labels"
        )


def test_a_prefix_mask_that_is_wrong_below_the_prefix_names_the_wrong_path():
    # A prefix at 'a' (one bool for the subtree), wrong at 'b': the error points at 'b' (a full
    # structure comparison would stop at 'a', which is fine).
    params = {"a": {"v": jnp.ones(1), "w": jnp.ones(1)}, "b": {"x": jnp.ones(2), "y": jnp.ones(2)}}
    tx = gradtx.weight_decay(0.1, mask={"a": True, "b": {"x": True, "z": False}})
    with pytest.raises(
        ValueError,
        match=r"^weight_decay: mask must have the params' tree structure or be a prefix of it; "
        r"they differ at 'b': mask has a dict with keys \['x', 'z'\], params have a dict with "
        r"keys \['x', 'y'\]$",
    ):
        tx.init(params)  # reported at init, where the params are first known


def test_get_set_by_name_in_nested_states():
    params = {"mu": jnp.ones(2), "w": jnp.ones(3)}  # a parameter named like a state field
    tx = gradtx.named_chain(
        ("adam", gradtx.scale_by_adam()), ("lr", gradtx.scale_by_learning_rate(0.1))
    )
    state = tx.init(params)
    assert gradtx.tree.get(state, "mu") is state["adam"].mu  # the field, not the param "mu"
    assert gradtx.tree.get(state, "adam/count") is state["adam"].count
    assert gradtx.tree.get(state, "lr") is state["lr"]
    assert gradtx.tree.get(state, "missing", default=None) is None
    found = gradtx.tree.get_all_with_path(state, "count")
    assert [p for p, _ in found] == ["adam/count", "lr/count"]
    with pytest.raises(ValueError, match=r"'count' is ambiguous.*\['adam/count', 'lr/count'\]"):
        gradtx.tree.get(state, "count")
    with pytest.raises(KeyError, match="did you mean 'count'"):
        gradtx.tree.get(state, "cuont")

    new = gradtx.tree.set(state, count=7)
    assert int(new["adam"].count) == 7 and int(new["lr"].count) == 7
    assert new["adam"].count.dtype == jnp.int32
    one = gradtx.tree.set(state, {"lr/count": 3})
    assert int(one["lr"].count) == 3 and int(one["adam"].count) == 0
    with pytest.raises(ValueError, match="has shape"):
        gradtx.tree.set(state, count=jnp.zeros(2))
    with pytest.raises(KeyError, match="no field or key 'nope'"):
        gradtx.tree.set(state, nope=1)
    # A replaced subtree must keep its structure.
    with pytest.raises(ValueError, match="set: current adam/mu and new adam/mu differ at the root"):
        gradtx.tree.set(state, mu={"w": jnp.zeros(3)})


def test_set_keeps_dtype_so_jitted_steps_do_not_retrace():
    state = {"hyperparams": {"learning_rate": jnp.float32(0.1)}}
    traces = []

    @jax.jit
    def f(s):
        traces.append(1)
        return s["hyperparams"]["learning_rate"] * 2

    f(state)
    state = gradtx.tree.set(state, learning_rate=0.5)  # a Python float
    assert state["hyperparams"]["learning_rate"].dtype == jnp.float32
    assert float(f(state)) == 1.0 and len(traces) == 1


def test_get_finds_namedtuple_fields_and_list_entries():
    state = Pair(a={"x": 1}, b=[Pair(a=2, b=3)])
    assert gradtx.tree.get(state, "x") == 1
    assert gradtx.tree.get(state, "b/0/b") == 3


def test_set_refuses_to_truncate_a_float_into_an_integer_leaf():
    """An int given to inject_hyperparams is stored as int32 (as in Optax): setting 0.5 there
    would silently store 0."""
    state = {"hyperparams": {"learning_rate": jnp.asarray(1, jnp.int32)}}
    with pytest.raises(ValueError, match="would be truncated"):
        gradtx.tree.set(state, learning_rate=0.5)
    assert int(gradtx.tree.set(state, learning_rate=2.0)["hyperparams"]["learning_rate"]) == 2
