"""Matrix optimizers under JAX's explicit sharding (internal).

With a mesh of `AxisType.Explicit` axes (the default of `jax.make_mesh` in recent JAX), every
operation must know its output sharding at trace time: a matmul whose contracting dimension is
sharded, a reshape that splits a sharded axis, `qr` / `svd` / `eigh` of a sharded matrix and
`lax.cond` branches whose outputs are sharded differently are errors there, not collectives.
The matrix optimizers (Muon, SOAP, Shampoo, Kron, ...) do all of these. `auto_partitioned` runs
such an update with the mesh's explicit axes switched to auto (`jax.sharding.auto_axes`), so XLA
partitions it as it does under `AxisType.Auto`, and gives the updates and the state back with
the shardings they came in with. Without explicit axes it calls the update unchanged.

On params sharded over a mesh (FSDP, ZeRO-3), a matrix function left to XLA's partitioner moves
the matrix at every matmul of an iteration (Muon's Newton-Schulz: 15 all-gathers for 5
iterations). `gathered` bounds that: the matrix is all-gathered once, the whole function runs
locally on every device, and the result, replicated, is cut back to each device's rows where it
meets the sharded params (a slice, no collective). `owner_split` / `owner_merged` divide the work
instead: a stack of same-shape matrices is split by whole matrices over the devices (one
all-to-all each way, with the stack axis unsharded on both sides, so that what comes before and
after runs in the params' layout), so each device computes only the matrices it owns.
Inner products of sharded trees (`gradtx.tree.vdot`) use an element-wise product and a sum
there (`jnp.vdot` ravels, which splits a sharded axis), `jnp.vdot` elsewhere.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jax.sharding import AxisType, PartitionSpec

_auto_axes: Callable | None = getattr(jax.sharding, "auto_axes", None)


def _explicit_spec(x: Any) -> Any:
    """The `PartitionSpec` of `x` when it is sharded over explicit mesh axes, else None."""
    typeof = getattr(jax, "typeof", None)
    if typeof is None or not hasattr(x, "shape"):
        return None
    sharding: Any = getattr(typeof(x), "sharding", None)
    mesh = getattr(sharding, "mesh", None)
    if AxisType.Explicit not in tuple(getattr(mesh, "axis_types", ()) or ()):
        return None
    return getattr(sharding, "spec", None)


def _mesh_of(x: Any) -> Any:
    """The mesh `x` is sharded over, when it has named axes XLA partitions (auto or explicit;
    inside `shard_map`, whose axes are manual, and without a mesh: None)."""
    typeof = getattr(jax, "typeof", None)
    if typeof is None or not hasattr(x, "shape"):
        return None
    mesh = getattr(getattr(typeof(x), "sharding", None), "mesh", None)
    names = tuple(getattr(mesh, "axis_names", ()) or ())
    types = tuple(getattr(mesh, "axis_types", ()) or ())
    if not names or AxisType.Manual in types:
        return None
    return mesh


def gathered(x: Any) -> Any:
    """`x` whole on every device of its mesh: at most one all-gather, so that what follows runs
    locally (see the module docstring). Unchanged without a mesh or inside `shard_map`."""
    mesh = _mesh_of(x)
    if mesh is None:
        return x
    return _constrained(x, jax.sharding.NamedSharding(mesh, PartitionSpec()))


def _constrained(x: Any, sharding: Any) -> Any:
    if AxisType.Explicit in tuple(sharding.mesh.axis_types):
        return jax.sharding.reshard(x, sharding)
    return jax.lax.with_sharding_constraint(x, sharding)


def owner_split(x: Any) -> tuple[Any, Any]:
    """A stack of matrices `x` (batch first) split by whole matrices over every device of its
    mesh (padded with zero matrices to a multiple of the device count): one all-to-all, after
    which each device holds the matrices it owns and what follows runs on those alone. Returns
    the split stack and the sharding to give `owner_merged`; unchanged (None) without a mesh."""
    mesh = _mesh_of(x)
    if mesh is None:
        return x, None
    # whatever computed `x` ran where its inputs are (else XLA's partitioner moves each input of
    # an element-wise `x`, e.g. Muon's gradient and momentum, to the owners separately)
    x = _unstacked(x, mesh)
    devices = math.prod(mesh.axis_sizes)
    pad = -x.shape[0] % devices
    if pad:
        x = jnp.pad(x, [(0, pad)] + [(0, 0)] * (x.ndim - 1))
    owned = jax.sharding.NamedSharding(mesh, PartitionSpec(tuple(mesh.axis_names)))
    return _constrained(x, owned), owned


def _unstacked(x: Any, mesh: Any) -> Any:
    """`x` with its leading (stack) axis not sharded and its other axes as XLA's partitioner
    likes (unconstrained): a barrier that keeps an owner layout from spreading past it."""
    free = (PartitionSpec.UNCONSTRAINED,) * (x.ndim - 1)
    return jax.lax.with_sharding_constraint(
        x, jax.sharding.NamedSharding(mesh, PartitionSpec(None, *free))
    )


def owner_merged(y: Any, owned: Any, count: int) -> Any:
    """The first `count` matrices of `y`, computed where `owner_split` put them (its sharding
    `owned`), back in a layout whose stack axis is not sharded (the consumer's, e.g. the params'
    rows: one all-to-all)."""
    if owned is None:
        return y
    return _unstacked(_constrained(y, owned)[:count], owned.mesh)


def on_explicit_axes(*xs: Any) -> bool:
    """Whether any of `xs` is sharded over explicit mesh axes."""
    return any(_explicit_spec(x) is not None for x in xs)


def auto_partitioned(update: Callable) -> Callable:
    """`update(updates, state, params=None, **extra_args)`, run with explicit mesh axes switched
    to auto when its inputs are sharded over explicit axes; outputs keep the inputs' specs."""

    @functools.wraps(update)
    def run(updates, state, params=None, **extra_args):
        leaves = jax.tree.leaves((updates, state, params))
        if _auto_axes is None or not on_explicit_axes(*leaves):
            return update(updates, state, params, **extra_args)
        # what comes out is sharded as it came in (a leaf on no explicit axes: replicated)
        out = jax.tree.map(lambda x: _explicit_spec(x) or PartitionSpec(), (updates, state))
        inner = functools.partial(update, **extra_args)
        return _auto_axes(inner, out_sharding=out)(updates, state, params)

    return run
