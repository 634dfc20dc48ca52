"""Scion against `pytorch_optimizer.SCION` (4.1.0) over 60 float32 steps for each norm, Gluon's
layer-wise step sizes against a NumPy transcription, and the edge cases (zero, huge and tiny
gradients, bf16 params, batch axes, the constrained ball, the AdamW fallback, checkpoints,
errors)."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradtx
from gradtx.contrib import infer_matrix_axes
from gradtx.contrib._muon import MuonDimensionNumbers as MDN
from gradtx.contrib._scion import ScaleByScionState, scale_by_scion, scion

from .torch_reference import STEPS, max_diff, torch_trajectory

torch = pytest.importorskip("torch")
pytorch_optimizer = pytest.importorskip("pytorch_optimizer")
scion_module = pytest.importorskip("pytorch_optimizer.optimizer.scion")
matrix_module = pytest.importorskip("pytorch_optimizer.optimizer.utils.matrix")
LMONorm = scion_module.LMONorm

LR = 0.01
# (in, out) matrices: a tall and a wide one, an HWIO conv kernel, a bias.
SHAPES = {"w": (8, 6), "t": (4, 10), "k": (3, 3, 2, 5), "b": (6,)}
CONV = MDN(reduction_axis=(0, 1, 2), output_axis=3)
DIMS = {"w": MDN(), "t": MDN(), "k": CONV, "b": None}


def _problem(seed: int = 0, scale: float = 1.0):
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
    """The reference runs Newton-Schulz in bfloat16 (a 1e-2 difference by itself); compared
    with ours in float32."""
    monkeypatch.setattr(
        scion_module,
        "zero_power_via_newton_schulz_5",
        functools.partial(matrix_module.zero_power_via_newton_schulz_5, dtype=torch.float32),
    )


def _to_torch(x, key):
    """Ours: (in, out) matrices and HWIO kernels; torch's: (out, in) and OIHW."""
    if key == "k":
        return np.moveaxis(x, (-1, -2), (-4, -3)).copy()
    if key == "b":
        return x
    return np.swapaxes(x, -1, -2).copy()


def _from_torch(x, key):
    if key == "k":
        return np.moveaxis(x, (-4, -3), (-1, -2)).copy()
    if key == "b":
        return x
    return np.swapaxes(x, -1, -2).copy()


@functools.cache
def _runner(tx):
    """The params after each step, one compiled scan per transformation (and dtype)."""

    @jax.jit
    def run(params, grads):
        def body(carry, g):
            p, s = carry
            u, s = tx.update(g, s, p)
            p = gradtx.apply_updates(p, u)
            return (p, s), (p, u)

        return jax.lax.scan(body, (params, tx.init(params)), grads)

    return run


def _trajectory(tx, params, grads):
    (_, state), (ps, us) = _runner(tx)(params, grads)
    return jax.tree.map(np.asarray, ps), jax.tree.map(np.asarray, us), state


# norm for w and t, its LMONorm; "k" gets spectral_conv, "b" bias_rms, each a group of its own.
REFERENCE = [
    ("spectral", LMONorm.SPECTRAL, False, 0.1, 3.0),
    ("sign", LMONorm.SIGN, True, 0.0, 3.0),
    ("col", LMONorm.COL, False, 0.0, 0.5),
    ("row", LMONorm.ROW, True, 0.0, 2.0),
]


@functools.cache
def _alias(norm, constraint, wd, radius, beta=0.9):
    norms = {"w": norm, "t": norm, "k": "spectral_conv", "b": "auto"}
    radii = {"w": radius, "t": radius, "k": 2.0, "b": 0.5}
    return scion(LR, beta, radii, norm=norms, constraint=constraint, weight_decay=wd,
                 weight_dimension_numbers=DIMS)  # fmt: skip


def _reference(params, grads, lmo, constraint, wd, radius, momentum=0.1):
    def make(tensors):
        w, t, k, b = tensors
        common = {"constraint": constraint, "weight_decay": wd}
        return pytorch_optimizer.SCION(
            [
                {"params": [w, t], "norm_type": lmo, "scale": radius, **common},
                {"params": [k], "norm_type": LMONorm.SPECTRALCONV, "scale": 2.0, **common},
                {"params": [b], "norm_type": LMONorm.BIAS, "scale": 0.5, **common},
            ],
            lr=LR,
            momentum=momentum,
            foreach=False,
        )

    tp = {k: _to_torch(v, k) for k, v in params.items()}
    tg = {k: _to_torch(v, k) for k, v in grads.items()}
    out = torch_trajectory(make, tp, tg)
    return {k: _from_torch(v, k) for k, v in out.items()}


# Tolerance 2e-5 absolute on params of size ~1 after 60 steps (measured <= 3e-6): float32
# rounding of the Newton-Schulz matmuls (another summation order), torch's decay factor
# 1 - lr (lambda) rounded once per step, and eps acting after dividing by the peak magnitude.
@pytest.mark.across_versions
@pytest.mark.parametrize(("norm", "lmo", "constraint", "wd", "radius"), REFERENCE)
def test_matches_pytorch_optimizer(float32_newton_schulz, norm, lmo, constraint, wd, radius):
    params, grads = _problem()
    ours, _, _ = _trajectory(_alias(norm, constraint, wd, radius), params, grads)
    ref = _reference(params, grads, lmo, constraint, wd, radius)
    assert max_diff(ours, ref) < 2e-5, max_diff(ours, ref)
    assert min(np.abs(ours[k][-1] - params[k]).max() for k in SHAPES) > 0.05  # it moved


def test_defaults_match_pytorch_optimizer(float32_newton_schulz):
    """Default arguments ("auto": spectral for matrices, bias RMS for vectors; momentum 0.1 =
    1 - beta; radius 1) on the (8, 6) and (6,) leaves."""
    params, grads = _problem(seed=1)
    params = {k: params[k] for k in ("w", "b")}
    grads = {k: grads[k] for k in ("w", "b")}
    ours, _, _ = _trajectory(DEFAULT_ALIAS, params, grads)
    tp = {k: _to_torch(v, k) for k, v in params.items()}
    tg = {k: _to_torch(v, k) for k, v in grads.items()}
    ref = torch_trajectory(lambda ts: pytorch_optimizer.SCION(ts, lr=LR, foreach=False), tp, tg)
    ref = {k: _from_torch(v, k) for k, v in ref.items()}
    assert max_diff(ours, ref) < 2e-5, max_diff(ours, ref)


DEFAULT_ALIAS = scion(LR)


# -- Gluon's layer-wise step sizes, per-layer radii ----------------------------------------------


def _numpy_col_gluon(grads, beta, radius, l0, l1, eps=1e-8):
    """Scion's "col" LMO at the momentum with Gluon's step t = <d, s> / (L0 + L1 <d, s>)."""
    d, out = np.zeros(grads.shape[1:]), []
    fan_out = grads.shape[-1]
    for g in grads.astype(np.float64):
        d = beta * d + (1 - beta) * g
        peak = np.abs(d).max()
        y = d / peak
        s = y / (np.linalg.norm(y, axis=-1, keepdims=True) / np.sqrt(fan_out) + eps)
        dual = np.sum(d * s)
        out.append(radius * dual / (l0 + l1 * dual) * s)
    return np.stack(out)


def test_gluon_step_sizes_match_the_rule():
    """Per-layer L0, L1 and radii (trees) with the "col" norm, against NumPy."""
    _, grads = _problem(seed=2)
    grads = {k: grads[k] for k in ("w", "t")}
    l0, l1, radius = {"w": 0.5, "t": 2.0}, {"w": 1.0, "t": 0.1}, {"w": 1.0, "t": 3.0}
    tx = scale_by_scion(0.8, radius, norm="col", step_size="gluon", gluon_l0=l0, gluon_l1=l1)
    _, _, us = _trajectory_updates(tx, grads)
    for k in grads:
        expected = _numpy_col_gluon(grads[k], 0.8, radius[k], l0[k], l1[k])
        # float32 against float64: the momentum's rounding, 1e-6 of the largest update
        atol = 1e-6 * np.abs(expected).max()
        np.testing.assert_allclose(us[k], expected, rtol=2e-5, atol=atol, err_msg=k)


@functools.cache
def _update_runner(tx):
    @jax.jit
    def run(grads):
        def body(s, g):
            u, s = tx.update(g, s)
            return s, u

        return jax.lax.scan(body, tx.init(jax.tree.map(lambda x: x[0], grads)), grads)

    return run


def _trajectory_updates(tx, grads):
    state, us = _update_runner(tx)(grads)
    return state, None, jax.tree.map(np.asarray, us)


def test_gluon_spectral_step_is_the_dual_norm_over_l0():
    """With L1 = 0 the Gluon step of a spectral layer is exactly <D, s> / L0 times Scion's
    direction s ~ sqrt(fan_out / fan_in) U V^T, and <D, s> is about sqrt(fan_out / fan_in) times
    the nuclear norm (Newton-Schulz is approximate: its singular values lie in about [0.7, 1.2],
    so the dual it gives is ~20% low for a random matrix)."""
    _, grads = _problem(seed=3)
    grads = {"w": grads["w"][:1]}
    constant = scale_by_scion(0.0, norm="spectral")
    gluon = scale_by_scion(0.0, norm="spectral", step_size="gluon", gluon_l0=4.0)
    _, _, s = _trajectory_updates(constant, grads)
    _, _, u = _trajectory_updates(gluon, grads)
    g, s = grads["w"][0].astype(np.float64), s["w"][0]
    dual = np.sum(g * s)
    np.testing.assert_allclose(u["w"][0], dual / 4.0 * s, rtol=1e-5, atol=1e-7)
    nuclear = np.linalg.svd(g, compute_uv=False).sum()
    np.testing.assert_allclose(dual, np.sqrt(6 / 8) * nuclear, rtol=0.3)  # measured 0.23


# -- edge cases ---------------------------------------------------------------------------------

ALL_NORMS = {"w": "spectral", "t": "row", "k": "spectral_conv", "b": "bias_rms"}
PRIMITIVE = scale_by_scion(norm=ALL_NORMS, weight_dimension_numbers=DIMS)
PRIMITIVE_B = scale_by_scion(
    norm={"w": "sign", "t": "col", "k": "none", "b": "sign"}, eps=0.0,
    weight_dimension_numbers=DIMS, step_size="gluon",
)  # fmt: skip


def test_zero_gradients_give_zero_updates():
    zeros = {k: np.zeros((STEPS, *s), np.float32) for k, s in SHAPES.items()}
    for tx in (PRIMITIVE, PRIMITIVE_B):
        state, _, us = _trajectory_updates(tx, zeros)
        assert all((u == 0).all() for u in jax.tree.leaves(us))
        assert all((np.asarray(x) == 0).all() for x in jax.tree.leaves(state.mu))


@pytest.mark.parametrize("scale", [1e-30, 1e30], ids=["tiny", "huge"])
def test_huge_and_tiny_gradients_give_the_unit_updates(scale):
    """Every LMO direction is scale-invariant: a 1e30 momentum (its square overflows float32)
    and a 1e-30 one (below eps) give the unit-scale updates."""
    _, grads = _problem(seed=4)
    _, _, unit = _trajectory_updates(PRIMITIVE, grads)
    scaled = jax.tree.map(lambda g: (g * scale).astype(np.float32), grads)
    _, _, got = _trajectory_updates(PRIMITIVE, scaled)
    for k in SHAPES:
        assert np.isfinite(got[k]).all()
        np.testing.assert_allclose(got[k], unit[k], rtol=1e-4, atol=1e-5, err_msg=k)


def test_constant_gradients_give_constant_updates():
    """g_t = g: the momentum (1 - beta^t) g has one direction, so every LMO is the same."""
    rng = np.random.default_rng(5)
    grads = {k: np.broadcast_to(rng.normal(size=s), (STEPS, *s)).astype(np.float32)
             for k, s in SHAPES.items()}  # fmt: skip
    _, _, us = _trajectory_updates(PRIMITIVE, grads)
    for k in SHAPES:
        np.testing.assert_allclose(us[k], np.broadcast_to(us[k][0], us[k].shape), rtol=1e-4,
                                   atol=1e-6, err_msg=k)  # fmt: skip


def test_constraint_keeps_the_params_in_the_ball():
    """Conditional gradient: W_{t+1} = (1 - lr) W_t - lr rho s_t stays in the radius-rho ball;
    for "sign" that is max |W| <= rho / fan_in (the reference's trajectory, above, agrees)."""
    params, grads = _problem(seed=6)
    params = {k: np.zeros_like(v) for k, v in params.items()}
    tx = _alias("sign", True, 0.0, 3.0)
    ps, _, _ = _trajectory(tx, params, grads)
    for k, fan_in in (("w", 8), ("t", 4)):
        assert np.abs(ps[k]).max() <= 3.0 / fan_in * (1 + 1e-6)
        assert np.abs(ps[k][-1]).max() > 0.25 * 3.0 / fan_in  # it moved towards the boundary


def test_bf16_params_keep_their_dtype_and_follow_float32():
    params, grads = _problem(seed=7)
    params = {k: params[k] for k in ("w", "b")}
    grads = {k: grads[k] for k in ("w", "b")}
    low = jax.tree.map(lambda x: jnp.asarray(x, jnp.bfloat16), (params, grads))
    state = DEFAULT_ALIAS.init(low[0])
    inner = state.inner_states["scion"][0]
    assert isinstance(inner, ScaleByScionState) and inner.mu["w"].dtype == jnp.bfloat16
    g0 = jax.tree.map(lambda x: x[0], low[1])
    updates, new_state = jax.eval_shape(DEFAULT_ALIAS.update, g0, state, low[0])
    assert all(u.dtype == jnp.bfloat16 for u in jax.tree.leaves(updates))
    assert [x.dtype for x in jax.tree.leaves(new_state)] == [
        x.dtype for x in jax.tree.leaves(state)
    ]
    ours_bf16, _, _ = _trajectory(DEFAULT_ALIAS, *low)
    ours_f32, _, _ = _trajectory(DEFAULT_ALIAS, params, grads)
    for k in params:
        f = np.asarray(ours_bf16[k][-1], np.float32)
        assert np.isfinite(f).all()
        # ~6 bf16 ulps at |p| ~ 2.5 after 60 steps
        np.testing.assert_allclose(f, ours_f32[k][-1], atol=0.1, err_msg=k)


def test_batch_axes_equal_per_slice_runs():
    """A (8, 3, 6) leaf with its batch axis in the middle (experts) and a (3, 4, 10) one with it
    first are three independent layers each, for every norm (Gluon's step per slice too)."""
    rng = np.random.default_rng(8)
    w = [(np.exp(rng.normal()) * rng.normal(size=(STEPS, 8, 6))).astype(np.float32)
         for _ in range(3)]  # fmt: skip
    t = [(np.exp(rng.normal()) * rng.normal(size=(STEPS, 4, 10))).astype(np.float32)
         for _ in range(3)]  # fmt: skip
    stacked = {"w": np.stack(w, axis=2), "t": np.stack(t, axis=1)}
    dims = {"w": MDN(0, 2), "t": MDN(1, 2)}
    for norms in ({"w": "spectral", "t": "row"}, {"w": "sign", "t": "col"}):
        tx = scale_by_scion(norm=norms, weight_dimension_numbers=dims, step_size="gluon")
        flat = scale_by_scion(norm=norms, step_size="gluon")
        _, _, us = _trajectory_updates(tx, stacked)
        for i in range(3):
            _, _, u_i = _trajectory_updates(flat, {"w": w[i], "t": t[i]})
            np.testing.assert_allclose(us["w"][:, :, i], u_i["w"], rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(us["t"][:, i], u_i["t"], rtol=1e-5, atol=1e-6)


def _numpy_adamw(p, grads, lr, b1, b2, eps, wd):
    p, m, v, out = p.astype(np.float64), 0.0, 0.0, []
    for t, g in enumerate(grads.astype(np.float64), start=1):
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        p = p - lr * ((m / (1 - b1**t)) / (np.sqrt(v / (1 - b2**t)) + eps) + wd * p)
        out.append(p)
    return np.stack(out)


def test_adamw_norm_sends_a_leaf_to_adamw():
    """The fallback: a leaf whose norm is "adamw" gets plain AdamW (NumPy transcription)."""
    params, grads = _problem(seed=9)
    params = {k: params[k] for k in ("w", "b")}
    grads = {k: grads[k] for k in ("w", "b")}
    tx = scion(LR, norm={"w": "spectral", "b": "adamw"}, adam_weight_decay=0.1, adam_b2=0.95)
    ours, _, state = _trajectory(tx, params, grads)
    expected = _numpy_adamw(params["b"], grads["b"], LR, 0.9, 0.95, 1e-8, 0.1)
    np.testing.assert_allclose(ours["b"], expected, rtol=0, atol=2e-6)
    assert len(jax.tree.leaves(state.inner_states["scion"][0].mu)) == 1  # only "w"


def test_checkpoint_round_trip_is_bit_exact(tmp_path):
    zeros_like = {k: np.zeros(s, np.float32) for k, s in SHAPES.items()}
    _, grads = _problem(seed=10)
    state, _, _ = _trajectory_updates(PRIMITIVE, grads)
    path = gradtx.checkpoint.save(str(tmp_path / "scion.safetensors"), state)
    loaded = gradtx.checkpoint.load(path, PRIMITIVE.init(zeros_like))
    assert jax.tree.structure(loaded) == jax.tree.structure(state)
    for a, b in zip(jax.tree.leaves(loaded), jax.tree.leaves(state), strict=True):
        a, b = np.asarray(a), np.asarray(b)
        assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


INVALID = [
    (lambda: scion(LR, norm="spectal"), "norm must be one of .*did you mean 'spectral'"),
    (lambda: scion(LR, beta=1.0), r"beta must be in \[0.0, 1.0\)"),
    (lambda: scion(LR, radius=-1.0), "radius must be >= 0"),
    (lambda: scion(LR, radius={"w": -1.0}), "radius must be >= 0"),
    (lambda: scion(LR, constraint=True, weight_decay=0.1), "weight_decay must be 0 with constr"),
    (lambda: scion(LR, step_size="gluon", gluon_l0=0.0), "gluon_l0 and gluon_l1 are both 0"),
    (lambda: scion(LR, step_size="glu"), "step_size must be one of .*did you mean 'gluon'"),
    (lambda: scion(LR, weight_decay=-1.0), "scion: weight_decay must be >= 0"),
    (lambda: scion(LR, ns_steps=0), "ns_steps must be >= 1"),
    (lambda: scale_by_scion(norm="adamw"), "norm must be one of"),
]  # fmt: skip


@pytest.mark.parametrize(("make", "message"), INVALID)
def test_invalid_hyperparameters_raise_at_construction(make, message):
    with pytest.raises(ValueError, match=message):
        make()


@pytest.mark.parametrize(
    ("make", "prefix", "norm"),
    [
        (scale_by_scion, "scale_by_scion", "spectral"),
        (lambda: scion(LR, norm="col"), r"scion: .*scale_by_scion", "col"),
    ],
    ids=["primitive", "alias"],
)
def test_a_3d_leaf_without_dimension_numbers_names_scion_and_the_fix(make, prefix, norm):
    tx = make()
    g = {"w": jnp.ones((2, 3, 4))}
    message = (
        rf"^{prefix}: a parameter of shape \(2, 3, 4\) is not a matrix; give it "
        r"MuonDimensionNumbers \(weight_dimension_numbers.*\) or a norm that takes any shape "
        rf"instead of '{norm}' \('bias_rms' or 'none'; in `scion`, 'adamw'.*\)$"
    )
    with pytest.raises(ValueError, match=message):
        tx.update(g, tx.init(g), g)


def test_alias_refuses_an_unnamed_rank_3_leaf_and_routes_it_as_told():
    """With no dimension numbers, a (2, 3, 4) leaf whose names say nothing is an error naming it
    and the override; routed to the fallback it goes to AdamW; with dimension numbers it is a
    stack of two spectral layers."""
    params = {"w": jnp.ones((2, 3, 4)), "m": jnp.ones((3, 4)), "b": jnp.ones(4)}
    with pytest.raises(ValueError, match=r"'w' \(shape \(2, 3, 4\)\).*infer_matrix_axes"):
        scion(LR).init(params)
    state = scion(LR, weight_dimension_numbers=infer_matrix_axes({"w": None})).init(params)
    assert sorted(state.inner_states["scion"][0].mu) == ["b", "m", "w"]
    scion_leaves = jax.tree.leaves(state.inner_states["scion"][0].mu)
    assert [x.shape for x in scion_leaves] == [(4,), (3, 4)]
    dims = {"w": MDN(1, 2), "m": MDN(), "b": None}
    state = scion(LR, weight_dimension_numbers=dims).init(params)
    assert [x.shape for x in jax.tree.leaves(state.inner_states["scion"][0].mu)] == [
        (4,),
        (3, 4),
        (2, 3, 4),
    ]
