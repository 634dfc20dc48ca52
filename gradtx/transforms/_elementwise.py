"""Custom optimizers from one per-leaf rule with named state slots (`elementwise`).

RETURNN's `BaseCustomOptimizer` asks for one method, `_apply(grad, var)`, that reads and writes
named slot variables; `elementwise` is that idea for gradtx: a rule gets one gradient leaf, the
matching leaf of every slot and the step number, and returns the update and the new slot values.
It is a `rule` (`_rule.py`) whose leaf function calls the user's: the bookkeeping (state layout,
step counter, dtypes, tree traversal, errors) is the rule mechanism's.
"""

from __future__ import annotations

import keyword
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from .._base._checks import concrete
from .._base._numerics import widen
from .._base._recipe import recorded
from .._base._typing import ArrayLike, DType, Updates
from ..core._transformation import GradientTransformation
from ..state._buffers import check_float_dtype
from ._rule import Rule, slot


class ElementwiseState(NamedTuple):
    """State of an `elementwise` transformation."""

    count: jax.Array  # type: ignore[assignment]  # int32, saturating: updates done so far
    slots: dict[str, Updates]  # one tree per slot name, shaped like the params


def _check_slots(who: str, slots: Any) -> dict[str, ArrayLike]:
    if slots is None:
        return {}
    if not isinstance(slots, Mapping):
        raise ValueError(
            f"{who}: slots must be a dict of slot name -> initial value (e.g. {{'m': 0.0}}), "
            f"got {type(slots).__name__}"
        )
    for name, value in slots.items():
        if not isinstance(name, str) or not name.isidentifier() or keyword.iskeyword(name):
            raise ValueError(f"{who}: slot names must be Python identifiers, got {name!r}")
        if name == "count":
            raise ValueError(
                f"{who}: the slot name 'count' is taken by the step counter; pick another name"
            )
        arr = concrete(value)
        if callable(value) or (arr is not None and (arr.ndim != 0 or arr.dtype.kind not in "biuf")):
            raise ValueError(
                f"{who}: the initial value of slot {name!r} must be a real scalar, got {value!r}"
            )
    return dict(slots)


def _check_dtypes(who: str, slot_dtype: Any, names: list[str]) -> dict[str, Any]:
    if not isinstance(slot_dtype, Mapping):
        check_float_dtype(who, "slot_dtype", slot_dtype)
        return dict.fromkeys(names, slot_dtype)
    unknown = [k for k in slot_dtype if k not in names]
    if unknown:
        raise ValueError(f"{who}: slot_dtype names unknown slots {unknown}; the slots are {names}")
    for name, dtype in slot_dtype.items():
        check_float_dtype(who, f"slot_dtype[{name!r}]", dtype)
    return {name: slot_dtype.get(name) for name in names}


@recorded
def elementwise(
    rule: Callable[..., Any],
    slots: Mapping[str, ArrayLike] | None = None,
    *,
    uses_params: bool = False,
    slot_dtype: DType | Mapping[str, DType] | None = None,
    name: str = "elementwise",
) -> GradientTransformation:
    r"""A transformation from a rule applied to each gradient leaf and its named state slots.

    For every leaf :math:`g` (one parameter tensor's gradient), with the matching leaves
    :math:`s^{(1)}, \dots, s^{(n)}` of the slots (in the order of `slots`) and the step number
    :math:`t`:

    .. math::  (u, s^{(1)}_{new}, \dots, s^{(n)}_{new}) = \mathrm{rule}(g, s^{(1)}, \dots,
      s^{(n)}, t)

    and with `uses_params=True` the parameter leaf comes second: `rule(g, w, *slots, t)`.
    :math:`t` is an int32 scalar, 1 at the first update (RETURNN and nnabla count the same way).
    The rule sees whole leaves, so it may also use per-tensor reductions (norms, means). It gets
    `g`, `w` and the slots widened to float32 (float64 and complex stay as they are); its update
    is cast back to the gradient's dtype and each new slot to the dtype its slot was created
    with. Without slots the rule may return the update alone.

    Writing a new optimizer takes a few lines; a momentum of gradient signs:

    >>> import jax.numpy as jnp, gradtx
    >>> def rule(g, m, t):
    ...     m = 0.9 * m + 0.1 * jnp.sign(g)
    ...     return m, m                       # (update, new m)
    >>> tx = gradtx.chain(gradtx.elementwise(rule, slots={"m": 0.0}),
    ...                   gradtx.scale_by_learning_rate(0.1))
    >>> state = tx.init({"w": jnp.zeros(2)})
    >>> updates, state = tx.update({"w": jnp.array([2.0, -3.0])}, state)
    >>> updates["w"]
    Array([-0.01,  0.01], dtype=float32)
    >>> gradtx.tree.get(state, "m")["w"]
    Array([ 0.1, -0.1], dtype=float32)

    Args:
      rule: `rule(g, *slot_values, t) -> (update, *new_slot_values)` (or `rule(g, w, *slots, t)`
        with `uses_params`). It must be traceable by JAX (no Python branching on values) and
        return arrays of the gradient leaf's shape.
      slots: slot name -> initial value (a real scalar), e.g. `{"m": 0.0, "v": 0.0}`; every slot
        is a tree shaped like the params, filled with its initial value. None or `{}` for none.
      uses_params: pass the parameter leaf to the rule (then `update` needs `params`).
      slot_dtype: dtype of the slots (default: each parameter's dtype), or a dict slot name ->
        dtype (missing names use the parameter's dtype).
      name: the name used in error messages (e.g. the optimizer built on top).

    Returns:
      A `GradientTransformation` with state `ElementwiseState(count, slots)`, where `slots` is a
      dict slot name -> tree, so `gradtx.tree.get(state, "m")` reads a slot.

    Reference: RETURNN's `BaseCustomOptimizer` (`returnn/tf/updater.py`), "implement `_apply`".
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"elementwise: name must be a non-empty string, got {name!r}")
    who = name
    if not callable(rule):
        raise ValueError(
            f"{who}: rule must be a function rule(g, *slots, t) -> (update, *new_slots), got "
            f"{type(rule).__name__}"
        )
    init_values = _check_slots(who, slots)
    names = list(init_values)
    dtypes = _check_dtypes(who, slot_dtype, names)
    expected = "(update, " + ", ".join(f"new {n}" for n in names) + ")" if names else "update"

    def split(out: Any) -> tuple:
        if not names and not isinstance(out, tuple | list):
            return (out,)
        if not isinstance(out, tuple | list) or len(out) != len(names) + 1:
            if isinstance(out, tuple | list):
                got = f"a {type(out).__name__} of length {len(out)}"
            else:
                got = "a single array" if hasattr(out, "shape") else type(out).__name__
            raise ValueError(f"{who}: the rule must return {expected}, got {got}")
        return tuple(out)

    def custom(t):
        def leaf(g, s):
            slot_values = [widen(getattr(s, n)) for n in names]
            args = [g, s.param, *slot_values] if uses_params else [g, *slot_values]
            results = [jnp.asarray(x) for x in split(rule(*args, t))]
            for label, x, ref in zip(["update", *names], results, [g, *slot_values], strict=True):
                if x.shape != jnp.shape(ref):
                    raise ValueError(
                        f"{who}: the rule returned {label} of shape {x.shape} for a leaf of shape "
                        f"{jnp.shape(ref)}; it must keep the leaf's shape"
                    )
            for n, x in zip(names, results[1:], strict=True):
                s.keep(n, x)
            return results[0]

        return leaf

    options = {n: f"slot_dtype[{n!r}]" for n in names}
    declared = Rule(
        custom,
        who,
        ElementwiseState,
        {n: slot(init_values[n], options[n], quantizable=False) for n in names},
        checks={},
        schedules=(),
        uses_params=uses_params,
        elementwise=False,
        prologue=None,
        fields=None,
    )
    return declared(**{options[n]: dtypes[n] for n in names})


__all__ = ["ElementwiseState", "elementwise"]
