"""`bound_lr` (AdaBound / AMSBound) against a NumPy transcription of the published rule.

The reference is the rule of the paper's reference implementation and of nnabla's CPU AdaBound
(reference sheet §1): Adam's step size in the ε-hat form, clipped into
[final_lr·η_t/η_0·(1 − 1/(γt+1)), final_lr·η_t/η_0·(1 + 1/(γt))], times the uncorrected m.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradtx

from ..helpers import compare_to_numpy, grad_sequence, mixed_params


def bound_reference(
    lr,
    final_lr,
    gamma,
    b1=0.9,
    b2=0.999,
    eps=1e-8,
    *,
    amsgrad=False,
    bias_correction=True,
    lr0=None,
    weight_decay=0.0,
    follow_schedule=True,
    clip_stats=None,
):
    """`make_ref` for compare_to_numpy; counts clipped elements into `clip_stats` if given."""

    def schedule(count):
        return lr(count) if callable(lr) else lr

    eta0 = lr0 if lr0 is not None else schedule(0)

    def make():
        state = {"t": 0, "m": None, "v": None, "v_max": None}

        def ref(grads, params):
            if state["m"] is None:
                state["m"] = [np.zeros_like(g) for g in grads]
                state["v"] = [np.zeros_like(g) for g in grads]
                state["v_max"] = [np.zeros_like(g) for g in grads]
            eta = schedule(state["t"])
            state["t"] += 1
            t = state["t"]
            k = np.sqrt(1 - b2**t) / (1 - b1**t) if bias_correction else 1.0
            final = final_lr * eta / eta0 if follow_schedule else final_lr
            lower = final * (1 - 1 / (gamma * t + 1))
            upper = final * (1 + 1 / (gamma * t))
            out = []
            for i, (g, w) in enumerate(zip(grads, params, strict=True)):
                g = g + weight_decay * w
                m = b1 * state["m"][i] + (1 - b1) * g
                v = b2 * state["v"][i] + (1 - b2) * g * g
                if amsgrad:
                    v_used = np.maximum(state["v_max"][i], v)
                    state["v_max"][i] = v_used
                else:
                    v_used = v
                raw = eta * k / (np.sqrt(v_used) + eps)
                step = np.clip(raw, lower, upper)
                if clip_stats is not None:
                    clip_stats["lower"] += int(np.sum(raw < lower))
                    clip_stats["upper"] += int(np.sum(raw > upper))
                    clip_stats["inside"] += int(np.sum((raw >= lower) & (raw <= upper)))
                state["m"][i], state["v"][i] = m, v
                out.append(-step * m)
            return out

        return ref

    return make


def _stats():
    return {"lower": 0, "upper": 0, "inside": 0}


# gamma = 0.05 narrows the band within the run, so both bounds and the inside are hit (checked).
BAND = {"final_lr": 0.02, "gamma": 0.05}
DECAYING = lambda count: 0.01 * 0.98**count


@pytest.mark.parametrize(
    ("name", "kwargs", "ref_kwargs", "jit"),
    [
        ("adabound_eager", {"learning_rate": 0.01, **BAND}, {"lr": 0.01, **BAND}, False),
        ("adabound", {"learning_rate": 0.01, **BAND}, {"lr": 0.01, **BAND}, True),
        (
            "adabound_schedule_betas_eps",
            {"learning_rate": DECAYING, **BAND, "b1": 0.8, "b2": 0.99, "eps": 1e-3},
            {"lr": DECAYING, **BAND, "b1": 0.8, "b2": 0.99, "eps": 1e-3},
            True,
        ),
        (
            "amsbound_no_bias_correction",
            {"learning_rate": 0.003, **BAND, "amsgrad": True, "bias_correction": False},
            {"lr": 0.003, **BAND, "amsgrad": True, "bias_correction": False},
            True,
        ),
        (
            "amsbound_schedule",
            {"learning_rate": DECAYING, **BAND, "amsgrad": True},
            {"lr": DECAYING, **BAND, "amsgrad": True},
            True,
        ),
    ],
)
def test_bound_lr_matches_the_published_rule(name, kwargs, ref_kwargs, jit):
    del name
    stats = _stats()
    compare_to_numpy(
        gradtx.bound_lr(**kwargs), bound_reference(**ref_kwargs, clip_stats=stats), jit=jit
    )
    # The comparison is only meaningful if the clipping is exercised on both sides: over the
    # jitted run's 100 steps (the eager run stops after EAGER_STEPS; its jitted twin, "adabound",
    # has the same hyperparameters).
    if jit:
        assert stats["lower"] > 0 and stats["upper"] > 0 and stats["inside"] > 0, stats


def test_bounds_follow_the_schedule_not_the_initial_rate():
    # The same run against bounds fixed at final_lr (nnabla before PR #443) must not match: the
    # schedule case above does test that the bounds follow eta_t / eta_0.
    with pytest.raises(AssertionError):
        compare_to_numpy(
            gradtx.bound_lr(DECAYING, **BAND),
            bound_reference(DECAYING, **BAND, follow_schedule=False),
        )


def test_schedule_starting_at_zero_needs_the_initial_learning_rate():
    warmup = lambda count: 0.05 * jnp.minimum(1.0, count / 10.0)
    with pytest.raises(ValueError) as info:
        gradtx.bound_lr(warmup, **BAND)
    assert str(info.value).startswith(
        "bound_lr: the learning-rate schedule is 0.0 at step 0, so eta_t / eta_0 is undefined; "
        "pass initial_learning_rate="
    )
    compare_to_numpy(
        gradtx.bound_lr(warmup, **BAND, initial_learning_rate=0.05),
        bound_reference(lambda c: 0.05 * min(1.0, c / 10.0), **BAND, lr0=0.05),
    )


def test_flip_sign_false_gives_the_ascent_step():
    params = mixed_params()
    g = grad_sequence(params, 1)[0]
    down = gradtx.bound_lr(0.05, **BAND)
    up = gradtx.bound_lr(0.05, **BAND, flip_sign=False)
    u_down, _ = down.update(g, down.init(params))
    u_up, _ = up.update(g, up.init(params))
    for a, b in zip(jax.tree.leaves(u_down), jax.tree.leaves(u_up), strict=True):
        np.testing.assert_array_equal(np.asarray(a), -np.asarray(b))
        assert np.any(np.asarray(a) != 0)


def test_state_layout_does_not_depend_on_the_schedule():
    params = mixed_params()
    constant = gradtx.bound_lr(0.05, **BAND).init(params)
    scheduled = gradtx.bound_lr(DECAYING, **BAND).init(params)
    assert jax.tree.structure(constant) == jax.tree.structure(scheduled)
    assert isinstance(constant, gradtx.ScaleByAdamState)
    assert isinstance(gradtx.bound_lr(amsgrad=True).init(params), gradtx.ScaleByAmsgradState)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"final_lr": -0.1}, "bound_lr: final_lr must be > 0, got -0.1"),
        ({"final_lr": 0.0}, "bound_lr: final_lr must be > 0, got 0.0"),
        ({"gamma": 0.0}, "bound_lr: gamma must be > 0, got 0.0"),
        ({"b1": 1.0}, "bound_lr: b1 must be in [0.0, 1.0), got 1.0"),
        ({"b2": -0.5}, "bound_lr: b2 must be in [0.0, 1.0), got -0.5"),
        ({"eps": -1e-8}, "bound_lr: eps must be >= 0, got -1e-08"),
        ({"learning_rate": -1.0}, "bound_lr: learning_rate must be >= 0, got -1.0"),
        ({"initial_learning_rate": 0.0}, "bound_lr: initial_learning_rate must be > 0, got 0.0"),
    ],
)
def test_invalid_hyperparameters_raise(kwargs, message):
    with pytest.raises(ValueError) as info:
        gradtx.bound_lr(**kwargs)
    assert str(info.value) == message


def test_traced_hyperparameters_are_accepted_under_jit():
    params = mixed_params()
    g = grad_sequence(params, 1)[0]

    @jax.jit
    def step(final_lr, gamma):
        tx = gradtx.bound_lr(0.05, final_lr, gamma)
        return tx.update(g, tx.init(params))[0]

    eager_tx = gradtx.bound_lr(0.05, 0.02, 0.05)
    expected = eager_tx.update(g, eager_tx.init(params))[0]
    got = step(jnp.float32(0.02), jnp.float32(0.05))
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(expected), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6)
