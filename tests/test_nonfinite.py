"""first_nonfinite / NonfiniteLocation, apply_if_finite(locate_nonfinite=True), inspect_state."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.sharding import Mesh, NamedSharding, PartitionSpec

import gradtx
from gradtx._base._introspect import node_of
from gradtx.checkpoint import load_state_dict, state_dict
from gradtx.checkpoint._inspect import inspect_state
from gradtx.tree._nonfinite import NonfiniteLocation, first_nonfinite
from gradtx.wrappers._finite import (
    ApplyIfFiniteLocatedState,
    ApplyIfFiniteState,
    apply_if_finite,
)


def _tree():
    """Leaves in order: a/0, a/1/x, a/1/y, b/c, b/n (int), b/z; NaN/Inf in a/1/y and b/c."""
    return {
        "a": [jnp.ones(3), {"x": jnp.zeros((2, 2)), "y": jnp.array([1.0, np.nan, np.inf, 2.0])}],
        "b": {
            "c": jnp.full((3,), -np.inf, jnp.bfloat16),
            "n": jnp.arange(3),
            "z": None,
        },
    }


def _read(loc):
    return loc.path, int(loc.index), int(loc.count), int(loc.total)


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
def test_names_the_first_of_several_bad_leaves(jit):
    f = jax.jit(first_nonfinite) if jit else first_nonfinite
    loc = f(_tree())
    assert isinstance(loc, NonfiniteLocation)
    assert loc.leaf_paths == ("a/0", "a/1/x", "a/1/y", "b/c", "b/n")  # None is absent
    assert _read(loc) == ("a/1/y", 2, 2, 5)  # NaN and Inf in a/1/y, 3 x -Inf in b/c
    assert all(getattr(loc, n).dtype == jnp.int32 for n in ("index", "count", "total"))
    assert all(getattr(loc, n).shape == () for n in ("index", "count", "total"))
    # only the later leaf is bad (an Inf alone)
    tree = _tree()
    tree["a"][1]["y"] = jnp.zeros(4)
    assert _read(f(tree)) == ("b/c", 3, 3, 3)
    # all finite: None / -1 / 0 / 0
    tree["b"]["c"] = jnp.zeros(3, jnp.bfloat16)
    assert _read(f(tree)) == (None, -1, 0, 0)
    # the very first leaf, one NaN
    tree["a"][0] = jnp.array([0.0, 0.0, np.nan])
    assert _read(f(tree)) == ("a/0", 0, 1, 1)


def test_empty_tree_and_integer_leaves_are_finite():
    assert _read(first_nonfinite({})) == (None, -1, 0, 0)
    assert first_nonfinite({}).leaf_paths == ()
    assert _read(first_nonfinite({"i": jnp.arange(4), "k": jax.random.key(0)})) == (None, -1, 0, 0)
    assert _read(first_nonfinite([1.0, float("nan")])) == ("1", 1, 1, 1)


def test_path_inside_jit_raises_a_clear_error():
    def bad(tree):
        return first_nonfinite(tree).path

    with pytest.raises(TypeError, match="return the location out of the jitted function"):
        jax.jit(bad)({"w": jnp.ones(2)})
    with pytest.raises(TypeError, match="traced/abstract"):
        _ = jax.eval_shape(first_nonfinite, {"w": jnp.ones(2)}).path


def test_pytree_keys_and_repr():
    loc = first_nonfinite({"dense": {"kernel": jnp.array([np.nan, 1.0])}})
    assert sorted(state_dict(loc, keys="paths")) == ["count", "index", "total"]
    assert next(iter(state_dict(loc))) == "nonfinite_location/index"
    assert gradtx.tree.paths(loc) == ["index", "count", "total"]
    assert repr(loc) == "NonfiniteLocation(path='dense/kernel', index=0, count=1, total=1)"
    rebuilt = jax.tree.map(lambda x: x, loc)
    assert isinstance(rebuilt, NonfiniteLocation) and rebuilt.leaf_paths == ("dense/kernel",)
    abstract = repr(jax.eval_shape(first_nonfinite, {"w": jnp.ones(2)}))
    assert (
        abstract.startswith("NonfiniteLocation(index=ShapeDtypeStruct(") and "leaves=1" in abstract
    )


def test_under_pmap_each_device_locates_in_its_own_tree(cpu_devices):
    n = 8
    tree = {"b": jnp.zeros((n, 2)), "w": jnp.ones((n, 3))}
    tree["w"] = tree["w"].at[3, 1].set(np.nan)  # device 3: w
    tree["b"] = tree["b"].at[5, :].set(np.inf)  # device 5: b (2 values)
    tree["w"] = tree["w"].at[5, 0].set(np.nan)  # device 5: also w, but b comes first
    loc = jax.pmap(first_nonfinite, devices=cpu_devices[:n])(tree)
    expected = [None] * n
    expected[3], expected[5] = "w", "b"
    assert loc.path == expected
    assert np.asarray(loc.index).tolist() == [-1, -1, -1, 1, -1, 0, -1, -1]
    assert np.asarray(loc.count).tolist() == [0, 0, 0, 1, 0, 2, 0, 0]
    assert np.asarray(loc.total).tolist() == [0, 0, 0, 1, 0, 3, 0, 0]
    device5 = jax.tree.map(lambda x: x[5], loc)
    assert _read(device5) == ("b", 0, 2, 3)


def test_under_sharded_jit_a_nan_in_one_shard_is_found(cpu_devices):
    mesh = Mesh(np.array(cpu_devices[:8]), ("x",))
    sharded = NamedSharding(mesh, PartitionSpec("x"))
    replicated = NamedSharding(mesh, PartitionSpec())
    kernel = jnp.ones((16, 4)).at[13, 2].set(np.nan).at[14, 0].set(np.inf)  # shard 6 and 7
    tree = {
        "bias": jax.device_put(jnp.zeros(4), replicated),
        "kernel": jax.device_put(kernel, sharded),
    }
    assert len({s.device for s in tree["kernel"].addressable_shards}) == 8
    bad_shards = [
        s.index for s in tree["kernel"].addressable_shards if not np.all(np.isfinite(s.data))
    ]
    assert len(bad_shards) == 2  # each bad value lives in one shard only
    loc = jax.jit(first_nonfinite)(tree)
    assert _read(loc) == ("kernel", 1, 2, 2)
    one = {**tree, "kernel": jax.device_put(jnp.ones((16, 4)).at[2, 3].set(np.nan), sharded)}
    assert _read(jax.jit(first_nonfinite)(one)) == ("kernel", 1, 1, 1)


# -- apply_if_finite(locate_nonfinite=True) ---------------------------------------------------


def _params():
    return {"dense": {"bias": jnp.zeros(2), "kernel": jnp.zeros((2, 3))}, "out": jnp.zeros(3)}


def _grads(n):
    params = _params()
    keys = jax.random.split(jax.random.key(0), n)
    out = []
    for k in keys:
        leaves, treedef = jax.tree.flatten(params)
        parts = jax.random.split(k, len(leaves))
        out.append(
            treedef.unflatten(
                [jax.random.normal(p, x.shape) for p, x in zip(parts, leaves, strict=True)]
            )
        )
    return out


# step -> (leaf path, element, value); path order: dense/bias, dense/kernel, out
_BAD = {
    2: ("dense/kernel", (1, 1), np.nan),
    3: ("out", (0,), np.inf),
    6: ("dense/bias", (1,), -np.inf),
}


def _poisoned(n):
    grads = _grads(n)
    for step, (path, at, value) in _BAD.items():
        g = grads[step]
        if path == "out":
            g["out"] = g["out"].at[at].set(value)
        else:
            leaf = path.split("/")[1]
            g["dense"][leaf] = g["dense"][leaf].at[at].set(value)
    grads[3]["dense"]["kernel"] = grads[3]["dense"]["kernel"].at[0, 0].set(np.nan)  # 2 bad leaves
    return grads


def _txs():
    inner = gradtx.chain(gradtx.clip_by_global_norm(1.0), gradtx.adam(0.1))
    return apply_if_finite(inner, 2), apply_if_finite(inner, 2, locate_nonfinite=True)


def test_located_skips_like_the_default_and_records_the_latest_location():
    plain, located = _txs()
    params = _params()
    s0, s1 = plain.init(params), located.init(params)
    assert isinstance(s1, ApplyIfFiniteLocatedState)
    assert _read(s1.first_nonfinite) == (None, -1, 0, 0)
    assert s1.first_nonfinite.leaf_paths == ("dense/bias", "dense/kernel", "out")
    step0, step1 = jax.jit(plain.update), jax.jit(located.update)
    # after each step: what the location says (kept across finite steps)
    expected = {
        0: (None, -1, 0, 0),
        2: ("dense/kernel", 1, 1, 1),
        3: ("dense/kernel", 1, 1, 2),  # kernel (NaN) and out (Inf): the first leaf is named
        4: ("dense/kernel", 1, 1, 2),
        6: ("dense/bias", 0, 1, 1),
        7: ("dense/bias", 0, 1, 1),
    }
    last = expected[0]
    for i, g in enumerate(_poisoned(8)):
        u0, s0 = step0(g, s0, params)
        u1, s1 = step1(g, s1, params)
        for a, b in zip(jax.tree.leaves(u0), jax.tree.leaves(u1), strict=True):
            np.testing.assert_array_equal(a, b)  # same program apart from the location
        for name in ApplyIfFiniteState._fields[:3]:
            np.testing.assert_array_equal(getattr(s0, name), getattr(s1, name))
        for a, b in zip(
            jax.tree.leaves(s0.inner_state), jax.tree.leaves(s1.inner_state), strict=True
        ):
            np.testing.assert_array_equal(a, b)
        last = expected.get(i, last)
        assert _read(s1.first_nonfinite) == last, i
    assert int(s1.total_notfinite) == 3 and bool(s1.last_finite)


def test_located_state_round_trips_through_state_dict_and_scan():
    _, located = _txs()
    params = _params()
    grads = _poisoned(8)
    step = jax.jit(located.update)
    state = located.init(params)
    for g in grads[:4]:
        _, state = step(g, state, params)
    d = state_dict(state)
    assert np.asarray(d["apply_if_finite_located/first_nonfinite/index"]).dtype == np.int32
    restored = load_state_dict(located.init(params), d)
    assert isinstance(restored.first_nonfinite, NonfiniteLocation)
    assert (
        _read(restored.first_nonfinite) == _read(state.first_nonfinite) == ("dense/kernel", 1, 1, 2)
    )
    loop = restored
    for g in grads[4:]:
        _, loop = step(g, loop, params)

    def body(s, g):
        return located.update(g, s, params)[1], None

    stacked = jax.tree.map(lambda *xs: jnp.stack(xs), *grads[4:])
    scanned, _ = jax.jit(lambda s, gs: jax.lax.scan(body, s, gs))(restored, stacked)
    assert jax.tree.structure(scanned) == jax.tree.structure(loop)
    assert _read(scanned.first_nonfinite) == _read(loop.first_nonfinite) == ("dense/bias", 0, 1, 1)
    for a, b in zip(jax.tree.leaves(scanned), jax.tree.leaves(loop), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6)


def test_inspect_state_shows_the_located_leaf():
    _, located = _txs()
    params = _params()
    state = located.init(params)
    summary = inspect_state(state)
    assert summary.nonfinite == {"first_nonfinite": None}
    assert "first non-finite leaf (at 'first_nonfinite'): none" in summary.table()
    assert summary.step_path == "inner_state/1/0/count"  # not the location's count
    g = _grads(1)[0]
    g["dense"]["kernel"] = g["dense"]["kernel"].at[0].set(np.nan)
    _, state = located.update(g, state, params)
    summary = inspect_state(state)
    assert summary.nonfinite == {"first_nonfinite": "dense/kernel"}
    assert "first non-finite leaf (at 'first_nonfinite'): 'dense/kernel', 3 values" in str(summary)
    assert summary.step_path == "inner_state/1/0/count"
    # abstract states and states without a location: nothing reported, output unchanged
    assert inspect_state(jax.eval_shape(located.init, params)).nonfinite == {}
    plain = inspect_state(apply_if_finite(gradtx.sgd(0.1), 1).init(params))
    assert plain.nonfinite == {} and "non-finite" not in plain.table()


def test_default_state_is_unchanged_and_optax_compatible():
    params = _params()
    state = apply_if_finite(gradtx.sgd(0.1), 2).init(params)
    assert type(state) is ApplyIfFiniteState
    assert state._fields == optax.ApplyIfFiniteState._fields  # 4 fields, Optax's names
    assert len(state) == 4
    ref = optax.apply_if_finite(optax.sgd(0.1), 2).init(params)
    assert [x.dtype for x in jax.tree.leaves(state)[:3]] == [
        x.dtype for x in jax.tree.leaves(ref)[:3]
    ]


def test_validation_and_mismatched_states():
    with pytest.raises(ValueError, match="apply_if_finite: locate_nonfinite must be True or False"):
        apply_if_finite(gradtx.sgd(0.1), 1, locate_nonfinite=1)  # type: ignore[arg-type]
    plain, located = _txs()
    params = _params()
    with pytest.raises(ValueError, match="expected a ApplyIfFiniteLocatedState"):
        located.update(params, plain.init(params), params)
    with pytest.raises(ValueError, match="expected a ApplyIfFiniteState"):
        plain.update(params, located.init(params), params)
    fewer = {"dense": params["dense"]}
    with pytest.raises(ValueError, match="leaf 2 is no more leaves in the updates and 'out'"):
        located.update(fewer, located.init(params), params)


def test_registered_for_the_metrics_tooling():
    plain, located = _txs()
    params = _params()
    for tx, keys in (
        (plain, {"notfinite_count", "total_notfinite"}),
        (located, {"notfinite_count", "total_notfinite", "nonfinite_index", "nonfinite_count"}),
    ):
        node = node_of(tx)
        assert node is not None and node.kind == "wrapper"
        [(key_path, child)] = node.children
        assert key_path == (jax.tree_util.GetAttrKey("inner_state"),)
        assert node_of(child) is not None and node_of(child).kind == "chain"
        report = node.report(tx.init(params))
        assert set(report) == keys
        assert all(v.dtype == jnp.int32 and v.shape == () for v in report.values())
    report = node_of(located).report(located.init(params))
    assert int(report["nonfinite_index"]) == -1 and int(report["nonfinite_count"]) == 0
