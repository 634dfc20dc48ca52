"""The accumulators of `gradtx.microbatching`: how the results of the microbatches combine
(sum, mean, running mean, concatenation, or a user's own `Accumulator`)."""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp


@dataclasses.dataclass(frozen=True)
class Accumulator:
    """How the microbatch results are combined: `init`, then `update` per microbatch, `finalize`.

    It stands for the program

    .. code-block:: python

      carry = init(shape_dtype_of_one_result)
      for i in range(num_microbatches):
          carry = update(carry, result_i, i)
      return finalize(carry)

    and `aggregate(stacked_results)`, the same reduction over a leading batch axis in one go
    (used by `micro_vmap` inside each microbatch).

    Args:
      init: `shape_dtype -> carry` (receives `jax.ShapeDtypeStruct` leaves).
      update: `(carry, value, index) -> carry`.
      finalize: `carry -> result`.
      aggregate: `values_with_leading_axis -> result`.
    """

    init: Callable[[Any], Any]
    update: Callable[[Any, Any, Any], Any]
    finalize: Callable[[Any], Any]
    aggregate: Callable[[Any], Any]


class AccumulationType(enum.Enum):
    """The built-in ways to combine microbatch results.

    `MEAN`: the mean over the microbatches (floating values only); `SUM`: their sum;
    `RUNNING_MEAN`: the mean of the microbatches actually run (with `num_real_microbatches`);
    `CONCAT`: concatenated along axis 0, in the original batch order.
    """

    MEAN = enum.auto()
    SUM = enum.auto()
    RUNNING_MEAN = enum.auto()
    CONCAT = enum.auto()


class IndividualOutputs(NamedTuple):
    """The per-example outputs of `micro_grad`: loss `values`, `metrics` and the function's
    `aux`, each with the batch axis first."""

    values: Any
    metrics: Any
    aux: Any


# --------------------------------------------------------------------------------------------
# accumulators
# --------------------------------------------------------------------------------------------


def _zeros_of(spec: Any) -> jax.Array:
    return jnp.zeros_like(spec)


def _require_floating(spec: Any) -> None:
    if not jnp.issubdtype(spec.dtype, jnp.floating):
        raise ValueError(
            "microbatching: the MEAN and RUNNING_MEAN accumulators need floating-point values, "
            f"got {spec.dtype}; use SUM for integers"
        )


def _float_zeros(spec: Any) -> jax.Array:
    _require_floating(spec)
    return _zeros_of(spec)


def _per_leaf(acc: Accumulator) -> Accumulator:
    """`acc`, written for one array, applied to every leaf of a pytree."""
    return Accumulator(
        init=lambda spec: jax.tree.map(acc.init, spec),
        update=lambda carry, value, i: jax.tree.map(lambda c, v: acc.update(c, v, i), carry, value),
        finalize=lambda carry: jax.tree.map(acc.finalize, carry),
        aggregate=lambda values: jax.tree.map(acc.aggregate, values),
    )


def _sum() -> Accumulator:
    return _per_leaf(
        Accumulator(
            init=_zeros_of,
            update=lambda carry, value, i: carry + value,
            finalize=lambda carry: carry,
            aggregate=lambda values: jnp.sum(values, axis=0),
        )
    )


def _mean(count: int) -> Accumulator:
    return _per_leaf(
        Accumulator(
            init=_float_zeros,
            update=lambda carry, value, i: carry + value,
            finalize=lambda carry: carry / count,
            aggregate=lambda values: jnp.mean(values, axis=0),
        )
    )


def _running_mean() -> Accumulator:
    def update(carry, value, i):
        kept = i / (i + 1)  # the weight of the mean so far
        return carry * kept + value * (1 - kept)

    return _per_leaf(
        Accumulator(
            init=_float_zeros,
            update=update,
            finalize=lambda carry: carry,
            aggregate=lambda values: jnp.mean(values, axis=0),
        )
    )


def _concat(count: int) -> Accumulator:
    def init(spec):
        return jnp.broadcast_to(_zeros_of(spec), (count, *spec.shape))

    def finalize(carry):
        # carry[i, j] is example i + count * j: put j first, then merge
        return _merge_leading(jnp.swapaxes(carry, 0, 1))

    return _per_leaf(
        Accumulator(
            init=init,
            update=lambda carry, value, i: carry.at[i].set(value),
            finalize=finalize,
            aggregate=lambda values: values,
        )
    )


def _explicit_sharding(x: Any) -> Any:
    """The `NamedSharding` of `x` when all its mesh axes are explicit, else None."""
    try:
        sharding = jax.typeof(x).sharding
    except Exception:  # e.g. NumPy inputs: no sharding to keep
        return None
    mesh = getattr(sharding, "mesh", None)
    if mesh is None or not getattr(mesh, "are_all_axes_explicit", False) or not mesh.axis_names:
        return None
    return sharding


def _merge_leading(x: jax.Array) -> jax.Array:
    new_shape = (x.shape[0] * x.shape[1], *x.shape[2:])
    sharding = _explicit_sharding(x)
    if sharding is None:
        return x.reshape(new_shape)
    spec = tuple(sharding.spec) + (None,) * (x.ndim - len(sharding.spec))
    merged = jax.sharding.PartitionSpec(spec[0], *spec[2:])
    return jnp.reshape(x, new_shape, out_sharding=jax.sharding.NamedSharding(sharding.mesh, merged))


_NAMES = {t.name: t for t in AccumulationType}


def _resolve(who: str, accumulator: Any, count: int) -> Accumulator:
    """One `Accumulator` for a pytree (prefix) of accumulators / accumulation types."""

    def one(acc: Any) -> Accumulator:
        if isinstance(acc, enum.Enum) and acc.name in _NAMES:  # also Optax's enum
            kind = _NAMES[acc.name]
            if kind is AccumulationType.MEAN:
                return _mean(count)
            if kind is AccumulationType.SUM:
                return _sum()
            if kind is AccumulationType.RUNNING_MEAN:
                return _running_mean()
            return _concat(count)
        if all(
            callable(getattr(acc, f, None)) for f in ("init", "update", "finalize", "aggregate")
        ):
            return acc
        raise ValueError(
            f"{who}: accumulator leaves must be an AccumulationType "
            f"({', '.join(_NAMES)}) or an Accumulator, got {acc!r}"
        )

    leaves, treedef = jax.tree.flatten(accumulator)
    accs = treedef.unflatten([one(a) for a in leaves])

    def each(fn_name: str):
        def apply(tree, *rest):
            return jax.tree.map(
                lambda acc, sub, *r: getattr(acc, fn_name)(sub, *r), accs, tree, *rest
            )

        return apply

    def update(carry, value, i):
        return jax.tree.map(lambda acc, c, v: acc.update(c, v, i), accs, carry, value)

    return Accumulator(
        init=each("init"), update=update, finalize=each("finalize"), aggregate=each("aggregate")
    )


def _check_accumulator(who: str, accumulator: Any) -> None:
    """Fail at construction on a leaf that is neither a type nor an accumulator."""
    _resolve(who, accumulator, 1)
