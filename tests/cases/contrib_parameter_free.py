"""Table cases for the parameter-free and schedule-free optimizers of `gradtx.contrib`:
schedule-free, Prodigy, D-Adaptation, DoG / DoWG, Mechanic and COCOB.

The generic tests measure the loss at the params the optimizer returns. For the schedule-free
optimizers those are the gradient points y (an interpolation of the average x and the base
iterate z), which converge with x and z, so the same tests apply; evaluation at x
(`schedule_free_eval_params`) is tested in tests/contrib/test_schedule_free.py.
"""

import gradtx
from gradtx import contrib

from ..optimizer_table import OptCase

CASES = [
    OptCase(
        "schedule_free_adamw",
        contrib.schedule_free_adamw,
        {"learning_rate": 0.05, "warmup_steps": 10},
        rosenbrock_kwargs={"learning_rate": 1e-2, "warmup_steps": None},
    ),
    OptCase(
        "schedule_free_sgd",
        contrib.schedule_free_sgd,
        {"learning_rate": 0.2, "weight_decay": 1e-4},
        rosenbrock_kwargs={"learning_rate": 2e-3, "b1": 0.5, "weight_decay": None},
    ),
    OptCase(
        "schedule_free",
        contrib.schedule_free,
        {"base_optimizer": gradtx.adam(0.05, b1=0.0), "learning_rate": 0.05},
        rosenbrock_kwargs={"base_optimizer": gradtx.adam(3e-3, b1=0.0), "learning_rate": 3e-3},
    ),
    OptCase(
        "prodigy",
        contrib.prodigy,
        {},
        # with its constant default lr the growing step size keeps it bouncing in Rosenbrock's
        # valley (0.0004-0.07 after 3000 steps, depending on the last bit of each step); with
        # the cosine decay Prodigy's authors recommend it converges (to ~1e-14)
        rosenbrock_kwargs={"learning_rate": gradtx.schedules.cosine_decay_schedule(1.0, 3000)},
    ),
    OptCase("dadapt_adamw", contrib.dadapt_adamw, {}, rosenbrock_kwargs={"learning_rate": 0.3}),
    # The parameter-free methods crawl along Rosenbrock's curved valley: more steps.
    OptCase(
        "dog",
        contrib.dog,
        {},
        rosenbrock_kwargs={"init_step": ("learning_rate", 3e-3)},
        rosenbrock_steps=5000,
    ),
    OptCase(
        "dowg",
        contrib.dowg,
        {},
        rosenbrock_kwargs={"init_estim_sq_dist": 0.1},
        rosenbrock_steps=5000,
    ),
    OptCase(
        "mechanize",
        contrib.mechanize,
        {"base_optimizer": gradtx.adam(0.1)},
        rosenbrock_kwargs={"base_optimizer": gradtx.adam(1.0), "s_init": 1e-3},
        rosenbrock_steps=30000,
    ),
    OptCase("cocob", contrib.cocob, {}, rosenbrock_kwargs={"alpha": 10.0}, rosenbrock_steps=10000),
]
