"""Sharded optimizer state on JAX's own runtime: state shardings, ZeRO-1, memory, checkpoints.

gradtx has no runtime of its own: a transformation is pure JAX, so under `jit` with
`NamedSharding`s, under `pmap` and across processes started with `jax.distributed.initialize`, it
computes what it computes on one device. What this module adds is where the state lives:

- `state_sharding(tx, params)`: the state's shardings derived from the params' (moments sharded
  like their parameters, scalars replicated), for `out_shardings` of a jitted `init` and the
  in / out shardings of the step.
- `state_sharding(tx, params, zero_axis="data")`: ZeRO stage 1. Each moment is also sharded along
  the data-parallel axis, even where its parameter is replicated, so per-device state memory
  falls by that axis's size. Each device updates only its slice of the moments from the summed
  gradients, and XLA all-gathers the updates for the replicated params.
- `init_sharded`, `abstract_state`: build the state directly in its shardings (params may be
  `jax.ShapeDtypeStruct`s that carry a sharding, so nothing is materialised on one device), or
  describe it without building it (for `jit(...).lower`, and as a restore target).
- `bytes_per_device`: how much of a tree each device holds; `hlo_collectives`: which collectives
  XLA put into a compiled step.
- `save_sharded` / `load_sharded`: orbax-checkpoint with the state's `gradtx.state_dict` paths as
  names; every process writes and reads only its own shards.

Example::

    mesh = jax.make_mesh((8,), ("data",), axis_types=(jax.sharding.AxisType.Auto,))
    params = jax.device_put(params, NamedSharding(mesh, P()))          # data parallel
    tx = gradtx.adam(1e-3)
    state_sh = gradtx.state_sharding(tx, params, zero_axis="data")     # ZeRO-1
    state = gradtx.init_sharded(tx, params, zero_axis="data")
    step = jax.jit(train_step, out_shardings=(params_sh, state_sh), donate_argnums=(0, 1))
"""

from __future__ import annotations

import os
import re
import warnings
from collections.abc import Sequence
from typing import Any, NamedTuple

import jax
import numpy as np
from jax import tree_util as jtu
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from .._base._checks import check_divides
from .._base._typing import OptState, Params, PyTree
from ..core._transformation import GradientTransformation
from ..tree._paths import named_leaves
from ._sharding import plan

__all__ = [
    "LeafSharding",
    "abstract_state",
    "bytes_per_device",
    "explain_state_sharding",
    "hlo_collectives",
    "init_sharded",
    "load_sharded",
    "save_sharded",
    "state_sharding",
]


class LeafSharding(NamedTuple):
    """How one state leaf is sharded, and why (a row of `explain_state_sharding`).

    Attributes:
      path: the leaf's '/'-joined key path in the state (as in `gradtx.state_dict`).
      shape: its shape.
      dtype: its dtype.
      spec: its `PartitionSpec` on the mesh.
      source: the path of the parameter it was paired with ('' for none).
      note: the rule that gave `spec`, and with ZeRO-1 the axis it used or why it used none.
    """

    path: str
    shape: tuple[int, ...]
    dtype: Any
    spec: PartitionSpec
    source: str
    note: str


def _abstract(x: Any) -> Any:
    if isinstance(x, jax.ShapeDtypeStruct):
        return jax.ShapeDtypeStruct(x.shape, x.dtype)
    return jax.ShapeDtypeStruct(np.shape(x), jax.numpy.result_type(x))


def _state_shapes(who: str, tx: GradientTransformation, params: Params) -> OptState:
    if not (callable(getattr(tx, "init", None)) and callable(getattr(tx, "update", None))):
        raise TypeError(f"{who}: tx must be a GradientTransformation, got {type(tx).__name__}")
    structs = jax.tree.map(_abstract, params)
    return jax.eval_shape(tx.init, structs)


def explain_state_sharding(
    tx: GradientTransformation,
    params: Params,
    *,
    mesh: Mesh | None = None,
    param_shardings: PyTree | None = None,
    zero_axis: str | Sequence[str] | None = None,
) -> list[LeafSharding]:
    """How `state_sharding` shards each leaf of `tx`'s state, and why.

    Args:
      tx: the transformation.
      params: the params (arrays or `jax.ShapeDtypeStruct`s), as for `state_sharding`.
      mesh: see `state_sharding`.
      param_shardings: see `state_sharding`.
      zero_axis: see `state_sharding`.

    Returns:
      One `LeafSharding(path, shape, dtype, spec, source, note)` per state leaf, in flattening
      order; `note` says which rule gave the spec and, with `zero_axis`, why a leaf stayed
      replicated over it.
    """
    who = "explain_state_sharding"
    shapes = _state_shapes(who, tx, params)
    _, _, rows = plan(
        who, shapes, params, mesh=mesh, param_shardings=param_shardings, zero_axis=zero_axis
    )
    return [LeafSharding(*row) for row in rows]


def state_sharding(
    tx: GradientTransformation,
    params: Params,
    *,
    mesh: Mesh | None = None,
    param_shardings: PyTree | None = None,
    zero_axis: str | Sequence[str] | None = None,
    warn: bool = True,
) -> OptState:
    r"""The shardings of `tx`'s state, derived from the params' shardings.

    Every state subtree with the params' structure (`mu`, `nu`, accumulators, ...) is sharded like
    the params, leaf by leaf: a buffer of its parameter's shape gets the parameter's
    `PartitionSpec`; a buffer with extra leading axes, size-1 axes or one axis removed (factored
    moments) gets the spec fitted to its shape; a matrix optimizer's factor of one axis of size
    `k` — `(*batch, k, k)` (a Kronecker factor, an eigenbasis) or `(*batch, k, r)` (a low-rank
    projection), the batch axes leading as in the parameter — has its rows sharded like that axis
    and its columns replicated (where axes share a size, the i-th factor of that size follows the
    i-th such axis); a blocked factor `(*batch, n_r, n_c, b, b)` of a parameter's last two axes
    (Shampoo's, blocks of side `b`) has its block grid `(n_r, n_c)` sharded like those two axes
    and each block replicated, so a device holds the factors of the blocks of its own shard;
    everything else (counters, hyperparameters, keys) is replicated, as are the fields a state
    class marks as computed whole on every device (Dion's `q`; SOAP's factors, bases and rotated
    moments; Kron's factors; Shampoo's factors, roots and moments of a one-block matrix: sharded,
    each step would gather them). Mesh axes that do not divide a dimension are left out.

    With `zero_axis` (ZeRO stage 1), every non-scalar leaf is also sharded over that mesh axis
    (or axes) when it does not use it already: on its largest unsharded dimension that divides by
    the axis size, else by adding the axis to an already sharded dimension that divides. Leaves
    where no dimension divides stay replicated over it and are listed in a warning (see
    `explain_state_sharding`). Per-device state memory then falls by the axis size, except for
    the fields computed whole on every device, which stay replicated (sharded for storage, every
    step would gather them: SOAP's step moved 25x the parameter bytes).

    .. math::  \mathrm{spec}(s_i) = \mathrm{fit}(\mathrm{spec}(p_{\pi(i)}), \mathrm{shape}(s_i))

    Args:
      tx: the transformation whose state is sharded.
      params: the params: arrays with `NamedSharding`s, or `jax.ShapeDtypeStruct`s with
        `sharding=` (nothing is computed on them).
      mesh: the device mesh; needed only when the params carry no `NamedSharding` (e.g. host
        arrays, then taken as replicated) or when `param_shardings` holds `PartitionSpec`s.
      param_shardings: optional tree (params' structure) of `NamedSharding` or `PartitionSpec`
        overriding the params' own shardings.
      zero_axis: a mesh axis name (or a sequence of names) to shard the optimizer state over,
        usually the data-parallel axis; None keeps the state sharded like the params.
      warn: with `zero_axis`, warn about the leaves that could not be split.

    Returns:
      A tree with the state's structure and a `NamedSharding` per leaf: the `out_shardings` of a
      jitted `init`, and the state's in / out shardings in the jitted step.

    Reference: Rajbhandari et al., 2020, "ZeRO: Memory Optimizations Toward Training Trillion
    Parameter Models" (stage 1: optimizer-state partitioning).
    """
    return _shardings(
        "state_sharding", tx, params, mesh, param_shardings, zero_axis, warn, stacklevel=3
    )


def _shardings(
    who: str,
    tx: GradientTransformation,
    params: Params,
    mesh: Mesh | None,
    param_shardings: PyTree | None,
    zero_axis: str | Sequence[str] | None,
    warn: bool,
    stacklevel: int,
) -> OptState:
    shapes = _state_shapes(who, tx, params)
    mesh_, treedef, rows = plan(
        who, shapes, params, mesh=mesh, param_shardings=param_shardings, zero_axis=zero_axis
    )
    if warn and zero_axis is not None:
        size = int(np.prod([mesh_.shape[a] for a in _zero_axes(zero_axis)]))
        kept = [
            f"{r.path} {r.shape}"
            for r in rows
            if "not split over" in r.note and int(np.prod(r.shape)) >= size
        ]
        if kept:
            warnings.warn(
                f"{who}: {len(kept)} state leaves stay replicated over {zero_axis!r} because no "
                f"dimension divides by {size}: " + ", ".join(kept[:8]) + (" ..." * (len(kept) > 8)),
                stacklevel=stacklevel,
            )
    return jtu.tree_unflatten(treedef, [NamedSharding(mesh_, r.spec) for r in rows])


def _zero_axes(zero_axis: str | Sequence[str]) -> tuple[str, ...]:
    return (zero_axis,) if isinstance(zero_axis, str) else tuple(zero_axis)


def abstract_state(
    tx: GradientTransformation,
    params: Params,
    *,
    mesh: Mesh | None = None,
    param_shardings: PyTree | None = None,
    zero_axis: str | Sequence[str] | None = None,
) -> OptState:
    """`tx`'s state as `jax.ShapeDtypeStruct`s carrying their derived shardings (nothing built).

    Use it to lower a step ahead of time (`jax.jit(step).lower(params, abstract_state(...), ...)`)
    or as the target of `load_sharded`.

    Args:
      tx: the transformation.
      params: the params, as for `state_sharding`.
      mesh: see `state_sharding`.
      param_shardings: see `state_sharding`.
      zero_axis: see `state_sharding`.

    Returns:
      The state's structure with a `jax.ShapeDtypeStruct(shape, dtype, sharding=...)` per leaf.
    """
    shapes = _state_shapes("abstract_state", tx, params)
    shardings = state_sharding(
        tx, params, mesh=mesh, param_shardings=param_shardings, zero_axis=zero_axis, warn=False
    )
    return jax.tree.map(
        lambda s, sh: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sh), shapes, shardings
    )


def init_sharded(
    tx: GradientTransformation,
    params: Params,
    *,
    mesh: Mesh | None = None,
    param_shardings: PyTree | None = None,
    zero_axis: str | Sequence[str] | None = None,
    warn: bool = True,
) -> OptState:
    """`tx.init(params)`, built by one jitted call directly in the state's derived shardings.

    No buffer is created whole on one device. With `jax.ShapeDtypeStruct` params (carrying
    `sharding=`) the state is built from shapes alone; a transformation whose state copies the
    params' values (e.g. `ema_params`) then needs the real params.

    Args:
      tx: the transformation.
      params: the params (sharded arrays or `jax.ShapeDtypeStruct`s with shardings).
      mesh: see `state_sharding`.
      param_shardings: see `state_sharding`.
      zero_axis: see `state_sharding` (ZeRO-1).
      warn: see `state_sharding`.

    Returns:
      The initial state, every leaf with the sharding `state_sharding` derives.
    """
    shardings = _shardings(
        "init_sharded", tx, params, mesh, param_shardings, zero_axis, warn, stacklevel=3
    )
    leaves, treedef = jtu.tree_flatten(params)
    abstract = [isinstance(x, jax.ShapeDtypeStruct) for x in leaves]
    if any(abstract):
        structs = jtu.tree_unflatten(
            treedef,
            [
                jax.ShapeDtypeStruct(x.shape, x.dtype) if a else x
                for x, a in zip(leaves, abstract, strict=True)
            ],
        )
        return jax.jit(lambda: tx.init(structs), out_shardings=shardings)()
    return jax.jit(tx.init, out_shardings=shardings)(params)


def bytes_per_device(tree: PyTree) -> dict[Any, int]:
    """The bytes of `tree`'s arrays held by each device (from their addressable shards).

    Args:
      tree: a pytree of `jax.Array`s (e.g. an optimizer state); other leaves are ignored.

    Returns:
      A dict from device to the number of bytes of its shards, over this process's devices.
    """
    out: dict[Any, int] = {}
    for leaf in jax.tree.leaves(tree):
        for shard in getattr(leaf, "addressable_shards", ()):
            out[shard.device] = out.get(shard.device, 0) + int(shard.data.nbytes)
    return out


def _flat_named(who: str, state: PyTree) -> tuple[dict[str, Any], Any]:
    items, treedef = named_leaves(who, state, root="value")
    return dict(items), treedef


def _orbax(who: str) -> Any:
    try:
        import orbax.checkpoint as ocp
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError(
            f"{who} needs orbax-checkpoint: pip install 'gradtx[checkpoint]' (from a checkout: "
            "pip install -e '.[checkpoint]'), or pip install orbax-checkpoint"
        ) from e
    return ocp


def save_sharded(directory: str | os.PathLike, state: OptState) -> str:
    """Save a (sharded) state with orbax-checkpoint, each leaf under its `state_dict` path.

    Every process writes its own shards (call it on every process in a multi-host job). The
    directory must not exist yet.

    Args:
      directory: where to write (an absolute path is made from a relative one).
      state: the state, e.g. from `init_sharded` or a jitted step.

    Returns:
      The absolute directory written.
    """
    ocp = _orbax("save_sharded")
    path = os.path.abspath(os.fspath(directory))
    named, _ = _flat_named("save_sharded", state)
    with ocp.StandardCheckpointer() as ckptr:
        ckptr.save(path, named)
        ckptr.wait_until_finished()
    return path


def load_sharded(directory: str | os.PathLike, target: OptState) -> OptState:
    """Restore a state saved by `save_sharded` into `target`'s structure and shardings.

    Args:
      directory: the directory `save_sharded` wrote.
      target: the state to restore into: `abstract_state(tx, params, ...)` (shapes, dtypes and
        shardings, nothing allocated) or a concrete state with the wanted shardings.

    Returns:
      The restored state; every leaf is placed with `target`'s sharding for it, which may differ
      from the one it was saved with (e.g. restore a replicated state as ZeRO-1, or a state
      saved on 8 devices onto 4 or 16). Each device reads only its own shards.

    Raises:
      ValueError: a target sharding does not divide its leaf's shape (the message names the
        leaf), checked before anything is read.
    """
    ocp = _orbax("load_sharded")
    path = os.path.abspath(os.fspath(directory))
    named, treedef = _flat_named("load_sharded", target)
    structs = {
        k: jax.ShapeDtypeStruct(v.shape, v.dtype, sharding=getattr(v, "sharding", None))
        for k, v in named.items()
    }
    _check_divides("load_sharded", structs)
    with ocp.StandardCheckpointer() as ckptr:
        restored = ckptr.restore(path, structs)
    return jtu.tree_unflatten(treedef, [restored[k] for k in named])


def _check_divides(who: str, structs: dict[str, jax.ShapeDtypeStruct]) -> None:
    """Raise a `ValueError` naming the first target leaf whose sharding does not divide its
    shape, before orbax starts reading (it would log every TensorStore spec, then fail on a
    leaf it does not name)."""
    for key, struct in structs.items():
        check_divides(who, key, tuple(struct.shape), struct.sharding)


_COLLECTIVES = (
    "all-reduce",
    "all-gather",
    "reduce-scatter",
    "all-to-all",
    "collective-permute",
    "collective-broadcast",
)


def hlo_collectives(compiled: Any) -> dict[str, int]:
    """Count the collectives in a compiled computation's optimized HLO.

    Args:
      compiled: `jax.jit(f).lower(...).compile()`, or its HLO text (`compiled.as_text()`).

    Returns:
      A dict from collective (`all-reduce`, `all-gather`, `reduce-scatter`, `all-to-all`,
      `collective-permute`, `collective-broadcast`) to the number of instructions of that kind
      (an asynchronous `-start` / `-done` pair counts once).
    """
    text = compiled if isinstance(compiled, str) else compiled.as_text()
    counts = dict.fromkeys(_COLLECTIVES, 0)
    for match in re.finditer(r"=\s*[^=]*?\s([a-z\-]+?)(-start)?\(", text):
        op = match.group(1)
        if op in counts:
            counts[op] += 1
    return counts
