"""`from_optax_state`: continue an Optax run in gradtx, from the Optax optimizer's state.

gradtx's optimizers are built from the same primitives as Optax's, with state classes of the
same names and fields, so an Optax state converts by role (`_roles.py`), as `migrate` does:
each value goes to the value of gradtx's state with the same class, field and parameter path.
Where the names differ, `OPTAX_STATE_NAMES` renames Optax's class to gradtx's. Where gradtx's
state has a step count Optax's lacks (`TraceState`, `ScaleByRmsState`, the learning rate's
`ScaleByScheduleState` of a constant rate, `WeightDecayState`), it is set to the Optax run's
step. Values Optax keeps in its state and gradtx in the optimizer (`OPTAX_CONSTANTS`: muon's
`ns_coeffs`) are checked against `optax_tx` and left out. Anything else left over on either side
means the two optimizers are not the same one, and is refused.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from itertools import zip_longest
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .._base._typing import OptState, Params
from ._format import CheckpointError
from ._leaves import _is_key
from ._migrate import _is_int_scalar, migrate_into, unique_paths
from ._roles import Role, roles

__all__ = ["OPTAX_CONSTANTS", "OPTAX_STATE_NAMES", "from_optax_state"]

# Optax state classes whose gradtx counterpart has another name (fields are the same; gradtx's
# may add a `count`). Every other Optax state class has a gradtx class of the same name.
OPTAX_STATE_NAMES: Mapping[str, str] = {
    "ScaleByRStdDevState": "ScaleByStddevState",  # rmsprop(centered=True)
    "ScaleByRStdDevWithCountState": "ScaleByStddevState",  # ... and bias_correction=True
    "ScaleByRmsWithCountState": "ScaleByRmsState",  # rmsprop(bias_correction=True)
    "ScaleByAdaDeltaState": "ScaleByAdadeltaState",  # adadelta
}

# Fields of Optax states that hold a hyperparameter, constant through the run, which gradtx
# keeps in the transformation instead (an argument of the same name): not converted, but
# checked against `optax_tx` (a state of other values comes from another optimizer).
OPTAX_CONSTANTS: Mapping[str, tuple[str, ...]] = {
    "MuonState": ("ns_coeffs",),  # optax.contrib.muon; gradtx.contrib.muon(ns_coeffs=...)
}

_LIMIT = 12
_log = logging.getLogger("gradtx.checkpoint")


def _dtype(value: Any) -> str:
    if _is_key(value):
        return str(value.dtype)  # key<fry>: a typed PRNG key is no NumPy dtype
    dtype = getattr(value, "dtype", None)
    return np.dtype(np.asarray(value).dtype if dtype is None else dtype).name


def _describe(role: Role) -> str:
    return f"{role.key!r} ({role.name}, {_dtype(role.value)}{list(role.shape)})"


def _outline(node: Any, path: str = "") -> list[tuple[str, str]]:
    """(path, class name) of every NamedTuple state object in `node`, empty ones included (an
    Optax `EmptyState` holds no value, so only this tells `lamb`'s state from `adam`'s), in
    JAX's order: a dict's keys sorted (an eagerly run `multi_transform` holds its sub-states in
    the order of its labels, a jitted one sorted)."""
    if isinstance(node, tuple) and hasattr(node, "_fields"):
        items: Sequence[tuple[Any, Any]] = list(zip(node._fields, node, strict=True))
        found = [(path, type(node).__name__)]
    elif isinstance(node, tuple | list):
        items, found = list(enumerate(node)), []
    elif isinstance(node, Mapping):
        try:
            items = sorted(node.items(), key=lambda item: item[0])
        except TypeError:  # keys of several types: JAX cannot flatten it either
            items = list(node.items())
        found = []
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
        pairs = zip_longest(have_outline, want_outline)
        got, made = next((a, b) for a, b in pairs if a != b)
        if got is not None and made is not None and got[0] != made[0]:
            what = (
                f"differ: optax_state has a {got[1]} at {got[0]!r} where "
                f"optax_tx.init(params) has a {made[1]} at {made[0]!r}"
            )
        else:  # at one path, or one outline ends
            where = got[0] if got is not None else made[0] if made is not None else ""
            what = (
                f"differ at {where!r}: {got[1] if got else 'nothing'} in optax_state, "
                f"{made[1] if made else 'nothing'} in optax_tx.init(params)"
            )
        raise CheckpointError(
            f"from_optax_state: optax_state does not come from optax_tx: its state objects "
            f"{what}{hint}"
        )


def _constants(values: Sequence[Role], optax_tx: Any, params: Params) -> list[Role]:
    """The values of `OPTAX_CONSTANTS` in the Optax state, checked equal to those
    `optax_tx.init(params)` makes (computed alone, under jit: nothing else is allocated)."""
    found = [r for r in values if r.field in OPTAX_CONSTANTS.get(r.kind, ()) and not r.param]
    if not found:
        return []
    keys = {r.key for r in found}
    shapes = jax.tree.map(lambda p: jax.ShapeDtypeStruct(np.shape(p), p.dtype), params)

    def made() -> dict[str, Any]:
        zeros = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)
        return {r.key: r.value for r in roles(optax_tx.init(zeros)) if r.key in keys}

    expected = jax.jit(made)()
    for role in found:
        have, want = np.asarray(role.value), np.asarray(expected[role.key])
        if not np.array_equal(have, want):
            raise CheckpointError(
                f"from_optax_state: optax_state does not come from optax_tx: {role.key!r} "
                f"({role.name}) is {have.tolist()}, not the one optax_tx.init(params) makes "
                f"({want.tolist()}); pass the Optax optimizer that made optax_state (and build "
                f"tx with the same {role.field})"
            )
    return found


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
    names are translated where gradtx's differ (`OPTAX_STATE_NAMES`). The state of an eager
    Optax run converts as a jitted one's does (an eager `multi_transform` holds its sub-states
    in the order of its labels; JAX sorts them). A typed PRNG key (`optax.noisy_sgd`'s
    `key<fry>`) goes on as the raw key data gradtx keeps (`AddNoiseState.rng_key`), so the
    noise stream continues; a key of an implementation other than JAX's default is refused.
    A hyperparameter that Optax keeps in its state and gradtx in `tx` (`OPTAX_CONSTANTS`:
    `optax.contrib.muon`'s `ns_coeffs`) is checked against `optax_tx` and not converted:
    build `tx` with the same value. Host-side: not for use under `jit`. The report
    (`gradtx.MigrationReport`) is logged to the `gradtx.checkpoint` logger at level INFO.

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
        e.g. `'0/mu/w' (ScaleByAdamState.mu[w])`), or a value's shape differs, or two
        parameters share a path (`"a/b"` next to `{"a": {"b": ...}}`: refused as
        `gradtx.state_dict` refuses it, naming both).

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
    unique_paths("from_optax_state", optax_state)
    _check_source(optax_state, optax_tx, params)
    values = roles(optax_state)
    constants = {r.key for r in _constants(values, optax_tx, params)}
    values = [r for r in values if r.key not in constants]
    if step is None:
        step = _step_of(values)
    template = tx.init(params)
    unique_paths("from_optax_state", template)
    by_key = {role.key: role for role in roles(template)}
    try:
        state, report = migrate_into(
            values,
            template,
            source="Optax state",
            aliases=OPTAX_STATE_NAMES,
            count=step,
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
