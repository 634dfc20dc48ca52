"""Table cases for the other first-order methods Optax has: Adan, Fromage, SM3, Rprop, Polyak
SGD, the optimistic methods, noisy SGD, Signum, and the two primitives that are optimizers on
their own (layer-wise DoG and normalised gradient descent).

Fixed-length steps (Fromage's relative step, Signum's sign) settle on Rosenbrock only with a
decaying learning rate, so those runs use a cosine schedule. Optimistic gradient descent with
its default optimism (alpha = beta = 1) is stable only for lr * curvature < 2/3, a third of
gradient descent's limit, so its Rosenbrock run takes a third of SGD's rate and more steps.
"""

import jax.numpy as jnp

import gradtx

from ..optimizer_table import OptCase


def _cosine(peak: float, steps: int = 3000):
    def schedule(count):
        return peak * 0.5 * (1.0 + jnp.cos(jnp.pi * jnp.minimum(count, steps) / steps))

    return schedule


CASES = [
    OptCase(
        "adan", gradtx.adan, {"learning_rate": 0.05}, rosenbrock_kwargs={"learning_rate": 3e-3}
    ),
    OptCase(
        "fromage",
        gradtx.fromage,
        {"learning_rate": _cosine(0.1, 500)},
        rosenbrock_kwargs={"learning_rate": _cosine(0.05)},
    ),
    OptCase("sm3", gradtx.sm3, {"learning_rate": 0.5}),
    OptCase(
        "rprop",
        gradtx.rprop,
        {"learning_rate": 0.01},
        rosenbrock_kwargs={"learning_rate": 1e-3, "max_step_size": 0.1},
    ),
    OptCase("polyak_sgd", gradtx.polyak_sgd, {}),
    OptCase(
        "optimistic_gradient_descent",
        gradtx.optimistic_gradient_descent,
        {"learning_rate": 0.1},
        rosenbrock_kwargs={"learning_rate": 6e-4},
        rosenbrock_steps=10000,
    ),
    OptCase(
        "optimistic_adam",
        gradtx.optimistic_adam,
        {"learning_rate": 0.05},
        rosenbrock_kwargs={"learning_rate": 1e-2},
    ),
    OptCase(
        "optimistic_adam_v2",
        gradtx.optimistic_adam_v2,
        {"learning_rate": 0.05},
        rosenbrock_kwargs={"learning_rate": 1e-2},
    ),
    OptCase(
        "noisy_sgd",
        gradtx.noisy_sgd,
        {"learning_rate": 0.1},  # key=None: seed 0
        rosenbrock_kwargs={"learning_rate": 2e-3},
    ),
    OptCase(
        "signum",
        gradtx.signum,
        {"learning_rate": 0.01},
        rosenbrock_kwargs={"learning_rate": _cosine(0.01)},
    ),
    OptCase(
        # Layer-wise DoG has no learning rate: the step grows with the distance travelled, from
        # reps_rel * (1 + |w_0|); a larger start gets through Rosenbrock's valley in time. Where
        # it is after 6000 steps depends on the last bit of each step (0.0019 with XLA's
        # optimizations, 0.0104 without); after 10000 it is below 0.001 with both.
        "ldog",
        gradtx.scale_by_distance_over_gradients,
        {"global_scale": -1.0},
        rosenbrock_kwargs={"global_scale": -1.0, "reps_rel": 1e-2},
        rosenbrock_steps=10_000,
    ),
    OptCase(
        "normalized_gd",
        gradtx.normalize_by_update_norm,
        {"scale_factor": -0.05},
        rosenbrock_kwargs={"scale_factor": -2e-3},
    ),
]
