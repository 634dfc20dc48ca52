"""`from_nnabla`: every solver type and scheduler type of nnabla's loader (the seed
`_create_optimizer`), against nnabla's formulas and the matching gradtx aliases."""

from __future__ import annotations

import math

import jax
import numpy as np
import pytest

import gradtx
from gradtx import config as gc
from gradtx.nnabla import from_nnabla

from .common import run_pair, small_params
from .shared import config_error

STEPS = np.array([0, 1, 2, 3, 7, 8, 9, 10, 24, 25, 39, 40, 41, 63, 64, 99, 100, 150, 199])


# nnabla's schedulers (python/src/nnabla/utils/learning_rate_scheduler.py), written from the
# reference sheet, with the loader's division by the number of workers
def nnabla_lr(init, solver, comm):
    kind = solver.get("lr_scheduler_type", "")

    def base(it):
        if kind == "Polynomial":
            p = solver["polynomial_scheduler_param"]
            m = p["max_iter"] // comm
            return init * (1.0 - it / m) ** p["power"]
        if kind == "Cosine":
            m = solver["cosine_scheduler_param"]["max_iter"] // comm
            return init * 0.5 * (1.0 + math.cos(math.pi * it / m))
        if kind == "Exponential":
            p = solver["exponential_scheduler_param"]
            interval = p["iter_interval"] // comm if p["iter_interval"] > comm else 1
            return init * p["gamma"] ** (it // interval)
        if kind == "Step":
            p = solver["step_scheduler_param"]
            return init * p["gamma"] ** sum(it >= s // comm for s in p["iter_steps"])
        decay = solver.get("lr_decay", 0.0)
        interval = solver.get("lr_decay_interval", 0)
        if interval == 0 and decay == 0.0:
            return init
        interval = interval // comm if interval > comm else 1
        return init * (decay if decay > 0 else 1.0) ** (it // interval)

    def lr(it):
        if solver.get("lr_warmup_scheduler_type") == "Linear":
            w = solver["linear_warmup_scheduler_param"]["warmup_iter"]
            if w >= comm:
                w //= comm
                if it < w:
                    return base(it) * (it + 1) / w
        return base(it)

    return np.array([lr(int(t)) for t in STEPS])


SCHEDULERS = {
    "Polynomial": {
        "lr_scheduler_type": "Polynomial",
        "polynomial_scheduler_param": {"max_iter": 200, "power": 2.0},
    },
    "Cosine": {"lr_scheduler_type": "Cosine", "cosine_scheduler_param": {"max_iter": 160}},
    "Exponential": {
        "lr_scheduler_type": "Exponential",
        "exponential_scheduler_param": {"gamma": 0.5, "iter_interval": 16},
    },
    "Step": {
        "lr_scheduler_type": "Step",
        "step_scheduler_param": {"gamma": 0.1, "iter_steps": [100, 40, 160]},
    },
    "legacy-lr_decay": {"lr_decay": 0.9, "lr_decay_interval": 12},
    "none": {},
    "Cosine+LinearWarmup": {
        "lr_scheduler_type": "Cosine",
        "cosine_scheduler_param": {"max_iter": 160},
        "lr_warmup_scheduler_type": "Linear",
        "linear_warmup_scheduler_param": {"warmup_iter": 40},
    },
    "Step+LinearWarmup": {
        "lr_scheduler_type": "Step",
        "step_scheduler_param": {"gamma": 0.5, "iter_steps": [64]},
        "lr_warmup_scheduler_type": "Linear",
        "linear_warmup_scheduler_param": {"warmup_iter": 10},
    },
}


@pytest.mark.parametrize("comm", [1, 4])
@pytest.mark.parametrize("scheduler", list(SCHEDULERS))
def test_learning_rate_follows_nnabla_schedulers(scheduler, comm):
    solver = {
        "type": "Momentum",
        "momentum_param": {"lr": 0.2, "momentum": 0.9},
        **SCHEDULERS[scheduler],
    }
    tx = from_nnabla({"solver": solver}, comm_size=comm)
    # float32 against float64: 1e-6 of the initial rate absolute (cosine near its minimum)
    np.testing.assert_allclose(
        tx.learning_rate_at(STEPS), nnabla_lr(0.2, solver, comm), rtol=2e-6, atol=2e-7
    )


# type -> (param block, gradtx alias built by hand with the same values)
S = gradtx.schedules
SOLVERS = {
    "Sgd": ({"lr": 0.1}, lambda lr: gradtx.sgd(lr)),
    "SGD": ({"lr": 0.1}, lambda lr: gradtx.sgd(lr)),
    "Momentum": ({"lr": 0.1, "momentum": 0.8}, lambda lr: gradtx.nnabla.momentum(lr, 0.8)),
    "Nesterov": (
        {"lr": 0.1, "momentum": 0.8},
        lambda lr: gradtx.nnabla.momentum(lr, 0.8, nesterov=True),
    ),
    "Adagrad": (
        {"lr": 0.1, "eps": 1e-6},
        lambda lr: gradtx.adagrad(lr, 0.0, 1e-6, eps_in_sqrt=False),
    ),
    "Adadelta": (
        {"lr": 0.5, "decay": 0.9, "eps": 1e-5},
        lambda lr: gradtx.adadelta(lr, rho=0.9, eps=1e-5),
    ),
    "Adam": (
        {"alpha": 0.01, "beta1": 0.8, "beta2": 0.99, "eps": 1e-6},
        lambda lr: gradtx.nnabla.adam(lr, 0.8, 0.99, 1e-6),
    ),
    "Adamax": (
        {"alpha": 0.01, "beta1": 0.8, "beta2": 0.99, "eps": 1e-6},
        lambda lr: gradtx.adamax(lr, 0.8, 0.99, 1e-6),
    ),
    "AdaBound": (
        {"alpha": 0.01, "final_lr": 0.05, "gamma": 0.01},
        lambda lr: gradtx.adabound(lr, final_lr=0.05, gamma=0.01),
    ),
    "AMSGRAD": (
        {"alpha": 0.01, "beta2": 0.99, "bias_correction": True},
        lambda lr: gradtx.nnabla.amsgrad(lr, b2=0.99, bias_correction=True),
    ),
    "AMSBound": ({"alpha": 0.01, "final_lr": 0.05}, lambda lr: gradtx.amsbound(lr, final_lr=0.05)),
    "Eve": (
        {"alpha": 0.01, "beta3": 0.99, "k": 0.2, "k2": 5.0},
        lambda lr: gradtx.eve(lr, b3=0.99, k=0.2, K=5.0),
    ),
    "RMSprop": (
        {"lr": 0.01, "decay": 0.8, "eps": 1e-6},
        lambda lr: gradtx.rmsprop(lr, 0.8, 1e-6, eps_in_sqrt=False),
    ),
    "RMSpropGraves": ({"lr": 0.01}, lambda lr: gradtx.rmsprop_graves(lr)),
    "AdamW": ({"alpha": 0.01, "wd": 0.1}, lambda lr: gradtx.nnabla.adamw(lr, weight_decay=0.1)),
    "SgdW": ({"lr": 0.1, "wd": 0.01}, lambda lr: gradtx.sgdw(lr, weight_decay=0.01)),
    "Lars": ({"lr": 0.1, "coefficient": 0.01}, lambda lr: gradtx.nnabla.lars(lr, coefficient=0.01)),
    "Lamb": ({"eta": 0.01, "gamma_u": 5.0}, lambda lr: gradtx.nnabla.lamb(lr, gamma_u=5.0)),
    "AdaBelief": (
        {"alpha": 0.01, "rectify": True},
        lambda lr: gradtx.nnabla.adabelief(lr, rectify=True),
    ),
    "Lion": ({"lr": 0.01}, lambda lr: gradtx.lion(lr, weight_decay=0.0)),
}
SEED_TYPES = [
    "Adagrad",
    "Adadelta",
    "Adam",
    "Adamax",
    "AdaBound",
    "AMSGRAD",
    "AMSBound",
    "Eve",
    "Momentum",
    "Nesterov",
    "RMSprop",
    "Sgd",
    "SGD",
]


def test_every_solver_type_of_the_seed_loader_is_covered():
    assert set(SEED_TYPES) <= set(SOLVERS)
    assert set(SOLVERS) == set(gradtx.nnabla._config.SOLVER_TYPES)


def _block(kind):
    return "rmsprop_graves_param" if kind == "RMSpropGraves" else f"{kind.lower()}_param"


@pytest.mark.parametrize("kind", list(SOLVERS))
def test_updates_equal_the_matching_gradtx_alias(kind):
    params, hand = SOLVERS[kind]
    lr_value = params.get("lr", params.get("alpha", params.get("eta")))
    tx = from_nnabla({"type": kind, _block(kind): params})
    ours, ref = run_pair(tx, hand(lr_value), small_params())
    for a, b in zip(jax.tree.leaves(ours), jax.tree.leaves(ref), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-7, atol=1e-7)
        assert np.abs(np.asarray(a)).sum() > 0


def test_weight_decay_schedule_interval_and_workers_together():
    cfg = {
        "solver": {
            "type": "Adam",
            "adam_param": {"alpha": 0.01},
            "weight_decay": 0.05,
            **SCHEDULERS["Step+LinearWarmup"],
        },
        "update_interval": 2,
    }
    tx = from_nnabla(cfg, comm_size=2)
    lr = S.nnabla_linear_warmup(S.nnabla_step(0.01, 0.5, [64], comm_size=2), 10, comm_size=2)
    hand = gradtx.accumulate_k_steps(
        gradtx.chain(gradtx.weight_decay(0.05), gradtx.nnabla.adam(lr)), 2, average=False
    )
    ours, ref = run_pair(tx, hand, small_params())
    for a, b in zip(jax.tree.leaves(ours), jax.tree.leaves(ref), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-7, atol=1e-7)
    # the fused solvers take the loop's rate instead of their constructor's wd
    fused = from_nnabla({"type": "AdamW", "adamw_param": {"wd": 0.1}, "weight_decay": 0.3})
    assert fused.config["optimizer"]["weight_decay"] == 0.3
    assert "weight_decay" not in fused.config


def test_parameter_variable_trains_only_the_named_parameters():
    cfg = {
        "solver": {"type": "Sgd", "sgd_param": {"lr": 0.1}},
        "parameter_variable": [{"variable_name": "dense/k", "learning_rate_multiplier": 2.0}],
    }
    params = small_params()
    grads = jax.tree.map(lambda x: x * 0 + 1, params)
    for apply, factor in ((False, 1.0), (True, 2.0)):
        tx = from_nnabla(cfg, apply_multipliers=apply)
        updates, _ = tx.update(grads, tx.init(params), params)
        np.testing.assert_allclose(updates["dense"]["kernel"], -0.1 * factor, rtol=1e-6)
        np.testing.assert_array_equal(updates["dense"]["bias"], 0.0)


@pytest.mark.parametrize(
    ("cfg", "message"),
    [
        ({"type": "Adm"}, r"^solver\.type: unsupported solver type 'Adm' \(did you mean 'Adam'"),
        ({"adam_param": {}}, r"^solver\.type: missing"),
        (
            {"type": "Adam", "adam_param": {"alpah": 0.1}},
            r"^solver\.adam_param\.alpah: Adam has no parameter 'alpah' \(did you mean 'alpha'",
        ),
        (
            {"type": "Adam", "sgd_param": {"lr": 0.1}},
            r"^solver\.sgd_param: unused: the solver type is 'Adam'",
        ),
        (
            {"type": "Adam", "adam_param": {"beta1": 1.5}},
            r"^solver\.adam_param\.beta1: must be in \[0\.0, 1\.0\), got 1\.5",
        ),
        (
            {"type": "Adam", "adam_param": {"alpha": "fast"}},
            r"^solver\.adam_param\.alpha: must be a number, got 'fast'",
        ),
        (
            {"type": "Sgd", "lr_scheduler_type": "Custom"},
            r"^solver\.lr_scheduler_type: must be one of .*'Custom' is not implemented by nnabla",
        ),
        (
            {
                "type": "Sgd",
                "lr_scheduler_type": "Cosine",
                "step_scheduler_param": {"gamma": 0.1, "iter_steps": [1]},
            },
            r"^solver\.step_scheduler_param: unused: lr_scheduler_type is 'Cosine'",
        ),
        (
            {
                "type": "Sgd",
                "lr_scheduler_type": "Cosine",
                "cosine_scheduler_param": {"max_iter": 9},
                "lr_decay": 0.5,
                "lr_decay_interval": 3,
            },
            r"^solver\.lr_decay: unused",
        ),
        ({"type": "Sgd", "momentum": 0.9}, r"^solver\.momentum: unsupported solver field"),
        (
            {"solver": {"type": "Sgd"}, "network_name": "net"},
            r"^network_name: unsupported optimizer field 'network_name' \(a training-loop",
        ),
        (
            {"solver": {"type": "Sgd"}, "parameter_variable": [{"variable_name": "conv.*"}]},
            r"^parameter_variable\[0\]\.variable_name: 'conv\.\*' is a regular expression",
        ),
        (
            {"solver": {"type": "Sgd"}, "update_interval": "two"},
            r"^update_interval: must be an integer",
        ),
    ],
)
def test_unsupported_or_wrong_fields_are_named(cfg, message):
    with pytest.raises(gc.ConfigError, match=message):
        from_nnabla(cfg)


def test_to_config_gives_the_gradtx_config_and_rebuilds_it():
    tx = from_nnabla(
        {
            "type": "Adam",
            "adam_param": {"alpha": 0.01},
            "weight_decay": 1e-3,
            **SCHEDULERS["Cosine"],
        },
        comm_size=2,
    )
    cfg = gc.to_config(tx)
    assert cfg["optimizer"]["name"] == "nnabla.adam"
    assert cfg["optimizer"]["learning_rate"]["name"] == "nnabla_solver_schedule"
    assert cfg["weight_decay"] == {"rate": 1e-3, "mode": "coupled"}
    ours, ref = run_pair(tx, gc.from_config(cfg), small_params())
    for a, b in zip(jax.tree.leaves(ours), jax.tree.leaves(ref), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.parametrize("value", [5, "text", None, 1.5])
def test_an_nnabla_optimizer_field_that_is_no_message_is_a_config_error(value):
    err = config_error(from_nnabla, {"optimizer": value})
    assert err.path == "optimizer" or "optimizer" in str(err)


def test_an_nnabla_optimizer_field_may_be_one_message():
    tx = from_nnabla({"optimizer": {"name": "o", "solver": {"type": "Sgd"}}})
    assert tx.config["optimizer"]["name"] == "sgd"
