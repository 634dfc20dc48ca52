"""clip_by_history against a NumPy transcription of Levanter's historical clipping, dtypes, the
pass-through before the history is long enough, and construction errors."""

from __future__ import annotations

import collections

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradtx
from gradtx._base._introspect import node_of
from gradtx.transforms._clip_history import ClipByHistoryState, clip_by_history

STEPS = 120
SHAPES = {"w": (3, 4), "b": (4,)}


def _grads(seed, steps=STEPS, dtype=np.float32):
    rng = np.random.default_rng(seed)
    scales = np.exp(0.3 * rng.normal(size=steps))  # norms that wander
    return {
        k: (rng.normal(size=(steps, *s)) * scales.reshape(-1, *[1] * len(s))).astype(dtype)
        for k, s in SHAPES.items()
    }


def reference(grads, *, window, sigma_factor, warmup, factor=1.0):
    """Per step: the clipped updates (float64), the threshold used and the one after."""
    history: collections.deque = collections.deque(maxlen=window)

    def threshold():
        if len(history) < warmup:
            return np.inf
        h = np.asarray(history)
        return factor * h.mean() + sigma_factor * max(h.std(), 1e-6)

    out, used = {k: [] for k in grads}, []
    for i in range(len(grads["w"])):
        g = {k: v[i].astype(np.float64) for k, v in grads.items()}
        n = np.sqrt(sum(np.sum(x**2) for x in g.values()))
        c = threshold()
        scale = 1.0 if n <= c else c / n
        for k in g:
            out[k].append(g[k] * scale)
        used.append(c)
        if np.isfinite(n):
            history.append(n)
    return {k: np.stack(v) for k, v in out.items()}, np.array(used), threshold()


def _scan(tx, grads):
    @jax.jit
    def go(grads):
        def body(state, g):
            u, state = tx.update(g, state)
            return state, (u, node_of(tx).report(state)["clip_threshold"])

        params = jax.tree.map(lambda x: jnp.zeros(x.shape[1:], x.dtype), grads)
        return jax.lax.scan(body, tx.init(params), grads)

    return go(grads)


@pytest.mark.parametrize(("factor", "sigma_factor"), [(1.0, 2.0), (1.5, 0.0)])
def test_matches_reference_with_spikes_and_nan(factor, sigma_factor):
    window, warmup = 16, 8
    grads = _grads(0)
    for i in (20, 21, 60, 100):
        grads["w"][i] *= 20.0
    grads["b"][40, 2] = np.nan  # its updates are NaN; it never enters the history
    want, used, _ = reference(
        grads, window=window, sigma_factor=sigma_factor, warmup=warmup, factor=factor
    )
    tx = clip_by_history(window, factor, sigma_factor=sigma_factor, warmup=warmup)
    state, (got, thresholds) = _scan(tx, grads)
    for k in grads:
        np.testing.assert_allclose(np.asarray(got[k]), want[k], rtol=1e-5, atol=1e-6)
    # the threshold reported after step i is the one step i + 1 used
    np.testing.assert_allclose(np.asarray(thresholds)[:-1], used[1:], rtol=1e-5)
    assert np.isinf(used[:warmup]).all() and np.isfinite(used[warmup:]).all()
    assert int(state.count) == STEPS and int(state.filled) == window
    assert isinstance(state, ClipByHistoryState) and node_of(tx).kind == "clip"
    # some steps were clipped, the spikes among them, and a clipped step's norm is the threshold
    norms = np.sqrt(
        sum(np.sum(np.square(want[k]), axis=tuple(range(1, want[k].ndim))) for k in want)
    )
    for i in (20, 21, 60, 100):
        np.testing.assert_allclose(norms[i], used[i], rtol=1e-6)


def test_passes_through_before_the_history_and_keeps_bf16():
    window, warmup = 10, 5
    grads = _grads(1, steps=12, dtype=jnp.bfloat16)
    grads = jax.tree.map(jnp.asarray, grads)
    grads = jax.tree.map(lambda x: x * 100, grads)  # large, but nothing to compare with yet
    grads["w"] = grads["w"].at[warmup + 2].multiply(1000.0)  # clipped once the history is there
    tx = clip_by_history(window=window, sigma_factor=1.0, warmup=warmup)
    params = jax.tree.map(lambda x: jnp.zeros(x.shape[1:], x.dtype), grads)
    init = tx.init(params)
    state, (got, _) = _scan(tx, grads)
    for k in grads:
        assert got[k].dtype == jnp.bfloat16
        np.testing.assert_array_equal(
            np.asarray(got[k][:warmup], np.float32), np.asarray(grads[k][:warmup], np.float32)
        )
    norm_in = float(gradtx.tree.norm(jax.tree.map(lambda x: x[warmup + 2], grads)))
    norm_out = float(gradtx.tree.norm(jax.tree.map(lambda x: x[warmup + 2], got)))
    assert norm_out < norm_in / 10
    assert [x.dtype for x in jax.tree.leaves(state)] == [x.dtype for x in jax.tree.leaves(init)]
    assert state.norms.dtype == jnp.float32 and state.count.dtype == jnp.int32
    assert jax.tree.structure(state) == jax.tree.structure(init)


def test_defaults_and_eager_update():
    tx = clip_by_history(window=10)  # warmup max(2, 10 // 2) = 5
    params = {"w": jnp.zeros(2)}
    state = tx.init(params)
    for i in range(5):
        assert np.isinf(float(node_of(tx).report(state)["clip_threshold"])), i
        _, state = tx.update({"w": jnp.array([1.0, 1.0 + 0.1 * i])}, state)
    assert np.isfinite(float(node_of(tx).report(state)["clip_threshold"]))
    u, state = tx.update({"w": jnp.array([100.0, 0.0])}, state)
    assert float(state.last_scale) < 0.1 and float(u["w"][0]) < 10.0
    assert clip_by_history(window=1).init(params).norms.shape == (1,)  # warmup min(1, 2) = 1


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"window": 0}, r"clip_by_history: window must be >= 1, got 0"),
        ({"window": 2.5}, r"clip_by_history: window must be an integer"),
        ({"sigma_factor": -1.0}, r"clip_by_history: sigma_factor must be >= 0, got -1.0"),
        ({"factor": 0.0}, r"clip_by_history: factor must be > 0, got 0.0"),
        ({"warmup": 0}, r"clip_by_history: warmup must be >= 1, got 0"),
        ({"window": 4, "warmup": 5}, r"clip_by_history: warmup must be <= window \(4\), got 5"),
    ],
)
def test_construction_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        clip_by_history(**kwargs)
