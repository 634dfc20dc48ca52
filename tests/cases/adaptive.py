"""Table cases for the adaptive, large-batch and clipping family (adagrad ... lars).

Normalised-step methods (Adafactor, LAMB, LARS) take steps of a fixed relative size, so on
Rosenbrock they need a decaying learning rate to settle: their Rosenbrock runs use a cosine
schedule (which also drives schedules through a 3000-step compiled loop).
"""

import jax.numpy as jnp

import gradtx

from ..optimizer_table import OptCase


def _cosine(peak: float, steps: int = 3000):
    def schedule(count):
        return peak * 0.5 * (1.0 + jnp.cos(jnp.pi * jnp.minimum(count, steps) / steps))

    return schedule


def clipped_sgd(learning_rate, max_norm, momentum):
    """SGD with momentum on gradients clipped to a global norm (a clip_by_global_norm chain)."""
    return gradtx.chain(gradtx.clip_by_global_norm(max_norm), gradtx.sgd(learning_rate, momentum))


CASES = [
    OptCase("adagrad", gradtx.adagrad, {"learning_rate": 0.5}),
    OptCase(
        "adadelta",
        gradtx.adadelta,
        {"learning_rate": 10.0},
        rosenbrock_kwargs={"learning_rate": 0.1, "rho": 0.5},
    ),
    OptCase(
        "rmsprop",
        gradtx.rmsprop,
        {"learning_rate": 0.01},
        rosenbrock_kwargs={"learning_rate": 3e-3},
    ),
    OptCase(
        "rmsprop_centered_nesterov",
        gradtx.rmsprop,
        {"learning_rate": 5e-3, "centered": True, "momentum": 0.9, "nesterov": True},
        rosenbrock_kwargs={"learning_rate": 5e-4},
    ),
    OptCase(
        # Factors the (3, 4), (2, 3) and (2, 2, 2) leaves of the quadratic's parameters; the
        # vectors and the scalar keep a full second moment.
        "adafactor",
        gradtx.adafactor,
        {"learning_rate": 0.1, "min_dim_size_to_factor": 2, "weight_decay_rate": 1e-4},
        rosenbrock_kwargs={"learning_rate": _cosine(0.02), "momentum": 0.9},
    ),
    OptCase(
        "lamb",
        gradtx.lamb,
        {"learning_rate": 0.01, "weight_decay": 1e-4},
        rosenbrock_kwargs={"learning_rate": _cosine(0.05), "weight_decay": 0.0},
    ),
    OptCase(
        "lars",
        gradtx.lars,
        {"learning_rate": 0.1, "trust_coefficient": 0.1},
        rosenbrock_kwargs={"learning_rate": _cosine(1.0)},
    ),
    OptCase(
        "clip_by_global_norm_sgd",
        clipped_sgd,
        {"learning_rate": 0.05, "max_norm": 1.0, "momentum": 0.9},
        rosenbrock_kwargs={"learning_rate": 5e-4},
    ),
]
