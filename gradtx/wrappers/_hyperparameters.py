"""Hyperparameters as data: read a transformation's numbers as a pytree, and build the same
transformation again from a pytree of (possibly traced) numbers.

Every public gradtx factory records how it was called (`_base._recipe`), so the numbers of a
transformation, of the transformations and schedules it was built from, and of their schedules,
can be read back by argument name and passed to a `jax.jit`ted step as data::

    tx = gradtx.adamw(gradtx.warmup_cosine_decay_schedule(0.0, 1e-3, 100, 1000), weight_decay=0.1)
    hp = gradtx.hyperparameters(tx)     # {"learning_rate": {"peak_value": 0.001, ...}, ...}

    @jax.jit
    def step(params, state, grads, hp):
        tx_hp = gradtx.with_hyperparameters(tx, hp)   # same state layout, traced numbers
        updates, state = tx_hp.update(grads, state, params)
        return gradtx.apply_updates(params, updates), state

A new value for any leaf of `hp` (same dtype and shape) reuses the compiled step.
"""

from __future__ import annotations

import inspect
from typing import Any

import jax
import numpy as np

from .._base._checks import traced_checks
from .._base._recipe import Recipe, recipe_of
from ..tree import assert_same_structure
from ._inject_kinds import _annotation_text, _is_number, _kind

_VAR = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)


def _bound(recipe: Recipe) -> tuple[inspect.Signature, inspect.BoundArguments]:
    signature = inspect.signature(recipe.factory)
    bound = signature.bind(*recipe.args, **recipe.kwargs)
    bound.apply_defaults()
    return signature, bound


def _is_named_pairs(value: Any) -> bool:
    """`(("name", tx), ...)`: named_chain's arguments, read back by name."""
    return bool(value) and all(
        isinstance(v, tuple) and len(v) == 2 and isinstance(v[0], str) for v in value
    )


def _sorted_items(mapping: dict[Any, Any]) -> list[tuple[Any, Any]]:
    return sorted(mapping.items(), key=lambda kv: float(kv[0]))


def _numbers_of(value: Any, param: inspect.Parameter | None, schedule: bool) -> Any:
    """The hyperparameter tree of one argument value, or None when it holds no numbers."""
    recipe = recipe_of(value)
    if recipe is not None:
        return _numbers(recipe) or None
    if isinstance(value, list | tuple) and not hasattr(value, "_fields"):
        if _is_named_pairs(value):
            named = {name: _numbers_of(v, None, schedule) for name, v in value}
            return named if any(v is not None for v in named.values()) else None
        items = [_numbers_of(v, param, schedule) for v in value]
        return items if any(v is not None for v in items) else None
    if isinstance(value, dict) and value and all(_is_number(k) for k in value):
        # `{step: scale}` (piecewise schedules): the keys are numbers too, so the tree holds
        # `[[key, value], ...]` in increasing key order, and the factory is given the pairs
        pairs = [
            [_numbers_of(k, param, schedule), _numbers_of(v, param, schedule)]
            for k, v in _sorted_items(value)
        ]
        return pairs if any(x is not None for pair in pairs for x in pair) else None
    if isinstance(value, dict):
        entries = {k: _numbers_of(v, param, schedule) for k, v in value.items()}
        return entries if any(v is not None for v in entries.values()) else None
    if not _is_number(value) or np.size(value) == 0:
        return None
    if param is not None and (param.name == "seed" or "Seed" in _annotation_text(param)):
        return None  # a PRNG seed is not tuned (only `init` reads it)
    if schedule or _kind("", value, param, set()) == "numeric":
        return value
    return None


def _arguments(recipe: Recipe) -> list[tuple[str, Any, inspect.Parameter | None]]:
    """`(name, value, parameter)` of every argument of the recorded call, defaults included; a
    `*args` as a tuple and a `**kwargs` as a dict, with no parameter (their items have none)."""
    signature, bound = _bound(recipe)
    out = []
    for name, value in bound.arguments.items():
        param = signature.parameters[name]
        if param.kind is inspect.Parameter.VAR_KEYWORD:
            value = dict(value)
        elif param.kind is inspect.Parameter.VAR_POSITIONAL:
            value = tuple(value)
        out.append((name, value, None if param.kind in _VAR else param))
    return out


def _numbers(recipe: Recipe) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, value, param in _arguments(recipe):
        numbers = _numbers_of(value, param, recipe.schedule)
        if numbers is not None:
            out[name] = numbers
    return out


def skeleton(value: Any, param: inspect.Parameter | None = None, schedule: bool = False) -> Any:
    """What a transformation is built of, with its hyperparameters left out: two transformations
    whose skeletons differ differ in more than `hyperparameters` can vary (a config sweep
    refuses such members)."""
    recipe = recipe_of(value)
    if recipe is not None:
        parts: list[Any] = [recipe.factory]
        for name, arg, p in _arguments(recipe):
            parts.append((name, skeleton(arg, p, recipe.schedule)))
        return tuple(parts)
    if isinstance(value, list | tuple) and not hasattr(value, "_fields"):
        return ("seq", *(skeleton(v, param, schedule) for v in value))
    if isinstance(value, dict):
        return ("map", *((k, skeleton(v, param, schedule)) for k, v in value.items()))
    if _numbers_of(value, param, schedule) is not None:
        return "<hyperparameter>"
    if isinstance(value, np.ndarray | jax.Array):
        array = np.asarray(value)
        return ("<array>", array.dtype.str, array.shape, array.tobytes())
    return value  # data, or an object compared as it compares itself (a function: by identity)


def hyperparameters(tx: Any) -> dict[str, Any]:
    """The numeric hyperparameters of `tx` (a transformation or a schedule), as a pytree.

    A dict by argument name of the factory that built `tx` (the one the user called: `adamw`'s
    `learning_rate`, `b1`, ..., `weight_decay`), defaults included. A schedule argument built by
    a gradtx schedule factory is a dict of the schedule's own numbers (its warm-up and decay
    steps too); a transformation argument (`chain`'s, a wrapper's inner one) is a dict of its
    numbers, a sequence of them a list, `named_chain`'s pairs a dict by name. Flags, dtypes,
    masks, PRNG keys, integer arguments annotated `int` (periods, sizes, counts: the shape of
    the computation) and objects not built by gradtx (an Optax transformation, a `lambda`
    schedule) are not hyperparameters: they stay what they were.

    The leaves are the values as given (a Python float stays a Python float: `jax.jit` traces it
    as a weakly typed float32, so the rebuilt transformation computes exactly what `tx` does).

    Args:
      tx: a transformation or schedule built by a gradtx factory.

    Returns:
      A nested dict of numbers; `gradtx.with_hyperparameters(tx, hp)` takes one of the same
      structure.

    Raises:
      TypeError: `tx` was not built by a gradtx factory (it carries no record of its arguments).

    Example:
      >>> import gradtx
      >>> gradtx.hyperparameters(gradtx.sgd(0.1, momentum=0.9))
      {'learning_rate': 0.1, 'momentum': 0.9}
    """
    recipe = recipe_of(tx)
    if recipe is None:
        raise TypeError(
            "hyperparameters: this object was not built by a gradtx factory, so its arguments "
            f"are unknown (got {type(tx).__name__}); build it with a gradtx factory, e.g. "
            "gradtx.adamw(...) or gradtx.chain(...) of them"
        )
    return _numbers(recipe)


def _replaced(value: Any, new: Any) -> Any:
    if new is None:
        return value
    recipe = recipe_of(value)
    if recipe is not None:
        return _rebuilt(recipe, new)
    if isinstance(value, list | tuple) and not hasattr(value, "_fields"):
        if isinstance(new, dict):  # named pairs
            return type(value)((name, _replaced(v, new.get(name))) for name, v in value)
        return type(value)(_replaced(v, n) for v, n in zip(value, new, strict=True))
    if isinstance(value, dict) and isinstance(new, list):  # number keys: given as pairs
        return [
            (_replaced(k, n[0]), _replaced(v, n[1]))
            for (k, v), n in zip(_sorted_items(value), new, strict=True)
        ]
    if isinstance(value, dict):
        return {k: _replaced(v, new.get(k)) for k, v in value.items()}
    return new


def _rebuilt(recipe: Recipe, hp: dict[str, Any]) -> Any:
    signature, bound = _bound(recipe)
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    for name, value in bound.arguments.items():
        kind = signature.parameters[name].kind
        value = _replaced(value, hp.get(name))
        if kind is inspect.Parameter.VAR_POSITIONAL:
            args.extend(value)
        elif kind is inspect.Parameter.VAR_KEYWORD:
            kwargs.update(value)
        elif kind is inspect.Parameter.POSITIONAL_ONLY:
            args.append(value)
        else:
            kwargs[name] = value
    return recipe.factory(*args, **kwargs)


def with_hyperparameters(tx: Any, hyperparams: dict[str, Any], *, checked: bool = False) -> Any:
    """`tx` built again with the numbers of `hyperparams` (same structure as
    `gradtx.hyperparameters(tx)`), which may be traced: call it inside a `jax.jit`ted step that
    takes `hyperparams` as an argument, and a new value never recompiles the step.

    The state layout is the same as `tx`'s, so `tx.init`'s state (or a checkpoint of it) is used
    as it is. Concrete values are validated as the factory validates them (an out-of-range value
    raises a `ValueError` naming the argument). Traced values cannot be inspected while the
    step is traced: by default they are not checked (validate a new set of values once outside
    `jit`, where `with_hyperparameters(tx, hp)` checks it). With `checked=True` each range check
    becomes a `jax.experimental.checkify` check of the traced value, so a step wrapped in
    `checkify.checkify` returns an error naming the argument (`adam: b1 must be in [0.0, 1.0),
    got 1.5`) instead of training on it; without `checkify.checkify` around the step JAX refuses
    such checks when it traces it.

    Args:
      tx: a transformation or schedule built by a gradtx factory.
      hyperparams: a pytree with the structure of `gradtx.hyperparameters(tx)`.
      checked: check traced values with `checkify` (see above).

    Returns:
      The transformation (or schedule) `tx`'s factories build from those numbers.

    Raises:
      TypeError: `tx` was not built by a gradtx factory.
      ValueError: `hyperparams` has another structure (the message names the first differing
        path), or a concrete value is out of range.
    """
    expected = hyperparameters(tx)
    assert_same_structure("with_hyperparameters", hyperparameters=expected, given=hyperparams)
    recipe = recipe_of(tx)
    assert recipe is not None  # hyperparameters() raised otherwise
    if checked:
        with traced_checks():
            return _rebuilt(recipe, hyperparams)
    return _rebuilt(recipe, hyperparams)


def hyperparameter_names(tx: Any) -> list[str]:
    """The names of `tx`'s hyperparameters as `/`-joined key paths (`"learning_rate/peak_value"`,
    `"transformations/1/weight_decay"`), in the order of `jax.tree.leaves(hyperparameters(tx))`.

    Args:
      tx: a transformation or schedule built by a gradtx factory.

    Returns:
      The names, one per leaf; `gradtx.sweep` takes any `/`-separated suffix of one.
    """
    leaves = jax.tree_util.tree_flatten_with_path(hyperparameters(tx))[0]
    return ["/".join(_key(k) for k in path) for path, _ in leaves]


def _key(key: Any) -> str:
    for attr in ("key", "idx", "name"):
        if hasattr(key, attr):
            return str(getattr(key, attr))
    return str(key)


__all__ = ["hyperparameter_names", "hyperparameters", "with_hyperparameters"]
