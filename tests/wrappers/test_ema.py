"""ema and measure_with_ema against Optax 0.2.8: 100 steps on the mixed pytrees (eager and
jit) with a learning rate that starts at one; state dtypes, abstract init, argument errors."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax
import pytest

import gradtx

from ..helpers import assert_trees_close, grad_sequence, mixed_params, run
from ..optax_reference import compare_to_optax, with_modes
from .common import (
    STEPS,
    assert_bf16_updates_stable_state_and_abstract_init,
    assert_raises_starting_with,
    lr_from_one,
)

CASES = [
    ("ema", lambda lib: lib.chain(lib.ema(0.9), lib.scale_by_learning_rate(lr_from_one(lib)))),
    ("ema_no_debias", lambda lib: lib.chain(lib.ema(0.8, debias=False), lib.sgd(lr_from_one(lib)))),
    ("ema_f32_acc", lambda lib: lib.ema(0.95, accumulator_dtype=jnp.float32)),
]


@pytest.mark.parametrize(
    ("name", "make", "use_jit"),
    with_modes(CASES, eager={"ema"}),
)
def test_matches_optax(name, make, use_jit):
    compare_to_optax(make(gradtx), make(optax), jit=use_jit, reference_key=f"{__name__}:{name}")


def test_ema_state_matches_optax_and_keeps_dtypes():
    params = mixed_params()
    grads = grad_sequence(params, 5)
    _, ours, _ = run(gradtx.ema(0.9), params, grads)
    _, ref, _ = run(optax.ema(0.9), params, grads)
    assert int(ours.count) == int(ref.count) == 5
    assert_trees_close(ours.ema, ref.ema, 1e-6, 1e-7)
    bf16 = mixed_params(dtype=jnp.bfloat16)
    tx = gradtx.ema(0.9, accumulator_dtype=jnp.float32)
    updates, state, _ = run(tx, bf16, grad_sequence(bf16, 3))
    assert {x.dtype for x in jax.tree.leaves(updates[-1])} == {jnp.dtype(jnp.bfloat16)}
    assert {x.dtype for x in jax.tree.leaves(state.ema)} == {jnp.dtype(jnp.float32)}


# --------------------------------------------------------------------------------------------
# measure_with_ema: the output is the averaged measurement (not an update to apply)
# --------------------------------------------------------------------------------------------


def _measurements(tx, grads, params, use_jit):
    update = jax.jit(tx.update) if use_jit else tx.update
    state = tx.init(params)
    out = []
    for g in grads:
        m, state = update(g, state, params)
        out.append(m)
    return out, state


@pytest.mark.parametrize("use_jit", [False, True], ids=["eager", "jit"])
@pytest.mark.parametrize(
    "measure",
    [
        pytest.param(lambda u: optax.tree.norm(u), id="norm"),
        pytest.param(lambda u: optax.tree.norm(u) > 4.0, id="predicate"),
        pytest.param(lambda u: {"max": optax.tree.max(u), "sum": optax.tree.sum(u)}, id="tree"),
    ],
)
def test_measure_with_ema_matches_optax(measure, use_jit):
    params = mixed_params()
    grads = grad_sequence(params, STEPS)
    ours, state = _measurements(gradtx.measure_with_ema(measure, 0.9), grads, params, use_jit)
    ref, _ = _measurements(optax.measure_with_ema(measure, 0.9), grads, params, use_jit)
    for i, (a, b) in enumerate(zip(ours, ref, strict=True)):
        # atol 1e-6: the "tree" measure's sum cancels (terms ~1, sum ~6e-3), so its rounding
        # error is that of the terms, not of the sum
        assert_trees_close(a, b, 1e-5, 1e-6, msg=f"step {i}")
    # a boolean measurement is averaged in float32 from init on (Optax's init buffer is bool)
    init_state = gradtx.measure_with_ema(measure, 0.9).init(params)
    assert jax.tree.map(lambda x: x.dtype, init_state) == jax.tree.map(lambda x: x.dtype, state)


def test_measure_with_ema_abstract_init():
    params = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), mixed_params())
    state = gradtx.measure_with_ema(gradtx.tree.norm, 0.5).init(params)
    assert jax.tree.leaves(state)[-1].shape == ()


# --------------------------------------------------------------------------------------------
# invalid arguments raise at construction, naming the function, the argument and the value
# --------------------------------------------------------------------------------------------

BAD = [
    ("ema", lambda: gradtx.ema(1.5), ValueError, "ema: decay must be in [0.0, 1.0), got 1.5"),
    (
        "ema_debias_1",
        lambda: gradtx.ema(1.0),
        ValueError,
        "ema: decay must be in [0.0, 1.0), got 1.0",
    ),
    ("ema_debias_flag", lambda: gradtx.ema(0.9, debias="yes"), ValueError, "ema: debias must be"),
    (
        "measure_with_ema",
        lambda: gradtx.measure_with_ema(gradtx.tree.norm, -0.1),
        ValueError,
        "measure_with_ema: ema: decay must be in [0.0, 1.0), got -0.1",
    ),
    ("measure_fn", lambda: gradtx.measure_with_ema(3, 0.9), TypeError, "measure_with_ema: measure"),
]


@pytest.mark.parametrize(("name", "build", "error", "message"), BAD, ids=[b[0] for b in BAD])
def test_invalid_arguments_raise_with_name_and_value(name, build, error, message):
    assert_raises_starting_with(build, error, message)


# --------------------------------------------------------------------------------------------
# bf16 in -> bf16 out, state dtypes stable, init from shapes alone
# --------------------------------------------------------------------------------------------

HOUSE = [
    ("ema", lambda: gradtx.ema(0.9)),
]


@pytest.mark.parametrize(("name", "make"), HOUSE, ids=[h[0] for h in HOUSE])
def test_bf16_updates_stable_state_and_abstract_init(name, make):
    assert_bf16_updates_stable_state_and_abstract_init(make)
