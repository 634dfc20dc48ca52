"""The core protocol: `GradientTransformation`, its combinators and `apply_updates`."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, NamedTuple, Protocol

import jax
import jax.numpy as jnp
from jax.tree_util import DictKey, SequenceKey, keystr

from .._base._checks import check_in_range
from .._base._introspect import copy_description, register, register_runner, run_links
from .._base._recipe import recorded
from .._base._typing import ArrayLike, OptState, Params, Updates
from ..tree import assert_same_structure
from ..tree._patterns import resolve_mask


class InitFn(Protocol):
    def __call__(self, params: Params) -> OptState: ...


class UpdateFn(Protocol):
    def __call__(
        self, updates: Updates, state: OptState, params: Params | None = None, **extra_args: Any
    ) -> tuple[Updates, OptState]: ...


class GradientTransformation(NamedTuple):
    """A pair of pure functions: `init(params) -> state` and
    `update(updates, state, params=None, **extra_args) -> (updates, state)`.

    `extra_args` carries per-step side information (for example `value=loss` for solvers that use
    the objective); every gradtx transformation accepts them and ignores the ones it does not use.
    An Optax `GradientTransformation` can be used wherever a gradtx one is, and vice versa.
    """

    init: InitFn
    update: UpdateFn

    def _errors_renamed(
        self, rename: Callable[[BaseException], BaseException], check: Callable[[Any], None]
    ) -> GradientTransformation:
        """This transformation with `check(params)` before `init`, and the `ValueError` or
        `TypeError` its `init` or `update` raises passed through `rename` (an alias's errors
        name the alias: `_checks.alias_errors`). The plain `try` adds nothing to what `jax.jit`
        traces or runs."""
        inner_init, inner_update = self.init, self.update

        @functools.wraps(inner_init)
        def init(params):
            check(params)
            try:
                return inner_init(params)
            except (ValueError, TypeError) as e:
                new = rename(e)
                if new is e:
                    raise
                raise new from e

        @functools.wraps(inner_update)
        def update(*args, **kwargs):
            try:
                return inner_update(*args, **kwargs)
            except (ValueError, TypeError) as e:
                new = rename(e)
                if new is e:
                    raise
                raise new from e

        return copy_description(GradientTransformation(init, update), self)


# Optax's names: every gradtx transformation takes extra arguments, so Optax's two protocols
# (`GradientTransformation` and `GradientTransformationExtraArgs`) are one class here.
GradientTransformationExtraArgs = GradientTransformation
TransformInitFn = InitFn
TransformUpdateFn = UpdateFn
TransformUpdateExtraArgsFn = UpdateFn


class EmptyState(NamedTuple):
    """The state of a stateless transformation."""


def as_transformation(tx: Any, who: str, position: str) -> Any:
    if isinstance(tx, GradientTransformation):
        return tx
    if callable(getattr(tx, "init", None)) and callable(getattr(tx, "update", None)):
        return tx  # e.g. an Optax transformation
    hint = ""
    if callable(tx):
        hint = (
            " It is a callable: did you pass a factory instead of calling it "
            "(e.g. gradtx.adam rather than gradtx.adam(1e-3))?"
        )
    raise TypeError(
        f"{who}: {position} must be a GradientTransformation (an object with init and update), "
        f"got {type(tx).__name__}.{hint}"
    )


def forward_extra_args(update_fn: Callable[..., Any]) -> Callable[..., Any]:
    """An update function that accepts any extra keyword arguments and passes on only the ones
    `update_fn` declares (all of them when it takes `**kwargs`).

    This lets transformations whose `update` has no `**extra_args` (plain Optax ones) sit inside
    gradtx combinators that forward e.g. `value=loss`.
    """
    try:
        sig = inspect.signature(update_fn)
    except (TypeError, ValueError):
        return update_fn
    params = sig.parameters.values()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return update_fn
    accepted = {
        p.name
        for p in params
        if p.kind in (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    } - {"updates", "state", "params"}

    def update(updates, state, params=None, **extra_args):
        kept = {k: v for k, v in extra_args.items() if k in accepted}
        return update_fn(updates, state, params, **kept)

    return update


def init_empty_state(params: Params) -> EmptyState:
    """The `init` of a stateless transformation: ignores `params`, returns `EmptyState()`.

    Reference: `optax.init_empty_state`.

    Args:
      params: the parameters (unused).
    """
    del params
    return EmptyState()


@recorded
def with_extra_args_support(tx: GradientTransformation) -> GradientTransformation:
    """`tx` with an `update` that accepts any extra keyword arguments (`value=loss`, ...).

    The extra arguments that `tx.update` declares are passed on, the others dropped; a
    transformation whose `update` already takes `**extra_args` (every gradtx one) is returned
    unchanged. Optax's version drops every extra argument of an update without `**extra_args`;
    here one it names explicitly still gets it.

    Args:
      tx: a transformation (gradtx or Optax).

    Returns:
      A `GradientTransformation` with `tx.init` and an update accepting `**extra_args`.

    Reference: `optax.with_extra_args_support`.
    """
    tx = as_transformation(tx, "with_extra_args_support", "tx")
    update = forward_extra_args(tx.update)
    if update is tx.update and isinstance(tx, GradientTransformation):
        return tx
    return GradientTransformation(tx.init, update)


@recorded
def identity() -> GradientTransformation:
    """Leave the updates unchanged (state: `EmptyState`)."""
    return stateless(lambda updates, params: updates)


@recorded
def stateless(
    fn: Callable[[Updates, Params | None], Updates],
    *,
    validate: Callable[[Params], Any] | None = None,
) -> GradientTransformation:
    """A transformation from a pure function `fn(updates, params) -> updates` (no state).

    Args:
      fn: a pure function of the updates and the params (which may be None).
      validate: called with the params at `init`, to report errors (e.g. a mask pattern that
        matches nothing) before the first traced `update`; its result is ignored.

    Returns:
      A `GradientTransformation` with state `EmptyState`.

    Example: `stateless(lambda u, p: jax.tree.map(jnp.tanh, u))` squashes every update.
    """
    if not callable(fn):
        raise TypeError(f"stateless: fn must be callable, got {type(fn).__name__}")

    def init(params):
        if validate is not None:
            validate(params)
        return EmptyState()

    def update(updates, state, params=None, **extra_args):
        del extra_args
        return fn(updates, params), state

    return GradientTransformation(init, update)


def stateless_with_extra_args(
    fn: Callable[[Updates, Params | None, dict[str, Any]], Updates],
) -> GradientTransformation:
    """A stateless transformation from `fn(updates, params, extra_args) -> updates`: `stateless`
    for the rules that read an extra argument of `update` (the loss as `value=`, ...)."""

    def init(params):
        del params
        return EmptyState()

    def update(updates, state, params=None, **extra_args):
        return fn(updates, params, extra_args), state

    return GradientTransformation(init, update)


@recorded
def stateless_with_tree_map(
    f: Callable[[jax.Array, jax.Array | None], jax.Array],
) -> GradientTransformation:
    """A stateless transformation from a per-leaf `f(update, param) -> update`.

    `f` is mapped over the leaves of the updates and the params; when `update` gets no params,
    `f` is called with `None` for each param.

    Args:
      f: a pure function of one update array and its parameter array (or None).

    Returns:
      A `GradientTransformation` with state `EmptyState`.

    Example: `stateless_with_tree_map(lambda g, p: g * 2.0)` doubles every update.

    Reference: `optax.stateless_with_tree_map`.
    """
    who = "stateless_with_tree_map"
    if not callable(f):
        raise TypeError(f"{who}: f must be callable, got {type(f).__name__}")

    def fn(updates, params):
        if params is None:
            return jax.tree.map(lambda g: f(g, None), updates)
        assert_same_structure(who, updates=updates, params=params)
        return jax.tree.map(f, updates, params)

    return stateless(fn)


@recorded
def chain(*transformations: GradientTransformation) -> GradientTransformation:
    """Apply transformations one after the other; the state is the tuple of their states.

    Extra keyword arguments given to `update` (e.g. `value=loss`) are forwarded to every
    transformation that accepts them. Optax transformations are accepted too.

    Args:
      *transformations: the transformations, applied left to right.

    Returns:
      A `GradientTransformation` whose state is the tuple of the inner states.

    Examples:
      >>> import jax.numpy as jnp, gradtx
      >>> tx = gradtx.chain(gradtx.clip_by_global_norm(1.0), gradtx.scale_by_learning_rate(0.1))
      >>> state = tx.init({"w": jnp.zeros(2)})
      >>> updates, state = tx.update({"w": jnp.array([3.0, 4.0])}, state)
      >>> updates["w"].round(4)  # clipped to norm 1, then times -0.1
      Array([-0.06, -0.08], dtype=float32)
      >>> len(state)  # one state per link
      2
    """
    txs = [as_transformation(tx, "chain", f"argument {i}") for i, tx in enumerate(transformations)]
    links = [(SequenceKey(i), tx, forward_extra_args(tx.update)) for i, tx in enumerate(txs)]

    def init(params):
        return tuple(tx.init(params) for tx in txs)

    def check(state):
        if not isinstance(state, tuple) or len(state) != len(txs):
            raise ValueError(
                f"chain: expected a state tuple of {len(txs)} inner states (from this chain's "
                f"init), got {type(state).__name__}"
                + (f" of length {len(state)}" if isinstance(state, tuple | list) else "")
            )

    return _linked(init, links, check, tuple)


def _linked(
    init: InitFn,
    links: list[tuple[Any, GradientTransformation, Callable[..., Any]]],
    check: Callable[[Any], None],
    collect: Callable[[Any], Any],
) -> GradientTransformation:
    """The transformation that applies `links` (`(state key, transformation, its update taking
    any extra arguments)`) in order: `chain` and `named_chain`. `check(state)` refuses a state
    of another layout; `collect` builds the new state from the list of inner states."""
    keys = [key.idx if isinstance(key, SequenceKey) else key.key for key, _, _ in links]

    def update(updates, state, params=None, **extra_args):
        check(state)
        new = []
        for k, (_, _, fn) in zip(keys, links, strict=True):
            updates, inner = fn(updates, state[k], params, **extra_args)
            new.append(inner)
        return updates, collect(new)

    def observed(updates, state, params, extra_args, path, observe):
        updates, new = run_links(
            links, state, updates, params, extra_args, path=path, observe=observe
        )
        return updates, collect([new[key] for key, _, _ in links])

    tx = GradientTransformation(init, update)
    register(tx, "chain", children=[((key,), inner) for key, inner, _ in links])
    register_runner(tx, observed)
    return tx


@recorded
def named_chain(*transformations: tuple[str, GradientTransformation]) -> GradientTransformation:
    """Like `chain`, with each inner state stored under its name in a dict.

    Example: `named_chain(("clip", clip_by_global_norm(1.0)), ("sgd", sgd(0.1)))`; the state's
    parts are then `state["clip"]`, `state["sgd"]` (or `gradtx.tree.get(state, "sgd")`).

    Args:
      *transformations: `(name, transformation)` pairs with unique names, applied in order.

    Returns:
      A `GradientTransformation` whose state is a dict from name to inner state.
    """
    names: list[str] = []
    txs = []
    for i, item in enumerate(transformations):
        if not (isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str)):
            raise TypeError(
                f"named_chain: argument {i} must be a (name, transformation) pair, got {item!r}"
            )
        name, tx = item
        if name in names:
            raise ValueError(f"named_chain: the name {name!r} is used twice; names must be unique")
        names.append(name)
        txs.append(as_transformation(tx, "named_chain", f"the transformation named {name!r}"))
    links = [
        (DictKey(name), tx, forward_extra_args(tx.update))
        for name, tx in zip(names, txs, strict=True)
    ]

    def init(params):
        return {name: tx.init(params) for name, tx in zip(names, txs, strict=True)}

    def check(state):
        # JAX sorts dict keys when it rebuilds a state (e.g. out of a jitted step), so compare
        # the key sets, not their order.
        if not isinstance(state, dict) or sorted(state) != sorted(names):
            raise ValueError(
                f"named_chain: expected a state dict with keys {names} (from this chain's init), "
                f"got {list(state) if isinstance(state, dict) else type(state).__name__}"
            )

    return _linked(init, links, check, lambda inner: dict(zip(names, inner, strict=True)))


def with_nones_of(driving: Any, other: Any) -> Any:
    """`other` with None wherever `driving` has None, over whatever subtree `other` has there.

    Optax maps its update functions over the first tree with None as a leaf, so a None there
    stands for a whole subtree of the other tree (`optax.apply_updates(None, updates)` is None).
    The result then has `driving`'s structure; where the trees differ elsewhere, `other` is
    returned unchanged, so that `assert_same_structure` reports the first difference.
    """
    if driving is None:
        return None
    treedef = jax.tree.structure(driving, is_leaf=lambda x: x is None)
    try:
        parts = treedef.flatten_up_to(other)
    except (ValueError, TypeError):
        return other
    leaves = jax.tree.leaves(driving, is_leaf=lambda x: x is None)
    return treedef.unflatten([None if d is None else o for d, o in zip(leaves, parts, strict=True)])


def _apply_leaf(path, p, u):
    if p is None:
        return None
    p = jnp.asarray(p)
    if jnp.shape(u) != p.shape:
        raise ValueError(
            f"apply_updates: the update at {keystr(path)} has shape {jnp.shape(u)} but its "
            f"parameter has shape {p.shape}; an update must have its parameter's shape (a "
            "hyperparameter given as an array, e.g. adam(jnp.array([...])), broadcasts like this)"
        )
    return (p + u).astype(p.dtype)


def apply_updates(params: Params, updates: Updates) -> Params:
    """`params + updates` leaf by leaf; every result keeps its parameter's dtype.

    A `None` in `params` stays `None`, whatever `updates` has at that place (None or a subtree,
    as Optax: `apply_updates(None, updates)` is None). Under `jax.jit` with `params` donated,
    the addition happens in place.

    Args:
      params: the parameters.
      updates: the updates, with the structure of `params` (e.g. from `tx.update`).

    Returns:
      The new parameters; a `ValueError` names the first differing path if the trees differ.

    Examples:
      >>> import jax.numpy as jnp, gradtx
      >>> params = {"w": jnp.array([1.0, 2.0], dtype=jnp.bfloat16), "frozen": None}
      >>> gradtx.apply_updates(params, {"w": jnp.array([0.5, -0.5]), "frozen": None})
      {'frozen': None, 'w': Array([1.5, 1.5], dtype=bfloat16)}
    """
    updates = with_nones_of(params, updates)
    assert_same_structure("apply_updates", params=params, updates=updates)
    return jax.tree_util.tree_map_with_path(
        _apply_leaf, params, updates, is_leaf=lambda x: x is None
    )


def _polyak_leaf(step_size: ArrayLike, new: Any, old: Any) -> Any:
    if new is None:
        return None
    old = jnp.asarray(old)
    return (step_size * jnp.asarray(new) + (1.0 - step_size) * old).astype(old.dtype)


def incremental_update(new_tensors: Params, old_tensors: Params, step_size: ArrayLike) -> Params:
    r"""A Polyak (exponential moving) average of tensors, one step of it.

    .. math::  \text{result} = \tau\, \text{new} + (1 - \tau)\, \text{old}

    Typical use: the target network of soft-updated actor-critic methods,
    `target = gradtx.incremental_update(online, target, 0.005)`. Works under `jit` with a traced
    `step_size`; each result leaf keeps the dtype of the matching leaf of `old_tensors` (the
    average); a `None` in `new_tensors` stays `None`, whatever `old_tensors` has there (as Optax).

    Args:
      new_tensors: the latest values (e.g. the online parameters).
      old_tensors: the moving average, with the structure of `new_tensors`.
      step_size: :math:`\tau` in [0, 1], the weight of the new values.

    Returns:
      The updated average, with the structure of `old_tensors`.

    Examples:
      >>> import jax.numpy as jnp, gradtx
      >>> gradtx.core.incremental_update({"w": jnp.ones(2)}, {"w": jnp.zeros(2)}, 0.25)
      {'w': Array([0.25, 0.25], dtype=float32)}

    Reference: matches `optax.incremental_update`; Polyak & Juditsky, "Acceleration of
    Stochastic Approximation by Averaging" (SIAM J. Control Optim. 1992).
    """
    who = "incremental_update"
    check_in_range(who, "step_size", step_size, 0.0, 1.0)
    old_tensors = with_nones_of(new_tensors, old_tensors)
    assert_same_structure(who, new_tensors=new_tensors, old_tensors=old_tensors)
    return jax.tree.map(
        lambda n, o: _polyak_leaf(step_size, n, o),
        new_tensors,
        old_tensors,
        is_leaf=lambda x: x is None,
    )


def stateless_with_params(
    who: str, leaf_fn: Callable[[Any, Any], Any], mask: Any = None
) -> GradientTransformation:
    """A stateless transformation mapping `leaf_fn(update, param) -> new update` over the leaves.

    It needs `params` (a `ValueError` naming `who` otherwise) and checks that the updates and
    params trees match. With a `mask` (bool tree, callable or glob patterns, see
    `_masking.resolve_mask`), unselected leaves pass through unchanged; mask errors (a pattern
    that matches nothing, a tree that does not fit the params) are raised by `init`.
    """

    def fn(updates, params):
        params = require_params(who, params)
        assert_same_structure(who, updates=updates, params=params)
        if mask is None:
            return jax.tree.map(leaf_fn, updates, params)
        selected = resolve_mask(who, mask, params)
        return jax.tree.map(lambda g, p, on: leaf_fn(g, p) if on else g, updates, params, selected)

    validate = None if mask is None else (lambda params: resolve_mask(who, mask, params))
    return stateless(fn, validate=validate)


def require_params(who: str, params: Params | None) -> Params:
    """`params`, or a `ValueError` naming the transformation `who` that needs them."""
    if params is None:
        raise ValueError(
            f"{who} needs the current parameters: call update(updates, state, params) "
            "with params (got params=None)"
        )
    return params


class MissingValueError(TypeError, ValueError):
    """`update` was called without the `value=` it needs. A `TypeError`, as Optax's (where
    `value` is a required keyword argument), and a `ValueError`, as gradtx's earlier error."""


def monitored_value(who: str, extra_args: dict[str, Any]) -> jax.Array:
    """The `value=` extra argument of `update` (the loss, or another monitored scalar) as a
    float32 scalar; a `MissingValueError` (a `TypeError` and a `ValueError`) that says how to
    pass it when it is missing, a `ValueError` when it is not a scalar.

    The one reader of the loss for the transformations that use it (Eve, reduce_on_plateau,
    newbob, ...).
    """
    value = extra_args.get("value")
    if value is None:
        raise MissingValueError(
            f"{who} needs the monitored value (e.g. the loss): call "
            "update(grads, state, params, value=loss), e.g. after "
            "`loss, grads = jax.value_and_grad(loss_fn)(params)`; chain and the other gradtx "
            "combinators forward it (inside optax.chain, wrap this transformation with "
            "gradtx.as_optax); got no value"
        )
    value = jnp.asarray(value)
    if value.shape != ():
        raise ValueError(
            f"{who}: value must be a scalar, got an array of shape {value.shape} "
            "(reduce it, e.g. with .mean(), first)"
        )
    return value.astype(jnp.float32)
