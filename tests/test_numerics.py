"""Internal numerics: saturating counters, float32 bias correction, safe norms, schedules."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from gradtx._base import _numerics as num


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
