"""`selective_transform`: Optax's name for running an optimizer on the unfrozen parameters only
(a two-label `partition`: the optimizer and `set_to_zero`)."""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from .._base._checks import error_context
from .._base._recipe import recorded
from .._base._typing import PyTree
from ..core._transformation import GradientTransformation, as_transformation
from ..transforms._zero import set_to_zero
from ._common import errors_named
from ._label_partition import partition


def _label(who: str, flag: Any) -> str:
    try:
        arr: np.ndarray | None = np.asarray(flag)
    except (TypeError, jax.errors.TracerArrayConversionError):
        arr = None
    if arr is None or arr.shape != () or arr.dtype.kind not in "bi":
        raise ValueError(
            f"{who}: freeze_mask must be a static boolean or a tree (or prefix tree) of booleans "
            f"of the params, True for the frozen leaves; got a leaf {flag!r}"
        )
    return "freeze" if bool(arr) else "train"


@recorded
def selective_transform(
    optimizer: GradientTransformation, *, freeze_mask: bool | PyTree
) -> GradientTransformation:
    r"""Run `optimizer` on the unfrozen parameters only; the frozen ones get zero updates.

    .. math::  u_i = \begin{cases} 0 & m_i \\ \mathrm{optimizer}(g_{\{j : \neg m_j\}})_i
      & \text{otherwise} \end{cases}

    The optimizer keeps no state for the frozen leaves (it runs as if alone on the others).

    Args:
      optimizer: the transformation of the unfrozen leaves.
      freeze_mask: a static mask, True for the frozen leaves: one boolean (freeze everything or
        nothing) or a tree of booleans with the params' structure or a prefix of it.

    Returns:
      A `GradientTransformation`: `gradtx.partition({"train": optimizer, "freeze":
      set_to_zero()}, labels)`, whose state is `MultiTransformState(inner_states)` with the
      keys "train" and "freeze" (Optax wraps each inner state in a `MaskedState`; the updates
      are the same).

    Examples:
      >>> import jax.numpy as jnp, gradtx
      >>> from gradtx.wrappers._selective import selective_transform
      >>> params = {"a": jnp.ones(1), "b": jnp.ones(2)}
      >>> tx = selective_transform(gradtx.sgd(0.1), freeze_mask={"a": True, "b": False})
      >>> updates, _ = tx.update(params, tx.init(params))
      >>> updates["a"], updates["b"]
      (Array([0.], dtype=float32), Array([-0.1, -0.1], dtype=float32))

    Reference: matches `optax.selective_transform`; see also `gradtx.freeze(mask, tx=...)`
    (the same with glob patterns or a function as the mask).
    """
    who = "selective_transform"
    optimizer = as_transformation(optimizer, who, "optimizer")
    labels = jax.tree.map(lambda m: _label(who, m), freeze_mask)
    with error_context(who):
        tx = partition({"train": optimizer, "freeze": set_to_zero()}, labels)
    return errors_named(who, tx)


__all__ = ["selective_transform"]
