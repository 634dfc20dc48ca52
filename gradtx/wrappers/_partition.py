"""Different transformations for different parts of the parameter tree.

`multi_transform`, `masked`, `freeze` and `lr_multipliers` run an inner transformation on a
*pruned* tree: each leaf it does not own is `MaskedNode()` (an empty tree, as in Optax, never
None, so given params always reach it), so its state keeps no buffer for them and has Optax's
layout (`masked` and `freeze` prune a subtree that a prefix mask marks False as one
`MaskedNode()`, as Optax does). `init` given `gradtx.tree.map_params`' (or Optax's) params
placeholder passes it to the inner transformation unmasked, as Optax's `masked` does. Labels,
masks and multipliers are resolved at trace time into Python values (by the pattern language of
`gradtx/tree/_patterns.py`); errors in them are raised by `init`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Hashable, Mapping
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.tree_util import DictKey, GetAttrKey

from .._base._checks import HyperparameterError, did_you_mean, error_context, expect_state
from .._base._introspect import register
from .._base._recipe import recorded
from .._base._typing import OptState, Params, PyTree
from ..core._transformation import (
    EmptyState,
    GradientTransformation,
    as_transformation,
    forward_extra_args,
    stateless,
)
from ..tree import _ParamsPlaceholder
from ..tree._paths import assert_same_structure, map_with_path
from ..tree._patterns import (
    MaskOrFn,
    broadcast_prefix,
    is_tree_not_function,
    resolve_mask,
    resolve_mask_prefix,
    resolve_rules,
)
from ._common import register_wrapper


class MaskedState(NamedTuple):
    inner_state: OptState  # the inner transformation's state, for the selected leaves only


class PartitionState(NamedTuple):
    """State of `multi_transform` / `partition` (Optax's name and field)."""

    inner_states: dict[Hashable, OptState]  # label -> state of that label's transformation


MultiTransformState = PartitionState  # gradtx's earlier name of the same class


class MaskedNode(NamedTuple):
    """An empty tree: what an inner transformation gets for a tree that is a single leaf it does
    not own (a pruned single array would be None, which is also "no params given"). As Optax's
    `MaskedNode`, it has no leaves, so the inner state keeps nothing for it."""


def _pruned(tree: Any, keep: Any) -> Any:
    """`tree` with each subtree that `keep` (a tree of bools with `tree`'s structure or a prefix
    of it) marks False replaced by one `MaskedNode()`: Optax's masked layout (a single pruned
    leaf is `MaskedNode()` too, so given params never reach the inner transformation as None)."""
    return jax.tree.map(
        lambda k, sub: sub if k or sub is None else MaskedNode(),  # None leaves stay None
        keep,
        tree,
        is_leaf=lambda x: x is None,
    )


def _merged(keep: Any, inner: Any, outer: Any) -> Any:
    """Subtree by subtree of `keep` (as for `_pruned`): `inner` (the inner transformation's
    output on the pruned tree) where True, else `outer`."""
    return jax.tree.map(
        lambda k, a, b: a if k else b, keep, inner, outer, is_leaf=lambda x: x is None
    )


def _is_placeholder(params: Any) -> bool:
    """Whether `params` is the placeholder that `gradtx.tree.map_params` (or Optax's
    `tree_map_params`) calls `init` with to find the params-shaped parts of a state: a wrapper
    cannot mask it (it has no leaves), so it is passed on to the inner `init` as it is."""
    return isinstance(params, _ParamsPlaceholder) or type(params).__name__ == "_ParamsPlaceholder"


def _check_params(who: str, updates: Any, params: Any) -> None:
    if params is not None:
        assert_same_structure(who, updates=updates, params=params)


def _run_on(who, update_fn, keep, updates, inner_state, params, extra_args):
    """The inner update on the leaves where `keep` is True; returns (pruned updates, state)."""
    with error_context(who):
        return update_fn(
            _pruned(updates, keep),
            inner_state,
            None if params is None else _pruned(params, keep),
            **extra_args,
        )


# --------------------------------------------------------------------------------------------
# multi_transform
# --------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class LabelsByPattern:
    """Glob pattern -> label rules, made by `labels_by_pattern`: called on the params, it returns
    their tree of labels (None where no pattern matches)."""

    rules: Mapping[str, Hashable]
    strict: bool = True

    def __call__(self, params: Any) -> Any:
        return resolve_rules(
            "labels_by_pattern", "rules", self.rules, params, default=None, strict=self.strict
        )


def labels_by_pattern(rules: Mapping[str, Hashable], *, strict: bool = True) -> LabelsByPattern:
    """Label parameters by glob patterns on their paths, for `multi_transform`'s `param_labels`.

    Each leaf gets the label of the first pattern (in dict order) that matches its '/'-joined
    path; a leaf that no pattern matches gets None (`multi_transform` then gives it its
    `default_label`, or reports it). The pattern language is that of `gradtx.tree.match`
    (docs/patterns.md). The result is a callable `params -> tree of labels`, so it also works as
    `optax.multi_transform`'s `param_labels` (there, end with a `"**"` catch-all).

    Args:
      rules: glob pattern -> label, e.g. `{"**/bias": "no_decay", "embed/**": "sparse",
        "**": "main"}`; the first matching pattern wins.
      strict: a pattern that matches no parameter, or only parameters that earlier patterns
        already took, raises a `ValueError` listing the available paths (catches typos and
        patterns in the wrong order), at `init`. Pass False to allow it.

    Returns:
      A `LabelsByPattern`, a callable `params -> tree of labels`.

    Example:
      >>> import gradtx, jax.numpy as jnp
      >>> labels = gradtx.labels_by_pattern({"encoder/**": "frozen", "**": "adam"})
      >>> labels({"encoder": {"w": jnp.ones(2)}, "head": jnp.ones(2)})
      {'encoder': {'w': 'frozen'}, 'head': 'adam'}
    """
    who = "labels_by_pattern"
    if not isinstance(rules, Mapping) or not rules:
        raise ValueError(
            f"{who}: rules must be a non-empty dict of glob pattern -> label "
            f"(e.g. {{'encoder/**': 'frozen', '**': 'adam'}}), got {rules!r}"
        )
    for pattern, label in rules.items():
        if not isinstance(pattern, str):
            raise ValueError(f"{who}: the keys of rules must be glob patterns, got {pattern!r}")
        if label is None or not isinstance(label, Hashable):
            raise ValueError(
                f"{who}: rules[{pattern!r}] must be a label (a key of multi_transform's "
                f"transforms), got {label!r}"
            )
    return LabelsByPattern(rules=dict(rules), strict=bool(strict))


def _looks_like_globs(spec: Any) -> bool:
    return isinstance(spec, Mapping) and any(
        isinstance(k, str) and any(c in k for c in "*?[/") for k in spec
    )


@recorded
def multi_transform(
    transforms: Mapping[Hashable, GradientTransformation],
    param_labels: PyTree | Callable[[Params], PyTree],
    *,
    default_label: Hashable | None = None,
) -> GradientTransformation:
    r"""Apply a different transformation to each labelled group of parameters.

    Each leaf gets one label; `transforms[label]` runs on exactly the leaves with that label, as if
    it were run alone on them (its state holds buffers for those leaves only).

    Args:
      transforms: label -> transformation (e.g. `{"adam": gradtx.adam(1e-3), "sgd": ...}`).
        A label that no leaf uses is allowed (its transformation sees an empty tree).
      param_labels: the label of each parameter, as
        - a tree of labels with the params' structure, or a prefix of it
          (`{"encoder": "adam", "head": "sgd"}` labels whole subtrees). A dict is always such a
          tree, never a set of patterns;
        - a function `params -> such a tree` (a callable pytree shaped like such a tree, e.g. an
          Equinox-like module, is the tree itself);
        - `gradtx.labels_by_pattern({...})`: glob patterns on '/'-joined parameter paths ->
          label, e.g. `labels_by_pattern({"**/bias": "no_decay", "**": "main"})` (first match
          wins; see docs/patterns.md).
      default_label: the label of leaves whose label is None (e.g. that no pattern of
        `labels_by_pattern` matches); without it such leaves raise a `ValueError` listing their
        paths.

    Returns:
      A `GradientTransformation` with state `PartitionState(inner_states)` (also named
      `MultiTransformState`), a dict label -> inner state. Labelling errors (a pattern that
      matches nothing, an unknown label, a tree that is not a prefix of the params) are raised
      by `init`.

    Examples:
      >>> import jax.numpy as jnp, gradtx
      >>> params = {"kernel": jnp.ones(2), "bias": jnp.ones(2)}
      >>> tx = gradtx.multi_transform(
      ...     {"sgd": gradtx.sgd(0.1), "frozen": gradtx.set_to_zero()},
      ...     {"kernel": "sgd", "bias": "frozen"},
      ... )
      >>> updates, _ = tx.update({"kernel": jnp.ones(2), "bias": jnp.ones(2)}, tx.init(params))
      >>> updates["kernel"], updates["bias"]
      (Array([-0.1, -0.1], dtype=float32), Array([0., 0.], dtype=float32))

    Reference: `optax.multi_transform` / `optax.partition` (the same `param_labels` forms);
    RETURNN's multiple optimizers (per-layer `updater_opts`), PyTorch parameter groups.
    """
    who = "multi_transform"
    if not isinstance(transforms, Mapping) or not transforms:
        raise ValueError(
            f"{who}: transforms must be a non-empty dict label -> transformation, "
            f"got {transforms!r}"
        )
    txs = {
        label: as_transformation(tx, who, f"transforms[{label!r}]")
        for label, tx in transforms.items()
    }
    update_fns = {label: forward_extra_args(tx.update) for label, tx in txs.items()}
    known = list(txs)
    if default_label is not None and default_label not in txs:
        raise ValueError(
            f"{who}: default_label {default_label!r} is not a key of transforms"
            f"{did_you_mean(str(default_label), [str(k) for k in known])}; labels: {known}"
        )

    def labels_of(tree):
        if (
            callable(param_labels)
            and not isinstance(param_labels, Mapping)
            and not is_tree_not_function(param_labels, tree)
        ):
            with error_context(who):
                spec = param_labels(tree)
        else:
            spec = param_labels
        try:
            return broadcast_prefix(spec, tree, who=who, what="param_labels")
        except ValueError as e:
            if not _looks_like_globs(spec):
                raise
            raise ValueError(
                f"{e}. A dict of labels is a tree (or prefix tree) of the params; to label them by "
                f"glob patterns, pass gradtx.labels_by_pattern({dict(spec)!r})"
            ) from None

    def resolve(tree):
        per_leaf = labels_of(tree)
        pairs: list[tuple[str, Any]] = []
        map_with_path(lambda path, _, lab: pairs.append((path, lab)), tree, per_leaf)
        unlabelled = [path for path, lab in pairs if lab is None]
        if unlabelled and default_label is None:
            raise ValueError(
                f"{who}: these parameters have no label: {unlabelled}; label them (with "
                "labels_by_pattern, e.g. a '**' pattern last) or pass default_label"
            )
        if unlabelled:
            per_leaf = jax.tree.map(
                lambda _, lab: default_label if lab is None else lab, tree, per_leaf
            )
        for path, lab in pairs:
            lab = default_label if lab is None else lab
            if lab not in txs:
                raise ValueError(
                    f"{who}: parameter {path!r} has label {lab!r}, which is not a key of "
                    f"transforms{did_you_mean(str(lab), [str(k) for k in known])}; "
                    f"labels: {known}"
                )
        return per_leaf

    def keep_for(per_leaf, label):
        return jax.tree.map(lambda lab: lab == label, per_leaf)

    def init(params):
        if _is_placeholder(params):
            return PartitionState(inner_states={lab: tx.init(params) for lab, tx in txs.items()})
        per_leaf = resolve(params)
        states = {}
        for label, tx in txs.items():
            with error_context(f"{who}[{label!r}]"):
                states[label] = tx.init(_pruned(params, keep_for(per_leaf, label)))
        return PartitionState(inner_states=states)

    def update(updates, state, params=None, **extra_args):
        expect_state(who, state, PartitionState)
        # JAX rebuilds dicts with sorted keys (e.g. out of a jitted step): compare key sets
        if not isinstance(state.inner_states, dict) or set(state.inner_states) != set(known):
            got = (
                list(state.inner_states)
                if isinstance(state.inner_states, dict)
                else type(state.inner_states)
            )
            raise ValueError(f"{who}: expected inner states for labels {known}, got {got}")
        _check_params(who, updates, params)
        per_leaf = resolve(updates)
        outs, states = [], {}
        for label in known:
            keep = keep_for(per_leaf, label)
            u, states[label] = _run_on(
                f"{who}[{label!r}]",
                update_fns[label],
                keep,
                updates,
                state.inner_states[label],
                params,
                extra_args,
            )
            outs.append(u)
        index = {label: i for i, label in enumerate(known)}
        merged = jax.tree.map(lambda lab, *us: us[index[lab]], per_leaf, *outs)
        return merged, PartitionState(inner_states=states)

    return register(
        GradientTransformation(init, update),
        "wrapper",
        children=[((GetAttrKey("inner_states"), DictKey(label)), t) for label, t in txs.items()],
    )


# --------------------------------------------------------------------------------------------
# masked / freeze
# --------------------------------------------------------------------------------------------


@recorded
def masked(
    tx: GradientTransformation, mask: MaskOrFn, *, strict: bool = True
) -> GradientTransformation:
    r"""Apply `tx` to the selected leaves only; the other updates pass through unchanged.

    .. math::  u_i = \begin{cases} \mathrm{tx}(g)_i & m_i \\ g_i & \text{otherwise} \end{cases}

    `tx` is initialised and updated on the pruned tree (unselected leaves are `MaskedNode()`, as
    in Optax), so its state holds nothing for them.

    Args:
      tx: the transformation for the selected leaves.
      mask: True for the leaves `tx` applies to: a boolean tree (or a prefix of the params'
        tree), a function `params -> boolean tree`, or a glob pattern / list of patterns on
        '/'-joined parameter paths (`"**/kernel"`, `"!**/bias"`; see `gradtx.tree.match`).
      strict: a positive glob pattern that matches no parameter raises a `ValueError` listing the
        available paths; pass False to allow it.

    Returns:
      A `GradientTransformation` with state `MaskedState(inner_state)`.

    Examples:
      >>> import jax.numpy as jnp, gradtx
      >>> params = {"dense": {"kernel": jnp.ones(2), "bias": jnp.ones(2)}}
      >>> tx = gradtx.masked(gradtx.scale(10.0), "**/kernel")
      >>> updates, _ = tx.update(params, tx.init(params), params)
      >>> updates["dense"]["kernel"], updates["dense"]["bias"]
      (Array([10., 10.], dtype=float32), Array([1., 1.], dtype=float32))

    Reference: `optax.masked`.
    """
    who = "masked"
    tx = as_transformation(tx, who, "tx")
    update_fn = forward_extra_args(tx.update)

    def init(params):
        if _is_placeholder(params):
            return MaskedState(inner_state=tx.init(params))
        keep = resolve_mask_prefix(who, mask, params, strict=strict)
        with error_context(who):
            return MaskedState(inner_state=tx.init(_pruned(params, keep)))

    def update(updates, state, params=None, **extra_args):
        expect_state(who, state, MaskedState)
        _check_params(who, updates, params)
        keep = resolve_mask_prefix(who, mask, updates, strict=strict)
        u, inner = _run_on(who, update_fn, keep, updates, state.inner_state, params, extra_args)
        return _merged(keep, u, updates), MaskedState(inner_state=inner)

    return register_wrapper(GradientTransformation(init, update), tx)


@recorded
def freeze(
    mask: MaskOrFn, *, tx: GradientTransformation | None = None, strict: bool = True
) -> GradientTransformation:
    r"""Give the masked (frozen) leaves exactly zero updates, keeping no state for them.

    .. math::  u_i = \begin{cases} 0 & m_i \\ \mathrm{tx}(g)_i & \text{otherwise} \end{cases}

    Without `tx` this is a stateless transformation that zeroes the frozen updates; place it last
    in a chain (after anything that could move them, such as weight decay). With `tx`, `tx` runs
    on the unfrozen leaves only, so no optimizer state is kept for the frozen ones.

    Args:
      mask: True for the frozen leaves (a boolean tree or prefix, a function of the params, or
        glob pattern(s), as for `masked`).
      tx: the optimizer for the other leaves (None: pass them through unchanged).
      strict: as for `masked`.

    Returns:
      A `GradientTransformation` with state `MaskedState(inner_state)`: `EmptyState()` inside
      without `tx` (as Optax's), else `tx`'s state for the unfrozen leaves.

    Reference: `optax.freeze` (without `tx`), `optax.selective_transform` (with `tx`).
    """
    who = "freeze"
    if tx is None:

        def init_frozen(params):
            if not _is_placeholder(params):
                resolve_mask(who, mask, params, strict=strict)  # pattern errors at init
            return MaskedState(inner_state=EmptyState())  # Optax's layout (masked set_to_zero)

        def zero_frozen(updates, state, params=None, **extra_args):
            del params, extra_args  # the state has no buffers: any empty state is accepted
            frozen = resolve_mask(who, mask, updates, strict=strict)
            zeroed = jax.tree.map(lambda f, u: jnp.zeros_like(u) if f else u, frozen, updates)
            return zeroed, state

        return GradientTransformation(init_frozen, zero_frozen)

    tx = as_transformation(tx, who, "tx")
    update_fn = forward_extra_args(tx.update)

    def trainable(tree):  # a prefix of `tree`, as the mask is (see `masked`)
        frozen = resolve_mask_prefix(who, mask, tree, strict=strict)
        return jax.tree.map(lambda f: not f, frozen)

    def init(params):
        if _is_placeholder(params):
            return MaskedState(inner_state=tx.init(params))
        with error_context(who):
            return MaskedState(inner_state=tx.init(_pruned(params, trainable(params))))

    def update(updates, state, params=None, **extra_args):
        expect_state(who, state, MaskedState)
        _check_params(who, updates, params)
        keep = trainable(updates)
        u, inner = _run_on(who, update_fn, keep, updates, state.inner_state, params, extra_args)
        zeros = jax.tree.map(jnp.zeros_like, updates)
        return _merged(keep, u, zeros), MaskedState(inner_state=inner)

    return register_wrapper(GradientTransformation(init, update), tx)


# --------------------------------------------------------------------------------------------
# Per-parameter factors: lr_multipliers and scale_gradient_by
# --------------------------------------------------------------------------------------------


def _check_factors(who: str, rules: Any, default: Any, *, non_negative: bool) -> None:
    if not isinstance(rules, Mapping):
        raise ValueError(
            f"{who}: rules must be a dict of glob patterns -> factor "
            f"(e.g. {{'**/bias': 2.0, 'embed/**': 0.0}}), got {type(rules).__name__}"
        )
    for name, value in [*((f"rules[{p!r}]", v) for p, v in rules.items()), ("default", default)]:
        ok = isinstance(value, int | float | np.integer | np.floating) and not isinstance(
            value, bool | np.bool_
        )
        if not ok or not math.isfinite(float(value)) or (non_negative and value < 0):
            need = "a finite number >= 0" if non_negative else "a finite number"
            raise HyperparameterError(who, name, value, need, got=repr(value))


def _scale_leaf(factor: float, u: jax.Array) -> jax.Array:
    if factor == 1:
        return u
    if factor == 0:
        return jnp.zeros_like(u)
    return (factor * u).astype(u.dtype)


def _stateless_factors(who: str, rules, default, strict) -> GradientTransformation:
    def resolve(tree):
        return resolve_rules(who, "rules", rules, tree, default=default, strict=strict)

    return stateless(
        lambda updates, params: jax.tree.map(_scale_leaf, resolve(updates), updates),
        # pattern errors at init, where the params are known (not map_params' placeholder)
        validate=lambda params: None if _is_placeholder(params) else resolve(params),
    )


@recorded
def lr_multipliers(
    rules: Mapping[str, float],
    default: float = 1.0,
    *,
    tx: GradientTransformation | None = None,
    strict: bool = True,
) -> GradientTransformation:
    r"""Per-parameter learning-rate multipliers chosen by glob patterns on parameter paths.

    .. math::  u_i = m_i \, \mathrm{tx}(g)_i

    where :math:`m_i` is the value of the first pattern matching leaf `i`'s path (`default` when
    none matches). A multiplier of 0 freezes the parameter: with `tx`, `tx` is run without it, so
    it gets exactly zero updates and no optimizer state.

    Without `tx` this is a stateless scaling to place *after* the optimizer in a chain (the
    optimizer then keeps state for multiplier-0 leaves; pass `tx` to avoid that).

    Args:
      rules: glob pattern -> multiplier >= 0, e.g. `{"backbone/**": 0.1, "**/bias": 2.0}`; the
        first matching pattern (dict order) wins.
      default: the multiplier of leaves no pattern matches.
      tx: the optimizer whose updates are scaled (None: scale the incoming updates).
      strict: a pattern that matches no parameter (or only ones taken by earlier patterns) raises
        a `ValueError` listing the available paths; pass False to allow it.

    Returns:
      A `GradientTransformation`; state `EmptyState()` without `tx`, else `MaskedState`.

    Reference: nnabla's `parameter_variable { learning_rate_multiplier }` (multiplier 0 leaves the
    parameter out of the solver), PyTorch per-group learning rates.
    """
    who = "lr_multipliers"
    _check_factors(who, rules, default, non_negative=True)
    if tx is None:
        return _stateless_factors(who, rules, default, strict)
    tx = as_transformation(tx, who, "tx")
    update_fn = forward_extra_args(tx.update)

    def multipliers(tree):
        return resolve_rules(who, "rules", rules, tree, default=default, strict=strict)

    def init(params):
        if _is_placeholder(params):
            return MaskedState(inner_state=tx.init(params))
        keep = jax.tree.map(lambda m: m != 0, multipliers(params))
        with error_context(who):
            return MaskedState(inner_state=tx.init(_pruned(params, keep)))

    def update(updates, state, params=None, **extra_args):
        expect_state(who, state, MaskedState)
        _check_params(who, updates, params)
        mults = multipliers(updates)
        keep = jax.tree.map(lambda m: m != 0, mults)
        u, inner = _run_on(who, update_fn, keep, updates, state.inner_state, params, extra_args)
        scaled = jax.tree.map(
            lambda m, a, g: _scale_leaf(m, a) if m != 0 else jnp.zeros_like(g), mults, u, updates
        )
        return scaled, MaskedState(inner_state=inner)

    return register_wrapper(GradientTransformation(init, update), tx)


@recorded
def scale_gradient_by(
    rules: Mapping[str, float], default: float = 1.0, *, strict: bool = True
) -> GradientTransformation:
    r"""Multiply each gradient by a per-parameter factor chosen by glob patterns on its path.

    .. math::  u_i = s_i \, g_i

    Place it first in a chain to rescale gradients before the optimizer sees them (e.g. the
    gradients of quantizer step sizes); unlike `lr_multipliers` the optimizer's own normalisation
    (Adam's) may undo it. A factor of 0 zeroes the gradient but does not freeze the parameter
    (weight decay and momentum still move it): use `freeze` or `lr_multipliers` for that.

    Args:
      rules: glob pattern -> finite factor (negative reverses the gradient); the first matching
        pattern (dict order) wins.
      default: the factor of leaves no pattern matches.
      strict: as for `lr_multipliers`.

    Returns:
      A stateless `GradientTransformation` (state `EmptyState()`).

    Reference: nnabla's `Solver.scale_grad` applied per parameter; gradient scaling of quantizer
    parameters in quantization-aware training.
    """
    who = "scale_gradient_by"
    _check_factors(who, rules, default, non_negative=False)
    return _stateless_factors(who, rules, default, strict)


__all__ = [
    "LabelsByPattern",
    "MaskedNode",
    "MaskedState",
    "MultiTransformState",
    "PartitionState",
    "freeze",
    "labels_by_pattern",
    "lr_multipliers",
    "masked",
    "multi_transform",
    "scale_gradient_by",
]
