"""Low-precision moments of the matrix optimizers: on a full-batch least-squares problem whose
gradient is near 0 in some directions, bfloat16 and 8-bit (`gradtx.quantized()`) moments take
steps of the float32 run's size (not the rounding error of a moment divided by `eps`)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradtx
import gradtx.contrib as gc

# Small blocks and no minimum size, so that the 32 values of W are stored in 8 bits.
Q8 = gradtx.quantized(block_size=16, min_size=0)
STEPS = 200


def _problem():
    """X (64 x 8) whose columns 5 and 6 are near-constant (nearly collinear: X^T X has an
    eigenvalue ~1e-8 of the largest), targets from a random W (8 x 4): the gradient of W has
    almost no component along that eigenvector, whatever W is."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 8)).astype(np.float32)
    x[:, 5] = 1.0 + 1e-4 * rng.standard_normal(64)
    x[:, 6] = 0.5 + 1e-4 * rng.standard_normal(64)
    y = x @ rng.standard_normal((8, 4)).astype(np.float32)
    y += 0.01 * rng.standard_normal((64, 4)).astype(np.float32)
    return jnp.asarray(x), jnp.asarray(y)


X, Y = _problem()


def _loss(params):
    return jnp.mean(jnp.square(X @ params["w"] - Y))


def _run(tx):
    """The largest |update| over STEPS steps, the final params' largest |entry|, the final loss."""

    def step(carry, _):
        p, s = carry
        u, s = tx.update(jax.grad(_loss)(p), s, p)
        return (gradtx.apply_updates(p, u), s), jnp.max(jnp.abs(u["w"]))

    @jax.jit
    def run(p):
        (p, _), sizes = jax.lax.scan(step, (p, tx.init(p)), None, length=STEPS)
        return jnp.max(sizes), jnp.max(jnp.abs(p["w"])), _loss(p)

    return [float(x) for x in run({"w": jnp.zeros((8, 4), jnp.float32)})]


# name -> factory of (moment dtype, which moments); every matrix optimizer of gradtx.contrib
# with a moment dtype (apollo and fira keep their moments in float32 and have none).
OPTIMIZERS = {
    "soap": lambda kw: gc.soap(3e-3, **kw),
    "shampoo": lambda kw: gc.shampoo(3e-3, precondition_frequency=5, **kw),
    "kron": lambda kw: gc.kron(1e-3, **kw),
    "muon": lambda kw: gc.muon(0.02, **kw),
    "normuon": lambda kw: gc.normuon(0.02, **kw),
    "dion": lambda kw: gc.dion(0.02, **kw),
    "scion": lambda kw: gc.scion(0.02, **kw),
    "mars": lambda kw: gc.mars(3e-3, **kw),
    "adam_mini": lambda kw: gc.adam_mini(3e-3, **kw),
    "galore": lambda kw: gc.galore(3e-3, rank=2, base_optimizer=gradtx.scale_by_adam(**kw)),
}
HAS_NU = {"soap", "shampoo", "mars", "galore"}


def _cases():
    for name in OPTIMIZERS:
        for label, dtype in (("bf16", jnp.bfloat16), ("8bit", Q8)):
            yield pytest.param(name, "mu_dtype", dtype, id=f"{name}-mu-{label}")
            if name in HAS_NU:
                yield pytest.param(name, "both", dtype, id=f"{name}-mu_nu-{label}")


_REFERENCE: dict[str, list[float]] = {}


@pytest.mark.parametrize(("name", "which", "dtype"), list(_cases()))
def test_low_precision_moments_take_float32_sized_steps(name, which, dtype):
    # Stated tolerance: the largest |update| of the 200 steps within 3x of the float32 run's, and
    # the final loss no more than 10% of the initial loss above the float32 run's. Storing a
    # moment in bf16 or 8 bits rounds it by up to 2^-8 (bf16) to ~1e-2 (8 bits) of its block's
    # largest value; where that rounding is divided by a second moment that is ~0 (the
    # gradient's near-null direction) the step is no longer bounded by the learning rate.
    make = OPTIMIZERS[name]
    if name not in _REFERENCE:
        _REFERENCE[name] = _run(make({}))
    ref_step, _, ref_loss = _REFERENCE[name]
    kw = {"mu_dtype": dtype} if which == "mu_dtype" else {"mu_dtype": dtype, "nu_dtype": dtype}
    got_step, got_max, got_loss = _run(make(kw))
    initial = float(_loss({"w": jnp.zeros((8, 4))}))
    assert ref_loss < 0.9 * initial, (name, initial, ref_loss)  # the float32 run makes progress
    assert np.isfinite(got_max), (name, got_max)
    assert got_step <= 3.0 * ref_step, (name, which, ref_step, got_step, got_max)
    assert got_loss <= ref_loss + 0.1 * initial, (name, which, ref_loss, got_loss)
