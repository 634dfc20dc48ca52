"""gradtx.tree: creation, arithmetic, reductions, paths, prefixes, get/set by name (glob patterns:
test_patterns.py); and against optax.tree: every optax.tree function exists with Optax's
signature and gives Optax's results on ordinary inputs; the deliberate differences are tested
directly."""

from __future__ import annotations

import functools
import inspect
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
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

    @jax.jit  # one compilation for all cases
    def created(params):
        full = tree.full_like(params, 3, dtype=jnp.bfloat16)
        return tree.zeros_like(params), tree.ones_like(params), full

    zeros, ones, full = created(params)
    for out, value in ((zeros, 0.0), (ones, 1.0)):
        assert jax.tree.structure(out) == jax.tree.structure(params)
        assert all(np.all(np.asarray(x) == value) for x in jax.tree.leaves(out))
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

    @jax.jit
    def cast_and_back(params):
        half = tree.cast(params, jnp.bfloat16)
        return half, tree.cast_like(half, params)

    half, back = cast_and_back(params)
    assert all(x.dtype == jnp.bfloat16 for x in jax.tree.leaves(half))
    assert tree.cast(params, None) is params
    assert all(x.dtype == jnp.float32 for x in jax.tree.leaves(back))


def test_arithmetic_matches_numpy_and_keeps_first_dtype():
    x, y = mixed_params(1), mixed_params(2)
    xs, ys = leaves64(x), leaves64(y)

    @jax.jit  # one compilation for all cases
    def all_cases(x, y):
        ours = [tree.add(x, y, y), tree.sub(x, y), tree.mul(x, y), tree.scale(0.5, x)]
        ours.append(tree.add_scale(x, -2.0, y))
        return ours, tree.scale(jnp.float32(2), tree.cast(x, jnp.bfloat16))

    ours, scaled_half = all_cases(x, y)
    wants = [
        [a + 2 * b for a, b in zip(xs, ys, strict=True)],
        [a - b for a, b in zip(xs, ys, strict=True)],
        [a * b for a, b in zip(xs, ys, strict=True)],
        [0.5 * a for a in xs],
        [a - 2.0 * b for a, b in zip(xs, ys, strict=True)],
    ]
    for got, want in zip(ours, wants, strict=True):
        assert jax.tree.structure(got) == jax.tree.structure(x)
        for g, w in zip(leaves64(got), want, strict=True):
            np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)
    assert all(v.dtype == jnp.bfloat16 for v in jax.tree.leaves(scaled_half))
    with pytest.raises(ValueError, match="at least one tree"):
        tree.add()


def test_vdot_sum_and_norms():
    x, y = mixed_params(1), mixed_params(2)
    xs, ys = leaves64(x), leaves64(y)

    @jax.jit  # one compilation for all cases
    def all_cases(x, y):
        norms = [tree.norm(x), tree.norm(x, squared=True), tree.norm(x, ord=1)]
        norms.append(tree.norm(x, ord=jnp.inf))
        return tree.vdot(x, y), tree.sum(x), norms, tree.norm({}), tree.sum({})

    vdot, total, (two, squared, one, inf), empty_norm, empty_sum = all_cases(x, y)
    np.testing.assert_allclose(vdot, sum(np.vdot(a, b) for a, b in zip(xs, ys, strict=True)), 1e-5)
    np.testing.assert_allclose(total, sum(a.sum() for a in xs), atol=1e-5)
    flat = np.concatenate([a.ravel() for a in xs])
    np.testing.assert_allclose(two, np.linalg.norm(flat), rtol=1e-6)
    np.testing.assert_allclose(squared, flat @ flat, rtol=1e-6)
    np.testing.assert_allclose(one, np.abs(flat).sum(), rtol=1e-6)
    np.testing.assert_allclose(inf, np.abs(flat).max(), rtol=1e-6)
    assert float(empty_norm) == 0.0 and float(empty_sum) == 0.0
    with pytest.raises(ValueError, match="ord must be 1, 2 or inf"):
        tree.norm(x, ord=3)


def test_global_norm_of_bf16_leaves_accumulates_in_float32():
    # 2**16 elements of 1/16: a bf16 running sum would stall far below the true 16.
    leaf = jax.device_put(np.full((2**16,), 1.0 / 16, jnp.bfloat16))
    n = jax.jit(lambda leaf: tree.norm({"a": leaf, "b": [leaf]}))(leaf)
    assert n.dtype == jnp.float32
    np.testing.assert_allclose(n, np.sqrt(2 * 2**16 / 256), rtol=1e-6)


def test_where_with_scalar_and_tree_conditions():
    x = jax.device_put({"a": np.ones(2, np.float32), "b": np.zeros(1, np.float32)})
    y = jax.device_put({"a": np.zeros(2, np.float32), "b": np.ones(1, np.float32)})
    scalar, tree_condition = jax.jit(
        lambda x, y: (tree.where(True, x, y), tree.where({"a": False, "b": True}, x, y))
    )(x, y)
    assert np.all(np.asarray(scalar["a"]) == 1)
    assert np.all(np.asarray(tree_condition["a"]) == 0)
    assert np.all(np.asarray(tree_condition["b"]) == 0)


def test_map_with_path_and_paths():
    params = mixed_params()
    expected = MIXED_PATHS
    assert tree.paths(params) == expected
    seen = []
    tree.map_with_path(lambda p, x: seen.append(p), params)
    assert seen == expected


def test_map_split_returns_one_tree_per_output():
    params = mixed_params()
    a, b = jax.jit(lambda p: tree.map_split(lambda x: (x + 1, x * 2), 2, p))(params)
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


# ============================================================================================
# against optax.tree
# ============================================================================================


def _close(got: Any, want: Any, rtol: float = 1e-6, atol: float = 1e-6) -> None:
    assert jax.tree.structure(got) == jax.tree.structure(want)
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        assert jnp.asarray(g).dtype == jnp.asarray(w).dtype, (g, w)
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=rtol, atol=atol)


class _Pair(NamedTuple):
    a: Any
    b: Any


def small_params(seed: int = 0) -> dict:
    """Dict / list / NamedTuple nesting, a scalar and a None leaf, on only two shapes (so that
    eager ops compile few programs)."""
    rng = np.random.default_rng(seed)

    def leaf(*shape):
        return jnp.asarray(rng.normal(size=shape), jnp.float32)

    return {"a": leaf(3), "b": [leaf(2, 3), None], "c": _Pair(a=leaf(3), b=leaf(2, 3)), "n": None}


def _trees(n: int = 3) -> list[dict]:
    return [small_params(seed) for seed in range(n)]


def _ones(shape: Any, dtype: Any = np.float32) -> jax.Array:
    """A device array of ones, put there from NumPy (`jnp.ones` compiles a program per shape and
    dtype)."""
    return jax.device_put(np.ones(shape, dtype))


# Signatures: (argument names, kinds, defaults) as Optax's, except where documented.
_SIGNATURE_DIFFERENCES = {
    # gradtx.tree.add also takes one tree (returned as it is); a missing tree is an error.
    "add": {"tree_x", "tree_y"},
    # gradtx.tree.get raises KeyError (with close matches) when there is no default.
    "get": {"default"},
}


def _spec(fn: Any) -> list[tuple[str, Any, Any]]:
    return [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()]


@pytest.mark.parametrize("name", sorted(n for n in dir(optax.tree) if not n.startswith("_")))
def test_every_optax_tree_function_exists_with_optax_signature(name):
    ours, theirs = getattr(tree, name), getattr(optax.tree, name)
    assert name in tree.__all__
    allowed = _SIGNATURE_DIFFERENCES.get(name, set())
    ours_spec = [(n, k, None if n in allowed else d) for n, k, d in _spec(ours)]
    theirs_spec = [(n, k, None if n in allowed else d) for n, k, d in _spec(theirs)]
    assert ours_spec == theirs_spec


# --------------------------------------------------------------------------------------------
# Arithmetic and elementwise maps
# --------------------------------------------------------------------------------------------


def test_leafwise_arithmetic_matches_optax():
    x, y, z = _trees()

    @jax.jit  # one compilation for all cases
    def all_cases(x, y, z):
        y_pos = jax.tree.map(lambda v: jnp.abs(v) + 0.5, y)
        return [
            (tree.add(x, y), optax.tree.add(x, y)),
            (tree.add(x, y, z), optax.tree.add(x, y, z)),
            (tree.sub(x, y), optax.tree.sub(x, y)),
            (tree.mul(x, y), optax.tree.mul(x, y)),
            (tree.div(x, y_pos), optax.tree.div(x, y_pos)),
            (tree.scale(-0.3, x), optax.tree.scale(-0.3, x)),
            (tree.add_scale(x, 0.7, y), optax.tree.add_scale(x, 0.7, y)),
            (tree.clip(x, -0.5, 0.25), optax.tree.clip(x, -0.5, 0.25)),
            (tree.clip(x, max_value=0.1), optax.tree.clip(x, max_value=0.1)),
            (tree.clip(x, min_value=-0.1), optax.tree.clip(x, min_value=-0.1)),
            (tree.where(False, x, y), optax.tree.where(False, x, y)),
            (tree.conj(x), optax.tree.conj(x)),
            (tree.real(x), optax.tree.real(x)),
            (tree.batch_shape(x, (2, 1)), optax.tree.batch_shape(x, (2, 1))),
            (tree.batch_shape(x), optax.tree.batch_shape(x)),
        ]

    for got, want in all_cases(x, y, z):
        _close(got, want)


def test_integer_leaves_are_not_truncated_and_divide_to_floats():
    ints = jax.device_put({"a": np.arange(1, 4, dtype=np.int32), "b": [np.int32(7)]})
    twos = jax.tree.map(lambda v: np.full_like(v, 2), ints)

    @jax.jit  # one compilation for all cases
    def all_cases(ints, twos):
        return [
            (tree.scale(0.5, ints), optax.tree.scale(0.5, ints)),
            (tree.add_scale(ints, 0.5, ints), optax.tree.add_scale(ints, 0.5, ints)),
            (tree.div(ints, twos), optax.tree.div(ints, twos)),
            (tree.add(ints, twos), optax.tree.add(ints, twos)),
        ], tree.mul(ints, twos)

    cases, product = all_cases(ints, twos)
    for got, want in cases:
        _close(got, want)
    assert cases[0][0]["a"].dtype == jnp.float32
    assert product["a"].dtype == jnp.int32


def test_complex_leaves_conj_real_and_arithmetic_match_optax():
    c = {"a": np.asarray([1 + 2j, -3 - 1j], np.complex64), "b": np.complex64(0.5 - 2j)}

    @jax.jit  # one compilation for all cases
    def all_cases(c):
        return [
            (tree.conj(c), optax.tree.conj(c)),
            (tree.real(c), optax.tree.real(c)),
            (tree.mul(c, c), optax.tree.mul(c, c)),
            (tree.scale(2.0, c), optax.tree.scale(2.0, c)),
        ]

    for got, want in all_cases(jax.device_put(c)):
        _close(got, want)


def test_arithmetic_keeps_bf16_where_optax_promotes():
    # Deliberate: a float32 operand does not promote bf16 updates (Optax returns float32).

    @jax.jit
    def both(x):
        half = tree.cast(x, jnp.bfloat16)
        want = optax.tree.scale(jnp.float32(0.5), half)
        return tree.scale(jnp.float32(0.5), half), optax.tree.cast(want, jnp.bfloat16)

    scaled, want = both(small_params())
    assert all(v.dtype == jnp.bfloat16 for v in jax.tree.leaves(scaled))
    _close(scaled, want, rtol=1e-2)


def test_none_in_the_first_tree_and_numpy_leaves_as_optax():
    m = jax.device_put(np.arange(3.0, dtype=np.float32))
    assert tree.add_scale(None, 1.0, m) is None is optax.tree.add_scale(None, 1.0, m)
    x, y = {"a": None, "b": m}, {"a": m, "b": m}
    _close(
        *jax.jit(lambda x, y: (tree.add_scale(x, 2.0, y), optax.tree.add_scale(x, 2.0, y)))(x, y)
    )
    # NumPy leaves stay NumPy (float64), as Optax's operators leave them.
    a, b = np.linspace(1.0, 2.0, 4), np.linspace(3.0, 4.0, 4)
    for ours, theirs in ((tree.div, optax.tree.div), (tree.sub, optax.tree.sub)):
        got, want = ours(a, b), theirs(a, b)
        assert isinstance(got, np.ndarray) and got.dtype == np.float64
        np.testing.assert_allclose(got, want, rtol=1e-15)


def test_add_of_a_single_tree_and_of_none():
    x = small_params()
    _close(tree.add(x), x)
    with pytest.raises(ValueError, match="at least one tree"):
        tree.add()


# --------------------------------------------------------------------------------------------
# Reductions
# --------------------------------------------------------------------------------------------


def test_reductions_match_optax():
    x, y, _ = _trees()

    @jax.jit  # one compilation for all cases
    def all_cases(x, y):
        return [
            (tree.sum(x), optax.tree.sum(x)),
            (tree.sum(x, associative_reduction=True), optax.tree.sum(x, True)),
            (tree.max(x), optax.tree.max(x)),
            (tree.min(x), optax.tree.min(x)),
            (tree.vdot(x, y), optax.tree.vdot(x, y)),
        ]

    for got, want in [*all_cases(x, y), (tree.size(x), optax.tree.size(x))]:
        np.testing.assert_allclose(got, want, rtol=1e-6)
        assert jnp.asarray(got).dtype == jnp.asarray(want).dtype


ORDS = [None, 2, 1, jnp.inf, "inf", "infinity", float("inf")]


@functools.cache
def _norms_of_every_ord() -> dict:
    """(ours, ours with positional arguments, Optax's) for every (ord, squared), in one program."""

    @jax.jit
    def all_cases(x):
        return {
            (i, squared): (
                tree.norm(x, ord=ord_, squared=squared),
                tree.norm(x, ord_, squared),  # positional, as Optax's signature allows
                optax.tree.norm(x, ord=ord_, squared=squared),
            )
            for i, ord_ in enumerate(ORDS)
            for squared in (False, True)
        }

    return all_cases(small_params(3))


@pytest.mark.parametrize("i", range(len(ORDS)), ids=lambda i: repr(ORDS[i]))
@pytest.mark.parametrize("squared", [False, True])
def test_norm_matches_optax_for_every_ord(i, squared):
    got, positional, want = _norms_of_every_ord()[i, squared]
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert got.dtype == want.dtype == jnp.float32
    np.testing.assert_allclose(positional, want, rtol=1e-6)


def test_norm_of_complex_leaves_matches_optax():
    c = {"a": np.asarray([1 + 2j, -3 - 1j], np.complex64), "b": np.asarray([0.5j], np.complex64)}
    norms = jax.jit(
        lambda c: [(tree.norm(c, o), optax.tree.norm(c, o)) for o in (None, 1, jnp.inf)]
    )
    for got, want in norms(jax.device_put(c)):
        np.testing.assert_allclose(got, want, rtol=1e-6)


def test_norm_rejects_an_unknown_ord():
    with pytest.raises(ValueError, match="ord must be 1, 2 or inf"):
        tree.norm(small_params(), ord=3)


def test_integer_and_complex_sums_match_optax():
    ints = {"a": np.arange(5, dtype=np.int32), "b": np.asarray([True, True])}
    big = {"a": np.asarray([2**24 + 1], np.int32)}  # exact, not rounded through float32
    c = {"a": np.asarray([1 + 2j, -3 - 1j], np.complex64), "b": np.float32(2.0)}

    @jax.jit  # one compilation for all cases
    def sums(ints, big, c):
        return (
            (tree.sum(ints), optax.tree.sum(ints)),
            tree.sum(big),
            (tree.sum(c), optax.tree.sum(c)),
        )

    (got, want), big_sum, (c_got, c_want) = sums(*jax.device_put((ints, big, c)))
    assert got.dtype == want.dtype == jnp.int32 and int(got) == int(want) == 12
    assert int(big_sum) == 2**24 + 1
    assert c_got.dtype == c_want.dtype == jnp.complex64
    np.testing.assert_allclose(c_got, c_want, rtol=1e-6)


def test_max_min_skip_empty_leaves_and_give_infinities_for_no_elements():
    x = {"a": np.zeros((0,), np.float32), "b": np.asarray([3.0, -1.0], np.float32), "c": None}
    empty = {"a": np.zeros((0,), np.float32)}
    ints = {"a": np.arange(4, dtype=np.int32)}

    @jax.jit  # one compilation for all cases
    def all_cases(x, empty, ints):
        return [
            (tree.max(x), optax.tree.max(x)),
            (tree.min(x), optax.tree.min(x)),
            (tree.max(empty), optax.tree.max(empty)),
            (tree.min(empty), optax.tree.min(empty)),
            (tree.max(ints), optax.tree.max(ints)),
        ]

    *floats, (int_max, int_want) = all_cases(*jax.device_put((x, empty, ints)))
    for (got, want), value in zip(floats, (3.0, -1.0, -np.inf, np.inf), strict=True):
        assert float(got) == float(want) == value
    assert int_max.dtype == jnp.asarray(int_want).dtype


@pytest.mark.parametrize("size", [2, 8192])
def test_max_min_and_the_infinity_norm_keep_a_nan(size):
    """As NumPy: a NaN anywhere gives NaN. XLA:CPU's own reductions drop it from 4096 values or
    so (openxla/xla#21461; Optax's `tree.max` and `tree.norm(ord=inf)` then say 1.0)."""
    x = np.ones(size, np.float32)
    x[size // 2] = np.nan
    t = {"a": jnp.asarray(x), "b": jnp.asarray([5.0])}
    for f in (tree.max, tree.min, lambda t: tree.norm(t, ord=jnp.inf)):
        assert np.isnan(float(f(t))) and np.isnan(float(jax.jit(f)(t)))
    assert float(tree.max({"b": jnp.asarray([5.0, -2.0])})) == 5.0


def test_reductions_differ_from_optax_only_in_a_wider_accumulator():
    # Deliberate: bf16 leaves are summed / normed in float32 (Optax: bf16), an empty tree's
    # inf-norm is 0 (Optax: -inf). vdot is Optax's (complex for complex leaves).
    c = {"a": np.asarray([1 + 2j], np.complex64)}
    d = {"a": np.asarray([1 + 2j], np.complex64), "b": np.ones(2, np.float32)}
    e = {"a": np.asarray([3 - 1j], np.complex64), "b": np.ones(2, np.float32)}

    @jax.jit  # one compilation for all cases
    def all_cases(x, c, d, e):
        half = tree.cast(x, jnp.bfloat16)
        sums = tree.sum(half), optax.tree.sum(half).astype(jnp.float32)
        vdots = [(tree.vdot(c, c), optax.tree.vdot(c, c)), (tree.vdot(d, e), optax.tree.vdot(d, e))]
        return sums, tree.norm(half), tree.norm({}, ord=jnp.inf), vdots

    (ours, theirs), norm, empty_inf, vdots = all_cases(small_params(), *jax.device_put((c, d, e)))
    assert ours.dtype == jnp.float32 and norm.dtype == jnp.float32
    np.testing.assert_allclose(ours, theirs, 1e-2)
    assert float(empty_inf) == 0.0
    for got, want in vdots:
        np.testing.assert_allclose(got, want, rtol=1e-6)
    assert vdots[1][0].dtype == jnp.complex64


def test_allclose_matches_optax():
    x = jax.tree.map(np.asarray, small_params())
    near = jax.tree.map(lambda v: v + np.float32(1e-7), x)
    far = jax.tree.map(lambda v: v + np.float32(1e-2), x)
    nan = {"a": np.asarray([np.nan, 1.0], np.float32)}
    cases = (
        (x, near, {}),
        (x, far, {}),
        (x, far, {"atol": 0.1}),
        (x, far, {"rtol": 0.0, "atol": 0.0}),
        (nan, nan, {}),
        (nan, nan, {"equal_nan": True}),
        ({}, {}, {}),
    )

    @jax.jit  # one compilation for all cases
    def all_cases(trees):
        return [
            (tree.allclose(a, b, **kw), optax.tree.allclose(a, b, **kw))
            for (a, b), (_, _, kw) in zip(trees, cases, strict=True)
        ]

    for got, want in all_cases(jax.device_put([(a, b) for a, b, _ in cases])):
        assert bool(got) == bool(want)


# --------------------------------------------------------------------------------------------
# Creation, casting, dtype
# --------------------------------------------------------------------------------------------


def test_creation_and_casting_match_optax():
    x = small_params()

    @jax.jit  # one compilation for all cases
    def all_cases(x):
        return [
            (tree.zeros_like(x), optax.tree.zeros_like(x)),
            (tree.ones_like(x, jnp.bfloat16), optax.tree.ones_like(x, jnp.bfloat16)),
            (tree.full_like(x, 3.5), optax.tree.full_like(x, 3.5)),
            (tree.full_like(x, 2, dtype=jnp.int32), optax.tree.full_like(x, 2, dtype=jnp.int32)),
            (tree.cast(x, jnp.float16), optax.tree.cast(x, jnp.float16)),
        ]

    for got, want in all_cases(x):
        _close(got, want)
    assert tree.cast(x, None) is x
    other = {"a": _ones(2, jnp.bfloat16), "b": 1.0}  # a leaf without a dtype is kept
    src = {"a": _ones(2), "b": _ones(3)}
    _close(tree.cast_like(src, other), optax.tree.cast_like(src, other))


def test_dtype_matches_optax_for_every_handler():
    same = {"a": _ones(2), "b": [_ones(())]}
    mixed = {"a": _ones(2, jnp.float16), "b": _ones(2, jnp.float32)}
    for t, handler in (
        (same, None),
        (mixed, "promote"),
        (mixed, "highest"),
        (mixed, "lowest"),
        ({}, None),
    ):
        assert tree.dtype(t, handler) == optax.tree.dtype(t, handler)
    unordered = {"a": _ones(2, jnp.int32), "b": _ones(2, jnp.uint32)}
    assert tree.dtype(unordered, "promote") == optax.tree.dtype(unordered, "promote")
    with pytest.raises(ValueError, match=r"different dtypes.*\['b'\]: float32"):
        tree.dtype(mixed)
    assert tree.dtype(unordered, "highest") == optax.tree.dtype(unordered, "highest")
    assert tree.dtype(unordered, "lowest") == optax.tree.dtype(unordered, "lowest")
    halves = {"a": _ones(2, jnp.bfloat16), "b": _ones(2, jnp.float16)}
    assert tree.dtype(halves, "promote") == optax.tree.dtype(halves, "promote")
    for handler in ("highest", "lowest"):
        with pytest.raises(ValueError):
            optax.tree.dtype(halves, handler)
        with pytest.raises(ValueError, match="cannot order bfloat16 and float16"):
            tree.dtype(halves, handler)
    with pytest.raises(ValueError, match="mixed_dtype_handler must be"):
        tree.dtype(mixed, "biggest")


# --------------------------------------------------------------------------------------------
# Moments
# --------------------------------------------------------------------------------------------


def test_moment_updates_match_optax_over_several_steps():
    params = small_params()
    grads = [small_params(seed) for seed in range(1, 6)]

    @jax.jit  # one compilation, reused for every step
    def step(g, ours, theirs, count):
        ours = [
            tree.update_moment(g, ours[0], 0.9, 1),
            tree.update_moment(g, ours[1], 0.99, 2),
            tree.update_infinity_moment(g, ours[2], 0.9, 1e-8),
            tree.update_moment_per_elem_norm(g, ours[3], 0.9, 3),
        ]
        theirs = [
            optax.tree.update_moment(g, theirs[0], 0.9, 1),
            optax.tree.update_moment(g, theirs[1], 0.99, 2),
            optax.tree.update_infinity_moment(g, theirs[2], 0.9, 1e-8),
            optax.tree.update_moment_per_elem_norm(g, theirs[3], 0.9, 3),
        ]
        corrected = (
            tree.bias_correction(ours[0], 0.9, count),
            optax.tree.bias_correction(theirs[0], 0.9, count),
        )
        return ours, theirs, corrected

    ours = [tree.zeros_like(params) for _ in range(4)]
    theirs = [optax.tree.zeros_like(params) for _ in range(4)]
    for count, g in enumerate(grads, start=1):
        ours, theirs, (ours_hat, theirs_hat) = step(g, ours, theirs, jnp.int32(count))
        for o, t in zip(ours, theirs, strict=True):
            _close(o, t, rtol=1e-5)
        _close(ours_hat, theirs_hat, rtol=1e-5)


def test_moment_updates_of_complex_leaves_and_none_match_optax():
    g = {"a": np.asarray([1 + 2j, -3 - 1j], np.complex64), "none": None}
    m = {"a": np.asarray([0.5, 0.25], np.float32), "none": None}
    half = {"a": np.ones(2, jnp.bfloat16)}

    @jax.jit  # one compilation for all cases
    def all_cases(g, m, half):
        per_elem_norm = [
            (
                tree.update_moment_per_elem_norm(g, m, 0.9, order),
                optax.tree.update_moment_per_elem_norm(g, m, 0.9, order),
            )
            for order in (1, 2, 3)
        ]
        return (
            per_elem_norm,
            (tree.update_moment(g, g, 0.9, 2), optax.tree.update_moment(g, g, 0.9, 2)),
            (tree.bias_correction(m, 0.999, 3), optax.tree.bias_correction(m, 0.999, 3)),
            tree.bias_correction(half, 0.9, 2),
        )

    per_elem_norm, moment, corrected, half_corrected = all_cases(*jax.device_put((g, m, half)))
    for got, want in per_elem_norm:
        _close(got, want, rtol=1e-6)
    _close(*moment)
    _close(*corrected)
    assert half_corrected["a"].dtype == jnp.bfloat16


# --------------------------------------------------------------------------------------------
# Random trees
# --------------------------------------------------------------------------------------------


def test_random_trees_match_optax():
    x = small_params()

    def no_sharding(k, shape, dtype):
        return jax.random.bernoulli(k, 0.5, shape).astype(dtype)

    @jax.jit  # one compilation for all cases
    def all_cases(key, x):
        keys, want_keys = tree.split_key_like(key, x), optax.tree.split_key_like(key, x)
        return [
            (tree.random_like(key, x), optax.tree.random_like(key, x)),
            (
                tree.random_like(key, x, jax.random.uniform, jnp.float16),
                optax.tree.random_like(key, x, jax.random.uniform, jnp.float16),
            ),
            (tree.random_like(key, x, no_sharding), optax.tree.random_like(key, x, no_sharding)),
            (tree.unwrap_random_key_data(keys), optax.tree.unwrap_random_key_data(want_keys)),
        ]

    key = jax.random.key(3)
    for got, want in all_cases(key, x):
        _close(got, want)
    mixed = {"k": key, "w": jnp.ones(2), "raw": jax.random.PRNGKey(0)}
    _close(tree.unwrap_random_key_data(mixed), optax.tree.unwrap_random_key_data(mixed))
    assert jax.tree.structure(tree.split_key_like(key, x)) == jax.tree.structure(x)


# --------------------------------------------------------------------------------------------
# State access: get / get_all_with_path / set / map_params
# --------------------------------------------------------------------------------------------


def _states():
    params = {"w": jnp.ones(3), "b": jnp.zeros(2)}
    ours = gradtx.chain(gradtx.add_noise(1.0, 0.9, key=0), gradtx.scale_by_adam())
    theirs = optax.chain(optax.add_noise(1.0, 0.9, key=0), optax.scale_by_adam())
    return params, ours, theirs, ours.init(params), theirs.init(params)


def test_get_finds_a_namedtuple_by_its_class_name_as_optax_does():
    _, _, _, ours, theirs = _states()
    got = tree.get(ours, "ScaleByAdamState")
    want = optax.tree.get(theirs, "ScaleByAdamState")
    assert type(got).__name__ == "ScaleByAdamState"
    _close(got.mu, want.mu)
    _close(got.nu, want.nu)
    # The root itself, by its class name.
    assert tree.get(got, "ScaleByAdamState") is got
    assert optax.tree.get(want, "ScaleByAdamState") is want
    # A class name as a path component.
    assert tree.get(ours, "ScaleByAdamState/count") is got.count
    found = tree.get_all_with_path(ours, "ScaleByAdamState")
    assert [p for p, _ in found] == ["1"] and found[0][1] is got
    assert [p for p, _ in tree.get_all_with_path(got, "ScaleByAdamState")] == [""]


def test_set_replaces_a_namedtuple_by_its_class_name_as_optax_does():
    _, _, _, ours, theirs = _states()
    adam = tree.get(ours, "ScaleByAdamState")
    new_adam = adam._replace(mu=tree.full_like(adam.mu, 2.0))
    got = tree.set(ours, ScaleByAdamState=new_adam)
    want_adam = optax.tree.get(theirs, "ScaleByAdamState")
    want = optax.tree.set(
        theirs, ScaleByAdamState=want_adam._replace(mu=optax.tree.full_like(want_adam.mu, 2.0))
    )
    _close(tree.get(got, "ScaleByAdamState").mu, optax.tree.get(want, "ScaleByAdamState").mu)
    assert tree.get(got, "ScaleByAdamState") is new_adam
    with pytest.raises(ValueError, match="differ"):
        tree.set(ours, ScaleByAdamState=adam._replace(mu={"w": jnp.ones(3)}))
    with pytest.raises(KeyError, match="did you mean 'ScaleByAdamState'"):
        tree.set(ours, ScaleByAdamStat=new_adam)


def test_get_with_filtering_sees_namedtuple_keys_as_optax():
    _, _, _, ours, theirs = _states()

    def in_adam(path, value):
        return isinstance(path[-1], tree.NamedTupleKey) and path[-1].tuple_name == (
            "ScaleByAdamState"
        )

    def in_adam_optax(path, value):
        return getattr(path[-1], "tuple_name", None) == "ScaleByAdamState"

    got = tree.get(ours, "count", filtering=in_adam)
    want = optax.tree.get(theirs, "count", filtering=in_adam_optax)
    assert int(got) == int(want) == 0
    assert got is tree.get(ours, "ScaleByAdamState").count
    assert str(tree.NamedTupleKey("ScaleByAdamState", "mu")) == "ScaleByAdamState.mu"
    found = tree.get_all_with_path(ours, "count", lambda p, v: False)
    assert found == []
    assert tree.get(ours, "count", None, lambda p, v: False) is None
    new = tree.set(ours, in_adam, count=5)
    assert int(tree.get(new, "ScaleByAdamState").count) == 5
    assert int(tree.get(new, "AddNoiseState").count) == 0
    want_new = optax.tree.set(theirs, in_adam_optax, count=5)
    assert int(optax.tree.get(want_new, "ScaleByAdamState").count) == 5
    with pytest.raises(KeyError, match="that the filtering accepts"):
        tree.set(ours, lambda p, v: False, count=5)
    with pytest.raises(TypeError, match="filtering"):
        tree.set(ours, 3, count=5)


def test_ambiguous_get_is_a_key_error_as_in_optax_and_a_value_error():
    _, _, _, ours, theirs = _states()
    with pytest.raises(KeyError):
        optax.tree.get(theirs, "count")
    with pytest.raises(KeyError, match="'count' is ambiguous"):
        tree.get(ours, "count")
    with pytest.raises(ValueError, match="'count' is ambiguous"):
        tree.get(ours, "count")


def test_get_and_set_agree_with_optax_on_field_and_key_names():
    params = jnp.ones(3)
    ours = gradtx.inject_hyperparams(gradtx.sgd)(learning_rate=0.1).init(params)
    theirs = optax.inject_hyperparams(optax.sgd)(learning_rate=0.1).init(params)
    np.testing.assert_allclose(
        tree.get(ours, "learning_rate"), optax.tree.get(theirs, "learning_rate")
    )
    np.testing.assert_allclose(
        tree.get(tree.set(ours, learning_rate=0.5), "learning_rate"),
        optax.tree.get(optax.tree.set(theirs, learning_rate=0.5), "learning_rate"),
    )
    # Deliberate: a missing key raises (with close matches) unless a default is given; Optax
    # returns None.
    assert optax.tree.get(theirs, "nope") is None
    assert tree.get(ours, "nope", None) is None
    with pytest.raises(KeyError, match="no field or key 'nope'"):
        tree.get(ours, "nope")


class _Inner(NamedTuple):
    mu: Any
    note: Any


def test_map_params_matches_optax():
    params = {"w": jnp.ones(3), "b": jnp.zeros(2)}
    ours_tx, theirs_tx = gradtx.adam(0.1), optax.adam(0.1)
    ours, theirs = ours_tx.init(params), theirs_tx.init(params)
    specs = {"w": "W", "b": "B"}
    got = tree.map_params(ours_tx, lambda _, s: s, ours, specs, transform_non_params=lambda _: None)
    want = optax.tree.map_params(
        theirs_tx, lambda _, s: s, theirs, specs, transform_non_params=lambda _: None
    )
    assert tree.get(got, "mu") == optax.tree.get(want, "mu") == specs
    assert tree.get(got, "nu") == specs
    assert tree.get(got, "0/count") is None and tree.get(got, "1/count") is None
    assert optax.tree.get(want[0], "count") is None
    # An init function works as the initable too, and other parts are kept by default.
    doubled = tree.map_params(ours_tx.init, lambda x: 2 * x + 1, ours)
    _close(tree.get(doubled, "mu"), tree.full_like(params, 1.0))
    assert tree.get(doubled, "0/count") is tree.get(ours, "0/count")


def test_existing_names_still_resolve_before_class_names():
    state = _Inner(mu={"mu": jnp.ones(1)}, note=jnp.zeros(()))
    assert tree.get(state, "mu") is state.mu  # the field, outermost
    assert tree.get(state, "_Inner") is state
    assert tree.get(state, "_Inner/note") is state.note
    assert tree.paths(state) == ["mu/mu", "note"]


def test_colliding_paths_are_refused_by_every_path_keyed_consumer(tmp_path):
    """`{"a/b": x, "a": {"b": y}}` flattens to two leaves named "a/b": state dicts, checkpoint
    files, orbax keys and the torch converter's parameter paths all refuse it, naming the path
    and the fix (one helper, `tree._paths.named_leaves`)."""
    from gradtx.checkpoint import CheckpointError
    from gradtx.tree._paths import named_leaves

    clash = {"a/b": jnp.zeros(2), "a": {"b": jnp.ones(2)}}
    items, _ = named_leaves("t", {"a": {"b": 1}, "c": [2]})
    assert items == [("a/b", 1), ("c/0", 2)]
    assert named_leaves("t", jnp.zeros(()), root="value")[0][0][0] == "value"
    with pytest.raises(ValueError, match=r"t: two leaves have the path 'a/b'; rename"):
        named_leaves("t", clash)
    with pytest.raises(CheckpointError, match=r"state_dict: two leaves have the path 'a/b'"):
        gradtx.state_dict(clash)
    with pytest.raises(CheckpointError, match=r"save: two leaves have the path 'a/b'"):
        gradtx.save(tmp_path / "s.gtx", clash)
    with pytest.raises(CheckpointError, match="reserves"):
        gradtx.state_dict({"__metadata__": jnp.zeros(1)})
