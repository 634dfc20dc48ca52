"""Cosine schedules (cosine decay, warm-up + cosine, SGDR, one-cycle) against Optax and NumPy."""

from __future__ import annotations

import math

import numpy as np
import optax
import pytest

import gradtx
from gradtx import schedules as S

from .common import assert_schedule, boundary_steps, curve
from .test_basic import optax_values


@pytest.mark.parametrize(
    ("ours", "ref", "points"),
    [
        (S.cosine_decay(2.0, 25), optax.cosine_decay_schedule(2.0, 25), (25,)),
        (
            S.cosine_decay(2.0, 25, alpha=0.1, exponent=2.0),
            optax.cosine_decay_schedule(2.0, 25, alpha=0.1, exponent=2.0),
            (25,),
        ),
        (
            S.warmup_cosine_decay(0.0, 1.0, 3, 28, end_value=0.1, exponent=1.5),
            optax.warmup_cosine_decay_schedule(0.0, 1.0, 3, 28, end_value=0.1, exponent=1.5),
            (2, 3, 28),
        ),
        (
            S.warmup_cosine_decay(0.5, 1.0, 0, 13, end_value=0.2),
            optax.warmup_cosine_decay_schedule(0.5, 1.0, 0, 13, end_value=0.2),
            (13,),
        ),
        (
            S.one_cycle(37, 1.0),
            optax.cosine_onecycle_schedule(37, 1.0),
            (int(0.3 * 37), 37),
        ),
        (
            S.cosine_onecycle_schedule(101, 0.4, 0.29, 10.0, 100.0),
            optax.cosine_onecycle_schedule(101, 0.4, 0.29, 10.0, 100.0),
            (int(0.29 * 101), 101),
        ),
        (
            S.linear_onecycle_schedule(37, 1.0),
            optax.linear_onecycle_schedule(37, 1.0),
            (int(0.3 * 37), int(0.85 * 37), 37),
        ),
        (
            S.one_cycle(50, 2.0, 0.2, 5.0, 50.0, anneal="linear", pct_final=0.6),
            optax.linear_onecycle_schedule(50, 2.0, 0.2, 0.6, 5.0, 50.0),
            (10, 30, 50),
        ),
    ],
    ids=lambda c: getattr(c, "name", None),
)
def test_matches_optax(ours, ref, points):
    steps = boundary_steps(*points)
    assert_schedule(ours, optax_values(ref, steps), steps, atol=1e-6, eager=3)


def test_sgdr_schedule_matches_optax():
    kwargs = [
        dict(init_value=0.1, peak_value=1.0, warmup_steps=2, decay_steps=7, end_value=0.0),
        dict(init_value=0.1, peak_value=0.5, warmup_steps=0, decay_steps=9, end_value=0.05),
        dict(init_value=0.0, peak_value=0.3, warmup_steps=3, decay_steps=11, exponent=2.0),
    ]
    steps = boundary_steps(2, 7, 16, 19, 27)
    expected = optax_values(optax.sgdr_schedule(kwargs), steps)
    assert_schedule(S.sgdr_schedule(kwargs), expected, steps, atol=1e-6, eager=3)
    assert_schedule(gradtx.sgdr_schedule(kwargs), expected, steps, atol=1e-6, eager=1)


def test_sgdr_is_the_paper_formula():
    peak, first, mult, decay, eta_min = 1.0, 5, 2, 0.5, 0.01

    def paper(t):  # Loshchilov & Hutter 2017, eq. 5, T_i = T_0 * T_mult^i, restarts at the peak
        start, i = 0, 0
        while i < 3:
            length = first * mult**i
            if t < start + length:
                top = peak * decay**i
                return eta_min + 0.5 * (top - eta_min) * (
                    1 + math.cos(math.pi * (t - start) / length)
                )
            start, i = start + length, i + 1
        return eta_min

    schedule = S.sgdr(peak, first, 3, cycle_mult=mult, peak_decay=decay, end_value=eta_min)
    steps = boundary_steps(5, 15, 35)
    assert_schedule(schedule, paper, steps, eager=3)

    # The same schedule written as Optax cycles.
    cycles = [
        dict(
            init_value=peak * decay**i,
            peak_value=peak * decay**i,
            warmup_steps=0,
            decay_steps=first * mult**i,
            end_value=eta_min,
        )
        for i in range(3)
    ]
    np.testing.assert_allclose(
        curve(schedule, steps), optax_values(optax.sgdr_schedule(cycles), steps), atol=1e-6
    )


def test_warmup_cosine_end_value_with_zero_peak():
    """Optax ignores end_value when peak_value is 0; gradtx's formula keeps it."""
    values = curve(S.warmup_cosine_decay(0.5, 0.0, 2, 6, end_value=0.1), [0, 1, 2, 6, 9])
    np.testing.assert_allclose(values, [0.5, 0.25, 0.0, 0.1, 0.1], atol=1e-7)


INVALID = [
    (lambda: S.cosine_decay(1.0, 0), "cosine_decay", "decay_steps"),
    (lambda: S.cosine_decay(1.0, 10, exponent=0.0), "cosine_decay", "exponent"),
    (lambda: S.warmup_cosine_decay(0.0, 1.0, 10, 10), "warmup_cosine_decay", "warmup_steps"),
    (lambda: S.warmup_cosine_decay(0.0, 1.0, 20, 10), "warmup_cosine_decay", "decay_steps"),
    (lambda: S.warmup_cosine_decay(0.0, 1.0, -1, 10), "warmup_cosine_decay", "warmup_steps"),
    (lambda: S.sgdr(1.0, 0, 3), "sgdr", "cycle_steps"),
    (lambda: S.sgdr(1.0, 10, 0), "sgdr", "num_cycles"),
    (lambda: S.sgdr(1.0, 10, 3, cycle_mult=0), "sgdr", "cycle_mult"),
    (lambda: S.sgdr(1.0, 10, 40, cycle_mult=2), "sgdr", "int32"),
    (lambda: S.sgdr_schedule([]), "sgdr_schedule", "cosine_kwargs"),
    (
        lambda: S.sgdr_schedule(
            [dict(init_value=0.0, peak_value=1.0, warmup_steps=5, decay_steps=5)]
        ),
        "sgdr_schedule",
        "warmup_steps",
    ),
    (lambda: S.sgdr_schedule([dict(init_value=0.0, peak=1.0)]), "sgdr_schedule", "peak"),
    (lambda: S.one_cycle(0, 1.0), "one_cycle", "transition_steps"),
    (lambda: S.one_cycle(10, 1.0, pct_start=1.0), "one_cycle", "pct_start"),
    (
        lambda: S.one_cycle(10, 1.0, pct_start=0.5, anneal="linear", pct_final=0.4),
        "one_cycle",
        "pct_final",
    ),
    (lambda: S.one_cycle(10, 1.0, anneal="exp"), "one_cycle", "anneal"),
    (lambda: S.one_cycle(10, 1.0, div_factor=0.0), "one_cycle", "div_factor"),
]


@pytest.mark.parametrize(("make", "who", "arg"), INVALID)
def test_invalid_arguments_raise_at_construction(make, who, arg):
    with pytest.raises(ValueError) as info:
        make()
    message = str(info.value)
    assert message.startswith(who) and arg in message, message
