"""The backtracking line search: shrink the step until the objective decreases enough (Armijo)."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from .._base._checks import (
    check_bool,
    check_in_range,
    check_int,
    check_non_negative,
    check_positive,
)
from .._base._recipe import recorded
from .._base._typing import ArrayLike, Updates
from ..core._transformation import GradientTransformation, require_params
from ..tree import add_scale, assert_same_structure, cast_like, zeros_like
from ..tree._math import real_vdot as tree_vdot
from ._linesearch import (
    require_objective,
    value_dtype,
    value_fn_kwargs,
)

_WHO = "scale_by_backtracking_linesearch"


class BacktrackingLinesearchInfo(NamedTuple):
    """What the last backtracking search did (the fields of Optax's
    `BacktrackingLinesearchInfo`).

    Attributes:
      num_linesearch_steps: int32, the number of objective evaluations.
      decrease_error: how far the accepted step misses the sufficient decrease condition (0:
        met; :math:`+\\infty`: the objective was not finite, and no step was taken).
    """

    num_linesearch_steps: jax.Array
    decrease_error: jax.Array


class ScaleByBacktrackingLinesearchState(NamedTuple):
    """The state of `scale_by_backtracking_linesearch` (the fields of
    `optax.ScaleByBacktrackingLinesearchState`; the layout depends on `store_grad` only, as
    Optax's).

    Attributes:
      learning_rate: the step size accepted by the last search (1 before the first), float32.
      value: the objective at the accepted point (:math:`+\\infty` before the first step).
      grad: the gradient at the accepted point with `store_grad=True`, in the parameters'
        dtypes; `None` otherwise, as in Optax (so `value_and_grad_from_state` says to pass
        `store_grad=True` rather than return a gradient that was never computed).
      info: a `BacktrackingLinesearchInfo`.
    """

    learning_rate: jax.Array
    value: jax.Array
    grad: Updates
    info: BacktrackingLinesearchInfo


class _Search(NamedTuple):
    learning_rate: jax.Array
    value: jax.Array
    grad: Updates  # the gradient at the last try, once the search ends (with store_grad)
    decrease_error: jax.Array
    count: jax.Array  # type: ignore[assignment]  # objective evaluations so far


@recorded
def scale_by_backtracking_linesearch(
    max_backtracking_steps: int,
    slope_rtol: ArrayLike = 1e-4,
    decrease_factor: ArrayLike = 0.8,
    increase_factor: ArrayLike = 1.5,
    max_learning_rate: ArrayLike = 1.0,
    atol: ArrayLike = 0.0,
    rtol: ArrayLike = 0.0,
    store_grad: bool = False,
    verbose: bool = False,
) -> GradientTransformation:
    r"""Scale the direction by a step size with sufficient decrease, found by backtracking.

    For the objective :math:`f`, parameters :math:`w` and direction :math:`u`, starting from
    :math:`\eta = \min(\gamma\, \eta_{\text{prev}}, \eta_{\max})`, multiply :math:`\eta` by
    :math:`\beta` until (Armijo)

    .. math::

      f(w + \eta u) \le (1 + \delta) f(w) + c\, \eta \langle u, \nabla f(w) \rangle + \epsilon,

    and return :math:`\eta u`. After `max_backtracking_steps` reductions the last step size is
    taken as it is; a step size of 0 is taken when the objective was not finite there.

    `update(updates, state, params, *, value, grad, value_fn, **data)` needs the objective
    `value_fn(params, **data)`, its value and gradient at `params`; `data` holds the keyword
    arguments that `value_fn` names (any other is a `TypeError`, as in Optax). The value at the
    accepted point is stored; with `store_grad=True` the gradient there is computed too (once,
    after the search) and both serve `value_and_grad_from_state`. `updates` must be a descent
    direction.

    Args:
      max_backtracking_steps: the most reductions of the step size, an int >= 0.
      slope_rtol: :math:`c` in [0, 1), the sufficient-decrease coefficient.
      decrease_factor: :math:`\beta` in (0, 1).
      increase_factor: :math:`\gamma` > 0 (usually >= 1) applied to the previous step size for
        the first try (`math.inf` always starts from `max_learning_rate`).
      max_learning_rate: :math:`\eta_{\max}` > 0.
      atol: :math:`\epsilon` >= 0.
      rtol: :math:`\delta` >= 0.
      store_grad: compute and store the gradient at the accepted point.
      verbose: print diagnostics (`jax.debug.print`) when no step size met the condition.

    Returns:
      A `GradientTransformation` with state `ScaleByBacktrackingLinesearchState`.

    Reference: Nocedal & Wright, "Numerical Optimization" (1999), Algorithm 3.1; Vaswani et al.,
    "Painless Stochastic Gradient" (2019). Matches `optax.scale_by_backtracking_linesearch`
    (0.2.8): the same step sizes, updates, stored value and gradient, and the `TypeError` for
    extra arguments `value_fn` does not take (a `value_fn` with `**kwargs` gets them all, where
    Optax raises). For complex parameters the slope
    is :math:`\operatorname{Re}\langle g, u \rangle` with `grad` :math:`g` the ascent direction
    (the conjugate of `jax.grad`'s, as for `scale_by_zoom_linesearch` and the updates); Optax
    conjugates `grad` once more there, so its slope, and then its step sizes, can differ.
    """
    check_int(_WHO, "max_backtracking_steps", max_backtracking_steps, minimum=0)
    check_in_range(_WHO, "slope_rtol", slope_rtol, 0.0, 1.0, high_open=True)
    check_in_range(
        _WHO, "decrease_factor", decrease_factor, 0.0, 1.0, low_open=True, high_open=True
    )
    check_positive(_WHO, "increase_factor", increase_factor)
    check_positive(_WHO, "max_learning_rate", max_learning_rate)
    check_non_negative(_WHO, "atol", atol)
    check_non_negative(_WHO, "rtol", rtol)
    check_bool(_WHO, "store_grad", store_grad)
    check_bool(_WHO, "verbose", verbose)

    def init(params):
        dtype = value_dtype(params)
        return ScaleByBacktrackingLinesearchState(
            learning_rate=jnp.ones([], dtype),
            value=jnp.full([], jnp.inf, dtype),
            grad=zeros_like(params) if store_grad else None,
            info=BacktrackingLinesearchInfo(
                num_linesearch_steps=jnp.zeros([], jnp.int32),
                decrease_error=jnp.full([], jnp.inf, dtype),
            ),
        )

    def update(updates, state, params=None, *, value=None, grad=None, value_fn=None, **extra):
        params = require_params(_WHO, params)
        require_objective(_WHO, value, grad, value_fn)
        assert_same_structure(_WHO, updates=updates, params=params, grad=grad)
        dtype = state.learning_rate.dtype
        data = value_fn_kwargs(_WHO, value_fn, extra)
        value0 = jnp.asarray(value).astype(dtype)
        slope = tree_vdot(updates, grad).astype(dtype)

        def decrease_error(learning_rate, new_value):
            err = new_value - (1.0 + rtol) * value0 - learning_rate * slope_rtol * slope
            err = jnp.where(jnp.isnan(err), jnp.inf, err)
            return jnp.maximum(err, 0.0).astype(dtype)

        fn = lambda p: value_fn(p, **data)

        def step(s: _Search) -> _Search:
            # The first try uses the initial guess; each further one shrinks it.
            lr = jnp.where(s.count > 0, decrease_factor * s.learning_rate, s.learning_rate)
            lr = lr.astype(dtype)
            point = add_scale(params, lr, updates)
            new_grad = s.grad
            if store_grad:
                # Linearize at every try and transpose once the search ends, as Optax does:
                # jax.grad rounds differently in the last bit, which long runs amplify.
                v, linear = jax.linearize(fn, point)
                err = decrease_error(lr, jnp.asarray(v).astype(dtype))
                last = (err <= atol) | (s.count == max_backtracking_steps)
                transpose = lambda p: cast_like(
                    jax.linear_transpose(linear, p)(jnp.ones([], jnp.result_type(v)))[0], s.grad
                )
                new_grad = jax.lax.cond(last, transpose, lambda p: s.grad, point)
            else:
                v = fn(point)
            v = jnp.asarray(v).astype(dtype)
            return _Search(lr, v, new_grad, decrease_error(lr, v), s.count + 1)

        keep_going = lambda s: ~(s.decrease_error <= atol) & (s.count <= max_backtracking_steps)
        guess = jnp.minimum(increase_factor * state.learning_rate, max_learning_rate)
        search = _Search(
            learning_rate=guess.astype(dtype),
            value=value0,
            grad=state.grad,
            decrease_error=jnp.full([], jnp.inf, dtype),
            count=jnp.zeros([], jnp.int32),
        )
        search = jax.lax.while_loop(keep_going, step, search)
        if verbose:
            _report_failure(search, value0, slope, atol)
        learning_rate = jnp.where(jnp.isinf(search.decrease_error), 0.0, search.learning_rate)
        learning_rate = learning_rate.astype(dtype)
        new_updates = jax.tree.map(lambda u: (learning_rate * u).astype(u.dtype), updates)
        new_state = ScaleByBacktrackingLinesearchState(
            learning_rate=learning_rate,
            value=search.value,
            grad=search.grad,  # None without store_grad
            info=BacktrackingLinesearchInfo(
                num_linesearch_steps=search.count, decrease_error=search.decrease_error
            ),
        )
        return new_updates, new_state

    return GradientTransformation(init, update)


def _report_failure(search: _Search, value0: jax.Array, slope: jax.Array, atol: ArrayLike) -> None:
    def report(s: _Search) -> None:
        jax.debug.print(
            "scale_by_backtracking_linesearch: no step size with sufficient decrease found "
            "(value at start {v}, slope {sl}, step size {st}, decrease error {d}; an infinite "
            "error means the objective was not finite and no step is taken)",
            v=value0,
            sl=slope,
            st=s.learning_rate,
            d=s.decrease_error,
            ordered=True,
        )

    jax.lax.cond(search.decrease_error > atol, report, lambda s: None, search)


__all__ = [
    "BacktrackingLinesearchInfo",
    "ScaleByBacktrackingLinesearchState",
    "scale_by_backtracking_linesearch",
]
