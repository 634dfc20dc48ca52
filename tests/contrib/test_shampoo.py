"""Shampoo against `pytorch_optimizer.ScalableShampoo` (4.1.0) over 60 float32 steps, against a
NumPy (float64) transcription of the published rule (blocks, grafting, start step, refresh
frequency), and its edge cases (zero, constant, huge and tiny gradients, bf16 params and
factors, batch axes, blocking, the start step, one compilation across refreshes, checkpoints,
errors)."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gradtx
from gradtx.checkpoint import load_state_dict, state_dict
from gradtx.contrib._shampoo import (
    ScaleByShampooState,
    ShampooDimensionNumbers,
    scale_by_shampoo,
    shampoo,
)

from .torch_reference import grads_of, gradtx_trajectory, max_diff, params_of, torch_trajectory

torch = pytest.importorskip("torch")
pytorch_optimizer = pytest.importorskip("pytorch_optimizer")
from pytorch_optimizer.optimizer.utils.graft import LayerWiseGrafting  # noqa: E402

LR = 1e-2


def _torch_shampoo(graft, b1, b2, start, wd, nesterov=False):
    return lambda ps: pytorch_optimizer.ScalableShampoo(
        ps,
        lr=LR,
        betas=(b1, b2),
        weight_decay=wd,
        decoupled_weight_decay=True,
        start_preconditioning_step=start,
        preconditioning_compute_steps=start,
        block_size=64,  # one block: its grafting norm is per layer, ours per block
        shape_interpretation=False,  # True would merge (8, 6) into one dimension: no Shampoo
        graft_type=getattr(LayerWiseGrafting, graft.upper()),
        nesterov=nesterov,
        diagonal_eps=1e-10,
        matrix_eps=1e-6,
        use_svd=True,  # SVD of a symmetric PSD matrix = our eigendecomposition
    )


# Tolerance 2e-5 absolute on params of size ~1 after 60 steps (measured <= 3.1e-6, the
# largest with momentum). The reference's factors start at matrix_eps I and decay it with b2
# (ours adds matrix_eps at each root): a relative change of ~1e-7 in eigenvalues of size >~1.
# The rest is float32 rounding of two eigensolvers (LAPACK SVD vs eigh). With start ==
# precondition_frequency both refresh at the same steps (the reference refreshes at multiples
# of the frequency, ours at start + k * frequency).
TORCH_CASES = [
    ("rmsprop", 0.99, 5, 0.1),
    ("adagrad", 0.9, 10, 0.0),
]  # "sgd" (start 1, refresh every step) is the momentum test below


@pytest.mark.across_versions
@pytest.mark.parametrize(("graft", "b2", "start", "wd"), TORCH_CASES)
def test_matches_pytorch_optimizer(graft, b2, start, wd):
    params, grads = params_of(), grads_of()
    tx = shampoo(
        LR, b1=0.0, b2=b2, eps=1e-10, matrix_eps=1e-6, weight_decay=wd, block_size=64,
        precondition_frequency=start, start_preconditioning_step=start, graft_type=graft,
    )  # fmt: skip
    ours = gradtx_trajectory(tx, params, grads)
    ref = torch_trajectory(_torch_shampoo(graft, 0.0, b2, start, wd), params, grads)
    assert max_diff(ours, ref) < 2e-5
    assert np.abs(ours["w"][-1] - params["w"]).max() > 0.05  # it moved


def test_reference_momentum_is_trace_after_the_primitive():
    """The reference's momentum (heavy ball on the grafted update, Nesterov) is
    `trace(b1, nesterov=True)` chained after the primitive (with b1 = 0 there)."""
    params, grads = params_of(), grads_of()
    tx = gradtx.chain(
        scale_by_shampoo(0.0, 0.999, 1e-10, 1e-6, block_size=64, precondition_frequency=1,
                         start_preconditioning_step=1, graft_type="sgd"),
        gradtx.trace(0.9, nesterov=True),
        gradtx.scale_by_learning_rate(LR),
    )  # fmt: skip
    ours = gradtx_trajectory(tx, params, grads)
    ref = torch_trajectory(_torch_shampoo("sgd", 0.9, 0.999, 1, 0.0, nesterov=True), params, grads)
    assert max_diff(ours, ref) < 2e-5


# -- the published rule, transcribed in NumPy (float64) -----------------------------------------


def _inv_root(s, eps):
    w, v = np.linalg.eigh(s)
    w = np.maximum(w, 0.0) + eps
    inv = np.where(w > 0, np.where(w > 0, w, 1.0) ** -0.25, 0.0)
    return (v * inv) @ v.T


def _reference(grads, *, b1, b2, eps, meps, block, start, freq, graft, graft_b2=None):
    """Distributed Shampoo (Shi et al. 2023) on one leaf, float64: ragged blocks, each with its
    own factors, roots and grafting norm; a 1-D leaf gets the graft alone."""
    grads = grads.astype(np.float64)
    bg = b2 if graft_b2 is None else graft_b2
    mu, nu = np.zeros(grads.shape[1:]), np.zeros(grads.shape[1:])
    blocks = []
    if grads.ndim == 3:
        m, n = grads.shape[1:]
        for i in range(0, m, block):
            for j in range(0, n, block):
                rs, cs = slice(i, min(i + block, m)), slice(j, min(j + block, n))
                bm, bn = rs.stop - rs.start, cs.stop - cs.start
                blocks.append([rs, cs, np.zeros((bm, bm)), np.zeros((bn, bn)), np.eye(bm),
                               np.eye(bn)])  # fmt: skip
    w = 1.0 if b2 == 1.0 else 1.0 - b2
    out = []
    for t, g in enumerate(grads, start=1):
        mu = b1 * mu + (1 - b1) * g
        mh = mu / (1 - b1**t)
        if graft == "adam":
            nu = bg * nu + (1 - bg) * g * g
            a = mh / (np.sqrt(nu / (1 - bg**t)) + eps)
        elif graft == "rmsprop":
            nu = bg * nu + (1 - bg) * g * g
            a = mh / (np.sqrt(nu) + eps)
        elif graft == "adagrad":
            nu = nu + g * g
            a = mh / (np.sqrt(nu) + eps)
        else:
            a = mh
        u = a.copy()
        for blk in blocks:
            rs, cs = blk[0], blk[1]
            gb = g[rs, cs]
            blk[2] = b2 * blk[2] + w * gb @ gb.T
            blk[3] = b2 * blk[3] + w * gb.T @ gb
            if t >= start and (t - start) % freq == 0:
                blk[4], blk[5] = _inv_root(blk[2], meps), _inv_root(blk[3], meps)
            if t >= start:
                p = blk[4] @ mh[rs, cs] @ blk[5]
                if graft != "none":
                    p = p * np.linalg.norm(a[rs, cs]) / np.linalg.norm(p)
                u[rs, cs] = p
        out.append(u)
    return np.stack(out)


STEPS = 50
# bf16 against float32 updates, relative norm of the difference: bf16 rounds each update and
# moment to 2^-9 (measured 0.35%).
REL_BF16 = 0.01


def _problem(seed=0, steps=STEPS, shape=(10, 7)):
    """Gradients `s_t D_r N_t D_c` with fixed row / column scales spread geometrically over
    [0.5, 2] (so the factors have distinct spectra) and a per-step scale; and a (5,) leaf."""
    rng = np.random.default_rng(seed)
    dr = np.geomspace(0.5, 2.0, shape[0])[:, None]
    dc = np.geomspace(2.0, 0.5, shape[1])[None, :]
    scale = np.exp(0.5 * rng.normal(size=(steps, 1, 1)))
    w = scale * dr * rng.normal(size=(steps, *shape)) * dc
    b = scale[:, :, 0] * rng.normal(size=(steps, 5))
    return {"w": w.astype(np.float32), "b": b.astype(np.float32)}


def _static(graft, block, start, freq, pdtype=jnp.float32, dims=()):
    """The static part of a configuration (dims: (key, dimension numbers) pairs)."""
    return (graft, block, start, freq, pdtype, dims)


@functools.partial(jax.jit, static_argnums=0)
def _run(static, grads, hyper):
    """The updates (and final state) of a gradient sequence, in one scan; b1, b2, eps and
    matrix_eps are traced, so every test with the same static part and shapes shares one
    compiled program."""
    graft, block, start, freq, pdtype, dims = static
    tx = scale_by_shampoo(
        hyper["b1"], hyper["b2"], hyper["eps"], hyper["meps"], block_size=block,
        precondition_frequency=freq, start_preconditioning_step=start, graft_type=graft,
        preconditioner_dtype=pdtype, weight_dimension_numbers=dict(dims) if dims else None,
    )  # fmt: skip

    def body(s, g):
        u, s = tx.update(g, s)
        return s, u

    return jax.lax.scan(body, tx.init(jax.tree.map(lambda x: x[0], grads)), grads)


def _updates(static, grads, b1=0.9, b2=0.999, eps=1e-8, meps=1e-3):
    hyper = {k: jnp.float32(v) for k, v in dict(b1=b1, b2=b2, eps=eps, meps=meps).items()}
    state, updates = _run(static, grads, hyper)
    return state, jax.tree.map(np.asarray, updates)


# Tolerance: rtol 1e-4, and atol 1e-4 of the largest update (measured: <= 8e-6 of it, the
# largest for the un-grafted "none", whose first steps use rank-deficient factors). This is the
# float32 eigendecomposition against float64: its eigenvalues carry absolute errors of ~1e-7
# lambda_max, which matrix_eps^{-1/4} amplifies in the near-null directions of a rank-deficient
# factor; with scales spread over [0.2, 5] instead of [0.5, 2] that reaches 6e-4 for "none"
# (the grafted cases stay below 1e-4). Everything else is float32 rounding (~1e-6).
PAPER = [
    dict(graft="adam", b1=0.9, b2=0.99, block=4, start=3, freq=4),
    dict(graft="none", b1=0.0, b2=1.0, block=64, start=1, freq=1),  # Gupta et al. Alg. 1
    dict(graft="rmsprop", b1=0.0, b2=0.95, block=3, start=1, freq=2),
    dict(graft="adagrad", b1=0.5, b2=1.0, block=5, start=6, freq=1),
    dict(graft="sgd", b1=0.9, b2=0.999, block=4, start=2, freq=3),
]


def _paper_static(cfg):
    return _static(cfg["graft"], cfg["block"], cfg["start"], cfg["freq"])


ADAM, SGD = _paper_static(PAPER[0]), _paper_static(PAPER[4])


@pytest.mark.parametrize("cfg", PAPER, ids=[c["graft"] for c in PAPER])
def test_primitive_matches_the_published_rule(cfg):
    grads = _problem()
    eps, meps = 1e-8, 1e-3
    _, got = _updates(_paper_static(cfg), grads, cfg["b1"], cfg["b2"], eps, meps)
    for k in ("w", "b"):
        kw = {key: cfg[key] for key in ("b1", "b2", "block", "start", "freq", "graft")}
        expected = _reference(grads[k], eps=eps, meps=meps, **kw)
        atol = 1e-4 * np.abs(expected).max()
        np.testing.assert_allclose(got[k], expected, rtol=1e-4, atol=atol, err_msg=k)


# -- edge cases ---------------------------------------------------------------------------------


def test_state_layout():
    """Factors per matrix leaf: (L, R), ordered by the matrix dimension they act on, shapes
    (*batch, nb_rows, nb_cols, b, b); () for a 1-D leaf; moments of the params' shape."""
    tx = scale_by_shampoo(block_size=4)
    state = jax.eval_shape(tx.init, {"w": jnp.zeros((10, 7)), "b": jnp.zeros(5)})
    assert isinstance(state, ScaleByShampooState)
    assert [x.shape for x in state.factors["w"]] == [(3, 2, 4, 4), (3, 2, 4, 4)]
    assert [x.shape for x in state.roots["w"]] == [(3, 2, 4, 4), (3, 2, 4, 4)]
    assert state.factors["b"] == () and state.roots["b"] == ()
    assert state.mu["w"].shape == state.nu["w"].shape == (10, 7)
    assert state.count.dtype == jnp.int32


def test_zero_gradients_give_zero_updates():
    zeros = jax.tree.map(np.zeros_like, _problem())
    state, updates = _updates(ADAM, zeros)
    assert all((u == 0).all() for u in jax.tree.leaves(updates))
    assert all((np.asarray(f) == 0).all() for f in jax.tree.leaves(state.factors))
    # the roots of eps I: eps^{-1/4} I, finite
    np.testing.assert_allclose(state.roots["w"][0][0, 0], 1e-3**-0.25 * np.eye(4), rtol=1e-5)


def test_constant_gradient_keeps_its_direction():
    """G = c 1 1^T on each block: L and R are multiples of 1 1^T, so L^{-1/4} G R^{-1/4} is
    parallel to G whatever matrix_eps, and, grafted to SGD, equal to G; the filtered gradient
    of a constant is that constant. matrix_eps is large (0.1 of the factors' top eigenvalue):
    with a tiny one the float32 eigenvectors of the (rank-1) factors' null space, scaled by
    matrix_eps^{-1/4}, perturb the direction by ~4e-4."""
    g = jax.tree.map(lambda x: np.full_like(x, 0.3), _problem())
    _, u = _updates(SGD, g, meps=0.1)
    for k in ("w", "b"):
        np.testing.assert_allclose(u[k], g[k], rtol=1e-5, err_msg=k)


@pytest.mark.parametrize("scale", [1e-15, 1e15], ids=["tiny", "huge"])
def test_grafted_direction_is_homogeneous(scale):
    """u(c g; matrix_eps c^2) = c u(g; matrix_eps) (the factors scale by c^2, the roots by
    1/sqrt(c), the SGD graft by c), so gradients of 1e-15 or 1e15 give the same direction."""
    grads = _problem()
    _, base = _updates(SGD, grads)
    big = jax.tree.map(lambda x: (scale * x.astype(np.float64)).astype(np.float32), grads)
    _, scaled = _updates(SGD, big, meps=1e-3 * scale**2)
    for k in ("w", "b"):
        assert np.isfinite(scaled[k]).all()
        np.testing.assert_allclose(scaled[k] / scale, base[k], rtol=1e-4, atol=1e-5, err_msg=k)


def test_overflowing_factors_keep_the_previous_roots():
    """|g| = 1e30: G G^T overflows float32; the roots stay the identities (no NaN) and the
    update is the graft's (G itself, constant) on the unpreconditioned direction."""
    g = jax.tree.map(lambda x: np.full_like(x, 1e30), _problem())
    state, u = _updates(SGD, g)
    np.testing.assert_array_equal(state.roots["w"][0][0, 0], np.eye(4))
    np.testing.assert_allclose(u["w"], g["w"], rtol=1e-6)


def test_before_the_start_step_it_is_the_grafted_method():
    """Steps < start_preconditioning_step (3 here): Optax's Adam exactly (an independent
    reference); the 1-D leaf always; the matrix not afterwards. rtol 2e-5: Optax rounds b2 to
    float32 in its bias correction 1 - b2^t but not in 1 - b2 (7e-6 relative at step 1); ours
    gets b2 as a float32 array here, rounded in both."""
    grads = _problem(seed=2)
    _, got = _updates(ADAM, grads)
    adam = jax.tree.map(np.asarray, _optax_adam(grads))
    np.testing.assert_allclose(got["w"][:2], adam["w"][:2], rtol=2e-5, atol=1e-7)
    np.testing.assert_allclose(got["b"], adam["b"], rtol=2e-5, atol=1e-7)
    assert np.abs(got["w"][2:] - adam["w"][2:]).max() > 1e-2


@jax.jit
def _optax_adam(grads):
    tx = optax.scale_by_adam(0.9, 0.999, 1e-8)
    body = lambda s, g: tx.update(g, s)[::-1]
    return jax.lax.scan(body, tx.init(jax.tree.map(lambda x: x[0], grads)), grads)[1]


def test_blocks_and_batch_axes_equal_separate_preconditioning():
    """One run of a (6, 5) leaf with block_size 4 (ragged: rows 4 + 2, columns 4 + 1), a
    (5, 2, 3) leaf with batch axis 1 (rows: axis 0, columns: axis 2; rows blocked 4 + 1) and a
    (2, 1, 2, 3) conv kernel with rows (0, 1, 2); against one run of the four blocks, the two
    slices and the (4, 3) matrix as separate leaves."""
    rng = np.random.default_rng(4)
    w = rng.normal(size=(STEPS, 6, 5)).astype(np.float32)
    stacked = rng.normal(size=(STEPS, 5, 2, 3)).astype(np.float32)
    conv = rng.normal(size=(STEPS, 2, 1, 2, 3)).astype(np.float32)
    dims = (("w", None), ("stacked", ShampooDimensionNumbers(0, 2)),
            ("conv", ShampooDimensionNumbers((0, 1, 2), 3)))  # fmt: skip
    state, got = _updates(_static("adam", 4, 2, 3, dims=dims), {"w": w, "stacked": stacked,
                                                                 "conv": conv})  # fmt: skip
    assert [f.shape for f in state.factors["w"]] == [(2, 2, 4, 4), (2, 2, 4, 4)]
    assert [f.shape for f in state.factors["stacked"]] == [(2, 2, 1, 4, 4), (2, 2, 1, 3, 3)]
    assert [f.shape for f in state.factors["conv"]] == [(1, 1, 4, 4), (1, 1, 3, 3)]
    rows, cols = [(0, 4), (4, 6)], [(0, 4), (4, 5)]
    pieces = {f"w{i}{j}": w[:, r0:r1, c0:c1] for i, (r0, r1) in enumerate(rows)
              for j, (c0, c1) in enumerate(cols)}  # fmt: skip
    pieces.update({f"s{i}": stacked[:, :, i, :] for i in range(2)})
    pieces["conv"] = conv.reshape(STEPS, 4, 3)
    _, ref = _updates(_static("adam", 4, 2, 3), pieces)
    # float32 noise of the blocked and separate eigendecompositions (5e-7 on AVX2 at updates of
    # ~0.02; the CPU's vector width sets the rounding); a wrong block is off by O(1)
    close = functools.partial(np.testing.assert_allclose, rtol=1e-5, atol=1e-6)
    for i, (r0, r1) in enumerate(rows):
        for j, (c0, c1) in enumerate(cols):
            close(got["w"][:, r0:r1, c0:c1], ref[f"w{i}{j}"])
    for i in range(2):
        close(got["stacked"][:, :, i, :], ref[f"s{i}"])
    close(got["conv"].reshape(STEPS, 4, 3), ref["conv"])


def test_bf16_params_keep_their_dtype_and_follow_float32():
    """bf16 params and gradients: bf16 updates and moments, float32 factors (the alias, traced
    only); the primitive's bf16 updates over 50 steps follow float32 on the same (bf16-rounded)
    gradients."""
    params = jax.tree.map(lambda x: jnp.asarray(x, jnp.bfloat16), params_of())
    tx = shampoo(LR, block_size=4)
    state = jax.eval_shape(tx.init, params)
    inner = state[0]
    assert inner.mu["w"].dtype == inner.nu["w"].dtype == jnp.bfloat16
    assert {f.dtype for f in jax.tree.leaves((inner.factors, inner.roots))} == {
        jnp.dtype(jnp.float32)
    }
    updates, new = jax.eval_shape(tx.update, params, state, params)
    assert all(u.dtype == jnp.bfloat16 for u in jax.tree.leaves(updates))
    assert [x.dtype for x in jax.tree.leaves(new)] == [x.dtype for x in jax.tree.leaves(state)]
    low = jax.tree.map(lambda x: jnp.asarray(x, jnp.bfloat16), _problem(seed=8))
    _, got = _updates(ADAM, low)
    _, ref = _updates(ADAM, jax.tree.map(lambda x: np.asarray(x, np.float32), low))
    for k in ("w", "b"):
        assert got[k].dtype == jnp.bfloat16
        f = np.asarray(got[k], np.float32)
        assert np.isfinite(f).all()
        rel = np.linalg.norm(f - ref[k]) / np.linalg.norm(ref[k])
        assert rel < REL_BF16, (k, rel)


def test_bfloat16_preconditioner_follows_float32():
    grads = _problem(seed=5)
    state, low = _updates((*ADAM[:4], jnp.bfloat16, ()), grads)
    assert {f.dtype for f in jax.tree.leaves((state.factors, state.roots))} == {
        jnp.dtype(jnp.bfloat16)
    }
    _, high = _updates(ADAM, grads)
    assert low["w"].dtype == np.float32 and np.isfinite(low["w"]).all()
    rel = np.linalg.norm(low["w"] - high["w"]) / np.linalg.norm(high["w"])
    assert rel < 0.01, rel  # bf16 factors and roots (3 significant digits): measured 0.2%
    np.testing.assert_array_equal(low["b"], high["b"])  # the 1-D leaf: Adam alone


STEP_TX = scale_by_shampoo(block_size=4, precondition_frequency=3, start_preconditioning_step=2)
STEP = jax.jit(STEP_TX.update)


def _step_grads(t):
    return {"w": jnp.asarray(_problem(seed=6)["w"][t]), "b": jnp.asarray(_problem(seed=6)["b"][t])}


def test_compiles_once_across_refresh_steps_and_keeps_roots_between():
    state = STEP_TX.init(_step_grads(0))
    roots = [state.roots["w"][0]]
    for t in range(8):
        _, state = STEP(_step_grads(t), state)
        roots.append(state.roots["w"][0])
    assert STEP._cache_size() == 1
    changed = [not np.array_equal(roots[t], roots[t - 1]) for t in range(1, 9)]
    # refreshed at steps 2, 5, 8 only (start + k * frequency)
    assert changed == [False, True, False, False, True, False, False, True]


def test_checkpoint_round_trip_is_bit_exact():
    state = STEP_TX.init(_step_grads(0))
    for t in range(3):
        _, state = STEP(_step_grads(t), state)
    restored = load_state_dict(jax.eval_shape(STEP_TX.init, _step_grads(0)), state_dict(state))
    for a, b in zip(jax.tree.leaves(state), jax.tree.leaves(restored), strict=True):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    u1, s1 = STEP(_step_grads(3), state)  # a refresh step
    u2, s2 = STEP(_step_grads(3), restored)
    for a, b in zip(jax.tree.leaves((u1, s1)), jax.tree.leaves((u2, s2)), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_state_layout_does_not_depend_on_the_graft():
    params = {"w": jnp.zeros((10, 7)), "b": jnp.zeros(5)}
    trees = {
        jax.tree.structure(jax.eval_shape(scale_by_shampoo(graft_type=g, b2=0.99).init, params))
        for g in ("adam", "rmsprop", "adagrad", "sgd", "none")
    }
    assert len(trees) == 1


def test_rank_three_leaf_without_dimension_numbers_raises():
    tx = scale_by_shampoo()
    with pytest.raises(ValueError, match=r"shape \(2, 3, 4\) is not a matrix.*weight_dimension"):
        tx.init({"w": jnp.zeros((2, 3, 4))})


INVALID = [
    ({"graft_type": "adamw"}, "shampoo: scale_by_shampoo: graft_type must be one of .*'adam'"),
    ({"b1": 1.0}, r"shampoo: scale_by_shampoo: b1 must be in \[0.0, 1.0\)"),
    ({"b2": 1.5}, r"scale_by_shampoo: b2 must be in \[0.0, 1.0\]"),
    ({"b2": 1.0}, "b2 must be < 1 for graft_type='adam'.*graft_b2"),
    ({"b2": 1.0, "graft_type": "rmsprop", "graft_b2": 1.0}, r"graft_b2 must be in \[0.0, 1.0\)"),
    ({"block_size": 0}, "block_size must be >= 1"),
    ({"precondition_frequency": 0}, "precondition_frequency must be >= 1"),
    ({"start_preconditioning_step": 0}, "start_preconditioning_step must be >= 1"),
    ({"block_size": 2.5}, "block_size must be an integer"),
    ({"matrix_eps": -1e-6}, "matrix_eps must be >= 0"),
    ({"preconditioner_dtype": jnp.int32}, "preconditioner_dtype must be a floating-point"),
    ({"weight_decay": -1.0}, "shampoo: weight_decay must be >= 0"),
    ({"learning_rate": -1.0}, "shampoo: learning_rate must be >= 0"),
]  # fmt: skip


@pytest.mark.parametrize(("kwargs", "message"), INVALID)
def test_invalid_hyperparameters_raise_at_construction(kwargs, message):
    with pytest.raises(ValueError, match=message):
        shampoo(**{"learning_rate": LR, **kwargs})


def test_sum_factors_are_allowed_with_their_own_graft_decay():
    tx = shampoo(LR, b2=1.0, graft_b2=0.999)
    params = {"w": jnp.ones((3, 2))}
    jax.eval_shape(tx.update, params, jax.eval_shape(tx.init, params), params)
