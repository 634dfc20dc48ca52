"""apply_every, ApplyEvery and periodic_update against Optax 0.2.8 (100 steps on the mixed
pytrees, eager and jit, a learning rate that starts at one); argument errors, bf16 updates."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gradtx
from gradtx import wrappers as gw

from ..helpers import assert_trees_close, grad_sequence, mixed_params
from ..optax_reference import compare_to_optax, with_modes
from .common import (
    STEPS,
    adam_from_one,
    assert_bf16_updates_stable_state_and_abstract_init,
    assert_close,
    assert_raises_starting_with,
    momentum_from_one,
    normal_grads,
    small_tree,
)

CASES = [
    ("apply_every", lambda lib: lib.chain(momentum_from_one(lib), lib.apply_every(3))),
    ("apply_every_1", lambda lib: lib.chain(lib.apply_every(1), adam_from_one(lib))),
]


@pytest.mark.parametrize(
    ("name", "make", "use_jit"),
    with_modes(CASES, eager={"apply_every"}),
)
def test_matches_optax(name, make, use_jit):
    compare_to_optax(make(gradtx), make(optax), jit=use_jit, reference_key=f"{__name__}:{name}")


def test_apply_every_state_is_optax_apply_every():
    assert gw.ApplyEvery is gw.ApplyEveryState
    assert gw.ApplyEvery.__name__ == "ApplyEvery"
    assert gw.ApplyEvery._fields == optax.ApplyEvery._fields
    params = small_tree()
    ours, theirs = gradtx.apply_every(3), optax.apply_every(3)
    s, r = jax.jit(lambda p: (ours.init(p), theirs.init(p)))(params)
    assert type(s) is gw.ApplyEvery

    @jax.jit  # one program for both sides, every step
    def step(g, s, r):
        u, s = ours.update(g, s, params)
        v, r = theirs.update(g, r, params)
        return u, s, v, r

    for g in normal_grads(params, 7, seed=7):
        u, s, v, r = step(g, s, r)
        assert_close(u, v)
        assert int(s.count) == int(r.count)
        assert_close(s.grad_acc, r.grad_acc)


# --------------------------------------------------------------------------------------------
# periodic_update
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("use_jit", [False, True], ids=["eager", "jit"])
def test_periodic_update_matches_optax(use_jit):
    online = mixed_params()
    ours = ref = jax.tree.map(lambda x: jax.device_put(np.zeros_like(x)), online)
    # ours eagerly or under jit; Optax's under jit (eagerly, its lax.cond compiles at every
    # call), and the online params' step under jit
    update = (
        jax.jit(gradtx.periodic_update, static_argnums=3) if use_jit else gradtx.periodic_update
    )
    reference = jax.jit(optax.periodic_update, static_argnums=3)
    descend = jax.jit(lambda online, g: jax.tree.map(lambda p, d: p - 0.1 * d, online, g))
    refreshed = 0
    for step, g in enumerate(grad_sequence(online, STEPS)):
        online = descend(online, g)
        count = jax.device_put(np.int32(step))
        ours = update(online, ours, count, 7)
        ref = reference(online, ref, count, 7)
        assert_trees_close(ours, ref, 0, 0, msg=f"step {step}")
        refreshed += step % 7 == 0
    assert refreshed == 15


# --------------------------------------------------------------------------------------------
# invalid arguments raise at construction, naming the function, the argument and the value
# --------------------------------------------------------------------------------------------

_batched = [jnp.ones((2, 3))]

BAD = [
    (
        "apply_every_0",
        lambda: gradtx.apply_every(0),
        ValueError,
        "apply_every: k must be an integer >= 1, got 0",
    ),
    (
        "apply_every_float",
        lambda: gradtx.apply_every(2.5),
        ValueError,
        "apply_every: k must be an integer >= 1, got 2.5",
    ),
    (
        "periodic_update",
        lambda: gradtx.periodic_update(_batched, _batched, 3, 0),
        ValueError,
        "periodic_update: update_period must be an integer >= 1, got 0",
    ),
    (
        "periodic_structure",
        lambda: gradtx.periodic_update({"a": 1.0}, {"b": 1.0}, 3, 2),
        ValueError,
        "periodic_update:",
    ),
]


@pytest.mark.parametrize(("name", "build", "error", "message"), BAD, ids=[b[0] for b in BAD])
def test_invalid_arguments_raise_with_name_and_value(name, build, error, message):
    assert_raises_starting_with(build, error, message)


# --------------------------------------------------------------------------------------------
# bf16 in -> bf16 out, state dtypes stable, init from shapes alone
# --------------------------------------------------------------------------------------------

HOUSE = [
    ("apply_every", lambda: gradtx.apply_every(2)),
]


@pytest.mark.parametrize(("name", "make"), HOUSE, ids=[h[0] for h in HOUSE])
def test_bf16_updates_stable_state_and_abstract_init(name, make):
    assert_bf16_updates_stable_state_and_abstract_init(make)


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
def test_apply_every_state_restored_under_a_smaller_k_emits_at_once(jit):
    # 2 steps summed under k = 4, restored under k = 2: the period is over, so the next step
    # emits the sum of all 3 gradients (none dropped), then every second step
    params = {"w": jnp.zeros(2)}
    g = {"w": jnp.array([1.0, 2.0])}
    old = gradtx.apply_every(4)
    state = old.init(params)
    for _ in range(2):
        _, state = old.update(g, state, params)
    new = gradtx.apply_every(2)
    update = jax.jit(new.update) if jit else new.update
    for i, times in enumerate([3.0, 0.0, 2.0, 0.0, 2.0]):
        u, state = update(g, state, params)
        np.testing.assert_allclose(u["w"], times * g["w"], err_msg=f"step {i}")
        assert int(state.count) == i % 2
