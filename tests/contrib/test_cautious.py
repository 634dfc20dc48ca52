"""Cautious optimizers against pytorch_optimizer 4.1.0's `cautious=True` variants over 60 float32
steps (C-AdamW as `AdEMAMix(alpha=0, weight_decouple=True)`, C-Lion, C-LaProp in
test_laprop.py), the paper's rule with other offsets against a NumPy transcription; the sign
convention, zero and constant gradients, bf16 params, `gradtx.metrics` through the wrapper,
validation.

Tolerance: 1e-5 relative and absolute, as in test_laprop.py: float32 on both sides, same
operations up to rounding order (measured maximum difference 3e-6). A mask that flips on a
near-tie (u * g within rounding of 0) would show as a difference of a whole step; none does on
these gradients.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradtx
from gradtx.contrib._cautious import CautiousState, cautious, cautious_adamw

from .torch_reference import (
    SHAPES,
    STEPS,
    TOL,
    grads_of,
    gradtx_trajectory,
    params_of,
    torch_trajectory,
)

# The reference (skipped where it is not installed, as in the version lanes).
pytorch_optimizer = pytest.importorskip("pytorch_optimizer")
AdEMAMix = pytorch_optimizer.AdEMAMix
Lion = pytorch_optimizer.Lion

REFERENCE = [
    (
        "cautious_adamw",
        lambda: cautious_adamw(1e-2, b1=0.9, b2=0.99, weight_decay=0.1),
        lambda ps: AdEMAMix(
            ps, lr=1e-2, betas=(0.9, 0.99, 0.9999), alpha=0.0, weight_decay=0.1,
            weight_decouple=True, cautious=True,
        ),
    ),
    (
        # the wrapper around a whole alias (descent updates), without weight decay
        "cautious_of_adamw_no_decay",
        lambda: cautious(gradtx.adamw(2e-2, b1=0.8, weight_decay=0.0)),
        lambda ps: AdEMAMix(ps, lr=2e-2, betas=(0.8, 0.999, 0.9999), alpha=0.0, cautious=True),
    ),
    (
        "cautious_of_lion",
        lambda: cautious(gradtx.lion(1e-2, b1=0.9, b2=0.99, weight_decay=0.0)),
        lambda ps: Lion(ps, lr=1e-2, betas=(0.9, 0.99), cautious=True),
    ),
]  # fmt: skip


@pytest.mark.across_versions
@pytest.mark.parametrize(("name", "ours", "reference"), REFERENCE, ids=[r[0] for r in REFERENCE])
def test_against_pytorch_optimizer(name, ours, reference):
    params, grads = params_of(), grads_of()
    got = gradtx_trajectory(ours(), params, grads)
    want = torch_trajectory(reference, params, grads)
    for k in SHAPES:
        np.testing.assert_allclose(got[k], want[k], rtol=TOL, atol=TOL, err_msg=f"{name}: {k}")


def _numpy_cautious_adam(params, grads, lr, b1, b2, eps, offset):
    """Adam's direction u, phi = (u g > 0), step lr * d / (nnz(phi) + offset) * phi u, per leaf
    (the paper's Algorithm 2 with the count offset as a parameter), in float64."""
    p = {k: v.astype(np.float64) for k, v in params.items()}
    m = {k: np.zeros_like(v) for k, v in p.items()}
    v2 = {k: np.zeros_like(v) for k, v in p.items()}
    out: dict[str, list] = {k: [] for k in p}
    for t in range(1, STEPS + 1):
        for k in p:
            g = grads[k][t - 1].astype(np.float64)
            m[k] = b1 * m[k] + (1 - b1) * g
            v2[k] = b2 * v2[k] + (1 - b2) * g * g
            u = (m[k] / (1 - b1**t)) / (np.sqrt(v2[k] / (1 - b2**t)) + eps)
            phi = (u * g > 0).astype(np.float64)
            kept = phi.sum() + offset  # 0 with offset 0 when nothing is kept: then no step
            p[k] = p[k] - (lr * phi.size / kept * phi * u if kept > 0 else 0.0)
            out[k].append(p[k].copy())
    return {k: np.stack(v) for k, v in out.items()}


@pytest.mark.parametrize("offset", [0.0, 0.5])
def test_other_offsets_against_numpy(offset):
    """`descent=False` on a gradient-like primitive, then the learning rate: the same rule.
    (On these gradients the (6,) leaf keeps no coordinate at some steps: offset 0 divides 0 by 0
    there, which must give no step, not NaN.)"""
    params, grads = params_of(4), grads_of(5)
    tx = gradtx.chain(
        cautious(gradtx.scale_by_adam(0.9, 0.99), offset, descent=False),
        gradtx.scale_by_learning_rate(1e-2),
    )
    got = gradtx_trajectory(tx, params, grads)
    want = _numpy_cautious_adam(params, grads, 1e-2, 0.9, 0.99, 1e-8, offset)
    for k in SHAPES:
        np.testing.assert_allclose(got[k], want[k], rtol=TOL, atol=TOL, err_msg=k)


def test_sign_convention():
    """Adam's first step agrees with the gradient everywhere: all of it is kept and scaled by
    d / (d + 1). A wrapper comparing the wrong sign would zero it."""
    params = jax.tree.map(jnp.asarray, params_of())
    g = jax.tree.map(lambda x: jnp.asarray(x[0]), grads_of())
    plain, _ = jax.jit(gradtx.adam(0.1).update)(g, gradtx.adam(0.1).init(params), params)
    for tx in (
        cautious(gradtx.adam(0.1)),
        gradtx.chain(
            cautious(gradtx.scale_by_adam(), descent=False), gradtx.scale_by_learning_rate(0.1)
        ),
    ):
        updates, _ = jax.jit(tx.update)(g, tx.init(params), params)
        for k in SHAPES:
            d = g[k].size
            np.testing.assert_allclose(updates[k], plain[k] * d / (d + 1), rtol=1e-6)
    # the wrong convention keeps nothing
    wrong = cautious(gradtx.adam(0.1), descent=False)
    updates, _ = jax.jit(wrong.update)(g, wrong.init(params), params)
    assert all(np.all(np.asarray(u) == 0) for u in jax.tree.leaves(updates))


@pytest.mark.parametrize("offset", [1.0, 0.0])
def test_zero_gradients(offset):
    """All-zero gradients keep no coordinate (u * 0 is not < 0): a zero update and no NaN, also
    with offset 0 (0 kept / 0), from the start and after momentum has built up."""
    tx = cautious(gradtx.sgd(0.1, momentum=0.9), offset)
    params = jax.tree.map(jnp.asarray, params_of())
    zeros = jax.tree.map(jnp.zeros_like, params)
    ones = jax.tree.map(jnp.ones_like, params)
    step = jax.jit(tx.update)
    state = tx.init(params)
    for g, moving in ((zeros, False), (ones, True), (zeros, False)):
        updates, state = step(g, state, params)
        for u in jax.tree.leaves(updates):
            assert np.all(np.isfinite(np.asarray(u)))
            assert np.all(np.asarray(u) != 0) if moving else np.all(np.asarray(u) == 0)


def test_constant_gradients():
    """Constant gradients: Adam's update never disagrees, so each step is Adam's times
    d / (d + 1)."""
    params = jax.tree.map(jnp.asarray, params_of())
    g = jax.tree.map(lambda x: jnp.asarray(x[0]), grads_of())
    ours, plain = cautious(gradtx.adam(0.05)), gradtx.adam(0.05)
    s1, s2 = ours.init(params), plain.init(params)
    step1, step2 = jax.jit(ours.update), jax.jit(plain.update)
    for _ in range(5):
        u1, s1 = step1(g, s1, params)
        u2, s2 = step2(g, s2, params)
        for k in SHAPES:
            d = g[k].size
            np.testing.assert_allclose(u1[k], u2[k] * d / (d + 1), rtol=1e-6)


def test_bf16params_of():
    params = {k: jnp.asarray(v, jnp.bfloat16) for k, v in params_of().items()}
    grads = {k: jnp.asarray(v, jnp.bfloat16) for k, v in grads_of().items()}
    tx = cautious_adamw(1e-2)
    got = gradtx_trajectory(tx, params, grads)
    assert all(v.dtype == jnp.bfloat16 for v in got.values())
    assert all(np.all(np.isfinite(v.astype(np.float32))) for v in got.values())
    updates, state = jax.jit(tx.update)(
        jax.tree.map(lambda x: x[0], grads), tx.init(params), params
    )
    assert all(u.dtype == jnp.bfloat16 for u in jax.tree.leaves(updates))
    assert isinstance(state[0], CautiousState)


def test_metrics_see_the_inner_schedule():
    def lr(count):
        return 0.1 / (1.0 + count)

    tx = cautious(gradtx.adam(lr))
    params = jax.tree.map(jnp.asarray, params_of())
    state = tx.init(params)
    for t in range(3):
        _, state = tx.update(params, state, params)
        found = gradtx.metrics(tx, state)
        assert int(found["step"]) == t + 1
        np.testing.assert_allclose(found["learning_rate"], lr(t), rtol=1e-6)


def test_errors():
    with pytest.raises(ValueError, match=r"cautious.*offset"):
        cautious(gradtx.adam(0.1), -1.0)
    with pytest.raises(TypeError, match=r"cautious.*GradientTransformation"):
        cautious(0.1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"cautious_adamw.*weight_decay"):
        cautious_adamw(0.1, weight_decay=-1.0)
