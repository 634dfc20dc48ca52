"""`scale_by_eve` / `eve` against a NumPy transcription of Algorithm 1 of arXiv:1611.01505v1.

The loss is passed as `value=` at every step, from a sequence that rises and falls, jumps by
more than K and drops by more than 1/(K+1), so every branch of the feedback rule is taken.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradtx

from ..helpers import compare_to_numpy, grad_sequence, mixed_params

STEPS = 100


def eve_reference(lr=1.0, b1=0.9, b2=0.999, b3=0.999, k=0.1, K=10.0, eps=1e-8, f_star=0.0,
                  trace=None):  # fmt: skip
    """`make_ref` for compare_to_numpy; appends (c_t, d_t) to `trace` when given."""

    def make():
        state = {"t": 0, "m": None, "v": None, "d": 1.0, "f_hat": None}

        def ref(grads, params, value):
            del params
            f = float(value) - f_star
            state["t"] += 1
            t = state["t"]
            if state["m"] is None:
                state["m"] = [np.zeros_like(g) for g in grads]
                state["v"] = [np.zeros_like(g) for g in grads]
            if t > 1:
                f_prev = state["f_hat"]
                if f >= f_prev:
                    delta, big_delta = k + 1, K + 1
                else:
                    delta, big_delta = 1 / (K + 1), 1 / (k + 1)
                c = min(max(delta, f / f_prev), big_delta)
                f_new = c * f_prev
                r = abs(f_new - f_prev) / min(f_new, f_prev)
                state["d"] = b3 * state["d"] + (1 - b3) * r
                state["f_hat"] = f_new
                if trace is not None:
                    trace.append((c, state["d"]))
            else:
                state["f_hat"] = f
                state["d"] = 1.0
            out = []
            for i, g in enumerate(grads):
                m = b1 * state["m"][i] + (1 - b1) * g
                v = b2 * state["v"][i] + (1 - b2) * g * g
                state["m"][i], state["v"][i] = m, v
                m_hat, v_hat = m / (1 - b1**t), v / (1 - b2**t)
                out.append(-lr * m_hat / (state["d"] * np.sqrt(v_hat) + eps))
            return out

        return ref

    return make


def rising_and_falling_losses(steps: int = STEPS) -> np.ndarray:
    t = np.arange(steps)
    losses = 2.0 + np.sin(t / 4.0) + 0.3 * np.cos(t * 1.7)  # small rises and falls
    losses[20] *= 40.0  # a jump of more than K + 1: clipped at K + 1
    losses[45:48] = [1e-3, 5e-4, 2.0]  # a fall below 1 / (K + 1), then a steep rise
    losses[70] = losses[69]  # an unchanged loss (the >= branch)
    return losses.astype(np.float32)


LOSSES = rising_and_falling_losses()
EXTRA = [{"value": jnp.float32(v)} for v in LOSSES]


def test_the_loss_sequence_takes_every_branch():
    trace: list = []
    compare_to_numpy(
        gradtx.eve(1e-2), eve_reference(lr=1e-2, trace=trace), extra_args=EXTRA, jit=True
    )
    c = np.array([x[0] for x in trace])
    assert np.any(np.isclose(c, 11.0)) and np.any(np.isclose(c, 1 / 11))  # K clips
    assert np.any(np.isclose(c, 1.1)) and np.any(np.isclose(c, 1 / 1.1))  # k clips
    assert np.any((c > 1.1 + 1e-6) & (c < 11 - 1e-6))  # unclipped rises
    assert np.any((c < 1 / 1.1 - 1e-6) & (c > 1 / 11 + 1e-6))  # unclipped falls
    # d_t moves far enough from 1 that a rule ignoring it (Adam) would fail the comparison.
    d = np.array([x[1] for x in trace])
    assert np.abs(d - 1.0).max() > 1e-2


SCHEDULE = lambda count: 0.01 / (1.0 + 0.02 * count)


def scheduled_reference(schedule, **kwargs):
    """Eve's direction times a learning-rate schedule evaluated at the 0-based step."""
    inner = eve_reference(lr=1.0, **kwargs)

    def make():
        ref, counter = inner(), {"t": 0}

        def scheduled(grads, params, value):
            eta = schedule(counter["t"])
            counter["t"] += 1
            return [eta * u for u in ref(grads, params, value)]

        return scheduled

    return make


# (id, transformation factory, reference factory, jit, atol). scale_by_eve returns +direction,
# which is the reference with lr = -1. Its updates are O(1); first moments that cancel to ~1e-3
# carry the float32 rounding of O(1) terms, hence an absolute slack of 1e-6 (1e-8 for the O(1e-2)
# updates of the schedule case).
CASES = [
    ("eager-defaults", gradtx.scale_by_eve, lambda: eve_reference(lr=-1.0), False, 1e-6),
    ("jit-defaults", gradtx.scale_by_eve, lambda: eve_reference(lr=-1.0), True, 1e-6),
    (
        "jit-custom-f_star",
        lambda: gradtx.scale_by_eve(0.8, 0.99, 0.9, 0.05, 5.0, 1e-3, f_star=-1.0),
        lambda: eve_reference(-1.0, 0.8, 0.99, 0.9, 0.05, 5.0, 1e-3, f_star=-1.0),
        True,
        1e-6,
    ),
    (
        "jit-eve-schedule",
        lambda: gradtx.eve(SCHEDULE, b3=0.95),
        lambda: scheduled_reference(SCHEDULE, b3=0.95),
        True,
        1e-8,
    ),
]


@pytest.mark.across_versions
@pytest.mark.parametrize(("make_tx", "make_ref", "jit", "atol"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])  # fmt: skip
def test_matches_the_paper(make_tx, make_ref, jit, atol):
    compare_to_numpy(make_tx(), make_ref(), extra_args=EXTRA, jit=jit, atol=atol)


def test_works_inside_a_chain_under_jit():
    # The loss is forwarded through nested chains to the Eve step.
    tx = gradtx.chain(gradtx.clip(100.0), gradtx.chain(gradtx.eve(1e-2)))
    compare_to_numpy(tx, eve_reference(lr=1e-2), extra_args=EXTRA, jit=True)


def test_missing_value_raises_with_the_fix():
    tx = gradtx.eve(1e-3)
    params = mixed_params()
    g = grad_sequence(params, 1)[0]
    with pytest.raises(ValueError) as info:
        tx.update(g, tx.init(params), params)
    message = str(info.value)
    # raised by scale_by_eve, named after the alias the user called
    assert message.startswith("eve: scale_by_eve needs the monitored value (e.g. the loss): call ")
    assert "update(grads, state, params, value=loss)" in message and "got no value" in message
    with pytest.raises(ValueError, match="scale_by_eve needs the monitored value"):
        jax.jit(lambda g, s: tx.update(g, s, params))(g, tx.init(params))


def test_non_scalar_value_raises():
    tx = gradtx.scale_by_eve()
    params = {"w": jnp.ones(3)}
    with pytest.raises(ValueError) as info:
        tx.update(params, tx.init(params), value=jnp.ones(3))
    assert str(info.value) == (
        "scale_by_eve: value must be a scalar, got an array of shape (3,) (reduce it, "
        "e.g. with .mean(), first)"
    )


def test_state_scalars_are_float32_and_the_first_step_sets_the_loss():
    params = {"w": jnp.ones(3, jnp.bfloat16)}
    tx = gradtx.scale_by_eve()
    state = tx.init(params)
    assert state.d.dtype == jnp.float32 and state.f_hat.dtype == jnp.float32
    assert float(state.d) == 1.0
    _, state = tx.update(params, state, value=jnp.bfloat16(2.5))
    assert float(state.f_hat) == 2.5 and float(state.d) == 1.0
    assert state.d.dtype == jnp.float32 and state.f_hat.dtype == jnp.float32


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"b3": 1.0}, "scale_by_eve: b3 must be in [0.0, 1.0), got 1.0"),
        ({"k": -0.1}, "scale_by_eve: k must be >= 0, got -0.1"),
        ({"K": -1.0}, "scale_by_eve: K must be >= 0, got -1.0"),
        ({"k": 2.0, "K": 1.0}, "scale_by_eve: k must be <= K, got k=2.0 and K=1.0"),
        ({"b1": 1.5}, "scale_by_eve: b1 must be in [0.0, 1.0), got 1.5"),
        ({"eps": -1.0}, "scale_by_eve: eps must be >= 0, got -1.0"),
    ],
)
def test_invalid_hyperparameters_raise(kwargs, message):
    with pytest.raises(ValueError) as info:
        gradtx.scale_by_eve(**kwargs)
    assert str(info.value) == message
