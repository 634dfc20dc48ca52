"""Table cases for the other `gradtx.contrib` optimizers: muon, sophia, sam, adopt, ademamix,
simplified_ademamix, madgrad, momo, momo_adam, galore, acprop, dpsgd, mars, laprop, cautious,
adam_mini, apollo, fira.

`kwargs` solve the quadratic (500 steps to 1e-2 of the initial loss, with a margin);
`rosenbrock_kwargs` reach 1e-2 on Rosenbrock from (-1, 1) within `rosenbrock_steps`. The generic
tests pass `value=loss` to every update (MoMo uses it) but no `obj_fn`, no `grad_fn` and no
per-example gradients; the cases below say how each optimizer is set up to run without them.
"""

import jax
import jax.numpy as jnp

import gradtx
from gradtx import contrib

from ..optimizer_table import OptCase
from .matrix_methods import UNNAMED_TO_FALLBACK


def _cautious_adam(learning_rate, b1=0.9, b2=0.999) -> gradtx.GradientTransformation:
    # The wrapper around a whole alias (descent updates): C-Adam.
    return contrib.cautious(gradtx.adam(learning_rate, b1, b2))


def _squared_gradient() -> gradtx.GradientTransformation:
    """A Hessian-diagonal estimate that needs no `obj_fn`: the squared gradient (the
    Gauss-Newton-Bartlett flavour of Sophia, Sophia-G, with a batch of one)."""
    return gradtx.stateless(lambda g, p: jax.tree.map(lambda x: x * x, g))


def _sophia_g(learning_rate: float, weight_decay: float) -> gradtx.GradientTransformation:
    # The generic tests cannot pass `obj_fn`, which the default Hutchinson estimator needs (it is
    # compared with Optax in tests/contrib/test_sophia.py).
    return contrib.sophia(
        learning_rate, weight_decay=weight_decay, hessian_diagonal_fn=_squared_gradient()
    )


def _sam_sgd(learning_rate: float, rho: float) -> gradtx.GradientTransformation:
    # Transparent mode: every other step is the adversarial one, so the generic tests apply.
    # Opaque mode needs `grad_fn=` in every update and is tested in tests/contrib/test_sam.py.
    return contrib.sam(
        gradtx.sgd(learning_rate, momentum=0.9),
        gradtx.chain(contrib.normalize(), gradtx.sgd(rho)),
    )


def _dpsgd_batch_of_one(
    learning_rate: float, l2_norm_clip: float, noise_multiplier: float, seed: int, momentum: float
) -> gradtx.GradientTransformation:
    # DP-SGD takes per-example gradients (batch on axis 0); the generic tests give the gradient
    # of the whole loss, so it is fed as a batch of one example. (`seed: int` keeps the seed a
    # static argument under inject_hyperparams.)
    add_batch_axis = gradtx.stateless(lambda g, p: jax.tree.map(lambda x: x[None], g))
    dpsgd = contrib.dpsgd(learning_rate, l2_norm_clip, noise_multiplier, seed, momentum)
    return gradtx.chain(add_batch_axis, dpsgd)


CASES = [
    OptCase(
        "muon",
        contrib.muon,
        # Orthogonalised steps do not shrink near the minimum: a decaying learning rate.
        {
            "learning_rate": lambda t: 0.1 / (1.0 + 0.05 * t),
            "muon_weight_dimension_numbers": UNNAMED_TO_FALLBACK,
        },
        # Rosenbrock's single 1-D leaf goes to Muon's AdamW half.
        rosenbrock_kwargs={"learning_rate": 3e-3},
        # Newton-Schulz multiplies the rounding of small singular values by up to ~3.4 per
        # iteration (its quintic's slope at 0): the sharded program's own rounding (another
        # dot kernel, jax 0.12's XLA:CPU) measured 6.3x the unsharded run's at one entry.
        float32_noise=8.0,
    ),
    OptCase(
        "adopt",
        contrib.adopt,
        {"learning_rate": 0.05},
        rosenbrock_kwargs={"learning_rate": 3e-3},
    ),
    OptCase(
        "adopt_nesterov_bf16_mu",
        contrib.adopt,
        {"learning_rate": 0.05, "nesterov": True, "mu_dtype": jnp.bfloat16},
        rosenbrock_kwargs={"learning_rate": 3e-3, "mu_dtype": None},
    ),
    OptCase(
        # b3 = 1 - 2**-10 is exact in float32: inject_hyperparams stores it as float32 and the
        # slow EMA's 1 - b3 (weighted by alpha = 5) would otherwise differ from the plain run's
        # double-precision 1 - 0.999 by 1e-5, relatively.
        "ademamix",
        contrib.ademamix,
        {"learning_rate": 0.05, "b3": 1 - 2**-10, "weight_decay": 1e-4},
        rosenbrock_kwargs={"learning_rate": 1e-3, "b3": 0.99, "alpha": 2.0, "weight_decay": 0.0},
    ),
    OptCase(
        "simplified_ademamix",
        contrib.simplified_ademamix,
        {"learning_rate": 5e-3, "b1": 0.9, "alpha": 1.0},
        rosenbrock_kwargs={"learning_rate": 3e-4},
    ),
    OptCase(
        # Its step divides the new gradient by the *previous* spread of the gradients. At (-1, 1)
        # Rosenbrock's y-gradient is exactly 0, so that spread is eps_root and the second step
        # in y is ~g_y / 3e-7 (it diverges with the defaults). eps = 1 caps the gain at 1, so the
        # step is at most SGD's with the same learning rate.
        "acprop",
        contrib.acprop,
        {"learning_rate": 0.05},
        rosenbrock_kwargs={"learning_rate": 2e-3, "eps": 1.0},
    ),
    OptCase(
        "madgrad",
        contrib.madgrad,
        {"learning_rate": 0.05},
        rosenbrock_kwargs={"learning_rate": 3e-3},
    ),
    OptCase("momo", contrib.momo, {}, rosenbrock_kwargs={"learning_rate": 3e-3}),
    OptCase(
        "momo_adam",
        contrib.momo_adam,
        {"learning_rate": 0.1},
        rosenbrock_kwargs={"learning_rate": 3e-3},
    ),
    OptCase(
        "sophia_g",
        _sophia_g,
        {"learning_rate": 0.05, "weight_decay": 0.0},
        rosenbrock_kwargs={"learning_rate": 3e-3},
    ),
    OptCase(
        "sam",
        _sam_sgd,
        {"learning_rate": 0.05, "rho": 1e-3},
        rosenbrock_kwargs={"learning_rate": 5e-4, "rho": 1e-4},
    ),
    OptCase(
        # Rosenbrock's parameter is a vector, which GaLore leaves to its base optimizer (Adam);
        # the quadratic's matrices are projected to rank 2.
        "galore",
        contrib.galore,
        {"learning_rate": 0.05, "rank": 2, "update_proj_gap": 5},
        rosenbrock_kwargs={"learning_rate": 3e-3},
    ),
    OptCase(
        "dpsgd",
        _dpsgd_batch_of_one,
        {
            "learning_rate": 0.05,
            "l2_norm_clip": 100.0,
            "noise_multiplier": 1e-5,
            "seed": 0,
            "momentum": 0.9,
        },
        rosenbrock_kwargs={"learning_rate": 5e-4},
    ),
    OptCase(
        "mars",
        contrib.mars,
        {"learning_rate": 0.05, "weight_decay": 1e-4},
        # Rosenbrock's single 1-D leaf would go to the AdamW half: optimize_1d runs MARS on it.
        rosenbrock_kwargs={
            "learning_rate": 3e-3,
            "weight_decay": 0.0,
            "adam_weight_decay": 0.0,
            "optimize_1d": True,
        },
    ),
    OptCase(
        "mars_lion",
        contrib.mars,
        # sign steps do not shrink near the minimum: a decaying learning rate
        {
            "learning_rate": lambda t: 0.1 / (1.0 + 0.05 * t),
            "mars_type": "lion",
            "adam_weight_decay": 0.0,
        },
        rosenbrock_kwargs={"learning_rate": lambda t: 3e-3 / (1.0 + 1e-3 * t), "optimize_1d": True},
    ),
    OptCase(
        "laprop", contrib.laprop, {"learning_rate": 0.05}, rosenbrock_kwargs={"learning_rate": 3e-3}
    ),
    OptCase(
        # b1, b2 exact in float32: with bf16 moments, inject_hyperparams' float32 1 - b otherwise
        # flips a bf16 rounding against the plain run's double-precision 1 - b (6e-5 apart).
        "laprop_bf16_moments",
        contrib.laprop,
        {
            "learning_rate": 0.05,
            "b1": 0.875,
            "b2": 1 - 2**-7,
            "weight_decay": 1e-4,
            "mu_dtype": jnp.bfloat16,
            "nu_dtype": jnp.bfloat16,
        },
        rosenbrock_kwargs={"learning_rate": 3e-3, "mu_dtype": None, "nu_dtype": None},
    ),
    OptCase(
        "cautious_adamw",
        contrib.cautious_adamw,
        {"learning_rate": 0.05, "weight_decay": 1e-4},
        rosenbrock_kwargs={"learning_rate": 3e-3},
    ),
    OptCase(
        "cautious_adam_wrapper",
        _cautious_adam,
        {"learning_rate": 0.05},
        rosenbrock_kwargs={"learning_rate": 3e-3},
    ),
    OptCase(
        "adam_mini",
        contrib.adam_mini,
        {"learning_rate": 0.05, "weight_decay": 0.0},
        rosenbrock_kwargs={"learning_rate": 3e-3},
    ),
    OptCase(
        # Rosenbrock's parameter is a vector: APOLLO gives it Adam (its 1-D rule); the
        # quadratic's matrices are projected to rank 2.
        "apollo",
        contrib.apollo,
        {"learning_rate": 0.1, "rank": 2, "update_proj_gap": 5},
        rosenbrock_kwargs={"learning_rate": 3e-3},
    ),
    OptCase(
        "apollo_mini",
        contrib.apollo,
        {"learning_rate": 0.05, "rank": 1, "scale": 4.0, "scale_type": "tensor"},
        rosenbrock_kwargs={"learning_rate": 3e-3},
    ),
    OptCase(
        # as apollo: the vector goes to Adam, the matrices get low-rank Adam plus the residual
        "fira",
        contrib.fira,
        {"learning_rate": 0.05, "rank": 2, "update_proj_gap": 5},
        rosenbrock_kwargs={"learning_rate": 3e-3},
    ),
]
