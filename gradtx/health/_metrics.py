"""Metrics from every update: `metrics(tx, state)` reads a flat dict of scalars out of any
optimizer state, and `with_metrics(tx)` adds what a state does not hold by itself: the global
gradient and update norms, the fraction clipping removed and, per leaf or per pattern group, the
norms of gradients, updates and moments and the update/param ratios."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax import tree_util as jtu

from .._base._checks import error_context, expect_state
from .._base._introspect import node_of, observed_update, register, walk
from .._base._recipe import recorded
from .._base._typing import OptState, Params, PyTree
from ..core._transformation import GradientTransformation, as_transformation, forward_extra_args
from ..tree import NonfiniteLocation, match, path_str
from ..tree import norm as tree_norm
from ..wrappers._population import PopulationState, member_transformation

_STEP_NAMES = ("count", "gradient_step", "step")


class WithMetricsState(NamedTuple):
    """State of `with_metrics`: the measurements of the latest update and the inner state."""

    grad_norm: jax.Array  # float32: global L2 norm of the gradients the latest update received
    update_norm: jax.Array  # float32: global L2 norm of the updates it returned
    clip_fraction: dict[str, jax.Array]  # clip's state path -> 1 - |after| / |before|
    per_leaf: dict[str, jax.Array]  # "grad_norm/<leaf or group>", ... (empty by default)
    inner_state: OptState


def _squared_norm(x: jax.Array) -> jax.Array:
    return jnp.asarray(tree_norm(x, squared=True), jnp.float32)


def _global_norm(tree: PyTree) -> jax.Array:
    return jnp.asarray(tree_norm(tree), jnp.float32)


# -- the layout, fixed at init ---------------------------------------------------------------


def _groups(who: str, per_leaf: Any, params: Params) -> dict[str, list[int]] | None:
    """Leaf indices per key: one group per leaf (`per_leaf=True`), one per pattern, or None."""
    if per_leaf is False:
        return None
    paths = [path_str(p) for p, _ in jtu.tree_flatten_with_path(params)[0]]
    if per_leaf is True:
        return {p or "<root>": [i] for i, p in enumerate(paths)}
    if isinstance(per_leaf, str):
        patterns: dict[str, Any] = {per_leaf: per_leaf}
    elif isinstance(per_leaf, Mapping):
        patterns = dict(per_leaf)
    else:
        patterns = {str(p): p for p in per_leaf}
    groups = {}
    for name, pattern in patterns.items():
        chosen = jax.tree.leaves(match(pattern, params, strict=True))
        groups[str(name)] = [i for i, keep in enumerate(chosen) if keep]
    return groups


def _clip_paths(tx: Any, path: tuple = ()) -> list[tuple]:
    """The state paths of the clipping links that `observed_update` reaches (links of chains,
    recursively), in order."""
    node = node_of(tx)
    if node is None:
        return []
    if node.kind == "clip":
        return [path]
    if node.kind != "chain":
        return []
    out = []
    for key_path, child in node.children:
        out += _clip_paths(child, (*path, *key_path))
    return out


def _is_masked(node: Any) -> bool:
    """An empty NamedTuple (gradtx's or Optax's `MaskedNode`): where a partition's or a mask's
    state keeps nothing for a part of the params."""
    return isinstance(node, tuple) and not node and hasattr(node, "_fields")


def _aligned(node: Any, params: Params, params_def: Any) -> list[Any] | None:
    """`node`'s arrays in the order of the params' leaves (None where a mask leaves a leaf out)
    when `node` is parameter-shaped: the params' structure (`params_def`) with, at each leaf, a
    float array of that parameter's shape, or a masked subtree in place of a whole subtree (the
    state of a `multi_transform` partition or of `masked`), and at least one array; else None."""
    if params_def.num_nodes > 1 and type(node) is not type(params):
        return None  # not even the params' root: the common case, decided without flattening
    node_def = jax.tree.structure(node, is_leaf=_is_masked)
    try:
        parts = node_def.flatten_up_to(params)
    except (ValueError, TypeError):  # not the params' structure (nor a prefix of it)
        return None
    out: list[Any] = []
    for leaf, part in zip(jax.tree.leaves(node, is_leaf=_is_masked), parts, strict=True):
        if _is_masked(leaf):
            out += [None] * len(jax.tree.leaves(part))
            continue
        dtype = getattr(leaf, "dtype", None)
        if (
            not jtu.treedef_is_leaf(jax.tree.structure(part))
            or part is None
            or dtype is None
            or not jnp.issubdtype(dtype, jnp.inexact)
            or jnp.shape(leaf) != jnp.shape(part)
        ):
            return None
        out.append(leaf)
    return out if any(x is not None for x in out) else None


def _moments(inner_state: OptState, params: Params) -> dict[str, list[Any]]:
    """Parameter-shaped parts of the inner state (moments, traces, slots), each as its arrays in
    the order of the params' leaves (None for a leaf it has nothing for), keyed by role name: the
    last named key of their state path (`mu`, `nu`). The parts of one role that hold disjoint
    leaves (the partitions of a `multi_transform`, e.g. muon's and adam's `mu`) are one; where a
    role repeats over the same leaves each part is keyed by its whole state path."""
    leaves = jax.tree.leaves(params)
    if not leaves or (jtu.treedef_is_leaf(jax.tree.structure(params)) and not jnp.shape(leaves[0])):
        return {}  # no params, or one 0-d array: every float scalar of the state looks like it
    params_def = jax.tree.structure(params)
    by_role: dict[str, list[tuple[tuple, list[Any]]]] = {}
    flat = jtu.tree_flatten_with_path(
        inner_state, is_leaf=lambda x: _aligned(x, params, params_def) is not None
    )
    for path, node in flat[0]:
        aligned = _aligned(node, params, params_def)
        if aligned is not None:
            role = path_str(path[-1:]) if path else "state"
            by_role.setdefault(role, []).append((path, aligned))
    out: dict[str, list[Any]] = {}
    for role, parts in by_role.items():
        columns = list(zip(*(aligned for _, aligned in parts), strict=True))  # per param leaf
        if all(sum(x is not None for x in column) <= 1 for column in columns):  # disjoint
            out[role] = [next((x for x in column if x is not None), None) for column in columns]
        else:
            for path, aligned in parts:
                out[path_str(path) or role] = aligned
    return out


@recorded
def with_metrics(
    tx: GradientTransformation,
    *,
    per_leaf: bool | str | Sequence[str] | Mapping[str, str | Sequence[str]] = False,
) -> GradientTransformation:
    r"""`tx`, measuring every update inside the same jitted step; read with `gradtx.metrics`.

    The updates and the inner state are exactly `tx`'s; the state also holds, for the latest
    update (float32 scalars):

    - `grad_norm` :math:`\lVert g\rVert_2` and `update_norm` :math:`\lVert u\rVert_2`, global;
    - `clip_fraction` for each clipping link of the chain (`clip_by_global_norm`, `clip`,
      `clip_by_block_rms`, `adaptive_grad_clip`, `clip_by_history`, ...; links of nested
      chains too): :math:`1 - \lVert \mathrm{after}\rVert / \lVert \mathrm{before}\rVert`, the
      fraction of the norm it removed (0 when it did not clip);
    - with `per_leaf`, per parameter leaf (or per pattern group) keyed by its path:
      `grad_norm/<p>`, `update_norm/<p>`, `update_param_ratio/<p>`
      (:math:`\lVert u_p\rVert / \lVert \theta_p\rVert`, with the params before the update;
      `inf` for an all-zero parameter with a non-zero update, e.g. a zero-initialised bias on
      its first step) and
      `<role>_norm/<p>` for every parameter-shaped buffer of the inner state (`mu_norm`,
      `nu_norm`, `trace_norm`, ...; quantized buffers are not parameter-shaped and are left out).
      A buffer of the leaves of one partition (`multi_transform`, `masked`, and so muon, soap,
      ...) counts for the leaves it holds: the partitions' buffers of one role are one metric
      (muon's `mu_norm/<p>` for every leaf, adam's `nu_norm/<p>` for the leaves adam updates).
      Norms of a group are over all its leaves together (those a buffer holds, for its norm).
      With a single 0-d array as the params, no buffer is reported: any float scalar of the
      state has its shape.

    Args:
      tx: the optimizer to measure (any transformation; clipping is found inside gradtx chains).
      per_leaf: False (global metrics only), True (every leaf), or glob pattern(s) of gradtx's
        pattern language (`"**/kernel"`, a list of them, or a dict from group name to
        pattern(s)); each pattern must match a leaf.

    Returns:
      A `GradientTransformation` with state `WithMetricsState(grad_norm, update_norm,
      clip_fraction, per_leaf, inner_state)`; per-leaf mode needs `params` in `update`.

    Example:
      >>> import jax.numpy as jnp, gradtx
      >>> tx = gradtx.with_metrics(
      ...     gradtx.chain(gradtx.clip_by_global_norm(1.0), gradtx.sgd(0.1)), per_leaf=True
      ... )
      >>> params = {"w": jnp.ones(2), "b": jnp.zeros(2)}
      >>> grads = {"w": jnp.array([3.0, 4.0]), "b": jnp.zeros(2)}
      >>> _, state = tx.update(grads, tx.init(params), params)
      >>> m = gradtx.metrics(tx, state)
      >>> float(m["grad_norm"]), round(float(m["clip_fraction"]), 3), float(m["grad_norm/w"])
      (5.0, 0.8, 5.0)
    """
    who = "with_metrics"
    tx = as_transformation(tx, who, "tx")
    if not isinstance(per_leaf, bool | str | Mapping | Sequence):
        raise TypeError(
            f"{who}: per_leaf must be True, False, a glob pattern, a list of patterns or a dict "
            f"from group name to pattern(s), got {type(per_leaf).__name__}"
        )
    inner_update = forward_extra_args(tx.update)
    clips = _clip_paths(tx)
    clip_keys = {path: path_str(path) or "<root>" for path in clips}

    def init(params):
        with error_context(who):
            inner_state = tx.init(params)
            groups = _groups(who, per_leaf, params)

        def zero():  # one buffer per field: a donated state must not alias its leaves
            return jnp.zeros([], jnp.float32)

        leaf_metrics: dict[str, jax.Array] = {}
        if groups is not None:
            kinds = ["grad_norm", "update_norm", "update_param_ratio"]
            leaf_metrics = {f"{k}/{g}": zero() for k in kinds for g in groups}
            for role, aligned in _moments(inner_state, params).items():
                for g, idx in groups.items():  # the groups this buffer holds a leaf of
                    if any(aligned[i] is not None for i in idx):
                        leaf_metrics[f"{role}_norm/{g}"] = zero()
        return WithMetricsState(
            grad_norm=zero(),
            update_norm=zero(),
            clip_fraction={key: zero() for key in clip_keys.values()},
            per_leaf=leaf_metrics,
            inner_state=inner_state,
        )

    def update(updates, state, params=None, **extra_args):
        expect_state(who, state, WithMetricsState)
        clipped: dict[str, jax.Array] = {}

        def observe(path, link, before, after, link_state):
            if path not in clip_keys:
                return
            node = node_of(link)
            if node is not None and node.removed is not None:  # known without measuring
                frac = jnp.asarray(node.removed(before, link_state), jnp.float32)
            else:
                b, a = _global_norm(before), _global_norm(after)
                frac = jnp.where(b > 0, 1.0 - a / jnp.where(b > 0, b, 1.0), 0.0)
            clipped[clip_keys[path]] = jnp.clip(frac, 0.0, 1.0).astype(jnp.float32)

        with error_context(who):
            if () in clip_keys:  # tx itself is a clip
                new_updates, inner_state = inner_update(
                    updates, state.inner_state, params, **extra_args
                )
                observe((), tx, updates, new_updates, inner_state)
            else:
                new_updates, inner_state = observed_update(
                    tx, updates, state.inner_state, params, extra_args, observe=observe
                )
        leaf_metrics: dict[str, jax.Array] = {}
        if state.per_leaf:
            if params is None:
                raise ValueError(
                    f"{who}: per_leaf metrics include update/param ratios, so update needs "
                    "params; pass them: update(updates, state, params)"
                )
            leaf_metrics = _per_leaf(who, per_leaf, updates, new_updates, params, inner_state)
            if set(leaf_metrics) != set(state.per_leaf):
                raise ValueError(
                    f"{who}: the per-leaf metrics changed from {sorted(state.per_leaf)} at init "
                    f"to {sorted(leaf_metrics)}; call update with the params' tree given to init"
                )
        return new_updates, WithMetricsState(
            grad_norm=_global_norm(updates),
            update_norm=_global_norm(new_updates),
            clip_fraction={
                key: clipped.get(key, state.clip_fraction[key]) for key in clip_keys.values()
            },
            per_leaf=leaf_metrics,
            inner_state=inner_state,
        )

    def report(state):
        out: dict[str, jax.Array] = {
            "grad_norm": state.grad_norm,
            "update_norm": state.update_norm,
        }
        # sorted: JAX rebuilds these dicts with sorted keys (a state out of `jit`), and init
        # and update build them in different orders, so sort for one order everywhere
        fractions = state.clip_fraction
        for key in sorted(fractions):
            out["clip_fraction" if len(fractions) == 1 else f"clip_fraction/{key}"] = fractions[key]
        for key in sorted(state.per_leaf):
            out[key] = state.per_leaf[key]
        return out

    return register(
        GradientTransformation(init, update),
        "wrapper",
        children=[((jtu.GetAttrKey("inner_state"),), tx)],
        report=report,
    )


def _per_leaf(who, per_leaf, grads, updates, params, inner_state) -> dict[str, jax.Array]:
    groups = _groups(who, per_leaf, params)
    assert groups is not None
    g = jax.tree.leaves(grads)
    u = jax.tree.leaves(updates)
    p = jax.tree.leaves(params)
    trees: dict[str, list[Any]] = {"grad_norm": g, "update_norm": u}
    for role, aligned in _moments(inner_state, params).items():
        trees[f"{role}_norm"] = aligned
    sq = {
        k: [None if x is None else _squared_norm(x) for x in leaves] for k, leaves in trees.items()
    }
    p_sq = [_squared_norm(x) for x in p]
    out: dict[str, jax.Array] = {}
    zero = jnp.zeros([], jnp.float32)
    for name, idx in groups.items():
        for kind, squares in sq.items():
            held: list[jax.Array] = [s for i in idx if (s := squares[i]) is not None]
            if held:  # a moment of only some leaves: over those it holds
                out[f"{kind}/{name}"] = jnp.sqrt(sum(held, zero))
        un = out[f"update_norm/{name}"]
        pn = jnp.sqrt(sum((p_sq[i] for i in idx), zero))
        ratio = jnp.where(pn > 0, un / jnp.where(pn > 0, pn, 1.0), jnp.where(un > 0, jnp.inf, 0.0))
        out[f"update_param_ratio/{name}"] = ratio.astype(jnp.float32)
    return out


# -- reading ---------------------------------------------------------------------------------------


def _step(state: OptState) -> jax.Array | None:
    """The outermost integer scalar counter of the state (`count`, `gradient_step`, `step`)."""
    best, depth = None, None
    leaves = jtu.tree_flatten_with_path(state, is_leaf=lambda x: isinstance(x, NonfiniteLocation))[
        0
    ]
    for key_path, leaf in leaves:
        if isinstance(leaf, NonfiniteLocation) or not key_path:
            continue
        last = key_path[-1]
        name = getattr(last, "name", getattr(last, "key", None))
        if name not in _STEP_NAMES or jnp.shape(leaf) != ():
            continue
        if not jnp.issubdtype(jnp.result_type(leaf), jnp.integer):
            continue
        if depth is None or len(key_path) < depth:
            best, depth = leaf, len(key_path)
    return best


def metrics(tx: GradientTransformation, state: OptState) -> dict[str, jax.Array]:
    """A flat dict of scalar metrics of an optimizer and its current state, with stable keys.

    Computed from the state alone (pure and traceable: call it inside the jitted step, or on
    the state it returned), for any transformation built from gradtx's combinators:

    - `step`: the outermost step counter (`count`, or `gradient_step`, the inner steps taken,
      under gradient accumulation);
    - the current value of every schedule and learning rate of the chain, as used by the latest
      update (`learning_rate`, `step_size`; no `inject_hyperparams` needed; also of optimizers
      that are one rule, e.g. `fromage`, `madgrad`, `momo`, `schedule_free`, and with
      `effective_learning_rate`, the learning rate times the distance estimate, for `prodigy`
      and `dadapt_adamw`) and of every injected hyperparameter;
    - the counters of the wrappers: `notfinite_count` / `total_notfinite` (and the located leaf's
      `nonfinite_index`, see `first_nonfinite`) of `apply_if_finite`, the skips of
      `skip_on_spikes`, `micro_step` / `gradient_step` of gradient accumulation, the threshold of
      `clip_by_history`;
    - with `with_metrics`: `grad_norm`, `update_norm`, `clip_fraction` and the per-leaf metrics;
    - of a `population`: each member's metrics, under the same keys, with the member axis.

    A name found once is the key as is (`learning_rate`); a name found in several places is
    keyed by each place's state path (`0/learning_rate`, `opt/2/learning_rate`). Keys depend on
    the optimizer's structure only, never on values, so they are the same at every step and
    after a checkpoint is restored. A `MultiSteps` object is seen as its
    `gradient_transformation()`. An Optax transformation (or a hand-written one) inside the
    chain is opaque: only its state's step counter is seen.

    Args:
      tx: the optimizer that made `state`.
      state: its state (concrete, or traced inside `jit`).

    Returns:
      `dict[str, jax.Array]` of scalars, sorted by key: the order JAX gives a dict returned by a
      jitted function, so it is the same eagerly, under `jit` and after a restore.

    Example:
      >>> import jax.numpy as jnp, gradtx
      >>> tx = gradtx.adamw(gradtx.schedules.linear_schedule(1.0, 0.0, 10))
      >>> params = {"w": jnp.zeros(2)}
      >>> state = tx.init(params)
      >>> for _ in range(3):
      ...     _, state = tx.update({"w": jnp.ones(2)}, state, params)
      >>> {k: round(float(v), 3) for k, v in gradtx.metrics(tx, state).items()}
      {'learning_rate': 0.8, 'step': 3.0}
    """
    tx = as_transformation(tx, "metrics", "tx")
    if isinstance(state, PopulationState):
        # a population: each member's metrics, under the same keys, with the member axis
        return jax.vmap(lambda h, s: metrics(member_transformation(tx, h), s))(
            state.hyperparams, state.inner_state
        )
    entries: list[tuple[tuple, str, Any]] = []
    for path, node, node_state in walk(tx, state):
        if node.report is not None:
            entries += [(path, name, value) for name, value in node.report(node_state).items()]
    names = [name for _, name, _ in entries]
    out: dict[str, jax.Array] = {}
    step = _step(state)
    if step is not None:
        out["step"] = jnp.asarray(step)
    for path, name, value in entries:
        key = name if names.count(name) == 1 or not path else f"{path_str(path)}/{name}"
        while key in out:  # two nodes at one state path (a wrapper sharing its inner's state)
            key = f"{key}'"
        out[key] = jnp.asarray(value)
    # sorted: the order JAX gives a dict that leaves `jit` (or a `device_get`), so the keys come
    # in one order eagerly, under jit and after a restore
    return dict(sorted(out.items()))


__all__ = ["WithMetricsState", "metrics", "with_metrics"]
