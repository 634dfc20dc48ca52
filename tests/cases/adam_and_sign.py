"""Table cases for the Adam-family and sign-family optimizers.

`kwargs` solve the quadratic (500 steps to 1e-2 of the initial loss, with a wide margin);
`rosenbrock_kwargs` reach 1e-2 on Rosenbrock from (-1, 1) within `rosenbrock_steps`.
"""

import jax.numpy as jnp

import gradtx

from ..optimizer_table import OptCase

CASES = [
    OptCase(
        "adam", gradtx.adam, {"learning_rate": 0.05}, rosenbrock_kwargs={"learning_rate": 3e-3}
    ),
    OptCase(
        "adamw",
        gradtx.adamw,
        {"learning_rate": 0.05, "weight_decay": 1e-4},
        rosenbrock_kwargs={"learning_rate": 3e-3},
    ),
    OptCase(
        "adamw_schedules_masked",
        gradtx.adamw,
        {
            "learning_rate": lambda t: 0.05 / (1.0 + 1e-3 * t),
            "weight_decay": lambda t: 1e-4 * 0.999**t,
            "mask": "!**/bias",
        },
        rosenbrock_kwargs={"learning_rate": lambda t: 3e-3 / (1.0 + 1e-4 * t), "mask": None},
    ),
    OptCase(
        "adam_bf16_moments",
        gradtx.adam,
        {"learning_rate": 0.05, "mu_dtype": jnp.bfloat16, "nu_dtype": jnp.bfloat16},
        rosenbrock_kwargs={"learning_rate": 3e-3},
    ),
    OptCase(
        "nadam", gradtx.nadam, {"learning_rate": 0.05}, rosenbrock_kwargs={"learning_rate": 3e-3}
    ),
    OptCase(
        "nadamw", gradtx.nadamw, {"learning_rate": 0.05}, rosenbrock_kwargs={"learning_rate": 3e-3}
    ),
    OptCase(
        "adamax", gradtx.adamax, {"learning_rate": 0.1}, rosenbrock_kwargs={"learning_rate": 3e-3}
    ),
    OptCase(
        "adamaxw", gradtx.adamaxw, {"learning_rate": 0.1}, rosenbrock_kwargs={"learning_rate": 3e-3}
    ),
    OptCase(
        "amsgrad", gradtx.amsgrad, {"learning_rate": 0.1}, rosenbrock_kwargs={"learning_rate": 1e-2}
    ),
    OptCase(
        "radam", gradtx.radam, {"learning_rate": 0.1}, rosenbrock_kwargs={"learning_rate": 3e-3}
    ),
    OptCase(
        "adabelief",
        gradtx.adabelief,
        {"learning_rate": 0.03},
        rosenbrock_kwargs={"learning_rate": 3e-3},
    ),
    OptCase("yogi", gradtx.yogi, {"learning_rate": 0.1}, rosenbrock_kwargs={"learning_rate": 1e-2}),
    OptCase(
        "novograd",
        gradtx.novograd,
        {"learning_rate": 0.01},
        rosenbrock_kwargs={"learning_rate": 1e-3},
    ),
    OptCase(
        "lion",
        gradtx.lion,
        {"learning_rate": 0.03},
        rosenbrock_kwargs={"learning_rate": 3e-3},
    ),
    OptCase(
        # Fixed-size sign steps zig-zag in Rosenbrock's curved valley: they settle only under a
        # decaying learning rate, given more steps (about 4e-4 after 10k steps).
        "sign_sgd",
        gradtx.sign_sgd,
        {"learning_rate": 0.01},
        rosenbrock_kwargs={"learning_rate": lambda t: 5e-3 * 0.9995**t},
        rosenbrock_steps=10_000,
    ),
    OptCase(
        # DeMo on one replica (axis_name=None): the sign of the momentum's top DCT coefficients
        # per chunk; the generic tests' leaves fit one chunk, so a few coefficients is the
        # compression. Sign steps settle under a decaying rate, as sign_sgd's.
        "demo_momentum",
        gradtx.demo_momentum,
        {"learning_rate": 0.01, "compression_topk": 2, "compression_chunk": 8},
        rosenbrock_kwargs={"learning_rate": lambda t: 5e-3 * 0.9995**t},
        rosenbrock_steps=10_000,
    ),
]
