"""Internal numerics: saturating counters, float32 bias correction, safe norms, schedules; and
Optax's top-level numerics (safe_norm, safe_root_mean_squares, safe_increment, global_norm)
against the installed Optax."""

from __future__ import annotations

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
    x = jnp.array([3.0, 4.0])
    np.testing.assert_allclose(num.safe_norm(x), 5.0)
    np.testing.assert_allclose(num.safe_norm(x, min_norm=10.0), 10.0)
    np.testing.assert_allclose(num.safe_rms(x), np.sqrt(12.5), rtol=1e-6)
    zero = jnp.zeros(3)
    for fn in (num.safe_norm, num.safe_rms):
        g = jax.grad(lambda v, fn=fn: fn(v))(zero)
        assert np.all(np.isfinite(g)) and np.all(g == 0)
    g = jax.grad(num.safe_norm)(x)
    np.testing.assert_allclose(g, x / 5.0, rtol=1e-6)
    assert num.safe_norm(jnp.ones(4, jnp.bfloat16)).dtype == jnp.float32
    np.testing.assert_allclose(num.safe_norm(jnp.ones((2, 3)), axis=1), [np.sqrt(3)] * 2, 1e-6)


def test_value_at_calls_schedules_and_keeps_constants():
    assert num.value_at(0.5, jnp.int32(3)) == 0.5
    v = num.value_at(lambda t: t * 2, jnp.int32(3))
    assert v.dtype == jnp.float32 and float(v) == 6.0


# ---------------------------------------------------------------------------------- safe_norm


@pytest.mark.parametrize(
    ("ord_", "axis", "keepdims"),
    [(None, None, False), (None, 1, True), (1, 1, False), (np.inf, 0, True), ("nuc", None, False)],
)
def test_safe_norm_matches_optax_values_and_gradients(ord_, axis, keepdims):
    x = jnp.asarray(np.random.default_rng(0).normal(size=(3, 4)), jnp.float32)
    x = x.at[1].set(0.0)  # one slice with norm 0 (below min_norm)
    for min_norm in (0.0, 0.5):
        ours = num.safe_norm(x, min_norm, ord_, axis, keepdims)
        ref = optax.safe_norm(x, min_norm, ord_, axis, keepdims)
        assert ours.shape == ref.shape
        np.testing.assert_allclose(ours, ref, rtol=RTOL, atol=1e-6)

    def loss(fn):
        return lambda v: jnp.sum(fn(v, 0.5, ord=ord_, axis=axis, keepdims=keepdims))

    g_ours, g_ref = jax.grad(loss(num.safe_norm))(x), jax.grad(loss(optax.safe_norm))(x)
    assert np.isfinite(g_ours).all()
    np.testing.assert_allclose(g_ours, g_ref, rtol=RTOL, atol=1e-6)


def test_safe_norm_gradient_is_zero_at_zero_and_nan_propagates():
    for ord_ in (None, 1, np.inf):
        g = jax.grad(lambda v, o=ord_: num.safe_norm(v, 0.0, o))(jnp.zeros(3))
        np.testing.assert_array_equal(g, np.zeros(3))
    assert np.isnan(num.safe_norm(jnp.array([1.0, np.nan]), 0.0, 1))
    assert np.isnan(num.safe_norm(jnp.array([1.0, np.nan]), 0.0))
    # Default min_norm (gradtx's internal callers) and float32 for low-precision inputs.
    np.testing.assert_allclose(num.safe_norm(jnp.array([3.0, 4.0])), 5.0)
    assert num.safe_norm(jnp.ones(4, jnp.bfloat16), 0.0, 1).dtype == jnp.float32
    z = jnp.asarray([3 + 4j, 1j], jnp.complex64)
    for ord_ in (None, 1):
        np.testing.assert_allclose(num.safe_norm(z, 0.0, ord_), optax.safe_norm(z, 0.0, ord_), RTOL)


def test_safe_root_mean_squares_matches_optax():
    x = jnp.asarray(np.random.default_rng(1).normal(size=(5,)), jnp.float32)
    for v in (x, jnp.zeros(5)):
        for min_rms in (0.0, 0.3):
            np.testing.assert_allclose(
                num.safe_root_mean_squares(v, min_rms),
                optax.safe_root_mean_squares(v, min_rms),
                rtol=RTOL,
            )
            f_ours = jax.grad(lambda u, m=min_rms: num.safe_root_mean_squares(u, m))
            f_ref = jax.grad(lambda u, m=min_rms: optax.safe_root_mean_squares(u, m))
            np.testing.assert_allclose(f_ours(v), f_ref(v), rtol=RTOL, atol=1e-7)


# ------------------------------------------------------------------------------ increments


@pytest.mark.parametrize("dtype", [jnp.int32, jnp.int8, jnp.uint8, jnp.float32, jnp.bfloat16])
def test_safe_increment_matches_optax_for_int_and_float_dtypes(dtype):
    info = jnp.iinfo(dtype) if jnp.issubdtype(dtype, jnp.integer) else jnp.finfo(dtype)
    for value in (0, 5, info.max):
        c = jnp.asarray(value, dtype)
        ours, ref = num.safe_increment(c), optax.safe_increment(c)
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
