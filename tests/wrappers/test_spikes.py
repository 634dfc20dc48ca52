"""skip_on_spikes: the rolling-window skip rule against a NumPy transcription, bit-identical
skipped steps, equality with the plain optimizer on applied steps, checkpoints, sharding,
gradient accumulation and construction errors."""

from __future__ import annotations

import collections

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import gradtx
from gradtx._base._introspect import node_of
from gradtx.core._transformation import MissingValueError
from gradtx.wrappers._spikes import SkipOnSpikesState, skip_on_spikes

STEPS = 300
SHAPES = {"w": (3, 4), "b": (4,)}


def _params():
    return {"w": jnp.linspace(-1.0, 1.0, 12).reshape(3, 4), "b": jnp.zeros(4)}


def _grads(seed, steps=STEPS):
    rng = np.random.default_rng(seed)
    return {k: rng.normal(size=(steps, *s)).astype(np.float32) for k, s in SHAPES.items()}


def _inner():
    return gradtx.adam(0.01)


def reference_skips(xs, *, window, threshold, warmup, max_consecutive):
    """A NumPy transcription of the rule: per step (skipped, consecutive skips), in float64; also
    checks that no decision is within rounding of the threshold."""
    history: collections.deque = collections.deque(maxlen=window)
    run, out = 0, []
    for x in xs:
        finite = bool(np.isfinite(x))
        big = False
        if finite and len(history) >= warmup:
            h = np.asarray(history, np.float64)
            limit = h.mean() + threshold * h.std(ddof=1)
            assert abs(x - limit) > 1e-4 * (abs(limit) + 1e-3), "borderline decision: reseed"
            big = x > limit
        # a non-finite value is always skipped; max_consecutive forces only finite spikes
        skip = (not finite) or (big and (max_consecutive is None or run < max_consecutive))
        run = run + 1 if skip else 0
        if not skip and finite:
            history.append(float(x))
        out.append((skip, run))
    return np.array([s for s, _ in out]), np.array([r for _, r in out])


def _own(state):
    return state


def _scan_run(tx, params, grads, values, own=_own):
    """All steps in one jitted scan: the final state, and per step (skipped, consecutive skips,
    updates, params, inner state) of the `SkipOnSpikesState` `own(state)`."""

    @jax.jit
    def go(params, grads, values):
        def body(carry, xs):
            params, state = carry
            g, v = xs
            updates, state = tx.update(g, state, params, value=v)
            params = gradtx.apply_updates(params, updates)
            mine = own(state)
            out = (mine.last_skipped, mine.consecutive_skips, updates, params, mine.inner_state)
            return (params, state), out

        (params, state), outs = jax.lax.scan(body, (params, tx.init(params)), (grads, values))
        return state, outs

    return go(params, grads, values)


def _losses(seed):
    rng = np.random.default_rng(seed)
    return (2.0 + 0.05 * rng.normal(size=STEPS)).astype(np.float32)


def _bytes_at(tree, i):
    return [np.asarray(x[i]).tobytes() for x in jax.tree.leaves(tree)]


def _check_skipped_steps_hold(outs, skipped, params0, inner0):
    _, _, updates, params, inner = outs
    for i in np.flatnonzero(skipped):
        before_p = (
            [np.asarray(x).tobytes() for x in jax.tree.leaves(params0)]
            if i == 0
            else _bytes_at(params, i - 1)
        )
        before_s = (
            [np.asarray(x).tobytes() for x in jax.tree.leaves(inner0)]
            if i == 0
            else _bytes_at(inner, i - 1)
        )
        assert _bytes_at(params, i) == before_p, i
        assert _bytes_at(inner, i) == before_s, i
        assert all(np.all(np.asarray(u[i]) == 0) for u in jax.tree.leaves(updates)), i


def test_loss_metric_matches_reference_and_holds_skipped_steps():
    window, threshold = 40, 6.0
    tx = skip_on_spikes(_inner(), metric="loss", window=window, threshold=threshold)
    params = _params()
    grads = _grads(0)
    losses = _losses(1)
    losses[5] += 0.3  # during warmup: applied, and enters the window
    losses[[30, 31, 90, 91, 92, 150, 220, 221, 299]] += 3.0
    losses[[60, 200]] = [np.nan, np.inf]
    want, want_run = reference_skips(
        losses, window=window, threshold=threshold, warmup=19, max_consecutive=None
    )
    assert not want[5] and want[[30, 31, 60, 90, 91, 92, 200]].all()  # the test's premise
    state, outs = _scan_run(tx, params, grads, losses)
    np.testing.assert_array_equal(np.asarray(outs[0]), want)
    np.testing.assert_array_equal(np.asarray(outs[1]), want_run)
    assert int(state.total_skipped) == int(want.sum())
    assert int(state.count) == STEPS
    assert int(state.filled) == window
    _check_skipped_steps_hold(outs, want, params, _inner().init(params))

    # every applied step is the plain optimizer's step from the state before it (one program,
    # over all applied steps; a different compiled program may round the last bit differently)
    kept = np.flatnonzero(~want)
    kept = kept[kept > 0]
    plain = _inner()
    _, _, updates, after, inner = outs

    @jax.jit
    def plain_steps(grads, inner_before, params_before):
        def one(xs):
            g, s, p = xs
            u, s = plain.update(g, s, p)
            return u, s

        return jax.lax.map(one, (grads, inner_before, params_before))

    def at(tree, idx):
        return jax.tree.map(lambda x: x[idx], tree)

    got_u, got_s = plain_steps(at(grads, kept), at(inner, kept - 1), at(after, kept - 1))
    for a, b in zip(jax.tree.leaves(at(updates, kept)), jax.tree.leaves(got_u), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-9)
    for a, b in zip(jax.tree.leaves(at(inner, kept)), jax.tree.leaves(got_s), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-12)

    # the window holds the last `window` accepted losses
    accepted = losses[kept]
    accepted = accepted[np.isfinite(accepted)][-window:]
    np.testing.assert_array_equal(np.sort(np.asarray(state.window)), np.sort(accepted))


def test_grad_norm_metric_matches_reference():
    window, threshold, warmup = 40, 4.0, 10
    tx = skip_on_spikes(
        _inner(), metric="grad_norm", window=window, threshold=threshold, warmup=warmup
    )
    params = _params()
    grads = _grads(2)
    grads["w"][3] *= 1.5  # during warmup: applied, and enters the window
    for i in (25, 26, 120, 180, 181, 182, 260):
        grads["w"][i] *= 8.0
    grads["b"][140, 1] = np.nan
    grads["w"][141, 0, 0] = np.inf
    norms = np.sqrt(
        sum(
            np.sum(np.square(g, dtype=np.float64), axis=tuple(range(1, g.ndim)))
            for g in grads.values()
        )
    )
    want, want_run = reference_skips(
        norms, window=window, threshold=threshold, warmup=warmup, max_consecutive=None
    )
    assert want[[25, 26, 140, 141, 180, 181, 182]].all() and not want[3]
    _, outs = _scan_run(tx, params, grads, np.zeros(STEPS, np.float32))
    np.testing.assert_array_equal(np.asarray(outs[0]), want)
    np.testing.assert_array_equal(np.asarray(outs[1]), want_run)
    _check_skipped_steps_hold(outs, want, params, _inner().init(params))
    assert all(np.all(np.isfinite(np.asarray(p))) for p in jax.tree.leaves(outs[3]))


def test_max_consecutive_gives_up_on_a_regime_change():
    window, threshold = 40, 6.0
    tx = skip_on_spikes(_inner(), window=window, threshold=threshold, max_consecutive=3)
    params = _params()
    losses = _losses(3)
    losses[150:] += 4.0  # a lasting jump: never accepted without max_consecutive
    losses[[100, 101, 102, 103, 104]] = np.nan  # all skipped: a NaN is never applied
    want, want_run = reference_skips(
        losses, window=window, threshold=threshold, warmup=19, max_consecutive=3
    )
    assert want[[100, 101, 102, 103, 104, 150, 151, 152]].all() and not want[[105, 153]].any()
    assert not want[-50:].any()  # the window has adapted to the new regime
    state, outs = _scan_run(tx, params, _grads(4), losses)
    np.testing.assert_array_equal(np.asarray(outs[0]), want)
    np.testing.assert_array_equal(np.asarray(outs[1]), want_run)
    assert int(state.total_skipped) == int(want.sum())
    # without a limit the new regime is skipped for good
    never, _ = reference_skips(
        losses, window=window, threshold=threshold, warmup=19, max_consecutive=None
    )
    assert never[150:].all()


@pytest.mark.parametrize("max_consecutive", [0, 2])
@pytest.mark.parametrize("metric", ["loss", "grad_norm"])
def test_a_nonfinite_value_is_skipped_even_past_max_consecutive(max_consecutive, metric):
    # max_consecutive forces finite spikes only: NaN / Inf losses (or gradient norms) in a row,
    # more of them than max_consecutive, leave params and moments finite and untouched
    tx = skip_on_spikes(
        _inner(), metric=metric, window=8, warmup=4, max_consecutive=max_consecutive
    )
    params = _params()
    steps = 12
    grads = _grads(5, steps)
    losses = _losses(5)[:steps]
    bad = [4, 5, 6, 7, 8]
    losses[bad] = [np.nan, np.inf, np.nan, -np.inf, np.nan]
    if metric == "grad_norm":
        grads["w"][bad, 0, 0] = np.nan
    state, outs = _scan_run(tx, params, grads, losses)
    skipped, run = np.asarray(outs[0]), np.asarray(outs[1])
    np.testing.assert_array_equal(skipped, np.isin(np.arange(steps), bad))
    np.testing.assert_array_equal(run[bad], [1, 2, 3, 4, 5])
    for tree in (outs[2], outs[3], outs[4], state.inner_state):
        assert all(np.isfinite(np.asarray(x)).all() for x in jax.tree.leaves(tree))
    _check_skipped_steps_hold(outs, skipped, params, _inner().init(params))


def test_state_checkpoint_scan_structure_and_report():
    tx = skip_on_spikes(_inner(), window=16, threshold=3.0, warmup=4)
    params = _params()
    init = tx.init(params)
    state = init
    g = jax.tree.map(jnp.ones_like, params)
    for v in (1.0, 1.2, 0.9, 1.1, 50.0):
        _, state = tx.update(g, state, params, value=v)
    assert isinstance(state, SkipOnSpikesState) and bool(state.last_skipped)
    assert jax.tree.structure(state) == jax.tree.structure(init)
    assert [x.dtype for x in jax.tree.leaves(state)] == [x.dtype for x in jax.tree.leaves(init)]
    assert state.window.dtype == jnp.float32 and state.window.shape == (16,)
    assert state.count.dtype == jnp.int32 and state.total_skipped.dtype == jnp.int32

    restored = gradtx.load_state_dict(tx.init(params), gradtx.state_dict(state))
    assert isinstance(restored, SkipOnSpikesState)
    for a, b in zip(jax.tree.leaves(restored), jax.tree.leaves(state), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))

    report = node_of(tx).report(state)
    assert set(report) == {"skipped", "total_skipped", "consecutive_skips"}
    assert bool(report["skipped"]) and int(report["total_skipped"]) == 1
    assert node_of(tx).kind == "wrapper"

    # the layout does not depend on the hyperparameters other than the window length
    other = skip_on_spikes(
        _inner(), metric="grad_norm", window=16, threshold=9.0, warmup=16, max_consecutive=2
    ).init(params)
    assert jax.tree.structure(other) == jax.tree.structure(init)


def test_scalars_and_window_are_replicated():
    mesh = jax.make_mesh((8,), ("d",))
    params = {
        "w": jax.device_put(jnp.zeros((8, 4)), NamedSharding(mesh, P("d", None))),
        "b": jax.device_put(jnp.zeros(8), NamedSharding(mesh, P("d"))),
    }
    tx = skip_on_spikes(gradtx.adam(0.1), metric="grad_norm", window=8)  # as long as a param dim
    shardings = gradtx.state_sharding(tx, params)
    for name in (
        "count",
        "last_skipped",
        "consecutive_skips",
        "total_skipped",
        "window",
        "filled",
        "position",
    ):
        assert getattr(shardings, name).is_fully_replicated, name
    mu = shardings.inner_state[0].mu
    assert mu["w"].spec == P("d", None) and mu["b"].spec == P("d")


def test_missing_value_and_errors():
    tx = skip_on_spikes(_inner())
    params = _params()
    with pytest.raises(MissingValueError, match="skip_on_spikes needs the monitored value"):
        tx.update(jax.tree.map(jnp.ones_like, params), tx.init(params), params)
    # grad_norm needs no value
    skip_on_spikes(_inner(), metric="grad_norm").update(
        jax.tree.map(jnp.ones_like, params), tx.init(params), params
    )


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"metric": "los"}, r"skip_on_spikes: metric must be one of .*did you mean 'loss'"),
        ({"window": 1}, r"skip_on_spikes: window must be >= 2, got 1"),
        ({"window": 8.0}, r"skip_on_spikes: window must be an integer"),
        ({"threshold": 0.0}, r"skip_on_spikes: threshold must be > 0, got 0.0"),
        ({"warmup": 1}, r"skip_on_spikes: warmup must be >= 2, got 1"),
        ({"window": 10, "warmup": 11}, r"skip_on_spikes: warmup must be <= window \(10\), got 11"),
        ({"max_consecutive": -1}, r"skip_on_spikes: max_consecutive must be >= 0, got -1"),
        ({"max_consecutive": True}, r"skip_on_spikes: max_consecutive must be an integer"),
    ],
)
def test_construction_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        skip_on_spikes(_inner(), **kwargs)


def test_default_warmup_follows_olmo_core():
    # OLMo-core checks once max(20, window // 2) losses are held, the current one included
    params = {"w": jnp.zeros(1)}
    for window, warmup in ((128, 63), (40, 19), (10, 10)):
        tx = skip_on_spikes(gradtx.sgd(1.0), window=window, threshold=1.0)
        state = tx.init(params)
        g = {"w": jnp.ones(1)}
        step = jax.jit(tx.update)
        for i in range(warmup):
            _, state = step(g, state, params, value=jnp.float32(1.0 + 0.01 * (i % 2)))
        assert int(state.filled) == warmup
        probe = jnp.float32(100.0)
        _, early = step(g, state._replace(filled=state.filled - 1), params, value=probe)
        _, armed = step(g, state, params, value=probe)
        assert not bool(early.last_skipped) and bool(armed.last_skipped), window


@pytest.mark.parametrize("metric", ["loss", "grad_norm"])
def test_inside_accumulate_k_steps_checks_whole_steps(metric):
    k, cycles = 2, 30
    inner = skip_on_spikes(_inner(), metric=metric, window=12, threshold=6.0, warmup=6)
    outer = gradtx.accumulate_k_steps(inner, k)
    params = _params()
    micro = _grads(5, k * cycles)
    rng = np.random.default_rng(6)
    losses = (1.0 + 0.05 * rng.normal(size=k * cycles)).astype(np.float32)
    spiky = [10, 17, 24]
    for c in spiky:
        if metric == "grad_norm":
            micro["w"][k * c] *= 30.0  # one micro-batch spikes the mean gradient
        else:
            losses[k * c + k - 1] += 5.0  # the value given on the emitting micro-step
    losses[0::k] = 1e6  # the other micro-steps' values must not matter

    state, outs = _scan_run(outer, params, micro, losses, own=lambda s: s.inner_state)
    means = {n: g.reshape(cycles, k, *g.shape[1:]).mean(axis=1) for n, g in micro.items()}
    _, direct = _scan_run(inner, params, means, losses[k - 1 :: k])
    np.testing.assert_array_equal(np.asarray(direct[0])[spiky], True)
    assert int(state.inner_state.total_skipped) == int(np.asarray(direct[0]).sum())
    for got, want in zip(jax.tree.leaves(outs[2]), jax.tree.leaves(direct[2]), strict=True):
        got = np.asarray(got)
        np.testing.assert_array_equal(got[0::k], 0)
        np.testing.assert_allclose(got[k - 1 :: k], np.asarray(want), rtol=1e-6, atol=1e-7)


def test_sample_standard_deviation_and_one_sided_rule():
    # history [1, 3]: mean 2, sample std sqrt(2) (the population std would be 1)
    tx = skip_on_spikes(gradtx.sgd(1.0), window=4, threshold=1.0, warmup=2)
    params = {"w": jnp.zeros(1)}
    g = {"w": jnp.ones(1)}

    def after(*values):
        state = tx.init(params)
        for v in values:
            _, state = tx.update(g, state, params, value=v)
        return bool(state.last_skipped)

    assert not after(1.0, 3.0, 3.4)  # <= 2 + sqrt(2)
    assert after(1.0, 3.0, 3.5)
    assert not after(1.0, 3.0, -100.0)  # an unusually low loss is not a spike
    assert not after(2.0, 2.0, 2.0)  # a constant history does not skip an equal value
    assert after(1.0, 3.0, float("nan"))
