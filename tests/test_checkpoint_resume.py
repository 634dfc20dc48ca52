"""Resuming from a checkpoint is bit-identical for nested wrappers and bf16 states (every table
optimizer: tests/test_generic.py): 10 steps, save, load into a fresh template, 10 more steps
== 20 uninterrupted.

One jitted step per case serves both runs (the interrupted run continues from the loaded state
with the same compiled step, as a restarted process would after recompiling the same program).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import pytest

import gradtx

from .helpers import assert_trees_bitwise_equal, grad_sequence, kernel_mask, mixed_params

STEPS, SAVE_AT = 20, 10


def _loss(params: Any) -> jax.Array:
    return sum(jnp.sum(jnp.square(x.astype(jnp.float32))) for x in jax.tree.leaves(params))


def check_resume(
    make: Callable[[], gradtx.GradientTransformation],
    path: Any,
    *,
    params: Any = None,
    nan_steps: tuple[int, ...] = (),
) -> None:
    """20 uninterrupted steps == 10 steps, save, load into a fresh template, 10 more steps."""
    tx = make()
    params = mixed_params() if params is None else params
    grads = grad_sequence(params, STEPS, scale=0.1)
    for i in nan_steps:  # a non-finite gradient at these steps (for apply_if_finite)
        grads[i] = jax.tree.map(lambda g: jnp.full_like(g, jnp.nan), grads[i])

    @jax.jit
    def step(p, s, g):
        updates, s = tx.update(g, s, p, value=_loss(p))
        return gradtx.apply_updates(p, updates), s

    p, s = params, tx.init(params)
    for i in range(SAVE_AT):
        p, s = step(p, s, grads[i])
    gradtx.save(path, s)
    p_saved, s_saved = p, s
    for i in range(SAVE_AT, STEPS):
        p, s = step(p, s, grads[i])

    fresh_template = make().init(params)
    r = gradtx.load(path, fresh_template)
    assert_trees_bitwise_equal(r, s_saved, "loaded state")
    q = p_saved
    for i in range(SAVE_AT, STEPS):
        q, r = step(q, r, grads[i])
    assert_trees_bitwise_equal(q, p, "params after resuming")
    assert_trees_bitwise_equal(r, s, "state after resuming")


def _labels() -> dict:
    return {
        "dense": "adam",
        "layers": "sgd",
        "pair": "adam",
        "empty": {},
        "none": None,
    }


_schedule = gradtx.warmup_cosine_decay_schedule(0.0, 0.05, 3, 30)

WRAPPED: dict[str, Callable[[], gradtx.GradientTransformation]] = {
    "accumulate_k_steps": lambda: gradtx.accumulate_k_steps(gradtx.adam(0.05), 3),
    "inject_hyperparams": lambda: gradtx.inject_hyperparams(gradtx.adamw)(
        learning_rate=_schedule, b1=0.9, weight_decay=1e-3
    ),
    "multi_transform": lambda: gradtx.multi_transform(
        {"adam": gradtx.adam(0.05), "sgd": gradtx.sgd(0.1, momentum=0.9)}, _labels()
    ),
    "apply_if_finite": lambda: gradtx.apply_if_finite(gradtx.adam(0.05), 3),
    "ema_params": lambda: gradtx.chain(gradtx.adam(0.05), gradtx.ema_params(0.9)),
    "lookahead": lambda: gradtx.lookahead(gradtx.adam(0.05), 4, 0.5),
    "masked": lambda: gradtx.masked(gradtx.lion(0.01), kernel_mask(mixed_params())),
    "nested": lambda: gradtx.named_chain(
        ("clip", gradtx.clip_by_global_norm(1.0)),
        (
            "opt",
            gradtx.apply_if_finite(
                gradtx.accumulate_k_steps(
                    gradtx.inject_hyperparams(gradtx.adam)(learning_rate=_schedule), 3
                ),
                2,
            ),
        ),
        ("ema", gradtx.ema_params(0.99)),
    ),
    "lookahead_of_multi_transform": lambda: gradtx.lookahead(
        gradtx.multi_transform(
            {
                "adam": gradtx.inject_hyperparams(gradtx.adam)(learning_rate=0.05),
                "sgd": gradtx.accumulate_k_steps(gradtx.sgd(0.1, momentum=0.9), 2),
            },
            _labels(),
        ),
        3,
        0.5,
    ),
}


@pytest.mark.parametrize("name", list(WRAPPED))
def test_resume_is_bit_identical_for_nested_wrappers(name, tmp_path):
    nan_steps = (4, 12, 13) if "finite" in name or name == "nested" else ()
    check_resume(WRAPPED[name], tmp_path / "state.safetensors", nan_steps=nan_steps)


def test_resume_is_bit_identical_with_bf16_params_and_state(tmp_path):
    params = mixed_params(dtype=jnp.bfloat16)
    make = lambda: gradtx.adam(0.05, mu_dtype=jnp.bfloat16, nu_dtype=jnp.float32)
    state = make().init(params)
    assert jnp.dtype(jnp.bfloat16) in {x.dtype for x in jax.tree.leaves(state)}
    check_resume(make, tmp_path / "state.safetensors", params=params)
