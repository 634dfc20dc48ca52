"""A NaN gradient in a matrix optimizer is never turned into a silent, permanent zero update: the
update of the leaf it hit is non-finite (the user sees it in the params, as with Muon), or the
state stays finite and the leaf keeps moving."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradtx
import gradtx.contrib as gc

STEPS, BAD = 8, 3  # the gradient of "w" at step BAD (0-based) holds one NaN

OPTIMIZERS = {
    "muon": lambda: gc.muon(0.02),
    "normuon": lambda: gc.normuon(0.02),
    "normuon-preserve_norm": lambda: gc.normuon(0.02, update_scale="preserve_norm"),
    "scion": lambda: gc.scion(0.02),
    "scion-gluon": lambda: gc.scion(0.02, step_size="gluon", gluon_l1=1.0),
    "scion-col": lambda: gc.scion(0.02, norm={"w": "col", "b": "bias_rms"}),
    "dion": lambda: gc.dion(0.02),
    "mars": lambda: gc.mars(3e-3),
    "kron": lambda: gc.kron(1e-3),
    "soap": lambda: gc.soap(3e-3, precondition_frequency=2),
    "shampoo": lambda: gc.shampoo(3e-3, precondition_frequency=2, start_preconditioning_step=2),
    "galore": lambda: gc.galore(3e-3, rank=2, update_proj_gap=2),
    "apollo": lambda: gc.apollo(3e-3, rank=2, update_proj_gap=2),
    "fira": lambda: gc.fira(3e-3, rank=2, update_proj_gap=2),
    "adam_mini": lambda: gc.adam_mini(3e-3),
}


def _gradients():
    rng = np.random.default_rng(0)
    w = rng.standard_normal((STEPS, 8, 4)).astype(np.float32)
    w[BAD, 2, 1] = np.nan
    b = rng.standard_normal((STEPS, 4)).astype(np.float32)
    return {"w": jnp.asarray(w), "b": jnp.asarray(b)}


def _all_finite(tree) -> jax.Array:
    leaves = [x for x in jax.tree.leaves(tree) if jnp.issubdtype(x.dtype, jnp.inexact)]
    return jnp.all(jnp.asarray([jnp.all(jnp.isfinite(x)) for x in leaves]))


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_a_nan_gradient_never_becomes_a_silent_zero_update(name):
    tx = OPTIMIZERS[name]()
    params = {"w": jnp.ones((8, 4), jnp.float32), "b": jnp.ones(4, jnp.float32)}

    def step(carry, g):
        p, s = carry
        u, s = tx.update(g, s, p)
        return (gradtx.apply_updates(p, u), s), (u["w"], _all_finite(s))

    @jax.jit
    def run(p, gs):
        return jax.lax.scan(step, (p, tx.init(p)), gs)[1]

    updates, state_finite = run(params, _gradients())
    updates, state_finite = np.asarray(updates), np.asarray(state_finite)
    assert np.all(np.isfinite(updates[:BAD])) and bool(np.all(state_finite[:BAD])), name
    for t in range(BAD, STEPS):
        if np.all(np.isfinite(updates[t])):
            # A finite update after the NaN: only if the state did not keep it, and the leaf
            # still moves.
            assert bool(state_finite[t]), (name, t, "finite update from a non-finite state")
            assert np.any(updates[t] != 0), (name, t, "a zero update")
