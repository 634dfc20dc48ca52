"""APOLLO against a NumPy (float64) transcription of the authors' rule that takes the random
projections as input (ours, read from the state), with that same transcription checked against
`pytorch_optimizer.APOLLO` (4.1.0) with the same projection injected, in the reference's
variant (scale applied to the projected gradient, then projected back); the statistics of the
random projections; edge cases.

Second reference: the authors' package, apollo-torch 1.0.3 (`apollo_torch/apollo.py`
`AdamW`, imported without its package __init__ by tests/contrib/author_packages.py), with its
random draw (`GradientProjector.get_orthogonal_matrix`, seeded per parameter and re-seeded per
draw) replaced by the projection gradtx drew at the same step, so that only the deterministic
rule is compared: channel-wise, tensor-wise and APOLLO-Mini (rank 1, scale 128), redraws
every 7 or 10 steps, the norm-growth limiter's stored norms, its scale_front option, its
weight decay (applied after the step: another order, documented in `apollo`) and its limiter
after a zero gradient (it stalls; gradtx starts afresh, documented in `limit_norm_growth`).

Tolerance: 1e-5 absolute on params of size ~1 after 60 float32 steps of lr 1e-2 (float32
against float64 / float32 torch; the norms and the limiter are smooth). Against the authors'
package 2e-5 absolute on the params (of size ~2.5) and 2e-5 relative on the limiter's norms
after 60 steps: both sides are float32 with the same projections, so only the rounding of
the matmuls, norms and square roots differs (measured: <= 3.3e-6 on the params, APOLLO-Mini
the largest, whose sqrt(128) amplifies it; <= 6e-7 relative on the norms)."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gradtx.contrib._apollo import ScaleByApolloState, apollo, scale_by_apollo
from gradtx.contrib._galore import GaLoreDimensionNumbers

from . import author_packages
from .common import low_rank_trajectory

torch = pytest.importorskip("torch")
pytorch_optimizer = pytest.importorskip("pytorch_optimizer")
galore_utils = pytest.importorskip("pytorch_optimizer.optimizer.utils.galore")

STEPS = 60
LR = 1e-2
RANK = 3
SHAPES = {"w": (8, 6), "v": (4, 10), "b": (6,)}
B1, B2, EPS = 0.9, 0.999, 1e-6
AUTHORS_TOL = 2e-5  # against apollo-torch; see the module docstring


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


def _numpy_apollo(params, grads, projs, *, scale=1.0, scale_type="channel", raw=True):
    """The authors' APOLLO step (github.com/zhuhanqing/APOLLO) given each step's projection P
    (d, r) (raw=True: the scale is applied to the raw gradient); raw=False is
    pytorch_optimizer's variant (projected gradient, projected back times `scale`)."""
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
            m[k] = B1 * m[k] + (1 - B1) * r
            v[k] = B2 * v[k] + (1 - B2) * r * r
            n = m[k] / (np.sqrt(v[k]) + EPS)
            if scale_type == "channel":
                ax = 1 if right else 0
                s = np.linalg.norm(n, axis=ax, keepdims=True) / (
                    np.linalg.norm(r, axis=ax, keepdims=True) + 1e-8
                )
            else:
                s = np.linalg.norm(n) / (np.linalg.norm(r) + 1e-8)
            sg = (g if raw else r) * s
            norm = np.linalg.norm(sg)
            if k in prev:
                lim = max(norm / (prev[k] + 1e-8), 1.01) / 1.01
                sg, norm = sg / lim, norm / lim
            prev[k] = norm
            u = np.sqrt(scale) * sg
            if not raw:
                u = scale * (u @ P.T if right else P @ u)
            p[k] = p[k] - step * u
        out.append({k: x.copy() for k, x in p.items()})
    return {k: np.stack([o[k] for o in out]) for k in p}


def _max_diff(a, b):
    return max(float(np.max(np.abs(a[k] - b[k]))) for k in a)


def _torch_apollo(params, grads, projs, scale_type, scale):
    """`pytorch_optimizer.APOLLO` with its random draw replaced by our first projection."""
    tensors = {k: torch.tensor(v, requires_grad=True) for k, v in params.items()}
    by_shape = {tuple(params[k].shape): projs[k][0] for k in ("w", "v")}

    def fixed(self, weights, projection_type, from_random_matrix=False):
        P = torch.tensor(by_shape[tuple(weights.shape)])
        return P.t().contiguous() if projection_type == "right" else P.clone()

    opt = pytorch_optimizer.APOLLO(
        [{"params": list(tensors.values()), "rank": RANK, "update_proj_gap": 1000,
          "scale": scale, "projection_type": "random"}],
        lr=LR, betas=(B1, B2), eps=EPS, scale_type=scale_type, foreach=False,
    )  # fmt: skip
    out = {k: [] for k in params}
    orig = galore_utils.GaLoreProjector.get_orthogonal_matrix
    galore_utils.GaLoreProjector.get_orthogonal_matrix = fixed
    try:
        for t in range(STEPS):
            for k, p in tensors.items():
                p.grad = torch.tensor(grads[k][t])
            opt.step()
            for k, p in tensors.items():
                out[k].append(p.detach().numpy().copy())
    finally:
        galore_utils.GaLoreProjector.get_orthogonal_matrix = orig
    return {k: np.stack(v) for k, v in out.items()}


@pytest.mark.across_versions
@pytest.mark.parametrize("scale_type", ["channel", "tensor"])
def test_transcription_matches_pytorch_optimizer_variant(scale_type):
    """With our projection injected into the reference, the transcription in the reference's
    variant matches it, which checks the shared parts (moments, factors, limiter, 1-D Adam)."""
    params, grads = _problem()
    tx = scale_by_apollo(RANK, 1000, 1.0, scale_type=scale_type, seed=3)
    ours, projs = _run(_scaled(tx), params, grads)
    ref = _torch_apollo(params, grads, projs, scale_type, 1.0)
    mine = _numpy_apollo(params, grads, projs, scale_type=scale_type, raw=False)
    assert _max_diff(ref, mine) < 1e-5
    # ours follows the paper's rule (the 1-D leaf, Adam, matches the reference as it is)
    assert _max_diff(ours, _numpy_apollo(params, grads, projs, scale_type=scale_type)) < 1e-5
    assert float(np.max(np.abs(ours["b"] - ref["b"]))) < 1e-5


def _scaled(tx):
    """`tx` followed by the learning rate (a chain whose first state is tx's)."""
    import gradtx

    return gradtx.chain(tx, gradtx.scale_by_learning_rate(LR))


@pytest.mark.parametrize(("scale_type", "scale", "gap"), [("tensor", 4.0, 10), ("channel", 4.0, 7)])
def test_matches_numpy_paper_rule(scale_type, scale, gap):
    params, grads = _problem()
    tx = _scaled(scale_by_apollo(RANK, gap, scale, scale_type=scale_type, seed=1))
    ours, projs = _run(tx, params, grads)
    ref = _numpy_apollo(params, grads, projs, scale=scale, scale_type=scale_type, raw=True)
    assert _max_diff(ours, ref) < 1e-5
    # the paper's update is full rank, the reference's variant is not: they differ
    variant = _numpy_apollo(params, grads, projs, scale=scale, scale_type=scale_type, raw=False)
    assert _max_diff(ours, variant) > 1e-3
    # the projection was redrawn exactly at steps 1, gap + 1, ...
    w = projs["w"]
    for t in range(1, STEPS):
        assert np.array_equal(w[t], w[t - 1]) == (t % gap != 0)


def test_projection_statistics():
    """P has entries N(0, 1/r): E[P P^T] = I; batch elements draw independently."""
    r = 8
    tx = scale_by_apollo(r, 1, weight_dimension_numbers=GaLoreDimensionNumbers(1, 2), seed=5)
    params = {"w": jnp.zeros((200, 12, 10))}
    _, state = jax.jit(tx.update)({"w": jnp.ones((200, 12, 10))}, tx.init(params))
    P = np.asarray(state.projection["w"], np.float64)
    assert P.shape == (200, 10, r) and state.mu["w"].shape == (200, 12, r)
    ppt = np.einsum("bir,bjr->bij", P, P).mean(0)
    np.testing.assert_allclose(ppt, np.eye(10), atol=0.2)
    assert abs(P.mean()) < 0.015 and abs(P.var() - 1 / r) < 0.01
    corr = np.corrcoef(P[0].ravel(), P[1].ravel())[0, 1]
    assert abs(corr) < 0.2
    # the key is plain uint32 key data; another seed draws another P, the same seed the same
    leaf = {"w": jnp.ones((32, 24))}

    t = scale_by_apollo(r, 1, seed=6)
    up, s0 = jax.jit(t.update), t.init(leaf)
    key7 = scale_by_apollo(r, 1, seed=jax.random.key(7)).init(leaf).key  # a typed key as seed
    s6, s6b, s7 = up(leaf, s0)[1], up(leaf, t.init(leaf))[1], up(leaf, s0._replace(key=key7))[1]
    assert s6.key.dtype == jnp.uint32 and s6.key.shape == (2,)
    assert np.array_equal(s6.projection["w"], s6b.projection["w"])
    assert not np.array_equal(s6.projection["w"], s7.projection["w"])


def test_state_layout_dtypes_and_checkpoint():
    tx = apollo(1e-2, rank=2, preconditioner_dtype=jnp.bfloat16)
    params = {"w": jnp.ones((5, 4)), "b": jnp.ones(4)}
    state = tx.init(params)
    inner = state[0]
    assert isinstance(inner, ScaleByApolloState)
    assert inner.projection["w"].shape == (4, 2) and inner.projection["w"].dtype == jnp.bfloat16
    assert inner.mu["w"].shape == (5, 2) and inner.mu["w"].dtype == jnp.bfloat16
    assert inner.mu["b"].shape == (4,) and inner.mu["b"].dtype == jnp.float32
    assert inner.norm["w"].shape == () and inner.count.dtype == jnp.int32
    step = jax.jit(tx.update)
    g = {"w": jnp.arange(20.0).reshape(5, 4) / 10, "b": jnp.ones(4)}
    for _ in range(3):
        _, state = step(g, state, params)
    leaves, treedef = jax.tree.flatten(state)
    restored = treedef.unflatten([np.asarray(x).copy() for x in leaves])
    a = step(g, state, params)
    b = step(g, restored, params)
    assert all(
        np.array_equal(x, y) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=False)
    )
    # bf16 params: bf16 updates
    pb = jax.tree.map(lambda x: x.astype(jnp.bfloat16), params)
    ub, _ = jax.jit(tx.update)(jax.tree.map(lambda x: x.astype(jnp.bfloat16), g), tx.init(pb), pb)
    assert all(x.dtype == jnp.bfloat16 for x in jax.tree.leaves(ub))
    assert all(np.all(np.isfinite(np.asarray(x, np.float32))) for x in jax.tree.leaves(ub))


def test_edge_cases():
    tx = scale_by_apollo(2, 10, seed=0)
    update = jax.jit(tx.update)
    params = {"w": jnp.ones((6, 4))}
    state = tx.init(params)
    # zero gradient: zero update, and the next step is not stalled by the limiter
    u, s = update({"w": jnp.zeros((6, 4))}, state)
    assert np.all(np.asarray(u["w"]) == 0)
    g = {"w": jnp.linspace(-1.0, 1.0, 24).reshape(6, 4)}
    u2, _ = update(g, s)
    u1, _ = update(g, state)
    assert float(jnp.linalg.norm(u2["w"])) > 0.1 * float(jnp.linalg.norm(u1["w"]))
    # constant gradients: the limiter holds the norm's growth to 1 % a step
    s, norms = state, []
    for i in range(6):
        u, s = update({"w": (1.0 + i) * jnp.ones((6, 4))}, s)
        norms.append(float(jnp.linalg.norm(u["w"])))
    assert all(np.isfinite(norms))
    # huge / tiny gradients stay finite, and the update has the gradient's sign
    for scale in (1e15, 1e-15):
        u, _ = update(jax.tree.map(lambda x: scale * x, g), state)
        assert np.all(np.isfinite(u["w"]))
        assert np.all(np.sign(np.asarray(u["w"])) == np.sign(np.asarray(g["w"])))


def test_construction_errors():
    with pytest.raises(ValueError, match="rank"):
        scale_by_apollo(0)
    with pytest.raises(ValueError, match="update_proj_gap"):
        scale_by_apollo(update_proj_gap=0)
    with pytest.raises(ValueError, match="did you mean 'channel'"):
        scale_by_apollo(scale_type="chanel")
    with pytest.raises(ValueError, match="proj"):
        scale_by_apollo(proj="svd")
    with pytest.raises(ValueError, match="preconditioner_dtype"):
        scale_by_apollo(preconditioner_dtype=jnp.float16)
    with pytest.raises(ValueError, match="seed"):
        scale_by_apollo(seed="x")
    with pytest.raises(ValueError, match="b2"):
        apollo(1e-2, b2=1.5)
    with pytest.raises(ValueError, match="weight_decay"):
        apollo(1e-2, weight_decay=-1.0)


# --- against the authors' package (apollo-torch, github.com/zhuhanqing/APOLLO) -------------


@pytest.fixture(scope="module")
def authors_apollo():
    """apollo_torch.apollo, imported on its own (see tests/contrib/author_packages.py)."""
    return author_packages.load("apollo_torch", "apollo")


@functools.cache
def _compiled(scale_type="channel", rank=RANK, scale=1.0, gap=7, weight_decay=None):
    """A compiled run of gradtx's APOLLO (lr LR, seed 11; `weight_decay` not None: `apollo`
    with that decay) returning the params, projections and the limiter's norms after each
    step; cached so that the tests below share the compilations."""
    if weight_decay is None:
        tx = _scaled(scale_by_apollo(rank, gap, scale, scale_type=scale_type, seed=11))
    else:
        tx = apollo(LR, rank, gap, scale, weight_decay=weight_decay, scale_type=scale_type,
                    seed=11)  # fmt: skip

    return low_rank_trajectory(tx, ("projection", "norm"))


def _authors_run(mod, monkeypatch, params, grads, projs, *, gap, weight_decay=0.0, **group):
    """The authors' `AdamW` (APOLLO) on the same problem, its random draws replaced by our
    projections of the same steps. Returns the params after each step, the limiter's stored
    norm of each matrix after each step, and the (step, leaf, side) of every draw."""
    tensors = {k: torch.tensor(v, requires_grad=True) for k, v in params.items()}
    by_shape = {tuple(params[k].shape): k for k in ("w", "v")}
    now, draws = [0], []

    def fixed(self, weights, rank, type, seed=None):
        k = by_shape[tuple(weights.shape)]
        draws.append((now[0], k, type))
        P = projs[k][now[0]]
        return torch.tensor((P.T if type == "right" else P).copy())

    monkeypatch.setattr(mod.GradientProjector, "get_orthogonal_matrix", fixed)
    options = {k: group.pop(k) for k in ("scale_front", "disable_nl") if k in group}
    group.setdefault("rank", RANK)
    opt = mod.AdamW(
        [{"params": [tensors["w"], tensors["v"]], "update_proj_gap": gap, "proj": "random",
          "proj_type": "std", **group},
         {"params": [tensors["b"]]}],
        lr=LR, betas=(B1, B2), eps=EPS, weight_decay=weight_decay, **options,
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
            norms[k].append(float(opt.state[tensors[k]].get("scaled_grad", np.nan)))
    params_out = {k: np.stack(v) for k, v in out.items()}
    return params_out, {k: np.array(v) for k, v in norms.items()}, draws


# (scale_type, rank, scale, gap): APOLLO channel-wise; tensor-wise; APOLLO-Mini (rank 1,
# scale 128, tensor-wise, as in the paper)
AUTHOR_CASES = [("channel", 3, 1.0, 7), ("tensor", 3, 4.0, 10), ("tensor", 1, 128.0, 10)]


@pytest.mark.parametrize(("scale_type", "rank", "scale", "gap"), AUTHOR_CASES)
def test_matches_authors_apollo(authors_apollo, monkeypatch, scale_type, rank, scale, gap):
    """gradtx against the authors' APOLLO with our projections injected: the params and the
    limiter's norms over 60 steps, with redraws; the redraws at the same steps; and the limiter
    is exercised (the authors' run without it, disable_nl, is another trajectory)."""
    params, grads = _problem()
    ours, projs, our_norms = _compiled(scale_type, rank, scale, gap)(params, grads)
    kw = {"rank": rank, "scale": scale, "scale_type": scale_type}
    ref, ref_norms, draws = _authors_run(authors_apollo, monkeypatch, params, grads, projs,
                                         gap=gap, **kw)  # fmt: skip
    assert _max_diff(ours, ref) < AUTHORS_TOL
    for k in ("w", "v"):
        np.testing.assert_allclose(our_norms[k], ref_norms[k], rtol=AUTHORS_TOL)
    # the authors draw at steps 1, gap + 1, ... (0-based t % gap == 0), the right side for
    # (8, 6) and the left for (4, 10), as gradtx does
    expected = [(t, k, "right" if k == "w" else "left") for t in range(STEPS) if t % gap == 0
                for k in ("w", "v")]  # fmt: skip
    assert draws == expected
    unlimited, _, _ = _authors_run(authors_apollo, monkeypatch, params, grads, projs, gap=gap,
                                   disable_nl=True, **kw)  # fmt: skip
    assert _max_diff(ours, unlimited) > 1e-3


def test_authors_scale_front_is_the_same_rule(authors_apollo, monkeypatch):
    """The authors' scale_front=True multiplies by sqrt(scale) before the limiter instead of
    after it; the limiter's ratio does not see the factor (up to its 1e-8), so gradtx (which
    scales after, the default) matches both."""
    params, grads = _problem()
    ours, projs, _ = _compiled("tensor", RANK, 4.0, 10)(params, grads)
    ref, _, _ = _authors_run(authors_apollo, monkeypatch, params, grads, projs, gap=10,
                             scale=4.0, scale_type="tensor", scale_front=True)  # fmt: skip
    assert _max_diff(ours, ref) < AUTHORS_TOL


def test_authors_weight_decay_is_applied_after_the_step(authors_apollo, monkeypatch):
    """The authors decay after the step, w <- (w - eta' u)(1 - eta lambda); gradtx's `apollo`
    decays AdamW's way (the paper's), w <- w - eta' u - eta lambda w. The updates u do not
    depend on the params (the gradients are given), so both recursions can be built from
    gradtx's undecayed steps: the authors' run matches the first, gradtx the second, and they
    differ by the product term eta lambda eta' u (documented in `apollo`)."""
    params, grads = _problem()
    wd = 0.5
    plain, projs, _ = _compiled()(params, grads)
    ref, _, _ = _authors_run(authors_apollo, monkeypatch, params, grads, projs, gap=7,
                             scale=1.0, scale_type="channel", weight_decay=wd)  # fmt: skip
    ours, _, _ = _compiled(weight_decay=wd)(params, grads)
    after, adamw = author_packages.decay_recursions(params, plain, LR, wd)
    assert _max_diff(ref, after) < AUTHORS_TOL
    assert _max_diff(ours, adamw) < AUTHORS_TOL
    assert _max_diff(ref, ours) > 1e-4


def test_authors_limiter_stalls_after_a_zero_gradient(authors_apollo, monkeypatch):
    """Edge case where gradtx departs from the authors' code (documented in
    `limit_norm_growth`): after a step whose gradient is 0, the stored norm is 0 and the
    authors' limiter divides the next update by ~norm / 1e-8, so the matrix barely moves for
    hundreds of steps (the norm then grows by 1 % a step); gradtx starts the limiter afresh."""
    rng = np.random.default_rng(5)
    params = {k: rng.normal(size=s).astype(np.float32) for k, s in SHAPES.items()}
    g = {k: rng.normal(size=(STEPS, *s)).astype(np.float32) for k, s in SHAPES.items()}
    for k in g:
        g[k][0] = 0.0
    ours, projs, our_norms = _compiled()(params, g)
    ref, ref_norms, _ = _authors_run(authors_apollo, monkeypatch, params, g, projs, gap=7,
                                     scale=1.0, scale_type="channel")  # fmt: skip
    for k in ("w", "v"):
        assert our_norms[k][0] == 0 and ref_norms[k][0] == 0
        assert np.max(np.abs(ref[k][-1] - params[k])) < 1e-6  # stalled
        assert np.max(np.abs(ours[k][-1] - params[k])) > 1e-2  # trained
        assert np.max(ref_norms[k]) < 1e-5 and our_norms[k][1] > 0.1
    np.testing.assert_allclose(ours["b"], ref["b"], atol=AUTHORS_TOL)  # Adam leaves agree
