"""Generic checks that every optimizer in the shared table must pass.

They draw on the compilation tier (tests/compiled.py): per case one training trajectory of
`gradtx.jit_step`, one injected trajectory and one convergence program, plus one program per dtype
for the whole table; the checks that need no numbers trace instead of compiling.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradtx

from . import compiled, golden
from .helpers import (
    assert_trees_bitwise_equal,
    assert_trees_close,
    grad_sequence,
    mixed_params,
    state_dtypes,
)
from .optimizer_table import CASES, OptCase

pytestmark = pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])

VALUE = jnp.float32(1.0)


def test_converges_on_quadratic(case: OptCase):
    result = compiled.numerics(case.name)
    start, final = result["quadratic_start"], result["quadratic"]
    assert np.isfinite(final)
    assert final < case.quadratic_tol * start, (start, final)


def test_converges_on_rosenbrock(case: OptCase):
    if case.rosenbrock_tol is None:
        pytest.skip(case.rosenbrock_skip)
    final = compiled.numerics(case.name)["rosenbrock"]  # 4.0 at the start, (-1, 1)
    assert np.isfinite(final)
    assert final < case.rosenbrock_tol, final


# float32 is checked by the trajectory (test_state_is_stable_through_scan and the resume check).
@pytest.mark.parametrize("dtype", compiled.LOW_PRECISION)
def test_dtypes_are_preserved(case: OptCase, dtype):
    if not case.low_precision:
        pytest.skip(f"{case.name} is documented as float32-only")
    run = compiled.numerics(case.name)["dtypes"][dtype]
    if run.error is not None:
        raise run.error
    assert run.updates is not None and run.states is not None and run.params is not None
    init_dtypes = state_dtypes(run.init_state)
    params = mixed_params(dtype=jnp.dtype(dtype))
    for i, (updates, state, new_params) in enumerate(
        zip(run.updates, run.states, run.params, strict=True)
    ):
        for u, p in zip(jax.tree.leaves(updates), jax.tree.leaves(params), strict=True):
            assert u.dtype == p.dtype, (i, u.dtype, p.dtype)
            assert np.all(np.isfinite(u.astype(np.float32))), f"step {i + 1}"
        assert state_dtypes(state) == init_dtypes, f"step {i + 1}"
        assert all(x.dtype == jnp.dtype(dtype) for x in jax.tree.leaves(new_params))


def test_init_from_shape_dtype_struct(case: OptCase):
    tx = case.make()
    params = mixed_params()
    structs = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), params)
    expected = tx.init(params)
    abstract = jax.eval_shape(tx.init, structs)
    direct = tx.init(structs)
    for got in (abstract, direct):
        assert jax.tree.structure(got) == jax.tree.structure(expected)
        for a, e in zip(jax.tree.leaves(got), jax.tree.leaves(expected), strict=True):
            assert (a.shape, a.dtype) == (e.shape, e.dtype)


def test_no_retrace_on_second_call(case: OptCase):
    # STEPS calls of one jitted step, each with new gradients, params, state and value
    assert compiled.trajectory(case.name).cache_size() == 1


def test_state_is_stable_through_scan(case: OptCase):
    tx = case.make()
    params = mixed_params()
    grads = jax.tree.map(lambda *xs: jnp.stack(xs), *grad_sequence(params, 4))

    def body(carry, g):
        p, s = carry
        updates, s = tx.update(g, s, p, value=VALUE)
        return (gradtx.apply_updates(p, updates), s), updates

    # tracing the scan requires the state's structure and dtypes not to change
    (p, s), updates = jax.eval_shape(
        lambda p, gs: jax.lax.scan(body, (p, tx.init(p)), gs), params, grads
    )
    assert jax.tree.structure(s) == jax.tree.structure(tx.init(params))
    for u, x in zip(jax.tree.leaves(updates), jax.tree.leaves(params), strict=True):
        assert u.dtype == x.dtype, (u.dtype, x.dtype)  # float32 updates for float32 params
        assert u.shape == (4, *x.shape)
    # the numbers: every step of the compiled trajectory keeps the params finite
    for i, p in enumerate(compiled.trajectory(case.name).params):
        assert all(np.all(np.isfinite(x)) for x in jax.tree.leaves(p)), f"after step {i}"


def test_accepts_and_ignores_unknown_extra_args(case: OptCase):
    tx = case.make()
    params = mixed_params()
    g = grad_sequence(params, 1)[0]
    state = tx.init(params)
    plain = jax.make_jaxpr(functools.partial(tx.update, value=VALUE))(g, state, params)
    extra = jax.make_jaxpr(functools.partial(tx.update, value=VALUE, some_unused_arg=3))(
        g, state, params
    )
    assert str(extra) == str(plain)


def test_jit_step_equals_plain_step(case: OptCase):
    # The donating `jit_step` lowers to the plain jitted step, donation aside; the trajectory
    # runs `jit_step` itself for every case (and tests/test_step.py runs both for real).
    tx = case.make()
    params = mixed_params()
    state = tx.init(params)
    g = grad_sequence(params, 1)[0]
    donating = gradtx.jit_step(tx).lower(params, state, g, value=VALUE).as_text()
    plain = compiled.plain_step(tx).lower(params, state, g, value=VALUE).as_text()
    assert compiled.without_donation(donating) == compiled.without_donation(plain)
    assert donating != plain, "no buffer is donated"


def test_init_state_shares_no_buffer_with_params_or_itself(case: OptCase):
    # A state leaf that is the same array as another state leaf (or as a parameter) cannot be
    # donated to a jitted step. Adafactor's 1-element placeholders once were.
    params = mixed_params()
    state = case.make().init(params)
    owners: dict[int, str] = {}
    for name, tree in (("params", params), ("state", state)):
        for path, leaf in zip(gradtx.tree.paths(tree), jax.tree.leaves(tree), strict=True):
            if isinstance(leaf, jax.Array):
                assert id(leaf) not in owners, f"{owners.get(id(leaf))} is {name}/{path}"
                owners[id(leaf)] = f"{name}/{path}"


def test_resume_is_bit_identical_for_every_table_optimizer(case: OptCase, tmp_path):
    # MIDPOINT steps, save, load into a fresh template, continue with the same compiled step:
    # bit-identical to the uninterrupted trajectory, and nothing recompiles.
    run = compiled.trajectory(case.name)
    path = tmp_path / "state.safetensors"
    gradtx.save(path, compiled.device(run.states[compiled.MIDPOINT]))
    params0, grads = compiled.canonical()
    loaded = gradtx.load(path, case.make().init(compiled.device(params0)))
    assert_trees_bitwise_equal(loaded, run.states[compiled.MIDPOINT], "loaded state")
    p, s = compiled.device(run.params[compiled.MIDPOINT]), loaded
    for i in range(compiled.MIDPOINT, compiled.STEPS):
        p, s = run.run(p, s, compiled.device(grads[i]), value=run.values[i])
    assert_trees_bitwise_equal(p, run.params[-1], "params after resuming")
    assert_trees_bitwise_equal(s, run.states[-1], "state after resuming")
    assert run.cache_size() == 1, "the loaded state recompiled the step"


def test_inject_hyperparams_equals_the_plain_optimizer(case: OptCase):
    # Stored hyperparameters are float32, while the plain optimizer may fold Python-float
    # expressions such as 1 - b2 in double precision (1.3e-5 relative for b2 = 0.999), hence the
    # absolute part of the tolerance.
    params, state = compiled.injected(case.name)
    ref = compiled.trajectory(case.name).params
    for i, (p, r) in enumerate(zip(params, ref, strict=True)):
        assert_trees_close(p, r, 1e-6, 1e-6, msg=f"{case.name} params after step {i}")
    for name, value in state.hyperparams.items():
        assert value.dtype == jnp.float32, (name, value.dtype)


@functools.cache
def _golden() -> golden.Record:
    return golden.Record()


def test_trajectory_reproduces_the_golden_record(case: OptCase):
    # Every step's updates and state, as recorded before the rule mechanism was rewritten
    # (tests/golden.py): byte for byte under the recorded compiler, else to float32 rounding.
    record = _golden()
    run = compiled.trajectory(case.name)
    exact = record.exact()
    allowed = 1 if exact and case.name in golden.ULP_ALLOWED else 0
    for kind, got in (("updates", run.updates), ("states", run.states)):
        diffs = golden.differences(case.name, kind, got, record, exact=exact)
        beyond = [d for d in diffs if d[2] > allowed]
        assert not beyond, (
            f"{case.name}: {kind} differ from the golden record "
            f"({'exact' if exact else 'float32 rounding'}; step, leaf, ulps, |difference|): "
            f"{beyond[:5]}"
        )
