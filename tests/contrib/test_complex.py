"""Complex parameters: `split_real_and_imaginary` runs an inner transformation on the real and
imaginary parts as separate real leaves, against Optax's `optax.contrib`; the equivalence with
the real problem, edge cases (infinities, None leaves, abstract init, extra arguments)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import optax.contrib
import pytest

import gradtx
from gradtx.contrib import (
    SplitRealAndImaginaryArrays,
    SplitRealAndImaginaryState,
    split_real_and_imaginary,
)
from gradtx.transforms._plateau import ReduceLROnPlateauState, reduce_on_plateau

RTOL, ATOL = 1e-5, 1e-6


def complex_problem(steps, seed=4):
    rng = np.random.default_rng(seed)

    def cplx(shape):
        return jnp.asarray(rng.normal(size=shape) + 1j * rng.normal(size=shape), jnp.complex64)

    params = {
        "z": cplx((3,)),
        "m": cplx((2, 2)),
        "r": jnp.asarray(rng.normal(size=(4,)), jnp.float32),
    }
    grads = [
        {"z": cplx((3,)), "m": cplx((2, 2)), "r": jnp.asarray(rng.normal(size=(4,)), jnp.float32)}
        for _ in range(steps)
    ]
    return params, grads


@pytest.mark.across_versions
def test_split_real_and_imaginary_matches_optax():
    params, grads = complex_problem(12)
    ours = split_real_and_imaginary(gradtx.adam(0.05, b1=0.8))
    theirs = optax.contrib.split_real_and_imaginary(optax.adam(0.05, b1=0.8))
    s1, s2 = ours.init(params), theirs.init(params)
    step1, step2 = jax.jit(ours.update), jax.jit(theirs.update)
    p1 = p2 = params
    for g in grads:
        u1, s1 = step1(g, s1, p1)
        u2, s2 = step2(g, s2, p2)
        for k in params:
            assert u1[k].dtype == u2[k].dtype == params[k].dtype
            np.testing.assert_allclose(u1[k], u2[k], rtol=RTOL, atol=ATOL)
        p1, p2 = gradtx.apply_updates(p1, u1), optax.apply_updates(p2, u2)
    assert isinstance(s1, SplitRealAndImaginaryState) and s1._fields == s2._fields
    for field in ("count", "mu", "nu"):  # scale_by_adam's state (gradtx's lr step has a count)
        a, b = getattr(s1.inner_state[0], field), getattr(s2.inner_state[0], field)
        for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
            np.testing.assert_allclose(x, y, rtol=RTOL, atol=ATOL)
    # the inner state is laid out over the split tree
    assert isinstance(s1.inner_state[0].mu["z"], SplitRealAndImaginaryArrays)
    assert s1.inner_state[0].mu["z"].real.dtype == jnp.float32
    assert not isinstance(s1.inner_state[0].mu["r"], SplitRealAndImaginaryArrays)


def test_split_is_the_real_problem():
    """Adam on z = x + iy equals Adam on the real pair (x, y)."""
    params, grads = complex_problem(5, seed=5)
    tx = split_real_and_imaginary(gradtx.adam(0.1))
    ref = gradtx.adam(0.1)
    pair = {"z": (params["z"].real, params["z"].imag)}
    s, r = tx.init({"z": params["z"]}), ref.init(pair)
    for g in grads:
        u, s = tx.update({"z": g["z"]}, s)
        v, r = ref.update({"z": (g["z"].real, g["z"].imag)}, r)
        np.testing.assert_allclose(u["z"].real, v["z"][0], rtol=1e-6)
        np.testing.assert_allclose(u["z"].imag, v["z"][1], rtol=1e-6)


def test_split_edge_cases():
    # an infinite part stays in its component (Optax's `real + imaginary * 1j` gives NaN)
    tx = split_real_and_imaginary(gradtx.identity())
    g = {"z": jnp.asarray([jnp.complex64(1.0 + 0j)]).at[0].set(jax.lax.complex(1.0, jnp.inf))}
    u, _ = tx.update(g, tx.init(g))
    assert u["z"][0].real == 1.0 and u["z"][0].imag == np.inf
    # init from shapes, None leaves, extra args forwarded to the inner transformation
    abstract = {"z": jax.ShapeDtypeStruct((2,), jnp.complex64), "n": None}
    tx = split_real_and_imaginary(
        gradtx.chain(reduce_on_plateau(patience=1, factor=0.5), gradtx.sgd(1.0))
    )
    state = tx.init(abstract)
    assert isinstance(state.inner_state[1], tuple)
    params = {"z": jnp.ones(2, jnp.complex64) * (1 + 1j), "n": None}
    state = tx.init(params)
    step = jax.jit(tx.update)
    for _ in range(3):
        u, state = step(params, state, params, value=jnp.asarray(1.0))
    assert isinstance(state.inner_state[0], ReduceLROnPlateauState)
    np.testing.assert_allclose(u["z"], -0.25 * (1 + 1j) * np.ones(2))  # 1, then 2 halvings
    assert u["n"] is None
    with pytest.raises(TypeError, match="inner must be a GradientTransformation"):
        split_real_and_imaginary(gradtx.adam)
