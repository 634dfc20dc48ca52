"""state_bytes: exact byte counts of known states (float32, bf16, 8-bit quantized moments,
with_compensation residuals, PRNG keys), abstract states, and the printed summary."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

import gradtx

N = 1000


def test_adam_float32_is_eight_bytes_per_parameter_and_two_counts():
    params = {"w": jnp.zeros((10, 50)), "b": jnp.zeros(500)}
    report = gradtx.state_bytes(gradtx.adam(1e-3).init(params), params)
    assert report.parameters == N
    assert report.total == 8 * N + 4 + 4  # mu, nu; scale_by_adam's and the schedule's counts
    assert report.residual == 0 and report.optimizer == report.total
    assert report.per_parameter == pytest.approx(8.008)
    assert report.optimizer_per_parameter == report.per_parameter
    assert report.residual_per_parameter == 0.0


def test_without_params_the_per_parameter_numbers_are_none():
    params = {"w": jnp.zeros(N)}
    report = gradtx.state_bytes(gradtx.sgd(0.1, momentum=0.9).init(params))
    assert report.total == 4 * N + 4 + 4  # the momentum; the trace's and the schedule's counts
    assert report.parameters is None
    assert report.per_parameter is None
    assert report.residual_per_parameter is None and report.optimizer_per_parameter is None


@pytest.mark.parametrize(("residual", "size"), [("int8", 1), ("bfloat16", 2)])
def test_compensation_residual_is_reported_apart(residual, size):
    params = {"w": jnp.zeros(N, jnp.bfloat16), "f32": jnp.zeros(N)}  # no residual for float32
    tx = gradtx.with_compensation(
        gradtx.adam(1e-3, mu_dtype=jnp.float32, nu_dtype=jnp.float32), residual=residual
    )
    report = gradtx.state_bytes(tx.init(params), params)
    assert report.residual == size * N
    assert report.optimizer == 8 * 2 * N + 8
    assert report.total == report.optimizer + report.residual
    assert report.residual_per_parameter == size / 2  # half the values are bf16
    only_bf16 = {"w": params["w"]}
    report = gradtx.state_bytes(tx.init(only_bf16), only_bf16)
    assert report.residual_per_parameter == float(size)


def test_stochastic_rounding_key_is_optimizer_state():
    params = {"w": jnp.zeros(N, jnp.bfloat16)}
    tx = gradtx.with_compensation(gradtx.sgd(0.1), residual=None, stochastic_rounding=True, key=0)
    report = gradtx.state_bytes(tx.init(params), params)
    assert report.residual == 0
    # the key's two uint32 words and sgd's schedule count
    assert report.total == report.optimizer == 8 + 4


def test_nested_compensation_states_are_all_found():
    params = {"w": jnp.zeros(N, jnp.bfloat16)}
    tx = gradtx.chain(gradtx.clip_by_global_norm(1.0), gradtx.with_compensation(gradtx.sgd(0.1)))
    state = gradtx.named_chain(("a", tx), ("b", tx)).init(params)
    assert gradtx.state_bytes(state, params).residual == 2 * N


def test_quantized_moments_count_their_codes_and_scales():
    params = {"w": jnp.zeros((16, 512))}  # above quantized()'s min_size
    q = gradtx.quantized()  # blocks of 2048 values
    state = gradtx.adam(1e-3, mu_dtype=q, nu_dtype=q).init(params)
    assert isinstance(state[0].mu["w"], gradtx.QuantizedArray)
    report = gradtx.state_bytes(state, params)
    # one byte per value and a float32 scale per block, for each moment; two int32 counts
    assert report.total == 2 * (8192 + 4 * 4) + 8
    assert report.per_parameter == pytest.approx(16424 / 8192)


def test_bf16_moments_are_two_bytes_each():
    params = {"w": jnp.zeros(N)}
    state = gradtx.adam(1e-3, mu_dtype=jnp.bfloat16, nu_dtype=jnp.bfloat16).init(params)
    assert gradtx.state_bytes(state, params).total == 4 * N + 8


def test_abstract_state_gives_the_same_numbers():
    params = {"w": jnp.zeros(N, jnp.bfloat16), "b": jnp.zeros(10)}
    tx = gradtx.with_compensation(
        gradtx.adamw(1e-3, mu_dtype=gradtx.quantized()), stochastic_rounding=True, key=0
    )
    concrete = gradtx.state_bytes(tx.init(params), params)
    shapes = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), params)
    abstract = gradtx.state_bytes(jax.eval_shape(tx.init, shapes), shapes)
    assert abstract == concrete
    assert concrete.residual == N


def test_printed_summary():
    params = {"w": jnp.zeros(N, jnp.bfloat16)}
    tx = gradtx.with_compensation(gradtx.adam(1e-3, mu_dtype=jnp.float32, nu_dtype=jnp.float32))
    text = str(gradtx.state_bytes(tx.init(params), params))
    assert text.splitlines() == [
        "optimizer state for 1,000 parameter values",
        "  total: 9,008 bytes (8.8 KiB), 9.008 per parameter value",
        "  optimizer: 8,008 bytes (7.8 KiB), 8.008 per parameter value",
        "  residual: 1,000 bytes, 1 per parameter value",
    ]
    assert str(gradtx.state_bytes(tx.init(params))).splitlines()[0] == "optimizer state"


def test_no_parameter_values():
    report = gradtx.state_bytes(gradtx.adam(1e-3).init({}), {})
    assert report.parameters == 0 and report.per_parameter is None
    assert report.total == 8
