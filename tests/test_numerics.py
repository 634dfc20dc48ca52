"""Internal numerics: saturating counters, float32 bias correction, safe norms, schedules; and
Optax's top-level numerics (safe_norm, safe_root_mean_squares, safe_increment, global_norm)
against the installed Optax."""

from __future__ import annotations

import functools
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from gradtx._base import _linalg as la
from gradtx._base import _numerics as num

RTOL = 1e-5


def test_safe_increment_saturates_instead_of_wrapping():
    top = jnp.iinfo(jnp.int32).max
    assert int(num.safe_increment(jnp.int32(5))) == 6
    assert int(num.safe_increment(jnp.int32(top))) == top
    assert num.safe_increment(num.zero_count()).dtype == jnp.int32
    assert int(jax.jit(num.safe_increment)(jnp.int32(top - 1))) == top


def test_bias_correction_is_float32_even_for_bf16_decay():
    c = num.bias_correction(jnp.bfloat16(0.999), jnp.int32(1))
    assert c.dtype == jnp.float32
    # In bf16, 0.999 rounds to 1.0 and the correction would be 0.
    np.testing.assert_allclose(c, 1 - np.float32(jnp.bfloat16(0.999)), rtol=1e-6)
    np.testing.assert_allclose(num.bias_correction(0.9, 3), 1 - 0.9**3, rtol=1e-6)


def test_safe_norm_and_rms_values_and_finite_gradients_at_zero():
    @jax.jit  # one program for every value below
    def values(x, zero):
        return {
            "norm": num.safe_norm(x),
            "norm_min": num.safe_norm(x, min_norm=10.0),
            "rms": num.safe_rms(x),
            "zero_grads": [jax.grad(fn)(zero) for fn in (num.safe_norm, num.safe_rms)],
            "grad": jax.grad(num.safe_norm)(x),
            "bf16": num.safe_norm(jnp.ones(4, jnp.bfloat16)),
            "axis": num.safe_norm(jnp.ones((2, 3)), axis=1),
        }

    x = np.array([3.0, 4.0], np.float32)
    out = values(x, np.zeros(3, np.float32))
    np.testing.assert_allclose(out["norm"], 5.0)
    np.testing.assert_allclose(out["norm_min"], 10.0)
    np.testing.assert_allclose(out["rms"], np.sqrt(12.5), rtol=1e-6)
    for g in out["zero_grads"]:
        assert np.all(np.isfinite(g)) and np.all(g == 0)
    np.testing.assert_allclose(out["grad"], x / 5.0, rtol=1e-6)
    assert out["bf16"].dtype == jnp.float32
    np.testing.assert_allclose(out["axis"], [np.sqrt(3)] * 2, 1e-6)


def test_value_at_calls_schedules_and_keeps_constants():
    assert num.value_at(0.5, jnp.int32(3)) == 0.5
    v = num.value_at(lambda t: t * 2, jnp.int32(3))
    assert v.dtype == jnp.float32 and float(v) == 6.0


# ---------------------------------------------------------------------------------- safe_norm


NORMS = [
    (None, None, False),
    (None, 1, True),
    (1, 1, False),
    (np.inf, 0, True),
    ("nuc", None, False),
]


@functools.cache
def _safe_norms():
    """Ours and Optax's safe_norm of one matrix, values (min_norm 0 and 0.5) and gradients, for
    every (ord, axis, keepdims) of NORMS: one jitted program for the table."""
    x = np.random.default_rng(0).normal(size=(3, 4)).astype(np.float32)
    x[1] = 0.0  # one slice with norm 0 (below min_norm)

    def case(x, fn, ord_, axis, keepdims):
        loss = lambda v: jnp.sum(fn(v, 0.5, ord=ord_, axis=axis, keepdims=keepdims))
        values = [fn(x, m, ord_, axis, keepdims) for m in (0.0, 0.5)]
        return values, jax.grad(loss)(x)

    program = jax.jit(
        lambda x: [[case(x, fn, *c) for fn in (num.safe_norm, optax.safe_norm)] for c in NORMS]
    )
    return dict(zip(NORMS, program(x), strict=True))


@pytest.mark.parametrize(("ord_", "axis", "keepdims"), NORMS)
def test_safe_norm_matches_optax_values_and_gradients(ord_, axis, keepdims):
    (ours, g_ours), (refs, g_ref) = _safe_norms()[ord_, axis, keepdims]
    for value, ref in zip(ours, refs, strict=True):  # min_norm 0.0 and 0.5
        assert value.shape == ref.shape
        np.testing.assert_allclose(value, ref, rtol=RTOL, atol=1e-6)
    assert np.isfinite(g_ours).all()
    np.testing.assert_allclose(g_ours, g_ref, rtol=RTOL, atol=1e-6)


def test_safe_norm_gradient_is_zero_at_zero_and_nan_propagates():
    @jax.jit  # one program for every value below
    def values(zero, with_nan, x, z):
        grad = lambda o: jax.grad(lambda v: num.safe_norm(v, 0.0, o))(zero)
        return {
            "zero_grads": [grad(o) for o in (None, 1, np.inf)],
            "nan": [num.safe_norm(with_nan, 0.0, 1), num.safe_norm(with_nan, 0.0)],
            "default": num.safe_norm(x),
            "bf16": num.safe_norm(jnp.ones(4, jnp.bfloat16), 0.0, 1),
            "complex": [(num.safe_norm(z, 0.0, o), optax.safe_norm(z, 0.0, o)) for o in (None, 1)],
        }

    out = values(
        np.zeros(3, np.float32),
        np.array([1.0, np.nan], np.float32),
        np.array([3.0, 4.0], np.float32),
        np.asarray([3 + 4j, 1j], np.complex64),
    )
    for g in out["zero_grads"]:  # ord None, 1, inf
        np.testing.assert_array_equal(g, np.zeros(3))
    assert all(np.isnan(v) for v in out["nan"])
    # Default min_norm (gradtx's internal callers) and float32 for low-precision inputs.
    np.testing.assert_allclose(out["default"], 5.0)
    assert out["bf16"].dtype == jnp.float32
    for ours, ref in out["complex"]:
        np.testing.assert_allclose(ours, ref, RTOL)


def test_safe_root_mean_squares_matches_optax():
    @jax.jit  # values and gradients, ours and Optax's, for both inputs and min_rms: one program
    def values(vs):
        fns = (num.safe_root_mean_squares, optax.safe_root_mean_squares)
        return [[(fn(v, m), jax.grad(fn)(v, m)) for fn in fns] for v in vs for m in (0.0, 0.3)]

    x = np.random.default_rng(1).normal(size=(5,)).astype(np.float32)
    for (ours, g_ours), (ref, g_ref) in values([x, np.zeros(5, np.float32)]):
        np.testing.assert_allclose(ours, ref, rtol=RTOL)
        np.testing.assert_allclose(g_ours, g_ref, rtol=RTOL, atol=1e-7)


# ------------------------------------------------------------------------------ increments


INCREMENT_DTYPES = [jnp.int32, jnp.int8, jnp.uint8, jnp.float32, jnp.bfloat16]


@functools.cache
def _increments():
    """Ours and Optax's safe_increment of 0, 5 and the largest value of every dtype of
    INCREMENT_DTYPES (scalars of that dtype): one jitted program for the table."""
    counters = {}
    for dtype in INCREMENT_DTYPES:
        info = jnp.iinfo(dtype) if jnp.issubdtype(dtype, jnp.integer) else jnp.finfo(dtype)
        counters[jnp.dtype(dtype).name] = [np.asarray(v, dtype) for v in (0, 5, info.max)]
    program = jax.jit(
        lambda cs: jax.tree.map(lambda c: (num.safe_increment(c), optax.safe_increment(c)), cs)
    )
    return program(counters)


@pytest.mark.parametrize("dtype", INCREMENT_DTYPES)
def test_safe_increment_matches_optax_for_int_and_float_dtypes(dtype):
    for ours, ref in _increments()[jnp.dtype(dtype).name]:  # at 0, 5 and the dtype's max
        assert ours.dtype == ref.dtype == jnp.dtype(dtype)
        np.testing.assert_array_equal(np.asarray(ours, np.float64), np.asarray(ref, np.float64))
    assert num.safe_int32_increment is num.safe_increment
    assert int(num.safe_int32_increment(jnp.int32(2**31 - 1))) == 2**31 - 1
    assert int(num.safe_increment(3)) == 4


def test_safe_increment_rejects_bool_and_complex():
    for bad in (jnp.asarray(True), jnp.asarray(1 + 1j)):
        with pytest.raises(ValueError, match="integer or floating dtype"):
            num.safe_increment(bad)


# ------------------------------------------------------------------------------ global_norm


def test_global_norm_matches_optax_and_warns():
    tree = {"a": jnp.arange(3.0), "b": [jnp.ones((2, 2)), jnp.asarray(1 + 2j, jnp.complex64)]}
    with pytest.warns(DeprecationWarning, match="tree.norm"):
        ours = la.global_norm(tree)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        ref = optax.global_norm(tree)
    np.testing.assert_allclose(ours, ref, rtol=RTOL)
    with pytest.warns(DeprecationWarning, match="deprecated"):
        low = la.global_norm({"x": jnp.ones(2, jnp.bfloat16)})
    assert low.dtype == jnp.float32
    with pytest.warns(DeprecationWarning, match="deprecated"):
        empty = la.global_norm({})
    assert float(empty) == 0.0
