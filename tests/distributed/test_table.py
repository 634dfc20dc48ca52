"""Sharded `jit` (FSDP, tensor parallel and ZeRO-1 in one params tree) equals the unsharded run
for every optimizer in the shared table, and the state keeps its derived shardings."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import gradtx

from ..helpers import assert_trees_close, random_like
from ..optimizer_table import CASES, OptCase
from ._meshes import host_params, mesh_4x2, param_shardings

STEPS = 5


def assert_shardings(state, expected, when: str) -> None:
    paths = gradtx.tree.paths(state)
    for path, leaf, sharding in zip(
        paths, jax.tree.leaves(state), jax.tree.leaves(expected), strict=True
    ):
        assert leaf.sharding.is_equivalent_to(sharding, leaf.ndim), (
            f"{when}: {path} is {leaf.sharding}, derived {sharding}"
        )


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_sharded_jit_equals_unsharded(case: OptCase):
    mesh = mesh_4x2()
    tx = case.make()
    params = host_params()
    psh = param_shardings(mesh)
    rep = NamedSharding(mesh, P())
    p = jax.device_put(params, psh)
    derived = gradtx.state_sharding(tx, p, zero_axis="data", warn=False)
    state = gradtx.init_sharded(tx, p, zero_axis="data", warn=False)
    assert_shardings(state, derived, "after init")
    # the reference: the same computation replicated on every device (no collectives)
    p_ref = jax.device_put(params, rep)
    s_ref = jax.device_put(tx.init(params), rep)
    value = jnp.float32(1.0)

    def step(p, s, g, p_ref, s_ref, g_ref):
        u, s = tx.update(g, s, p, value=value)
        u_ref, s_ref = tx.update(g_ref, s_ref, p_ref, value=value)
        return gradtx.apply_updates(p, u), s, u, gradtx.apply_updates(p_ref, u_ref), s_ref, u_ref

    # The state's out shardings are left to XLA's propagation: they must come out as derived.
    jitted = jax.jit(
        step,
        in_shardings=(psh, derived, psh, rep, rep, rep),
        out_shardings=(psh, None, None, rep, rep, rep),
    )
    rng = np.random.default_rng(1)
    for i in range(STEPS):
        g = random_like(params, rng)
        p, state, u, p_ref, s_ref, u_ref = jitted(p, state, g, p_ref, s_ref, g)
        assert_shardings(state, derived, f"after update {i + 1}")
        assert_trees_close(u, u_ref, rtol=1e-6, atol=1e-6, msg=f"{case.name} update {i + 1}")
    assert_trees_close(p, p_ref, rtol=1e-6, atol=1e-6, msg=f"{case.name} params")
    assert_trees_close(state, s_ref, rtol=1e-6, atol=1e-6, msg=f"{case.name} state")
