"""Shared fixtures of the distributed tests: a 4x2 mesh and a params tree with FSDP,
tensor-parallel and replicated parts (dims divisible by the mesh axes, plus one odd leaf)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P


def mesh_4x2() -> jax.sharding.Mesh:
    return jax.make_mesh((4, 2), ("data", "model"), axis_types=(AxisType.Auto, AxisType.Auto))


# FSDP: sharded over "data"; tensor parallel: over "model"; replicated: ZeRO-1 shards its state.
SPECS = {
    "fsdp": {"w": P("data", None)},
    "tp": {"w": P(None, "model"), "bias": P("model")},
    "rep": {"w": P(), "odd": P()},
}
SHAPES = {
    "fsdp": {"w": (16, 8)},
    "tp": {"w": (8, 16), "bias": (16,)},
    "rep": {"w": (8, 8), "odd": (3, 5)},
}


def _without_odd(tree: dict) -> dict:
    return {**tree, "rep": {k: v for k, v in tree["rep"].items() if k != "odd"}}


def host_params(seed: int = 0, odd: bool = True) -> dict:
    """The params; `odd=False` leaves out the (3, 5) leaf (the table test, to compile less)."""
    rng = np.random.default_rng(seed)
    params = jax.tree.map(
        lambda shape: jnp.asarray(rng.normal(size=shape), jnp.float32),
        SHAPES,
        is_leaf=lambda x: isinstance(x, tuple),
    )
    return params if odd else _without_odd(params)


def param_shardings(mesh, odd: bool = True) -> dict:
    shardings = jax.tree.map(lambda s: NamedSharding(mesh, s), SPECS)
    return shardings if odd else _without_odd(shardings)


def replicated(mesh, tree):
    return jax.tree.map(lambda _: NamedSharding(mesh, P()), tree)
