"""4-bit and companded 8-bit state codecs (`gradtx/state/_lowbit.py`): every value decodes within
the documented bound, codes re-encode to themselves, NaN and infinity stay visible, 4-bit codes
pack two per byte, the layouts (block, rank-1) and bytes per parameter, checkpoints, migrate and
a checkpoint written before these codecs existed."""

from __future__ import annotations

import itertools
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gradtx
from gradtx.state import _lowbit
from gradtx.state import _quantize as Q

CODECS = [("sqrt8", True), ("sqrt8", False), ("dynamic4", True), ("linear4", False)]
CODECS += [("dynamic", True), ("dynamic", False)]

# one jitted round trip per codec and shape (hypothesis draws shapes from a few)
SHAPES = [(1,), (7,), (130,), (3, 5), (6, 129), (2, 3, 33)]


def _roundtrip(codec, signed, block_size):
    def f(x):
        q = Q.encode(x, block_size=block_size, signed=signed, codec=codec)
        return q, Q.decode(q), Q.error_bound(q)

    return jax.jit(f)


_ROUNDTRIPS: dict = {}


def roundtrip(x, codec, signed, block_size=16):
    key = (codec, signed, block_size)
    if key not in _ROUNDTRIPS:
        _ROUNDTRIPS[key] = _roundtrip(codec, signed, block_size)
    return _ROUNDTRIPS[key](np.asarray(x, np.float32))


@st.composite
def arrays(draw):
    shape = draw(st.sampled_from(SHAPES))
    n = int(np.prod(shape))
    exponent = draw(st.integers(-30, 30))
    spread = draw(st.sampled_from([0.0, 1.0, 4.0]))
    seed = draw(st.integers(0, 2**31 - 1))
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(n) * 10.0 ** (exponent + spread * rng.standard_normal(n))
    zeros = draw(st.sampled_from([0.0, 0.3]))
    x[rng.random(n) < zeros] = 0.0
    # finite float32 values, from normal numbers up to 1e37 (squares of huge second moments
    # overflow in the step, not in the codec; subnormals are flushed on CPU)
    x = np.clip(x, -1e37, 1e37)
    x[np.abs(x) < 1e-36] = 0.0
    return x.astype(np.float32).reshape(shape)


@pytest.mark.parametrize(("codec", "signed"), CODECS)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(x=arrays())
def test_every_value_decodes_within_its_bound_and_codes_re_encode_to_themselves(codec, signed, x):
    stored = x if signed else np.maximum(x, 0.0)
    q, y, bound32 = roundtrip(stored, codec, signed)
    y, bound = np.asarray(y, np.float64), np.asarray(bound32, np.float64)
    assert np.all(np.isfinite(y))
    # the bound, computed in float32, with float32's relative rounding of the products
    err = np.abs(y - stored.astype(np.float64))
    assert np.all(err <= bound * (1 + 1e-5) + 1e-38), (codec, signed, np.max(err - bound))
    if not signed:
        assert np.all(y >= 0)
        # a positive second moment never decodes to 0 (the update divides by it) where its
        # block's scale is a normal number
        normal = np.asarray(bound32) > 1e-30
        assert np.all(y[(stored > 0) & normal] > 0)
    # decoding and encoding again is exact: a decoded buffer is stored as itself
    q2, _, _ = roundtrip(y.astype(np.float32), codec, signed)
    np.testing.assert_array_equal(np.asarray(q2.codes), np.asarray(q.codes))
    np.testing.assert_array_equal(np.asarray(q2.scale), np.asarray(q.scale))


@pytest.mark.parametrize(("codec", "signed"), CODECS)
def test_nan_and_inf_decode_to_nan_and_leave_the_rest_finite(codec, signed):
    x = np.abs(np.random.default_rng(1).standard_normal((6, 40))).astype(np.float32)
    x[2, 3], x[4, 39] = np.nan, np.inf
    _, y, _ = roundtrip(x, codec, signed)
    y = np.asarray(y)
    assert np.isnan(y[2, 3]) and np.isnan(y[4, 39])
    finite = np.ones_like(x, bool)
    finite[2, 3] = finite[4, 39] = False
    assert np.all(np.isfinite(y[finite]))
    # the block (rows, columns) of a NaN is scaled by its finite values
    assert np.max(np.abs(y[finite] - x[finite])) <= np.max(x[finite])


@pytest.mark.parametrize(("codec", "signed"), CODECS)
def test_a_nan_in_a_large_buffer_stays_nan(codec, signed):
    """XLA:CPU's `max` reductions of 4096 values or more drop a NaN (op by op, and in some
    fusions); the scales must not, or the fast path codes the NaN as a number (linear4: the
    first level; sqrt8: 0)."""
    for shape, bad in itertools.product([(8, 1024), (512, 512), (65536,)], [np.nan, np.inf]):
        x = np.ones(shape, np.float32)
        x.reshape(-1)[-300] = bad  # the only non-finite value
        eager = Q.decode(Q.encode(jnp.asarray(x), block_size=128, signed=signed, codec=codec))
        for y in (eager, roundtrip(x, codec, signed, block_size=128)[1]):
            y = np.asarray(y).reshape(-1)
            assert np.isnan(y[-300]), (shape, bad, y[-300])
            assert y[-299] == 1.0


def test_4bit_codes_pack_two_per_byte_and_the_maps_are_the_papers():
    x = np.linspace(-1.0, 1.0, 15, dtype=np.float32)
    q, y, _ = roundtrip(x, "dynamic4", True)
    assert q.codes.dtype == jnp.uint8 and q.codes.shape == (8,)
    # the levels of the dynamic-exponent map decode to themselves (within 1e-7; 1 and 0 exactly)
    levels = np.concatenate([-_lowbit.DYNAMIC4_MAGNITUDES[::-1], _lowbit.DYNAMIC4_MAGNITUDES[1:]])
    _, y, _ = roundtrip(levels, "dynamic4", True)
    np.testing.assert_allclose(np.asarray(y), levels, rtol=0, atol=1e-7)
    y = np.asarray(y)
    assert float(y[0]) == -1.0 and float(y[7]) == 0.0 and float(y[-1]) == 1.0
    # low nibble first: codes -7 (nibble 1) and 7 (nibble 15)
    q, _, _ = roundtrip(np.array([-1.0, 1.0], np.float32), "dynamic4", True)
    assert int(np.asarray(q.codes)[0]) == 1 + 16 * 15
    # linear4: (k + 1) / 15 of the normaliser, zero-free; 0 decodes to the first level
    v = np.array([0.0, 1.0 / 15, 0.45, 1.0], np.float32)
    _, y, _ = roundtrip(v, "linear4", False)
    np.testing.assert_allclose(np.asarray(y), [1 / 15, 1 / 15, 7 / 15, 1.0], rtol=1e-6)


def test_rank1_normaliser_is_the_smaller_of_row_and_column_maxima():
    rng = np.random.default_rng(3)
    rows, cols = rng.lognormal(0, 2, 40), rng.lognormal(0, 2, 48)
    v = np.outer(rows, cols).astype(np.float32)  # (40 + 48) * 16 <= 40 * 48: rank-1
    q, y, bound = roundtrip(v, "linear4", False)
    assert q.scale.shape == (40 + 48,)
    scale = np.asarray(q.scale)
    np.testing.assert_allclose(scale[:40], v.max(axis=1))
    np.testing.assert_allclose(scale[40:], v.max(axis=0))
    n = np.minimum(v.max(axis=1)[:, None], v.max(axis=0)[None, :])
    np.testing.assert_allclose(np.asarray(bound), n / 15, rtol=1e-6)
    assert np.all(np.abs(np.asarray(y) - v) <= n / 15 * (1 + 1e-6))
    # stacked matrices (L, d_in, d_out): one normaliser per matrix
    q3, y3, _ = roundtrip(np.stack([v, 10.0 * v]), "linear4", False)
    assert q3.scale.shape == (2 * (40 + 48),)
    np.testing.assert_allclose(np.asarray(y3)[1], 10.0 * np.asarray(y), rtol=1e-6)
    # a small matrix, where rows and columns would need more scales than blocks: blocks
    small, _, _ = roundtrip(v[:4, :6], "linear4", False)
    assert small.scale.shape == (2,)  # 24 values, blocks of 16
    assert not _lowbit.rank1((64, 64), "linear4", 128) and _lowbit.rank1((256, 256), "linear4", 128)


def test_quantized_spec_arguments_and_defaults():
    q4 = gradtx.quantized(bits=4)
    assert (q4.bits, q4.block_size, q4.codec(True), q4.codec(False)) == (
        4,
        128,
        "dynamic4",
        "linear4",
    )
    qs = gradtx.quantized(mapping="sqrt")
    assert (qs.block_size, qs.codec(True)) == (256, "sqrt8")
    assert gradtx.quantized() == gradtx.quantized(bits=8, mapping="dynamic", block_size=2048)
    with pytest.raises(ValueError, match="bits must be 8 or 4"):
        gradtx.quantized(bits=2)
    with pytest.raises(ValueError, match="mapping must be one of"):
        gradtx.quantized(bits=4, mapping="sqrt")
    with pytest.raises(ValueError, match="mapping must be one of"):
        gradtx.quantized(mapping="log")


def _matrix_params():
    rng = np.random.default_rng(0)
    params = {
        "w": rng.standard_normal((64, 128)),
        "stack": rng.standard_normal((2, 64, 96)),
        "bias": rng.standard_normal(128),
    }
    return jax.device_put(jax.tree.map(lambda x: x.astype(np.float32), params))


def test_4bit_adamw_holds_about_one_byte_per_parameter():
    q4 = gradtx.quantized(bits=4, min_size=0)
    params = {"w": jax.ShapeDtypeStruct((1024, 1024), jnp.float32)}
    state = jax.eval_shape(gradtx.adamw(1e-3, mu_dtype=q4, nu_dtype=q4).init, params)
    report = gradtx.state_bytes(state, params)
    # codes 0.5 + 0.5 bytes, scales 4 / 128 (first moment) + 4 * 2048 / 2^20 (rank-1)
    assert report.per_parameter == pytest.approx(1.0 + 4 / 128 + 8 / 1024 + 12 / 2**20)
    assert report.per_parameter <= 1.1


def test_checkpoint_round_trip_migrate_and_a_codec_mismatch(tmp_path):
    params = _matrix_params()
    q4, q8 = gradtx.quantized(bits=4, min_size=0), gradtx.quantized(min_size=0)
    tx4 = gradtx.adamw(1e-2, mu_dtype=q4, nu_dtype=q4)
    tx8 = gradtx.adamw(1e-2, mu_dtype=q8, nu_dtype=q8)

    @jax.jit
    def steps(p):
        s = tx4.init(p)
        for i in range(3):
            g = jax.tree.map(lambda x, i=i: jnp.sin(3.0 * x + i), p)
            u, s = tx4.update(g, s, p)
            p = gradtx.apply_updates(p, u)
        return p, s

    _, state = steps(params)
    path = os.path.join(tmp_path, "four.safetensors")
    gradtx.save(path, state)
    back = gradtx.load(path, jax.eval_shape(tx4.init, params))
    for a, b in zip(jax.tree.leaves(state), jax.tree.leaves(back), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    # another codec in the template: refused by a plain load, converted by migrate
    template8 = jax.eval_shape(tx8.init, params)
    with pytest.raises(gradtx.CheckpointError, match="migrate=True"):
        gradtx.load(path, template8)
    moved = gradtx.load(path, template8, migrate=True)
    mu4, mu8 = state[0].mu["w"], moved[0].mu["w"]
    assert mu8.codec == "dynamic"
    decoded4, decoded8, bound8, bound4 = jax.jit(
        lambda mu4, mu8: (Q.decode(mu4), Q.decode(mu8), Q.error_bound(mu8), Q.error_bound(mu4))
    )(mu4, mu8)
    error = np.abs(np.asarray(decoded8) - np.asarray(decoded4))
    assert np.all(error <= np.asarray(bound8) * (1 + 1e-5))
    # 4-bit -> float32 -> 4-bit gives the same codes: float32 holds every decoded value
    plain = gradtx.migrate(state, gradtx.adamw(1e-2), params).state
    again = gradtx.migrate(plain, tx4, params)
    assert "float32 -> 4-bit" in str(again.report)
    for a, b in zip(jax.tree.leaves(state), jax.tree.leaves(again.state), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    summary = gradtx.inspect_state(state)
    shown = {q.key: q for q in summary.quantized}
    assert shown["adam/nu/stack"].storage == "4-bit"
    assert shown["adam/mu/w"].error_bound == pytest.approx(float(np.max(np.asarray(bound4))))
    assert "quantized adam/mu/w: 4-bit of (64, 128)" in str(summary)


def test_a_checkpoint_from_before_the_new_codecs_still_loads():
    # written by gradtx at d72e578 (the 8-bit dynamic codec only): 5 steps of 8-bit Adam
    q = gradtx.quantized(block_size=64, min_size=256)
    tx = gradtx.adam(1e-2, mu_dtype=q, nu_dtype=q)
    rng = np.random.default_rng(0)
    p = {
        "w": rng.standard_normal((24, 40)).astype(np.float32),
        "b": rng.standard_normal(8).astype(np.float32),
    }

    @jax.jit
    def steps(p):
        s = tx.init(p)
        for i in range(5):
            g = jax.tree.map(lambda x, i=i: jnp.sin(3.0 * x + i), p)
            u, s = tx.update(g, s, p)
            p = gradtx.apply_updates(p, u)
        return p, s

    p, s = steps(p)
    here = os.path.join(os.path.dirname(__file__), "golden", "adam_8bit_2026-12.safetensors")
    old = gradtx.load(here, jax.eval_shape(tx.init, p))
    # the same numbers (the file was written by eager steps, these are jitted: ulps apart)
    quantized = Q.is_quantized
    pairs = list(
        zip(
            jax.tree.leaves(s, is_leaf=quantized),
            jax.tree.leaves(old, is_leaf=quantized),
            strict=True,
        )
    )
    codes = [(a, b) for a, b in pairs if quantized(a)]
    for a, b in codes:
        assert (b.codec, b.block_size, b.signed) == ("dynamic", 64, a.signed)
    decoded = jax.jit(
        lambda codes: [(Q.decode(a), Q.decode(b), Q.error_bound(a)) for a, b in codes]
    )
    for da, db, bound in decoded(codes):
        assert np.all(np.abs(np.asarray(da) - np.asarray(db)) <= 2 * np.asarray(bound))
    for a, b in pairs:
        if not quantized(a):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6)
    # and migrates into 4-bit
    four = gradtx.adam(1e-2, mu_dtype=gradtx.quantized(bits=4, min_size=0))
    moved = gradtx.load(here, jax.eval_shape(four.init, p), migrate=True)
    assert moved[0].mu["w"].codec == "dynamic4"


@pytest.mark.parametrize(
    ("make", "kinds"),
    [
        (lambda q: gradtx.contrib.muon(1e-2, mu_dtype=q), {"dynamic4"}),
        (lambda q: gradtx.contrib.mars(1e-3, mu_dtype=q, nu_dtype=q), {"dynamic4", "linear4"}),
    ],
)
def test_matrix_optimizers_and_their_adamw_fallbacks_take_4bit_moments(make, kinds):
    params = _matrix_params()
    tx = make(gradtx.quantized(bits=4, min_size=0))
    state = tx.init(params)
    leaves = jax.tree.leaves(state, is_leaf=Q.is_quantized)
    assert kinds == {leaf.codec for leaf in leaves if Q.is_quantized(leaf)}

    @jax.jit
    def step(p, s):
        g = jax.tree.map(lambda x: jnp.sin(3.0 * x), p)
        u, s = tx.update(g, s, p)
        return gradtx.apply_updates(p, u), s

    p, s = step(params, state)
    p, s = step(p, s)
    assert all(np.all(np.isfinite(np.asarray(x))) for x in jax.tree.leaves(p))


def test_a_nan_gradient_reaches_the_4bit_update():
    q4 = gradtx.quantized(bits=4, min_size=0)
    tx = gradtx.adam(1e-2, mu_dtype=q4, nu_dtype=q4)
    params = {"w": np.ones((8, 16), np.float32)}
    g = {"w": np.ones((8, 16), np.float32)}
    g["w"][3, 4] = np.nan

    @jax.jit
    def first_step(g, params):
        u, s = tx.update(g, tx.init(params), params)
        return u, Q.decode(s[0].mu["w"])

    u, mu = first_step(g, params)
    assert np.isnan(np.asarray(u["w"])[3, 4])
    assert np.isnan(np.asarray(mu)[3, 4])
    assert np.sum(~np.isfinite(np.asarray(u["w"]))) == 1
