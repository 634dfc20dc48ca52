"""PSGD Kron against `pytorch_optimizer.Kron` (4.1.0) with the random draws fixed (update every
step, the same probes V fed to both), against a NumPy transcription of the rule for batched
leaves, the statistics of the random parts, and its edge cases."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradtx
from gradtx.contrib._kron import (
    ScaleByKronState,
    _probes,
    _step_keys,
    kron,
    precond_update_prob_schedule,
    scale_by_kron,
)

from .torch_reference import STEPS, grads_of, params_of, torch_trajectory

torch = pytest.importorskip("torch")
pytorch_optimizer = pytest.importorskip("pytorch_optimizer")
psgd = pytest.importorskip("pytorch_optimizer.optimizer.psgd")


def _problem(extra: dict[str, tuple[int, ...]], seed: int = 0):
    """The shared (8, 6) + (6,) problem plus `extra` leaves, as dicts in jax's (sorted) leaf
    order, so that torch sees the parameters (and draws their probes) in that order."""
    params, grads = params_of(seed), grads_of(seed + 1)
    rng = np.random.default_rng(seed + 2)
    for k, s in extra.items():
        params[k] = rng.normal(size=s).astype(np.float32)
        grads[k] = rng.normal(size=(STEPS, *s)).astype(np.float32)
    order = sorted(params)
    return {k: params[k] for k in order}, {k: grads[k] for k in order}


@functools.cache
def _probe_runner(shapes, steps):
    @jax.jit
    def run(key):
        def body(key, _):
            key, _, _, k_probe = _step_keys(key)
            return key, _probes(k_probe, list(shapes))

        return jax.lax.scan(body, key, None, length=steps)[1]

    return run


def _our_probes(params, seed=0, steps=STEPS):
    """The probes our state's key gives at each step (the draws scale_by_kron makes)."""
    shapes = tuple(tuple(np.shape(v)) for v in params.values())
    stacked = _probe_runner(shapes, steps)(jax.random.key_data(jax.random.key(seed)))
    stacked = [np.asarray(v) for v in stacked]
    return [[v[t] for v in stacked] for t in range(steps)]


def _reference(params, grads, monkeypatch, probes, **kwargs):
    """`pytorch_optimizer.Kron`, updating every step, with `probes` for torch.randn_like."""
    queue = iter([v for step in probes for v in step])

    def randn_like(x, dtype=None, **_):
        v = torch.tensor(next(queue))
        assert tuple(v.shape) == tuple(x.shape)
        return v.to(dtype or x.dtype)

    monkeypatch.setattr(psgd.torch, "randn_like", randn_like)
    kwargs = {"pre_conditioner_update_probability": 1.0, "balance_prob": 0.0, **kwargs}
    return torch_trajectory(lambda ps: pytorch_optimizer.Kron(ps, **kwargs), params, grads)


@functools.cache
def _trajectory_runner(tx):
    """One compiled run per transformation (reused across tests): the params after each step,
    the updates of each step and the final state."""

    @jax.jit
    def run(params, grads):
        def body(carry, g):
            p, s = carry
            u, s = tx.update(g, s, p)
            p = gradtx.apply_updates(p, u)
            return (p, s), (p, u)

        (_, state), (traj, updates) = jax.lax.scan(body, (params, tx.init(params)), grads)
        return traj, updates, state

    return run


def _trajectory(tx, params, grads):
    return jax.tree.map(np.asarray, _trajectory_runner(tx)(params, grads)[0])


# Tolerance 1e-5 absolute on params of size ~1 after 60 steps (measured <= 7.2e-7 in all three
# configurations): both sides fit in float32 but contract in different orders (torch's einsum
# strings vs per-axis tensordots), the triangular solves round differently and ours rescales the
# fit's terms by their max-norm; the fit feeds back through the factors, so the rounding
# differences grow slowly with the steps.
LR = 3e-2
REFERENCE = {
    # a 3-D leaf (three triangular factors), a 1-D one (diagonal) and a scalar (scalar factor)
    "triangular": ({"c": (3, 4, 5), "s": ()}, {}, {}),
    # axes above 5 and the strictly largest axis fall back to diagonal factors; decay
    "fallbacks": (
        {"c": (3, 4, 7)},
        {"max_size_triangular": 5, "memory_save_mode": "smart_one_diag", "weight_decay": 0.1},
        {"max_size_triangular": 5, "memory_save_mode": "smart_one_diag", "weight_decay": 0.1},
    ),
    # no momentum, fit to the raw gradient, the largest axis diagonal
    "raw": (
        {},
        {"b1": 0.0, "momentum_into_preconditioner_update": False, "memory_save_mode": "one_diag"},
        {"momentum": 0.0, "momentum_into_precondition_update": False,
         "memory_save_mode": "one_diag"},
    ),
}  # fmt: skip
TXS = {
    name: kron(LR, preconditioner_update_probability=1.0, balance_probability=0.0, **ours)
    for name, (_, ours, _) in REFERENCE.items()
}


@pytest.mark.across_versions
@pytest.mark.parametrize("name", list(REFERENCE))
def test_matches_pytorch_optimizer_with_the_same_probes(name, monkeypatch):
    extra, _, theirs = REFERENCE[name]
    params, grads = _problem(extra)
    got = _trajectory(TXS[name], params, grads)
    want = _reference(params, grads, monkeypatch, _our_probes(params), lr=LR, **theirs)
    for k in params:
        np.testing.assert_allclose(got[k], want[k], rtol=0, atol=1e-5, err_msg=k)
    assert np.abs(got["w"][-1] - params["w"]).max() > 0.1  # it moved


def test_fit_uses_the_probes(monkeypatch):
    """The comparison can fail: other probes for torch give other trajectories."""
    extra, _, theirs = REFERENCE["triangular"]
    params, grads = _problem(extra)
    got = _trajectory(TXS["triangular"], params, grads)
    want = _reference(params, grads, monkeypatch, _our_probes(params, seed=1), lr=LR, **theirs)
    assert np.abs(got["w"] - want["w"]).max() > 1e-3


# -- the rule in NumPy, one 2-D slice (for batched leaves) --------------------------------------


def _nlb(a):
    """The reference's norm_lower_bound, float64."""
    m = np.abs(a).max()
    a = a / (m if m > 0 else 1.0)
    col, row = (a * a).sum(0), (a * a).sum(1)
    x0 = a[:, col.argmax()] @ a
    x1 = a @ a[row.argmax(), :]
    b0 = np.linalg.norm(x0 / np.linalg.norm(x0) @ a.T)
    b1 = np.linalg.norm(a.T @ (x1 / np.linalg.norm(x1)))
    return m * (b0 if col.max() > row.max() else b1)


def _numpy_kron_2d(grads, probes, b1=0.9, lr_q=0.1):
    """Updates of scale_by_kron for one matrix slice with two triangular factors, float64."""
    n, k = grads.shape[1:]
    q1, q2, m = np.eye(n), np.eye(k), np.zeros((n, k))
    out = []
    for t, (g, v) in enumerate(zip(grads.astype(np.float64), probes, strict=True), start=1):
        m = b1 * m + (1 - b1) * g
        h = m / (1 - b1**t)
        a = q1 @ h @ q2.T
        b = np.linalg.solve(q1.T, v) @ np.linalg.inv(q2)  # Q1^{-T} V Q2^{-1}
        new = []
        for q, ta, tb in ((q1, a @ a.T, b @ b.T), (q2, a.T @ a, b.T @ b)):
            new.append(q - lr_q * np.triu(ta - tb) / _nlb(ta + tb) @ q)
        q1, q2 = new
        u = q1.T @ q1 @ h @ q2.T @ q2
        out.append(u * min(1.1 / (np.sqrt(np.mean(u * u)) + 1e-6), 1.0))
    return np.stack(out)


@functools.cache
def _runner(tx):
    """One compiled scan per transformation: (final state, updates of every step)."""

    @jax.jit
    def run(grads):
        def body(s, g):
            u, s = tx.update(g, s)
            return s, u

        return jax.lax.scan(body, tx.init(jax.tree.map(lambda x: x[0], grads)), grads)

    return run


BATCHED = scale_by_kron(
    preconditioner_update_probability=1.0, balance_probability=0.0, batch_axes=1
)


def test_batch_axis_is_per_slice_with_the_same_probes():
    """A (5, 3, 4) leaf with batch axis 1: each [:, i, :] slice follows the 2-D rule with the
    probes' slice; the factors are stored (3, 5, 5) and (3, 4, 4)."""
    rng = np.random.default_rng(7)
    grads = rng.normal(size=(STEPS, 5, 3, 4)).astype(np.float32)
    state, updates = _runner(BATCHED)(grads)
    assert [q.shape for q in state.qs] == [(3, 5, 5), (3, 4, 4)]
    probes = np.stack([p[0] for p in _our_probes({"x": grads[0]})])
    for i in range(3):
        want = _numpy_kron_2d(grads[:, :, i, :], probes[:, :, i, :])
        diff = np.abs(np.asarray(updates[:, :, i, :]) - want).max()
        assert diff < 1e-4, (i, diff)


# -- the random parts -----------------------------------------------------------------------------


def test_schedule_is_the_reference_schedule():
    ours, theirs = precond_update_prob_schedule(), psgd.precondition_update_prob_schedule()
    for n in (0, 1, 499, 500, 501, 1000, 2000, 4000, 10**6):
        np.testing.assert_allclose(float(ours(n)), float(theirs(n)), rtol=1e-6, err_msg=str(n))


def test_update_frequency_follows_the_annealed_schedule():
    """A scalar leaf over 3000 steps: a fit always moves its factor (term1 != term2 almost
    surely), so the number of steps that change it counts the updates; it must be within 4
    binomial standard deviations of the schedule's sum, in the flat part (all) and after."""
    steps = 3000
    grads = np.random.default_rng(3).normal(size=(steps,)).astype(np.float32)
    annealed = precond_update_prob_schedule()

    @jax.jit
    def run(grads, const, use_schedule):
        """Which steps changed the factor, under the schedule or a constant probability (one
        compiled function for both: the choice is an argument)."""
        tx = scale_by_kron(
            b1=0.0,
            preconditioner_lr=1e-3,
            preconditioner_update_probability=lambda n: jnp.where(use_schedule, annealed(n), const),
        )

        def body(s, g):
            _, s2 = tx.update(g, s)
            return s2, s2.qs[0] != s.qs[0]

        return jax.lax.scan(body, tx.init(grads[0]), grads)[1]

    changed = np.asarray(run(grads, 0.0, True))
    p = np.asarray(jax.vmap(annealed)(jnp.arange(steps)))
    assert changed[:500].all()
    late = slice(500, steps)
    expected, sd = p[late].sum(), np.sqrt((p[late] * (1 - p[late])).sum())
    assert abs(changed[late].sum() - expected) < 4 * sd, (changed[late].sum(), expected, sd)
    changed = np.asarray(run(grads, 0.25, False))
    assert abs(changed.mean() - 0.25) < 4 * np.sqrt(0.25 * 0.75 / steps)


def test_probes_are_standard_normal():
    key = jax.random.key_data(jax.random.key(0))
    _, _, _, k = _step_keys(key)
    v, w = (np.asarray(x) for x in _probes(k, [(200, 100), (200, 100)]))
    n = v.size
    assert abs(v.mean()) < 4 / np.sqrt(n) and abs(v.var() - 1) < 4 * np.sqrt(2 / n)
    assert abs(np.corrcoef(v.ravel(), w.ravel())[0, 1]) < 4 / np.sqrt(n)  # leaves independent


# -- edge cases -----------------------------------------------------------------------------------

EDGE = scale_by_kron()
SHAPES = {"b": (6,), "s": (), "w": (8, 6)}


def _grads_like(fill):
    return {k: np.full((STEPS, *s), fill, np.float32) for k, s in SHAPES.items()}


def test_zero_gradients_give_zero_updates_and_finite_factors():
    state, updates = _runner(EDGE)(_grads_like(0.0))
    assert all((np.asarray(u) == 0).all() for u in jax.tree.leaves(updates))
    assert all(np.isfinite(np.asarray(q)).all() for q in jax.tree.leaves(state.qs))


@pytest.mark.parametrize("fill", [1e-30, 0.3, 1e30], ids=["tiny", "constant", "huge"])
def test_constant_tiny_and_huge_gradients_stay_finite_and_clipped(fill):
    state, updates = _runner(EDGE)(_grads_like(fill))
    for k, u in updates.items():
        u = np.asarray(u)
        assert np.isfinite(u).all(), k
        rms = np.sqrt(np.mean(u[-1].astype(np.float64) ** 2))
        assert rms <= 1.1 * (1 + 1e-5), k
        assert np.sum(u[-1].astype(np.float64) * np.sign(fill)) > 0, k  # P positive definite
    assert all(np.isfinite(np.asarray(q)).all() for q in jax.tree.leaves(state.qs))


def test_an_empty_leaf_passes_through_and_leaves_the_others_alone():
    """A zero-size leaf (plain or with a stack axis) has an empty update and keeps its factors;
    the other leaves' updates do not depend on its shape (the probes are drawn per leaf)."""

    def run(cols):
        tx = scale_by_kron(
            preconditioner_update_probability=1.0, batch_axes={"a": (), "m": (), "s": (0,)}
        )
        params = {"a": jnp.ones((0, cols)), "m": jnp.ones((4, 5)), "s": jnp.ones((2, 0))}
        state, step, out = tx.init(params), jax.jit(tx.update), []
        for i in range(3):
            grads = jax.tree.map(lambda x, i=i: jnp.cos(x * (i + 1)), params)
            updates, state = step(grads, state)
            out.append(updates)
        return out, state, tx.init(params)

    out, state, first = run(3)
    for updates in out:
        assert updates["a"].shape == (0, 3) and updates["s"].shape == (2, 0)
        assert np.isfinite(np.asarray(updates["m"])).all() and np.abs(updates["m"]).max() > 0
    for k in ("a", "s"):  # its factors as they started
        for q, q0 in zip(jax.tree.leaves(state.qs[k]), jax.tree.leaves(first.qs[k]), strict=True):
            np.testing.assert_array_equal(q, q0)
    other, _, _ = run(7)
    for u, v in zip(out, other, strict=True):
        np.testing.assert_array_equal(u["m"], v["m"])


def test_diagonal_fallback_above_max_size_triangular():
    tx = scale_by_kron(max_size_triangular=7, max_skew_triangular=10.0)
    state = tx.init({"w": jnp.zeros((8, 6)), "v": jnp.zeros((2, 40))})
    assert [q.shape for q in state.qs["w"]] == [(8,), (6, 6)]
    # skew: 40^2 > 10 * 80, so the long axis of (2, 40) is diagonal
    assert [q.shape for q in state.qs["v"]] == [(2, 2), (40,)]
    state = scale_by_kron(memory_save_mode="all_diag").init(jnp.zeros((3, 4)))
    assert [q.shape for q in state.qs] == [(3,), (4,)]


def test_bf16_params_and_bf16_preconditioner():
    params, grads = _problem(REFERENCE["triangular"][0])
    low = jax.tree.map(lambda x: jnp.asarray(x, jnp.bfloat16), (params, grads))
    tx = BF16
    state = tx.init(low[0])
    assert isinstance(state[0], ScaleByKronState)
    assert {q.dtype for q in jax.tree.leaves(state[0].qs)} == {jnp.dtype(jnp.bfloat16)}
    assert {m.dtype for m in jax.tree.leaves(state[0].mu)} == {jnp.dtype(jnp.bfloat16)}
    traj, updates, final = _trajectory_runner(tx)(*low)
    assert all(u.dtype == jnp.bfloat16 for u in jax.tree.leaves(updates))
    assert [x.dtype for x in jax.tree.leaves(final)] == [x.dtype for x in jax.tree.leaves(state)]
    ours_f32 = _trajectory(TXS["triangular"], params, grads)
    for k in params:
        f = np.asarray(traj[k][-1], np.float32)
        assert np.isfinite(f).all()
        np.testing.assert_allclose(f, ours_f32[k][-1], atol=0.1, err_msg=k)


BF16 = kron(
    LR,
    preconditioner_update_probability=1.0,
    balance_probability=0.0,
    preconditioner_dtype=jnp.bfloat16,
)


def test_compiles_once_and_state_layout_is_stable():
    tx = kron(1e-2)
    params = {k: jnp.ones(s) for k, s in SHAPES.items()}
    step = jax.jit(tx.update)
    state = tx.init(params)
    structure = jax.tree.structure(state)
    key0 = np.asarray(state[0].key)
    for _ in range(3):
        _, state = step(params, state, params)
    assert step._cache_size() == 1
    assert jax.tree.structure(state) == structure
    # the key: raw uint32 key data (not a typed key), advanced every step
    inner = state[0]
    assert inner.key.dtype == jnp.uint32 and inner.key.shape == (2,)
    assert not np.array_equal(inner.key, key0)
    # a schedule and a constant give the same layout
    const = kron(1e-2, preconditioner_update_probability=0.5).init(params)
    assert jax.tree.structure(const) == structure


def test_init_from_shape_dtype_structs():
    tx = scale_by_kron(batch_axes=0)
    shapes = jax.ShapeDtypeStruct((2, 3, 4), jnp.float32)
    state = tx.init(shapes)
    assert [q.shape for q in state.qs] == [(2, 3, 3), (2, 4, 4)]
    np.testing.assert_array_equal(state.qs[0][1], np.eye(3))


INVALID = [
    ({"b1": 1.0}, r"scale_by_kron: b1 must be in \[0.0, 1.0\)"),
    ({"preconditioner_update_probability": 1.5}, "preconditioner_update_probability must be in"),
    ({"memory_save_mode": "one_dag"}, "memory_save_mode must be one of .*did you mean 'one_diag'"),
    ({"preconditioner_lr": -1.0}, "preconditioner_lr must be >= 0"),
    ({"preconditioner_init_scale": 0.0}, "preconditioner_init_scale must be > 0"),
    ({"min_ndim_triangular": 1.5}, "min_ndim_triangular must be an integer"),
    ({"max_skew_triangular": 0.0}, "max_skew_triangular must be > 0"),
    ({"preconditioner_dtype": jnp.int8}, "preconditioner_dtype must be a floating-point"),
    ({"balance_probability": 2.0}, "balance_probability must be in"),
    ({"seed": "x"}, "seed must be an integer seed or a PRNG key"),
]  # fmt: skip


@pytest.mark.parametrize(("kwargs", "message"), INVALID)
def test_invalid_hyperparameters_raise_at_construction(kwargs, message):
    with pytest.raises(ValueError, match=message):
        kron(1e-3, **kwargs)


def test_bad_batch_axes_name_the_leaf_shape():
    with pytest.raises(ValueError, match=r"batch axis 2 is out of range for a leaf of shape"):
        scale_by_kron(batch_axes=2).init(jnp.ones(3))
