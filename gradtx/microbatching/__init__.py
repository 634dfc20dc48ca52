"""gradtx.microbatching: evaluate a function on a large batch one microbatch at a time.

`microbatch(fun, ...)` splits the batch arguments of `fun` into microbatches, runs `fun` on them
sequentially in a `lax.fori_loop` (so only one microbatch's activations live at a time) and
combines the results with an `Accumulator` (sum, mean, running mean, concatenation, or your own).
`micro_vmap` is `jax.vmap` with microbatching, and `micro_grad` computes per-example gradients,
transforms them (e.g. clips them for DP-SGD) and accumulates them. The same public functions and
enums as `optax.microbatching`, under the same names and arguments.

The batch axis of size `B = n * m` is split *strided*: microbatch `i` holds examples
`i, i + n, i + 2n, ...` (a column-major reshape), so that a batch axis sharded across devices
stays sharded along each microbatch; concatenated outputs come back in the original order.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .._base._typing import PyTree
from ._accumulators import AccumulationType as AccumulationType
from ._accumulators import Accumulator as Accumulator
from ._accumulators import IndividualOutputs as IndividualOutputs
from ._accumulators import _check_accumulator, _explicit_sharding, _resolve

__all__ = [
    "AccumulationType",
    "Accumulator",
    "IndividualOutputs",
    "micro_grad",
    "micro_vmap",
    "microbatch",
    "reshape_batch_axis",
]


# --------------------------------------------------------------------------------------------
# argument checks
# --------------------------------------------------------------------------------------------


def _is_int(value: Any) -> bool:
    return isinstance(value, int | np.integer) and not isinstance(value, bool)


def _check_size(who: str, microbatch_size: Any, allow_none: bool) -> None:
    if microbatch_size is None and allow_none:
        return
    if not _is_int(microbatch_size) or microbatch_size < 1:
        extra = " or None" if allow_none else ""
        raise ValueError(
            f"{who}: microbatch_size must be an integer >= 1{extra}, got {microbatch_size!r}"
        )


def _int_tuple(who: str, name: str, value: Any, *, allow_none: bool = False) -> tuple:
    items = (value,) if _is_int(value) or value is None else value
    try:
        items = tuple(items)
    except TypeError:
        raise ValueError(
            f"{who}: {name} must be an integer or a sequence of them, got {value!r}"
        ) from None
    if not all(_is_int(i) or (allow_none and i is None) for i in items):
        raise ValueError(f"{who}: {name} must be an integer or a sequence of them, got {value!r}")
    return items


def _check_num_real(who: str, value: Any) -> None:
    if value is None or isinstance(value, jax.Array | jax.core.Tracer):
        return
    if not _is_int(value) or value < 0:
        raise ValueError(
            f"{who}: num_real_microbatches must be an integer >= 0, an int array or None, "
            f"got {value!r}"
        )


# --------------------------------------------------------------------------------------------
# splitting the batch
# --------------------------------------------------------------------------------------------


def reshape_batch_axis(tree: PyTree, microbatch_size: int, axis: int = 0) -> PyTree:
    r"""Split the batch axis of every leaf into (num_microbatches, microbatch_size).

    .. math::  y[\dots, i, j, \dots] = x[\dots, i + n j, \dots], \qquad n = B / m

    The split is strided (column-major), so a batch axis sharded across devices stays sharded
    along the new `microbatch_size` axis and the `num_microbatches` axis is replicated.

    Args:
      tree: a pytree of arrays, each with a batch axis of size :math:`B` at `axis`.
      microbatch_size: :math:`m`, an integer >= 1 that divides :math:`B`.
      axis: the batch axis (the same for every leaf).

    Returns:
      The tree with each leaf of shape `(..., B, ...)` reshaped to `(..., B // m, m, ...)`.

    Reference: matches `optax.microbatching.reshape_batch_axis`.
    """
    who = "reshape_batch_axis"
    _check_size(who, microbatch_size, allow_none=False)

    def leaf(x):
        x = jnp.asarray(x)
        ax = axis + x.ndim if axis < 0 else axis
        if not 0 <= ax < x.ndim:
            raise ValueError(f"{who}: axis {axis} is out of range for a leaf of shape {x.shape}")
        size = x.shape[ax]
        if size % microbatch_size:
            raise ValueError(
                f"{who}: the batch size {size} must be divisible by microbatch_size "
                f"{microbatch_size}"
            )
        count = size // microbatch_size
        shape = (*x.shape[:ax], microbatch_size, count, *x.shape[ax + 1 :])
        sharding = _explicit_sharding(x)
        if sharding is None:
            return jnp.swapaxes(x.reshape(shape), ax, ax + 1)
        spec = tuple(sharding.spec) + (None,) * (x.ndim - len(sharding.spec))
        split = jax.sharding.PartitionSpec(*spec[:ax], spec[ax], None, *spec[ax + 1 :])
        y = jnp.reshape(x, shape, out_sharding=jax.sharding.NamedSharding(sharding.mesh, split))
        return jnp.swapaxes(y, ax, ax + 1)

    return jax.tree.map(leaf, tree)


# --------------------------------------------------------------------------------------------
# microbatch
# --------------------------------------------------------------------------------------------


def microbatch(
    fun: Callable[..., Any],
    argnums: int | Sequence[int],
    microbatch_size: int | None,
    accumulator: Any = AccumulationType.SUM,
    *,
    argnames: str | Sequence[str] = (),
    in_axes: int | Sequence[int] = 0,
    num_real_microbatches: int | jax.Array | None = None,
) -> Callable[..., Any]:
    r"""`fun` evaluated one microbatch at a time and the results combined.

    .. math::  \mathrm{result} = \mathrm{finalize}(\mathrm{update}(\dots
       \mathrm{update}(\mathrm{init}, \mathrm{fun}(b_0), 0) \dots, \mathrm{fun}(b_{n-1}), n-1))

    The batch arguments are split with `reshape_batch_axis` and `fun` runs on each microbatch in a
    `lax.fori_loop` (sequentially, to bound peak memory). For SUM, the result of a function
    that sums over its batch is unchanged; for CONCAT, a function that maps its batch gives the
    same output as on the full batch.

    Args:
      fun: the function to evaluate.
      argnums: the positions of the arguments that have a batch axis.
      microbatch_size: examples per microbatch, an integer >= 1 that divides the batch size;
        None returns `fun` itself.
      accumulator: how to combine the microbatch results: an `AccumulationType`, an
        `Accumulator`, or a pytree prefix of `fun`'s output holding them.
      argnames: the names of keyword arguments that have a batch axis.
      in_axes: the batch axis of each batch argument (`argnums` then `argnames`), or one int
        for all.
      num_real_microbatches: run only this many microbatches (an int or an int array, so a
        smaller batch does not recompile); use RUNNING_MEAN for a mean over them.

    Returns:
      A function with `fun`'s signature.

    Reference: matches `optax.microbatching.microbatch` (`optax.microbatch`).
    """
    who = "microbatch"
    if not callable(fun):
        raise TypeError(f"{who}: fun must be callable, got {type(fun).__name__}")
    _check_size(who, microbatch_size, allow_none=True)
    nums = _int_tuple(who, "argnums", argnums)
    names = (argnames,) if isinstance(argnames, str) else tuple(argnames)
    if not all(isinstance(n, str) for n in names):
        raise ValueError(
            f"{who}: argnames must be a string or a sequence of them, got {argnames!r}"
        )
    axes = _int_tuple(who, "in_axes", in_axes)
    if _is_int(in_axes):
        axes = axes * (len(nums) + len(names))
    if len(axes) != len(nums) + len(names):
        raise ValueError(
            f"{who}: in_axes must give one axis per batch argument ({len(nums)} argnums + "
            f"{len(names)} argnames), got {in_axes!r}"
        )
    _check_num_real(who, num_real_microbatches)
    _check_accumulator(who, accumulator)
    if microbatch_size is None:
        return fun
    size = microbatch_size

    keys: list[int | str] = [*nums, *names]

    def microbatched(*args, **kwargs):
        for i in nums:
            if i >= len(args):
                raise ValueError(f"{who}: argnums has {i}, but fun got {len(args)} arguments")
        for name in names:
            if name not in kwargs:
                raise ValueError(f"{who}: the batch keyword argument {name!r} was not passed")
        # positional (int keys) and keyword (str keys) arguments in one dict
        values: dict[int | str, Any] = dict(enumerate(args))
        values.update(kwargs)
        sizes = {
            x.shape[ax]
            for key, ax in zip(keys, axes, strict=True)
            for x in jax.tree.leaves(values[key])
        }
        if len(sizes) > 1:
            raise ValueError(
                f"{who}: the batch arguments have different batch sizes {sorted(sizes)}"
            )
        if not sizes:
            raise ValueError(f"{who}: the batch arguments hold no arrays")
        (batch_size,) = sizes
        if batch_size % size:
            raise ValueError(
                f"{who}: the batch size {batch_size} must be divisible by microbatch_size {size}"
            )
        count = batch_size // size
        for key, ax in zip(keys, axes, strict=True):
            values[key] = reshape_batch_axis(values[key], size, ax)
        acc = _resolve(who, accumulator, count)

        def evaluate(i):
            picked = dict(values)
            for key, ax in zip(keys, axes, strict=True):
                picked[key] = jax.tree.map(
                    lambda x, ax=ax: jax.lax.dynamic_index_in_dim(x, i, ax, keepdims=False),
                    values[key],
                )
            return fun(*(picked[i] for i in range(len(args))), **{k: picked[k] for k in kwargs})

        carry = acc.init(jax.eval_shape(evaluate, 0))
        bound = count if num_real_microbatches is None else num_real_microbatches
        carry = jax.lax.fori_loop(0, bound, lambda i, c: acc.update(c, evaluate(i), i), carry)
        return acc.finalize(carry)

    return microbatched


# --------------------------------------------------------------------------------------------
# micro_vmap, micro_grad
# --------------------------------------------------------------------------------------------


def micro_vmap(
    fun: Callable[..., Any],
    in_axes: int | Sequence[int | None] | None = 0,
    out_axes: Any = 0,
    *,
    microbatch_size: int | None = None,
    vmap_fn: Callable[..., Any] = jax.vmap,
    accumulator: Any = AccumulationType.CONCAT,
    num_real_microbatches: int | jax.Array | None = None,
) -> Callable[..., Any]:
    r"""`jax.vmap(fun)` computed one microbatch at a time, optionally reduced over the batch.

    .. math::  \mathrm{result} = \mathrm{acc}_{i}\, \mathrm{fun}(x_i)

    With CONCAT (the default) the result equals `jax.vmap(fun, in_axes)(...)`; with SUM or MEAN
    the per-example outputs are reduced over the batch (inside each microbatch with the
    accumulator's `aggregate`, then across microbatches), so the full per-example output never
    exists at once. Keyword arguments are mapped over their axis 0.

    Args:
      fun: the function to map.
      in_axes: the mapped axis of each positional argument (None: not mapped), or one int.
      out_axes: must be 0.
      microbatch_size: examples per microbatch (None: the whole batch at once).
      vmap_fn: a function like `jax.vmap` (e.g. one with extra options bound).
      accumulator: how to combine the outputs (see `microbatch`); a pytree prefix of them.
      num_real_microbatches: run only this many microbatches (see `microbatch`).

    Returns:
      The mapped (and reduced) function.

    Reference: matches `optax.microbatching.micro_vmap`.
    """
    who = "micro_vmap"
    if not callable(fun):
        raise TypeError(f"{who}: fun must be callable, got {type(fun).__name__}")
    if not (_is_int(out_axes) and out_axes == 0):
        raise ValueError(
            f"{who}: out_axes must be 0 (other output axes are not supported), got {out_axes!r}"
        )
    axes = _int_tuple(who, "in_axes", in_axes, allow_none=True)
    _check_size(who, microbatch_size, allow_none=True)
    _check_num_real(who, num_real_microbatches)
    _check_accumulator(who, accumulator)

    def mapped_and_reduced(*args, kwargs):
        outputs = vmap_fn(fun, axes, out_axes)(*args, **kwargs)
        return _resolve(who, accumulator, 1).aggregate(outputs)

    batched = microbatch(
        mapped_and_reduced,
        argnums=tuple(i for i, ax in enumerate(axes) if ax is not None),
        argnames="kwargs",
        microbatch_size=microbatch_size,
        accumulator=accumulator,
        in_axes=(*(ax for ax in axes if ax is not None), 0),
        num_real_microbatches=num_real_microbatches,
    )

    def wrapped(*args, **kwargs):
        return batched(*args, kwargs=kwargs)

    return wrapped


def _unchanged(grads: PyTree) -> PyTree:
    return grads


def _no_metrics(grads: PyTree) -> None:
    del grads


def micro_grad(
    fun: Callable[..., Any],
    has_aux: bool = False,
    argnums: int | Sequence[int] = 0,
    *,
    batch_argnums: int | Sequence[int] = 1,
    keep_batch_dim: bool = True,
    microbatch_size: int | None = None,
    accumulator: Any = AccumulationType.SUM,
    transform_fn: Callable[[PyTree], PyTree] = _unchanged,
    metrics_fn: Callable[[PyTree], PyTree] = _no_metrics,
    num_real_microbatches: int | jax.Array | None = None,
) -> Callable[..., tuple[Any, IndividualOutputs]]:
    r"""Per-example gradients, transformed and accumulated over the batch, microbatched.

    .. math::  \mathrm{result} = \mathrm{acc}_n\, T(\nabla f(\theta; x_n)), \qquad
       \mathrm{aux} = (f(\theta; x_n),\ M(\nabla f(\theta; x_n)),\ \mathrm{aux}_n)_n

    Each example's gradient is computed on its own (a batch of one), passed through
    `transform_fn` :math:`T` (e.g. per-example clipping for DP-SGD) and combined with
    `accumulator`; `metrics_fn` :math:`M` is applied to each example's raw gradient and returned
    per example.

    Args:
      fun: the loss, `fun(params, batch, ...) -> scalar` (or `(scalar, aux)` with `has_aux`).
      has_aux: whether `fun` returns `(value, aux)`.
      argnums: the argument(s) to differentiate with respect to (as in `jax.grad`).
      batch_argnums: the argument(s) with a batch axis 0 (default: the second).
      keep_batch_dim: give `fun` each example with a batch axis of size 1 (True) or without one.
      microbatch_size: examples per microbatch (None: the whole batch at once).
      accumulator: how to combine the transformed gradients (default SUM; see `microbatch`).
      transform_fn: applied to each example's gradient before accumulation.
      metrics_fn: applied to each example's gradient; returned per example.
      num_real_microbatches: run only this many microbatches (see `microbatch`).

    Returns:
      A function with `fun`'s arguments returning `(accumulated, IndividualOutputs(values,
      metrics, aux))`, the latter with the batch axis first.

    Reference: matches `optax.microbatching.micro_grad`; Abadi et al., "Deep Learning with
    Differential Privacy" (2016) for per-example clipping.
    """
    who = "micro_grad"
    if not callable(fun):
        raise TypeError(f"{who}: fun must be callable, got {type(fun).__name__}")
    for name, value in (("has_aux", has_aux), ("keep_batch_dim", keep_batch_dim)):
        if not isinstance(value, bool):
            raise ValueError(f"{who}: {name} must be True or False, got {value!r}")
    batch = _int_tuple(who, "batch_argnums", batch_argnums)
    if not batch or min(batch) < 0:
        raise ValueError(
            f"{who}: batch_argnums must be non-negative integers, got {batch_argnums!r}"
        )
    _check_size(who, microbatch_size, allow_none=True)
    _check_num_real(who, num_real_microbatches)
    _check_accumulator(who, accumulator)
    with_aux = fun if has_aux else (lambda *a, **kw: (fun(*a, **kw), None))
    value_and_grad = jax.value_and_grad(with_aux, argnums, has_aux=True)

    def per_example(*args, **kwargs):
        (value, aux), grads = value_and_grad(*args, **kwargs)
        return transform_fn(grads), IndividualOutputs(
            values=value, metrics=metrics_fn(grads), aux=aux
        )

    def computed(*args, **kwargs):
        if max(batch) >= len(args):
            raise ValueError(
                f"{who}: batch_argnums has {max(batch)}, but got {len(args)} arguments"
            )
        in_axes = [0 if i in batch else None for i in range(len(args))]
        if keep_batch_dim:
            args = tuple(
                jax.tree.map(lambda x: jnp.expand_dims(x, 1), a) if i in batch else a
                for i, a in enumerate(args)
            )
        mapped = micro_vmap(
            per_example,
            in_axes=in_axes,
            microbatch_size=microbatch_size,
            accumulator=(accumulator, AccumulationType.CONCAT),
            num_real_microbatches=num_real_microbatches,
        )
        return mapped(*args, **kwargs)

    return computed
