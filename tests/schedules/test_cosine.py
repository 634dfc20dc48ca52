"""Cosine schedules (cosine decay, warm-up + cosine, SGDR, one-cycle) against Optax and NumPy."""

from __future__ import annotations

import math

import numpy as np
import optax
import pytest

import gradtx
from gradtx import schedules as S

from .common import boundary_steps
from .folded import check, checked, curve_of, fold

MATCHES = [
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
]
SGDR = [
    dict(init_value=0.1, peak_value=1.0, warmup_steps=2, decay_steps=7, end_value=0.0),
    dict(init_value=0.1, peak_value=0.5, warmup_steps=0, decay_steps=9, end_value=0.05),
    dict(init_value=0.0, peak_value=0.3, warmup_steps=3, decay_steps=11, exponent=2.0),
]
PAPER = dict(peak=1.0, first=5, mult=2, decay=0.5, eta_min=0.01)  # test_sgdr_is_the_paper_formula
HUGE = [2**31 + 10, 10**10]
INT32_MAX = 2**31 - 1


def _cases():
    """Every schedule this module evaluates under jit, with Optax's references."""
    cases = {}
    for ours, ref, points in MATCHES:
        steps = boundary_steps(*points)
        cases["ours", id(ours)] = checked(ours, steps, eager=3)
        cases["optax", id(ours)] = curve_of(ref, steps)
    steps = boundary_steps(2, 7, 16, 19, 27)
    cases["sgdr_schedule"] = checked(S.sgdr_schedule(SGDR), steps, eager=3)
    cases["sgdr_schedule_alias"] = checked(gradtx.sgdr_schedule(SGDR), steps, eager=1)
    cases["sgdr_schedule_optax"] = curve_of(optax.sgdr_schedule(SGDR), steps)
    peak, first, mult, decay, eta_min = PAPER.values()
    schedule = S.sgdr(peak, first, 3, cycle_mult=mult, peak_decay=decay, end_value=eta_min)
    steps = boundary_steps(5, 15, 35)
    cases["paper"] = checked(schedule, steps, eager=3)
    cycles = [  # the same schedule written as Optax cycles
        dict(
            init_value=peak * decay**i,
            peak_value=peak * decay**i,
            warmup_steps=0,
            decay_steps=first * mult**i,
            end_value=eta_min,
        )
        for i in range(3)
    ]
    cases["paper_optax"] = curve_of(optax.sgdr_schedule(cycles), steps)
    schedule = S.warmup_cosine_decay(0.5, 0.0, 2, 6, end_value=0.1)
    cases["zero_peak"] = curve_of(schedule, [0, 1, 2, 6, 9])
    for d in HUGE:
        steps = [0, 1000, 2**30, INT32_MAX]
        cases["cosine_huge", d] = checked(S.cosine_decay(2.0, d, alpha=0.1), steps)
        cases["cosine_huge_optax", d] = curve_of(
            optax.cosine_decay_schedule(2.0, d, alpha=0.1), steps
        )
        steps = [0, 50, 100, 1000, 2**30, INT32_MAX]
        ours = S.warmup_cosine_decay(0.0, 1.0, 100, d, end_value=0.1)
        ref = optax.warmup_cosine_decay_schedule(0.0, 1.0, 100, d, end_value=0.1)
        cases["warmup_huge", d] = checked(ours, steps)
        cases["warmup_huge_optax", d] = curve_of(ref, steps)
    warm = 2**31 + 10
    cases["warmup_never_ends"] = curve_of(
        S.warmup_cosine_decay(0.0, 1.0, warm, warm + 5), [0, 2**30, INT32_MAX]
    )
    kwargs = [dict(init_value=0.0, peak_value=1.0, warmup_steps=10, decay_steps=2**30 + 7)] * 3
    steps = [0, 5, 10, 2**29, 2**30 + 7, 2**30 + 12, INT32_MAX]
    cases["sgdr_cycles"] = curve_of(S.sgdr_schedule(kwargs), steps)
    long = [dict(init_value=0.0, peak_value=1.0, warmup_steps=10, decay_steps=2**31 + 10)] * 2
    cases["sgdr_long"] = curve_of(S.sgdr_schedule(long), [0, 5, 10, 2**30])
    start = 10 * (2**27 - 1)
    steps = [0, 5, 10, start, start + 2**29, INT32_MAX]
    cases["sgdr_40"] = curve_of(S.sgdr(1.0, 10, 40, cycle_mult=2), steps)
    for anneal in ("cosine", "linear"):
        schedule = S.one_cycle(10**10, 1.0, anneal=anneal)
        cases["one_cycle_huge", anneal] = curve_of(schedule, [0, 1000, 2**30, INT32_MAX])
    return cases


CASES = fold(_cases)


@pytest.mark.across_versions
@pytest.mark.parametrize(("ours", "ref", "points"), MATCHES, ids=lambda c: getattr(c, "name", None))
def test_matches_optax(ours, ref, points):
    check(CASES("ours", id(ours)), CASES("optax", id(ours)).curve, atol=1e-6)


@pytest.mark.across_versions
def test_sgdr_schedule_matches_optax():
    expected = CASES("sgdr_schedule_optax").curve
    check(CASES("sgdr_schedule"), expected, atol=1e-6)
    check(CASES("sgdr_schedule_alias"), expected, atol=1e-6)


def test_sgdr_is_the_paper_formula():
    peak, first, mult, decay, eta_min = PAPER.values()

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

    values = CASES("paper")  # S.sgdr(peak, first, 3, cycle_mult=mult, ...) on boundary steps
    check(values, paper)
    # The same schedule written as Optax cycles.
    np.testing.assert_allclose(values.curve, CASES("paper_optax").curve, atol=1e-6)


def test_warmup_cosine_end_value_with_zero_peak():
    """Optax ignores end_value when peak_value is 0; gradtx's formula keeps it."""
    values = CASES("zero_peak").curve  # S.warmup_cosine_decay(0.5, 0.0, 2, 6, end_value=0.1)
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


# --------------------------------------------------------------------------------------------
# Lengths past the int32 step range (Optax accepts them): the step saturates at 2**31 - 1, the
# length enters the cosine as a float. Before the fix these raised an OverflowError when called.
# --------------------------------------------------------------------------------------------


@pytest.mark.across_versions
@pytest.mark.parametrize("decay_steps", HUGE)
def test_cosine_decay_accepts_decay_steps_past_int32(decay_steps):
    # S.cosine_decay(2.0, decay_steps, alpha=0.1) against Optax, on [0, 1000, 2**30, INT32_MAX]
    expected = CASES("cosine_huge_optax", decay_steps).curve
    check(CASES("cosine_huge", decay_steps), expected, atol=1e-6)
    # Steps saturate: 2**40 is step 2**31 - 1.
    assert float(S.cosine_decay(2.0, decay_steps)(2**40)) == float(
        S.cosine_decay(2.0, decay_steps)(INT32_MAX)
    )


@pytest.mark.parametrize("decay_steps", HUGE)
def test_warmup_cosine_decay_accepts_decay_steps_past_int32(decay_steps):
    # S.warmup_cosine_decay(0.0, 1.0, 100, decay_steps, end_value=0.1) against Optax
    expected = CASES("warmup_huge_optax", decay_steps).curve
    check(CASES("warmup_huge", decay_steps), expected, atol=1e-6)


def test_warmup_past_int32_never_ends():
    warm = 2**31 + 10
    values = CASES("warmup_never_ends")  # S.warmup_cosine_decay(0.0, 1.0, warm, warm + 5)
    np.testing.assert_allclose(values.curve, values.case.steps / warm, rtol=1e-6)


def test_sgdr_schedule_cycles_past_int32():
    # 3 cycles of dict(init_value=0.0, peak_value=1.0, warmup_steps=10, decay_steps=2**30 + 7)
    steps = [0, 5, 10, 2**29, 2**30 + 7, 2**30 + 12, INT32_MAX]
    # Optax itself overflows on the third cycle's boundary; its first two cycles are the formula.
    decay = lambda t: 0.5 * (1.0 + np.cos(np.pi * t / (2**30 - 3)))
    local = lambda t: t / 10 if t < 10 else decay(t - 10)
    expected = [local(t if t < 2**30 + 7 else t - (2**30 + 7)) for t in steps]
    assert list(CASES("sgdr_cycles").case.steps) == steps
    np.testing.assert_allclose(CASES("sgdr_cycles").curve, expected, atol=1e-6)
    # 2 cycles of decay_steps=2**31 + 10, on steps [0, 5, 10, 2**30]
    expected = [0.0, 0.5, 1.0, 0.5 * (1 + np.cos(np.pi * (2**30 - 10) / 2**31))]
    np.testing.assert_allclose(CASES("sgdr_long").curve, expected, atol=1e-6)


def test_sgdr_keeps_the_cycles_that_start_within_int32():
    # 40 doubling cycles of 10 steps last ~1e13 steps; the steps reached are cycles 0..27.
    values = CASES("sgdr_40")  # S.sgdr(1.0, 10, 40, cycle_mult=2)
    start = 10 * (2**27 - 1)  # cycle 27 starts here, with length 10 * 2**27
    np.testing.assert_array_equal(values.case.steps, [0, 5, 10, start, start + 2**29, INT32_MAX])
    tau = np.array([0, 5, 0, 0, 2**29, INT32_MAX - start])
    length = np.array([10, 10, 20, 10 * 2**27, 10 * 2**27, 10 * 2**27])
    expected = 0.5 * (1.0 + np.cos(np.pi * tau / length))
    np.testing.assert_allclose(values.curve, expected, atol=1e-6)


@pytest.mark.parametrize("anneal", ["cosine", "linear"])
def test_one_cycle_accepts_transition_steps_past_int32(anneal):
    # Optax overflows here (its boundaries are int32); the formula instead.
    total = 10**10
    values = CASES("one_cycle_huge", anneal)  # S.one_cycle(total, 1.0, anneal=anneal)
    steps = values.case.steps
    rise = steps / (0.3 * total)
    ease = rise if anneal == "linear" else 0.5 * (1.0 - np.cos(np.pi * rise))
    expected = 0.04 + 0.96 * ease
    np.testing.assert_allclose(values.curve, expected, rtol=1e-5)
