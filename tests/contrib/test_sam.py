"""SAM (sharpness-aware minimisation) and its `normalize` against Optax 0.2.8's `optax.contrib`
over 100 steps, eager and jit, in transparent and opaque mode; the documented differences from
Optax, signatures, validation."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import optax.contrib as oc
import pytest

import gradtx
from gradtx import contrib as gc

from ..helpers import grad_sequence, mixed_params
from ..optax_reference import compare_to_optax, with_modes
from .common import LR, SMALL_LR, assert_signature_matches_optax, compare_with_extra, loss

SAM = [
    (
        "sam",
        lambda: gc.sam(gradtx.sgd(LR), gradtx.chain(gc.normalize(), gradtx.sgd(0.05))),
        lambda: oc.sam(optax.sgd(LR), optax.chain(oc.normalize(), optax.sgd(0.05))),
    ),
    (
        "sam_period_3_adam_keep_state",
        lambda: gc.sam(
            gradtx.adam(SMALL_LR),
            gradtx.chain(gc.normalize(), gradtx.sgd(0.05, momentum=0.5)),
            sync_period=3,
            reset_state=False,
        ),
        lambda: oc.sam(
            optax.adam(SMALL_LR),
            optax.chain(oc.normalize(), optax.sgd(0.05, momentum=0.5)),
            sync_period=3,
            reset_state=False,
        ),
    ),
    (
        "sam_period_3_momentum_reset",
        lambda: gc.sam(
            gradtx.sgd(SMALL_LR),
            gradtx.chain(gc.normalize(), gradtx.sgd(0.05, momentum=0.5)),
            sync_period=3,
        ),
        lambda: oc.sam(
            optax.sgd(SMALL_LR),
            optax.chain(oc.normalize(), optax.sgd(0.05, momentum=0.5)),
            sync_period=3,
        ),
    ),
]


@pytest.mark.across_versions
@pytest.mark.parametrize(("name", "ours", "reference", "jit"), with_modes(SAM, eager={"sam"}))
def test_sam_against_optax(name, ours, reference, jit):
    compare_to_optax(ours(), reference(), jit=jit, reference_key=f"{__name__}:{name}")


_GRAD_FN = lambda p: {"grad_fn": lambda q, i: jax.grad(loss)(q)}


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
def test_sam_opaque_mode_against_optax(jit):
    ours = gc.sam(gradtx.sgd(SMALL_LR), gradtx.chain(gc.normalize(), gradtx.sgd(0.05)),
                  sync_period=3, opaque_mode=True)  # fmt: skip
    ref = oc.sam(optax.sgd(SMALL_LR), optax.chain(oc.normalize(), optax.sgd(0.05)),
                 sync_period=3, opaque_mode=True)  # fmt: skip
    compare_with_extra(ours, ref, jit=jit, grads=grad_sequence(mixed_params(), 30), extra=_GRAD_FN)
    with pytest.raises(ValueError, match=r"^sam: opaque_mode=True needs"):
        ours.update(grad_sequence(mixed_params(), 1)[0], ours.init(mixed_params()), mixed_params())


def test_sam_with_sync_period_one_is_the_outer_optimizer():
    # Documented difference: Optax's transparent mode steps from the previous call's cache
    # here, so its params never move more than one step away from the start.
    compare_to_optax(
        gc.sam(gradtx.adam(0.1), gradtx.sgd(0.05), sync_period=1),
        optax.adam(0.1),
        jit=True,
        steps=20,
    )


def test_normalize_keeps_a_zero_gradient_zero():
    # Documented difference: Optax's normalize divides by a zero norm (NaN).
    zero = jax.tree.map(jnp.zeros_like, mixed_params())
    out, _ = gc.normalize().update(zero, gc.normalize().init(zero))
    assert all(bool(jnp.all(x == 0)) for x in jax.tree.leaves(out))
    g = grad_sequence(mixed_params(), 1)[0]
    out, _ = gc.normalize().update(g, gc.NormalizeState())
    np.testing.assert_allclose(gradtx.tree.norm(out), 1.0, rtol=1e-6)


SIGNATURES = [
    (gc.sam, oc.sam),
    (gc.normalize, oc.normalize),
]


@pytest.mark.parametrize(("ours", "theirs"), SIGNATURES, ids=[s[0].__name__ for s in SIGNATURES])
def test_signature_matches_optax(ours, theirs):
    assert_signature_matches_optax(ours, theirs)


INVALID = [
    (gc.sam, {"optimizer": None, "adv_optimizer": None}, "sam: sync_period|sam: optimizer"),
    (lambda **kw: gc.sam(gradtx.sgd(0.1), gradtx.sgd(0.1), **kw), {"sync_period": 0},
     "sam: sync_period must be >= 1, got 0"),
]  # fmt: skip


@pytest.mark.parametrize(("factory", "kwargs", "message"), INVALID)
def test_invalid_hyperparameters_raise_at_construction(factory, kwargs, message):
    with pytest.raises((ValueError, TypeError), match=message):
        factory(**kwargs)


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
def test_sam_state_restored_under_a_smaller_sync_period_takes_the_outer_step_at_once(jit):
    # 4 adversarial calls saved under sync_period = 5, restored under 2: the adversarial part
    # of the period is done, so the next call is the outer step from the cached params
    params = {"w": jnp.zeros(2)}
    g = {"w": jnp.ones(2)}
    old = gc.sam(gradtx.sgd(1.0), gradtx.sgd(0.25), sync_period=5)
    state, p = old.init(params), params
    for _ in range(4):
        u, state = old.update(g, state, p)
        p = gradtx.apply_updates(p, u)
    np.testing.assert_allclose(p["w"], [1.0, 1.0])  # 4 ascent steps of 0.25
    new = gc.sam(gradtx.sgd(1.0), gradtx.sgd(0.25), sync_period=2)
    update = jax.jit(new.update) if jit else new.update
    for i, want in enumerate([-1.0, -0.75, -2.0, -1.75, -3.0]):
        u, state = update(g, state, p)
        p = gradtx.apply_updates(p, u)
        np.testing.assert_allclose(p["w"], [want, want], err_msg=f"call {i}")
        assert int(state.steps_since_sync) == (0 if i % 2 == 0 else 1)
