"""Table cases for nnabla's and RETURNN's solvers, AdaBound and Eve.

`kwargs` solve the quadratic (500 steps to 1e-2 of the initial loss); `rosenbrock_kwargs` reach
1e-2 on Rosenbrock from (-1, 1) within `rosenbrock_steps`. The generic tests pass `value=loss`
to every update, which Eve uses. Methods with steps of a fixed size (normalized SGD) need a
decaying learning rate to settle.
"""

import jax.numpy as jnp

import gradtx

from ..optimizer_table import OptCase


def _cosine(peak: float, steps: int):
    def schedule(count):
        return peak * 0.5 * (1.0 + jnp.cos(jnp.pi * jnp.minimum(count, steps) / steps))

    return schedule


CASES = [
    OptCase(
        "adabound_schedule",
        gradtx.adabound,
        {
            "learning_rate": lambda t: 0.05 / (1.0 + 1e-3 * t),
            "final_lr": 0.1,
            "gamma": 1e-2,
            "weight_decay": 1e-4,
            # eta_0 for the bounds: needed when the learning rate is injected (test_inject.py)
            "initial_learning_rate": 0.05,
        },
        rosenbrock_kwargs={
            "learning_rate": lambda t: 3e-3 / (1.0 + 1e-4 * t),
            "final_lr": 3e-3,
            "gamma": 1e-3,
            "initial_learning_rate": 3e-3,
        },
    ),
    OptCase(
        "amsbound",
        gradtx.amsbound,
        {"learning_rate": 0.05, "final_lr": 0.1, "bias_correction": True},
        rosenbrock_kwargs={"learning_rate": 3e-3, "final_lr": 1e-2},
    ),
    OptCase("eve", gradtx.eve, {"learning_rate": 0.05}, rosenbrock_kwargs={"learning_rate": 3e-3}),
    OptCase(
        "normalized_sgd",
        gradtx.normalized_sgd,
        {"learning_rate": _cosine(0.3, 500)},
        rosenbrock_kwargs={"learning_rate": _cosine(0.02, 3000)},
    ),
    OptCase(
        "neural_optimizer1",
        gradtx.neural_optimizer1,
        {"learning_rate": 0.1},
        rosenbrock_kwargs={"learning_rate": 2e-3},
    ),
    OptCase(
        "grad_variance_scaled",
        gradtx.grad_variance_scaled,
        {"learning_rate": 0.1},
        rosenbrock_kwargs={"learning_rate": 2e-3},
    ),
    OptCase(
        "returnn.nadam",
        gradtx.returnn.nadam,
        {"learning_rate": 0.05},
        rosenbrock_kwargs={"learning_rate": 3e-3},
    ),
    OptCase(
        "amsgrad_returnn_decay",
        gradtx.returnn.amsgrad,
        {"learning_rate": 0.3, "decay": True, "eps": 1e-8},
        # lr / sqrt(t) decays too fast for Rosenbrock's long valley within 3000 steps.
        rosenbrock_kwargs={"learning_rate": 0.03, "decay": False},
    ),
    OptCase(
        "momentum_nnabla_nesterov_schedule",
        gradtx.nnabla.momentum,
        {"learning_rate": lambda t: 0.05 / (1.0 + 1e-3 * t), "momentum": 0.9, "nesterov": True},
        rosenbrock_kwargs={"learning_rate": lambda t: 5e-4 / (1.0 + 1e-4 * t)},
    ),
    OptCase(
        "sgdw",
        gradtx.sgdw,
        {"learning_rate": 0.05, "momentum": 0.9, "weight_decay": 1e-4},
        rosenbrock_kwargs={"learning_rate": 5e-4, "weight_decay": 0.0},
    ),
    OptCase(
        "rmsprop_graves",
        gradtx.rmsprop_graves,
        {"learning_rate": 5e-3},
        rosenbrock_kwargs={"learning_rate": 5e-4},
    ),
    OptCase(
        "nnabla.adam",
        gradtx.nnabla.adam,
        {"learning_rate": 0.05},
        rosenbrock_kwargs={"learning_rate": 3e-3},
    ),
    OptCase(
        "nnabla.adamw",
        gradtx.nnabla.adamw,
        {
            "learning_rate": lambda t: 0.05 / (1.0 + 1e-3 * t),
            "weight_decay": 1e-4,
            "initial_learning_rate": 0.05,
        },
        rosenbrock_kwargs={
            "learning_rate": 3e-3,
            "weight_decay": 0.0,
            "initial_learning_rate": 3e-3,
        },
    ),
    OptCase(
        "nnabla.amsgrad",
        gradtx.nnabla.amsgrad,
        {"learning_rate": 0.1, "bias_correction": True},
        rosenbrock_kwargs={"learning_rate": 1e-2},
    ),
    OptCase(
        "nnabla.lars",
        gradtx.nnabla.lars,
        {"learning_rate": 0.5, "coefficient": 0.1},
        rosenbrock_kwargs={"learning_rate": _cosine(1.0, 3000)},
    ),
    OptCase(
        "nnabla.lamb",
        gradtx.nnabla.lamb,
        {"learning_rate": 0.01, "weight_decay": 1e-4, "gamma_l": 1e-3},
        rosenbrock_kwargs={"learning_rate": _cosine(0.05, 3000)},
    ),
    OptCase(
        "adabelief_nnabla_rectify_decoupled",
        gradtx.nnabla.adabelief,
        {"learning_rate": 0.03, "weight_decay": 1e-4, "weight_decouple": True, "rectify": True},
        rosenbrock_kwargs={"learning_rate": 3e-3, "weight_decay": 0.0},
    ),
]
