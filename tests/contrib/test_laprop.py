"""LaProp against pytorch_optimizer 4.1.0's `LaProp` over 60 float32 steps, and against a NumPy
transcription of the paper's Algorithm 1 where the two differ (a learning-rate schedule, weight
decay); zero and constant gradients, bf16 params, moment dtypes, validation.

Tolerance: 1e-5 relative and absolute on params of size O(1). Both sides run in float32; the
one difference in their arithmetic is where pytorch_optimizer puts `eps` (divided by
sqrt(1 - b2^t)) and an extra 1e-15 inside its square root, which move the normalised gradient
by ~1e-7 relatively at most with these gradients; the measured maximum difference is 4e-6.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gradtx.contrib._cautious import cautious
from gradtx.contrib._laprop import ScaleByLapropState, laprop, scale_by_laprop

from .torch_reference import (
    SHAPES,
    STEPS,
    TOL,
    grads_of,
    gradtx_trajectory,
    max_diff,
    params_of,
    torch_trajectory,
)

# The reference (skipped where it is not installed, as in the version lanes).
pytorch_optimizer = pytest.importorskip("pytorch_optimizer")
LaProp = pytorch_optimizer.LaProp

REFERENCE = [
    ("defaults", lambda: laprop(1e-2), lambda ps: LaProp(ps, lr=1e-2)),
    (
        "betas_eps",
        lambda: laprop(3e-2, b1=0.8, b2=0.99, eps=1e-8),
        lambda ps: LaProp(ps, lr=3e-2, betas=(0.8, 0.99), eps=1e-8),
    ),
    (
        "cautious",
        lambda: cautious(laprop(1e-2, b1=0.95)),
        lambda ps: LaProp(ps, lr=1e-2, betas=(0.95, 0.999), cautious=True),
    ),
]


@pytest.mark.across_versions
@pytest.mark.parametrize(("name", "ours", "reference"), REFERENCE, ids=[r[0] for r in REFERENCE])
def test_against_pytorch_optimizer(name, ours, reference):
    params, grads = params_of(), grads_of()
    got = gradtx_trajectory(ours(), params, grads)
    want = torch_trajectory(reference, params, grads)
    for k in SHAPES:
        np.testing.assert_allclose(got[k], want[k], rtol=TOL, atol=TOL, err_msg=f"{name}: {k}")
    # the trajectories moved (a test on params that stayed put could not fail)
    assert max_diff(got, {k: np.broadcast_to(v, got[k].shape) for k, v in params.items()}) > 0.1


def _paper_laprop(params, grads, lr, b1, b2, eps, wd):
    """The paper's Algorithm 1 in float64, with decoupled weight decay on w_{t-1}."""
    p = {k: v.astype(np.float64) for k, v in params.items()}
    m = {k: np.zeros_like(v) for k, v in p.items()}
    n = {k: np.zeros_like(v) for k, v in p.items()}
    out: dict[str, list] = {k: [] for k in p}
    for t in range(1, STEPS + 1):
        for k in p:
            g = grads[k][t - 1].astype(np.float64)
            n[k] = b2 * n[k] + (1 - b2) * g * g
            m[k] = b1 * m[k] + (1 - b1) * g / (np.sqrt(n[k] / (1 - b2**t)) + eps)
            p[k] = p[k] - lr(t - 1) * (m[k] / (1 - b1**t) + wd * p[k])
            out[k].append(p[k].copy())
    return {k: np.stack(v) for k, v in out.items()}


def test_schedule_and_weight_decay_follow_the_paper():
    """The learning rate multiplies the bias-corrected momentum (Algorithm 1); pytorch_optimizer
    keeps it inside the momentum, which differs under a schedule (checked too, so that the
    documented difference stays true)."""
    params, grads = params_of(2), grads_of(3)

    def lr(count):
        return 0.05 / (1.0 + 0.1 * count)

    got = gradtx_trajectory(laprop(lr, b1=0.8, b2=0.95, weight_decay=0.1), params, grads)
    want = _paper_laprop(params, grads, lr, 0.8, 0.95, 1e-15, 0.1)
    for k in SHAPES:
        np.testing.assert_allclose(got[k], want[k], rtol=TOL, atol=TOL, err_msg=k)

    def torch_with_schedule(ps):
        opt = LaProp(ps, lr=lr(0), betas=(0.8, 0.95))
        step = opt.step

        def scheduled_step(count=[0]):  # noqa: B006  (a counter held by the closure)
            opt.param_groups[0]["lr"] = lr(count[0])
            count[0] += 1
            return step()

        opt.step = scheduled_step
        return opt

    no_decay = gradtx_trajectory(laprop(lr, b1=0.8, b2=0.95), params, grads)
    reference = torch_trajectory(torch_with_schedule, params, grads)
    assert max_diff(no_decay, reference) > 1e-3


def test_zero_gradients_give_zero_updates():
    tx = jax.jit(laprop(0.1).update)
    params = jax.tree.map(jnp.asarray, params_of())
    state = laprop(0.1).init(params)
    zeros = jax.tree.map(jnp.zeros_like, params)
    for _ in range(3):
        updates, state = tx(zeros, state, params)
        for leaf in jax.tree.leaves(updates) + jax.tree.leaves(state):
            assert np.all(np.isfinite(np.asarray(leaf)))
        assert all(np.all(np.asarray(u) == 0) for u in jax.tree.leaves(updates))


def test_constant_gradients_step_by_the_learning_rate():
    """With g constant, g / sqrt(nu_hat) = sign(g) at every step and the bias-corrected
    momentum of it is sign(g): each step is -lr sign(g), from the first one on (this fails if
    either bias correction is missing or wrong)."""
    g = {"w": jnp.asarray(np.linspace(-2.0, 3.0, 48, dtype=np.float32).reshape(8, 6))}
    g["w"] = g["w"].at[0, 0].set(0.5)  # no zero entry
    tx = laprop(0.01, b1=0.9, b2=0.99)
    state = tx.init(g)
    step = jax.jit(tx.update)
    for _ in range(10):
        updates, state = step(g, state, g)
        np.testing.assert_allclose(updates["w"], -0.01 * np.sign(g["w"]), rtol=1e-5)


def test_bf16_params_and_moment_dtypes():
    params = {k: jnp.asarray(v, jnp.bfloat16) for k, v in params_of().items()}
    grads = {k: jnp.asarray(v[:STEPS], jnp.bfloat16) for k, v in grads_of().items()}
    got = gradtx_trajectory(laprop(1e-2), params, grads)
    assert all(v.dtype == jnp.bfloat16 for v in got.values())
    state = laprop(1e-2).init(params)
    assert all(x.dtype == jnp.bfloat16 for x in jax.tree.leaves(state[0].mu))
    # against the float32 run on the same (rounded) values: the steps (0.01 each, 0.6 in all)
    # are rounded to the bf16 params' spacing (1/64 near 2), so the paths drift apart slowly
    ref = gradtx_trajectory(
        laprop(1e-2),
        jax.tree.map(lambda x: x.astype(jnp.float32), params),
        jax.tree.map(lambda x: x.astype(jnp.float32), grads),
    )
    for k in SHAPES:
        np.testing.assert_allclose(got[k].astype(np.float32), ref[k], atol=0.1)
    # float32 params with bf16 / float16 moments: the buffers keep the requested dtypes
    f32 = jax.tree.map(jnp.asarray, params_of())
    tx = scale_by_laprop(mu_dtype=jnp.bfloat16, nu_dtype=jnp.float16)
    state = tx.init(f32)
    assert isinstance(state, ScaleByLapropState)
    updates, state = jax.jit(tx.update)(f32, state)
    assert all(x.dtype == jnp.bfloat16 for x in jax.tree.leaves(state.mu))
    assert all(x.dtype == jnp.float16 for x in jax.tree.leaves(state.nu))
    assert all(u.dtype == jnp.float32 for u in jax.tree.leaves(updates))


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: scale_by_laprop(b1=1.0), r"scale_by_laprop.*b1"),
        (lambda: scale_by_laprop(eps=-1.0), r"scale_by_laprop.*eps"),
        (lambda: laprop(1e-3, b2=1.5), r"laprop.*b2"),
        (lambda: laprop(1e-3, weight_decay=-0.1), r"laprop.*weight_decay"),
        (lambda: laprop(1e-3, mu_dtype=jnp.int32), r"laprop.*mu_dtype"),
    ],
)
def test_construction_errors(make, match):
    with pytest.raises((ValueError, TypeError), match=match):
        make()
