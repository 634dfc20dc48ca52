"""Shared helpers of the config tests: small params, a quadratic loss, 50-step runs in one jit."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

STEPS = 50


def small_params() -> dict[str, Any]:
    """A matrix (for the matrix-shaped solvers: muon, galore) and a vector."""
    rng = np.random.default_rng(0)
    return {
        "dense": {
            "kernel": jnp.asarray(rng.normal(size=(3, 4)), jnp.float32),
            "bias": jnp.asarray(rng.normal(size=(4,)), jnp.float32),
        },
    }


def loss_fn(params: Any) -> jax.Array:
    """A quadratic with different curvature per leaf and a linear term."""
    leaves = jax.tree.leaves(params)
    total = jnp.asarray(0.0, jnp.float32)
    for i, x in enumerate(leaves):
        total = total + 0.5 * (i + 1.0) * jnp.sum(x * x) + 0.1 * jnp.sum(x)
    return total


def _body(tx: Any, extra: Any, batch_axis: bool) -> Any:
    """One step on `loss_fn`: (params, state) -> ((params, state), updates)."""
    extra = dict(extra or {})

    def body(carry, _):
        p, s = carry
        value, grads = jax.value_and_grad(loss_fn)(p)
        if batch_axis:  # per-example gradients: a batch of one
            grads = jax.tree.map(lambda g: g[None], grads)
        kwargs = {"value": value, **extra}
        if "obj_fn" in kwargs:
            kwargs["obj_fn"] = loss_fn
        u, s = tx.update(grads, s, p, **kwargs)
        p = jax.tree.map(lambda a, b: a + b, p, u)
        return (p, s), u

    return body


def _trajectory(tx: Any, params: Any, steps: int, extra: Any, batch_axis: bool) -> Any:
    body = _body(tx, extra, batch_axis)
    _, us = jax.lax.scan(body, (params, tx.init(params)), None, length=steps)
    return us


def run_pair(
    tx_a: Any,
    tx_b: Any,
    params: Any,
    *,
    steps: int = STEPS,
    extra: Any = None,
    batch_axis: bool = False,
) -> tuple[Any, Any]:
    """Run both transformations on the same loss for `steps` steps inside one `jax.jit`.

    Each follows its own trajectory (params updated by its own updates); returns the stacked
    updates of each, shape [steps, ...] per leaf.
    """
    return jax.jit(
        lambda: (
            _trajectory(tx_a, params, steps, extra, batch_axis),
            _trajectory(tx_b, params, steps, extra, batch_axis),
        )
    )()


def lowered_trajectory(
    tx: Any, params: Any, *, steps: int = STEPS, extra: Any = None, batch_axis: bool = False
) -> str:
    """The StableHLO text of `steps` steps of `tx` on the loss (traced, not compiled): two
    transformations with equal text compute the same numbers."""
    return jax.jit(lambda p: _trajectory(tx, p, steps, extra, batch_axis)).lower(params).as_text()


def eager_steps(
    tx: Any, params: Any, *, steps: int = 3, extra: Any = None, batch_axis: bool = False
) -> list:
    """The updates of `steps` eager steps of `tx` on the loss (no compilation of the step)."""
    body = _body(tx, extra, batch_axis)
    carry, out = (params, tx.init(params)), []
    for _ in range(steps):
        carry, updates = body(carry, None)
        out.append(updates)
    return out
