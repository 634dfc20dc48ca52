"""Populations: K members of one optimizer, each with its own hyperparameters, trained in one
vmapped program; sweeps of hyperparameter values; in-graph population-based training."""

from __future__ import annotations

import inspect
import itertools
from collections.abc import Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .._base._checks import expect_state, in_context
from .._base._recipe import recipe_of, recorded
from ..core._transformation import GradientTransformation, as_transformation
from ._hyperparameters import _key, hyperparameters, with_hyperparameters


class PopulationState(NamedTuple):
    """The state of `population`: every leaf has a leading member axis of size K."""

    hyperparams: Any  # `hyperparameters(tx)`'s tree, one value per member
    inner_state: Any  # the optimizer's state, one per member


def _paths(tree: Any) -> list[tuple[str, Any]]:
    leaves = jax.tree_util.tree_flatten_with_path(tree)[0]
    return [("/".join(_key(k) for k in path), leaf) for path, leaf in leaves]


def _match(who: str, names: list[str], key: str) -> list[int]:
    """The indices of `names` that `key` names: the name itself or a `/`-separated suffix."""
    found = [i for i, n in enumerate(names) if n == key or n.endswith("/" + key)]
    if not found:  # a subtree with one number in it (dog's init_step: ("heuristic", 1e-6))
        inside = [i for i, n in enumerate(names) if n.startswith(key + "/") or f"/{key}/" in n]
        if len(inside) > 1:
            raise KeyError(
                f"{who}: {key!r} holds several numbers (a schedule or a transformation): name "
                f"one of {[names[i] for i in inside]} (or a suffix of it)"
            )
        found = inside
    if not found:
        raise KeyError(f"{who}: no hyperparameter is called {key!r}; the names are {names}")
    return found


def _array(values: Any) -> jax.Array:
    """Numbers as an array: Python floats become float32, ints int32; arrays keep their dtype."""
    if isinstance(values, jax.Array):
        return values
    arr = np.asarray(values)
    if arr.dtype == np.float64:
        arr = arr.astype(np.float32)
    elif arr.dtype == np.int64:
        arr = arr.astype(np.int32)
    return jnp.asarray(arr)


def sweep(tx: Any, *, mode: str = "grid", **values: Sequence[Any]) -> dict[str, Any]:
    """The hyperparameters of a population: `tx`'s own (`hyperparameters(tx)`), with the given
    ones swept, one member per combination (`mode="grid"`, the Cartesian product, the first
    name varying slowest) or per position (`mode="zip"`, equal lengths).

    A keyword names a hyperparameter by its name or a `/`-separated suffix of its path in
    `gradtx.hyperparameter_names(tx)` (`learning_rate`, `weight_decay`,
    `learning_rate/peak_value`); a name that several hyperparameters end with sets all of them.
    For names that are not identifiers, pass `**{"transformations/1/b1": [...]}`.

    Args:
      tx: a transformation built by gradtx factories.
      mode: "grid" or "zip".
      **values: name -> the values the members take.

    Returns:
      The hyperparameters' tree for `population`: each swept one a 1-D array over the K
      members, the others `tx`'s own values, unchanged.

    Example:
      >>> import gradtx
      >>> hp = gradtx.sweep(gradtx.adamw(1e-3), learning_rate=[1e-3, 3e-3], weight_decay=[0.0, 0.1])
      >>> hp["learning_rate"].shape, hp["weight_decay"].tolist()
      ((4,), [0.0, 0.10000000149011612, 0.0, 0.10000000149011612])
    """
    who = "sweep"
    if mode not in ("grid", "zip"):
        raise ValueError(f"{who}: mode must be 'grid' or 'zip', got {mode!r}")
    base = hyperparameters(tx)
    named = _paths(base)
    names = [n for n, _ in named]
    columns: list[tuple[list[int], list[Any]]] = []
    for key, column in values.items():
        column = list(np.asarray(column).reshape(-1)) if np.ndim(column) else [column]
        if not column:
            raise ValueError(f"{who}: {key} has no values")
        columns.append((_match(who, names, key), column))
    if mode == "zip":
        sizes = {len(c) for _, c in columns}
        if len(sizes) > 1:
            raise ValueError(
                f"{who}: mode='zip' needs equally many values per name, got "
                + ", ".join(f"{k}: {len(c)}" for k, (_, c) in zip(values, columns, strict=True))
            )
        rows = list(zip(*(c for _, c in columns), strict=True)) if columns else [()]
    else:
        rows = list(itertools.product(*(c for _, c in columns)))
    leaves = [leaf for _, leaf in named]
    for j, (indices, _) in enumerate(columns):
        for i in indices:
            leaves[i] = _array([row[j] for row in rows])
    return jax.tree.unflatten(jax.tree.structure(base), leaves)


def _size(who: str, hyperparams: Any, members: int | None) -> int:
    sizes = {int(np.shape(x)[0]) for x in jax.tree.leaves(hyperparams) if np.ndim(x) > 0}
    if members is not None:
        sizes.add(int(members))
    if len(sizes) != 1:
        raise ValueError(
            f"{who}: every hyperparameter needs a leading member axis of one size K"
            + (
                f" (got sizes {sorted(sizes)})"
                if sizes
                else ": pass members=K or arrays of K values (gradtx.sweep builds them)"
            )
        )
    size = sizes.pop()
    if size < 1:
        raise ValueError(f"{who}: a population needs at least one member, got {size}")
    return size


def population_member(tree: Any, index: int) -> Any:
    """Member `index` of a population's params, updates, hyperparameters or state.

    Of a `PopulationState`, the member's `inner_state`: an ordinary state of the optimizer's
    layout, to save on its own or to go on training with the optimizer built with the member's
    values. Leaves without the member axis (shared hyperparameters) are returned as they are.

    Args:
      tree: a tree whose leaves have a leading member axis, or a `PopulationState`.
      index: the member.

    Returns:
      The member's tree.
    """
    if isinstance(tree, PopulationState):
        tree = tree.inner_state
    return jax.tree.map(lambda x: x[index] if np.ndim(x) else x, tree)


@recorded
def population(
    tx: GradientTransformation, hyperparams: Any = None, *, members: int | None = None
) -> GradientTransformation:
    r"""K members of one optimizer with their own hyperparameters, in one vmapped program.

    The params, updates and state carry a leading member axis of size K; member k is updated
    exactly as `with_hyperparameters(tx, its hyperparameters)` updates its own params (in one
    program: `jax.vmap`). The swept hyperparameters live in the state
    (`PopulationState.hyperparams`, None in place of the shared ones), so they can be changed in
    the graph (`population_exploit_explore`, `gradtx.tree.set`) without recompiling.

    `init` takes one params tree (every member starts from it) or a list of K params trees.
    Extra arguments of `update` (`value=` a loss) are per member: arrays with the member axis.

    Args:
      tx: the optimizer, built by gradtx factories (see `gradtx.hyperparameters`).
      hyperparams: the members' hyperparameters, the tree of `gradtx.hyperparameters(tx)`
        (`gradtx.sweep` builds it): a leaf with a leading member axis (an array of K values) is
        swept: it is data, kept in the state, traced in the step and changeable in the graph; a
        scalar leaf is shared by all members and stays a constant of the program, as in `tx`
        (a member then computes exactly what `tx` built with its values computes: a traced
        beta's 1 - beta is rounded in float32, a constant's in float64, which can differ by
        1e-5 relative for beta = 0.999). None: every member has `tx`'s own values (pass
        `members`).
      members: K, when no leaf of `hyperparams` has the member axis.

    Returns:
      A `GradientTransformation` whose state is `PopulationState(hyperparams, inner_state)`.

    Raises:
      ValueError: the member axes disagree, a member's hyperparameters are invalid (the message
        names the member), or `hyperparams` does not have the structure of `tx`'s.

    Example:
      >>> import jax, jax.numpy as jnp, gradtx
      >>> tx = gradtx.adamw(1e-3)
      >>> pop = gradtx.population(tx, gradtx.sweep(tx, learning_rate=[1e-3, 1e-2]))
      >>> state = pop.init({"w": jnp.ones(3)})          # both members start from these params
      >>> grads = {"w": jnp.ones((2, 3))}                # a leading member axis
      >>> updates, state = jax.jit(pop.update)(grads, state, {"w": jnp.ones((2, 3))})
      >>> updates["w"].shape
      (2, 3)
    """
    who = "population"
    tx = as_transformation(tx, who, "tx")
    own = hyperparameters(tx)
    if hyperparams is None:
        hyperparams = own
    size = _size(who, hyperparams, members)
    treedef = jax.tree.structure(hyperparams)
    if treedef != jax.tree.structure(own):
        with_hyperparameters(tx, hyperparams)  # raises, naming the first differing path
    given, swept, data = _split(hyperparams)
    for k in range(size):  # validate every member's concrete values, as its factory does
        try:
            with_hyperparameters(tx, _merged(hyperparams, given, swept, population_member(data, k)))
        except (ValueError, TypeError) as e:
            raise in_context(f"{who}: member {k}", e) from e

    def build(h: Any) -> GradientTransformation:
        return with_hyperparameters(tx, _merged(hyperparams, given, swept, h))

    def init(params):
        if isinstance(params, list) and len(params) == size and size > 1:
            first = jax.tree.structure(params[0])
            if all(jax.tree.structure(p) == first for p in params[1:]):
                params = jax.tree.map(lambda *xs: jnp.stack(xs), *params)
                inner = jax.vmap(lambda h, p: build(h).init(p))(data, params)
                return PopulationState(jax.tree.map(jnp.copy, data), inner)
        inner = jax.vmap(lambda h: build(h).init(params), axis_size=size)(data)
        # copies: a step that donates the state must not delete the arrays `population` keeps
        return PopulationState(jax.tree.map(jnp.copy, data), inner)

    def update(updates, state, params=None, **extra_args):
        expect_state(who, state, PopulationState)

        def one(h, u, s, p, extra):
            return build(h).update(u, s, p, **extra)

        new_updates, inner = jax.vmap(one)(
            state.hyperparams, updates, state.inner_state, params, extra_args
        )
        return new_updates, PopulationState(state.hyperparams, inner)

    return GradientTransformation(init, update)


def _split(hyperparams: Any) -> tuple[list[Any], list[bool], Any]:
    """The leaves of `hyperparams`, which of them are swept (have the member axis), and the
    state's tree: the swept values as arrays, None in place of the others."""
    given = jax.tree.leaves(hyperparams)
    swept = [np.ndim(leaf) > 0 for leaf in given]
    data = [_array(g) if w else None for g, w in zip(given, swept, strict=True)]
    return given, swept, jax.tree.unflatten(jax.tree.structure(hyperparams), data)


def _merged(hyperparams: Any, given: list[Any], swept: list[bool], data: Any) -> Any:
    """One member's hyperparameters: its swept values from `data` (one member's slice of the
    state's tree) and the shared ones from `given`."""
    treedef = jax.tree.structure(hyperparams)
    values = treedef.flatten_up_to(data)  # one entry per leaf of hyperparams, None if shared
    return jax.tree.unflatten(
        treedef, [v if w else g for g, w, v in zip(given, swept, values, strict=True)]
    )


def population_hyperparameters(pop: GradientTransformation, state: PopulationState) -> Any:
    """Every member's hyperparameters: the tree of `gradtx.hyperparameters(tx)` with the swept
    values from `state` (a leading member axis) and the shared ones as `population` was given
    them. `with_hyperparameters(tx, population_member(that, k))` is member k's optimizer.

    Args:
      pop: a transformation built by `gradtx.population`.
      state: its state (concrete, or traced inside `jit`).

    Returns:
      The full hyperparameter tree of the population.

    Raises:
      TypeError: `pop` was not built by `gradtx.population`.
    """
    _, given_tree, given, swept = _parts(pop)
    return _merged(given_tree, given, swept, state.hyperparams)


def _parts(pop: GradientTransformation) -> tuple[Any, Any, list[Any], list[bool]]:
    recipe = recipe_of(pop)
    if recipe is None or recipe.factory is not population:
        raise TypeError("this transformation was not built by gradtx.population")
    arguments = inspect.signature(population).bind(*recipe.args, **recipe.kwargs).arguments
    tx = arguments["tx"]
    given_tree = arguments.get("hyperparams")
    if given_tree is None:
        given_tree = hyperparameters(tx)
    given, swept, _ = _split(given_tree)
    return tx, given_tree, given, swept


def member_transformation(pop: GradientTransformation, hyperparams: Any) -> GradientTransformation:
    """The transformation a member of the population `pop` runs, from its slice of
    `PopulationState.hyperparams` (`gradtx.metrics` reads each member's metrics through it)."""
    tx, given_tree, given, swept = _parts(pop)
    return with_hyperparameters(tx, _merged(given_tree, given, swept, hyperparams))


def population_exploit_explore(
    params: Any,
    state: PopulationState,
    scores: Any,
    key: jax.Array,
    *,
    fraction: float = 0.25,
    factors: Sequence[float] = (0.8, 1.25),
    perturb: Sequence[str] | str = ("learning_rate",),
) -> tuple[Any, PopulationState]:
    r"""One round of population-based training (Jaderberg et al. 2017, truncation selection),
    in the graph: no host sync.

    The members are ranked by `scores` (lower is better: a loss; NaN ranks last). Each of the
    worst `fraction` of members takes the params and optimizer state (hyperparameters included)
    of a member drawn at random from the best `fraction` (exploit), then multiplies each
    hyperparameter named in `perturb` (a name or path suffix, as in `gradtx.sweep`; integer ones
    are copied unchanged) by a factor drawn from `factors` (explore). The others are unchanged.

    Args:
      params: the population's params (leading member axis K).
      state: its `PopulationState`.
      scores: K scores, lower is better.
      key: a PRNG key.
      fraction: the share of members replaced, in (0, 0.5]; at least one member is.
      factors: the perturbation factors, each > 0.
      perturb: the hyperparameters perturbed.

    Returns:
      `(params, state)`, of the same structure, shapes and dtypes.
    """
    who = "population_exploit_explore"
    expect_state(who, state, PopulationState)
    if not 0.0 < float(fraction) <= 0.5:
        raise ValueError(f"{who}: fraction must be in (0, 0.5], got {fraction}")
    if not factors or any(float(f) <= 0 for f in factors):
        raise ValueError(f"{who}: factors must be a non-empty list of numbers > 0, got {factors}")
    perturb = (perturb,) if isinstance(perturb, str) else tuple(perturb)
    named = _paths(state.hyperparams)
    names = [n for n, _ in named]
    chosen = set()
    for name in perturb:
        chosen.update(_match(who, names, name))
    size = int(np.shape(named[0][1])[0]) if named else _size(who, state.inner_state, None)
    scores = jnp.asarray(scores)
    if scores.shape != (size,):
        raise ValueError(
            f"{who}: scores must have shape ({size},), one per member, got {scores.shape}"
        )
    n = max(1, int(fraction * size))
    order = jnp.argsort(jnp.where(jnp.isnan(scores), jnp.inf, scores), stable=True)
    top, bottom = order[:n], order[size - n :]
    pick, *leaf_keys = jax.random.split(key, 1 + len(named))
    sources = top[jax.random.randint(pick, (n,), 0, n)]
    source = jnp.arange(size).at[bottom].set(sources)
    replaced = jnp.zeros(size, bool).at[bottom].set(True)

    def take(x):
        return x[source]

    params = jax.tree.map(take, params)
    inner = jax.tree.map(take, state.inner_state)
    leaves = []
    for i, (_, leaf) in enumerate(named):
        leaf = take(leaf)
        if i in chosen and jnp.issubdtype(leaf.dtype, jnp.floating):
            factor = jax.random.choice(leaf_keys[i], jnp.asarray(factors, leaf.dtype), (size,))
            leaf = jnp.where(replaced, leaf * factor, leaf)
        leaves.append(leaf)
    hp = jax.tree.unflatten(jax.tree.structure(state.hyperparams), leaves)
    return params, PopulationState(hp, inner)


__all__ = [
    "PopulationState",
    "population",
    "population_exploit_explore",
    "population_hyperparameters",
    "population_member",
    "sweep",
]
