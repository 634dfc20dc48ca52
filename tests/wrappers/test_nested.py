"""Wrappers nested in one another: masked in multi_transform in accumulate_k_steps in
apply_if_finite."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradtx

from ..helpers import grad_sequence, mixed_params, run

K = 2
MASK = "**/kernel"  # inside group "a", only kernels get Adam; the rest of "a" passes through
LABELS = gradtx.labels_by_pattern({"dense/**": "a", "layers/1/**": "a", "**": "b"})


def _nested():
    inner = gradtx.multi_transform(
        {"a": gradtx.masked(gradtx.adam(0.05), MASK), "b": gradtx.sgd(0.1, momentum=0.9)}, LABELS
    )
    return gradtx.apply_if_finite(gradtx.accumulate_k_steps(inner, K), max_consecutive_errors=2)


def _flat(tree):
    return dict(zip(gradtx.tree.paths(tree), jax.tree.leaves(tree), strict=True))


def _alone(tx, grads, paths):
    ups, _, _ = run(
        tx,
        {p: jnp.zeros_like(grads[0][p]) for p in paths},
        [{p: g[p] for p in paths} for g in grads],
    )
    return ups


def test_nested_wrappers_compose():
    params = mixed_params()
    grads = grad_sequence(params, 9)
    grads[3] = jax.tree.map(lambda x: x.at[...].set(jnp.nan) if x.ndim == 1 else x, grads[3])
    ours, state, _ = run(_nested(), params, grads)

    # reference: drop the NaN micro-step, average pairs, run each group's rule alone
    good = [_flat(g) for i, g in enumerate(grads) if i != 3]
    means = [
        {p: (a[p] + b[p]) / K for p in a} for a, b in zip(good[0::2], good[1::2], strict=False)
    ]
    paths = list(means[0])
    adam_paths = ["dense/kernel"]
    passthrough = ["dense/bias", "layers/1/w"]
    sgd_paths = [p for p in paths if p not in adam_paths + passthrough]
    adam_ref = _alone(gradtx.adam(0.05), means, adam_paths)
    sgd_ref = _alone(gradtx.sgd(0.1, momentum=0.9), means, sgd_paths)

    emitted = [i for i in range(len(grads)) if i != 3][1::2]  # micro-steps that end a pair
    assert emitted == [1, 4, 6, 8]
    for i, u in enumerate(ours):
        flat = _flat(u)
        if i not in emitted:
            assert all(np.all(np.asarray(x) == 0) for x in flat.values()), i
            continue
        j = emitted.index(i)
        for p in adam_paths:
            np.testing.assert_allclose(flat[p], adam_ref[j][p], rtol=1e-6, atol=1e-7)
        for p in sgd_paths:
            np.testing.assert_allclose(flat[p], sgd_ref[j][p], rtol=1e-6, atol=1e-7)
        for p in passthrough:
            np.testing.assert_allclose(flat[p], means[j][p], rtol=1e-6, atol=1e-7)
    assert int(state.total_notfinite) == 1
    # masked-out and other-group leaves keep no Adam state
    adam_state = state.inner_state.inner_state.inner_states["a"].inner_state
    assert gradtx.tree.paths(gradtx.tree.get(adam_state, "mu")) == adam_paths


def test_mismatched_trees_name_every_wrapper_and_the_path():
    layers = [jnp.ones(2), {"w": jnp.ones(2)}]
    params = {
        "dense": {"kernel": jnp.ones((2, 2)), "bias": jnp.ones(2)},
        "layers": layers,
        "head": jnp.ones(3),
    }
    tx = _nested()
    state = tx.init(params)
    bad = {**params, "tail": params["head"]}
    del bad["head"]
    with pytest.raises(
        ValueError,
        match=r"^apply_if_finite: accumulate_k_steps: updates and state.grad_sum differ at the "
        r"root.*only in updates: \['tail'\]; only in state.grad_sum: \['head'\]",
    ):
        jax.jit(tx.update)(bad, state, params)

    # without the accumulator, the innermost transformation's error carries every wrapper's name
    inner = gradtx.apply_if_finite(
        gradtx.multi_transform(
            {"a": gradtx.masked(gradtx.adam(0.05), MASK)}, gradtx.labels_by_pattern({"**": "a"})
        ),
        2,
    )
    state = inner.init(params)
    grown = {**params, "dense": {**params["dense"], "k2": jnp.ones(1)}}
    with pytest.raises(ValueError, match=r"multi_transform: updates and params differ at 'dense'"):
        inner.update(grown, state, params)
    renamed = {**params, "dense": {"kernel": jnp.ones((2, 2)), "b": jnp.ones(2)}}
    with pytest.raises(
        ValueError,
        match=r"^apply_if_finite: multi_transform\['a'\]: masked: adam: scale_by_adam: updates and "
        r"state.mu differ",
    ):
        inner.update(renamed, state)
