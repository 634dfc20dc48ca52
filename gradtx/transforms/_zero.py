"""Zeroing updates: all of them (to freeze parameters, e.g. inside a partition), or the NaN
elements (`zero_nans`)."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from .._base._checks import check_bool
from .._base._recipe import recorded
from ..core._transformation import GradientTransformation, stateless


@recorded
def set_to_zero() -> GradientTransformation:
    r"""Replace every update by zeros of its shape and dtype, so the parameters stay unchanged.

    .. math::  u_t = 0

    Used with `multi_transform` / `masked` to keep some parameters fixed (see also
    `gradtx.freeze`); under `jax.jit` the computation of the discarded updates is dropped.
    Matches `optax.set_to_zero`.

    Returns:
      A stateless `GradientTransformation` (state `EmptyState`).
    """
    return stateless(lambda updates, params: jax.tree.map(jnp.zeros_like, updates))


class ZeroNansState(NamedTuple):
    """The state of `zero_nans`: what the last `update` found.

    `found_nan` has the structure of the updates; each leaf is a boolean scalar, True iff that
    leaf had a NaN (or, with `non_finite=True`, a NaN or an infinity) at the last `update`.
    """

    found_nan: Any


@recorded
def zero_nans(*, non_finite: bool = False) -> GradientTransformation:
    r"""Replace the NaN elements of the updates by 0, and record which leaves had any.

    .. math::  u = \begin{cases} 0 & g \text{ is NaN} \\ g & \text{otherwise} \end{cases}

    The state is not used by the transformation itself; it tells the user where NaNs were
    zeroed (`gradtx.tree.get(state, "found_nan")`). Updates keep their dtype.

    Args:
      non_finite: also replace :math:`\pm\infty` by 0 (and record them in `found_nan`), as
        RETURNN's `gradient_nan_inf_filter` does. An extension; Optax replaces NaN only.

    Returns:
      A `GradientTransformation` with state `ZeroNansState(found_nan)` (False leaves at `init`).

    Examples:
      >>> import jax.numpy as jnp, gradtx
      >>> tx = gradtx.transforms.zero_nans()
      >>> g = {"a": jnp.array([1.0, jnp.nan]), "b": jnp.array([jnp.inf])}
      >>> u, state = tx.update(g, tx.init(g))
      >>> u["a"], u["b"], bool(state.found_nan["a"]), bool(state.found_nan["b"])
      (Array([1., 0.], dtype=float32), Array([inf], dtype=float32), True, False)

    Reference: matches `optax.zero_nans` (with `non_finite=False`).
    """
    check_bool("zero_nans", "non_finite", non_finite)
    bad = (lambda g: ~jnp.isfinite(g)) if non_finite else jnp.isnan

    def init(params):
        return ZeroNansState(found_nan=jax.tree.map(lambda p: jnp.zeros((), jnp.bool_), params))

    def update(updates, state, params=None, **extra_args):
        del state, params, extra_args
        found = jax.tree.map(lambda g: jnp.any(bad(g)), updates)
        zeroed = jax.tree.map(lambda g: jnp.where(bad(g), jnp.zeros_like(g), g), updates)
        return zeroed, ZeroNansState(found_nan=found)

    return GradientTransformation(init, update)


__all__ = ["ZeroNansState", "set_to_zero", "zero_nans"]
