"""Packed 8-bit states (`gradtx.quantized(pack_leaves=True)`, the default): all quantized leaves
of a buffer go through one codec, and every code, scale, decoded moment and update is
bit-identical to the per-leaf path (`pack_leaves=False`)."""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding, PartitionSpec

import gradtx
from gradtx.state import _quantize as Q
from gradtx.state._packing import Packing


# Packed and per-leaf steps are different programs: their bit-identity is checked as users
# compile them (XLA's full optimization, see tests/conftest.py, with jax's default XLA:CPU
# emitters: XLA's classic emitter, which `make test`'s main lane uses, rounds the two programs'
# updates up to 3 ulp apart, so these run in the processes lane).
def optimized(test):
    return pytest.mark.default_emitters(pytest.mark.usefixtures("optimized_xla")(test))


def _spec(pack: bool) -> gradtx.QuantizedDtype:
    return gradtx.quantized(block_size=64, min_size=256, pack_leaves=pack)


def _params():
    rng = np.random.default_rng(0)
    shapes = {
        "rows40": (24, 40),  # row blocks of 40 (a divisor of the last axis in [32, 64])
        "rows45": (7, 45),  # row blocks of 45: a width of its own
        "flat": (263,),  # prime: flat blocks, a short last block of 7
        "tiny": (8,),  # below min_size: float32
    }  # more layouts (rows of the flat blocks' width, flat blocks over rows): the codec test
    params = {k: jnp.asarray(rng.standard_normal(s), jnp.float32) for k, s in shapes.items()}
    params["half"] = jnp.asarray(rng.standard_normal((16, 48)), jnp.bfloat16)  # rows of 48
    return params


def _grads(params, step):
    g = jax.tree.map(lambda p: jnp.sin((step + 1.0) * p.astype(jnp.float32)) * 10.0**-step, params)
    g = {k: v.astype(params[k].dtype) for k, v in g.items()}
    if step == 2:  # a NaN and an infinity in two leaves, a huge value in a third
        g["flat"] = g["flat"].at[5].set(jnp.nan)
        g["rows40"] = g["rows40"].at[3, 7].set(jnp.inf)
        g["rows45"] = g["rows45"].at[0, 0].set(3e38)
    return g


def _bits(x) -> np.ndarray:
    x = np.asarray(x)
    return x.view(f"u{x.dtype.itemsize}") if x.dtype.kind == "f" or x.dtype == jnp.bfloat16 else x


def _assert_bit_identical(a, b):
    la, lb = jax.tree.leaves(a), jax.tree.leaves(b)
    assert jax.tree.structure(a) == jax.tree.structure(b)
    for i, (x, y) in enumerate(zip(la, lb, strict=True)):
        assert x.dtype == y.dtype and x.shape == y.shape, i
        np.testing.assert_array_equal(_bits(x), _bits(y), err_msg=f"leaf {i}")


def _step_both_ways(make, params, steps):
    """`make(spec)` packed and per leaf stepped on `_grads` under jit, every update and state
    checked bit for bit; the packed state, the last gradients and the packed transformation."""
    packed, per_leaf = make(_spec(True)), make(_spec(False))
    sp, sl = packed.init(params), per_leaf.init(params)
    step_p, step_l = jax.jit(packed.update), jax.jit(per_leaf.update)
    for step in range(steps):
        g = _grads(params, step)
        up, sp = step_p(g, sp, params)
        ul, sl = step_l(g, sl, params)
        _assert_bit_identical(up, ul)
        _assert_bit_identical(sp, sl)
    return sp, g, packed


@optimized
def test_packed_is_bit_identical_to_per_leaf():
    # AMSGrad: Adam's two buffers and a third (nu_max) through the same packed code; one case,
    # since each per-leaf 8-bit build costs seconds (the 8-bit Adam family is checked against
    # float32 in tests/test_quantized_moments.py, packed by default).
    params = _params()
    make = lambda q: gradtx.amsgrad(0.01, mu_dtype=q, nu_dtype=q)
    _assert_bit_identical(make(_spec(True)).init(params), make(_spec(False)).init(params))
    sp, _, _ = _step_both_ways(make, params, 5)
    mu = sp[0].mu
    assert Q.is_quantized(mu["flat"]) and not Q.is_quantized(mu["tiny"])
    assert np.isnan(np.asarray(Q.decode(mu["flat"]))[5])  # the NaN stays visible
    assert np.all(np.isfinite(np.asarray(Q.decode(mu["half"]))))  # other leaves stay finite


@optimized
@pytest.mark.parametrize(
    "make",
    [
        lambda q: gradtx.lion(0.01, mu_dtype=q),
        lambda q: gradtx.sgd(0.1, momentum=0.9, nesterov=True, accumulator_dtype=q),
    ],
    ids=["lion", "sgd_nesterov"],
)
def test_one_buffer_rules_pack_bit_identically(make):
    # Lion's momentum and `trace` (one buffer, `step_buffer`): row and flat blocks, a bf16 leaf,
    # a float32 leaf; the third step brings a NaN, an infinity and 3e38.
    params = _params()
    sp, g, packed = _step_both_ways(make, params, 3)
    jaxpr = str(jax.make_jaxpr(packed.update)(g, sp, params))
    # one codec per block width (40, 45, 48 and the flat blocks' 64) of the four quantized leaves
    assert jaxpr.count("cond[") == 4


@optimized
def test_packing_codec_matches_encode_and_decode_per_leaf():
    rng = np.random.default_rng(1)
    shapes = [(24, 40), (10, 64), (263,), (13, 31), (7, 45), (64,)]
    xs = [
        jnp.asarray(rng.standard_normal(s) * 10.0 ** rng.uniform(-20, 20, s), jnp.float32)
        for s in shapes
    ]
    xs[2] = xs[2].at[9].set(jnp.inf)
    layout = Packing.of(shapes, 64)
    assert [w for w, _ in layout.groups] == [40, 45, 64]  # 263 and 13x31 pad their last rows
    for signed in (True, False):

        @jax.jit
        def both(xs, signed=signed):
            packed = layout.encode(layout.pack(xs), signed)
            ref = [Q.encode(x, block_size=64, signed=signed) for x in xs]
            values = layout.unpack(layout.decode(packed, signed))
            restacked = layout.unpack(layout.decode(layout.stack(ref), signed))
            ref_values = [Q.decode(q) for q in ref]
            return layout.buffers(packed, signed), values, ref, ref_values, restacked

        bufs, values, ref, ref_values, restacked = both(xs)
        _assert_bit_identical(bufs, ref)
        _assert_bit_identical(values, ref_values)
        _assert_bit_identical(restacked, ref_values)


def test_pack_leaves_option_is_validated_and_shown():
    assert "pack_leaves=False" in repr(gradtx.quantized(pack_leaves=False))
    with pytest.raises(ValueError, match="pack_leaves must be True or False, got 1"):
        gradtx.quantized(pack_leaves=1)  # type: ignore[arg-type]


def test_one_codec_for_all_leaves_in_the_compiled_step():
    # The jaxpr of a packed step holds one NaN/inf cond per buffer (mu, nu) and block width (one
    # here), not one per leaf.
    params = {f"w{i}": jnp.ones((16, 64)) for i in range(6)}
    for pack, conds in ((True, 2), (False, 12)):
        q = gradtx.quantized(block_size=64, min_size=256, pack_leaves=pack)
        tx = gradtx.adam(0.01, mu_dtype=q, nu_dtype=q)
        jaxpr = jax.make_jaxpr(tx.update)(params, tx.init(params), params)
        assert str(jaxpr).count("cond[") == conds, pack


@optimized
def test_packed_state_keeps_its_sharding_on_8_devices():
    devices = np.array(jax.devices()[:8])
    if devices.size < 8:
        pytest.skip("needs 8 devices")
    mesh = Mesh(devices, ("x",))
    params = {"w": jnp.linspace(-1, 1, 64 * 64).reshape(64, 64), "v": jnp.linspace(0, 1, 512)}
    shard = {
        "w": NamedSharding(mesh, PartitionSpec("x")),
        "v": NamedSharding(mesh, PartitionSpec()),
    }
    params = jax.device_put(params, shard)
    results = {}
    for pack in (True, False):
        tx = gradtx.adam(0.01, mu_dtype=_spec(pack), nu_dtype=_spec(pack))
        specs = gradtx.state_sharding(tx, params, mesh=mesh)
        state = jax.device_put(tx.init(params), specs)
        g = jax.tree.map(lambda x: 0.1 * x, params)
        u, s = jax.jit(tx.update, out_shardings=(None, specs))(g, state, params)
        assert s[0].mu["w"].codes.sharding.spec == PartitionSpec("x")
        results[pack] = jax.device_get((u, s))
    # the states bit for bit; the updates to rounding (XLA rewrites the update's divisions,
    # e.g. (m / c1) / d as m / (c1 * d), differently in the two partitioned programs)
    _assert_bit_identical(results[True][1], results[False][1])
    chex.assert_trees_all_close(results[True][0], results[False][0], rtol=1e-6, atol=0)
