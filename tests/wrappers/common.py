"""Helpers shared by the wrapper tests: Optax comparisons with a learning rate that starts at
one (so an error in its use shows at full size), runs with per-step extra arguments, and a small
two-leaf tree compared leaf by leaf; the parameters after each of a few steps, and normal
gradients for a single-array tree; and the checks that several wrapper families run (argument
errors, bf16 updates with stable state dtypes and abstract init)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ..helpers import assert_trees_close, grad_sequence, mixed_params, run

STEPS = 100
RTOL, ATOL = 2e-5, 1e-6


def lr_from_one(lib):
    """A learning rate that starts at one (so an error in its use shows at full size)."""
    return lib.linear_schedule(1.0, 0.05, 60)


def adam_from_one(lib):
    return lib.adam(lr_from_one(lib))


def momentum_from_one(lib):
    return lib.sgd(lr_from_one(lib), momentum=0.9)


def compare_with_extra_args(ours, reference, extra_args, use_jit):
    """Like `compare_transformations` with per-step extra arguments, the reference always jitted
    (eagerly, Optax's `lax.cond` would compile anew at every step)."""
    params = mixed_params()
    grads = grad_sequence(params, len(extra_args))
    got, _, _ = run(ours, params, grads, jit=use_jit, extra_args=extra_args)
    want, _, _ = run(reference, params, grads, jit=True, extra_args=extra_args)
    for i, (a, b) in enumerate(zip(got, want, strict=True)):
        assert_trees_close(a, b, 1e-5, 1e-7, msg=f"step {i}")


def small_tree():
    return {"w": jnp.arange(6.0).reshape(2, 3) / 7.0, "b": {"c": jnp.array([0.5, -1.0])}}


def normal_grads(params, n, seed=0, scale=1.0):
    rng = np.random.default_rng(seed)
    return [
        jax.tree.map(lambda p: jnp.asarray(scale * rng.normal(size=p.shape), p.dtype), params)
        for _ in range(n)
    ]


def assert_close(a, b, msg=""):
    la, lb = jax.tree.leaves(a), jax.tree.leaves(b)
    assert len(la) == len(lb), msg
    for x, y in zip(la, lb, strict=True):
        np.testing.assert_allclose(
            np.asarray(x, np.float64), np.asarray(y, np.float64), RTOL, ATOL, err_msg=msg
        )


def adam_01(lib):
    return lib.adam(0.1)


def adam_moments(state):
    """count, mu and nu of the Adam states in `state` (gradtx's and Optax's chains differ in
    their stateless parts)."""
    found = jax.tree.leaves(state, is_leaf=lambda x: hasattr(x, "mu"))
    return [(x.count, x.mu, x.nu) for x in found if hasattr(x, "mu")]


def _steps(tx, params, grads):
    """The parameters after each step of `tx` over `grads` (its updates applied)."""
    state = tx.init(params)
    out = []
    for g in grads:
        u, state = tx.update(g, state, params)
        params = jax.tree.map(lambda p, d: p + d, params, u)
        out.append(params)
    return out


def _grads(shape, n=4, seed=0):
    """`n` standard-normal gradients of `shape` (for single-array trees)."""
    keys = jax.random.split(jax.random.PRNGKey(seed), n)
    return [jax.random.normal(k, shape) for k in keys]


def assert_raises_starting_with(build, error, message):
    """`build()` raises `error` whose message starts with `message`."""
    with pytest.raises(error) as info:
        build()
    assert str(info.value).startswith(message), str(info.value)


def assert_bf16_updates_stable_state_and_abstract_init(make):
    """bf16 parameters give bf16 updates, the state keeps its structure and dtypes over steps,
    and an init from shapes alone (`ShapeDtypeStruct`s) gives the same structure and dtypes."""
    params = mixed_params(dtype=jnp.bfloat16)
    tx = make()
    state = tx.init(params)
    shapes = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), params)
    abstract = tx.init(shapes)
    assert jax.tree.structure(abstract) == jax.tree.structure(state)
    assert jax.tree.map(lambda x: x.dtype, abstract) == jax.tree.map(lambda x: x.dtype, state)
    updates, new_state, _ = run(tx, params, grad_sequence(params, 3))
    assert {x.dtype for u in updates for x in jax.tree.leaves(u)} == {jnp.dtype(jnp.bfloat16)}
    assert jax.tree.structure(new_state) == jax.tree.structure(state)
    assert jax.tree.map(lambda x: x.dtype, new_state) == jax.tree.map(lambda x: x.dtype, state)
