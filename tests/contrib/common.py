"""Helpers shared by the `gradtx.contrib` tests: learning-rate schedules and masks, a smooth
loss, a side-by-side driver for references that need extra arguments, and the checks that
several contrib families run (signatures, parameters needed, dtypes, all-zero first gradients).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gradtx

from ..helpers import (
    as_float64,
    assert_trees_close,
    assert_within_noise,
    float64_reference,
    grad_sequence,
    mixed_params,
)
from ..optax_reference import EAGER_STEPS, compare_to_optax

# Learning-rate schedules that start at 1 (most contrib methods treat the learning rate as a
# multiplier).


def sched(t):
    return 1.0 / (1.0 + 0.01 * t)


LR = lambda count: 1.0 / (1.0 + 0.05 * count)
SMALL_LR = lambda count: 0.05 / (1.0 + 0.01 * count)

# Masks: the leaves with more than 4 elements, and the leaves of rank > 1.


def decay_mask(p):
    return jax.tree.map(lambda x: x.size > 4, p)


MASK = lambda params: jax.tree.map(lambda p: p.ndim > 1, params)


def loss(params: Any) -> jax.Array:
    """A smooth loss > 0 with a non-diagonal Hessian (so that Hutchinson's estimate is random)."""
    leaves = jax.tree.leaves(params)
    quartic = sum(jnp.sum(0.25 * x**4 + 0.5 * x**2) for x in leaves)
    coupling = 0.1 * sum(jnp.sum(x) for x in leaves) ** 2
    return quartic + coupling + 1.0


# -- a driver for references that need extra arguments or per-example gradients ---------------


def _scan(tx: Any, params: Any, stacked: Any, extra: Callable) -> Any:
    def body(carry, g):
        p, s = carry
        u, s = tx.update(g, s, p, **extra(p))
        return (gradtx.apply_updates(p, u), s), u

    return jax.lax.scan(body, (params, tx.init(params)), stacked)[1]


_jitted = jax.jit(
    lambda txs, extra, params, stacked: [_scan(tx, params, stacked, extra) for tx in txs],
    static_argnums=(0, 1),
)


def _unstack(tree: Any, steps: int) -> list:
    tree = jax.tree.map(np.asarray, tree)
    return [jax.tree.map(lambda x, i=i: x[i], tree) for i in range(steps)]


def compare_with_extra(
    ours: Any,
    reference: Any,
    *,
    jit: bool,
    params: Any = None,
    grads: list | None = None,
    extra: Callable = lambda p: {},
    rtol: float = 1e-5,
    atol: float = 1e-7,
    float64_noise: bool = False,
) -> None:
    """Like `compare_to_optax`, with `extra(params)` passed to every update (e.g. `value=`) and
    any gradient sequence (e.g. per-example gradients). The reference always runs jitted."""
    params = mixed_params() if params is None else params
    grads = grad_sequence(params, 100) if grads is None else grads
    steps = len(grads)
    stacked = jax.tree.map(lambda *xs: jnp.stack(xs), *grads)
    if jit:
        got, expected = (
            _unstack(u, steps) for u in _jitted((ours, reference), extra, params, stacked)
        )
    else:
        expected = _unstack(_jitted((reference,), extra, params, stacked)[0], steps)
        state, p, got = ours.init(params), params, []
        for g in grads[:EAGER_STEPS]:  # the whole sequence is checked by the jitted case
            u, state = ours.update(g, state, p, **extra(p))
            p = gradtx.apply_updates(p, u)
            got.append(u)
    noise = None
    if float64_noise:  # see optax_reference.compare_to_optax
        expected64, noise = float64_reference(
            lambda: _unstack(
                _jitted((reference,), extra, as_float64(params), as_float64(stacked))[0], steps
            ),
            expected,
        )
    for i, (u, e) in enumerate(zip(got, expected[: len(got)], strict=True)):
        if noise is None:
            assert_trees_close(u, e, rtol, atol, msg=f"step {i}")
        else:
            assert_within_noise(u, expected64[i], noise[i], rtol, atol, msg=f"step {i}")


# -- checks run by several families ----------------------------------------------------------


def described(fn):
    """Argument names, kinds and defaults, in order."""
    params = inspect.signature(fn).parameters.values()
    return [(p.name, p.kind, p.default) for p in params]


def assert_signature_matches_optax(ours, theirs):
    """Optax's parameter names, order, kinds and defaults. Callable defaults are compared by
    behaviour elsewhere; Sophia's `hessian_diagonal_fn=None` means Optax's default estimator.
    Ours may add keyword-only options after Optax's."""
    ref = list(inspect.signature(theirs).parameters.values())
    mine = list(inspect.signature(ours).parameters.values())
    extras = mine[len(ref) :]  # keyword-only additions, e.g. acprop's nu_dtype
    assert all(p.kind is p.KEYWORD_ONLY and p.default is None for p in extras), extras
    mine = mine[: len(ref)]
    assert [(p.name, p.kind) for p in mine] == [(p.name, p.kind) for p in ref]
    for p, q in zip(mine, ref, strict=True):
        if callable(q.default) or isinstance(q.default, optax.GradientTransformation):
            continue
        assert p.default == q.default or (p.default is None and q.default is None), p.name


def assert_needs_params(make, who):
    """An update without the current parameters raises, naming `who`."""
    tx = make()
    params = {"w": jnp.ones(2)}
    with pytest.raises(ValueError, match=f"{who} needs the current parameters"):
        tx.update(params, tx.init(params))


def assert_mu_dtype_is_kept(make):
    """The state keeps its (bfloat16) moment dtype over steps; the updates stay float32."""
    tx = make()
    params = mixed_params()
    state = tx.init(params)
    dtypes = [x.dtype for x in jax.tree.leaves(state)]
    assert jnp.bfloat16 in dtypes
    for g in grad_sequence(params, 2):
        updates, state = tx.update(g, state, params, obj_fn=loss)
        assert [x.dtype for x in jax.tree.leaves(state)] == dtypes
        assert all(u.dtype == jnp.float32 for u in jax.tree.leaves(updates))


def assert_zero_first_gradients_keep_the_estimate(ours, ref):
    """All-zero first gradients: Optax's learning-rate estimate becomes NaN for good; ours keeps
    its initial estimate, and then grows it as the loss falls."""
    params = {"w": jnp.ones(3), "b": jnp.ones(2)}
    zeros = jax.tree.map(jnp.zeros_like, params)
    grad = jax.jit(jax.grad(lambda p: sum(jnp.sum((x + 2.0) ** 2) for x in jax.tree.leaves(p))))
    ref_tx = ref()
    ref_u, ref_state = ref_tx.update(zeros, ref_tx.init(params), params)
    ref_u, _ = ref_tx.update(grad(params), ref_state, params)
    assert np.isnan(np.asarray(ref_u["w"])).all()  # Optax's NaN, avoided here
    tx = ours()
    step = jax.jit(tx.update)
    u, state = step(zeros, tx.init(params), params)
    assert float(state.estim_lr) == pytest.approx(1e-6)
    assert all(bool(jnp.all(x == 0)) for x in jax.tree.leaves(u))
    start = float(sum(jnp.sum((x + 2.0) ** 2) for x in jax.tree.leaves(params)))
    for _ in range(30):
        u, state = step(grad(params), state, params)
        params = gradtx.apply_updates(params, u)
    assert all(bool(jnp.all(jnp.isfinite(x))) for x in jax.tree.leaves(params))
    assert float(state.estim_lr) > 1e-3  # the estimate grew, and the loss fell
    assert float(sum(jnp.sum((x + 2.0) ** 2) for x in jax.tree.leaves(params))) < start


def check_plain_against_optax(module, name, ours, reference, jit, atol=1e-7):
    """One `(name, ours, reference)` case against Optax on the mixed tree, its reference cached
    under `module:name`."""
    compare_to_optax(ours(), reference(), jit=jit, atol=atol, reference_key=f"{module}:{name}")


def assert_construction_raises(factory, kwargs, message):
    """`factory(**kwargs)` raises a ValueError or TypeError matching `message`."""
    with pytest.raises((ValueError, TypeError), match=message):
        factory(**kwargs)


def low_rank_trajectory(tx: Any, fields: tuple[str, ...] = ("projection",)) -> Callable:
    """`(params, stacked_grads) -> (params, *fields)` after each step, as NumPy, from one
    compiled scan of `tx` (a low-rank method's state, or a chain whose first state is it):
    the projections (and e.g. the limiter's `norm`) the reference runs are given."""

    @jax.jit
    def run(params, grads):
        def body(carry, g):
            p, s = carry
            u, s = tx.update(g, s, p)
            p = jax.tree.map(lambda a, b: a + b, p, u)
            inner = s if hasattr(s, fields[0]) else s[0]
            return (p, s), (p, *(getattr(inner, f) for f in fields))

        return jax.lax.scan(body, (params, tx.init(params)), grads)[1]

    return lambda params, grads: jax.tree.map(np.asarray, run(params, grads))
