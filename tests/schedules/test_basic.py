"""Basic schedules against Optax and NumPy, step handling, dtypes and argument validation."""

from __future__ import annotations

import math
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gradtx
from gradtx import schedules as S
from gradtx.schedules._common import as_step

from ..helpers import enable_x64
from .common import INT32_MAX, boundary_steps
from .folded import at, check, checked, curve_of, fold


def optax_values(schedule, steps, jit: bool = True):
    """Optax's values (the reference), one vmap over all steps."""
    arr = jnp.asarray(np.asarray(steps).clip(0, INT32_MAX), jnp.int32)
    fn = jax.vmap(schedule)
    return np.asarray((jax.jit(fn) if jit else fn)(arr), np.float64)


OPTAX_CASES = [
    ("constant", S.constant(0.3), optax.constant_schedule(0.3), ()),
    (
        "linear",
        S.linear(1.0, 0.01, 30, 5),
        optax.linear_schedule(1.0, 0.01, 30, 5),
        (5, 35),
    ),
    (
        "polynomial",
        S.polynomial(1.0, 0.01, 2.0, 30, 5),
        optax.polynomial_schedule(1.0, 0.01, 2.0, 30, 5),
        (5, 35),
    ),
    (
        "polynomial_fractional",
        S.polynomial(2.0, 0.5, 0.5, 17),
        optax.polynomial_schedule(2.0, 0.5, 0.5, 17),
        (17,),
    ),
    (
        "exponential",
        S.exponential_decay(1.0, 3, 0.7, 4, False, 0.2),
        optax.exponential_decay(1.0, 3, 0.7, 4, False, 0.2),
        (4, 7, 10),
    ),
    (
        "exponential_staircase_growth",
        S.exponential_decay(1.0, 3, 1.3, 4, True, 3.0),
        optax.exponential_decay(1.0, 3, 1.3, 4, True, 3.0),
        (4, 7, 10, 19),
    ),
    (
        "exponential_no_end",
        S.exponential_decay(0.5, 7, 0.9),
        optax.exponential_decay(0.5, 7, 0.9),
        (7, 14),
    ),
    (
        "piecewise_constant",
        S.piecewise_constant(1.0, {5: 0.5, 2: 0.1, 40: 3.0}),
        optax.piecewise_constant_schedule(1.0, {5: 0.5, 2: 0.1, 40: 3.0}),
        (2, 5, 40),
    ),
    (
        "piecewise_interpolate_linear",
        S.piecewise_interpolate("linear", 1.0, {3: 0.5, 10: 4.0, 11: 0.1}),
        optax.piecewise_interpolate_schedule("linear", 1.0, {3: 0.5, 10: 4.0, 11: 0.1}),
        (3, 10, 11),
    ),
    (
        "piecewise_interpolate_cosine_from_0",
        S.piecewise_interpolate("cosine", 1.0, {0: 2.0, 5: 0.5, 20: 3.0}),
        optax.piecewise_interpolate_schedule("cosine", 1.0, {0: 2.0, 5: 0.5, 20: 3.0}),
        (5, 20),
    ),
]


# Optax 0.2.8's polynomial_schedule with a fractional power is NaN under jax.jit from the end of
# the transition on (XLA turns t / T into t * (1/T), so 1 - T/T < 0); it is right eagerly, so that
# case uses Optax's eager values.
EAGER_OPTAX = {"polynomial_fractional"}
ALIAS_KWARGS = dict(
    init_value=1.0, end_value=0.1, power=3.0, transition_steps=9, transition_begin=2
)
MULTISTEP = (0.8, 0.3, [4, 9, 9, 20])  # init, gamma, milestones
NOAM = (512, 40)  # d_model, warmup
ENDS = [(0.0, 0.1), (1e-3, 0.0), (0.3, 0.1), (2.0, 5.0)]  # (init, end)


def _cases():
    """Every schedule this module evaluates under jit (with Optax's references), at once."""
    cases = {}
    for name, ours, ref, points in OPTAX_CASES:
        steps = boundary_steps(*points)
        cases["ours", name] = checked(ours, steps, eager=3)
        if name not in EAGER_OPTAX:
            cases["optax", name] = curve_of(ref, steps)
    cases["fractional_end"] = at(S.polynomial(2.0, 0.5, 0.5, 17), [17, 18, 1000])
    steps = boundary_steps(2, 11)
    cases["alias"] = curve_of(gradtx.polynomial_schedule(**ALIAS_KWARGS), steps)
    cases["alias_optax"] = curve_of(optax.polynomial_schedule(**ALIAS_KWARGS), steps)
    init, gamma, milestones = MULTISTEP
    cases["multistep"] = checked(S.multistep(init, gamma, milestones), boundary_steps(*milestones))
    d_model, warm = NOAM
    steps = boundary_steps(warm - 1, warm, high=400)
    cases["noam"] = checked(S.inverse_sqrt(d_model**-0.5 * warm**-0.5, warm), steps)
    cases["noam_peak"] = curve_of(S.inverse_sqrt(2.0, warm), [warm - 1])
    for i, (make, _) in enumerate(DEGENERATE):
        with warnings.catch_warnings():  # test_degenerate_... checks the warning
            warnings.simplefilter("ignore", UserWarning)
            cases["degenerate", i] = curve_of(make(), np.arange(0, 30, 7))
    with warnings.catch_warnings():  # test_negative_transition_begin_... checks the warning
        warnings.simplefilter("ignore", UserWarning)
        cases["negative_begin"] = curve_of(S.linear(1.0, 0.0, 10, -4), range(14))
    t = np.arange(0, 40)
    cases["closed_polynomial"] = curve_of(S.polynomial(3.0, 1.0, 3.0, 20, 4), t)
    cases["closed_staircase"] = curve_of(S.exponential_decay(2.0, 4, 0.5, staircase=True), t)
    for init, end in ENDS:
        for kind, sched in (
            ("linear", gradtx.schedules.linear(init, end, 100)),
            ("polynomial", gradtx.schedules.polynomial(init, end, 2.0, 100, transition_begin=5)),
        ):
            cases["ends", kind, init, end] = at(sched, [np.int32(0), np.int32(1000)])
    cases["ends_zero"] = at(gradtx.schedules.linear(0.0, 0.1, 100), [np.int32(0)])
    for kind, make in PIECEWISE:
        for how, boundaries in (("dict", {20: 0.5, 10: 0.1}), ("pairs", [(10, 0.1), (20, 0.5)])):
            cases["piecewise", kind, how] = curve_of(make(boundaries), range(40), array=True)
    return cases


CASES = fold(_cases)


@pytest.mark.across_versions
@pytest.mark.parametrize(("name", "ours", "ref", "points"), OPTAX_CASES, ids=lambda c: c)
def test_matches_optax(name, ours, ref, points):
    values = CASES("ours", name)
    if name in EAGER_OPTAX:
        expected = optax_values(ref, values.case.steps, jit=False)
    else:
        expected = CASES("optax", name).curve
    check(values, expected)


def test_fractional_power_is_not_nan_at_the_end_under_jit():
    """Regression: 1 - tau/T computed as a float was slightly negative at tau = T under jit."""
    values = CASES("fractional_end")  # S.polynomial(2.0, 0.5, 0.5, 17) at 17, 18, 1000
    assert values.case.ints == (17, 18, 1000)
    for value in values.jitted:
        assert float(value) == 0.5


def test_optax_aliases_take_optax_keywords():
    # gradtx.polynomial_schedule(**ALIAS_KWARGS) and Optax's, on boundary_steps(2, 11)
    np.testing.assert_allclose(CASES("alias").curve, CASES("alias_optax").curve, rtol=1e-6)
    assert S.linear_schedule is S.linear and gradtx.join_schedules is S.join


def test_multistep_matches_numpy():
    init, gamma, milestones = MULTISTEP
    check(CASES("multistep"), lambda t: init * gamma ** sum(t >= m for m in milestones))


def test_inverse_sqrt_is_the_noam_formula():
    d_model, warm = NOAM

    def noam(t):  # Vaswani et al. 2017, eq. 3, with step_num = t + 1
        s = t + 1
        return d_model**-0.5 * min(s**-0.5, s * warm**-1.5)

    check(CASES("noam"), noam)  # S.inverse_sqrt(d_model**-0.5 * warm**-0.5, warm)
    values = CASES("noam_peak").curve  # S.inverse_sqrt(2.0, warm) at warm - 1
    np.testing.assert_allclose(values, [2.0], rtol=1e-6)  # the peak is the last warm-up step


def test_traced_hyperparameters():
    """Values may be traced (e.g. injected): one compiled function serves all of them."""

    @jax.jit
    def value(init, rate, step):
        return S.exponential_decay(init, 5, rate)(step)

    np.testing.assert_allclose(value(2.0, 0.5, 10), 0.5, rtol=1e-6)
    np.testing.assert_allclose(value(3.0, 0.25, 5), 0.75, rtol=1e-6)


# --------------------------------------------------------------------------------------------
# Steps and dtypes
# --------------------------------------------------------------------------------------------


@pytest.mark.across_versions
@pytest.mark.parametrize(
    "step",
    [
        7,
        np.int64(7),
        np.int16(7),
        np.uint32(7),
        np.float32(7.6),
        7.2,
        jnp.asarray(7, jnp.int32),
        jnp.asarray(7, jnp.uint32),
        jnp.asarray(7.9, jnp.float32),
        jnp.asarray(7, jnp.bfloat16),
    ],
    ids=lambda s: f"{type(s).__name__}-{getattr(s, 'dtype', '')}",
)
def test_output_is_float32_for_any_step_type(step):
    schedule = S.linear(1.0, 0.0, 10)
    value = schedule(step)
    assert value.dtype == jnp.float32
    np.testing.assert_allclose(value, 0.3, rtol=1e-6)  # fractional steps are floored


def test_bool_and_negative_steps():
    schedule = S.linear(1.0, 0.0, 10)
    np.testing.assert_allclose(schedule(True), 0.9, rtol=1e-6)
    np.testing.assert_allclose(schedule(-5), 1.0)
    np.testing.assert_allclose(schedule(jnp.asarray([-3, 2])), [1.0, 0.8], rtol=1e-6)


@pytest.mark.across_versions
def test_steps_past_int32_saturate_instead_of_wrapping():
    # 2**32 + 5 would wrap to 5 (value 2**-0.5); saturated it is far past the decay (value 0).
    schedule = S.exponential_decay(1.0, 10, 0.5)
    top = float(schedule(INT32_MAX))
    assert top == 0.0
    for big in [2**32 + 5, 2**40, np.int64(2**32 + 5), np.uint64(2**63 + 5), float(2**40)]:
        assert float(schedule(big)) == top, big
    arr = np.asarray([2**32 + 5, 2**33, 5], np.int64)
    np.testing.assert_allclose(schedule(arr), [0.0, 0.0, 0.5**0.5], rtol=1e-6)
    assert as_step(2**40).dtype == jnp.int32 and int(as_step(2**40)) == INT32_MAX
    assert int(as_step(jnp.asarray([2**32 - 1], jnp.uint32))[0]) == INT32_MAX
    assert int(as_step(jnp.asarray(3e12, jnp.float32))) == INT32_MAX
    assert int(as_step(jnp.asarray(jnp.nan))) == 0


@pytest.mark.across_versions
def test_int64_steps_under_x64_saturate_when_traced():
    schedule = S.exponential_decay(1.0, 10, 0.5)
    with enable_x64(True):
        steps = jnp.asarray([2**40, 5], jnp.int64)
        out = jax.jit(schedule)(steps)
        assert out.dtype == jnp.float32
        np.testing.assert_allclose(out, [0.0, 0.5**0.5], rtol=1e-6)
        assert schedule(2.0).dtype == jnp.float32  # float64 hyperparameters, float32 out


def test_no_retrace_across_steps():
    schedule = S.polynomial(1.0, 0.0, 2.0, 50)
    fn = jax.jit(schedule)
    traces = 0

    def counting(step):
        nonlocal traces
        traces += 1
        return schedule(step)

    fn = jax.jit(counting)
    for s in [0, 3, 70, INT32_MAX]:
        fn(s)
    assert traces == 1


def test_repr_names_the_arguments():
    assert repr(S.linear(1.0, 0.5, 10)) == (
        "linear(init_value=1.0, end_value=0.5, transition_steps=10, transition_begin=0)"
    )
    assert S.cosine_decay(1.0, 10).__name__ == "cosine_decay"


# --------------------------------------------------------------------------------------------
# Validation at construction
# --------------------------------------------------------------------------------------------

INVALID = [
    (lambda: S.linear(1.0, 0.0, 10.5), "linear", "transition_steps"),
    (lambda: S.polynomial(1.0, 0.0, 0.0, 10), "polynomial", "power"),
    (lambda: S.exponential_decay(1.0, 10, -0.5), "exponential_decay", "decay_rate"),
    (lambda: S.piecewise_constant(1.0, {5: -0.1}), "piecewise_constant", "5"),
    (lambda: S.piecewise_constant(1.0, {-2: 0.1}), "piecewise_constant", "boundar"),
    (lambda: S.piecewise_constant(1.0, [2, 0.1]), "piecewise_constant", "dict"),
    (lambda: S.piecewise_interpolate("cubic", 1.0, {}), "piecewise_interpolate", "linear"),
    (lambda: S.piecewise_interpolate("linear", 1.0, {5: -0.5}), "piecewise_interpolate", "5"),
    (lambda: S.multistep(1.0, 0.1, [10, 5]), "multistep", "milestones"),
    (lambda: S.multistep(1.0, -0.1, [5]), "multistep", "gamma"),
    (lambda: S.inverse_sqrt(1.0, 0), "inverse_sqrt", "warmup_steps"),
]


@pytest.mark.parametrize(("make", "who", "arg"), INVALID)
def test_invalid_arguments_raise_at_construction(make, who, arg):
    with pytest.raises(ValueError) as info:
        make()
    message = str(info.value)
    assert message.startswith(who) and arg in message, message
    assert "got" in message


PIECEWISE = [
    ("constant", lambda b: S.piecewise_constant(1.0, b)),
    ("interpolate", lambda b: S.piecewise_interpolate("linear", 1.0, b)),
]

DEGENERATE = [
    (lambda: S.linear(1.0, 0.0, 0), "linear: transition_steps=0 <= 0 gives a constant"),
    (lambda: S.polynomial(2.0, 0.0, 2.0, -3), "polynomial: transition_steps=-3 <= 0"),
    (lambda: S.exponential_decay(2.0, 0, 0.5), "exponential_decay: transition_steps=0"),
    (lambda: S.exponential_decay(2.0, 10, 0.0), "exponential_decay: decay_rate=0 gives"),
]


@pytest.mark.parametrize(("index", "make", "warning"), [(i, *c) for i, c in enumerate(DEGENERATE)])
def test_degenerate_transitions_are_optax_constant_schedules_with_a_warning(index, make, warning):
    """Optax documents a constant schedule at init_value here; gradtx follows and warns."""
    with pytest.warns(UserWarning, match=warning):
        schedule = make()
    assert schedule.__name__ == "constant"
    values = CASES("degenerate", index)  # the same make(), at steps 0, 7, ..., 28 under jit
    assert values.case.schedule.__name__ == "constant"
    np.testing.assert_array_equal(values.curve, float(schedule(0)))
    assert float(schedule(100)) in (1.0, 2.0)


def test_negative_transition_begin_counts_from_zero_as_in_optax():
    with pytest.warns(UserWarning, match=r"linear: transition_begin=-4 < 0 counts from step 0"):
        S.linear(1.0, 0.0, 10, -4)
    # Optax's reference eagerly: under jit its end is -1.5e-8, not 0 (see the test below)
    ref = optax.linear_schedule(1.0, 0.0, 10, -4)
    t = np.arange(0, 14)
    # that schedule under jit (the module's one program), at steps 0..13
    np.testing.assert_allclose(CASES("negative_begin").curve, [float(ref(i)) for i in t], rtol=1e-6)


def test_messages_name_the_received_value_and_fix():
    with pytest.raises(ValueError, match=r"linear: transition_steps must be an integer"):
        S.linear(1.0, 0.0, 2.5)
    with pytest.raises(ValueError, match=r"pass them as \[5, 10\]"):
        S.multistep(1.0, 0.1, [10, 5])


def test_float_math_matches_closed_forms():
    """Spot checks of the formulas themselves (independent of Optax)."""
    t = np.arange(0, 40)
    got = CASES("closed_polynomial").curve  # S.polynomial(3.0, 1.0, 3.0, 20, 4)
    tau = np.clip(t - 4, 0, 20)
    np.testing.assert_allclose(got, 2.0 * (1 - tau / 20) ** 3 + 1.0, rtol=1e-6)
    got = CASES("closed_staircase").curve  # S.exponential_decay(2.0, 4, 0.5, staircase=True)
    np.testing.assert_allclose(got, 2.0 * 0.5 ** (t // 4), rtol=1e-6)
    assert math.isclose(float(S.constant(0.25)(123)), 0.25)


@pytest.mark.parametrize(("init", "end"), ENDS)
def test_linear_and_polynomial_hit_their_ends_exactly_under_jit(init, end):
    # XLA turns the division by T into a multiplication by 1/T, so T / T came out as 1 - ulp and
    # linear(0, 0.1, 100) started at -3.3e-9 under jit (0.0 eagerly, and in Optax).
    # The jitted values: linear(init, end, 100) and polynomial(init, end, 2.0, 100,
    # transition_begin=5) at int32 steps 0 and 1000, in the module's one program.
    for kind in ("linear", "polynomial"):
        values = CASES("ends", kind, init, end)
        first, last = (float(v) for v in values.jitted)
        assert first == float(values.case.schedule(0))  # eagerly
        assert first == pytest.approx(init, abs=1e-7)
        assert last == np.float32(end)
    assert float(CASES("ends_zero").jitted[0]) == 0.0  # linear(0.0, 0.1, 100) at int32 0


def test_piecewise_schedules_take_step_scale_pairs_as_well_as_a_dict():
    """`gradtx.with_hyperparameters` rebuilds them from pairs (a dict key cannot be traced)."""
    # make({20: 0.5, 10: 0.1}) and make([(10, 0.1), (20, 0.5)]) for each make of PIECEWISE,
    # called on the array of steps 0..39 in the module's one program (so compiled alike)
    for kind, _ in PIECEWISE:
        from_dict = CASES("piecewise", kind, "dict").array
        from_pairs = CASES("piecewise", kind, "pairs").array
        np.testing.assert_array_equal(from_pairs, from_dict)
