"""`partition`: Optax's name and signature for `multi_transform` (labels as a tree or a function).

Built on the public `gradtx.multi_transform`, always handing it a *function* that returns the
full tree of labels, so a label tree is never mistaken for a dict of glob patterns.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping

import jax

from .._base._checks import check_bool, error_context
from .._base._recipe import recorded
from .._base._typing import PyTree
from ..core._transformation import GradientTransformation, as_transformation
from ..core._transformation import forward_extra_args as _accepting_extra_args
from ..tree import broadcast_prefix
from ..tree._patterns import is_tree_not_function
from ._common import errors_named
from ._partition import MaskedNode, multi_transform

_is_pruned = lambda x: x is None or isinstance(x, MaskedNode)


def _mask_extra_args(tx: GradientTransformation) -> GradientTransformation:
    """`tx`, whose extra arguments shaped like the (pruned) updates are pruned like them."""
    inner_update = _accepting_extra_args(tx.update)

    def update(updates, state, params=None, **extra_args):
        layout = jax.tree.structure(updates, is_leaf=_is_pruned)

        def pruned(value):
            if jax.tree.structure(value, is_leaf=_is_pruned) != layout:
                return value
            return jax.tree.map(
                lambda u, v: u if _is_pruned(u) else v, updates, value, is_leaf=_is_pruned
            )

        extra_args = {name: pruned(value) for name, value in extra_args.items()}
        return inner_update(updates, state, params, **extra_args)

    return GradientTransformation(tx.init, update)


@recorded
def partition(
    transforms: Mapping[Hashable, GradientTransformation],
    param_labels: PyTree | Callable[[PyTree], PyTree],
    *,
    mask_compatible_extra_args: bool = False,
) -> GradientTransformation:
    r"""Apply a different transformation to each labelled group of parameters.

    .. math::  u_i = \mathrm{transforms}[\ell_i](g_{\{j : \ell_j = \ell_i\}})_i

    Each leaf gets the label above it in `param_labels`; `transforms[label]` runs on exactly the
    leaves with that label, as if run alone on them (its state keeps buffers for those leaves
    only). This is `gradtx.multi_transform` under Optax's name and arguments; use
    `multi_transform` for glob patterns and a default label.

    Args:
      transforms: label -> transformation. A label that no leaf uses is allowed.
      param_labels: a tree of labels with the params' structure or a prefix of it (e.g.
        `("generator", "discriminator")` for params `(gen_params, disc_params)`), or a function
        `params -> such a tree` (called on the updates at each step, like Optax).
      mask_compatible_extra_args: also restrict extra arguments of `update` that have the
        params' tree structure to each group's leaves before passing them on.

    Returns:
      A `GradientTransformation` whose state is `PartitionState(inner_states)` (Optax's name;
      also `gradtx.MultiTransformState`), a dict label -> inner state (Optax wraps each in a
      `MaskedState`; the updates are the same).

    Reference: matches `optax.partition` (formerly `optax.multi_transform`).

    Example:
      >>> import gradtx, jax.numpy as jnp
      >>> params = {"w": jnp.ones((2, 2)), "b": jnp.zeros(2)}
      >>> tx = gradtx.partition({"adam": gradtx.adam(1e-3), "sgd": gradtx.sgd(0.1)},
      ...                       {"w": "adam", "b": "sgd"})
      >>> state = tx.init(params)
    """
    who = "partition"
    check_bool(who, "mask_compatible_extra_args", mask_compatible_extra_args)
    if not isinstance(transforms, Mapping) or not transforms:
        raise ValueError(
            f"{who}: transforms must be a non-empty dict label -> transformation, "
            f"got {transforms!r}"
        )
    txs = {
        label: as_transformation(tx, who, f"transforms[{label!r}]")
        for label, tx in transforms.items()
    }
    if mask_compatible_extra_args:
        txs = {label: _mask_extra_args(tx) for label, tx in txs.items()}

    def labels_for(tree: PyTree) -> PyTree:
        call = callable(param_labels) and not is_tree_not_function(param_labels, tree)
        spec = param_labels(tree) if call else param_labels
        return broadcast_prefix(spec, tree, who=who, what="param_labels")

    with error_context(who):
        tx = multi_transform(txs, labels_for)
    return errors_named(who, tx)


__all__ = ["partition"]
