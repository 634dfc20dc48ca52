"""Matrix optimizers on FSDP-sharded params (8 host devices, rows sharded over one mesh axis, the
state built in its derived shardings by `init_sharded`): Muon's family, SOAP, Shampoo and Kron
gather each matrix once per step and run their iterations, roots and refreshes locally
(collective bytes read from the compiled HLO, refresh branches included, at most the parameter
bytes; 14x before for Muon, 26x / 7.5x / 11.5x for SOAP / Shampoo / Kron), and 20 sharded steps
(two refreshes for SOAP and Shampoo) equal 20 single-device steps."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

import gradtx
from benchmarks.matrix import training_step
from benchmarks.zero1 import collectives_with_bytes

STEPS = 20
SHAPES = {"w": (64, 64), "v": (32, 64), "b": (64,)}  # two matrices (rows sharded), a vector


def _setup():
    mesh = jax.make_mesh((8,), ("fsdp",), axis_types=(AxisType.Auto,))
    rows = {"w": P("fsdp", None), "v": P("fsdp", None), "b": P("fsdp")}
    shardings = {k: NamedSharding(mesh, spec) for k, spec in rows.items()}
    rng = np.random.default_rng(0)
    host = {k: rng.normal(size=s).astype(np.float32) for k, s in SHAPES.items()}
    grads = {k: rng.normal(size=(STEPS, *s)).astype(np.float32) for k, s in SHAPES.items()}
    return host, grads, shardings


def _run(tx):
    def run(params, state, grads):
        def body(carry, g):
            params, state = carry
            updates, state = tx.update(g, state, params)
            return (gradtx.apply_updates(params, updates), state), updates

        return jax.lax.scan(body, (params, state), grads)

    return jax.jit(run)


@pytest.mark.parametrize("name", ["muon", "normuon", "scion", "dion", "soap", "shampoo", "kron"])
def test_one_gather_per_matrix_and_equal_to_one_device(name):
    host, grads, shardings = _setup()
    tx = getattr(gradtx.contrib, name)(1e-2)
    params = jax.device_put(host, shardings)
    state = gradtx.init_sharded(tx, params)
    matrices = [s for s in SHAPES.values() if len(s) == 2]
    # each matrix once, plus per-row / per-column statistics (norms, NorMuon's second moment,
    # Dion's column norms): at most four float32 vectors of rows + columns per matrix
    bound = sum(4 * m * n for m, n in matrices) + sum(4 * 4 * (m + n) for m, n in matrices)
    # the factors each device computes whole are replicated (no gather), as are SOAP's rotated
    # moments and the moments of a matrix Shampoo preconditions as one block (its vector keeps
    # them sharded); Kron's momentum stays sharded
    whole = {
        "dion": ("q",),
        "soap": ("soap/mu", "soap/nu", "soap/bases"),
        "shampoo": ("mu/w", "mu/v", "roots"),
    }
    whole["kron"] = ("qs",)
    for field in whole.get(name, ()):
        leaves = jax.tree.leaves(gradtx.tree.get(state, field))
        assert leaves and all(x.sharding.is_fully_replicated for x in leaves), field
    if name == "kron":
        assert not gradtx.tree.get(state, "mu")["w"].sharding.is_fully_replicated
    step = jax.jit(tx.update).lower(params, state, params).compile()
    moved = collectives_with_bytes(step.as_text())
    assert sum(c["bytes"] for c in moved.values()) <= bound, moved

    run = _run(tx)
    g_sharded = {
        k: jax.device_put(v, NamedSharding(shardings[k].mesh, P(None, *shardings[k].spec)))
        for k, v in grads.items()
    }
    (p_sharded, _), u_sharded = run(params, state, g_sharded)
    (p_single, _), u_single = run(host, tx.init(host), grads)
    for k in SHAPES:
        np.testing.assert_allclose(u_sharded[k], u_single[k], atol=1e-6, rtol=0, err_msg=k)
        np.testing.assert_allclose(p_sharded[k], p_single[k], atol=1e-6, rtol=0, err_msg=k)
        assert not np.allclose(p_single[k], host[k])  # it trained


@pytest.mark.parametrize("name", ["muon", "dion", "soap", "shampoo", "kron"])
def test_zero1_moves_each_matrix_at_most_once(name):
    # ZeRO-1: params replicated, the state sharded over the data axis by state_sharding. A
    # field the step computes whole (SOAP's, Shampoo's one-block, Kron's and Dion's factors) is
    # left replicated, else every step would gather it: SOAP moved 25x, Shampoo 8x, Kron 12.5x
    mesh = jax.make_mesh((8,), ("data",), axis_types=(AxisType.Auto,))
    host, _, _ = _setup()
    params = jax.device_put(host, NamedSharding(mesh, P()))
    tx = getattr(gradtx.contrib, name)(1e-2)
    state = jax.device_put(tx.init(params), gradtx.state_sharding(tx, params, zero_axis="data"))
    assert any(not x.sharding.is_fully_replicated for x in jax.tree.leaves(state))  # ZeRO-1
    _, moved = training_step(tx, params, state, params)
    param_bytes = sum(4 * int(np.prod(s)) for s in SHAPES.values())
    assert sum(c["bytes"] for c in moved.values()) <= param_bytes + 4 * 4 * 2 * 64, moved


def test_owner_computes_splits_a_stack_of_layers_over_the_devices():
    """A stack of 16 same-shape layers (rows sharded): with distributed="owner" each device
    iterates on the 2 matrices it owns: a training step (update and apply, params and state in
    and out in their shardings) moves the momentum-blended stack to the owners and the update
    back, two all-to-alls of 1/8 of the parameter bytes each (0.25, against the replicated
    layout's one gather, 1.0), with at most 0.3 of the replicated layout's FLOPs per device, and
    equals one device."""
    mesh = jax.make_mesh((8,), ("fsdp",), axis_types=(AxisType.Auto,))
    shape = (16, 64, 64)
    rows = NamedSharding(mesh, P(None, "fsdp", None))
    rng = np.random.default_rng(1)
    host = {"stack": rng.normal(size=shape).astype(np.float32)}
    grads = {"stack": rng.normal(size=(STEPS, *shape)).astype(np.float32)}
    dims = gradtx.contrib.MuonDimensionNumbers(reduction_axis=1, output_axis=2)
    params = jax.device_put(host, {"stack": rows})
    compiled, results = {}, {}
    for layout in ("replicated", "owner"):
        tx = gradtx.contrib.muon(1e-2, muon_weight_dimension_numbers=dims, distributed=layout)
        state = gradtx.init_sharded(tx, params)
        where = jax.tree.map(lambda x: x.sharding, (params, state))

        def step(p, s, g, tx=tx):
            u, s = tx.update(g, s, p)
            return gradtx.apply_updates(p, u), s

        train = jax.jit(step, in_shardings=(*where, where[0]), out_shardings=where)
        compiled[layout] = train.lower(params, state, params).compile()
        g = {"stack": jax.device_put(grads["stack"], NamedSharding(mesh, P(None, None, "fsdp")))}
        results[layout] = _run(tx)(params, state, g)
    owner = collectives_with_bytes(compiled["owner"].as_text())
    assert set(owner) == {"all-to-all"}, owner
    assert sum(c["bytes"] for c in owner.values()) <= 0.25 * 4 * np.prod(shape), owner
    replicated = collectives_with_bytes(compiled["replicated"].as_text())
    assert sum(c["bytes"] for c in replicated.values()) <= 1.0 * 4 * np.prod(shape)

    def flops(c):
        cost = c.cost_analysis()
        return (cost[0] if isinstance(cost, list) else cost)["flops"]

    assert flops(compiled["owner"]) <= 0.3 * flops(compiled["replicated"])
    tx = gradtx.contrib.muon(1e-2, muon_weight_dimension_numbers=dims)
    (single, _), single_u = _run(tx)(host, tx.init(host), grads)
    for layout, ((p, _), u) in results.items():
        np.testing.assert_allclose(u["stack"], single_u["stack"], atol=1e-6, err_msg=layout)
        np.testing.assert_allclose(p["stack"], single["stack"], atol=1e-6, err_msg=layout)


def test_dion_on_a_sharded_stack_of_layers():
    """Dion's QR of a stack sharded along its rows deadlocked XLA:CPU's collectives; it runs on
    the gathered B Q and equals one device."""
    mesh = jax.make_mesh((8,), ("fsdp",), axis_types=(AxisType.Auto,))
    shardings = {
        "w": NamedSharding(mesh, P("fsdp", None)),
        "stack": NamedSharding(mesh, P(None, "fsdp", None)),
    }
    rng = np.random.default_rng(2)
    host = {
        k: rng.normal(size=s).astype(np.float32)
        for k, s in (("w", (64, 64)), ("stack", (4, 64, 64)))
    }
    grads = {k: rng.normal(size=v.shape).astype(np.float32) for k, v in host.items()}
    D = gradtx.contrib.DionDimensionNumbers
    tx = gradtx.contrib.dion(1e-2, weight_dimension_numbers={"w": D(), "stack": D(1, 2)})
    params = jax.device_put(host, shardings)
    step = jax.jit(tx.update)
    got, _ = step(jax.device_put(grads, shardings), gradtx.init_sharded(tx, params), params)
    want, _ = step(grads, tx.init(host), host)
    for k in host:
        np.testing.assert_allclose(got[k], want[k], atol=1e-6, err_msg=k)
