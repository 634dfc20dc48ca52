"""join, warmup (Optax and nnabla conventions), warm-up schedules and cyclic schedules."""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np
import optax
import pytest

from gradtx import schedules as S

from .common import assert_schedule, boundary_steps, curve
from .test_basic import optax_values


@pytest.mark.across_versions
def test_join_matches_optax_with_mixed_schedules():
    ours = S.join(
        [S.constant(1.0), S.linear(2.0, 3.0, 4), optax.exponential_decay(3.0, 2, 0.5)], [3, 10]
    )
    ref = optax.join_schedules(
        [
            optax.constant_schedule(1.0),
            optax.linear_schedule(2.0, 3.0, 4),
            optax.exponential_decay(3.0, 2, 0.5),
        ],
        [3, 10],
    )
    steps = boundary_steps(3, 10)
    assert_schedule(ours, optax_values(ref, steps), steps, eager=3)


def test_join_with_a_plain_function_and_repeated_boundary():
    # The repeated boundary skips the middle schedule entirely.
    ours = S.join([lambda t: 2.0 * t, S.constant(5.0), lambda t: -t], [4, 4])
    np.testing.assert_allclose(curve(ours, [0, 3, 4, 6]), [0.0, 6.0, 0.0, -2.0])


@pytest.mark.parametrize("init", [0.0, 0.25])
def test_warmup_linear_shifts_the_schedule(init):
    base = S.cosine_decay(1.0, 20, alpha=0.1)
    warm = 5
    schedule = S.warmup(base, warm, init)

    def expected(t):
        if t < warm:
            return init + (t / warm) * (1.0 - init)
        tau = min(t - warm, 20)
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * tau / 20))

    assert_schedule(schedule, expected, boundary_steps(warm - 1, warm, 25), eager=3)


def test_warmup_linear_equals_optax_warmup_cosine():
    steps = boundary_steps(7, 40)
    ours = S.warmup(S.cosine_decay(0.8, 33, alpha=0.25), 7, 0.1)
    ref = optax.warmup_cosine_decay_schedule(0.1, 0.8, 7, 40, end_value=0.2)
    np.testing.assert_allclose(curve(ours, steps), optax_values(ref, steps), rtol=1e-5, atol=1e-7)


def test_warmup_nnabla_mode_is_linear_warmup_scheduler():
    base = S.exponential_decay(0.5, 3, 0.9, staircase=True)
    warm = 6

    def expected(t):  # nnabla LinearWarmupScheduler around ExponentialScheduler(0.5, 0.9, 3)
        value = 0.5 * 0.9 ** (t // 3)
        return value * (t + 1) / warm if t < warm else value

    assert_schedule(S.warmup(base, warm, mode="nnabla"), expected, boundary_steps(5, 6), eager=3)


def test_warmup_zero_steps_is_the_schedule():
    base = S.linear(1.0, 0.0, 10)
    steps = np.arange(12)
    for mode in ("linear", "nnabla"):
        np.testing.assert_array_equal(
            curve(S.warmup(base, 0, mode=mode), steps), curve(base, steps)
        )


@pytest.mark.across_versions
@pytest.mark.parametrize(
    ("ours", "ref", "points"),
    [
        (
            S.warmup_constant(0.1, 1.0, 7),
            optax.warmup_constant_schedule(0.1, 1.0, 7),
            (7,),
        ),
        (
            S.warmup_exponential_decay(0.1, 1.0, 4, 3, 0.5, 2, True, 0.1),
            optax.warmup_exponential_decay_schedule(0.1, 1.0, 4, 3, 0.5, 2, True, 0.1),
            (4, 6, 9),
        ),
        (
            S.warmup_exponential_decay(0.0, 2.0, 5, 4, 0.8),
            optax.warmup_exponential_decay_schedule(0.0, 2.0, 5, 4, 0.8),
            (5, 9),
        ),
        (
            S.warmup_exponential_decay(0.3, 2.0, 0, 4, 0.8, end_value=1.0),
            optax.warmup_exponential_decay_schedule(0.3, 2.0, 0, 4, 0.8, end_value=1.0),
            (4,),
        ),
    ],
    ids=lambda c: getattr(c, "name", None),
)
def test_warmup_schedules_match_optax(ours, ref, points):
    steps = boundary_steps(*points)
    assert_schedule(ours, optax_values(ref, steps), steps, eager=3)


def smith_triangular(t, base, top, step_size):
    """Smith (2017), section 3.1: the triangular policy."""
    cycle = math.floor(1 + t / (2 * step_size))
    x = abs(t / step_size - 2 * cycle + 1)
    return base + (top - base) * max(0.0, 1 - x)


@pytest.mark.across_versions
def test_cyclic_triangular_is_smiths_formula():
    steps = boundary_steps(7, 14, 21, 28, high=100)
    assert_schedule(
        S.cyclic(0.1, 1.0, 7), lambda t: smith_triangular(t, 0.1, 1.0, 7), steps, eager=3
    )


@pytest.mark.parametrize(
    ("mode", "gamma"), [("triangular", 1.0), ("triangular2", 1.0), ("exp_range", 0.99)]
)
def test_cyclic_asymmetric_modes(mode, gamma):
    base, top, up, down = 0.2, 1.2, 3, 5

    def expected(t):  # PyTorch CyclicLR's documented rule, asymmetric steps
        total = up + down
        cycle = math.floor(1 + t / total)
        x = 1.0 + t / total - cycle
        scale = x / (up / total) if x <= up / total else (x - 1) / (up / total - 1)
        if mode == "triangular":
            amp = 1.0
        elif mode == "triangular2":
            amp = 0.5 ** (cycle - 1)
        else:
            amp = gamma**t
        return base + (top - base) * scale * amp

    steps = boundary_steps(3, 8, 11, 16, high=60)
    assert_schedule(S.cyclic(base, top, up, down, mode=mode, gamma=gamma), expected, steps, eager=2)


INVALID = [
    (lambda: S.join([], []), "join", "schedules"),
    (lambda: S.join([S.constant(1.0), S.constant(2.0)], []), "join", "boundaries"),
    (lambda: S.join([S.constant(1.0)] * 3, [5, 2]), "join", "boundaries"),
    (lambda: S.join([S.constant(1.0)] * 2, [-1]), "join", "boundaries"),
    (lambda: S.warmup(S.constant(1.0), -1), "warmup", "warmup_steps"),
    (lambda: S.warmup(S.constant(1.0), 5, 0.1, mode="nnabla"), "warmup", "init_value"),
    (lambda: S.warmup(S.constant(1.0), 5, mode="cosine"), "warmup", "mode"),
    (lambda: S.warmup_constant(0.0, 1.0, -2), "warmup_constant", "warmup_steps"),
    (lambda: S.cyclic(0.1, 1.0, 0), "cyclic", "step_size_up"),
    (lambda: S.cyclic(0.1, 1.0, 5, 0), "cyclic", "step_size_down"),
    (lambda: S.cyclic(0.1, 1.0, 5, mode="sawtooth"), "cyclic", "mode"),
    (lambda: S.cyclic(0.1, 1.0, 5, mode="exp_range", gamma=1.5), "cyclic", "gamma"),
]


@pytest.mark.parametrize(("make", "who", "arg"), INVALID)
def test_invalid_arguments_raise_at_construction(make, who, arg):
    with pytest.raises(ValueError) as info:
        make()
    message = str(info.value)
    assert message.startswith(who) and arg in message, message


def test_join_rejects_non_callables():
    with pytest.raises(TypeError, match=r"join: schedules\[1\] must be a schedule"):
        S.join([S.constant(1.0), 0.5], [3])


def test_compositions_accept_int32_arrays_and_return_float32():
    schedule = S.join([S.warmup(S.constant(1.0), 3), S.cyclic(0.0, 1.0, 2)], [10])
    out = schedule(jnp.arange(16, dtype=jnp.int32).reshape(4, 4))
    assert out.dtype == jnp.float32 and out.shape == (4, 4)


def test_warmup_exponential_decay_without_transition_holds_the_peak_as_in_optax():
    with pytest.warns(UserWarning, match="transition_steps=0 <= 0 gives a constant"):
        ours = S.warmup_exponential_decay(0.0, 1.0, 5, 0, 0.5)
    ref = optax.warmup_exponential_decay_schedule(0.0, 1.0, 5, 0, 0.5)
    t = np.arange(0, 12)
    np.testing.assert_allclose([float(ours(i)) for i in t], [float(ref(i)) for i in t], rtol=1e-6)
