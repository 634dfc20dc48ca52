"""Hyperparameter validation: hyperparameters stay scalars (arrays and schedules returning
arrays are refused), moment and accumulator dtypes are floating-point, non-finite rates and
schedule values are refused at construction, and the state layout of every optimizer in the
table never depends on its hyperparameter values."""

from __future__ import annotations

import inspect
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradtx

from .helpers import mixed_params
from .optimizer_table import CASES, OptCase

# --------------------------------------------------------------------------------------------
# array hyperparameters, moment dtypes
# --------------------------------------------------------------------------------------------


def test_an_array_learning_rate_is_rejected_at_construction():
    with pytest.raises(ValueError, match=r"learning_rate must be a scalar .* shape \(3,\)"):
        gradtx.adam(jnp.array([0.1, 0.2, 0.3]))
    with pytest.raises(ValueError, match=r"scale_by_adam: b1 must be a scalar"):
        gradtx.scale_by_adam(b1=np.array([0.9, 0.8]))


def _takes(case: OptCase, name: str) -> bool:
    return name in inspect.signature(case.factory).parameters


LR_CASES = [c for c in CASES if "learning_rate" in c.kwargs and _takes(c, "learning_rate")]


@pytest.mark.parametrize("case", LR_CASES, ids=[c.name for c in LR_CASES])
def test_every_optimizer_rejects_an_array_learning_rate(case):
    with pytest.raises(ValueError, match=r"must be a scalar"):
        case.factory(**{**case.kwargs, "learning_rate": jnp.full((3,), 0.1)})


def test_a_schedule_returning_an_array_is_rejected_when_called():
    tx = gradtx.adam(lambda count: jnp.full((3,), 0.1))
    params = {"w": jnp.zeros(())}
    with pytest.raises(ValueError, match=r"schedule must return a scalar, got shape \(3,\)"):
        tx.update(params, tx.init(params))


def _moment_dtype_factories() -> list[tuple[str, str, Any]]:
    """`(id, dtype argument, factory)` for every public factory with a `mu_dtype` / `nu_dtype`
    argument, in gradtx and in the subpackages with optimizers of their own."""
    import gradtx.contrib
    import gradtx.nnabla
    import gradtx.returnn

    found = []
    for module in (gradtx, gradtx.contrib, gradtx.nnabla, gradtx.returnn):
        prefix = module.__name__.removeprefix("gradtx").lstrip(".")
        for name in sorted(dir(module)):
            factory = getattr(module, name)
            if not inspect.isfunction(factory) or name.startswith("_"):
                continue  # classes, type aliases (Schedule), modules
            parameters = inspect.signature(factory).parameters
            for argument in ("mu_dtype", "nu_dtype"):
                if argument in parameters:
                    qualified = f"{prefix}.{name}" if prefix else name
                    found.append((f"{qualified}-{argument}", argument, factory))
    return found


MOMENT_DTYPE_FACTORIES = _moment_dtype_factories()


def test_the_moment_dtype_scan_sees_the_subpackages():
    ids = {i for i, _, _ in MOMENT_DTYPE_FACTORIES}
    assert {"contrib.adopt-mu_dtype", "contrib.scale_by_acprop-nu_dtype"} <= ids
    assert {"nnabla.adam-mu_dtype", "returnn.nadam-nu_dtype"} <= ids


def _required_kwargs(factory: Any) -> dict[str, Any]:
    parameters = inspect.signature(factory).parameters
    needs_lr = "learning_rate" in parameters and (
        parameters["learning_rate"].default is inspect.Parameter.empty
    )
    return {"learning_rate": 1e-3} if needs_lr else {}


@pytest.mark.parametrize(
    ("argument", "factory"),
    [(a, f) for _, a, f in MOMENT_DTYPE_FACTORIES],
    ids=[i for i, _, _ in MOMENT_DTYPE_FACTORIES],
)
def test_integer_moment_dtypes_are_rejected(argument, factory):
    with pytest.raises(ValueError, match=rf"{argument} must be a floating-point dtype.*got int8"):
        factory(**_required_kwargs(factory), **{argument: jnp.int8})


def test_integer_accumulator_dtypes_are_rejected():
    with pytest.raises(ValueError, match=r"trace: accumulator_dtype must be a floating-point"):
        gradtx.trace(0.9, accumulator_dtype=jnp.int32)
    with pytest.raises(ValueError, match=r"accumulate_k_steps: accumulator_dtype must be"):
        gradtx.accumulate_k_steps(gradtx.sgd(0.1), 2, accumulator_dtype=jnp.int8)
    with pytest.raises(ValueError, match=r"adam: scale_by_adam: nu_dtype must be"):
        gradtx.adam(1e-3, nu_dtype=jnp.uint8)


# --------------------------------------------------------------------------------------------
# non-finite learning rates, weight decays and schedule values
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan])
@pytest.mark.parametrize(
    "make",
    [
        lambda v: gradtx.sgd(v),
        lambda v: gradtx.adam(v),
        lambda v: gradtx.adamw(1e-3, weight_decay=v),
        lambda v: gradtx.weight_decay(v),
        lambda v: gradtx.scale_by_learning_rate(v),
    ],
    ids=["sgd", "adam", "adamw-weight_decay", "weight_decay", "scale_by_learning_rate"],
)
def test_a_non_finite_learning_rate_or_weight_decay_is_refused(make, value):
    with pytest.raises(gradtx.HyperparameterError, match="finite"):
        make(value)


@pytest.mark.parametrize(
    ("make", "name"),
    [
        (lambda: gradtx.cosine_decay_schedule(math.nan, 10), "init_value"),
        (lambda: gradtx.schedules.linear(0.1, math.inf, 10), "end_value"),
        (lambda: gradtx.exponential_decay(math.inf, 10, 0.5), "init_value"),
        (lambda: gradtx.warmup_cosine_decay_schedule(0.0, math.nan, 5, 10), "peak_value"),
        (lambda: gradtx.schedules.constant(-math.inf), "value"),
    ],
)
def test_a_non_finite_schedule_value_is_refused_at_construction(make, name):
    with pytest.raises(gradtx.HyperparameterError, match=f"{name} must be finite"):
        make()


def test_finite_schedules_are_still_built():
    schedule = gradtx.cosine_decay_schedule(0.1, 10)
    assert float(schedule(0)) == pytest.approx(0.1)


# --------------------------------------------------------------------------------------------
# the state layout depends on options, never on hyperparameter values
# --------------------------------------------------------------------------------------------

# A float learning rate that is not a step size to schedule: the case's factory refuses a
# schedule (checked below, so that an entry here cannot go stale).
NO_LEARNING_RATE_SCHEDULE = {"rprop": "learning_rate is Rprop's initial step size"}


def _other_values(value: Any) -> list[Any]:
    """Other values of the same kind, in order of preference (the first one that the factory
    accepts is used): a nonzero float halved or made 1.5 times larger (a value in [0, 1) or one
    bounded below), 0.0 made 1e-3, an int incremented, the floats of a tuple halved, a schedule
    halved; none for anything else (flags, strings, None, transformations)."""
    if isinstance(value, bool) or value is None:
        return []
    if isinstance(value, float):
        return [value * 0.5, value * 1.5] if value != 0.0 else [1e-3]
    if isinstance(value, int):
        return [value + 1]
    if isinstance(value, tuple) and any(
        isinstance(v, float) and not isinstance(v, bool) for v in value
    ):
        return [tuple(v * 0.5 if isinstance(v, float) else v for v in value)]
    if callable(value) and not isinstance(value, type | gradtx.GradientTransformation):
        return [lambda count: 0.5 * value(count)]
    return []


def _numeric_variants(case: OptCase):
    """`(what, [kwargs, ...])`: for each numeric hyperparameter of `case` (given in the case, or
    a default of the factory), `case.kwargs` with it changed to each of `_other_values`; and a
    float learning rate replaced by a schedule."""
    defaults = {
        name: p.default
        for name, p in inspect.signature(case.factory).parameters.items()
        if p.default is not inspect.Parameter.empty
    }
    for key, value in {**defaults, **case.kwargs}.items():
        if "mask" in key or "dimension_numbers" in key:  # a selection, not a number
            continue
        others = _other_values(value)
        if others:
            yield key, [{**case.kwargs, key: other} for other in others]
    lr = case.kwargs.get("learning_rate", defaults.get("learning_rate"))
    if isinstance(lr, float) and case.name not in NO_LEARNING_RATE_SCHEDULE:
        schedule = lambda t: lr / (1 + t)
        # a schedule carries its own warm-up: schedule_free refuses one with `warmup_steps`
        warmup = {"warmup_steps": None} if "warmup_steps" in case.kwargs else {}
        yield "learning_rate=schedule", [{**case.kwargs, "learning_rate": schedule, **warmup}]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_state_layout_does_not_depend_on_hyperparameter_values(case):
    params = mixed_params()
    base = jax.tree.structure(jax.eval_shape(case.make().init, params))
    variants = list(_numeric_variants(case))
    assert variants, f"{case.name}: no numeric hyperparameter to vary"
    for what, candidates in variants:
        errors = []
        for kwargs in candidates:
            try:
                tx = case.factory(**kwargs)
            except ValueError as error:  # e.g. halving a value bounded below: try the next one
                errors.append(str(error))
                continue
            layout = jax.tree.structure(jax.eval_shape(tx.init, params))
            assert layout == base, f"{case.name}: the state layout changes with {what}"
            break
        else:
            pytest.fail(f"{case.name}: no other valid value of {what} was accepted: {errors}")


@pytest.mark.parametrize("name", sorted(NO_LEARNING_RATE_SCHEDULE))
def test_the_cases_without_a_learning_rate_schedule_do_refuse_one(name):
    (case,) = [c for c in CASES if c.name == name]
    with pytest.raises(ValueError, match=r"learning_rate .* not a schedule"):
        case.factory(**{**case.kwargs, "learning_rate": lambda t: 0.1})
