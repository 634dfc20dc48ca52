"""Helpers shared by the transform tests that check gradtx against Optax's transform-level names:
schedules, trees, state comparisons and the common shape of an "against Optax" case."""

from __future__ import annotations

import inspect
import re

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gradtx

from ..optax_reference import compare_to_optax

RTOL, ATOL = 1e-5, 1e-7


def decaying(peak: float):
    """A learning-rate schedule (the same function object is given to gradtx and to Optax)."""
    return lambda count: peak * 0.5 * (1.0 + jnp.cos(jnp.pi * jnp.minimum(count, 100) / 120))


LR = decaying(0.05)


def without_scalars(params):
    """`params` without its rank-0 leaf (Optax's SM3 and DoG fail or reshape on those)."""
    return {k: v for k, v in params.items() if k != "pair"} | {"pair": params["pair"].a}


def check_matches_optax(module, name, ours, reference, params, jit, eager_reference=False):
    """One `(name, ours, reference, params)` case against Optax: on the mixed default tree
    (`params=None`, its reference cached under `module:name`) or on `params`. With
    `eager_reference`, our eager run is compared with Optax's eager run."""
    key = f"{module}:{name}" if params is None else None
    reference_jit = jit or not eager_reference
    compare_to_optax(
        ours(), reference(), jit=jit, params=params, reference_key=key, reference_jit=reference_jit
    )


def describe(fn):
    """Argument names, kinds and defaults, in order."""
    return [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()]


def invalid_ids(cases):
    """Test ids for `(build, message)` cases: the name that the message starts with, and a count."""
    return [m.split(":")[0] + f"-{i}" for i, (_, m) in enumerate(cases)]


def first_update(tx, params):
    """The first update of `tx` for all-ones gradients."""
    g = jax.tree.map(jnp.ones_like, params)
    return tx.update(g, tx.init(params), params)[0]


def small_params():
    """A small tree (fewer shapes than `mixed_params`, for the eager state checks)."""
    rng = np.random.default_rng(0)
    return {
        "w": jnp.asarray(rng.normal(size=(2, 3)), jnp.float32),
        "b": [jnp.asarray(rng.normal(size=3), jnp.float32), None],
    }


def same_state(got, expected, rtol=RTOL, atol=ATOL):
    """Two states with the same class name and fields (Optax's and ours are different classes)
    and close leaves, in order."""
    assert type(got).__name__ == type(expected).__name__
    assert getattr(got, "_fields", None) == getattr(expected, "_fields", None)
    got_leaves, expected_leaves = jax.tree.leaves(got), jax.tree.leaves(expected)
    assert len(got_leaves) == len(expected_leaves)
    for a, b in zip(got_leaves, expected_leaves, strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=rtol, atol=atol)


def states_along(tx, params, grads, extra=None):
    """The (updates, state) after each step of `tx` on `grads` (the params stay fixed)."""
    state = tx.init(params)
    out = []
    for g in grads:
        u, state = tx.update(g, state, params, **(extra or {}))
        out.append((u, state))
    return out


def assert_signature_is_optaxs(name):
    """`gradtx.<name>`'s argument names, order, kinds and defaults are Optax 0.2.8's."""
    assert describe(getattr(gradtx, name)) == describe(getattr(optax, name))


def assert_raises_with_message(build, message):
    """`build()` raises a ValueError whose message contains `message` (taken literally)."""
    with pytest.raises(ValueError, match=re.escape(message)):
        build()
