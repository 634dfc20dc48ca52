"""SOAP against `pytorch_optimizer.SOAP` (4.1.0) over 60 float32 steps, AdamW for the vectors,
batch axes against per-slice runs, the state layout, one compilation across the basis refresh,
checkpoints, and the edge cases (zero, constant, huge and tiny gradients, bf16 params and
factors, errors)."""

from __future__ import annotations

import functools

import jax
import jax.extend
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gradtx
from gradtx.contrib._soap import ScaleBySoapState, SoapDimensionNumbers, scale_by_soap, soap

torch = pytest.importorskip("torch")
pytorch_optimizer = pytest.importorskip("pytorch_optimizer")

STEPS = 60
LR = 3e-3
SQUARE = {"w": (6, 6), "v": (5, 5), "b": (6,)}
# With max_precond_dim=7 the (8, 6) leaf's 8 x 8 side is not rotated (see REFERENCE).
WITH_LONG_SIDE = {**SQUARE, "t": (8, 6)}


def _problem(shapes, seed: int = 0):
    """Params and a gradient sequence. Matrix gradients are `A N B` (N standard normal, A and B
    fixed diagonal scalings), so that the factors L and R have well separated eigenvalues; the
    scale of each step varies so that the second moment moves."""
    rng = np.random.default_rng(seed)
    params = {k: rng.normal(size=s).astype(np.float32) for k, s in shapes.items()}
    grads = {}
    for k, s in shapes.items():
        scale = np.exp(0.5 * rng.normal(size=STEPS))
        if len(s) == 2:
            a, b = np.diag(np.linspace(0.3, 2.0, s[0])), np.diag(np.linspace(0.5, 1.5, s[1]))
            seq = [scale[t] * (a @ rng.normal(size=s) @ b) for t in range(STEPS)]
        else:
            seq = [scale[t] * rng.normal(size=s) for t in range(STEPS)]
        grads[k] = np.stack(seq).astype(np.float32)
    return params, grads


def _torch_trajectory(params, grads, **kwargs):
    tensors = {k: torch.nn.Parameter(torch.tensor(v)) for k, v in params.items()}
    opt = pytorch_optimizer.SOAP(list(tensors.values()), **kwargs)
    out: dict[str, list] = {k: [] for k in params}
    for t in range(STEPS):
        for k, p in tensors.items():
            p.grad = torch.tensor(grads[k][t])
        opt.step()
        for k, p in tensors.items():
            out[k].append(p.detach().numpy().copy())
    return {k: np.stack(v) for k, v in out.items()}


def _max_diff(a, b) -> float:
    return max(float(np.max(np.abs(a[k] - b[k]))) for k in a)


# Tolerance 1e-5 (absolute, on params of size ~1 after 60 steps; measured <= 1e-6): float32
# rounding of the matrix products, eigh and QR. The eigenvectors are only defined up to sign,
# which SOAP's update is invariant to (a flipped column flips G' and M' alike, V is squared, and
# Householder QR of PQ is unchanged by flipped columns of Q); their order is fixed by the
# decreasing eigenvalues. The problems are square matrices with distinct spectra (and a side
# left unrotated by max_precond_dim): the first factor of a non-square m x n matrix,
# G_1 G_1^T, has a null space of dimension |m - n| whose eigenvectors are arbitrary (each
# LAPACK call picks them from roundoff), so there the two libraries take different, equally
# valid, bases (see test_non_square_matrices_use_a_valid_basis).
REFERENCE = [
    {},
    {"b1": 0.9, "b2": 0.99, "shampoo_beta": 0.9, "eps": 1e-3, "precondition_frequency": 3},
    {
        "max_precond_dim": 7,
        "precondition_frequency": 2,
        "normalize_gradient": True,
        "correct_bias": False,
    },
]

TORCH_NAMES = {"max_precond_dim": "max_precondition_dim"}


def _torch_kwargs(kwargs):
    out = {TORCH_NAMES.get(k, k): v for k, v in kwargs.items() if k not in ("b1", "b2")}
    if "b1" in kwargs:
        out["betas"] = (kwargs["b1"], kwargs["b2"])
    return out


def _scaled(**kwargs):
    return gradtx.chain(scale_by_soap(**kwargs), gradtx.scale_by_learning_rate(LR))


def _trajectory(tx, params, grads):
    """The params after each step: a jitted step in a loop (not `torch_reference`'s
    `lax.scan`, which compiles SOAP's step ~6x slower on CPU)."""
    init, step = jax.jit(tx.init), jax.jit(tx.update)
    p, s, out = params, init(params), []
    for t in range(len(next(iter(grads.values())))):
        u, s = step({k: v[t] for k, v in grads.items()}, s, p)
        p = gradtx.apply_updates(p, u)
        out.append(p)
    return jax.tree.map(lambda *x: np.stack(x), *out)


@pytest.mark.across_versions
@pytest.mark.parametrize("kwargs", REFERENCE, ids=lambda k: ",".join(k) or "defaults")
def test_scale_by_soap_matches_pytorch_optimizer(kwargs):
    # Every leaf through scale_by_soap, the vector too: the reference's rule for vectors
    # (plain Adam with the first step skipped) is scale_by_soap's.
    params, grads = _problem(WITH_LONG_SIDE if "max_precond_dim" in kwargs else SQUARE)
    ours = _trajectory(_scaled(**kwargs), params, grads)
    ref = _torch_trajectory(params, grads, lr=LR, weight_decay=0.0, **_torch_kwargs(kwargs))
    assert _max_diff(ours, ref) < 1e-5
    assert _max_diff(ref, {k: np.broadcast_to(v, ref[k].shape) for k, v in params.items()}) > 1e-2


def test_non_square_matrices_use_a_valid_basis():
    """Where the basis is not unique (the null space of a rank-deficient factor), ours and the
    reference's differ, but both are orthonormal eigenbases and both train alike."""
    _, grads = _problem({"w": (8, 6)}, seed=3)
    states, u = _runner(precondition_frequency=3)(jnp.asarray(grads["w"][:12]), jnp.zeros((8, 6)))
    # After the first step, the bases diagonalise the first factors, eigenvalues decreasing.
    first = _at(states, 0)
    for q, f in zip(first.bases, first.factors, strict=True):
        d = np.asarray(q.T @ f @ q)
        np.testing.assert_allclose(d - np.diag(np.diag(d)), 0.0, atol=1e-4 * np.abs(d).max())
        assert np.all(np.diff(np.diag(d)) <= 1e-5 * np.abs(d).max())
    # After refreshes (steps 4, 7, 10), still orthonormal.
    for q in _at(states, -1).bases:
        np.testing.assert_allclose(q.T @ q, np.eye(q.shape[0]), atol=1e-5)
    assert np.all(np.isfinite(u)) and np.all(np.asarray(u[0]) == 0)


def test_soap_alias_matches_pytorch_optimizer_with_decay():
    # The alias's decay is AdamW's -lr * lambda * W_{t-1} from the first step on; the reference
    # skips the first step (decay included) and then multiplies the updated weight by
    # 1 - lr * lambda. The trajectories differ by the first step's decay, lr * lambda * |W_0|
    # (<= 7.2e-5 here; measured 7.0e-5), plus O(lr^2 lambda) per step.
    params, grads = _problem({"w": (6, 6)}, seed=4)
    ours = _trajectory(soap(LR, weight_decay=0.01), params, grads)
    ref = _torch_trajectory(params, grads, lr=LR, weight_decay=0.01)
    first_decay = LR * 0.01 * np.abs(params["w"]).max()
    assert _max_diff(ours, ref) < first_decay + 1e-5


def test_decay_is_adamw_s_and_acts_from_the_first_step():
    """The reference multiplies the updated weight by (1 - lr lambda) and skips step 1; the
    alias decays W_{t-1} by lr lambda at every step (a zero SOAP update: pure decay)."""
    params = {"w": np.full((3, 3), 2.0, np.float32)}
    zeros = {"w": np.zeros((3, 3, 3), np.float32)}
    p = _trajectory(soap(0.1, weight_decay=0.5), params, zeros)
    np.testing.assert_allclose(p["w"][:, 0, 0], 2.0 * (1 - 0.1 * 0.5) ** np.arange(1, 4), rtol=1e-6)


def test_vectors_and_scalars_fall_back_to_adamw():
    params, grads = _problem({"b": (6,), "c": (3,)}, seed=5)
    params["s"] = np.float32(0.5)
    grads["s"] = np.linspace(-1, 1, STEPS).astype(np.float32)
    ours = _trajectory(soap(LR, weight_decay=0.01), params, grads)
    ref = _trajectory(optax.adamw(LR, b1=0.95, b2=0.95, eps=1e-8, weight_decay=0.01), params, grads)
    assert _max_diff(ours, ref) < 1e-6


def test_precondition_1d_equals_a_row_matrix():
    """A vector with `precondition_1d` is a (1, k) matrix (its 1 x 1 side is a sign)."""
    rng = np.random.default_rng(6)
    g = rng.normal(size=(20, 5)).astype(np.float32)
    vec = _tx(precondition_frequency=3, precondition_1d=True)
    row = _tx(precondition_frequency=3)
    assert [f.shape for f in vec.init(jnp.zeros(5)).factors] == [(5, 5)]
    _, u_vec = _scan(vec, jnp.asarray(g), jnp.zeros(5))
    _, u_row = _scan(row, jnp.asarray(g)[:, None], jnp.zeros((1, 5)))
    np.testing.assert_allclose(u_vec, u_row[:, 0], atol=1e-5)


def test_batch_axes_equal_per_slice_runs():
    """A (5, 3, 4) leaf with the matrix on axes (0, 2): axis 1 is a batch axis (e.g. experts),
    each slice gets its own factors and bases, exactly as three separate (5, 4) runs."""
    rng = np.random.default_rng(7)
    g = rng.normal(size=(12, 5, 3, 4)).astype(np.float32)
    dims = SoapDimensionNumbers(reduction_axis=0, output_axis=-1)
    batched = scale_by_soap(precondition_frequency=3, weight_dimension_numbers=dims)
    single = scale_by_soap(precondition_frequency=3)
    state = batched.init(jnp.zeros((5, 3, 4)))
    assert [f.shape for f in state.factors] == [(3, 5, 5), (3, 4, 4)]
    assert [q.shape for q in state.bases] == [(3, 5, 5), (3, 4, 4)]
    assert state.mu.shape == state.nu.shape == (5, 3, 4)
    states, u = _scan(batched, jnp.asarray(g), jnp.zeros((5, 3, 4)))
    # The three slices as one (3, 12, 5, 4) run of the plain matrix rule, vmapped.
    runs = [_scan(single, jnp.asarray(g[:, :, i]), jnp.zeros((5, 4))) for i in range(3)]
    slice_states = jax.tree.map(lambda *x: np.stack(x), *(r[0] for r in runs))
    u_slices = np.stack([r[1] for r in runs])
    np.testing.assert_allclose(np.moveaxis(np.asarray(u), 2, 0), u_slices, atol=1e-5)
    for batched_f, slice_f in zip(states.factors, slice_states.factors, strict=True):
        np.testing.assert_allclose(np.moveaxis(np.asarray(batched_f), 1, 0), slice_f, rtol=1e-5)


def test_leaves_of_rank_above_two_need_dimension_numbers():
    with pytest.raises(ValueError, match=r"scale_by_soap: .*\(2, 3, 4\).*SoapDimensionNumbers"):
        scale_by_soap().init({"k": jnp.zeros((2, 3, 4))})
    # The alias refuses one whose names say nothing (naming it and the override), sends it to
    # AdamW when told so, and to SOAP when told which axes form the matrix.
    params = {"k": jnp.zeros((2, 3, 4)), "w": jnp.zeros((3, 4))}
    with pytest.raises(ValueError, match=r"'k' \(shape \(2, 3, 4\)\).*infer_matrix_axes"):
        soap(LR).init(params)
    fallback = gradtx.contrib.infer_matrix_axes({"k": None})
    halves = soap(LR, weight_dimension_numbers=fallback).init(params)[0].inner_states
    assert halves["adam"].mu["k"].shape == (2, 3, 4)
    assert [f.shape for f in halves["soap"].factors["w"]] == [(3, 3), (4, 4)]
    dims = {"k": SoapDimensionNumbers(1, 2), "w": SoapDimensionNumbers()}
    halves = soap(LR, weight_dimension_numbers=dims).init(params)[0].inner_states
    assert [f.shape for f in halves["soap"].factors["k"]] == [(2, 3, 3), (2, 4, 4)]


def test_state_layout():
    params = {
        "w": jnp.zeros((6, 4)),
        "tall": jnp.zeros((20, 3)),
        "b": jnp.zeros(5),
        "s": jnp.zeros(()),
    }
    state = scale_by_soap(max_precond_dim=10).init(params)
    assert isinstance(state, ScaleBySoapState)
    assert state.count.dtype == jnp.int32
    shapes = lambda tree: {k: [x.shape for x in v] for k, v in tree.items()}
    assert shapes(state.factors) == {
        "w": [(6, 6), (4, 4)],
        "tall": [(0, 0), (3, 3)],
        "b": [(0, 0)],
        "s": [],
    }
    assert shapes(state.bases) == shapes(state.factors)
    for buf in (state.mu, state.nu):
        assert jax.tree.map(jnp.shape, buf) == jax.tree.map(jnp.shape, params)
    assert all(f.dtype == jnp.float32 for f in jax.tree.leaves((state.factors, state.bases)))
    abstract = jax.eval_shape(
        scale_by_soap(max_precond_dim=10).init,
        jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), params),
    )
    assert jax.tree.structure(abstract) == jax.tree.structure(state)


def _primitives_outside_cond(jaxpr) -> set[str]:
    names = set()
    for eqn in jaxpr.eqns:
        names.add(eqn.primitive.name)
        if eqn.primitive.name == "cond":
            continue
        for sub in jax.extend.core.jaxprs_in_params(eqn.params):
            names |= _primitives_outside_cond(sub)
    return names


def test_compiles_once_and_decomposes_only_in_the_refresh_branch():
    tx = scale_by_soap(precondition_frequency=2)
    params = {"w": jnp.zeros((4, 3))}
    step = jax.jit(tx.update)
    state = tx.init(params)
    rng = np.random.default_rng(8)
    for _ in range(6):  # the first step (eigh), refreshes at steps 3 and 5 (QR), plain steps
        _, state = step({"w": jnp.asarray(rng.normal(size=(4, 3)), jnp.float32)}, state)
    assert step._cache_size() == 1
    assert int(state.count) == 6
    jaxpr = jax.make_jaxpr(tx.update)(params, tx.init(params)).jaxpr
    outside = _primitives_outside_cond(jaxpr)
    assert "cond" in outside
    assert not {"eigh", "geqrf", "householder_product", "qr"} & outside, outside


def test_checkpoint_round_trip_is_bit_exact(tmp_path):
    tx = soap(LR, precondition_frequency=2, preconditioner_dtype=jnp.bfloat16)
    params, grads = _problem({"w": (5, 4), "b": (4,)}, seed=9)
    step = jax.jit(tx.update)
    state = tx.init(params)
    for t in range(4):
        _, state = step({k: v[t] for k, v in grads.items()}, state, params)
    path = gradtx.checkpoint.save(tmp_path / "soap.gtx", state)
    restored = gradtx.checkpoint.load(path, tx.init(params))
    for a, b in zip(jax.tree.leaves(state), jax.tree.leaves(restored), strict=True):
        assert a.dtype == b.dtype and np.array_equal(np.asarray(a), np.asarray(b))
    g = {k: v[4] for k, v in grads.items()}
    ua, _ = step(g, state, params)
    ub, _ = step(g, restored, params)
    assert all(np.array_equal(ua[k], ub[k]) for k in ua)


@functools.cache
def _jitted(tx):
    return jax.jit(tx.init), jax.jit(tx.update)


def _scan(tx, g_seq, params):
    """The states after each step and the updates of `tx` over the gradients `g_seq`: one
    jitted step per transformation and shapes, called in a loop (a `lax.scan` of SOAP's step
    compiles ~6x slower on CPU)."""
    init, step = _jitted(tx)
    state, states, updates = init(params), [], []
    for g in g_seq:
        u, state = step(g, state)
        states.append(state)
        updates.append(u)
    stack = lambda xs: jax.tree.map(lambda *x: np.stack(x), *xs)
    return stack(states), np.stack(updates)


@functools.cache
def _tx(**kwargs):
    """One transformation per configuration, so that `_scan` compiles once for each."""
    return scale_by_soap(**kwargs)


def _runner(**kwargs):
    return functools.partial(_scan, _tx(**kwargs))


def _at(states, t):
    return jax.tree.map(lambda x: x[t], states)


def test_zero_gradients_give_zero_updates():
    states, u = _runner(precondition_frequency=2, eps=1e-4)(jnp.zeros((8, 4, 4)), jnp.zeros((4, 4)))
    assert np.all(np.asarray(u) == 0)
    assert all(np.all(np.isfinite(x)) for x in jax.tree.leaves(states))


def test_constant_gradients_give_the_polar_factor():
    # A constant G = U S V^T: the bases are U and V, the rotated gradient is S, and Adam's
    # bias-corrected m / sqrt(v) on it is 1 on the diagonal, so u = U V^T (Muon's direction),
    # through the refreshes (steps 3, 5, 7) too. eps = 1e-4 hides the rotated gradient's
    # roundoff-sized off-diagonal entries (Adam would take their signs); S is 2 ... 1.1.
    rng = np.random.default_rng(10)
    a, b = (np.linalg.qr(rng.normal(size=(4, 4)))[0] for _ in range(2))
    g = (a @ np.diag([2.0, 1.7, 1.4, 1.1]) @ b.T).astype(np.float32)
    _, u = _runner(precondition_frequency=2, eps=1e-4)(
        jnp.broadcast_to(jnp.asarray(g), (8, 4, 4)), jnp.zeros((4, 4))
    )
    left, _, right = np.linalg.svd(g)
    np.testing.assert_allclose(u[1:], np.broadcast_to(left @ right, (7, 4, 4)), atol=5e-3)


@pytest.mark.parametrize("scale", [1e15, 1e-12])
def test_huge_and_tiny_gradients_are_scale_invariant(scale):
    # SOAP's direction does not depend on the gradient's scale (eps = 0): L and R scale by
    # c^2 (same eigenvectors), M' by c, sqrt(V) by c.
    rng = np.random.default_rng(11)
    g = jnp.asarray(rng.normal(size=(8, 4, 4)), jnp.float32)
    run = _runner(precondition_frequency=2, eps=0.0)
    _, u = run(g, jnp.zeros((4, 4)))
    _, u_scaled = run(g * scale, jnp.zeros((4, 4)))
    assert np.all(np.isfinite(u_scaled))
    np.testing.assert_allclose(u_scaled, u, atol=1e-3)


def test_bf16_params_keep_bf16_updates_and_moments():
    tx = _tx(precondition_frequency=2)
    params = jnp.zeros((4, 4), jnp.bfloat16)
    g = jnp.asarray(np.random.default_rng(12).normal(size=(8, 4, 4)), jnp.float32)
    states, u = _scan(tx, g.astype(jnp.bfloat16), params)
    _, u32 = _scan(tx, g, params.astype(jnp.float32))
    state = _at(states, -1)
    assert u.dtype == state.mu.dtype == state.nu.dtype == jnp.bfloat16
    assert state.factors[0].dtype == state.bases[0].dtype == jnp.float32
    np.testing.assert_allclose(u.astype(jnp.float32), u32, atol=0.1)


def test_bfloat16_preconditioner():
    tx = _tx(precondition_frequency=2, preconditioner_dtype=jnp.bfloat16)
    tx32 = _tx(precondition_frequency=2)
    params = jnp.zeros((4, 4))
    g = jnp.asarray(np.random.default_rng(13).normal(size=(8, 4, 4)), jnp.float32)
    states, u = _scan(tx, g, params)
    _, u32 = _scan(tx32, g, params)
    state = _at(states, -1)
    assert u.dtype == jnp.float32
    assert all(x.dtype == jnp.bfloat16 for x in (*state.factors, *state.bases))
    np.testing.assert_allclose(u, u32, atol=0.15)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: scale_by_soap(b1=1.0), r"scale_by_soap: b1 must be in \[0.0, 1.0\)"),
        (lambda: scale_by_soap(b2=-0.1), "scale_by_soap: b2"),
        (lambda: scale_by_soap(shampoo_beta=1.5), "scale_by_soap: shampoo_beta"),
        (lambda: scale_by_soap(eps=-1.0), "scale_by_soap: eps must be >= 0"),
        (lambda: scale_by_soap(precondition_frequency=0), "precondition_frequency must be >= 1"),
        (lambda: scale_by_soap(precondition_frequency=2.5), "precondition_frequency.*integer"),
        (lambda: scale_by_soap(max_precond_dim=0), "max_precond_dim must be >= 1"),
        (lambda: scale_by_soap(precondition_1d=1), "precondition_1d.*True or False"),
        (lambda: scale_by_soap(preconditioner_dtype=jnp.int32), "preconditioner_dtype"),
        (lambda: scale_by_soap(preconditioner_dtype=None), "preconditioner_dtype.*None"),
        (lambda: soap(-1.0), "soap: learning_rate must be >= 0"),
        (lambda: soap(LR, weight_decay=-0.1), "soap: weight_decay must be >= 0"),
        (lambda: soap(LR, b1=2.0), "soap: .*b1"),
        (
            lambda: scale_by_soap(weight_dimension_numbers=SoapDimensionNumbers(0, 0)).init(
                {"w": jnp.zeros((3, 3))}
            ),
            "non-empty and disjoint",
        ),
    ],
)
def test_construction_errors(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_rank_deficient_factor_gets_a_basis_that_rounding_does_not_change():
    # The first factor G^T G of a (4, 8) gradient has a 4-dimensional null space; its basis
    # there must depend on the span only, so that the same gradient summed in another order
    # (sharded, another backend) rotates the same way; signs are fixed by the largest entry.
    from gradtx.contrib._soap import _eigenbasis

    rng = np.random.default_rng(3)
    g = rng.normal(size=(4, 8)).astype(np.float32)
    forward = jnp.asarray(g.T @ g)
    rows = [np.outer(r, r) for r in g]
    reversed_order = jnp.asarray(sum(rows[::-1]).astype(np.float32))  # other rounding
    noisy = forward + 1e-6 * jnp.asarray(np.diag(rng.normal(size=8)), jnp.float32)
    q = np.asarray(_eigenbasis(forward))
    for other in (reversed_order, noisy):
        np.testing.assert_allclose(np.asarray(_eigenbasis(other)), q, atol=1e-4)
    np.testing.assert_allclose(q.T @ q, np.eye(8), atol=1e-5)  # orthonormal
    d = q.T @ np.asarray(forward) @ q
    np.testing.assert_allclose(d - np.diag(np.diag(d)), 0.0, atol=1e-4)  # an eigenbasis
    assert np.all(np.diff(np.diag(d)) <= 1e-4)  # decreasing eigenvalues
    peak = q[np.argmax(np.abs(q), axis=0), np.arange(8)]
    assert np.all(peak > 0)
