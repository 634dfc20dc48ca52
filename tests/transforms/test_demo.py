"""DeMo (`scale_by_demo`, `demo_momentum`): against a NumPy transcription of the authors' `DeMo`
optimizer over 4 replicas under `shard_map`, the chunked DCT against SciPy's, no compression at
top-k = chunk size, the bytes each replica all-gathers (state, metrics and compiled HLO),
construction errors and NaN gradients."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

import gradtx
from gradtx._base._checks import HyperparameterError
from gradtx.transforms._demo import _decode, _encode, _layout, chunk_size

scipy_fft = pytest.importorskip("scipy.fft")

AXIS = "replica"
N = 4  # replicas


# -- the reference, transcribed from github.com/bloc97/DeMo demo.py (DeMo.step, TransformDCT,
# CompressDCT), in float64 ----------------------------------------------------------------------


def _split(n, target):  # `_get_smaller_split`: the largest divisor of n that is <= target
    return max(d for d in range(1, n + 1) if n % d == 0 and d <= target)


def _ref_encode(x, chunk):
    if x.ndim > 1:  # "(y h) (x w) -> y h x w", a 2-D DCT of each tile -> (y, x, h, w)
        n1, n2 = _split(x.shape[0], chunk), _split(x.shape[1], chunk)
        tiles = x.reshape(x.shape[0] // n1, n1, x.shape[1] // n2, n2).transpose(0, 2, 1, 3)
        return scipy_fft.dctn(tiles, axes=(2, 3), norm="ortho")
    n1 = _split(x.shape[0], chunk)
    return scipy_fft.dct(x.reshape(-1, n1), axis=-1, norm="ortho")


def _ref_decode(c):
    if c.ndim > 2:
        y, x, h, w = c.shape
        return (
            scipy_fft.idctn(c, axes=(2, 3), norm="ortho")
            .transpose(0, 2, 1, 3)
            .reshape(y * h, x * w)
        )
    return scipy_fft.idct(c, axis=-1, norm="ortho").reshape(-1)


def _ref_compress(c, topk):
    flat = c.reshape(*c.shape[:2], -1) if c.ndim > 2 else c
    k = min(topk, flat.shape[-1])
    idx = np.argsort(-np.abs(flat), axis=-1, kind="stable")[..., :k]
    return idx, np.take_along_axis(flat, idx, axis=-1), c.shape


def _ref_decompress(idx_list, val_list, xshape):
    """`scatter_reduce(reduce="mean", include_self=False)` of the concatenated senders."""
    flat_shape = (*xshape[:2], -1) if len(xshape) > 2 else xshape
    total = np.zeros(xshape).reshape(flat_shape)
    count = np.zeros_like(total)
    for idx, val in zip(idx_list, val_list, strict=True):
        np.put_along_axis(total, idx, np.take_along_axis(total, idx, -1) + val, -1)
        np.put_along_axis(count, idx, np.take_along_axis(count, idx, -1) + 1, -1)
    return np.where(count > 0, total / np.maximum(count, 1), 0.0).reshape(xshape)


def _ref_demo(params, grads, lrs, decay, topk, chunk, weight_decay):
    """The params after each step and the final deltas, per replica: `grads[k]` is
    (replicas, steps, *shape)."""
    replicas = next(iter(grads.values())).shape[0]
    p = {k: np.repeat(np.asarray(v, np.float64)[None], replicas, 0) for k, v in params.items()}
    delta = {k: np.zeros_like(v) for k, v in p.items()}
    trajectory = []
    for t, lr in enumerate(lrs):
        for k in p:
            sent = []
            for i in range(replicas):
                p[k][i] *= 1.0 - lr * weight_decay
                delta[k][i] = decay * delta[k][i] + lr * grads[k][i, t]
                idx, val, xshape = _ref_compress(_ref_encode(delta[k][i], chunk), topk)
                delta[k][i] -= _ref_decode(_ref_decompress([idx], [val], xshape))
                sent.append((idx, val))
            shared = _ref_decode(
                _ref_decompress([s[0] for s in sent], [s[1] for s in sent], xshape)
            )
            p[k] -= lr * np.sign(shared)[None]
        trajectory.append({k: v.copy() for k, v in p.items()})
    return trajectory, delta


def _mesh():
    return jax.sharding.Mesh(np.array(jax.devices()[:N]), (AXIS,))


_ITEMSIZE = {"u8": 1, "s8": 1, "u16": 2, "s16": 2, "bf16": 2, "f16": 2, "s32": 4, "f32": 4}


def _gathered_bytes(hlo: str) -> int:
    """The bytes of the results of every all-gather in the compiled module."""
    total = 0
    for line in hlo.splitlines():
        m = re.search(r"= (.*?) all-gather(-start)?\(", line)
        if m:
            for dtype, dims in re.findall(r"(\w+)\[([\d,]*)\]", m.group(1)):
                size = int(np.prod([int(d) for d in dims.split(",") if d]))
                total += size * _ITEMSIZE[dtype]
    return total


# -- (a) 10 steps over 4 replicas against the transcription --------------------------------------


@pytest.mark.across_versions
def test_matches_reference_over_4_replicas_under_shard_map():
    steps, decay, topk, chunk, wd = 10, 0.9, 3, 8, 0.1
    lrs = [0.1 / (1 + t) for t in range(steps)]
    rng = np.random.default_rng(0)
    shapes = {"w": (16, 24), "v": (12, 10), "b": (20,)}  # 8x8, 6x5 tiles; chunks of 5
    p0 = {k: rng.normal(size=s).astype(np.float32) for k, s in shapes.items()}
    grads = {k: rng.normal(size=(N, steps, *s)).astype(np.float32) for k, s in shapes.items()}
    tx = gradtx.demo_momentum(
        lambda t: 0.1 / (1 + t), decay, topk, chunk, weight_decay=wd, axis_name=AXIS
    )

    def run(grads, state, params):  # per replica: the params after each step, the state
        grads, state, params = jax.tree.map(lambda x: x[0], (grads, state, params))

        def body(carry, g):
            params, state = carry
            updates, state = tx.update(g, state, params)
            params = gradtx.apply_updates(params, updates)
            return (params, state), params

        (_, state), trajectory = jax.lax.scan(body, (params, state), grads)
        return jax.tree.map(lambda x: x[None], (trajectory, state))

    params = jax.tree.map(lambda x: jnp.broadcast_to(x, (N, *x.shape)), p0)
    state = jax.vmap(tx.init)(params)
    run = jax.jit(jax.shard_map(run, mesh=_mesh(), in_specs=P(AXIS), out_specs=P(AXIS)))
    compiled = run.lower(grads, state, params).compile()
    trajectory, state = compiled(grads, state, params)

    expected, deltas = _ref_demo(p0, grads, lrs, decay, topk, chunk, wd)
    for t in range(steps):
        for k in shapes:
            np.testing.assert_allclose(trajectory[k][:, t], expected[t][k], atol=1e-5)
    demo_state = state[0]
    for k in shapes:
        np.testing.assert_allclose(demo_state.mu[k], deltas[k], atol=1e-5)
    # per step, per replica: 6 tiles x 3 (uint8 index + float32 value) for w, 4 x 3 for v
    # (30 coefficients per tile), 4 chunks x 3 for b
    sent = (6 + 4 + 4) * 3 * (1 + 4)
    np.testing.assert_array_equal(demo_state.bytes_sent, sent)
    np.testing.assert_array_equal(demo_state.total_bytes_sent, steps * sent)
    # what the compiled step all-gathers (the loop's body, once): N times each replica's share
    assert _gathered_bytes(compiled.as_text()) == N * sent


# -- (b) the chunked DCT and no compression ------------------------------------------------------


@pytest.mark.parametrize("shape", [(40,), (16, 24), (2, 12, 10), ()])
def test_chunked_dct_matches_scipy_and_round_trips(shape):
    x = np.random.default_rng(1).normal(size=shape).astype(np.float32)
    lay = _layout(shape, 8)
    coefficients = _encode(jnp.asarray(x), lay)
    if len(shape) in (1, 2):  # the reference's layout: tiles in order, coefficients row-major
        reference = _ref_encode(x.astype(np.float64), 8)
        np.testing.assert_allclose(
            coefficients, reference.reshape(coefficients.shape), rtol=1e-6, atol=1e-6
        )
    np.testing.assert_allclose(_decode(coefficients, lay, shape), x, atol=1e-6)


def test_chunk_sizes_follow_the_reference():
    assert [chunk_size(n, 64) for n in (64, 128, 100, 97, 1, 48)] == [64, 64, 50, 1, 1, 48]


def test_topk_of_every_coefficient_sends_the_whole_momentum():
    tx = gradtx.scale_by_demo(0.5, compression_topk=64, compression_chunk=8)
    rng = np.random.default_rng(2)
    g = {"w": jnp.asarray(rng.normal(size=(16, 8)), jnp.float32), "b": jnp.ones(8)}
    state = tx.init(g)
    update = jax.jit(tx.update)
    for _ in range(2):
        updates, state = update(g, state)
        for k in g:
            np.testing.assert_allclose(state.mu[k], 0.0, atol=1e-6)  # nothing left
            np.testing.assert_array_equal(updates[k], np.sign(g[k]))
    assert float(state.bytes_sent) == 0.0  # no axis_name: nothing gathered


# -- (c) bytes per step ----------------------------------------------------------------------------


def test_bytes_per_step_at_least_20x_below_a_dense_all_reduce():
    tx = gradtx.demo_momentum(1e-3, compression_topk=32, compression_chunk=64, axis_name=AXIS)
    shapes = {"w": (128, 192), "b": (256,)}
    params = {k: jnp.zeros((2, *s)) for k, s in shapes.items()}  # 2 replicas
    grads = {k: jnp.ones((2, *s)) for k, s in shapes.items()}
    state = jax.vmap(tx.init)(params)
    step = jax.jit(jax.vmap(lambda g, s, p: tx.update(g, s, p)[1], axis_name=AXIS))
    for _ in range(2):
        state = step(grads, state, params)
    # w: 2 x 3 tiles of 64 x 64, 32 x (uint16 index + float32 value) each; b: 4 chunks of 64,
    # 32 x (uint8 + float32) each
    sent = 6 * 32 * (2 + 4) + 4 * 32 * (1 + 4)
    report = jax.jit(jax.vmap(lambda s: gradtx.metrics(tx, s)))(state)
    np.testing.assert_array_equal(report["bytes_sent"], sent)
    np.testing.assert_array_equal(report["total_bytes_sent"], 2 * sent)
    dense = sum(np.prod(s) for s in shapes.values()) * 4  # a float32 gradient all-reduce
    assert dense / sent >= 20  # 55x here; a 2-D leaf alone: 16384 / 192 = 85x
    assert (128 * 192 * 4) / (6 * 32 * (2 + 4)) > 85


# -- (d) errors and NaN ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"compression_decay": 1.0}, r"compression_decay must be in \[0.0, 1.0\), got 1.0"),
        ({"compression_decay": -0.1}, r"compression_decay must be in"),
        ({"compression_topk": 0}, r"compression_topk must be >= 1, got 0"),
        ({"compression_topk": 2.0}, r"compression_topk must be a Python integer >= 1"),
        ({"compression_chunk": True}, r"compression_chunk must be a Python integer >= 1"),
        ({"compression_chunk": -4}, r"compression_chunk must be >= 1"),
        ({"axis_name": 3}, r"axis_name must be None or the name of the mapped axis"),
        ({"mu_dtype": jnp.int8}, r"mu_dtype must be a floating-point dtype"),
        ({"learning_rate": -1.0}, r"learning_rate must be >= 0"),
    ],
)
def test_construction_errors_name_the_argument(kwargs, message):
    with pytest.raises(HyperparameterError, match="scale_by_demo: " + message):
        gradtx.scale_by_demo(**kwargs)


def test_alias_errors_name_the_alias():
    with pytest.raises(HyperparameterError, match=r"demo_momentum: weight_decay must be >= 0"):
        gradtx.demo_momentum(0.1, weight_decay=-1.0)
    with pytest.raises(ValueError, match=r"demo_momentum: .*compression_topk must be >= 1"):
        gradtx.demo_momentum(0.1, compression_topk=0)


def test_nan_gradient_stays_visible():
    tx = gradtx.demo_momentum(0.1, compression_topk=2, compression_chunk=4)
    params = {"w": jnp.zeros((4, 8))}
    state = tx.init(params)
    g = {"w": jnp.ones((4, 8)).at[1, 5].set(jnp.nan)}
    updates, state = jax.jit(tx.update)(g, state, params)
    u = np.asarray(updates["w"])
    assert np.isnan(u[:4, 4:]).all()  # the 4 x 4 tile holding the NaN
    assert np.isfinite(u[:, :4]).all()  # the other tile is untouched
    assert np.isnan(np.asarray(state[0].mu["w"])[:, 4:]).all()
