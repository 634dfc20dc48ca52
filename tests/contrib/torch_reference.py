"""Drivers shared by the tests that check a `gradtx.contrib` optimizer against a torch
reference (pytorch_optimizer): a fixed (8, 6) + (6,) problem, a random gradient sequence whose
scale varies per step, and the parameter trajectories of both libraries on it (gradtx in one
compiled `lax.scan`)."""

from __future__ import annotations

import jax
import numpy as np
import pytest

import gradtx

# Where torch is missing (the version lanes), the test modules that import this one are skipped.
torch = pytest.importorskip("torch")

STEPS = 60
SHAPES = {"w": (8, 6), "b": (6,)}
TOL = 1e-5


def params_of(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {k: rng.normal(size=s).astype(np.float32) for k, s in SHAPES.items()}


def grads_of(seed: int = 1) -> dict[str, np.ndarray]:
    """A fixed random gradient sequence, stacked on axis 0; the scale varies from step to step
    so that the second moment moves."""
    rng = np.random.default_rng(seed)
    scale = np.exp(rng.normal(size=STEPS)).astype(np.float32)
    return {
        k: (scale.reshape((-1,) + (1,) * len(s)) * rng.normal(size=(STEPS, *s))).astype(np.float32)
        for k, s in SHAPES.items()
    }


def gradtx_trajectory(tx, params, grads):
    """The params after each step (one compiled `lax.scan` over the steps)."""

    @jax.jit
    def run(params, grads):
        def body(carry, g):
            p, s = carry
            u, s = tx.update(g, s, p)
            p = gradtx.apply_updates(p, u)
            return (p, s), p

        return jax.lax.scan(body, (params, tx.init(params)), grads)[1]

    return jax.tree.map(np.asarray, run(params, grads))


def torch_trajectory(make, params, grads):
    tensors = {k: torch.tensor(v, requires_grad=True) for k, v in params.items()}
    opt = make(list(tensors.values()))
    out: dict[str, list] = {k: [] for k in params}
    for t in range(STEPS):
        for k, p in tensors.items():
            p.grad = torch.tensor(grads[k][t])
        opt.step()
        for k, p in tensors.items():
            out[k].append(p.detach().numpy().copy())
    return {k: np.stack(v) for k, v in out.items()}


def max_diff(a, b) -> float:
    return max(float(np.max(np.abs(a[k] - b[k]))) for k in a)
