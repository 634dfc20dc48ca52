"""Moment dtypes of gradtx.contrib: integer dtypes are refused at construction, naming the
factory and the way to 8 bits; `gradtx.quantized()` EMA moments (ADOPT's, AdEMAMix's, Sophia's,
Muon's momentum, ACProp's second moment) are stored in 8 bits and follow the float32 run. And
the documented difference from Optax that every bf16 moment shares (Adam's, pinned here): the
update is computed from the moment as stored."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradtx
import gradtx.contrib as gc
from gradtx.state import _quantize as Q

Q8 = gradtx.quantized(block_size=64, min_size=256)


def _params():
    rng = np.random.default_rng(0)
    return {
        "w": jnp.asarray(rng.standard_normal((16, 32)), jnp.float32),  # 512 values: quantized
        "v": jnp.asarray(rng.standard_normal(300), jnp.float32),  # quantized, 5 blocks of 60
        "b": jnp.asarray(rng.standard_normal(8), jnp.float32),  # below min_size: float32
    }


def _loss(p):
    scales = {k: jnp.linspace(0.1, 3.0, v.size).reshape(v.shape) for k, v in p.items()}
    return sum(jnp.sum(scales[k] * (p[k] - 0.5) ** 2) for k in p)


def _train(tx, params, steps, **extra):
    def step(carry, _):
        p, s = carry
        g = jax.grad(_loss)(p)
        u, s = tx.update(g, s, p, **extra)
        return (gradtx.apply_updates(p, u), s), None

    (p, s), _ = jax.lax.scan(step, (params, tx.init(params)), None, length=steps)
    return p, s


# name -> (factory of the moment dtype, the dtype argument, extra update arguments)
CASES = {
    "ademamix": (lambda d: gc.ademamix(0.02, b3=0.99, mu_dtype=d), "mu_dtype", {}),
    "adopt": (lambda d: gc.adopt(0.02, mu_dtype=d), "mu_dtype", {}),
    "sophia": (lambda d: gc.sophia(0.02, mu_dtype=d), "mu_dtype", {"obj_fn": _loss}),
    "muon": (lambda d: gc.muon(0.02, mu_dtype=d), "mu_dtype", {}),
    "acprop": (lambda d: gc.acprop(0.02, nu_dtype=d), "nu_dtype", {}),
    "simplified_ademamix": (
        lambda d: gc.simplified_ademamix(0.005, b1=0.9, mu_dtype=d, nu_dtype=d),
        "mu_dtype",
        {},
    ),
}
PRIMITIVES = {
    "scale_by_ademamix": (gc.scale_by_ademamix, "mu_dtype"),
    "scale_by_adopt": (gc.scale_by_adopt, "mu_dtype"),
    "scale_by_sophia": (gc.scale_by_sophia, "mu_dtype"),
    "scale_by_muon": (gc.scale_by_muon, "mu_dtype"),
    "scale_by_acprop": (gc.scale_by_acprop, "nu_dtype"),
    "scale_by_simplified_ademamix": (gc.scale_by_simplified_ademamix, "nu_dtype"),
}


@pytest.mark.parametrize("name", list(PRIMITIVES))
def test_an_integer_moment_dtype_is_refused_naming_the_factory_and_quantized(name):
    factory, argument = PRIMITIVES[name]
    with pytest.raises(
        ValueError,
        match=rf"^{name}: {argument} must be a floating-point dtype .*got int8.*"
        rf"pass {argument}=gradtx\.quantized\(\) instead",
    ):
        factory(**{argument: jnp.int8})


# Sophia's clipped steps and Muon's orthogonalised ones have a size that does not shrink with
# the moment: where a moment is near 0 its rounding can turn a whole lr-sized step (as for lion
# in tests/test_quantized_moments.py).
PARAM_ATOL = {"sophia": 0.4, "muon": 0.4}


@pytest.mark.parametrize("name", list(CASES))
def test_quantized_moments_follow_float32_over_200_steps(name):
    # Stated tolerance, after 200 steps: the final loss within 2% of the initial loss of the
    # float32 run's, and every parameter within 0.25 of it (0.4 for PARAM_ATOL's; they move by
    # ~1). AdEMAMix oscillates on the way (its slow momentum overshoots), so the runs are
    # compared once both have settled.
    make, _, extra = CASES[name]
    params = _params()
    ref, _ = jax.jit(lambda p: _train(make(None), p, 200, **extra))(params)
    got, state = jax.jit(lambda p: _train(make(Q8), p, 200, **extra))(params)
    quantized = [x for x in jax.tree.leaves(state, is_leaf=Q.is_quantized) if Q.is_quantized(x)]
    assert quantized, f"{name}: no 8-bit buffer in the state"
    l0, lr, lq = float(_loss(params)), float(_loss(ref)), float(_loss(got))
    assert lr < 0.5 * l0, (name, l0, lr)  # the float32 run makes progress
    assert abs(lq - lr) <= 0.02 * l0, (name, lr, lq)
    atol = PARAM_ATOL.get(name, 0.25)
    for k in params:
        np.testing.assert_allclose(np.asarray(got[k]), np.asarray(ref[k]), atol=atol, err_msg=k)


@pytest.mark.parametrize("name", list(CASES))
def test_quantized_state_inits_from_shapes_and_keeps_its_layout(name):
    make, _, extra = CASES[name]
    tx, params = make(Q8), _params()
    structs = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), params)
    state = tx.init(params)
    assert jax.tree.structure(tx.init(structs)) == jax.tree.structure(state)
    grads = jax.grad(_loss)(params)
    _, new = jax.jit(lambda g, s, p: tx.update(g, s, p, **extra))(grads, state, params)
    assert jax.tree.structure(new) == jax.tree.structure(state)
    assert [x.dtype for x in jax.tree.leaves(new)] == [x.dtype for x in jax.tree.leaves(state)]


def test_bf16_mu_adam_updates_from_the_stored_moment_and_differs_from_optax_by_its_rounding():
    # docs/migration.md, row "moments-as-stored": gradtx's update is computed from the bf16 mu
    # it stores, Optax's from the float32 mu before rounding; the states are the same, and the
    # updates differ by the rounding of mu alone: at most 2^-8 (bf16's unit roundoff) of each
    # update, and not 0.
    optax = pytest.importorskip("optax")
    lr, b1, b2, eps = 1e-2, 0.9, 0.999, 1e-8
    rng = np.random.default_rng(0)
    params = {"w": jnp.asarray(rng.standard_normal((4, 16)), jnp.float32)}
    grads = jnp.asarray(rng.standard_normal((20, 4, 16)), jnp.float32)
    tx, ref = gradtx.adam(lr, mu_dtype=jnp.bfloat16), optax.adam(lr, mu_dtype=jnp.bfloat16)
    step, ref_step = jax.jit(tx.update), jax.jit(ref.update)
    state, ref_state = tx.init(params), ref.init(params)
    largest = 0.0
    for t in range(1, len(grads) + 1):
        g = {"w": grads[t - 1]}
        u, state = step(g, state)
        ref_u, ref_state = ref_step(g, ref_state)
        mu, nu = gradtx.tree.get(state, "mu")["w"], gradtx.tree.get(state, "nu")["w"]
        assert mu.dtype == jnp.bfloat16
        np.testing.assert_array_equal(np.asarray(mu), np.asarray(ref_state[0].mu["w"]))
        np.testing.assert_array_equal(np.asarray(nu), np.asarray(ref_state[0].nu["w"]))
        m = np.float64(mu.astype(jnp.float32)) / (1 - b1**t)
        v = np.float64(nu) / (1 - b2**t)
        want = -lr * m / (np.sqrt(v) + eps)  # from the stored (rounded) moment
        # rtol 5e-5: float32 bias corrections (1 - 0.999^t cancels), 80x below bf16's rounding.
        np.testing.assert_allclose(np.asarray(u["w"]), want, rtol=5e-5, atol=1e-9)
        diff = np.abs(np.float64(u["w"]) - np.float64(ref_u["w"]))
        assert np.all(diff <= 2.0**-8 * np.abs(np.float64(ref_u["w"])) * (1 + 1e-4) + 1e-9), t
        largest = max(largest, float(diff.max()))
    assert 1e-6 < largest < 5e-5, largest  # about 3e-5 at lr 1e-2
