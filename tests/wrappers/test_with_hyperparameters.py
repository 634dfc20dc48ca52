"""Hyperparameters are data (issue 49): a jitted step that takes `hyperparameters(tx)` as an
argument and rebuilds the optimizer with `with_hyperparameters` compiles once, for every
optimizer of the table and every public schedule factory.

- Every optimizer: the step runs with two other values of each hyperparameter (floats scaled by
  a few percent, integers + 1 and + 2) and with all of them changed at once, and compiles no
  second time; at the original values it computes what the optimizer computes (its trajectory's
  first step, tests/compiled.py: shared with tests/test_generic.py, so nothing more compiles).
- Every schedule: the same, and at every value the traced schedule equals the schedule built
  with that value (the plain one, validated: the traced paths of the step counts, the
  boundaries and the degenerate cases are checked against it).
"""

from __future__ import annotations

import inspect
import math
import warnings
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gradtx import schedules as S
from gradtx._base._recipe import recipe_of
from gradtx.wrappers._hyperparameters import hyperparameters, with_hyperparameters

from .. import compiled
from ..helpers import assert_trees_close
from ..optimizer_table import CASES, OptCase
from ..schedules.common import boundary_steps


def _varied(value: Any, k: int) -> Any:
    """The `k`-th other value (k = 1, 2) of a hyperparameter, in range where that is plain: an
    integer + k; a float x 0.97 (k = 1) or x 1.03 (k = 2), where a value in (0, 1] (a decay)
    moves towards 1 (or down from 1) instead of past it and 0 becomes 0.01 k; a non-finite
    value stays."""
    if isinstance(value, int | np.integer):
        return value + k
    if not math.isfinite(float(value)):
        return value
    if value == 0:
        return type(value)(0.01 * k)
    if k == 2 and 0 < value <= 1:
        return type(value)(1 - (1 - value) * 0.97 if value < 1 else 0.94)
    return type(value)(value * (0.97 if k == 1 else 1.03))


def _variants(hp: Any) -> list[Any]:
    """`hp` with one leaf at each of its other values, then with every leaf changed."""
    leaves, treedef = jax.tree.flatten(hp)
    out = []
    for i, leaf in enumerate(leaves):
        for k in (1, 2):
            out.append(treedef.unflatten([*leaves[:i], _varied(leaf, k), *leaves[i + 1 :]]))
    out.append(treedef.unflatten([_varied(leaf, 1) for leaf in leaves]))
    return out


def _compiled(jitted: Any) -> int:
    """How many programs a `jax.jit` function holds (one per signature it compiled)."""
    return jitted._cache_size()


def _is_float(value: Any) -> bool:
    return isinstance(value, float | np.floating) or (
        isinstance(value, np.ndarray | jax.Array) and jnp.issubdtype(value.dtype, jnp.floating)
    )


# Cases whose numbers do not change their second step at a few percent off (so the check that
# the step reads its hyperparameters cannot see them).
INSENSITIVE: dict[str, str] = {
    "fromage": "its one number, min_norm, floors norms far below the tree's"
}


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_a_new_value_of_any_hyperparameter_reuses_the_compiled_step(case: OptCase):
    tx = case.make()
    hp = hyperparameters(tx)
    numbers = [v for v in case.kwargs.values() if _is_float(v) or type(v) is int]
    assert jax.tree.leaves(hp) or not numbers, f"{case.name}: no hyperparameters"
    if hasattr(case.factory, "__wrapped__"):  # a public factory: its float arguments, by name
        names = inspect.signature(case.factory).parameters
        for name, value in case.kwargs.items():
            if name in names and _is_float(value):
                assert hp.get(name) == value, (name, hp.get(name), value)

    run = compiled.trajectory(case.name)
    params0, grads = compiled.canonical()
    params = compiled.device(params0)

    @jax.jit
    def step(params, state, grads, hp, value):
        return with_hyperparameters(tx, hp).update(grads, state, params, value=value)

    first = step(params, tx.init(params), compiled.device(grads[0]), hp, run.values[0])
    # The trajectory (the plain optimizer) folds Python-float expressions such as 1 - b2 in
    # double precision, where the traced values are float32: 1.3e-5 relative for b2 = 0.999
    # (its moment), 6.9e-6 after Adam's square root, up to 6e-5 measured (madgrad). With
    # numbers exact in float32 the two agree bit for bit (laprop_bf16_moments).
    assert_trees_close(first, (run.updates[0], run.states[1]), 1e-4, 1e-6, case.name)

    # The other values run the second step (the first reads only some numbers: ADOPT's first
    # step only measures, rprop's signs start to agree at the second, ...).
    inputs = [compiled.device(x) for x in (run.params[1], run.states[1], grads[1])]
    second = step(*inputs, hp, run.values[1])
    for other in _variants(hp):
        changed = step(*inputs, other, run.values[1])
    assert _compiled(step) == 1, f"{case.name}: a new hyperparameter value recompiled"
    if jax.tree.leaves(hp) and case.name not in INSENSITIVE:
        same = jax.tree.map(
            lambda a, b: np.array_equal(np.asarray(a), np.asarray(b)), changed, second
        )
        assert not all(jax.tree.leaves(same)), f"{case.name}: other numbers, the same step"


# --------------------------------------------------------------------------------------------
# schedules
# --------------------------------------------------------------------------------------------

# Every public schedule factory with representative arguments (each step count and boundary
# given, so that each is varied), then arguments whose traced values reach the rules a concrete
# value decides at construction: Optax's constant fallbacks, a warm-up of 0 steps, nnabla's
# loader rules, sgdr's cycle growth.
SCHEDULES: list[tuple[str, Callable[[], Any], list[dict[str, Any]]]] = [
    ("constant", lambda: S.constant(0.3), []),
    ("cosine_decay", lambda: S.cosine_decay(0.5, 100, alpha=0.1, exponent=1.5), []),
    ("cosine_onecycle_schedule", lambda: S.cosine_onecycle_schedule(100, 1.0), []),
    ("cyclic", lambda: S.cyclic(0.1, 1.0, 20, 30, mode="triangular2"), []),
    ("cyclic_exp_range", lambda: S.cyclic(0.1, 1.0, 20, mode="exp_range", gamma=0.99), []),
    (
        "exponential_decay",
        lambda: S.exponential_decay(1.0, 20, 0.5, 10, staircase=True, end_value=0.1),
        [{"transition_steps": 0}, {"decay_rate": 0.0}, {"transition_begin": -5}],
    ),
    ("inverse_sqrt", lambda: S.inverse_sqrt(1.0, 20), []),
    (
        "join",
        lambda: S.join(
            [S.constant(0.1), S.linear(0.1, 1.0, 30), S.cosine_decay(1.0, 50)], [20, 50]
        ),
        [{"boundaries": [20, 20]}],
    ),
    ("linear", lambda: S.linear(0.0, 1.0, 50, 10), [{"transition_steps": -1}]),
    ("linear_onecycle_schedule", lambda: S.linear_onecycle_schedule(100, 1.0), []),
    ("lr_decay", lambda: S.lr_decay(1.0, 0.9, 10), [{"lr_decay": 0.0}]),
    ("lr_decay_cpp_trainer", lambda: S.lr_decay(1.0, 0.9, 10, cpp_trainer=True), []),
    ("multistep", lambda: S.multistep(1.0, 0.5, [20, 50, 80]), []),
    ("nnabla_cosine", lambda: S.nnabla_cosine(1.0, 100, comm_size=2), []),
    (
        "nnabla_exponential",
        lambda: S.nnabla_exponential(1.0, 0.9, 10),
        [{"iter_interval": 1}, {"comm_size": 20}],
    ),
    (
        "nnabla_linear_warmup",
        lambda: S.nnabla_linear_warmup(S.nnabla_cosine(1.0, 100), 20),
        [{"warmup_iter": 0}, {"comm_size": 30}],
    ),
    (
        "nnabla_polynomial",
        lambda: S.nnabla_polynomial(1.0, 100, 2.0),
        [{"power": 3.0}, {"power": 0.5}, {"power": 0.0}],
    ),
    (
        "nnabla_solver_schedule",
        lambda: S.nnabla_solver_schedule(
            1.0,
            lr_scheduler_type="Polynomial",
            polynomial_scheduler_param={"max_iter": 100, "power": 2.0},
            lr_warmup_scheduler_type="Linear",
            linear_warmup_scheduler_param={"warmup_iter": 20},
        ),
        [{"polynomial_scheduler_param": {"power": 0.0}}],
    ),
    (
        "nnabla_solver_schedule_legacy",
        lambda: S.nnabla_solver_schedule(1.0, lr_decay=0.5, lr_decay_interval=30),
        [{"lr_decay": 0.0, "lr_decay_interval": 0}],
    ),
    ("nnabla_step", lambda: S.nnabla_step(1.0, 0.5, [50, 20], comm_size=2), []),
    ("one_cycle", lambda: S.one_cycle(100, 1.0, anneal="linear", pct_final=0.9), []),
    ("piecewise_constant", lambda: S.piecewise_constant(1.0, {20: 0.5, 50: 0.1}), []),
    (
        "piecewise_interpolate",
        lambda: S.piecewise_interpolate("cosine", 1.0, {20: 0.5, 50: 0.1}),
        [],
    ),
    ("polynomial", lambda: S.polynomial(1.0, 0.1, 2.0, 80, 10), [{"transition_steps": 0}]),
    (
        "sgdr",
        lambda: S.sgdr(1.0, 20, 3, cycle_mult=2, peak_decay=0.8, end_value=0.01),
        [{"cycle_mult": 1}, {"num_cycles": 40}, {"cycle_steps": 2**30, "cycle_mult": 3}],
    ),
    (
        "sgdr_schedule",
        lambda: S.sgdr_schedule(
            [
                {"init_value": 0.0, "peak_value": 1.0, "warmup_steps": 5, "decay_steps": 30},
                {"init_value": 0.0, "peak_value": 0.5, "warmup_steps": 0, "decay_steps": 40},
            ]
        ),
        [],
    ),
    ("warmup", lambda: S.warmup(S.cosine_decay(1.0, 80), 20, 0.1), [{"warmup_steps": 0}]),
    (
        "warmup_nnabla",
        lambda: S.warmup(S.cosine_decay(1.0, 80), 20, mode="nnabla"),
        [{"warmup_steps": 0}],
    ),
    ("warmup_constant", lambda: S.warmup_constant(0.0, 1.0, 20), [{"warmup_steps": 0}]),
    (
        "warmup_cosine_decay",
        lambda: S.warmup_cosine_decay(0.0, 1.0, 20, 100, end_value=0.05),
        [{"warmup_steps": 0}],
    ),
    (
        "warmup_exponential_decay",
        lambda: S.warmup_exponential_decay(0.0, 1.0, 20, 10, 0.5, 5, True, 0.1),
        [{"warmup_steps": 0}],
    ),
]

STEPS = boundary_steps(5, 10, 20, 25, 30, 50, 60, 70, 100, high=400)


def _public_schedule_factories() -> set[str]:
    names = set()
    for name in S.__all__:
        obj = getattr(S, name)
        if inspect.isfunction(obj) and "Schedule" in str(inspect.signature(obj).return_annotation):
            names.add(obj.__name__)
    return names


def _factory(schedule: Any) -> str:
    recipe = recipe_of(schedule)
    assert recipe is not None, f"{schedule!r} carries no record of its factory"
    return recipe.factory.__name__


def test_the_schedule_table_covers_every_public_schedule_factory():
    covered = {_factory(make()) for _, make, _ in SCHEDULES}
    missing = _public_schedule_factories() - covered
    assert not missing, f"add these schedule factories to SCHEDULES: {sorted(missing)}"


def _merged(hp: Any, overrides: dict[str, Any]) -> Any:
    """`hp` with `overrides` (nested dicts merged) in place of its values."""
    out = dict(hp)
    for key, value in overrides.items():
        out[key] = _merged(hp[key], value) if isinstance(value, dict) else value
    return out


@pytest.mark.parametrize(
    ("make", "overrides"), [s[1:] for s in SCHEDULES], ids=[s[0] for s in SCHEDULES]
)
def test_a_traced_schedule_compiles_once_and_equals_the_plain_one(make, overrides):
    schedule = make()
    hp = hyperparameters(schedule)
    steps = jnp.asarray(STEPS, jnp.int32)
    evaluate = jax.jit(lambda hp, t: with_hyperparameters(schedule, hp)(t))
    np.testing.assert_allclose(evaluate(hp, steps), schedule(steps), rtol=1e-6, atol=1e-7)
    for other in [*_variants(hp), *(_merged(hp, o) for o in overrides)]:
        traced = evaluate(other, steps)
        with warnings.catch_warnings():  # Optax's fallbacks warn (tests/schedules/)
            warnings.simplefilter("ignore", UserWarning)
            try:
                plain = with_hyperparameters(schedule, other)  # built with the concrete values
            except ValueError:  # refused (e.g. comm_size > 1 with cpp_trainer): traced, unused
                continue
        np.testing.assert_allclose(traced, plain(steps), rtol=2e-6, atol=1e-7, err_msg=str(other))
    assert _compiled(evaluate) == 1
