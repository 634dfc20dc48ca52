"""Table cases for SGD: plain, momentum, Nesterov, scheduled."""

import gradtx

from ..optimizer_table import OptCase

CASES = [
    OptCase(
        "sgd",
        gradtx.sgd,
        {"learning_rate": 0.1},
        rosenbrock_kwargs={"learning_rate": 2e-3},
    ),
    OptCase(
        "sgd_momentum",
        gradtx.sgd,
        {"learning_rate": 0.05, "momentum": 0.9},
        rosenbrock_kwargs={"learning_rate": 5e-4},
    ),
    OptCase(
        "sgd_nesterov",
        gradtx.sgd,
        {"learning_rate": 0.05, "momentum": 0.9, "nesterov": True},
        rosenbrock_kwargs={"learning_rate": 5e-4},
    ),
    OptCase(
        "sgd_schedules",
        gradtx.sgd,
        {"learning_rate": lambda t: 0.05 / (1.0 + 0.001 * t), "momentum": lambda t: 0.9},
        rosenbrock_kwargs={"learning_rate": lambda t: 5e-4 / (1.0 + 1e-4 * t)},
    ),
]
