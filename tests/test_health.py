"""Training-health metrics: `gradtx.metrics`, `gradtx.with_metrics` and the loggers.

Each optimizer configuration is compiled once, as a `lax.scan` over the steps returning the
updates, the states and `gradtx.metrics` of every step (so the metrics are computed under `jit`),
and reused by every test of that configuration. References are NumPy norms and the schedules
evaluated directly.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradtx
from gradtx import contrib

SCHED = gradtx.schedules.linear_schedule(1e-2, 1e-3, 20)
T = 5  # steps of the scans
LEAVES = ("dense/bias", "dense/kernel", "out/bias", "out/kernel")  # jax.tree.leaves order


def _params(dtype=jnp.float32):
    k = jax.random.split(jax.random.PRNGKey(0), 4)
    return {
        "dense": {
            "kernel": jax.random.normal(k[0], (3, 4)).astype(dtype),
            "bias": (0.5 + jax.random.uniform(k[1], (4,))).astype(dtype),
        },
        "out": {
            "kernel": jax.random.normal(k[2], (4, 2)).astype(dtype),
            "bias": (0.5 + jax.random.uniform(k[3], (2,))).astype(dtype),
        },
    }


PARAMS = _params()


def _grads(norms, seed=1):
    """A stacked gradient sequence whose step t has global L2 norm `norms[t]`."""
    keys = jax.random.split(jax.random.PRNGKey(seed), len(norms))
    steps = []
    for key, n in zip(keys, norms, strict=True):
        leaves, treedef = jax.tree.flatten(PARAMS)
        ks = jax.random.split(key, len(leaves))
        g = [jax.random.normal(kk, x.shape) for kk, x in zip(ks, leaves, strict=True)]
        total = np.sqrt(sum(float(jnp.sum(x**2)) for x in g))
        steps.append(jax.tree.unflatten(treedef, [x * (n / total) for x in g]))
    return jax.tree.map(lambda *xs: jnp.stack(xs), *steps)


NORMS = (0.5, 3.0, 0.8, 10.0, 1.5)
GRADS = _grads(NORMS)


def _step_slice(tree, t):
    return jax.tree.map(lambda x: x[t], tree)


def _np_norm(leaves):
    return float(np.sqrt(sum(np.sum(np.square(np.asarray(x, np.float64))) for x in leaves)))


def _scan(tx, params=PARAMS, apply=False):
    """One compiled program: `run(state, grads_seq) -> (state, (updates, params, metrics))`
    per step, metrics computed inside the jitted step (params are those before the update)."""

    @jax.jit
    def run(state, grads_seq):
        def body(carry, g):
            p, s = carry
            u, s = tx.update(g, s, p)
            new_p = gradtx.apply_updates(p, u) if apply else p
            return (new_p, s), (u, p, gradtx.metrics(tx, s))

        (_, state), out = jax.lax.scan(body, (params, state), grads_seq)
        return state, out

    return run


CONFIGS = {
    "clip_adamw": lambda: gradtx.chain(gradtx.clip_by_global_norm(1.0), gradtx.adamw(SCHED)),
    "finite": lambda: gradtx.apply_if_finite(gradtx.adamw(SCHED), 3, locate_nonfinite=True),
    "spikes": lambda: gradtx.skip_on_spikes(
        gradtx.adamw(SCHED), metric="grad_norm", window=4, warmup=2, threshold=3.0
    ),
    "accumulate": lambda: gradtx.accumulate_k_steps(gradtx.adamw(SCHED), 2),
    "history": lambda: gradtx.chain(
        gradtx.clip_by_history(window=3, warmup=2, sigma_factor=1.0), gradtx.adamw(SCHED)
    ),
    "with_metrics": lambda: gradtx.with_metrics(
        gradtx.chain(
            gradtx.clip_by_global_norm(1.0),
            gradtx.clip_by_history(window=3, warmup=2),
            gradtx.adamw(SCHED),
        ),
        per_leaf=True,
    ),
    "multi": lambda: gradtx.multi_transform(
        {"a": gradtx.adam(SCHED), "b": gradtx.adam(1e-3)}, {"dense": "a", "out": "b"}
    ),
    "named": lambda: gradtx.named_chain(
        ("opt", gradtx.adam(SCHED)), ("extra", gradtx.scale_by_learning_rate(0.5))
    ),
}

_PER_LEAF_KEYS = sorted(
    f"{kind}/{leaf}"
    for kind in ("grad_norm", "update_norm", "update_param_ratio", "mu_norm", "nu_norm")
    for leaf in LEAVES
)

# sorted: `metrics` gives its keys in the order a dict has when it leaves `jit`
EXPECTED_KEYS = {
    "clip_adamw": ["step", "learning_rate"],
    "finite": [
        "step",
        "notfinite_count",
        "total_notfinite",
        "nonfinite_index",
        "nonfinite_count",
        "learning_rate",
    ],
    "spikes": ["step", "skipped", "total_skipped", "consecutive_skips", "learning_rate"],
    "accumulate": ["step", "micro_step", "gradient_step", "learning_rate"],
    "history": ["step", "clip_threshold", "clip_scale", "learning_rate"],
    "with_metrics": [
        "step",
        "grad_norm",
        "update_norm",
        "clip_fraction/0",
        "clip_fraction/1",
        *_PER_LEAF_KEYS,
        "clip_threshold",
        "clip_scale",
        "learning_rate",
    ],
    "multi": ["step", "inner_states/a/1/learning_rate", "inner_states/b/1/learning_rate"],
    "named": ["step", "opt/1/learning_rate", "extra/learning_rate"],
}


EXPECTED_KEYS = {name: sorted(keys) for name, keys in EXPECTED_KEYS.items()}


@functools.cache
def _runner(name):
    tx = CONFIGS[name]()
    return tx, _scan(tx)


def _sched(t):
    return np.float32(SCHED(t))


# -- 1. metrics: keys and values ------------------------------------------------------------------


def test_learning_rate_is_the_schedule_at_count_minus_one_and_matches_inject_hyperparams():
    tx = gradtx.adamw(SCHED)
    inj = gradtx.inject_hyperparams(gradtx.adamw)(learning_rate=SCHED)
    steps = 20
    grads = _grads([1.0] * steps, seed=3)

    @jax.jit
    def run(grads_seq):
        def body(carry, g):
            s, si = carry
            u, s = tx.update(g, s, PARAMS)
            ui, si = inj.update(g, si, PARAMS)
            out = (gradtx.metrics(tx, s), gradtx.metrics(inj, si), si.hyperparams, u, ui)
            return (s, si), out

        return jax.lax.scan(body, (tx.init(PARAMS), inj.init(PARAMS)), grads_seq)[1]

    m, mi, stored, u, ui = run(grads)
    expected = np.array([_sched(t) for t in range(steps)])
    assert len(set(expected.tolist())) == steps  # the schedule moves every step
    assert list(m) == ["learning_rate", "step"]
    np.testing.assert_array_equal(m["step"], np.arange(1, steps + 1))
    np.testing.assert_allclose(m["learning_rate"], expected, rtol=1e-6)
    np.testing.assert_allclose(m["learning_rate"], stored["learning_rate"], rtol=1e-6)
    np.testing.assert_allclose(mi["learning_rate"], stored["learning_rate"], rtol=1e-6)
    np.testing.assert_allclose(mi["step"], np.arange(1, steps + 1))
    for a, b in zip(jax.tree.leaves(u), jax.tree.leaves(ui), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-8)

    m0 = gradtx.metrics(tx, tx.init(PARAMS))
    assert list(m0) == ["learning_rate", "step"]
    assert int(m0["step"]) == 0
    np.testing.assert_allclose(m0["learning_rate"], _sched(0), rtol=1e-6)


@pytest.mark.parametrize("lr", [1e-3, 0.25])
def test_constant_learning_rate(lr):
    tx = gradtx.adamw(lr)
    state = tx.init(PARAMS)
    g = _step_slice(GRADS, 0)
    for step in range(3):
        m = gradtx.metrics(tx, state)
        assert list(m) == ["learning_rate", "step"]
        assert int(m["step"]) == step
        assert m["learning_rate"].dtype == jnp.float32
        np.testing.assert_allclose(m["learning_rate"], np.float32(lr), rtol=1e-7)
        _, state = tx.update(g, state, PARAMS)


@pytest.mark.parametrize("name", ["multi", "named"])
def test_two_learning_rates_get_path_prefixed_keys(name):
    tx, run = _runner(name)
    _, (_, _, m) = run(tx.init(PARAMS), GRADS)
    assert list(gradtx.metrics(tx, tx.init(PARAMS))) == EXPECTED_KEYS[name]
    assert list(m) == EXPECTED_KEYS[name]
    scheduled, constant = {
        "multi": ("inner_states/a/1/learning_rate", "inner_states/b/1/learning_rate"),
        "named": ("opt/1/learning_rate", "extra/learning_rate"),
    }[name]
    np.testing.assert_allclose(m[scheduled], [_sched(t) for t in range(T)], rtol=1e-6)
    np.testing.assert_allclose(m[constant], np.full(T, 1e-3 if name == "multi" else 0.5))
    np.testing.assert_array_equal(m["step"], np.arange(1, T + 1))


@pytest.mark.parametrize("name", list(CONFIGS))
def test_keys_stable_through_steps_jit_and_checkpoint_resume(name):
    tx, run = _runner(name)
    init = tx.init(PARAMS)
    expected = EXPECTED_KEYS[name]
    assert list(gradtx.metrics(tx, init)) == expected

    state, (_, _, stacked) = run(init, GRADS)
    eager = gradtx.metrics(tx, state)  # on the state out of jit (dicts rebuilt sorted)
    assert list(eager) == expected
    assert list(stacked) == expected  # computed inside the jitted step: the same order
    for key in expected:  # the same values under jit as eagerly
        assert np.shape(stacked[key]) == (T,)
        np.testing.assert_array_equal(stacked[key][-1], eager[key], err_msg=key)
        assert eager[key].shape == ()

    # an eager update keeps the order too
    _, eager_state = tx.update(_step_slice(GRADS, 0), init, PARAMS)
    assert list(gradtx.metrics(tx, eager_state)) == expected

    restored = gradtx.load_state_dict(tx.init(PARAMS), gradtx.state_dict(state))
    after_restore = gradtx.metrics(tx, restored)
    assert list(after_restore) == expected
    for key in expected:
        np.testing.assert_array_equal(after_restore[key], eager[key], err_msg=key)

    more = _grads(NORMS[::-1], seed=7)
    resumed_state, (u_r, _, m_r) = run(restored, more)
    _, (u_c, _, m_c) = run(state, more)
    assert list(gradtx.metrics(tx, resumed_state)) == expected
    for key in expected:
        np.testing.assert_array_equal(m_r[key], m_c[key], err_msg=key)
    for a, b in zip(jax.tree.leaves(u_r), jax.tree.leaves(u_c), strict=True):
        np.testing.assert_array_equal(a, b)


def test_accumulate_counters_and_inner_learning_rate():
    tx, run = _runner("accumulate")
    _, (_, _, m) = run(tx.init(PARAMS), GRADS)
    np.testing.assert_array_equal(m["micro_step"], [1, 0, 1, 0, 1])
    np.testing.assert_array_equal(m["gradient_step"], [0, 1, 1, 2, 2])
    np.testing.assert_array_equal(m["step"], m["gradient_step"])
    lr = [_sched(max(int(s) - 1, 0)) for s in m["gradient_step"]]
    np.testing.assert_allclose(m["learning_rate"], lr, rtol=1e-6)


def test_skip_on_spikes_counters():
    tx, run = _runner("spikes")
    grads = _grads([1.0, 1.1, 0.9, 50.0, 1.0], seed=4)
    _, (u, _, m) = run(tx.init(PARAMS), grads)
    np.testing.assert_array_equal(m["skipped"], [False, False, False, True, False])
    np.testing.assert_array_equal(m["total_skipped"], [0, 0, 0, 1, 1])
    np.testing.assert_array_equal(m["consecutive_skips"], [0, 0, 0, 1, 0])
    np.testing.assert_array_equal(m["step"], np.arange(1, T + 1))
    # the skipped step did not advance the inner schedule: 4 inner steps, latest used SCHED(3)
    np.testing.assert_allclose(m["learning_rate"][-1], _sched(3), rtol=1e-6)
    assert not np.any(np.asarray(jax.tree.leaves(_step_slice(u, 3))[0]))

    grads = _grads([1.0, 1.1, 0.9, 50.0, 60.0], seed=4)  # two in a row
    _, (_, _, m) = run(tx.init(PARAMS), grads)
    np.testing.assert_array_equal(m["consecutive_skips"], [0, 0, 0, 1, 2])
    np.testing.assert_array_equal(m["total_skipped"], [0, 0, 0, 1, 2])


def _history_reference(norms, window, warmup, factor=1.0, sigma=1.0):
    hist, thresholds, scales = [], [], []

    def threshold():
        if len(hist) < warmup:
            return np.inf
        h = np.asarray(hist, np.float64)
        return factor * h.mean() + sigma * max(h.std(), 1e-6)

    for n in norms:
        c = threshold()
        scales.append(1.0 if not np.isfinite(c) else min(1.0, c / n))
        hist = [*hist, n][-window:]
        thresholds.append(threshold())
    return np.array(thresholds), np.array(scales)


def test_clip_by_history_threshold_and_scale():
    tx, run = _runner("history")
    _, (_, _, m) = run(tx.init(PARAMS), GRADS)
    thresholds, scales = _history_reference(NORMS, window=3, warmup=2)
    assert np.isinf(thresholds[0]) and np.isinf(m["clip_threshold"][0])
    assert np.any(scales < 1.0)  # the 10.0 step is clipped
    np.testing.assert_allclose(m["clip_threshold"], thresholds, rtol=1e-5)
    np.testing.assert_allclose(m["clip_scale"], scales, rtol=1e-5)


# -- 3. locating a NaN ----------------------------------------------------------------------------


def test_nonfinite_index_points_at_the_bad_leaf():
    tx, run = _runner("finite")
    grads = jax.tree.map(np.array, GRADS)
    grads["out"]["kernel"][1, 0, :2] = np.nan  # step 1: two NaNs in out/kernel
    grads["dense"]["kernel"][3, 2, 1] = np.inf  # step 3: one Inf in dense/kernel
    grads["out"]["bias"][3, 0] = np.nan  # ... and a NaN in a later leaf
    state, (_, _, m) = run(tx.init(PARAMS), jax.tree.map(jnp.asarray, grads))
    idx = {p: i for i, p in enumerate(LEAVES)}
    np.testing.assert_array_equal(
        m["nonfinite_index"], [-1, idx["out/kernel"], idx["out/kernel"], idx["dense/kernel"],
                               idx["dense/kernel"]]
    )  # fmt: skip
    np.testing.assert_array_equal(m["nonfinite_count"], [0, 2, 2, 1, 1])
    np.testing.assert_array_equal(m["notfinite_count"], [0, 1, 0, 1, 0])
    np.testing.assert_array_equal(m["total_notfinite"], [0, 1, 1, 2, 2])
    loc = state.first_nonfinite
    assert loc.path == "dense/kernel"
    assert loc.leaf_paths[int(m["nonfinite_index"][-1])] == loc.path
    assert int(loc.total) == 2
    # 3 inner steps were applied: the latest used SCHED(2)
    np.testing.assert_allclose(m["learning_rate"][-1], _sched(2), rtol=1e-6)
    restored = gradtx.load_state_dict(tx.init(PARAMS), gradtx.state_dict(state))
    assert restored.first_nonfinite.path == "dense/kernel"
    assert int(gradtx.metrics(tx, restored)["nonfinite_index"]) == idx["dense/kernel"]


# -- 2. with_metrics ------------------------------------------------------------------------------


def test_with_metrics_is_bit_identical_and_measures_like_numpy():
    inner = gradtx.chain(gradtx.clip_by_global_norm(1.0), gradtx.adamw(SCHED, weight_decay=0.1))
    wm = gradtx.with_metrics(inner, per_leaf=True)

    @jax.jit
    def run(grads_seq):
        def body(carry, g):
            p, pw, s, sw = carry
            u, s = inner.update(g, s, p)
            uw, sw = wm.update(g, sw, pw)
            new = (gradtx.apply_updates(p, u), gradtx.apply_updates(pw, uw), s, sw)
            return new, (p, u, uw, s, sw.inner_state, gradtx.metrics(wm, sw))

        carry = (PARAMS, PARAMS, inner.init(PARAMS), wm.init(PARAMS))
        return jax.lax.scan(body, carry, grads_seq)[1]

    p, u, uw, s, sw_inner, m = run(GRADS)
    for a, b in zip(jax.tree.leaves((u, s)), jax.tree.leaves((uw, sw_inner)), strict=True):
        np.testing.assert_array_equal(a, b)
    assert jax.tree.structure(s) == jax.tree.structure(sw_inner)

    assert set(m) == {"step", "grad_norm", "update_norm", "clip_fraction", "learning_rate",
                      *_PER_LEAF_KEYS}  # fmt: skip
    for t in range(T):
        g_t, u_t, p_t = (_step_slice(x, t) for x in (GRADS, u, p))
        gn = _np_norm(jax.tree.leaves(g_t))
        np.testing.assert_allclose(m["grad_norm"][t], gn, rtol=1e-5)
        np.testing.assert_allclose(m["grad_norm"][t], NORMS[t], rtol=1e-5)
        np.testing.assert_allclose(m["update_norm"][t], _np_norm(jax.tree.leaves(u_t)), rtol=1e-5)
        np.testing.assert_allclose(
            m["clip_fraction"][t], 1.0 - min(1.0, 1.0 / gn), rtol=1e-5, atol=1e-6
        )
        adam = _step_slice(s[1][0], t)
        for path, g, uu, pp, mu, nu in zip(
            LEAVES, *(jax.tree.leaves(x) for x in (g_t, u_t, p_t, adam.mu, adam.nu)), strict=True
        ):
            np.testing.assert_allclose(m[f"grad_norm/{path}"][t], _np_norm([g]), rtol=1e-5)
            np.testing.assert_allclose(m[f"update_norm/{path}"][t], _np_norm([uu]), rtol=1e-5)
            np.testing.assert_allclose(m[f"mu_norm/{path}"][t], _np_norm([mu]), rtol=1e-5)
            np.testing.assert_allclose(m[f"nu_norm/{path}"][t], _np_norm([nu]), rtol=1e-5)
            np.testing.assert_allclose(
                m[f"update_param_ratio/{path}"][t], _np_norm([uu]) / _np_norm([pp]), rtol=1e-5
            )
    clip = np.asarray(m["clip_fraction"])
    assert np.all(clip[np.array(NORMS) <= 1.0] == 0.0)
    assert np.all(clip[np.array(NORMS) > 1.0] > 0.3)
    np.testing.assert_allclose(m["learning_rate"], [_sched(t) for t in range(T)], rtol=1e-6)


def test_with_metrics_eager_matches_unwrapped_and_keeps_key_order():
    inner = gradtx.chain(gradtx.clip_by_global_norm(1.0), gradtx.adam(1e-2))
    wm = gradtx.with_metrics(inner, per_leaf=True)
    s, sw = inner.init(PARAMS), wm.init(PARAMS)
    keys = list(gradtx.metrics(wm, sw))
    for t in range(2):
        g = _step_slice(GRADS, t)
        u, s = inner.update(g, s, PARAMS)
        uw, sw = wm.update(g, sw, PARAMS)
        for a, b in zip(
            jax.tree.leaves((u, s)), jax.tree.leaves((uw, sw.inner_state)), strict=True
        ):
            np.testing.assert_array_equal(a, b)
        assert list(gradtx.metrics(wm, sw)) == keys


@pytest.mark.parametrize(
    ("per_leaf", "groups"),
    [
        ("**/kernel", {"**/kernel": ["dense/kernel", "out/kernel"]}),
        (
            ["**/bias", "out/*"],
            {"**/bias": ["dense/bias", "out/bias"], "out/*": ["out/bias", "out/kernel"]},
        ),
        (
            {"kernels": "**/kernel", "dense": ["dense/*"], "all": ["**", "!out/bias"]},
            {
                "kernels": ["dense/kernel", "out/kernel"],
                "dense": ["dense/bias", "dense/kernel"],
                "all": ["dense/bias", "dense/kernel", "out/kernel"],
            },
        ),
    ],
)
def test_with_metrics_groups_are_norms_over_their_leaves(per_leaf, groups):
    wm = gradtx.with_metrics(gradtx.adam(1e-2), per_leaf=per_leaf)
    state = wm.init(PARAMS)
    kinds = ("grad_norm", "update_norm", "update_param_ratio", "mu_norm", "nu_norm")
    expected = {f"{k}/{g}" for k in kinds for g in groups}
    m0 = gradtx.metrics(wm, state)
    assert set(m0) - {"step", "grad_norm", "update_norm", "learning_rate"} == expected
    g = _step_slice(GRADS, 1)
    u, state = wm.update(g, state, PARAMS)
    m = gradtx.metrics(wm, state)
    assert list(m) == list(m0)
    by_path = lambda tree: dict(zip(LEAVES, jax.tree.leaves(tree), strict=True))
    trees = {
        "grad_norm": by_path(g),
        "update_norm": by_path(u),
        "mu_norm": by_path(state.inner_state[0].mu),
        "nu_norm": by_path(state.inner_state[0].nu),
    }
    p = by_path(PARAMS)
    for name, members in groups.items():
        for kind, leaves in trees.items():
            want = _np_norm([leaves[q] for q in members])
            np.testing.assert_allclose(m[f"{kind}/{name}"], want, rtol=1e-5, err_msg=kind)
        ratio = _np_norm([trees["update_norm"][q] for q in members]) / _np_norm(
            [p[q] for q in members]
        )
        np.testing.assert_allclose(m[f"update_param_ratio/{name}"], ratio, rtol=1e-5)


def test_with_metrics_errors():
    with pytest.raises(ValueError, match=r"with_metrics.*'nothing/\*'"):
        gradtx.with_metrics(gradtx.sgd(0.1), per_leaf=["**/kernel", "nothing/*"]).init(PARAMS)
    with pytest.raises(ValueError, match="with_metrics"):
        gradtx.with_metrics(gradtx.sgd(0.1), per_leaf={"g": "nope"}).init(PARAMS)
    wm = gradtx.with_metrics(gradtx.sgd(0.1), per_leaf=True)
    with pytest.raises(ValueError, match=r"with_metrics.*params"):
        wm.update(_step_slice(GRADS, 0), wm.init(PARAMS))
    with pytest.raises(ValueError, match=r"with_metrics.*params"):
        wm.update(_step_slice(GRADS, 0), wm.init(PARAMS), None)
    with pytest.raises(TypeError, match="with_metrics: per_leaf"):
        gradtx.with_metrics(gradtx.sgd(0.1), per_leaf=3)
    # without per-leaf metrics params are not needed
    plain = gradtx.with_metrics(gradtx.sgd(0.1))
    _, state = plain.update(_step_slice(GRADS, 0), plain.init(PARAMS))
    np.testing.assert_allclose(gradtx.metrics(plain, state)["grad_norm"], NORMS[0], rtol=1e-5)


def test_with_metrics_bf16_params():
    pb = _params(jnp.bfloat16)
    inner = gradtx.chain(gradtx.clip_by_global_norm(1.0), gradtx.adam(1e-2))
    wm = gradtx.with_metrics(inner, per_leaf=True)
    s, sw = inner.init(pb), wm.init(pb)
    keys = list(gradtx.metrics(wm, sw))
    for t in (1, 2):
        g = jax.tree.map(lambda x: x.astype(jnp.bfloat16), _step_slice(GRADS, t))
        u, s = inner.update(g, s, pb)
        uw, sw = wm.update(g, sw, pb)
        for a, b in zip(
            jax.tree.leaves((u, s)), jax.tree.leaves((uw, sw.inner_state)), strict=True
        ):
            assert a.dtype == b.dtype
            np.testing.assert_array_equal(np.asarray(a, np.float32), np.asarray(b, np.float32))
        assert all(x.dtype == jnp.bfloat16 for x in jax.tree.leaves(uw))
        m = gradtx.metrics(wm, sw)
        assert list(m) == keys
        for key, value in m.items():
            assert value.dtype == (jnp.int32 if key == "step" else jnp.float32), key
        gn = _np_norm([np.asarray(x, np.float32) for x in jax.tree.leaves(g)])
        np.testing.assert_allclose(m["grad_norm"], gn, rtol=1e-5)
        # the clipped bf16 updates have norm 1 only to bf16 precision
        np.testing.assert_allclose(m["clip_fraction"], 1.0 - min(1.0, 1.0 / gn), rtol=1e-2)
        un = _np_norm([np.asarray(x, np.float32) for x in jax.tree.leaves(uw)])
        np.testing.assert_allclose(m["update_norm"], un, rtol=1e-5)
        kernel = np.asarray(uw["dense"]["kernel"], np.float32)
        np.testing.assert_allclose(m["update_norm/dense/kernel"], _np_norm([kernel]), rtol=1e-5)


# -- 4. loggers -----------------------------------------------------------------------------------


def _metric_stream(steps):
    """(step, metrics) of a small eager with_metrics SGD run."""
    tx = gradtx.with_metrics(gradtx.sgd(0.1))
    params = jnp.ones(2)
    state = tx.init(params)
    out = []
    for step in range(1, steps + 1):
        _, state = tx.update(jnp.full(2, float(step)), state, params)
        out.append((step, gradtx.metrics(tx, state)))
    return out


STREAM = _metric_stream(7)
STREAM_KEYS = ["grad_norm", "learning_rate", "step", "update_norm"]


class FakeWriter:
    def __init__(self):
        self.calls = []

    def add_scalar(self, tag, value, step):
        self.calls.append((tag, value, step))


class FakeRun:
    def __init__(self):
        self.calls = []

    def log(self, values, step=None):
        self.calls.append((dict(values), step))


def test_log_every_list_sink_only_on_multiples():
    history = []
    log = gradtx.log_every(3, history)
    assert isinstance(log, gradtx.MetricsLogger)
    returned = [log(step, m) for step, m in STREAM]
    assert [step for step, _ in history] == [3, 6]
    assert [r is None for r in returned] == [True, True, False, True, True, False, True]
    for (step, values), r in zip(history, [returned[2], returned[5]], strict=True):
        assert list(values) == STREAM_KEYS
        assert all(type(v) is float for v in values.values())
        assert values == r
        assert values["step"] == step
        np.testing.assert_allclose(values["grad_norm"], step * np.sqrt(2), rtol=1e-6)
        np.testing.assert_allclose(values["learning_rate"], 0.1, rtol=1e-6)


def test_log_every_print(capsys):
    log = gradtx.log_every(2, print)
    for step, m in STREAM:
        log(step, m)
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 3
    for line, step in zip(lines, (2, 4, 6), strict=True):
        assert line.startswith(f"step {step}")
        for key in STREAM_KEYS:
            assert f"{key}=" in line
        assert f"step={step}" in line  # integers without a decimal point


def test_log_every_default_sink_is_print(capsys):
    log = gradtx.log_every(7)
    for step, m in STREAM:
        log(step, m)
    assert capsys.readouterr().out.strip().splitlines()[0].startswith("step 7")


def test_log_every_tensorboard_wandb_and_function_sinks():
    writer, run, calls = FakeWriter(), FakeRun(), []
    log = gradtx.log_every(2, writer, run, lambda values, step: calls.append((step, values)))
    for step, m in STREAM:
        log(jnp.asarray(step), m)
    assert writer.calls == [
        (key, pytest.approx(float(m[key])), step)
        for step, m in STREAM
        if step % 2 == 0
        for key in STREAM_KEYS
    ]
    assert [step for _, step in run.calls] == [2, 4, 6]
    assert all(list(values) == STREAM_KEYS for values, _ in run.calls)
    assert [step for step, _ in calls] == [2, 4, 6]
    assert [values for _, values in calls] == [values for values, _ in run.calls]


def test_log_every_errors():
    with pytest.raises(TypeError, match="log_every: sink 1"):
        gradtx.log_every(2, [], 3)
    with pytest.raises(TypeError, match="log_every: sink 0"):
        gradtx.log_every(2, object())
    with pytest.raises(ValueError, match="log_every: n"):
        gradtx.log_every(0)
    with pytest.raises(ValueError, match="log_every: n"):
        gradtx.log_every(-3, [])


def test_to_scalars_and_format_metrics():
    values = gradtx.to_scalars(STREAM[0][1])
    assert list(values) == STREAM_KEYS
    assert all(type(v) is float for v in values.values())
    with pytest.raises(ValueError, match="to_scalars: metric 'grad_norm' has shape \\(3,\\)"):
        gradtx.to_scalars({"step": jnp.asarray(1), "grad_norm": jnp.ones(3)})
    stacked = _runner("clip_adamw")[1](_runner("clip_adamw")[0].init(PARAMS), GRADS)[1][2]
    with pytest.raises(ValueError, match="to_scalars"):
        gradtx.to_scalars(stacked)
    assert gradtx.format_metrics({"step": 3.0, "lr": 0.0012345678}, step=3) == (
        "step 3  step=3  lr=0.00123457"
    )


def test_with_metrics_state_can_be_donated():
    # every field of the initial state is its own buffer: a jitted step that donates the state
    # (as jit_step and the demo do) must not find one buffer twice
    tx = gradtx.with_metrics(
        gradtx.chain(gradtx.clip_by_global_norm(1.0), gradtx.adam(1e-2)), per_leaf=True
    )
    params = {"a": jnp.ones(3), "b": jnp.ones((2, 2))}
    state = tx.init(params)

    @functools.partial(jax.jit, donate_argnums=(1,))
    def step(params, state):
        return tx.update(jax.tree.map(jnp.ones_like, params), state, params)[1]

    state = step(params, state)
    assert float(gradtx.metrics(tx, state)["grad_norm"]) == pytest.approx(np.sqrt(7.0))


def test_clip_fraction_of_measured_and_stateful_clips():
    # an element-wise clip is measured (1 - |after| / |before|); clip_by_history reports one
    # minus the factor it applied; both as NumPy says, in one chain
    tx = gradtx.with_metrics(
        gradtx.chain(
            gradtx.clip(0.5),
            gradtx.clip_by_history(window=4, warmup=2, sigma_factor=0.0),
            gradtx.sgd(0.1),
        )
    )
    params = {"a": jnp.zeros(3), "b": jnp.zeros(2)}
    grads = [
        {"a": jnp.array([0.1, 0.2, 0.3]), "b": jnp.array([0.1, -0.1])},
        {"a": jnp.array([0.2, 0.1, 0.3]), "b": jnp.array([0.2, 0.1])},
        {"a": jnp.array([2.0, -3.0, 0.4]), "b": jnp.array([0.3, 5.0])},
    ]
    state = tx.init(params)
    history = []
    for g in grads:
        _, state = tx.update(g, state, params)
        m = gradtx.metrics(tx, state)
        flat = np.concatenate([np.asarray(g["a"]), np.asarray(g["b"])]).astype(np.float64)
        clipped = np.clip(flat, -0.5, 0.5)
        want_elementwise = 1.0 - np.linalg.norm(clipped) / np.linalg.norm(flat)
        threshold = np.mean(history) if len(history) >= 2 else np.inf
        n = np.linalg.norm(clipped)
        want_history = 0.0 if n <= threshold else 1.0 - threshold / n
        history.append(n)
        np.testing.assert_allclose(float(m["clip_fraction/0"]), want_elementwise, atol=1e-6)
        np.testing.assert_allclose(float(m["clip_fraction/1"]), want_history, atol=1e-6)
    assert float(m["clip_fraction/0"]) > 0 and float(m["clip_fraction/1"]) > 0


# -- 5. what metrics see inside MultiSteps, monolithic optimizers and partitions ------------------


def test_metrics_and_with_metrics_see_inside_multisteps():
    ms = gradtx.wrappers.MultiSteps(gradtx.adamw(SCHED), every_k_schedule=2)
    as_tx = ms.gradient_transformation()
    state = ms.init(PARAMS)
    for t in range(3):
        _, state = ms.update(_step_slice(GRADS, t), state, PARAMS)
    want = gradtx.metrics(as_tx, state)
    assert list(want) == ["gradient_step", "learning_rate", "micro_step", "step"]
    assert int(want["micro_step"]) == 1 and int(want["gradient_step"]) == 1
    np.testing.assert_allclose(want["learning_rate"], _sched(0), rtol=1e-6)
    got = gradtx.metrics(ms, state)
    assert list(got) == list(want)
    for key in want:
        np.testing.assert_array_equal(got[key], want[key], err_msg=key)
    chained = gradtx.chain(ms)
    assert list(gradtx.metrics(chained, (state,))) == list(want)
    wm = gradtx.with_metrics(ms)
    ws = wm.init(PARAMS)
    for t in range(3):
        _, ws = wm.update(_step_slice(GRADS, t), ws, PARAMS)
    m = gradtx.metrics(wm, ws)
    assert {"micro_step", "gradient_step", "learning_rate"} <= set(m)
    np.testing.assert_array_equal(m["micro_step"], want["micro_step"])


def _lr_cases():
    return {
        "optimistic_adam": lambda s: gradtx.optimistic_adam(s),
        "fromage": lambda s: gradtx.fromage(s),
        "madgrad": lambda s: contrib.madgrad(s),
        "momo": lambda s: contrib.momo(s),
        "momo_adam": lambda s: contrib.momo_adam(s),
        "prodigy": lambda s: contrib.prodigy(s),
        "dadapt_adamw": lambda s: contrib.dadapt_adamw(s),
        "schedule_free": lambda s: contrib.schedule_free(gradtx.sgd(0.1), s),
    }


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.parametrize("name", list(_lr_cases()))
def test_learning_rate_of_monolithic_and_adaptive_optimizers(name):
    # the schedule's value at the latest update (schedule_free calls its schedule from 1, as
    # Optax); the D-adapted ones add the step size they adapted, d * learning_rate
    tx = _lr_cases()[name](SCHED)
    first = 1 if name == "schedule_free" else 0
    state = tx.init(PARAMS)
    m = gradtx.metrics(tx, state)
    np.testing.assert_allclose(m["learning_rate"], _sched(first), rtol=1e-6)
    for t in range(3):
        _, state = tx.update(_step_slice(GRADS, t), state, PARAMS, value=jnp.asarray(2.0))
        m = gradtx.metrics(tx, state)
        np.testing.assert_allclose(m["learning_rate"], _sched(t + first), rtol=1e-6, err_msg=name)
    jitted = jax.jit(lambda s: gradtx.metrics(tx, s))(state)
    assert list(jitted) == list(m)
    if name in ("prodigy", "dadapt_adamw"):
        d = float(state.estim_lr)  # the estimate after the latest update (1e-6 at the start)
        np.testing.assert_allclose(m["effective_learning_rate"], d * _sched(2), rtol=1e-6)
    if name == "optimistic_adam":
        assert "2/learning_rate" not in m  # the last link only flips the sign
        np.testing.assert_allclose(m["optimism"], _sched(2), rtol=1e-6)


def _per_leaf_moments(tx, params, grads):
    wm = gradtx.with_metrics(tx, per_leaf=True)
    state = wm.init(params)
    keys = list(gradtx.metrics(wm, state))
    _, state = wm.update(grads, state, params)
    m = gradtx.metrics(wm, state)
    assert list(m) == keys
    moments = {k: v for k, v in m.items() if "_norm/" in k and not k.startswith("grad_")}
    return {k: v for k, v in moments.items() if not k.startswith("update_")}, state.inner_state


@pytest.mark.parametrize("bare", [False, True], ids=["dict", "bare"])
def test_with_metrics_per_leaf_moments_of_a_single_leaf(bare):
    params = jnp.arange(1.0, 4.0) if bare else {"w": jnp.arange(1.0, 4.0)}
    grads = jax.tree.map(lambda p: 0.5 * p, params)
    got, inner = _per_leaf_moments(gradtx.adam(0.1), params, grads)
    leaf = "<root>" if bare else "w"
    assert sorted(got) == [f"mu_norm/{leaf}", f"nu_norm/{leaf}"]
    mu, nu = jax.tree.leaves(inner[0].mu)[0], jax.tree.leaves(inner[0].nu)[0]
    np.testing.assert_allclose(got[f"mu_norm/{leaf}"], _np_norm([mu]), rtol=1e-6)
    np.testing.assert_allclose(got[f"nu_norm/{leaf}"], _np_norm([nu]), rtol=1e-6)


def test_with_metrics_per_leaf_moments_across_partitions_and_masks():
    g = _step_slice(GRADS, 1)
    # muon: a multi_transform of muon (the kernels, momentum `mu`) and adam (the biases)
    got, inner = _per_leaf_moments(contrib.muon(0.02), PARAMS, g)
    biases = ["dense/bias", "out/bias"]
    assert sorted(got) == sorted(
        [f"mu_norm/{p}" for p in LEAVES] + [f"nu_norm/{p}" for p in biases]
    )
    adam, muon = inner.inner_states["adam"][0], inner.inner_states["muon"][0]
    mu = {**_leaves_by_path(adam.mu), **_leaves_by_path(muon.mu)}
    for p in LEAVES:
        np.testing.assert_allclose(got[f"mu_norm/{p}"], _np_norm([mu[p]]), rtol=1e-6, err_msg=p)
    for p in biases:
        want = _np_norm([_leaves_by_path(adam.nu)[p]])
        np.testing.assert_allclose(got[f"nu_norm/{p}"], want, rtol=1e-6, err_msg=p)
    # masked: the masked-out subtree has no moments, and no key
    got, inner = _per_leaf_moments(
        gradtx.masked(gradtx.adam(0.1), {"dense": True, "out": False}), PARAMS, g
    )
    assert sorted(got) == sorted(
        f"{k}_norm/dense/{p}" for k in ("mu", "nu") for p in ("bias", "kernel")
    )
    np.testing.assert_allclose(
        got["nu_norm/dense/kernel"],
        _np_norm([inner.inner_state[0].nu["dense"]["kernel"]]),
        rtol=1e-6,
    )


def _leaves_by_path(tree):
    """{leaf path: array} of the leaves of a partition's tree (MaskedNode leaves left out)."""
    leaves = jax.tree_util.tree_flatten_with_path(tree)[0]
    return {gradtx.tree.path_str(p): x for p, x in leaves}
