"""Table cases for L-BFGS.

The generic tests pass `value=` but no objective, so the table holds L-BFGS without a line search
(a plain `update(grads, state, params)`, step `learning_rate`); the line searches are tested in
tests/transforms/test_linesearch.py and tests/transforms/test_lbfgs.py.
"""

import gradtx

from ..optimizer_table import OptCase

CASES: list[OptCase] = [
    OptCase(
        "lbfgs",
        gradtx.lbfgs,
        {"learning_rate": 0.5, "memory_size": 5, "linesearch": None},
        quadratic_steps=100,
        rosenbrock_kwargs={"learning_rate": 0.1},
        rosenbrock_steps=1000,
    ),
]
