"""nnabla-compatible schedules against a NumPy/Python transcription of nnabla's schedulers and
of its NNP loader (division of step counts by the number of workers)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from gradtx import schedules as S

from .common import boundary_steps
from .folded import check, checked, curve_of, fold

# --------------------------------------------------------------------------------------------
# Transcription of nnabla.utils.learning_rate_scheduler (Python floats, iteration from 0)
# --------------------------------------------------------------------------------------------


def nn_polynomial(init_lr, max_iter, power):
    return lambda it: init_lr * (1.0 - it * 1.0 / max_iter) ** power


def nn_cosine(init_lr, max_iter):
    return lambda it: init_lr * ((math.cos(it * 1.0 / max_iter * math.pi) + 1.0) * 0.5)


def nn_exponential(init_lr, gamma, iter_interval=1):
    return lambda it: init_lr * gamma ** (it // iter_interval)


def nn_step(init_lr, gamma, iter_steps):
    return lambda it: init_lr * gamma ** sum(1 for s in iter_steps if it >= s)


def nn_linear_warmup(scheduler, warmup_iter):
    def lr(it):
        value = scheduler(it)
        if it < warmup_iter:
            value *= (it + 1) / warmup_iter
        return value

    return lr


def nn_loader(init_lr, solver, comm):
    """What nnabla's `_create_optimizer` builds from a solver message, with `comm` workers."""
    kind = solver.get("lr_scheduler_type", "")
    sched = nn_exponential(init_lr, 1.0, 1)
    if kind == "Polynomial":
        p = solver["polynomial_scheduler_param"]
        if p["power"] != 0.0:
            sched = nn_polynomial(init_lr, p["max_iter"] // comm, p["power"])
    elif kind == "Cosine":
        sched = nn_cosine(init_lr, solver["cosine_scheduler_param"]["max_iter"] // comm)
    elif kind == "Exponential":
        p = solver["exponential_scheduler_param"]
        if p["gamma"] != 1.0:
            interval = p["iter_interval"] // comm if p["iter_interval"] > comm else 1
            sched = nn_exponential(init_lr, p["gamma"], interval)
    elif kind == "Step":
        p = solver["step_scheduler_param"]
        if p["gamma"] != 1.0 and len(p["iter_steps"]) > 0:
            sched = nn_step(init_lr, p["gamma"], [s // comm for s in p["iter_steps"]])
    elif kind == "":
        decay, interval = solver.get("lr_decay", 0.0), solver.get("lr_decay_interval", 0)
        if interval != 0 or decay != 0.0:
            sched = nn_exponential(
                init_lr,
                decay if decay > 0.0 else 1.0,
                interval // comm if interval > comm else 1,
            )
    if solver.get("lr_warmup_scheduler_type", "") == "Linear":
        warm = solver["linear_warmup_scheduler_param"]["warmup_iter"]
        if warm >= comm:
            sched = nn_linear_warmup(sched, warm // comm)
    return sched


# --------------------------------------------------------------------------------------------
# The cases, all evaluated under jit by one program (folded.fold)
# --------------------------------------------------------------------------------------------

POLY_POWERS, POLY_COMMS = [1.0, 2.0, 3.0], [1, 3, 8]
COSINE_COMMS = [1, 4]
EXPONENTIAL = [(1, 1), (10, 1), (10, 3), (10, 10), (10, 16), (0, 1)]  # (interval, comm)
STEP_COMMS = [1, 4]
STEP_ITERS = [60, 10, 30, 30]
WARMUP = [(12, 1), (12, 5), (12, 12), (12, 16), (0, 1)]  # (warmup_iter, comm)
SOLVER_COMMS = [1, 2, 5, 16]
CPP_QUIRK = [(0.9, 4), (0.95, 1), (0.5, 3)]  # (decay, interval)
SOLVER_STEPS = boundary_steps(5, 9, 12, 20, 32, 60, high=150)
LEGACY_STEPS = boundary_steps(7, 14, 21)


def _cases():
    cases = {}
    for power in POLY_POWERS:
        for comm in POLY_COMMS:
            m = 120 // comm
            cases["polynomial", power, comm] = checked(
                S.nnabla_polynomial(0.1, 120, power, comm_size=comm),
                boundary_steps(m, 2 * m, 3 * m),
                eager=2,
            )
    fractional = S.nnabla_polynomial(0.1, 40, 0.5)
    cases["fractional"] = curve_of(fractional, range(41))
    cases["fractional_past"] = curve_of(fractional, [41, 100, 2**31 - 1])
    clamped = S.nnabla_polynomial(0.1, 40, 0.5, clamp=True)
    cases["fractional_clamp"] = curve_of(clamped, [40, 41, 1000])
    for comm in COSINE_COMMS:
        m = 50 // comm
        cases["cosine", comm] = checked(
            S.nnabla_cosine(1e-2, 50, comm_size=comm),
            boundary_steps(m, 2 * m, 3 * m, 5 * m + 3),
            eager=2,
        )
    cases["cosine_clamp"] = curve_of(S.nnabla_cosine(1.0, 10, clamp=True), [10, 15, 20])
    for interval, comm in EXPONENTIAL:
        cases["exponential", interval, comm] = checked(
            S.nnabla_exponential(0.5, 0.8, interval, comm_size=comm),
            boundary_steps(10, 20, 30),
            eager=2,
        )
    for comm in STEP_COMMS:
        cases["step", comm] = checked(
            S.nnabla_step(1.0, 0.1, STEP_ITERS, comm_size=comm),
            boundary_steps(*(s // comm for s in STEP_ITERS)),
            eager=2,
        )
    for warm, comm in WARMUP:
        m = 60 // comm
        effective = warm // comm if warm >= comm else 0
        base = S.nnabla_cosine(0.3, 60, comm_size=comm)
        cases["warmup", warm, comm] = checked(
            S.nnabla_linear_warmup(base, warm, comm_size=comm),
            boundary_steps(max(effective - 1, 0), effective, m),
            eager=2,
        )
    for i, solver in enumerate(SOLVERS):
        for comm in SOLVER_COMMS:
            schedule = S.nnabla_solver_schedule(0.2, **solver, comm_size=comm)
            cases["solver", i, comm] = curve_of(schedule, SOLVER_STEPS)
    cases["lr_decay"] = checked(S.lr_decay(0.1, 0.9, 7), LEGACY_STEPS, eager=2)
    cases["lr_decay_comm"] = checked(S.lr_decay(0.1, 0.9, 21, comm_size=3), LEGACY_STEPS, eager=1)
    cases["lr_decay_default"] = checked(S.lr_decay(0.1), LEGACY_STEPS, eager=1)
    for decay, interval in CPP_QUIRK:
        schedule = S.lr_decay(0.1, decay, interval, cpp_trainer=True)
        cases["cpp", decay, interval] = curve_of(schedule, range(60))
    return cases


CASES = fold(_cases)

# --------------------------------------------------------------------------------------------
# Single schedulers
# --------------------------------------------------------------------------------------------


@pytest.mark.across_versions
@pytest.mark.parametrize("comm", POLY_COMMS)
@pytest.mark.parametrize("power", POLY_POWERS)
def test_polynomial_including_past_max_iter(power, comm):
    check(CASES("polynomial", power, comm), nn_polynomial(0.1, 120 // comm, power))


def test_polynomial_fractional_power_past_max_iter_is_nan_not_complex():
    ref = nn_polynomial(0.1, 40, 0.5)
    steps = np.arange(0, 41)
    values = CASES("fractional").curve
    np.testing.assert_allclose(values, [ref(t) for t in steps], atol=1e-7)
    assert isinstance(ref(41), complex)  # what nnabla returns
    assert np.all(np.isnan(CASES("fractional_past").curve))
    # clamp=True holds the value reached at max_iter instead
    np.testing.assert_array_equal(CASES("fractional_clamp").curve, [0.0, 0.0, 0.0])


@pytest.mark.parametrize("comm", COSINE_COMMS)
def test_cosine_rises_again_past_max_iter(comm):
    check(CASES("cosine", comm), nn_cosine(1e-2, 50 // comm), rtol=1e-5, atol=1e-8)
    np.testing.assert_allclose(CASES("cosine_clamp").curve, [0.0, 0.0, 0.0], atol=1e-7)


@pytest.mark.parametrize(("interval", "comm"), EXPONENTIAL)
def test_exponential_interval_division(interval, comm):
    expected_interval = interval // comm if interval > comm else 1
    check(CASES("exponential", interval, comm), nn_exponential(0.5, 0.8, expected_interval))


@pytest.mark.parametrize("comm", STEP_COMMS)
def test_step_unsorted_with_repeats(comm):
    check(CASES("step", comm), nn_step(1.0, 0.1, [s // comm for s in STEP_ITERS]))


@pytest.mark.parametrize(("warm", "comm"), WARMUP)
def test_linear_warmup(warm, comm):
    m = 60 // comm
    effective = warm // comm if warm >= comm else 0
    ref = nn_cosine(0.3, m) if effective == 0 else nn_linear_warmup(nn_cosine(0.3, m), effective)
    check(CASES("warmup", warm, comm), ref)


# --------------------------------------------------------------------------------------------
# The loader: whole solver configurations
# --------------------------------------------------------------------------------------------

SOLVERS = [
    {
        "lr_scheduler_type": "Polynomial",
        "polynomial_scheduler_param": {"max_iter": 100, "power": 2.0},
    },
    {
        "lr_scheduler_type": "Polynomial",
        "polynomial_scheduler_param": {"max_iter": 100, "power": 0.0},
    },
    {"lr_scheduler_type": "Cosine", "cosine_scheduler_param": {"max_iter": 64}},
    {
        "lr_scheduler_type": "Exponential",
        "exponential_scheduler_param": {"gamma": 0.5, "iter_interval": 10},
    },
    {
        "lr_scheduler_type": "Exponential",
        "exponential_scheduler_param": {"gamma": 1.0, "iter_interval": 10},
    },
    {
        "lr_scheduler_type": "Step",
        "step_scheduler_param": {"gamma": 0.1, "iter_steps": [30, 10, 60]},
    },
    {"lr_scheduler_type": "Step", "step_scheduler_param": {"gamma": 0.1, "iter_steps": []}},
    {"lr_scheduler_type": "", "lr_decay": 0.9, "lr_decay_interval": 7},
    {"lr_scheduler_type": "", "lr_decay": 0.0, "lr_decay_interval": 5},
    {"lr_scheduler_type": ""},
    {
        "lr_scheduler_type": "Cosine",
        "cosine_scheduler_param": {"max_iter": 64},
        "lr_warmup_scheduler_type": "Linear",
        "linear_warmup_scheduler_param": {"warmup_iter": 12},
    },
    {
        "lr_scheduler_type": "Step",
        "step_scheduler_param": {"gamma": 0.5, "iter_steps": [40, 20]},
        "lr_warmup_scheduler_type": "Linear",
        "linear_warmup_scheduler_param": {"warmup_iter": 9},
    },
]


@pytest.mark.across_versions
@pytest.mark.parametrize("comm", SOLVER_COMMS)
@pytest.mark.parametrize(
    ("index", "solver"),
    list(enumerate(SOLVERS)),
    ids=[s["lr_scheduler_type"] or "legacy" for s in SOLVERS],
)
def test_solver_schedule_matches_the_loader(index, solver, comm):
    expected = nn_loader(0.2, solver, comm)
    want = [expected(int(s)) for s in SOLVER_STEPS]
    np.testing.assert_allclose(CASES("solver", index, comm).curve, want, rtol=1e-5, atol=1e-8)


def test_lr_decay_legacy_fields():
    check(CASES("lr_decay"), nn_exponential(0.1, 0.9, 7))
    check(CASES("lr_decay_comm"), nn_exponential(0.1, 0.9, 7))
    check(CASES("lr_decay_default"), nn_exponential(0.1, 1.0, 1))


@pytest.mark.parametrize(("decay", "interval"), CPP_QUIRK)
def test_lr_decay_cpp_trainer_quirk(decay, interval):
    """nnabla's C++ trainer decays after every iteration where (iter + 1) % interval != 0."""
    lr = np.float32(0.1)
    want = []
    for it in range(60):
        want.append(float(lr))  # the rate this iteration's update uses
        if (it + 1) % interval:
            lr = np.float32(lr * np.float32(decay))
    values = CASES("cpp", decay, interval).curve
    np.testing.assert_allclose(values, want, rtol=2e-5)
    if interval == 1:
        np.testing.assert_array_equal(values, np.float32(0.1))


INVALID = [
    (lambda: S.nnabla_cosine(1.0, 3, comm_size=4), "nnabla_cosine", "max_iter // comm_size"),
    (lambda: S.nnabla_cosine(1.0, 0), "nnabla_cosine", "max_iter"),
    (lambda: S.nnabla_polynomial(1.0, 100, -1.0), "nnabla_polynomial", "power"),
    (lambda: S.nnabla_polynomial(1.0, 7, 2.0, comm_size=8), "nnabla_polynomial", "comm_size"),
    (lambda: S.nnabla_exponential(1.0, 0.5, -1), "nnabla_exponential", "iter_interval"),
    (lambda: S.nnabla_exponential(1.0, 0.5, comm_size=0), "nnabla_exponential", "comm_size"),
    (lambda: S.nnabla_step(1.0, 0.5, 10), "nnabla_step", "iter_steps"),
    (lambda: S.nnabla_step(1.0, 0.5, [10, -1]), "nnabla_step", "iter_steps[1]"),
    (lambda: S.nnabla_linear_warmup(S.constant(1.0), -3), "nnabla_linear_warmup", "warmup_iter"),
    (lambda: S.lr_decay(1.0, 0.9, 0, cpp_trainer=True), "lr_decay", "lr_decay_interval"),
    (lambda: S.lr_decay(1.0, 0.9, 5, comm_size=2, cpp_trainer=True), "lr_decay", "comm_size"),
    (lambda: S.lr_decay(1.0, -0.9, 5), "lr_decay", "lr_decay"),
    (
        lambda: S.nnabla_solver_schedule(1.0, lr_scheduler_type="Cosin"),
        "nnabla_solver_schedule",
        "did you mean 'Cosine'",
    ),
    (
        lambda: S.nnabla_solver_schedule(1.0, lr_scheduler_type="Custom"),
        "nnabla_solver_schedule",
        "Custom",
    ),
    (
        lambda: S.nnabla_solver_schedule(
            1.0, lr_scheduler_type="Cosine", cosine_scheduler_param={"max_iters": 10}
        ),
        "nnabla_solver_schedule",
        "max_iter",
    ),
    (
        lambda: S.nnabla_solver_schedule(1.0, lr_warmup_scheduler_type="Cosine"),
        "nnabla_solver_schedule",
        "lr_warmup_scheduler_type",
    ),
    (
        lambda: S.nnabla_solver_schedule(1.0, lr_scheduler_type="Cosine"),
        "nnabla_cosine",
        "max_iter",
    ),
]


@pytest.mark.parametrize(("make", "who", "arg"), INVALID)
def test_invalid_arguments_raise_at_construction(make, who, arg):
    with pytest.raises(ValueError) as info:
        make()
    message = str(info.value)
    assert message.startswith(who) and arg in message, message
