"""Table cases for the matrix optimizers of `gradtx.contrib` (Solvers IV): soap, shampoo, kron,
normuon, dion, scion (Muon's cases are in contrib_methods).

`kwargs` solve the quadratic (500 steps to 1e-2 of the initial loss, with a margin);
`rosenbrock_kwargs` reach 1e-2 on Rosenbrock from (-1, 1) within `rosenbrock_steps`. Rosenbrock's
parameter is a single vector, so it exercises each optimizer's rule for 1-D leaves (an AdamW
fallback); the quadratic's matrices get the matrix rule.
"""

import jax.numpy as jnp

from gradtx import contrib
from gradtx.contrib import ShampooDimensionNumbers, infer_matrix_axes

from ..optimizer_table import OptCase

# mixed_params' (2, 2, 2) leaf has no axis or path names that say which of its axes form a
# matrix, so the matrix methods refuse to guess; it goes to their AdamW half (or SOAP's Adam).
# The table also runs trees without it (the quadratic, Rosenbrock): `strict=False`.
UNNAMED_TO_FALLBACK = infer_matrix_axes({"pair/b/1": None}, strict=False)

CASES = [
    OptCase(
        "soap",
        contrib.soap,
        {"learning_rate": 0.05, "weight_dimension_numbers": UNNAMED_TO_FALLBACK},
        rosenbrock_kwargs={"learning_rate": 3e-3},
        # The bases come from eigh: an eigenvector's rounding error is the factor's divided by
        # the eigenvalue gap, so a sharded run's (another summation order) varies more than
        # twice the unsharded one's (measured: 2.06x at one entry of an 8 x 8 basis).
        float32_noise=4.0,
    ),
    OptCase(
        "dion",
        contrib.dion,
        # Orthonormal steps do not shrink near the minimum: a decaying learning rate.
        {
            "learning_rate": lambda t: 0.1 / (1.0 + 0.05 * t),
            "weight_dimension_numbers": UNNAMED_TO_FALLBACK,
        },
        rosenbrock_kwargs={"learning_rate": 3e-3},
    ),
    OptCase(
        "shampoo",
        contrib.shampoo,
        # mixed_params has a (2, 2, 2) leaf: one ShampooDimensionNumbers (rows 0, columns 1,
        # axis 2 a batch axis) covers it and every matrix.
        {"learning_rate": 0.05, "weight_dimension_numbers": ShampooDimensionNumbers()},
        # Rosenbrock's single 1-D leaf gets the graft alone (Adam).
        rosenbrock_kwargs={"learning_rate": 3e-3},
    ),
    OptCase(
        "shampoo_blocked_rmsprop_bf16_preconditioner",
        contrib.shampoo,
        {
            "learning_rate": 0.05,
            "b1": 0.0,
            "weight_decay": 1e-4,
            "block_size": 2,
            "precondition_frequency": 3,
            "start_preconditioning_step": 1,
            "graft_type": "rmsprop",
            "preconditioner_dtype": jnp.bfloat16,
            "weight_dimension_numbers": ShampooDimensionNumbers(),
        },
        rosenbrock_kwargs={"learning_rate": 3e-3},
    ),
    OptCase(
        # Rosenbrock's single 1-D leaf gets one diagonal PSGD factor.
        "kron",
        contrib.kron,
        {"learning_rate": 0.05},
        rosenbrock_kwargs={"learning_rate": 3e-3},
    ),
    OptCase(
        "normuon",
        contrib.normuon,
        # Rescaled orthogonal steps (RMS 0.2) do not shrink near the minimum: a decaying rate.
        {
            "learning_rate": lambda t: 0.1 / (1.0 + 0.01 * t),
            "weight_dimension_numbers": UNNAMED_TO_FALLBACK,
        },
        # Rosenbrock's single 1-D leaf goes to NorMuon's AdamW half.
        rosenbrock_kwargs={"learning_rate": 3e-3},
    ),
    OptCase(
        "normuon_preserve_norm_bf16_nu",
        contrib.normuon,
        {
            "learning_rate": lambda t: 0.1 / (1.0 + 0.01 * t),
            "update_scale": "preserve_norm",
            "preconditioner_dtype": jnp.bfloat16,
            "weight_dimension_numbers": UNNAMED_TO_FALLBACK,
        },
        rosenbrock_kwargs={"learning_rate": 3e-3},
    ),
    OptCase(
        "scion",
        contrib.scion,
        # LMO steps have a fixed length: a decaying learning rate. The (2, 2, 2) leaf goes to
        # AdamW; Rosenbrock's (2,) leaf takes the "bias_rms" LMO (a normalised step).
        {
            "learning_rate": lambda t: 0.1 / (1.0 + 0.05 * t),
            "weight_dimension_numbers": UNNAMED_TO_FALLBACK,
        },
        # Newton-Schulz amplifies rounding (see muon's case): 7.4x at one entry on jax 0.12.
        float32_noise=8.0,
    ),
    OptCase(
        "scion_gluon",
        contrib.scion,
        {
            "learning_rate": lambda t: 0.5 / (1.0 + 0.05 * t),
            "step_size": "gluon",
            "gluon_l1": 1.0,
            "weight_dimension_numbers": UNNAMED_TO_FALLBACK,
        },
        rosenbrock_kwargs={"learning_rate": lambda t: 0.1 / (1.0 + 0.05 * t)},
    ),
]
