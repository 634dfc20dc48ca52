"""Interoperability with Optax beyond the shared `(init, update)` protocol."""

from __future__ import annotations

from typing import Any

from ._transformation import as_transformation, forward_extra_args


def as_optax(tx: Any) -> Any:
    """`tx` as an `optax.GradientTransformationExtraArgs`, so `optax.chain` forwards `value=` to it.

    A gradtx transformation already works inside `optax.chain`, but Optax passes extra keyword
    arguments of `update` (such as `value=loss`) only to transformations of its own
    `GradientTransformationExtraArgs` type; others get none. The ones that need the loss (`eve`,
    `reduce_on_plateau`, `newbob`, ...) then raise "needs the monitored value". Wrap them (or the
    whole gradtx part of the chain) with `as_optax` inside an `optax.chain`; inside a
    `gradtx.chain` no wrapping is needed. Needs `optax` to be installed.

    Args:
      tx: a gradtx (or any) transformation with `init` and `update`.

    Returns:
      An `optax.GradientTransformationExtraArgs` with the same `init` and `update` (extra
      arguments that `tx.update` does not declare are dropped, as `gradtx.chain` does).

    Example:
      >>> import jax.numpy as jnp, optax, gradtx
      >>> tx = optax.chain(optax.clip(1.0), gradtx.as_optax(gradtx.eve(0.1)))
      >>> state = tx.init({"w": jnp.zeros(2)})
      >>> updates, state = tx.update({"w": jnp.ones(2)}, state, value=jnp.asarray(1.0))
    """
    tx = as_transformation(tx, "as_optax", "tx")
    try:
        import optax
    except ImportError:  # pragma: no cover - optax is a test dependency
        raise ImportError(
            "gradtx.as_optax needs optax: pip install optax (gradtx itself does not depend on it)"
        ) from None
    return optax.GradientTransformationExtraArgs(tx.init, forward_extra_args(tx.update))


__all__ = ["as_optax"]
