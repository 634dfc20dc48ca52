"""What a transformation is made of, for the tools that look inside a running optimizer
(`gradtx.metrics`, `gradtx.with_metrics`).

A `GradientTransformation` is a NamedTuple of two functions, and a state says only part of what
a transformation does (a schedule's state is its step count, not the schedule). So the
combinators (`chain`, the wrappers) and the transforms whose value is not in their state attach
a `Node` to their `update` function when they are built (an attribute, as `_recipe` attaches
how they were built). Nothing is added to any state, so states, checkpoints and Optax
interoperability are unchanged; a transformation that carries nothing (an Optax one, a
hand-written one) is simply opaque: its state's counters are still found.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from jax import tree_util as jtu

#: kinds of node: "chain" (children applied in order, the state a tuple or dict of theirs),
#: "wrapper" (one or more inner transformations whose states sit at the given key paths),
#: "clip" (a clipping transform: `with_metrics` measures how much it removes), "leaf" (a
#: transform whose `report` gives values its state does not hold, e.g. a learning rate).
KINDS = ("chain", "wrapper", "clip", "leaf")

Report = Callable[[Any], dict[str, Any]]


@dataclass(frozen=True)
class Node:
    """The registered description of one transformation.

    Attributes:
      kind: one of `KINDS`.
      children: `(key_path, transformation)` pairs: where in this transformation's state the
        inner transformation's state is (a tuple of `jax.tree_util` keys), and the inner one.
      report: `state -> {name: scalar array}`, the values worth logging that are computed from
        the state (a schedule's current value, a wrapper's counters); traceable (no host work).
      removed: for a clip, `(updates before, its new state) -> the fraction of the global norm
        it removed`, when that is known without measuring the clipped updates (a global-norm
        clip: one minus its factor, from the norm it computes anyway); None to measure.
    """

    kind: str
    children: tuple[tuple[tuple[Any, ...], Any], ...] = ()
    report: Report | None = None
    removed: Callable[[Any, Any], Any] | None = None


_NODE = "__gradtx_node__"
_RUNNER = "__gradtx_runner__"


def _where(fn: Any, attribute: str) -> tuple[Any, str]:
    """Where `fn`'s `attribute` is kept: on `fn`, or for a bound method (made anew at each
    access: `MultiSteps.update`) on its object, under the method's name."""
    if inspect.ismethod(fn):
        return fn.__self__, f"{attribute}{fn.__func__.__name__}"
    return fn, attribute


def _attach(fn: Any, attribute: str, value: Any) -> None:
    """Attach `value` to the function `fn`, naming its holder as the owner: `functools.wraps`
    copies a function's attributes to its wrapper, which is another transformation's
    `update`."""
    holder, name = _where(fn, attribute)
    setattr(holder, name, (id(holder), value))


def _attached(fn: Any, attribute: str) -> Any:
    holder, name = _where(fn, attribute)
    owner, value = getattr(holder, name, (None, None))
    return value if owner == id(holder) else None


_T = TypeVar("_T", bound=type)


def counts_run_steps(field: str) -> Callable[[_T], _T]:
    """Decorate a wrapper's state class: its `field` counts the run's steps (not a cycle's or a
    window's), so `migrate`, adding the wrapper to a run, starts it at the old run's step (and
    `metrics`, `inspect_state` and the schedules it drives go on from there). Read back as the
    class's `RUN_STEP`."""

    def decorate(cls: _T) -> _T:
        if field not in getattr(cls, "_fields", ()):
            raise TypeError(f"counts_run_steps: {cls.__name__} has no field {field!r}")
        cls.RUN_STEP = field  # type: ignore[attr-defined]
        return cls

    return decorate


def replicated_fields(
    *fields: str, where: Callable[[Any], Any] | None = None
) -> Callable[[_T], _T]:
    """Decorate a state class: its `fields` are computed whole on every device (a matrix
    method's factor, which its step gathers anyway), so `gradtx.state_sharding` replicates them
    instead of sharding them like the params (which would add a gather per step). `where(state)`
    (given the abstract state) narrows that to some parameters: a tree of bools that is a prefix
    of each named field (e.g. one bool per parameter leaf); a `False` part is sharded as usual.
    Read back as the class's `REPLICATED` and `REPLICATED_WHERE`."""

    def decorate(cls: _T) -> _T:
        missing = [f for f in fields if f not in getattr(cls, "_fields", ())]
        if missing or not fields:
            raise TypeError(f"replicated_fields: {cls.__name__} has no field {missing or fields}")
        cls.REPLICATED = tuple(fields)  # type: ignore[attr-defined]
        cls.REPLICATED_WHERE = where  # type: ignore[attr-defined]
        return cls

    return decorate


def register(
    tx: Any,
    kind: str,
    *,
    children: Sequence[tuple[tuple[Any, ...], Any]] = (),
    report: Report | None = None,
    removed: Callable[[Any, Any], Any] | None = None,
) -> Any:
    """Record what `tx` is made of (see `Node`) and return `tx` unchanged."""
    if kind not in KINDS:
        raise ValueError(f"register: kind must be one of {KINDS}, got {kind!r}")
    _attach(tx.update, _NODE, Node(kind, tuple(children), report, removed))
    return tx


def copy_description(new: Any, old: Any) -> Any:
    """Give `new` (a re-wrapping of `old`: same state, same arithmetic, e.g. with errors
    renamed) `old`'s registered node and runner; return `new`."""
    node = _attached(old.update, _NODE)
    runner = _attached(old.update, _RUNNER)
    if node is not None:
        _attach(new.update, _NODE, node)
    if runner is not None:
        _attach(new.update, _RUNNER, runner)
    return new


def node_of(tx: Any) -> Node | None:
    """The registered `Node` of `tx`, or None when `tx` registered nothing."""
    update = getattr(tx, "update", None)
    if update is None:
        return None
    return _attached(update, _NODE)


def at_path(state: Any, key_path: tuple[Any, ...]) -> Any:
    """The part of `state` at `key_path` (a tuple of `jax.tree_util` keys)."""
    node = state
    for key in key_path:
        if isinstance(key, jtu.GetAttrKey):
            node = getattr(node, key.name)
        elif isinstance(key, jtu.SequenceKey):
            node = node[key.idx]
        elif isinstance(key, jtu.DictKey):
            node = node[key.key]
        else:
            raise TypeError(f"at_path: unsupported key {key!r}")
    return node


def walk(tx: Any, state: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[tuple, Any, Any]]:
    """Every registered transformation inside `tx` (itself first, then depth first), as
    `(state key path, node, its state)`. Unregistered transformations are not entered."""
    node = node_of(tx)
    if node is None:
        return
    yield path, node, state
    for key_path, child in node.children:
        yield from walk(child, at_path(state, key_path), (*path, *key_path))


# -- running a chain's links, optionally observed --------------------------------------------------

Observe = Callable[[tuple[Any, ...], Any, Any, Any, Any], None]


def run_links(
    links: Sequence[tuple[Any, Any, Callable[..., Any]]],
    state: Any,
    updates: Any,
    params: Any,
    extra_args: dict[str, Any],
    *,
    path: tuple[Any, ...] = (),
    observe: Observe | None = None,
) -> tuple[Any, dict[Any, Any]]:
    """Apply a chain's links in order: `links` are `(key, transformation, update_fn)` with
    `key` a `SequenceKey` or `DictKey` into `state` and `update_fn` the transformation's update
    accepting any extra arguments. Returns the updates and `{key: new inner state}`.

    With `observe`, each link registered as a chain is run the same way (so nested chains are
    observed too) and `observe(key_path, link's transformation, updates before, updates after,
    link's new state)` is called after every link (`with_metrics` measures what clipping
    removes). The arithmetic is the same either way.
    """
    new: dict[Any, Any] = {}
    for key, tx, fn in links:
        inner = at_path(state, (key,))
        if observe is None:
            updates, new[key] = fn(updates, inner, params, **extra_args)
            continue
        before = updates
        if _runner_of(tx) is not None:
            updates, new[key] = observed_update(
                tx, updates, inner, params, extra_args, path=(*path, key), observe=observe
            )
        else:
            updates, new[key] = fn(updates, inner, params, **extra_args)
        observe((*path, key), tx, before, updates, new[key])
    return updates, new


def register_runner(tx: Any, runner: Callable[..., Any]) -> None:
    """Record how to run the chain `tx` observed: `runner(updates, state, params, extra_args,
    path, observe) -> (updates, state)`."""
    _attach(tx.update, _RUNNER, runner)


def _runner_of(tx: Any) -> Callable[..., Any] | None:
    update = getattr(tx, "update", None)
    return None if update is None else _attached(update, _RUNNER)


def observed_update(
    tx: Any,
    updates: Any,
    state: Any,
    params: Any,
    extra_args: dict[str, Any],
    *,
    path: tuple[Any, ...] = (),
    observe: Observe,
) -> tuple[Any, Any]:
    """`tx.update(updates, state, params, **extra_args)`, with every link of `tx` (when it is a
    registered chain, recursively) reported to `observe` (see `run_links`)."""
    runner = _runner_of(tx)
    if runner is None:
        return tx.update(updates, state, params, **extra_args)
    return runner(updates, state, params, extra_args, path, observe)


__all__ = [
    "KINDS",
    "Node",
    "at_path",
    "copy_description",
    "counts_run_steps",
    "node_of",
    "observed_update",
    "register",
    "register_runner",
    "run_links",
    "walk",
]
