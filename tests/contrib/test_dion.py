"""Dion against a NumPy transcription of the paper's Algorithm 1 (float64 and float32) over 60
float32 steps, the properties the paper states (orthonormal P, the error feedback, the fixed
point U_r V_r^T), batch axes, the AdamW fallback, and the edge cases (zero, constant, huge and
tiny gradients, bf16 params and Q, rank clipping, errors, one compilation, checkpoints)."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gradtx
from gradtx.contrib._dion import (
    DionDimensionNumbers,
    ScaleByDionState,
    _dion_step,
    dion,
    scale_by_dion,
)

STEPS = 60
LR = 0.01


def _problem(scale: float = 1.0, seed: int = 0):
    """Two matrices, one tall in gradtx's (fan_in, fan_out) layout (fan_out < fan_in: Dion
    transposes it) and one wide, a bias, and a fixed gradient sequence."""
    rng = np.random.default_rng(seed)
    params = {
        "w": rng.normal(size=(8, 6)).astype(np.float32),
        "v": rng.normal(size=(5, 9)).astype(np.float32),
        "b": rng.normal(size=(6,)).astype(np.float32),
    }
    grads = {k: (scale * rng.normal(size=(STEPS, *x.shape))).astype(np.float32)
             for k, x in params.items()}  # fmt: skip
    return params, grads


@functools.cache
def _runner(tx):
    """One compiled scan per transformation: params after each step, and the last state."""

    @jax.jit
    def run(params, grads):
        def body(carry, g):
            p, s = carry
            u, s = tx.update(g, s, p)
            p = gradtx.apply_updates(p, u)
            return (p, s), (p, u)

        (_, state), (ps, us) = jax.lax.scan(body, (params, tx.init(params)), grads)
        return ps, us, state

    return run


def _run(tx, params, grads):
    ps, us, state = _runner(tx)(params, grads)
    return jax.tree.map(np.asarray, ps), jax.tree.map(np.asarray, us), state


# -- the paper's Algorithm 1, transcribed in NumPy -------------------------------------------


def _paper_dion(w0, grads, q0, *, lr, mu, wd, eps=1e-8, dtype=np.float64):
    """Centralised Dion (Ahn et al. 2025, Algorithm 1) for one matrix, with the reference
    implementation's orientation (X = W^T of shape (fan_out, fan_in), transposed when wide),
    scale sqrt(fan_out / fan_in) and decoupled weight decay. Plain Householder QR (no sign
    convention): the update P Q^T does not depend on the columns' signs. Returns the params
    (gradtx layout) after each step and the last momentum."""
    x = w0.T.astype(dtype)
    m_buf = np.zeros_like(x)
    q = q0.astype(dtype)
    fan_out, fan_in = x.shape
    transpose = fan_out < fan_in
    out = []
    for g in grads.astype(dtype):
        m_buf = m_buf + g.T
        b = m_buf.T if transpose else m_buf
        p, _ = np.linalg.qr(b @ q)
        r = b.T @ p
        feedback = p @ r.T
        m_buf = m_buf - (1 - mu) * (feedback.T if transpose else feedback)
        q = r / (np.linalg.norm(r, axis=0, keepdims=True) + eps)
        step = p @ q.T
        x = x * (1 - lr * wd) - lr * np.sqrt(fan_out / fan_in) * (step.T if transpose else step)
        out.append(x.T.copy())
    return np.stack(out), m_buf.T


def _dion_states(state):
    """The `ScaleByDionState` inside the alias's state."""
    return state.inner_states["dion"][0]


# Tolerance 1e-5 (absolute, on params of size ~1 after 60 steps of lr 0.01; measured <= 8.3e-7
# against both transcriptions; the momentum M within 1e-5 of its largest entry, measured
# <= 2.7e-7): each step's QR and matmuls round differently in XLA and LAPACK (float32: ~1e-7
# relative per step), and the warm-started Q carries the difference to the next step, where for
# gradients of full rank it is damped, not amplified. The float64 transcription differs by the
# same amount: it is float32's own rounding, not a difference of the rule.
CONFIGS = [
    ("half_rank", {"rank_fraction": 0.5, "mu": 0.95, "weight_decay": 0.01}),
    ("full_rank", {"mu": 0.9, "weight_decay": 0.0}),
    ("rank_1", {"rank": 1, "mu": 0.95, "weight_decay": 0.1}),
]
_TXS = {name: dion(LR, **kw) for name, kw in CONFIGS}


@pytest.mark.across_versions
@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("name", [c[0] for c in CONFIGS])
def test_matches_the_papers_algorithm(name, dtype):
    kw = dict(CONFIGS)[name]
    params, grads = _problem()
    ours, _, state = _run(_TXS[name], params, grads)
    q0 = _dion_states(_TXS[name].init(params)).q
    for k in ("w", "v"):
        ref, ref_m = _paper_dion(
            params[k], grads[k], np.asarray(q0[k]), lr=LR, mu=kw["mu"],
            wd=kw["weight_decay"], dtype=dtype,
        )  # fmt: skip
        np.testing.assert_allclose(ours[k], ref, rtol=0, atol=1e-5, err_msg=k)
        m = np.asarray(_dion_states(state).mu[k])
        np.testing.assert_allclose(m, ref_m, rtol=0, atol=1e-5 * np.abs(ref_m).max(), err_msg=k)
        assert np.abs(ours[k][-1] - params[k]).max() > 0.05  # it moved


def test_one_dimensional_leaves_get_adamw():
    """The bias goes to AdamW (b2 = 0.95, the reference's), the same as `optax.adamw`."""
    params, grads = _problem()
    ours, _, _ = _run(_TXS["half_rank"], params, grads)
    ref = optax.adamw(LR, b1=0.9, b2=0.95, eps=1e-8, weight_decay=0.0)
    p, s = jnp.asarray(params["b"]), ref.init(jnp.asarray(params["b"]))
    for t in range(STEPS):
        u, s = ref.update(jnp.asarray(grads["b"][t]), s, p)
        p = optax.apply_updates(p, u)
        np.testing.assert_allclose(ours["b"][t], np.asarray(p), rtol=0, atol=1e-6)


# -- properties the paper states ---------------------------------------------------------------


_jitted_dion_step = jax.jit(lambda b, q, mu: _dion_step(b, q, mu, 1e-8))


def _random_step(shape=(3, 9, 5), r=3, mu=0.7, seed=0):
    rng = np.random.default_rng(seed)
    b = jnp.asarray(rng.normal(size=shape), jnp.float32)
    q = jnp.asarray(rng.normal(size=(*shape[:-2], shape[-1], r)), jnp.float32)
    return b, (*_jitted_dion_step(b, q, mu), mu)


def test_p_is_orthonormal_and_q_column_normalised():
    _, (p, _, q, _) = _random_step()
    eye = np.broadcast_to(np.eye(p.shape[-1]), (p.shape[0], p.shape[-1], p.shape[-1]))
    np.testing.assert_allclose(np.asarray(jnp.swapaxes(p, -1, -2) @ p), eye, atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(np.asarray(q), axis=-2), 1.0, atol=1e-5)


def test_error_feedback_keeps_what_was_not_applied():
    """M = B - (1 - mu) P P^T B: the unapplied part (I - P P^T) B stays whole, the applied part
    P^T B is decayed by mu."""
    b, (p, m, _, mu) = _random_step()
    b, p, m = (np.asarray(x, np.float64) for x in (b, p, m))
    pt = np.swapaxes(p, -1, -2)
    np.testing.assert_allclose(pt @ m, mu * (pt @ b), atol=1e-5)
    proj = np.eye(b.shape[-2]) - p @ pt
    np.testing.assert_allclose(proj @ m, proj @ b, atol=1e-5)


def _polar(g, r):
    """sqrt(fan_out / fan_in) U_r V_r^T of a gradtx-layout matrix g (fan_in, fan_out)."""
    u, _, vt = np.linalg.svd(g.astype(np.float64), full_matrices=False)
    return np.sqrt(g.shape[1] / g.shape[0]) * (u[:, :r] @ vt[:r])


_FULL_RANK_MU0 = scale_by_dion(mu=0.0)


def test_constant_gradient_converges_to_the_polar_factor():
    """At full rank with mu = 0 the error feedback is empty (P P^T B = B, so M = 0) and a
    constant G is met afresh each step: the warm-started power iteration is orthogonal iteration
    on G^T G, Q converges to the right singular vectors, P to the left ones, and the update to
    sqrt(n_out / n_in) U V^T, Muon's direction (the paper's fixed point). Singular values 6..1,
    well separated, so 60 steps are plenty. (Below full rank the kept residual accumulates, so B
    is not constant and this is not the fixed point.)"""
    rng = np.random.default_rng(4)
    u, _ = np.linalg.qr(rng.normal(size=(8, 6)))
    v, _ = np.linalg.qr(rng.normal(size=(6, 6)))
    g = (u * np.arange(6.0, 0.0, -1.0)) @ v.T
    grads = np.broadcast_to(g.astype(np.float32), (STEPS, 8, 6))
    _, ups, state = _run(_FULL_RANK_MU0, jnp.zeros((8, 6)), grads)
    np.testing.assert_allclose(ups[-1], _polar(g, 6), atol=1e-4)
    assert np.abs(np.asarray(state.mu)).max() < 1e-4
    assert np.abs(ups[0] - _polar(g, 6)).max() > 1e-2  # a random Q_0 is not the fixed point


# -- batch axes, fallback and layout -------------------------------------------------------------


_BATCHED = scale_by_dion(rank=2, weight_dimension_numbers=DionDimensionNumbers(1, 2))
_SLICE = scale_by_dion(rank=2)


@functools.cache
def _scan_from(tx):
    @jax.jit
    def run(state, grads):
        def body(s, g):
            u, s = tx.update(g, s)
            return s, u

        return jax.lax.scan(body, state, grads)

    return run


def test_batch_axis_equals_per_slice_runs():
    """A (3, 6, 4) leaf with a batch axis 0 (stacked layers): each slice runs its own Dion with
    its slice of Q; Q's state shape is (3, min(6, 4), 2)."""
    rng = np.random.default_rng(5)
    grads = jnp.asarray(rng.normal(size=(20, 3, 6, 4)), jnp.float32)
    state = _BATCHED.init(jnp.zeros((3, 6, 4)))
    assert state.q.shape == (3, 4, 2) and state.mu.shape == (3, 6, 4)
    _, ups = _scan_from(_BATCHED)(state, grads)
    for i in range(3):
        s = ScaleByDionState(state.count, jnp.zeros((6, 4)), state.q[i])
        _, ref = _scan_from(_SLICE)(s, grads[:, i])
        np.testing.assert_allclose(np.asarray(ups[:, i]), np.asarray(ref), atol=1e-6)
    assert not np.allclose(np.asarray(ups[:, 0]), np.asarray(ups[:, 1]))


def test_four_dimensional_leaf_with_grouped_axes():
    """A (2, 3, 4, 5) conv-like leaf: fan-in axes (0, 2), fan-out axis 3, batch axis 1. It
    equals a stack of (8, 5) matrices, axes moved by hand."""
    dims = DionDimensionNumbers(reduction_axis=(0, 2), output_axis=3)
    tx4 = scale_by_dion(rank=3, weight_dimension_numbers=dims)
    tx3 = scale_by_dion(rank=3, weight_dimension_numbers=DionDimensionNumbers(1, 2))
    g = jnp.asarray(np.random.default_rng(6).normal(size=(2, 3, 4, 5)), jnp.float32)
    s4 = tx4.init(g)
    assert s4.q.shape == (3, 5, 3)
    u4, _ = jax.jit(tx4.update)(g, s4)
    g3 = jnp.transpose(g, (1, 0, 2, 3)).reshape(3, 8, 5)
    u3, _ = jax.jit(tx3.update)(g3, ScaleByDionState(s4.count, jnp.zeros((3, 8, 5)), s4.q))
    expected = jnp.transpose(u3.reshape(3, 2, 4, 5), (1, 0, 2, 3))
    np.testing.assert_allclose(np.asarray(u4), np.asarray(expected), atol=1e-6)


def test_alias_routes_leaves_by_dimension_numbers():
    """Without dimension numbers 2-D leaves go to Dion, 1-D ones to AdamW, and a 3-D leaf whose
    names say nothing is an error naming it; routed to the fallback it goes to AdamW; with a
    tree of dimension numbers it goes to Dion with its batch axis."""
    params = {"w": jnp.ones((4, 3)), "e": jnp.ones((2, 4, 3)), "b": jnp.ones(3)}
    with pytest.raises(ValueError, match=r"'e' \(shape \(2, 4, 3\)\).*infer_matrix_axes"):
        dion(0.1).init(params)
    fallback = gradtx.contrib.infer_matrix_axes({"e": None})
    state = jax.eval_shape(dion(0.1, weight_dimension_numbers=fallback).init, params)
    q = _dion_states(state).q
    assert set(jax.tree.leaves(jax.tree.map(jnp.shape, q))) == {3}  # only "w": (3, 3)
    dims = {"w": DionDimensionNumbers(), "e": DionDimensionNumbers(1, 2), "b": None}
    state = jax.eval_shape(dion(0.1, rank=2, weight_dimension_numbers=dims).init, params)
    assert _dion_states(state).q["e"].shape == (2, 3, 2)
    assert _dion_states(state).q["w"].shape == (3, 2)


# -- edge cases ------------------------------------------------------------------------------------


_PRIMITIVE = scale_by_dion(rank=3)


def _primitive(grads):
    return _scan_from(_PRIMITIVE)(_PRIMITIVE.init(grads[0]), grads)


@functools.cache
def _step(tx):
    return jax.jit(tx.update)


def test_zero_gradients_give_zero_updates():
    state, ups = _primitive(jnp.zeros((10, 8, 6)))
    assert (np.asarray(ups) == 0).all() and (np.asarray(state.mu) == 0).all()
    assert np.isfinite(np.asarray(state.q)).all()
    np.testing.assert_allclose(np.linalg.norm(np.asarray(state.q), axis=0), 1.0, atol=1e-6)


@pytest.mark.parametrize("scale", [1e30, 1e-30], ids=["huge", "tiny"])
def test_huge_and_tiny_gradients(scale):
    """Dion's direction is scale-free: huge gradients give the unit run's updates (the column
    norms do not overflow); tiny ones are finite and not larger (eps = 1e-8 in the column
    normalisation then dominates, as in the reference)."""
    g = jnp.asarray(np.random.default_rng(7).normal(size=(10, 8, 6)), jnp.float32)
    _, unit = _primitive(g)
    state, ups = _primitive(g * scale)
    assert np.isfinite(np.asarray(ups)).all() and np.isfinite(np.asarray(state.q)).all()
    if scale > 1:
        np.testing.assert_allclose(np.asarray(ups), np.asarray(unit), atol=1e-4)
    else:
        assert np.abs(np.asarray(ups)).max() <= np.abs(np.asarray(unit)).max() + 1e-6


def test_constant_rank_one_gradients_stay_finite():
    """A rank-1 gradient a 1^T and rank 3: P's extra columns complete an orthonormal basis, and
    R's extra columns B^T P_j = 1 (a . P_j) are rounding noise along 1, which the column
    normalisation makes unit vectors (eps = 1e-8 is below the noise), as in the reference: every
    column of Q is +-1/sqrt(6), so the update is rank 1, (P_1 +- P_2 +- P_3) 1^T scaled, with
    norm up to sqrt(3) times Muon's. Nothing is NaN, the row space is the gradient's, and it is
    still a descent direction (a . P_j = 0 for j > 1)."""
    g = np.outer(np.arange(1.0, 9.0), np.ones(6)).astype(np.float32)
    state, ups = _primitive(jnp.broadcast_to(g, (10, 8, 6)))
    ups = np.asarray(ups)
    assert np.isfinite(ups).all() and np.isfinite(np.asarray(state.mu)).all()
    scale = np.sqrt(6 / 8)
    assert (np.linalg.norm(ups, ord=2, axis=(1, 2)) <= scale * np.sqrt(3) + 1e-4).all()
    np.testing.assert_allclose(ups, np.broadcast_to(ups[..., :1], ups.shape), atol=1e-5)
    assert (np.einsum("tij,ij->t", ups, g) > 0).all()


_BF16_Q = scale_by_dion(rank=3, preconditioner_dtype=jnp.bfloat16)


def test_bf16_params_and_bf16_q():
    g = jnp.asarray(np.random.default_rng(8).normal(size=(8, 6)), jnp.float32)
    s32 = _PRIMITIVE.init(g)
    u32, _ = _step(_PRIMITIVE)(g, s32)
    # bf16 params and gradients: bf16 momentum and updates, close to the float32 ones.
    s16 = _PRIMITIVE.init(g.astype(jnp.bfloat16))
    assert s16.mu.dtype == jnp.bfloat16 and s16.q.dtype == jnp.float32
    u16, s16 = _step(_PRIMITIVE)(g.astype(jnp.bfloat16), s16)
    assert u16.dtype == jnp.bfloat16 and s16.mu.dtype == jnp.bfloat16
    np.testing.assert_allclose(np.asarray(u16, np.float32), np.asarray(u32), atol=5e-2)
    # Q stored in bf16: the dtype is kept through updates, the updates stay close.
    sq = _BF16_Q.init(g)
    assert sq.q.dtype == jnp.bfloat16
    state, ups = _scan_from(_BF16_Q)(sq, jnp.broadcast_to(g, (10, 8, 6)))
    _, ref = _scan_from(_PRIMITIVE)(s32, jnp.broadcast_to(g, (10, 8, 6)))
    assert state.q.dtype == jnp.bfloat16 and ups.dtype == jnp.float32
    np.testing.assert_allclose(np.asarray(ups), np.asarray(ref), atol=5e-2)


def test_rank_above_min_dimension_is_clipped():
    """rank=100 on an (8, 6) matrix is the full rank 6: the same initial Q as full rank (the
    update reads the rank from Q's shape only, so the same updates follow)."""
    g = jnp.zeros((8, 6))
    big, full = scale_by_dion(rank=100).init(g), scale_by_dion().init(g)
    assert big.q.shape == full.q.shape == (6, 6)
    np.testing.assert_array_equal(np.asarray(big.q), np.asarray(full.q))


@pytest.mark.parametrize(
    ("kwargs", "shape", "q_shape"),
    [
        ({"rank_fraction": 0.3}, (10, 20), (10, 3)),  # ceil(0.3 * 10) = 3, not 4
        ({"rank_fraction": 0.3, "rank_multiple_of": 4}, (8, 6), (6, 4)),
        ({"rank_fraction": 0.01}, (8, 6), (6, 1)),  # at least 1
        ({"rank": 2}, (20, 10), (10, 2)),  # Q on the smaller side
    ],
)
def test_rank_rule(kwargs, shape, q_shape):
    state = jax.eval_shape(scale_by_dion(**kwargs).init, jax.ShapeDtypeStruct(shape, jnp.float32))
    assert state.q.shape == q_shape and state.mu.shape == shape


def test_seed_and_abstract_init():
    g = jnp.zeros((8, 6))
    q0 = _PRIMITIVE.init(g).q
    abstract = _PRIMITIVE.init(jax.ShapeDtypeStruct((8, 6), jnp.float32)).q
    np.testing.assert_array_equal(np.asarray(q0), np.asarray(abstract))
    other = scale_by_dion(rank=3, seed=1).init(g).q
    assert not np.allclose(np.asarray(q0), np.asarray(other))
    keyed = scale_by_dion(rank=3, seed=jax.random.key(0)).init(g).q
    np.testing.assert_array_equal(np.asarray(q0), np.asarray(keyed))


def test_checkpoint_round_trip_is_bit_exact():
    params, grads = _problem()
    tx = _TXS["half_rank"]
    _, _, state = _run(tx, params, grads)
    restored = gradtx.checkpoint.load_state_dict(
        tx.init(params), gradtx.checkpoint.state_dict(state)
    )
    for a, b in zip(jax.tree.leaves(state), jax.tree.leaves(restored), strict=True):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_jit_compiles_once():
    traces = []
    tx = scale_by_dion(rank=2, mu=0.9)

    @jax.jit
    def step(g, s):
        traces.append(1)
        return tx.update(g, s)

    g = jnp.ones((8, 6))
    s = tx.init(g)
    for t in range(3):
        _, s = step(g * (t + 1.0), s)
    assert len(traces) == 1
    assert int(s.count) == 3 and s.count.dtype == jnp.int32


def test_count_saturates():
    g = jnp.ones((8, 6))
    s = _PRIMITIVE.init(g)._replace(count=jnp.asarray(np.iinfo(np.int32).max, jnp.int32))
    _, s = _step(_PRIMITIVE)(g, s)
    assert int(s.count) == np.iinfo(np.int32).max


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"mu": 1.0}, "mu must be in [0.0, 1.0)"),
        ({"mu": -0.1}, "mu must be in"),
        ({"eps": -1.0}, "eps must be >= 0"),
        ({"rank_fraction": 0.0}, "rank_fraction must be in (0.0, 1.0]"),
        ({"rank_fraction": 1.5}, "rank_fraction must be in"),
        ({"rank": 0}, "rank must be >= 1"),
        ({"rank": 2.5}, "rank must be an integer"),
        ({"rank": 4, "rank_fraction": 0.5}, "give one of them"),
        ({"rank_multiple_of": 0}, "rank_multiple_of must be >= 1"),
        ({"seed": "x"}, "seed must be an integer seed or a PRNG key"),
        ({"preconditioner_dtype": jnp.int32}, "preconditioner_dtype"),
        ({"mu_dtype": jnp.int8}, "mu_dtype"),
    ],
)
def test_construction_errors(kwargs, fragment):
    with pytest.raises(ValueError, match=None) as info:
        scale_by_dion(**kwargs)
    assert fragment in str(info.value)
    with pytest.raises(ValueError) as info:
        dion(0.1, **kwargs)
    assert str(info.value).startswith("dion") and fragment in str(info.value)


def test_alias_argument_errors_name_the_alias():
    with pytest.raises(ValueError, match="dion: weight_decay must be >= 0"):
        dion(0.1, weight_decay=-1.0)
    with pytest.raises(ValueError, match="adam_weight_decay"):
        dion(0.1, adam_weight_decay=-1.0)


def test_non_matrix_leaf_without_dimension_numbers_is_an_error():
    with pytest.raises(ValueError, match="not a matrix; give it DionDimensionNumbers"):
        scale_by_dion().init({"b": jnp.zeros(3)})
    with pytest.raises(ValueError, match="out of range"):
        scale_by_dion(weight_dimension_numbers=DionDimensionNumbers(0, 3)).init(jnp.zeros((2, 3)))
