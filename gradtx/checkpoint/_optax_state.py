"""`from_optax_state`: continue an Optax run in gradtx, from the Optax optimizer's state.

gradtx's optimizers are built from the same primitives as Optax's, with state classes of the
same names and fields, so an Optax state converts by role (`_roles.py`), as `migrate` does:
each value goes to the value of gradtx's state with the same class, field and parameter path.
Where the names differ, `OPTAX_STATE_NAMES` renames Optax's class to gradtx's. Where gradtx's
state has a step count Optax's lacks (`TraceState`, `ScaleByRmsState`, the learning rate's
`ScaleByScheduleState` of a constant rate, `WeightDecayState`), it is set to the Optax run's
step. Anything else left over on either side means the two optimizers are not the same one,
and is refused.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from itertools import zip_longest
from typing import Any

import jax
import numpy as np

from .._base._typing import OptState, Params
from ._format import CheckpointError
from ._migrate import _is_int_scalar, migrate_into
from ._roles import Role, roles

__all__ = ["OPTAX_STATE_NAMES", "from_optax_state"]

# Optax state classes whose gradtx counterpart has another name (fields are the same; gradtx's
# may add a `count`). Every other Optax state class has a gradtx class of the same name.
OPTAX_STATE_NAMES: Mapping[str, str] = {
    "ScaleByRStdDevState": "ScaleByStddevState",  # rmsprop(centered=True)
    "ScaleByRStdDevWithCountState": "ScaleByStddevState",  # ... and bias_correction=True
    "ScaleByRmsWithCountState": "ScaleByRmsState",  # rmsprop(bias_correction=True)
    "ScaleByAdaDeltaState": "ScaleByAdadeltaState",  # adadelta
}

_LIMIT = 12
_log = logging.getLogger("gradtx.checkpoint")


def _dtype(value: Any) -> str:
    dtype = getattr(value, "dtype", None)
    return np.dtype(np.asarray(value).dtype if dtype is None else dtype).name


def _describe(role: Role) -> str:
    return f"{role.key!r} ({role.name}, {_dtype(role.value)}{list(role.shape)})"


def _outline(node: Any, path: str = "") -> list[tuple[str, str]]:
    """(path, class name) of every NamedTuple state object in `node`, empty ones included (an
    Optax `EmptyState` holds no value, so only this tells `lamb`'s state from `adam`'s)."""
    if isinstance(node, tuple) and hasattr(node, "_fields"):
        items: Sequence[tuple[Any, Any]] = list(zip(node._fields, node, strict=True))
        found = [(path, type(node).__name__)]
    elif isinstance(node, tuple | list):
        items, found = list(enumerate(node)), []
    elif isinstance(node, Mapping):
        items, found = list(node.items()), []
    else:
        return []
    for key, child in items:
        found += _outline(child, f"{path}/{key}" if path else str(key))
    return found


def _check_source(optax_state: Any, optax_tx: Any, params: Params) -> None:
    """Refuse an `optax_state` that `optax_tx.init(params)` does not make (another optimizer,
    other options, other parameters), naming the first difference."""
    init = getattr(optax_tx, "init", None)
    if not callable(init):
        raise TypeError(
            "from_optax_state: optax_tx must be the Optax optimizer that made the state "
            f"(a GradientTransformation), got {type(optax_tx).__name__}"
        )
    expected = jax.eval_shape(init, params)
    ours, theirs = roles(optax_state), roles(expected)
    hint = (
        "; pass the Optax optimizer (and parameters) that made optax_state, with the same "
        "options (momentum, centered, ... change the state)"
    )
    for have, want in zip(ours, theirs, strict=False):
        same = (have.key, have.name, have.shape) == (want.key, want.name, want.shape)
        if not same or _dtype(have.value) != _dtype(want.value):
            raise CheckpointError(
                f"from_optax_state: optax_state does not come from optax_tx: it holds "
                f"{_describe(have)} where optax_tx.init(params) holds {_describe(want)}{hint}"
            )
    if len(ours) != len(theirs):
        n = min(len(ours), len(theirs))
        if len(ours) > n:
            extra, where, other = ours[n], "optax_state", "optax_tx.init(params)"
        else:
            extra, where, other = theirs[n], "optax_tx.init(params)", "optax_state"
        raise CheckpointError(
            f"from_optax_state: optax_state does not come from optax_tx: {where} holds "
            f"{_describe(extra)}, {other} has no value there{hint}"
        )
    have_outline, want_outline = _outline(optax_state), _outline(expected)
    if have_outline != want_outline:
        pairs = zip_longest(have_outline, want_outline, fillvalue=("", ""))
        diff = next((a, b) for a, b in pairs if a != b)
        raise CheckpointError(
            "from_optax_state: optax_state does not come from optax_tx: its state objects "
            f"differ at {diff[0][0] or diff[1][0]!r}: {diff[0][1] or 'nothing'} in optax_state, "
            f"{diff[1][1] or 'nothing'} in optax_tx.init(params){hint}"
        )


def _step_of(values: Sequence[Role]) -> int | None:
    """The Optax run's step: the largest integer `count` its state holds (None if none)."""
    counts = [
        int(np.asarray(r.value)) for r in values if r.field == "count" and _is_int_scalar(r.value)
    ]
    return max(counts) if counts else None


def _listing(title: str, rows: Sequence[str]) -> str:
    more = f"\n    ... and {len(rows) - _LIMIT} more" if len(rows) > _LIMIT else ""
    return f"\n  {title}:\n    " + "\n    ".join(rows[:_LIMIT]) + more


def from_optax_state(
    optax_state: Any,
    optax_tx: Any,
    tx: Any,
    params: Params,
    *,
    step: int | None = None,
) -> OptState:
    """Turn the state of an Optax optimizer into the state of the same gradtx optimizer.

    Resuming with `tx` from the result continues the Optax run where it stopped: the same
    moments, factored statistics and step counts (so schedules and bias corrections go on from
    the same step). `tx` must be the gradtx optimizer of the same name and options as
    `optax_tx` (`gradtx.adam` for `optax.adam`, the same `momentum`, `centered`, ..., stateless
    steps such as clipping may differ): every value of the Optax state must have its place in
    `tx`'s state, and every value of `tx`'s state its source in the Optax state, except step
    counts that gradtx keeps and Optax does not (a constant learning rate's, `sgd`'s momentum
    trace's, `rmsprop`'s): those are set to the Optax run's step. Values are matched by what
    they are (state class, field, parameter path), as `gradtx.migrate` does; Optax's class
    names are translated where gradtx's differ (`OPTAX_STATE_NAMES`). Host-side: not for use
    under `jit`. The report (`gradtx.MigrationReport`) is logged to the `gradtx.checkpoint`
    logger at level INFO.

    Args:
      optax_state: the Optax optimizer's state (concrete arrays), e.g. restored from an Optax
        run's checkpoint.
      optax_tx: the Optax optimizer that made it; `optax_tx.init(params)` must have the same
        structure, shapes and dtypes (checked, so a state of another optimizer is refused
        before anything is converted).
      tx: the gradtx optimizer to continue with.
      params: the parameters (the run's current ones, or `jax.ShapeDtypeStruct`s where no
        value of `tx`'s state starts from them), for `optax_tx.init` and `tx.init`.
      step: the Optax run's step count; by default the largest `count` the Optax state holds
        (needed only where it holds none, e.g. `optax.sgd` with a constant rate, if `tx`'s
        counters matter; otherwise they start at 0).

    Returns:
      `tx`'s state, on the shardings `tx.init(params)` gives.

    Raises:
      CheckpointError: `optax_state` does not come from `optax_tx`, or `tx` is not the same
        optimizer (a value left over on either side; the message names each by path and role,
        e.g. `'0/mu/w' (ScaleByAdamState.mu[w])`), or a value's shape differs.

    Example:
      >>> import gradtx, optax, jax.numpy as jnp
      >>> params = {"w": jnp.ones(3)}
      >>> optax_tx = optax.adam(1e-2)
      >>> optax_state = optax_tx.init(params)
      >>> grads = {"w": jnp.full(3, 0.5)}
      >>> for _ in range(3):
      ...     updates, optax_state = optax_tx.update(grads, optax_state, params)
      ...     params = optax.apply_updates(params, updates)
      >>> tx = gradtx.adam(1e-2)
      >>> state = gradtx.from_optax_state(optax_state, optax_tx, tx, params)
      >>> int(state[0].count), state[0].mu["w"].tolist() == optax_state[0].mu["w"].tolist()
      (3, True)
      >>> int(state[1].count)  # the constant learning rate's step count, which Optax omits
      3
    """
    _check_source(optax_state, optax_tx, params)
    values = roles(optax_state)
    if step is None:
        step = _step_of(values)
    template = tx.init(params)
    by_key = {role.key: role for role in roles(template)}
    try:
        state, report = migrate_into(
            values, template, source="Optax state", aliases=OPTAX_STATE_NAMES, count=step
        )
    except CheckpointError as e:
        raise CheckpointError(f"from_optax_state: {e}") from e
    unmatched = [
        f"{key} ({name})"
        for key, name in report.fresh
        if not (by_key[key].field == "count" and _is_int_scalar(by_key[key].value))
    ]
    left = [f"{key} ({name})" for key, name in report.dropped]
    if unmatched or left:
        message = "from_optax_state: tx is not the gradtx optimizer that optax_tx is"
        if left:
            message += _listing("values of the Optax state with no place in tx's state", left)
        if unmatched:
            message += _listing(
                "values of tx's state with no counterpart in the Optax state", unmatched
            )
        raise CheckpointError(
            message + "\nBuild tx as the gradtx optimizer of the same name and options "
            "(gradtx.adam(...) for optax.adam(...), the same momentum, nesterov, centered, ...)"
        )
    _log.info("from_optax_state: %s", report)
    return state
