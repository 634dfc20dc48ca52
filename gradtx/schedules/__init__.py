"""Schedules: jit-compatible functions `step -> float32 value`.

A schedule takes a step (a Python int of any size, or an int / float / traced array of steps)
and returns float32 of the same shape. Steps are saturated to int32 (a step past 2**31 - 1
counts as 2**31 - 1 instead of wrapping; negative steps count as 0). Every schedule is a pure
`jax.numpy` formula without Python branching on the step, so it runs under `jax.jit` and
`jax.vmap` (a whole curve is one vectorised call) on CPU, GPU and TPU. A schedule can be passed
anywhere a gradtx hyperparameter accepts one (learning rate, weight decay, momentum, ...); the
transformation calls it at its int32 step count, with the same state layout as for a constant.

Argument names follow Optax (`init_value`, `end_value`, `peak_value`, `transition_steps`,
`transition_begin`, `warmup_steps`, `decay_steps`, ...), in Optax's positional order, so code
written for Optax can pass the same keywords; Optax's schedule names are available as aliases
(`warmup_cosine_decay_schedule` is `warmup_cosine_decay`, ...). Where Optax silently holds a
value for an invalid argument (e.g. `transition_steps <= 0`), gradtx raises a `ValueError` at
construction naming the argument. The nnabla-compatible constructors (`nnabla_*`, `lr_decay`)
keep nnabla's argument names (`init_lr`, `max_iter`, ...).

Every number a schedule is built from may be traced, step counts and boundaries included
(`gradtx.with_hyperparameters` rebuilds a schedule inside a jitted step from
`gradtx.hyperparameters(schedule)`, so a new value never recompiles): the construction checks
that need the number are skipped for a traced one, and what a concrete value decides at
construction (Optax's constant fallbacks, nnabla's worker-count rules, `sgdr`'s cycles) is
computed with `jnp.where` instead. The `{step: scale}` dict of `piecewise_constant` and
`piecewise_interpolate` is read back as `[[step, scale], ...]` pairs in increasing step order
(a dict key cannot be traced), and the schedule is rebuilt from the pairs, which both take.

Schedules are stateless; the plateau-driven scalings `gradtx.reduce_on_plateau` and
`gradtx.newbob` are transformations (they need the loss as `value=`) and live with them. `plot`
draws schedules with matplotlib (`pip install 'gradtx[plot]'`; from a checkout:
`pip install -e '.[plot]'`).
"""

from ._basic import constant as constant
from ._basic import exponential_decay as exponential_decay
from ._basic import inverse_sqrt as inverse_sqrt
from ._basic import linear as linear
from ._basic import multistep as multistep
from ._basic import piecewise_constant as piecewise_constant
from ._basic import piecewise_interpolate as piecewise_interpolate
from ._basic import polynomial as polynomial
from ._common import NamedSchedule as NamedSchedule
from ._compose import join as join
from ._compose import warmup as warmup
from ._compose import warmup_constant as warmup_constant
from ._compose import warmup_exponential_decay as warmup_exponential_decay
from ._cosine import cosine_decay as cosine_decay
from ._cosine import cosine_onecycle_schedule as cosine_onecycle_schedule
from ._cosine import linear_onecycle_schedule as linear_onecycle_schedule
from ._cosine import one_cycle as one_cycle
from ._cosine import sgdr as sgdr
from ._cosine import sgdr_schedule as sgdr_schedule
from ._cosine import warmup_cosine_decay as warmup_cosine_decay
from ._cyclic import cyclic as cyclic
from ._nnabla import lr_decay as lr_decay
from ._nnabla import nnabla_cosine as nnabla_cosine
from ._nnabla import nnabla_exponential as nnabla_exponential
from ._nnabla import nnabla_linear_warmup as nnabla_linear_warmup
from ._nnabla import nnabla_polynomial as nnabla_polynomial
from ._nnabla import nnabla_solver_schedule as nnabla_solver_schedule
from ._nnabla import nnabla_step as nnabla_step
from ._plot import plot as plot

# -- Optax-named aliases (same signatures and values) ------------------------------------------
constant_schedule = constant
linear_schedule = linear
polynomial_schedule = polynomial
cosine_decay_schedule = cosine_decay
piecewise_constant_schedule = piecewise_constant
piecewise_interpolate_schedule = piecewise_interpolate
join_schedules = join
warmup_constant_schedule = warmup_constant
warmup_cosine_decay_schedule = warmup_cosine_decay
warmup_exponential_decay_schedule = warmup_exponential_decay

__all__ = [
    "NamedSchedule",
    "constant",
    "constant_schedule",
    "cosine_decay",
    "cosine_decay_schedule",
    "cosine_onecycle_schedule",
    "cyclic",
    "exponential_decay",
    "inverse_sqrt",
    "join",
    "join_schedules",
    "linear",
    "linear_onecycle_schedule",
    "linear_schedule",
    "lr_decay",
    "multistep",
    "nnabla_cosine",
    "nnabla_exponential",
    "nnabla_linear_warmup",
    "nnabla_polynomial",
    "nnabla_solver_schedule",
    "nnabla_step",
    "one_cycle",
    "piecewise_constant",
    "piecewise_constant_schedule",
    "piecewise_interpolate",
    "piecewise_interpolate_schedule",
    "plot",
    "polynomial",
    "polynomial_schedule",
    "sgdr",
    "sgdr_schedule",
    "warmup",
    "warmup_constant",
    "warmup_constant_schedule",
    "warmup_cosine_decay",
    "warmup_cosine_decay_schedule",
    "warmup_exponential_decay",
    "warmup_exponential_decay_schedule",
]
