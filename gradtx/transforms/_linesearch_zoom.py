"""The zoom line search: a step size satisfying the strong Wolfe conditions (Nocedal & Wright)."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from .._base._checks import (
    check_bool,
    check_in_range,
    check_int,
    check_non_negative,
    check_one_of,
    check_positive,
)
from .._base._recipe import recorded
from .._base._typing import ArrayLike, Updates
from ..core._transformation import GradientTransformation, require_params
from ..tree import add_scale, assert_same_structure, cast_like, where, zeros_like
from ..tree._math import real_vdot as tree_vdot
from ._linesearch import require_objective, value_dtype, value_fn_kwargs

_WHO = "scale_by_zoom_linesearch"


class ZoomLinesearchInfo(NamedTuple):
    """What the last zoom line search did (the fields of `optax.ZoomLinesearchInfo`).

    Attributes:
      num_linesearch_steps: int32, the number of objective evaluations.
      decrease_error: how far the last point tried misses the sufficient decrease condition
        (0: met). A positive value means the step may not decrease the objective.
      curvature_error: how far it misses the curvature condition (0: met); a positive value is
        harmless, e.g. a `max_learning_rate` that is too small.
    """

    num_linesearch_steps: jax.Array
    decrease_error: jax.Array
    curvature_error: jax.Array


class ScaleByZoomLinesearchState(NamedTuple):
    """The state of `scale_by_zoom_linesearch` (the fields of
    `optax.ScaleByZoomLinesearchState`).

    Attributes:
      learning_rate: the step size accepted by the last search (1 before the first), float32.
      value: the objective at the accepted point (:math:`+\\infty` before the first step);
        reused by `value_and_grad_from_state`.
      grad: the gradient there, in the parameters' dtypes.
      info: a `ZoomLinesearchInfo`.
    """

    learning_rate: jax.Array
    value: jax.Array
    grad: Updates
    info: ZoomLinesearchInfo


class _Point(NamedTuple):
    """A step size on the line with the objective's value and slope there."""

    stepsize: jax.Array
    value: jax.Array
    slope: jax.Array


class _Search(NamedTuple):
    count: jax.Array  # type: ignore[assignment]  # objective evaluations so far
    trial: _Point  # the last point tried
    grad: Updates  # the gradient at `trial`
    decrease_error: jax.Array
    curvature_error: jax.Array
    interval_found: jax.Array  # phase 2 (zoom) once True
    done: jax.Array
    failed: jax.Array
    low: _Point  # the bracket: value(low) <= value(high), not necessarily low < high
    high: _Point
    ref: _Point  # the third point of the cubic interpolation (slope unused)
    safe: _Point  # the best point with sufficient decrease so far (slope unused)
    safe_grad: Updates


def _cubic_min(a: _Point, b: _Point, c: _Point) -> jax.Array:
    """The critical point of the cubic through (a, f_a), (b, f_b), (c, f_c) with slope f'_a at a;
    NaN when there is none (the caller then falls back)."""
    db, dc = b.stepsize - a.stepsize, c.stepsize - a.stepsize
    rb = b.value - a.value - a.slope * db
    rc = c.value - a.value - a.slope * dc
    denom = (db * dc) ** 2 * (db - dc)
    # [A, B] = [[dc^2, -db^2], [-dc^3, db^3]] @ [rb, rc] / denom, as one matrix product (like
    # SciPy and Optax, whose rounding the step sizes then match).
    matrix = jnp.array([[dc**2, -(db**2)], [-(dc**3), db**3]])
    big_a, big_b = jnp.dot(matrix, jnp.array([rb, rc]), precision=jax.lax.Precision.HIGHEST) / denom
    radical = big_b * big_b - 3.0 * big_a * a.slope
    return a.stepsize + (-big_b + jnp.sqrt(radical)) / (3.0 * big_a)


def _quad_min(a: _Point, b: _Point) -> jax.Array:
    """The critical point of the quadratic through (a, f_a), (b, f_b) with slope f'_a at a."""
    db = b.stepsize - a.stepsize
    curvature = (b.value - a.value - a.slope * db) / (db**2)
    return a.stepsize - a.slope / (2.0 * curvature)


def _zoom_trial(low: _Point, high: _Point, ref: _Point) -> jax.Array:
    """The next step size inside the bracket: cubic, else quadratic, else bisection."""
    delta = jnp.abs(high.stepsize - low.stepsize)
    left = jnp.minimum(high.stepsize, low.stepsize)
    right = jnp.maximum(high.stepsize, low.stepsize)
    cubic = _cubic_min(low, high, ref)
    use_cubic = (cubic > left + 0.2 * delta) & (cubic < right - 0.2 * delta)
    quad = _quad_min(low, high)
    use_quad = ~use_cubic & (quad > left + 0.1 * delta) & (quad < right - 0.1 * delta)
    middle = jnp.where(use_cubic, cubic, ref.stepsize)
    middle = jnp.where(use_quad, quad, middle)
    return jnp.where(~use_cubic & ~use_quad, (low.stepsize + high.stepsize) / 2.0, middle)


@recorded
def scale_by_zoom_linesearch(
    max_linesearch_steps: int,
    max_learning_rate: ArrayLike | None = None,
    tol: ArrayLike = 0.0,
    increase_factor: ArrayLike = 2.0,
    slope_rtol: ArrayLike = 1e-4,
    curv_rtol: ArrayLike = 0.9,
    approx_dec_rtol: ArrayLike | None = 1e-6,
    stepsize_precision: ArrayLike = 1e-5,
    initial_guess_strategy: str = "keep",
    verbose: bool = False,
) -> GradientTransformation:
    r"""Scale the direction by a step size meeting the strong Wolfe conditions (zoom search).

    For the objective :math:`f`, parameters :math:`w` and direction :math:`u`, find :math:`\eta`
    with sufficient decrease and small curvature,

    .. math::

      f(w + \eta u) \le f(w) + c_1 \eta \langle u, \nabla f(w) \rangle + \epsilon, \qquad
      |\langle \nabla f(w + \eta u), u \rangle| \le c_2 |\langle \nabla f(w), u \rangle|
      + \epsilon,

    and return :math:`\eta u`. Phase 1 grows :math:`\eta` (from the initial guess, by
    `increase_factor`) until an interval containing such a step is bracketed; phase 2 zooms into
    it by cubic, quadratic or bisection steps. Close to a minimum, where :math:`f` cannot
    resolve the decrease, the first condition is relaxed to Hager and Zhang's approximate one,
    :math:`\langle \nabla f(w + \eta u), u \rangle \le (2 c_1 - 1) \langle \nabla f(w), u \rangle`
    once :math:`f(w + \eta u) \le f(w) + c_3 |f(w)|`. When no step meets both
    conditions within `max_linesearch_steps` evaluations, the best one with sufficient decrease
    is taken (a step of 0 if the objective is not finite anywhere tried).

    `update(updates, state, params, *, value, grad, value_fn, **data)` needs the objective
    `value_fn(params, **data)`, its value and gradient at `params`; `data` holds the keyword
    arguments that `value_fn` names (any other is a `TypeError`, as in Optax). The value and
    gradient at the accepted point are stored
    for `value_and_grad_from_state`. Step sizes and values are kept in float32 (float64 for
    float64 parameters); the updates keep their dtypes. `updates` must be a descent direction.

    Args:
      max_linesearch_steps: the most evaluations of the objective per step, an int >= 1.
      max_learning_rate: the largest step size tried, > 0, or None for no bound.
      tol: :math:`\epsilon` >= 0, the tolerance of both conditions.
      increase_factor: the growth of the step size in phase 1, > 0 (usually > 1).
      slope_rtol: :math:`c_1` in [0, 1), the sufficient-decrease coefficient.
      curv_rtol: :math:`c_2` > 0, the curvature coefficient (`jnp.inf` disables the curvature
        condition: a backtracking search by interpolation).
      approx_dec_rtol: :math:`c_3` >= 0 for the approximate decrease condition, or None for the
        plain one.
      stepsize_precision: >= 0; once the bracket is shorter and a step with sufficient decrease
        is known, that step is taken.
      initial_guess_strategy: "one" (start from 1; for quasi-Newton directions such as L-BFGS)
        or "keep" (start from the previous step size; for gradient directions).
      verbose: print diagnostics (`jax.debug.print`) when a search fails.

    Returns:
      A `GradientTransformation` with state `ScaleByZoomLinesearchState`.

    Reference: Nocedal & Wright, "Numerical Optimization" (1999), Algorithms 3.5 and 3.6;
    Hager & Zhang, "Algorithm 851: CG_DESCENT" (2006). Matches `optax.scale_by_zoom_linesearch`
    (0.2.8), its step sizes, stored values, `TypeError` for extra arguments `value_fn` does not
    take (a `value_fn` with `**kwargs` gets them all, where Optax raises) and, with
    `verbose=True`, its diagnostic sentences (after gradtx's summary line).
    """
    check_int(_WHO, "max_linesearch_steps", max_linesearch_steps, minimum=1)
    if max_learning_rate is not None:
        check_positive(_WHO, "max_learning_rate", max_learning_rate)
    check_non_negative(_WHO, "tol", tol)
    check_positive(_WHO, "increase_factor", increase_factor)
    check_in_range(_WHO, "slope_rtol", slope_rtol, 0.0, 1.0, high_open=True)
    check_positive(_WHO, "curv_rtol", curv_rtol)
    if approx_dec_rtol is not None:
        check_non_negative(_WHO, "approx_dec_rtol", approx_dec_rtol)
    check_non_negative(_WHO, "stepsize_precision", stepsize_precision)
    check_one_of(_WHO, "initial_guess_strategy", initial_guess_strategy, ["one", "keep"])
    check_bool(_WHO, "verbose", verbose)

    def init(params):
        dtype = value_dtype(params)
        return ScaleByZoomLinesearchState(
            learning_rate=jnp.ones([], dtype),
            value=jnp.full([], jnp.inf, dtype),
            grad=zeros_like(params),
            info=ZoomLinesearchInfo(
                num_linesearch_steps=jnp.zeros([], jnp.int32),
                decrease_error=jnp.full([], jnp.inf, dtype),
                curvature_error=jnp.full([], jnp.inf, dtype),
            ),
        )

    def update(updates, state, params=None, *, value=None, grad=None, value_fn=None, **extra):
        params = require_params(_WHO, params)
        require_objective(_WHO, value, grad, value_fn)
        assert_same_structure(_WHO, updates=updates, params=params, grad=grad)
        dtype = state.learning_rate.dtype
        data = value_fn_kwargs(_WHO, value_fn, extra)
        value_and_grad = jax.value_and_grad(value_fn)
        value0 = jnp.asarray(value).astype(dtype)
        grad0 = cast_like(grad, state.grad)
        slope0 = tree_vdot(updates, grad0).astype(dtype)
        guess = jnp.ones([], dtype) if initial_guess_strategy == "one" else state.learning_rate
        as_dtype = lambda x: jnp.asarray(x, dtype)

        def decrease_error(point: _Point) -> jax.Array:
            err = point.value - value0 - slope_rtol * point.stepsize * slope0
            if approx_dec_rtol is not None:
                approx = point.slope - (2 * slope_rtol - 1.0) * slope0
                approx = jnp.maximum(approx, point.value - value0 - approx_dec_rtol * abs(value0))
                err = jnp.minimum(approx, err)
            err = jnp.maximum(err, 0.0)
            return jnp.where(jnp.isnan(err), jnp.inf, err).astype(dtype)

        def curvature_error(point: _Point) -> jax.Array:
            err = jnp.maximum(jnp.abs(point.slope) - curv_rtol * jnp.abs(slope0), 0.0)
            return jnp.where(jnp.isnan(err), jnp.inf, err).astype(dtype)

        def step(s: _Search) -> _Search:
            searching = ~s.interval_found
            # Phase 1 tries growing step sizes; phase 2 a point inside the bracket.
            grown = jnp.where(s.count == 0, guess, increase_factor * s.trial.stepsize)
            reached_max = jnp.asarray(False)
            if max_learning_rate is not None:
                reached_max = grown >= max_learning_rate
                grown = jnp.minimum(grown, max_learning_rate)
            stepsize = as_dtype(jnp.where(searching, grown, _zoom_trial(s.low, s.high, s.ref)))
            v, g = value_and_grad(add_scale(params, stepsize, updates), **data)
            g = cast_like(g, grad0)
            # `g` is `jax.grad`'s, the conjugate of the ascent direction for complex parameters (the
            # `grad` passed in is that direction, as `updates`), so the slope conjugates it back.
            new = _Point(
                stepsize, as_dtype(v), tree_vdot(jax.tree.map(jnp.conj, g), updates).astype(dtype)
            )
            dec, curv = decrease_error(new), curvature_error(new)
            ok = jnp.maximum(dec, curv) <= tol
            sufficient = dec <= tol
            last_try = s.count + 1 >= max_linesearch_steps

            # Phase 1 (Algorithm 3.5): bracket once the new point is worse, or the slope turns.
            high_is_new = (dec > 0.0) | ((new.value >= s.trial.value) & (s.count > 0))
            low_is_new = (new.slope >= 0.0) & ~high_is_new
            p1_found = high_is_new | low_is_new | ok
            p1_low = where(low_is_new, new, s.trial)
            p1_high = where(low_is_new, s.trial, new)
            p1_done = ok | (reached_max & ~p1_found)
            p1_failed = last_try & ~p1_done

            # Phase 2 (Algorithm 3.6): shrink the bracket around the new point.
            high_to_new = (dec > 0.0) | (new.value >= s.low.value)
            high_to_low = (new.slope * (s.high.stepsize - s.low.stepsize) >= 0.0) & ~high_to_new
            p2_high = where(high_to_new, new, where(high_to_low, s.low, s.high))
            p2_low = where(high_to_new, s.low, new)
            p2_ref = where(high_to_new | high_to_low, s.high, s.low)
            p2_take_safe = sufficient & (new.value < s.safe.value)
            p2_safe_stepsize = jnp.where(p2_take_safe, stepsize, s.safe.stepsize)
            too_short = jnp.abs(s.high.stepsize - s.low.stepsize) <= stepsize_precision
            p2_failed = (last_try | (too_short & (p2_safe_stepsize > 0.0))) & ~ok

            take_safe = jnp.where(searching, sufficient, p2_take_safe)
            low = where(searching, p1_low, p2_low)
            return _Search(
                count=s.count + 1,
                trial=new,
                grad=g,
                decrease_error=dec,
                curvature_error=curv,
                interval_found=jnp.where(searching, p1_found, s.interval_found),
                done=jnp.where(searching, p1_done, ok),
                failed=jnp.where(searching, p1_failed, p2_failed),
                low=low,
                high=where(searching, p1_high, p2_high),
                ref=where(searching, low, p2_ref),
                safe=where(take_safe, new, s.safe),
                safe_grad=where(take_safe, g, s.safe_grad),
            )

        start = _Point(as_dtype(0.0), value0, slope0)
        inf = as_dtype(jnp.inf)
        search = _Search(
            count=jnp.zeros([], jnp.int32),
            trial=start,
            grad=grad0,
            decrease_error=inf,
            curvature_error=inf,
            interval_found=jnp.asarray(False),
            done=jnp.asarray(False),
            failed=jnp.asarray(False),
            low=start,
            high=start,
            ref=start,
            safe=start,
            safe_grad=grad0,
        )
        search = jax.lax.while_loop(lambda s: ~(s.done | s.failed), step, search)

        # A failed search falls back on the best point with sufficient decrease (or on the start
        # when the objective was not finite).
        fall_back = search.failed & (
            (search.safe.stepsize > 0.0) | jnp.isinf(search.decrease_error)
        )
        final = where(fall_back, search.safe, search.trial)
        final_grad = where(fall_back, search.safe_grad, search.grad)
        if verbose:
            _report(search, value0, slope0, tol, stepsize_precision)
        new_updates = jax.tree.map(lambda u: (final.stepsize * u).astype(u.dtype), updates)
        new_state = ScaleByZoomLinesearchState(
            learning_rate=final.stepsize,
            value=final.value,
            grad=final_grad,
            info=ZoomLinesearchInfo(
                num_linesearch_steps=search.count,
                decrease_error=search.decrease_error,
                curvature_error=search.curvature_error,
            ),
        )
        return new_updates, new_state

    return GradientTransformation(init, update)


# Optax's diagnostic sentences (`optax._src.linesearch.FLAG_*`), printed as Optax prints them.
_INTERVAL_NOT_FOUND = (
    "No interval satisfying curvature condition. "
    "Consider increasing maximal possible stepsize of the linesearch."
)
_INTERVAL_TOO_SMALL = "Length of searched interval has been reduced below threshold."
_CURVATURE_NOT_SATISFIED = (
    "Returning stepsize with sufficient decrease but curvature condition not satisfied."
)
_NO_STEPSIZE_FOUND = "Linesearch failed, no stepsize satisfying sufficient decrease found."
_NOT_A_DESCENT_DIRECTION = (
    "The linesearch failed because the provided direction is not a descent direction. "
)


def _print_if(condition: jax.Array, message: str, **values: jax.Array) -> None:
    jax.lax.cond(
        condition,
        lambda v: jax.debug.print(message, **v, ordered=True),
        lambda v: None,
        values,
    )


def _report(
    search: _Search,
    value0: jax.Array,
    slope0: jax.Array,
    tol: ArrayLike,
    stepsize_precision: ArrayLike,
) -> None:
    """With `verbose=True`: what went wrong when the search failed, or stopped at
    `max_learning_rate` without bracketing a step with small curvature."""
    summary: dict[str, Any] = dict(
        v=value0,
        sl=slope0,
        st=search.trial.stepsize,
        d=search.decrease_error,
        c=search.curvature_error,
    )
    # Phase 1 stops at max_learning_rate without an interval: done, but not both conditions met.
    at_max = search.done & (jnp.maximum(search.decrease_error, search.curvature_error) > tol)
    _print_if(
        at_max,
        "scale_by_zoom_linesearch: the step size reached max_learning_rate ({st}) without "
        "bracketing a step that meets the curvature condition (value at start {v}, slope {sl}, "
        "decrease error {d}, curvature error {c}). "
        + _INTERVAL_NOT_FOUND
        + "\n"
        + _CURVATURE_NOT_SATISFIED,
        **summary,
    )

    def failure(s: _Search) -> None:
        jax.debug.print(
            "scale_by_zoom_linesearch: no step size met both conditions within the allowed "
            "evaluations (value at start {v}, slope {sl}, last step size {st}, decrease error "
            "{d}, curvature error {c}, best step with sufficient decrease {safe}).",
            safe=s.safe.stepsize,
            **summary,
            ordered=True,
        )
        length = jnp.abs(s.high.stepsize - s.low.stepsize)
        _print_if(
            length <= stepsize_precision,
            _INTERVAL_TOO_SMALL + " Interval length: {length}.",
            length=length,
        )
        found_safe = s.safe.stepsize > 0.0
        _print_if(
            found_safe,
            _CURVATURE_NOT_SATISFIED + " Stepsize ensuring sufficient decrease: {safe}.",
            safe=s.safe.stepsize,
        )
        descent = slope0 < 0.0
        _print_if(~found_safe, _NO_STEPSIZE_FOUND)
        _print_if(
            ~found_safe & ~descent,
            _NOT_A_DESCENT_DIRECTION + "The slope (={sl}) at stepsize=0 should be negative.",
            sl=slope0,
        )
        _print_if(
            ~found_safe & descent,
            "Consider increasing the maximal number of linesearch iterations "
            "(max_linesearch_steps).",
        )
        _print_if(
            ~found_safe & jnp.isinf(s.decrease_error),
            "Cannot even make a step without getting Inf or Nan: no step is taken.",
        )
        _print_if(
            ~found_safe & ~jnp.isinf(s.decrease_error),
            "Making an unsafe step, not decreasing enough the objective.",
        )

    jax.lax.cond(search.failed, failure, lambda s: None, search)


__all__ = ["ScaleByZoomLinesearchState", "ZoomLinesearchInfo", "scale_by_zoom_linesearch"]
