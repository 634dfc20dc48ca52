"""The block-wise dynamic 8-bit codec (gradtx/state/_quantize.py): tables, nearest rounding
within the code's bound per block, and non-finite values."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradtx
from gradtx.state import _quantize as Q

BLOCK = 64


@pytest.fixture(scope="module")
def codec():
    """Jitted encode / decode for both codes (compiled once per shape)."""
    enc = {
        s: jax.jit(lambda x, s=s: Q.encode(x, block_size=BLOCK, signed=s)) for s in (True, False)
    }
    return enc, jax.jit(Q.decode)


def _awkward_values(rng: np.random.Generator) -> np.ndarray:
    """Blocks of: random normals, mixed magnitudes 1e-30..1e30, zeros, denormals, one outlier,
    values at the table's midpoints, and a ragged tail (not a whole block)."""
    blocks = [
        rng.standard_normal(BLOCK),
        rng.standard_normal(BLOCK) * 10.0 ** rng.uniform(-30, 30, BLOCK),
        np.zeros(BLOCK),
        np.full(BLOCK, 1e-40) * rng.choice([-1, 1], BLOCK),  # float32 denormals
        np.concatenate([[1e6], rng.standard_normal(BLOCK - 1) * 1e-3]),
        np.resize(Q._thresholds(Q.SIGNED_TABLE), BLOCK),
        rng.standard_normal(BLOCK // 2 + 3),
    ]
    return np.concatenate(blocks).astype(np.float32)


def _bound(table: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Half the gap between the two table entries around each y (the nearest-rounding bound)."""
    hi = np.clip(np.searchsorted(table, y), 1, table.size - 1)
    return (table[hi].astype(np.float64) - table[hi - 1]) / 2.0


def _blockwise(x: np.ndarray, fn) -> np.ndarray:
    n = x.size
    pad = -n % BLOCK
    xb = np.concatenate([x, np.zeros(pad, x.dtype)]).reshape(-1, BLOCK)
    return np.repeat(fn(xb), BLOCK)[:n]


def test_tables():
    for table, signed in ((Q.SIGNED_TABLE, True), (Q.UNSIGNED_TABLE, False)):
        assert table.size == 255 and np.all(np.diff(table) > 0)
        assert table[-1] == 1.0 and 0.0 in table
        assert np.isnan(Q.decode_table(signed)).sum() == 1
    assert np.array_equal(Q.SIGNED_TABLE, -Q.SIGNED_TABLE[::-1])  # symmetric, code 0 is 0.0
    assert Q.SIGNED_TABLE[127] == 0.0 and Q.UNSIGNED_TABLE[0] == 0.0
    # dynamic: each decade 10^(d-6)[0.1, 1] has twice the entries of the one below
    counts = [
        np.sum((10.0 ** (d - 7) < Q.SIGNED_TABLE) & (10.0 ** (d - 6) > Q.SIGNED_TABLE))
        for d in range(1, 7)
    ]
    assert counts == [2, 4, 8, 16, 32, 64]


@pytest.mark.parametrize("signed", [True, False], ids=["signed", "unsigned"])
def test_round_trip_within_the_codes_bound_per_block(codec, signed):
    enc, dec = codec
    x = _awkward_values(np.random.default_rng(0))
    if not signed:
        x = np.abs(x)
    q = enc[signed](jnp.asarray(x))
    assert q.codes.dtype == (jnp.int8 if signed else jnp.uint8) and q.codes.shape == x.shape
    assert q.scale.dtype == jnp.float32 and q.scale.shape == (-(-x.size // BLOCK),)
    out = np.asarray(dec(q), np.float64)
    stored = x.astype(np.float64) if signed else np.sqrt(x.astype(np.float64))
    absmax = _blockwise(np.abs(stored), lambda b: b.max(axis=1))
    y = np.divide(stored, absmax, out=np.zeros_like(stored), where=absmax > 0)
    table = Q.SIGNED_TABLE if signed else Q.UNSIGNED_TABLE
    bound = absmax * _bound(table, y)
    got = out if signed else np.sqrt(out)
    tiny = np.finfo(np.float32).tiny  # denormals may be flushed to zero (also a squared decode)
    slack = tiny if signed else np.sqrt(tiny)
    np.testing.assert_array_less(np.abs(got - stored), bound * (1 + 1e-5) + 1e-6 * absmax + slack)
    # the block maximum is exact (it codes to +-1)
    top = (np.abs(stored) == absmax) & (np.abs(x) > tiny)
    np.testing.assert_allclose(got[top], stored[top], rtol=1e-6)
    # blocks of zeros stay zeros
    assert np.all(out[BLOCK * 2 : BLOCK * 3] == 0.0)


@pytest.mark.parametrize("signed", [True, False], ids=["signed", "unsigned"])
def test_non_finite_values_stay_visible_and_finite_ones_stay_finite(codec, signed):
    enc, dec = codec
    rng = np.random.default_rng(1)
    x = np.abs(rng.standard_normal(3 * BLOCK)).astype(np.float32)
    if signed:
        x *= rng.choice([-1, 1], x.size)
    bad = {3: np.nan, 70: np.inf, 71: -np.inf if signed else np.inf, 150: np.nan}
    for i, v in bad.items():
        x[i] = v
    out = np.asarray(dec(enc[signed](jnp.asarray(x))))
    assert np.all(np.isnan(out[list(bad)]))  # NaN and +-inf decode to NaN: still not finite
    finite = np.isfinite(x)
    assert np.all(np.isfinite(out[finite]))
    # the non-finite values do not disturb their blocks: same codes as with them zeroed
    clean = np.where(finite, x, 0.0).astype(np.float32)
    np.testing.assert_array_equal(out[finite], np.asarray(dec(enc[signed](clean)))[finite])


def test_huge_values_never_overflow(codec):
    enc, dec = codec
    big = np.float32(np.finfo(np.float32).max)
    x = np.array([big, -big, big / 3, 1.0] * (BLOCK // 4), np.float32)
    out = np.asarray(dec(enc[True](jnp.asarray(x))))
    assert np.all(np.isfinite(out)) and out[0] == big and out[1] == -big


def test_positive_second_moments_never_decode_to_zero(codec):
    enc, dec = codec
    x = np.array([1.0] + [1e-30] * (BLOCK - 2) + [0.0], np.float32)
    out = np.asarray(dec(enc[False](jnp.asarray(x))))
    assert np.all(out[:-1] > 0) and out[-1] == 0.0


@pytest.mark.parametrize("signed", [True, False], ids=["signed", "unsigned"])
def test_encoding_a_decoded_buffer_gives_the_same_codes(codec, signed):
    enc, dec = codec
    x = _awkward_values(np.random.default_rng(2))
    x = x if signed else np.abs(x)
    q = enc[signed](jnp.asarray(x))
    again = enc[signed](dec(q))
    np.testing.assert_array_equal(np.asarray(again.codes), np.asarray(q.codes))
    np.testing.assert_array_equal(np.asarray(again.scale), np.asarray(q.scale))


def test_every_code_decodes_to_its_table_entry():
    # the arithmetic decoder (exp-based powers of ten) is the table to 1e-6, and the
    # arithmetic nearest-entry search inverts it
    for signed in (True, False):
        k = jnp.arange(Q._magnitudes(signed).size)
        got = np.asarray(Q._magnitude_of(k.astype(jnp.float32), signed))
        np.testing.assert_allclose(got, Q._magnitudes(signed), rtol=1e-6)
        fast = np.asarray(Q._nearest_fast(jnp.asarray(got), signed)).astype(int)
        assert np.array_equal(fast, np.asarray(k))


def test_fast_and_exact_paths_give_the_same_codes(codec):
    # a NaN anywhere in a leaf sends the whole leaf down the exact path (lax.cond)
    enc, _ = codec
    x = _awkward_values(np.random.default_rng(3))
    for signed in (True, False):
        v = x if signed else np.abs(x)
        fast = enc[signed](jnp.asarray(v))
        with_nan = v.copy()
        with_nan[-1] = np.nan  # in the short last block (419 values: flat blocks of 64)
        exact = enc[signed](jnp.asarray(with_nan))
        n = v.size
        same = np.asarray(exact.codes) == np.asarray(fast.codes)
        np.testing.assert_array_equal(np.asarray(exact.scale)[:-1], np.asarray(fast.scale)[:-1])
        assert same[: n - n % BLOCK].all()  # the exact path codes finite values the same way


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"block_size": 8}, "block_size must be an integer >= 16, got 8"),
        ({"block_size": 64.0}, "block_size must be an integer >= 16, got 64.0"),
        ({"min_size": -1}, "min_size must be an integer >= 0, got -1"),
        ({"signed": "yes"}, "signed must be True, False or None, got 'yes'"),
    ],
)
def test_quantized_rejects_invalid_arguments(kwargs, message):
    with pytest.raises(ValueError, match="^quantized: " + message):
        gradtx.quantized(**kwargs)


@pytest.mark.parametrize("signed", [True, False], ids=["signed", "unsigned"])
def test_constant_buffers_equal_encoding_the_constant(signed):
    # `zeros` (every state's init) fills each block with one encoded value instead of encoding
    # the leaf; the result is bit-identical, including the values it encodes as a whole
    # (denormals, which the CPU flushes in a block's maximum, and non-finite ones).
    spec = gradtx.quantized(block_size=64, min_size=16)
    values = [0.0, -0.0, 1e-8, 0.1, 3.0, -2.0, 1e30, 3e38, 1.2e-38, 1e-40, float("inf"), np.nan]
    encode = jax.jit(lambda x: Q.encode(x, block_size=64, signed=signed))
    for shape in [(24, 40), (257,)]:  # row blocks; flat blocks with a last block of 1
        leaf = jax.ShapeDtypeStruct(shape, jnp.float32)
        for c in values:
            got = Q.zeros(leaf, spec, signed, c)
            ref = encode(jnp.full(shape, c, jnp.float32))
            assert got.codes.dtype == ref.codes.dtype and got.scale.shape == ref.scale.shape
            np.testing.assert_array_equal(np.asarray(got.codes), np.asarray(ref.codes), str(c))
            np.testing.assert_array_equal(
                np.asarray(got.scale).view(np.uint32), np.asarray(ref.scale).view(np.uint32), str(c)
            )


_COMPILED: list[str] = []
jax.monitoring.register_event_duration_secs_listener(
    lambda event, _, **kw: (
        _COMPILED.append(kw.get("fun_name", ""))
        if event == "/jax/core/compile/backend_compile_duration"
        else None
    )
)


def test_an_eager_step_with_8bit_moments_compiles_nothing_after_the_first():
    # encode's lax.cond used to close over its input: new branch functions every call, so
    # every eager step compiled its cond again
    tx = gradtx.adam(1e-3, mu_dtype=gradtx.quantized(), nu_dtype=gradtx.quantized())
    params = {"w": jnp.linspace(-1.0, 1.0, 64 * 64).reshape(64, 64), "b": jnp.ones(64)}
    updates, state = tx.update(params, tx.init(params), params)
    del _COMPILED[:]
    for _ in range(3):
        updates, state = tx.update(updates, state, params)
    assert _COMPILED == []
    assert np.all(np.isfinite(np.asarray(updates["w"])))
