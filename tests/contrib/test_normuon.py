"""NorMuon against `pytorch_optimizer.NorMuon` (4.1.0) over 60 float32 steps, the paper's
"match_rms" scale where the reference's default differs, and its edge cases (zero, constant, huge
and tiny gradients, bf16 params, a bf16 second moment, batch axes, the AdamW fallback,
checkpoints, errors)."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradtx
from gradtx.contrib._muon import MuonDimensionNumbers as MDN
from gradtx.contrib._normuon import ScaleByNormuonState, normuon, scale_by_normuon

from .torch_reference import STEPS, max_diff, torch_trajectory

torch = pytest.importorskip("torch")
pytorch_optimizer = pytest.importorskip("pytorch_optimizer")
normuon_module = pytest.importorskip("pytorch_optimizer.optimizer.muon.normuon")
matrix_module = pytest.importorskip("pytorch_optimizer.optimizer.utils.matrix")

LR, ADAM_LR = 0.02, 3e-3
# A square-ish, a wide (fan_out > fan_in: Muon's width scaling is sqrt(10/4)) and a bias leaf.
SHAPES = {"w": (8, 6), "t": (4, 10), "b": (6,)}


def _problem(seed: int = 0, scale: float = 1.0):
    """Params and a gradient sequence whose scale varies per step (distinct spectra each step)."""
    rng = np.random.default_rng(seed)
    params = {k: rng.normal(size=s).astype(np.float32) for k, s in SHAPES.items()}
    step_scale = np.exp(rng.normal(size=STEPS)).astype(np.float32)
    grads = {
        k: (
            scale * step_scale.reshape((-1,) + (1,) * len(s)) * rng.normal(size=(STEPS, *s))
        ).astype(np.float32)
        for k, s in SHAPES.items()
    }
    return params, grads


@pytest.fixture
def float32_newton_schulz(monkeypatch):
    """The reference runs its Newton-Schulz iterations in bfloat16 (a 1e-2 difference by
    itself); compared with ours in float32, as the paper's rule is."""
    monkeypatch.setattr(
        normuon_module,
        "zero_power_via_newton_schulz_5",
        functools.partial(matrix_module.zero_power_via_newton_schulz_5, dtype=torch.float32),
    )


def _torch_layout(tree):
    """Ours are (fan_in, fan_out) = (in, out) matrices, torch's weights (out, in)."""
    return {k: (np.swapaxes(v, -1, -2).copy() if k != "b" else v) for k, v in tree.items()}


def _reference(params, grads, *, update_scale, wd, nesterov=True, adjusted=False):
    def make(tensors):
        w, t, b = tensors
        return pytorch_optimizer.NorMuon(
            [
                {"params": [w, t], "use_muon": True, "weight_decay": wd},
                {"params": [b], "use_muon": False, "lr": ADAM_LR, "weight_decay": 0.01},
            ],
            lr=LR,
            nesterov=nesterov,
            update_scale=update_scale,
            use_adjusted_lr=adjusted,
            foreach=False,
        )

    return _torch_layout(torch_trajectory(make, _torch_layout(params), _torch_layout(grads)))


REFERENCE = [
    ("preserve_norm", 0.1, True, True),  # the authors' code, Moonlight's adjusted step
    ("match_rms", 0.1, False, False),  # the paper's Algorithm 1 (no Nesterov)
]


@functools.cache
def _alias(update_scale, wd, nesterov, adjusted):
    return normuon(
        LR,
        eps=1e-10,  # the reference's eps and adamw_eps
        weight_decay=wd,
        nesterov=nesterov,
        update_scale=update_scale,
        consistent_rms=0.2 if adjusted else None,
        adam_learning_rate=ADAM_LR,
        adam_weight_decay=0.01,
    )


@functools.cache
def _trajectory_runner(tx):
    """The params after each step, one compiled scan per transformation (and dtype): the
    tests below reuse the reference tests' programs."""

    @jax.jit
    def run(params, grads):
        def body(carry, g):
            p, s = carry
            u, s = tx.update(g, s, p)
            p = gradtx.apply_updates(p, u)
            return (p, s), p

        return jax.lax.scan(body, (params, tx.init(params)), grads)[1]

    return run


def _trajectory(tx, params, grads):
    return jax.tree.map(np.asarray, _trajectory_runner(tx)(params, grads))


# Tolerance 2e-5 absolute on params of size ~1 after 60 steps (measured <= 5e-6): float32
# rounding of the Newton-Schulz matmuls (another summation order), torch's decay factor
# 1 - lr * lambda rounded once per step, and eps placed in the Newton-Schulz normalisation
# (ours: ||X|| + eps after dividing X by its peak; the reference's max(||X||, 1e-7)).
@pytest.mark.across_versions
@pytest.mark.parametrize(("update_scale", "wd", "nesterov", "adjusted"), REFERENCE)
def test_matches_pytorch_optimizer(float32_newton_schulz, update_scale, wd, nesterov, adjusted):
    params, grads = _problem()
    ours = _trajectory(_alias(update_scale, wd, nesterov, adjusted), params, grads)
    ref = _reference(params, grads, update_scale=update_scale, wd=wd, nesterov=nesterov,
                     adjusted=adjusted)  # fmt: skip
    assert max_diff(ours, ref) < 2e-5, max_diff(ours, ref)
    assert np.abs(ours["t"][-1] - params["t"]).max() > 0.05  # it moved


# -- the paper's scale where the reference's default differs -------------------------------------


@functools.cache
def _runner(tx):
    """One compiled scan of a transformation's updates (reused for every sequence of a shape)."""

    @jax.jit
    def run(grads):
        def body(s, g):
            u, s = tx.update(g, s)
            return s, (u, s.nu)

        return jax.lax.scan(body, tx.init(jax.tree.map(lambda x: x[0], grads)), grads)

    return run


def _updates(tx, grads, *, nus=False):
    state, (updates, nu) = _runner(tx)(grads)
    updates = jax.tree.map(np.asarray, updates)
    return (state, updates, jax.tree.map(np.asarray, nu)) if nus else (state, updates)


MATRICES = {k: s for k, s in SHAPES.items() if len(s) == 2}
DEFAULT = scale_by_normuon()
PRESERVE = scale_by_normuon(update_scale="preserve_norm", eps=0.0)


def _matrix_grads(seed=1, scale=1.0):
    _, grads = _problem(seed, scale)
    return {k: grads[k] for k in MATRICES}


def test_default_scale_is_the_papers_rms_and_not_the_references():
    """Algorithm 1 of the paper sets the step to 0.2 sqrt(mn) / ||O_hat||_F: every update has
    RMS 0.2. pytorch_optimizer's default ("preserve_norm", the authors' code) keeps ||O||_F
    instead, about sqrt(min(m, n)): RMS 1 / sqrt(max(m, n)), not 0.2."""
    grads = _matrix_grads()
    _, ours = _updates(DEFAULT, grads)
    _, preserved = _updates(PRESERVE, grads)
    for k in MATRICES:
        rms = np.sqrt(np.mean(np.square(ours[k]), axis=(1, 2)))
        np.testing.assert_allclose(rms, 0.2, rtol=1e-5, err_msg=k)
        rms_ref = np.sqrt(np.mean(np.square(preserved[k]), axis=(1, 2)))
        assert np.all(np.abs(rms_ref - 0.2) > 0.05), (k, rms_ref)
        # the same direction in both
        cos = np.sum(ours[k] * preserved[k], axis=(1, 2)) / (
            np.linalg.norm(ours[k], axis=(1, 2)) * np.linalg.norm(preserved[k], axis=(1, 2))
        )
        np.testing.assert_allclose(cos, 1.0, rtol=1e-5)


def test_rows_are_normalised_per_output_neuron():
    """A first step: v = (1 - b2) mean_i O_ij^2, so every output column of O / sqrt(v) has the
    same RMS, 1 / sqrt(1 - b2); the final rescale keeps that equality."""
    state, updates = _updates(DEFAULT, _matrix_grads())
    for k, (_, fan_out) in MATRICES.items():
        col_rms = np.sqrt(np.mean(np.square(updates[k][0]), axis=0))
        np.testing.assert_allclose(col_rms, col_rms.mean(), rtol=1e-4)
        assert state.nu[k].shape == (fan_out,) and state.nu[k].dtype == jnp.float32


# -- edge cases ---------------------------------------------------------------------------------


def test_zero_gradients_give_zero_updates():
    zeros = {k: np.zeros((STEPS, *s), np.float32) for k, s in MATRICES.items()}
    for tx in (DEFAULT, PRESERVE):  # PRESERVE has eps = 0
        state, updates = _updates(tx, zeros)
        assert all((u == 0).all() for u in jax.tree.leaves(updates))
        assert all((np.asarray(x) == 0).all() for x in jax.tree.leaves((state.mu, state.nu)))


def test_constant_gradients_give_constant_updates():
    """G_t = G: the (Nesterov) momentum is (1 - beta^(t+1)) G, one direction, so O_t is the same
    every step, v_t = (1 - b2^t) mean_i O_ij^2 and the rescaled update does not change."""
    rng = np.random.default_rng(3)
    grads = {k: np.broadcast_to(rng.normal(size=s), (STEPS, *s)).astype(np.float32)
             for k, s in MATRICES.items()}  # fmt: skip
    _, updates, nus = _updates(DEFAULT, grads, nus=True)
    t = np.arange(1, STEPS + 1).reshape(-1, 1)
    for k in MATRICES:
        np.testing.assert_allclose(updates[k], np.broadcast_to(updates[k][0], updates[k].shape),
                                   rtol=1e-4, atol=1e-6)  # fmt: skip
        np.testing.assert_allclose(nus[k], nus[k][0] * (1 - 0.95**t) / (1 - 0.95), rtol=1e-4)


@pytest.mark.parametrize("scale", [1e-30, 1e30], ids=["tiny", "huge"])
def test_huge_and_tiny_gradients_give_the_unit_updates(scale):
    """The update is scale-invariant: a 1e30 gradient (whose square overflows float32) and a
    1e-30 one (below eps) give the updates of the unit-scale gradient."""
    grads = _matrix_grads(seed=4)
    _, unit = _updates(DEFAULT, grads)
    _, scaled = _updates(DEFAULT, jax.tree.map(lambda g: (g * scale).astype(np.float32), grads))
    for k in MATRICES:
        assert np.isfinite(scaled[k]).all()
        np.testing.assert_allclose(scaled[k], unit[k], rtol=1e-4, atol=1e-5, err_msg=k)


def test_bf16_params_keep_their_dtype_and_follow_float32():
    params, grads = _problem()
    tx = _alias(*REFERENCE[-1])
    low = jax.tree.map(lambda x: jnp.asarray(x, jnp.bfloat16), (params, grads))
    state = tx.init(low[0])
    inner = state.inner_states["normuon"][0]
    assert isinstance(inner, ScaleByNormuonState)
    assert inner.mu["w"].dtype == jnp.bfloat16 and inner.nu["w"].dtype == jnp.float32
    g0 = jax.tree.map(lambda x: x[0], low[1])
    updates, new_state = jax.eval_shape(tx.update, g0, state, low[0])
    assert all(u.dtype == jnp.bfloat16 for u in jax.tree.leaves(updates))
    assert [x.dtype for x in jax.tree.leaves(new_state)] == [
        x.dtype for x in jax.tree.leaves(state)
    ]
    ours_bf16 = _trajectory(tx, *low)
    ours_f32 = _trajectory(tx, params, grads)
    for k in SHAPES:
        f = np.asarray(ours_bf16[k][-1], np.float32)
        assert np.isfinite(f).all()
        # ~6 bf16 ulps at |p| ~ 2 after 60 steps of lr 0.02
        np.testing.assert_allclose(f, ours_f32[k][-1], atol=0.1, err_msg=k)


LOW_NU = scale_by_normuon(preconditioner_dtype=jnp.bfloat16)


def test_bfloat16_preconditioner_is_kept_and_close_to_float32():
    grads = _matrix_grads(seed=6)
    state, low = _updates(LOW_NU, grads)
    assert all(v.dtype == jnp.bfloat16 for v in jax.tree.leaves(state.nu))
    assert all(m.dtype == jnp.float32 for m in jax.tree.leaves(state.mu))
    _, high = _updates(DEFAULT, grads)
    for k in MATRICES:
        # bf16 keeps 8 bits of v: sqrt(v) to ~0.2%, the update to about as much
        np.testing.assert_allclose(low[k], high[k], rtol=0, atol=0.01 * np.abs(high[k]).max())
        assert np.abs(low[k] - high[k]).max() > 0  # it is rounded


def test_batch_axes_equal_per_slice_runs():
    """A (3, 8, 6) leaf of stacked layers (batch axis first) and a (2, 3, 2, 10) conv-like leaf
    (reduction axes 0 and 2, output 3, batch axis 1 in the middle) are three independent
    matrices each: every slice's updates and neurons' statistics are its own run's."""
    rng = np.random.default_rng(7)
    w = [(np.exp(rng.normal()) * rng.normal(size=(STEPS, 8, 6))).astype(np.float32)
         for _ in range(3)]  # fmt: skip
    t = [(np.exp(rng.normal()) * rng.normal(size=(STEPS, 2, 2, 10))).astype(np.float32)
         for _ in range(3)]  # fmt: skip
    stacked = {"w": np.stack(w, axis=1), "t": np.stack(t, axis=2)}
    dims = {"w": MDN(reduction_axis=1, output_axis=2), "t": MDN((0, 2), 3)}
    state, updates = _updates(scale_by_normuon(weight_dimension_numbers=dims), stacked)
    assert state.nu["w"].shape == (3, 6) and state.nu["t"].shape == (3, 10)
    assert state.mu["t"].shape == (2, 3, 2, 10)
    # float32 noise only: the batched and per-slice Newton-Schulz products round differently
    # (by the CPU's vector width: 5e-6 on AVX2 at updates of ~0.3); a wrong slice is off by O(1)
    for i in range(3):
        s_i, u_i = _updates(DEFAULT, {"w": w[i], "t": t[i].reshape(STEPS, 4, 10)})
        np.testing.assert_allclose(updates["w"][:, i], u_i["w"], rtol=1e-5, atol=2e-5)
        np.testing.assert_allclose(updates["t"][:, :, i].reshape(STEPS, 4, 10), u_i["t"],
                                   rtol=1e-5, atol=2e-5)  # fmt: skip
        for k in MATRICES:
            np.testing.assert_allclose(state.nu[k][i], s_i.nu[k], rtol=1e-5, atol=1e-9)


def _numpy_adamw(p, grads, lr, b1, b2, eps, wd):
    """AdamW (Loshchilov & Hutter; decay scaled by the learning rate), float64."""
    p, m, v, out = p.astype(np.float64), 0.0, 0.0, []
    for t, g in enumerate(grads.astype(np.float64), start=1):
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        p = p - lr * ((m / (1 - b1**t)) / (np.sqrt(v / (1 - b2**t)) + eps) + wd * p)
        out.append(p)
    return np.stack(out)


@pytest.mark.parametrize("config", REFERENCE, ids=["preserve_norm", "match_rms"])
def test_non_matrices_go_to_adamw(config):
    """The 1-D rule: the (6,) bias gets plain AdamW with the reference's fallback b2 = 0.95,
    whatever the matrices do (a NumPy transcription, an independent reference)."""
    params, grads = _problem()
    ours = _trajectory(_alias(*config), params, grads)
    expected = _numpy_adamw(params["b"], grads["b"], ADAM_LR, 0.9, 0.95, 1e-10, 0.01)
    np.testing.assert_allclose(ours["b"], expected, rtol=0, atol=2e-6)


def test_dimension_numbers_choose_the_matrices():
    """With dimension numbers a None leaf goes to AdamW, a 3-D leaf with them to NorMuon."""
    params = {"w": jnp.ones((2, 4, 3)), "m": jnp.ones((4, 3))}
    dims = {"w": MDN(1, 2), "m": None}
    state = normuon(LR, weight_dimension_numbers=dims).init(params)
    inner = state.inner_states["normuon"][0]
    assert inner.nu["w"].shape == (2, 3)
    assert jax.tree.leaves(state.inner_states["adam"])[1].shape == (4, 3)


def test_checkpoint_round_trip_is_bit_exact(tmp_path):
    """A trained state (float32 momentum, bf16 second moment) saved and loaded is bit-for-bit
    the same (the update is a pure function of it)."""
    grads = _matrix_grads(seed=6)
    state, _ = _updates(LOW_NU, grads)
    path = gradtx.checkpoint.save(str(tmp_path / "normuon.safetensors"), state)
    loaded = gradtx.checkpoint.load(path, LOW_NU.init(jax.tree.map(lambda g: g[0], grads)))
    assert jax.tree.structure(loaded) == jax.tree.structure(state)
    for a, b in zip(jax.tree.leaves(loaded), jax.tree.leaves(state), strict=True):
        a, b = np.asarray(a), np.asarray(b)
        assert a.dtype == b.dtype and a.tobytes() == b.tobytes()


def test_init_from_shapes_matches_init_from_arrays():
    params, _ = _problem()
    tx = normuon(LR)
    shapes = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), params)
    a, b = tx.init(params), tx.init(shapes)
    assert jax.tree.structure(a) == jax.tree.structure(b)
    assert [(x.shape, x.dtype) for x in jax.tree.leaves(a)] == [
        (x.shape, x.dtype) for x in jax.tree.leaves(b)
    ]


INVALID = [
    (lambda: normuon(LR, update_scale="match-rms"), "update_scale must be one of .*did you mean"),
    (lambda: normuon(LR, b2=1.0), r"normuon: scale_by_normuon: b2 must be in \[0.0, 1.0\)"),
    (lambda: normuon(LR, beta=-0.1), "beta must be in"),
    (lambda: normuon(LR, ns_steps=0), "ns_steps must be >= 1"),
    (lambda: normuon(LR, ns_coeffs="dino"), "ns_coeffs must be one of .*did you mean 'dion'"),
    (lambda: normuon(LR, weight_decay=-1.0), "normuon: weight_decay must be >= 0"),
    (lambda: normuon(LR, adam_weight_decay=-1.0), "normuon: adam_weight_decay must be >= 0"),
    (lambda: scale_by_normuon(preconditioner_dtype=jnp.int8), "preconditioner_dtype must be"),
    (lambda: scale_by_normuon(target_rms=-0.2), "target_rms must be >= 0"),
]  # fmt: skip


@pytest.mark.parametrize(("make", "message"), INVALID)
def test_invalid_hyperparameters_raise_at_construction(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_a_3d_leaf_without_dimension_numbers_names_the_fix():
    tx = scale_by_normuon()
    with pytest.raises(ValueError, match="not a matrix; give it MuonDimensionNumbers"):
        tx.init({"w": jnp.ones((2, 3, 4))})
