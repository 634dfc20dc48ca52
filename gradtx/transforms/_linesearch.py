"""Line searches: what the zoom and backtracking searches share, and `value_and_grad_from_state`.

A line search is a transformation that scales the incoming direction :math:`u` by a step size
:math:`\\eta` chosen by evaluating the objective along :math:`w + \\eta u`. Its `update` needs,
besides the direction and the parameters, the objective itself (Optax's protocol)::

    updates, state = tx.update(updates, state, params, value=f(params), grad=grad_f(params),
                               value_fn=f, **data)

where every extra keyword argument that `value_fn` declares (e.g. `x=`, `y=` for a batch) is
passed on to it.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from .._base._checks import HyperparameterError, concrete
from .._base._numerics import wide_float
from .._base._typing import Params, PyTree
from ..tree import cast_like, get


def value_dtype(params: Params) -> Any:
    """The dtype in which a line search keeps step sizes and objective values: float32, or
    float64 for float64 parameters (never bf16/f16, whatever the parameters)."""
    return wide_float(*(x.dtype for x in jax.tree.leaves(params)))


def check_at_least(who: str, name: str, value: Any, low: float) -> None:
    """`value` >= `low` (skipped for traced values)."""
    arr = concrete(value)
    if arr is not None and not (arr >= low).all():
        shown = arr.item() if arr.ndim == 0 else value
        raise HyperparameterError(who, name, value, f">= {low}", got=repr(shown))


def require_objective(who: str, value: Any, grad: Any, value_fn: Any) -> None:
    """A `ValueError` naming `who` and the missing extra arguments, if any is None."""
    missing = [
        name
        for name, arg in (("value", value), ("grad", grad), ("value_fn", value_fn))
        if arg is None
    ]
    if missing:
        raise ValueError(
            f"{who} needs the objective: call update(updates, state, params, value=f(params), "
            f"grad=grad_f(params), value_fn=f); missing {', '.join(missing)}"
        )
    if not callable(value_fn):
        raise TypeError(f"{who}: value_fn must be callable, got {type(value_fn).__name__}")


def value_fn_kwargs(
    who: str, value_fn: Callable[..., Any], extra_args: dict[str, Any]
) -> dict[str, Any]:
    """The extra arguments of `update` that go to `value_fn`: those it names (all of them when it
    has `**kwargs`).

    Raises:
      TypeError: some extra argument is not one `value_fn` takes (Optax's error: a misspelt data
        argument would otherwise be dropped silently, and `value_fn` run on its default).
    """
    try:
        params = list(inspect.signature(value_fn).parameters.values())
    except (TypeError, ValueError):
        params = None
    if params is not None and any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return dict(extra_args)
    names = [
        p.name
        for p in (params or [])[1:]  # the first parameter is the one being optimized
        if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    ]
    unused = sorted(k for k in extra_args if k not in names)
    if unused:
        takes = (
            "its signature cannot be inspected"
            if params is None
            else f"it takes {names} by keyword"
            if names
            else "it takes no keyword arguments"
        )
        raise TypeError(
            f"Unexpected keyword arguments passed to `{who}.update`. These arguments were not "
            f"consumed by `value_fn`: {unused}. Ensure that all extra keyword arguments are "
            f"accepted by `value_fn` ({takes}; give it `**kwargs` to accept and ignore others)."
        )
    return {k: v for k, v in extra_args.items() if k in names}


def value_and_grad_from_state(
    value_fn: Callable[..., Any],
) -> Callable[..., tuple[jax.Array, PyTree]]:
    r"""`jax.value_and_grad(value_fn)` that reuses the value and gradient a line search stored.

    .. math::  (f(w), \nabla f(w)) = \begin{cases} (\text{state.value}, \text{state.grad}) &
       \text{state.value finite} \\ \text{computed} & \text{otherwise} \end{cases}

    A line search evaluates the objective at the point it accepts; on a full-batch problem that
    is the next iterate, so the next step can start from the stored value and gradient instead of
    computing them again. Before the first step the stored value is :math:`+\infty`, so they are
    computed. The returned function is called as `fn(params, *args, state=opt_state, **kwargs)`
    (`args`/`kwargs` go to `value_fn` when computing).

    Args:
      value_fn: the objective `value_fn(params, *args, **kwargs) -> scalar`, differentiable with
        `jax.value_and_grad`.

    Returns:
      A function `(params, *args, state, **kwargs) -> (value, grad)`. It raises a `ValueError`
      when `state` has no `value` field (no line search) or its `grad` is None
      (`scale_by_backtracking_linesearch` without `store_grad=True`), and an error that is both a
      `KeyError` (as Optax's) and a `ValueError` when it has more than one.

    Example:
      >>> import jax.numpy as jnp, gradtx
      >>> f = lambda w: jnp.sum(w**2)
      >>> solver = gradtx.lbfgs()
      >>> params = jnp.array([1.0, 2.0, 3.0])
      >>> state = solver.init(params)
      >>> value_and_grad = gradtx.value_and_grad_from_state(f)
      >>> for _ in range(2):
      ...     value, grad = value_and_grad(params, state=state)
      ...     updates, state = solver.update(
      ...         grad, state, params, value=value, grad=grad, value_fn=f)
      ...     params = gradtx.apply_updates(params, updates)
      >>> bool(f(params) < 1e-10)
      True

    Matches `optax.value_and_grad_from_state` (0.2.8).
    """
    if not callable(value_fn):
        raise TypeError(
            f"value_and_grad_from_state: value_fn must be callable, got {type(value_fn).__name__}"
        )
    compute = jax.value_and_grad(value_fn)

    def value_and_grad(params: Params, *fn_args: Any, state: Any, **fn_kwargs: Any):
        try:
            value = get(state, "value", None)
            grad = get(state, "grad", None)
        except ValueError as e:  # ambiguous: also a KeyError, as Optax raises; keep the type
            raise type(e)(f"value_and_grad_from_state: {e}") from e
        if value is None:
            raise ValueError(
                "value_and_grad_from_state: the state has no 'value' and 'grad' fields; they are "
                "stored by a line search (scale_by_zoom_linesearch, or "
                "scale_by_backtracking_linesearch with store_grad=True)"
            )
        if grad is None:
            raise ValueError(
                "value_and_grad_from_state: the state has a 'value' but no 'grad' (None); "
                "construct scale_by_backtracking_linesearch with store_grad=True so that it "
                "stores the gradient too, or compute both with jax.value_and_grad"
            )

        def fresh(p, args, kwargs):
            v, g = compute(p, *args, **kwargs)
            return jnp.asarray(v).astype(value.dtype), cast_like(g, grad)

        return jax.lax.cond(
            jnp.isfinite(value),
            lambda *_: (value, grad),
            fresh,
            params,
            fn_args,
            fn_kwargs,
        )

    return value_and_grad


__all__ = ["value_and_grad_from_state"]
