"""Fira against `pytorch_optimizer.Fira` (4.1.0) over 60 float32 steps (one SVD projection,
scale 1, where the paper and the reference agree), against a NumPy (float64) transcription of
the paper's rule given the projections (with refreshes, and scale != 1 where the reference
differs), the projection's subspace, and edge cases.

Tolerance: 1e-5 absolute on params of size ~1 after 60 float32 steps of lr 1e-2. The SVD's
signs may differ between torch and JAX; the update is invariant to them while P is fixed (the
reference comparison uses one projection for the whole run).

Second reference: the authors' package, fira 1.0.2 (`fira/fira_adamw.py` `AdamW`, imported
without its package __init__ by tests/contrib/author_packages.py), with its SVD
(`GradientProjector.get_orthogonal_matrix`) replaced by the projection gradtx computed at the
same step (the SVD's signs are arbitrary and would enter the low-rank moments once P is
refreshed), over 60 steps with refreshes every 7 or 10: the params, the norm-growth limiter's
stored norms, the steps of the SVDs; the scaled residual for alpha != 1, where the authors'
code subtracts alpha P P^T G and gradtx follows the paper (G - P P^T G); the weight decay
(after the step in the authors' code, AdamW's in gradtx); the limiter after a zero gradient
(the authors' stalls, gradtx's starts afresh). Tolerance against the authors' package: 2e-5
absolute on the params (size ~2) and 2e-5 relative on the norms, float32 on both sides with
the same projections (measured: 1.4e-6 and 5e-7)."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradtx
from gradtx.contrib._fira import ScaleByFiraState, fira, scale_by_fira
from gradtx.contrib._galore import GaLoreDimensionNumbers

from . import author_packages
from .common import low_rank_trajectory

torch = pytest.importorskip("torch")
pytorch_optimizer = pytest.importorskip("pytorch_optimizer")

STEPS = 60
LR = 1e-2
RANK = 3
SHAPES = {"w": (8, 6), "v": (4, 10), "b": (6,)}
B1, B2, EPS = 0.9, 0.999, 1e-6
AUTHORS_TOL = 2e-5  # against the authors' fira; see the module docstring


def _problem(seed: int = 0):
    rng = np.random.default_rng(seed)
    params = {k: rng.normal(size=s).astype(np.float32) for k, s in SHAPES.items()}
    scale = np.exp(0.5 * rng.normal(size=STEPS)).astype(np.float32)
    grads = {
        k: (scale.reshape((-1,) + (1,) * len(s)) * rng.normal(size=(STEPS, *s))).astype(np.float32)
        for k, s in SHAPES.items()
    }
    return params, grads


def _run(tx, params, grads):
    """Params and projections after each step (one compiled scan)."""
    return low_rank_trajectory(tx)(params, grads)


def _with_lr(tx):
    return gradtx.chain(tx, gradtx.scale_by_learning_rate(LR))


def _numpy_fira(params, grads, projs, *, scale=1.0, paper=True):
    """Fira's step (the authors' code, github.com/xichen-fy/Fira) given each step's P (d, r);
    paper=False subtracts scale * P P^T G as pytorch_optimizer does."""
    p = {k: v.astype(np.float64) for k, v in params.items()}
    m = {k: 0.0 for k in p}
    v = {k: 0.0 for k in p}
    prev = {}
    out = []
    for t in range(1, STEPS + 1):
        step = LR * np.sqrt(1 - B2**t) / (1 - B1**t)
        for k in p:
            g = grads[k][t - 1].astype(np.float64)
            if g.ndim != 2:
                m[k] = B1 * m[k] + (1 - B1) * g
                v[k] = B2 * v[k] + (1 - B2) * g * g
                p[k] = p[k] - step * m[k] / (np.sqrt(v[k]) + EPS)
                continue
            P = projs[k][t - 1].astype(np.float64)
            right = g.shape[0] >= g.shape[1]
            r = g @ P if right else P.T @ g
            back = (lambda x: x @ P.T) if right else (lambda x: P @ x)
            m[k] = B1 * m[k] + (1 - B1) * r
            v[k] = B2 * v[k] + (1 - B2) * r * r
            n = m[k] / (np.sqrt(v[k]) + EPS)
            ax = 1 if right else 0
            phi = np.linalg.norm(n, axis=ax, keepdims=True) / (
                np.linalg.norm(r, axis=ax, keepdims=True) + 1e-8
            )
            s = (g - (1.0 if paper else scale) * back(r)) * phi
            norm = np.linalg.norm(s)
            if k in prev:
                lim = max(norm / (prev[k] + 1e-8), 1.01) / 1.01
                s, norm = s / lim, norm / lim
            prev[k] = norm
            p[k] = p[k] - step * (scale * back(n) + s)
        out.append({k: x.copy() for k, x in p.items()})
    return {k: np.stack([o[k] for o in out]) for k in p}


def _max_diff(a, b):
    return max(float(np.max(np.abs(a[k] - b[k]))) for k in a)


def _torch_fira(params, grads, scale):
    tensors = {k: torch.tensor(v, requires_grad=True) for k, v in params.items()}
    opt = pytorch_optimizer.Fira(
        [{"params": list(tensors.values()), "rank": RANK, "update_proj_gap": 1000,
          "scale": scale, "projection_type": "std"}],
        lr=LR, betas=(B1, B2), eps=EPS, foreach=False,
    )  # fmt: skip
    out = {k: [] for k in params}
    for t in range(STEPS):
        for k, p in tensors.items():
            p.grad = torch.tensor(grads[k][t])
        opt.step()
        for k, p in tensors.items():
            out[k].append(p.detach().numpy().copy())
    return {k: np.stack(v) for k, v in out.items()}


@pytest.fixture(scope="module")
def problem():
    return _problem()


@pytest.mark.across_versions
def test_matches_pytorch_optimizer(problem):
    params, grads = problem
    ours, projs = _run(_with_lr(scale_by_fira(RANK, 1000)), params, grads)
    ref = _torch_fira(params, grads, 1.0)
    assert _max_diff(ours, ref) < 1e-5
    assert _max_diff(ref, {k: v[None] for k, v in params.items()}) > 0.1
    # the NumPy transcription agrees with the reference too
    assert _max_diff(_numpy_fira(params, grads, projs), ref) < 1e-5


@pytest.mark.parametrize(("scale", "gap"), [(0.5, 7), (1.0, 10)])
def test_matches_numpy_paper_rule(problem, scale, gap):
    params, grads = problem
    ours, projs = _run(_with_lr(scale_by_fira(RANK, gap, scale)), params, grads)
    assert _max_diff(ours, _numpy_fira(params, grads, projs, scale=scale)) < 1e-5
    if scale != 1.0:  # the reference's residual G - scale P P^T G is another rule
        variant = _numpy_fira(params, grads, projs, scale=scale, paper=False)
        assert _max_diff(ours, variant) > 1e-3
    # P is refreshed at steps 1, gap + 1, ... and spans the top-r singular subspace then
    for k in ("w", "v"):
        for t in range(STEPS):
            if t % gap:
                assert np.array_equal(projs[k][t], projs[k][t - 1])
                continue
            g = grads[k][t].astype(np.float64)
            u, _, vh = np.linalg.svd(g, full_matrices=False)
            top = vh[:RANK].T if g.shape[0] >= g.shape[1] else u[:, :RANK]
            P = projs[k][t].astype(np.float64)
            np.testing.assert_allclose(P @ P.T, top @ top.T, atol=1e-4)


def test_batch_axes_and_state_layout():
    tx = scale_by_fira(2, 5, weight_dimension_numbers=GaLoreDimensionNumbers(1, 2))
    params = {"w": jnp.zeros((3, 6, 4)), "b": jnp.zeros(4)}
    state = tx.init(params)
    assert isinstance(state, ScaleByFiraState) and state.count.dtype == jnp.int32
    assert state.projection["w"].shape == (3, 4, 2) and state.mu["w"].shape == (3, 6, 2)
    assert state.norm["w"].shape == (3,) and state.mu["b"].shape == (4,)
    # each batch element is its own matrix: the same as three separate 2-D leaves
    rng = np.random.default_rng(0)
    g = {"w": jnp.asarray(rng.normal(size=(3, 6, 4)), jnp.float32), "b": jnp.ones(4)}
    sep = scale_by_fira(2, 5)
    gs = {f"w{i}": g["w"][i] for i in range(3)}
    s_b, s_s = state, sep.init(gs)
    up_b, up_s = jax.jit(tx.update), jax.jit(sep.update)
    for _ in range(3):
        u_b, s_b = up_b(g, s_b)
        u_s, s_s = up_s(gs, s_s)
    for i in range(3):
        np.testing.assert_allclose(u_b["w"][i], u_s[f"w{i}"], rtol=1e-5, atol=1e-6)


def test_dtypes_and_checkpoint():
    tx = fira(1e-2, rank=2, preconditioner_dtype=jnp.bfloat16, weight_decay=0.1)
    params = {"w": jnp.ones((5, 4)), "b": jnp.ones(4)}
    state = tx.init(params)
    assert state[0].projection["w"].dtype == jnp.bfloat16 and state[0].mu["w"].dtype == jnp.bfloat16
    step = jax.jit(tx.update)
    g = {"w": jnp.arange(20.0).reshape(5, 4) / 10, "b": jnp.ones(4)}
    for _ in range(3):
        _, state = step(g, state, params)
    leaves, treedef = jax.tree.flatten(state)
    restored = treedef.unflatten([np.asarray(x).copy() for x in leaves])
    a, b = step(g, state, params), step(g, restored, params)
    assert all(
        np.array_equal(x, y) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=False)
    )
    pb = jax.tree.map(lambda x: x.astype(jnp.bfloat16), params)
    gb = jax.tree.map(lambda x: x.astype(jnp.bfloat16), g)
    ub, _ = jax.jit(tx.update)(gb, tx.init(pb), pb)
    assert all(x.dtype == jnp.bfloat16 for x in jax.tree.leaves(ub))
    assert all(np.all(np.isfinite(np.asarray(x, np.float32))) for x in jax.tree.leaves(ub))


def test_edge_cases():
    tx = scale_by_fira(2, 10)
    update = jax.jit(tx.update)
    state = tx.init({"w": jnp.ones((6, 4))})
    u, s = update({"w": jnp.zeros((6, 4))}, state)
    assert np.all(np.asarray(u["w"]) == 0)
    g = {"w": jnp.asarray(np.random.default_rng(1).normal(size=(6, 4)), jnp.float32)}
    u1, _ = update(g, state)
    u2, _ = update(g, s)  # after a zero step the limiter starts afresh, the update is not stalled
    assert float(jnp.linalg.norm(u2["w"])) > 0.1 * float(jnp.linalg.norm(u1["w"]))
    # a rank-1 (constant) gradient lies in a rank-1 projection: no residual, and low-rank
    # Adam's update is constant too (with rank 2, Adam would amplify the float noise in the
    # second, null direction, as Adam does)
    one = scale_by_fira(1, 10)
    u, _ = jax.jit(one.update)({"w": jnp.ones((6, 4))}, one.init({"w": jnp.ones((6, 4))}))
    np.testing.assert_allclose(u["w"], np.ones((6, 4)) * float(u["w"][0, 0]), rtol=1e-4)
    for scale in (1e15, 1e-15):
        u, _ = update(jax.tree.map(lambda x: scale * x, g), state)
        assert np.all(np.isfinite(u["w"])) and float(jnp.abs(u["w"]).max()) > 0


def test_construction_errors():
    with pytest.raises(ValueError, match="rank"):
        scale_by_fira(0)
    with pytest.raises(ValueError, match="update_proj_gap"):
        scale_by_fira(update_proj_gap=0)
    with pytest.raises(ValueError, match="scale"):
        scale_by_fira(scale=-1.0)
    with pytest.raises(ValueError, match="preconditioner_dtype"):
        scale_by_fira(preconditioner_dtype=jnp.int8)
    with pytest.raises(ValueError, match="b1"):
        fira(1e-2, b1=-0.1)
    with pytest.raises(ValueError, match="weight_decay"):
        fira(1e-2, weight_decay=-1.0)
    with pytest.raises(ValueError, match="rank >= 2"):
        scale_by_fira(weight_dimension_numbers={"b": GaLoreDimensionNumbers()}).init(
            {"b": jnp.zeros(3)}
        )


# --- against the authors' package (fira, github.com/xichen-fy/Fira) ------------------------


@pytest.fixture(scope="module")
def authors_fira():
    """fira.fira_adamw, imported on its own (see tests/contrib/author_packages.py)."""
    return author_packages.load("fira", "fira_adamw")


@functools.cache
def _compiled(scale=1.0, gap=7, weight_decay=None):
    """A compiled run of gradtx's Fira (lr LR; `weight_decay` not None: `fira` with that
    decay) returning the params, projections and the limiter's norms after each step; cached
    so that the tests below share the compilations."""
    if weight_decay is None:
        tx = _with_lr(scale_by_fira(RANK, gap, scale))
    else:
        tx = fira(LR, RANK, gap, scale, weight_decay=weight_decay)

    return low_rank_trajectory(tx, ("projection", "norm"))


def _authors_run(mod, monkeypatch, params, grads, projs, *, gap, scale, weight_decay=0.0):
    """The authors' `AdamW` (Fira) on the same problem, its SVD replaced by our projections of
    the same steps (the SVD's signs are arbitrary, and the limiter's norms see them once the
    projection changes). Returns the params after each step, the limiter's stored norm of each
    matrix after each step, and the (step, leaf, side) of every SVD."""
    tensors = {k: torch.tensor(v, requires_grad=True) for k, v in params.items()}
    by_shape = {tuple(params[k].shape): k for k in ("w", "v")}
    now, svds = [0], []

    def fixed(self, weights, rank, type):
        k = by_shape[tuple(weights.shape)]
        svds.append((now[0], k, type))
        P = projs[k][now[0]]
        return torch.tensor((P.T if type == "right" else P).copy())

    monkeypatch.setattr(mod.GradientProjector, "get_orthogonal_matrix", fixed)
    opt = mod.AdamW(
        [{"params": [tensors["w"], tensors["v"]], "rank": RANK, "update_proj_gap": gap,
          "alpha": scale, "proj_type": "std"},
         {"params": [tensors["b"]]}],
        lr=LR, betas=(B1, B2), eps=EPS, weight_decay=weight_decay, no_deprecation_warning=True,
    )  # fmt: skip
    out = {k: [] for k in params}
    norms = {"w": [], "v": []}
    for t in range(STEPS):
        now[0] = t
        for k, p in tensors.items():
            p.grad = torch.tensor(grads[k][t])
        opt.step()
        for k, p in tensors.items():
            out[k].append(p.detach().numpy().copy())
        for k in norms:
            norms[k].append(float(opt.state[tensors[k]]["scaling_grad"]))
    params_out = {k: np.stack(v) for k, v in out.items()}
    return params_out, {k: np.array(v) for k, v in norms.items()}, svds


def test_matches_authors_fira(authors_fira, monkeypatch, problem):
    """gradtx against the authors' Fira with our projections injected, scale 1 (where the
    paper and the authors' code agree): the params and the limiter's norms over 60 steps with
    refreshes, the SVDs at the same steps and sides, and the limiter binding on many steps."""
    params, grads = problem
    gap = 7
    ours, projs, our_norms = _compiled(1.0, gap)(params, grads)
    ref, ref_norms, svds = _authors_run(authors_fira, monkeypatch, params, grads, projs,
                                        gap=gap, scale=1.0)  # fmt: skip
    assert _max_diff(ours, ref) < AUTHORS_TOL
    for k in ("w", "v"):
        np.testing.assert_allclose(our_norms[k], ref_norms[k], rtol=AUTHORS_TOL)
    expected = [(t, k, "right" if k == "w" else "left") for t in range(STEPS) if t % gap == 0
                for k in ("w", "v")]  # fmt: skip
    assert svds == expected
    # the limiter binds (the stored norm grew by exactly 1.01) on many steps
    grew = [np.isclose(ref_norms[k][1:] / ref_norms[k][:-1], 1.01, rtol=1e-6) for k in "wv"]
    assert sum(int(g.sum()) for g in grew) >= 20


def test_authors_residual_carries_the_scale(authors_fira, monkeypatch, problem):
    """For scale alpha != 1 the authors' code (like pytorch_optimizer) takes the residual as
    G - alpha P P^T G (its projector's back-projection carries alpha); gradtx follows the paper,
    G - P P^T G. The authors' run is the NumPy transcription with the scaled residual, ours the
    one with the paper's, and the two rules differ."""
    params, grads = problem
    scale, gap = 0.25, 10
    ours, projs, _ = _compiled(scale, gap)(params, grads)
    ref, _, _ = _authors_run(authors_fira, monkeypatch, params, grads, projs, gap=gap,
                             scale=scale)  # fmt: skip
    variant = _numpy_fira(params, grads, projs, scale=scale, paper=False)
    assert _max_diff(ref, variant) < AUTHORS_TOL
    assert _max_diff(ours, _numpy_fira(params, grads, projs, scale=scale)) < AUTHORS_TOL
    assert _max_diff(ours, ref) > 1e-3


def test_authors_weight_decay_is_applied_after_the_step(authors_fira, monkeypatch, problem):
    """The authors decay after the step, w <- (w - eta' u)(1 - eta lambda), as
    pytorch_optimizer does; gradtx's `fira` decays AdamW's way. The updates do not depend on
    the params, so both recursions are built from gradtx's undecayed steps: the authors' run
    matches the first, gradtx's `fira` the second, and they differ."""
    params, grads = problem
    wd = 0.5
    plain, projs, _ = _compiled()(params, grads)
    ref, _, _ = _authors_run(authors_fira, monkeypatch, params, grads, projs, gap=7, scale=1.0,
                             weight_decay=wd)  # fmt: skip
    ours, _, _ = _compiled(weight_decay=wd)(params, grads)
    after, adamw = author_packages.decay_recursions(params, plain, LR, wd)
    assert _max_diff(ref, after) < AUTHORS_TOL
    assert _max_diff(ours, adamw) < AUTHORS_TOL
    assert _max_diff(ref, ours) > 1e-4


def test_authors_limiter_stalls_the_residual_after_a_zero_gradient(authors_fira, monkeypatch):
    """Edge case where gradtx departs from the authors' code (documented in
    `limit_norm_growth`): after a zero gradient the stored norm is 0, and the authors' limiter
    then divides the residual by ~norm / 1e-8, so the matrix moves only inside the projection
    for hundreds of steps; gradtx starts the limiter afresh and keeps the residual."""
    rng = np.random.default_rng(5)
    params = {k: rng.normal(size=s).astype(np.float32) for k, s in SHAPES.items()}
    g = {k: rng.normal(size=(STEPS, *s)).astype(np.float32) for k, s in SHAPES.items()}
    for k in g:
        g[k][0] = 0.0
    ours, projs, our_norms = _compiled()(params, g)
    ref, ref_norms, _ = _authors_run(authors_fira, monkeypatch, params, g, projs, gap=7,
                                     scale=1.0)  # fmt: skip
    for k in ("w", "v"):
        assert our_norms[k][0] == 0 and ref_norms[k][0] == 0
        assert np.max(ref_norms[k]) < 1e-5 and our_norms[k][1] > 0.1
    # on step 2 (P unchanged) the authors' step lies in the projection, ours does not
    for k in ("w", "v"):
        P = projs[k][1].astype(np.float64)
        keep = (lambda x: x @ P @ P.T) if k == "w" else (lambda x: P @ P.T @ x)
        d_ref, d_ours = ref[k][1] - ref[k][0], ours[k][1] - ours[k][0]
        assert np.linalg.norm(d_ref - keep(d_ref)) < 1e-6
        assert np.linalg.norm(d_ours - keep(d_ours)) > 1e-3
