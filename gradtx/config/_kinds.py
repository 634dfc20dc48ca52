"""How each factory argument is given in a config: its kind, declared here.

A kind says what a config may hold for an argument and how it is normalized (`_schema.check_value`)
and built (`_build`): `learning_rate: {name: cosine_decay, ...}` is a schedule block because
`learning_rate` is declared `scalar_or_schedule`, `mask: "!**/bias"` a pattern because `mask` is
declared `mask`. An argument's kind is its name's kind in `ARGUMENT_KINDS`, unless the factory
declares another one in `OVERRIDES` (where a name means something else there: `decay` is a flag
of `returnn.amsgrad`). Which arguments a factory has is read from its signature; what they are
is never guessed from annotations. Every argument of every factory of the catalog
(`_catalog.SECTIONS`) has a declared kind, a test holds it: a new optimizer declares the kinds of
its new argument names here. Factories that users `register` take their names' kinds, their own
`kinds=`, or "any" (handed over unchecked).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from typing import Any

# kind -> what a config holds for it
KINDS: dict[str, str] = {
    "number": "a number (a string such as YAML's '1e-3' is read as a float)",
    "int": "an integer",
    "bool": "true or false",
    "str": "a string",
    "dtype": "a dtype name such as 'float32' or 'bfloat16'",
    "scalar_or_schedule": "a number or a schedule block {name: ..., ...}",
    "schedule": "a schedule block {name: ..., ...}",
    "schedule_list": "a list of schedule blocks",
    "optimizer": "an optimizer block {name: ..., ...}",
    "mask": "a glob pattern or a list of patterns (docs/patterns.md), or true / false",
    "int_list": "a list of integers",
    "mapping": "a mapping (integer strings as keys become integers)",
    "rules": "a mapping {pattern: multiplier}",
    "any": "anything, handed to the factory unchecked",
}

# kind -> the argument names of that kind, wherever they appear
_BY_KIND: dict[str, tuple[str, ...]] = {
    "number": (
        "K",
        "adam_b1",
        "adam_b2",
        "adam_eps_root",
        "adam_weight_decay",
        "alpha",
        "b1",
        "b2",
        "b3",
        "balance_probability",
        "beta",
        "beta1",
        "beta2",
        "beta3",
        "clip_threshold",
        "clipping_threshold",
        "coefficient",
        "consistent_rms",
        "decay",
        "decay_offset",
        "decay_rate",
        "decrease_factor",
        "div_factor",
        "end_value",
        "eps",
        "eps_root",
        "estim_lr0",
        "estim_lr_coef",
        "eta",
        "eta_minus",
        "eta_plus",
        "exponent",
        "f_min",
        "f_star",
        "final_div_factor",
        "final_lr",
        "gamma",
        "gamma_l",
        "gamma_u",
        "graft_b2",
        "init_estim_sq_dist",
        "init_lr",
        "init_value",
        "initial_accumulator_value",
        "initial_learning_rate",
        "initial_scale",
        "k",
        "l2_norm_clip",
        "lower_bound",
        "lr_decay",
        "matrix_eps",
        "max_learning_rate",
        "max_prob",
        "max_size_triangular",
        "max_skew_triangular",
        "max_step_size",
        "min_norm",
        "min_prob",
        "min_step_size",
        "mu",
        "noise_multiplier",
        "pct_final",
        "pct_start",
        "peak_decay",
        "peak_value",
        "power",
        "preconditioner_init_scale",
        "preconditioner_lr",
        "rank_fraction",
        "rho",
        "s_init",
        "scale",
        "shampoo_beta",
        "target_rms",
        "threshold",
        "trust_coefficient",
        "value",
        "weight_lr_power",
    ),
    "int": (
        "block_size",
        "comm_size",
        "cycle_mult",
        "cycle_steps",
        "decay_steps",
        "flat_start",
        "iter_interval",
        "key",
        "lr_decay_interval",
        "max_iter",
        "max_precond_dim",
        "memory_size",
        "min_dim_size_to_factor",
        "min_ndim_triangular",
        "n_heads",
        "n_kv_heads",
        "ns_steps",
        "num_betas",
        "num_cycles",
        "output_axis",
        "precondition_frequency",
        "print_win_rate_every_n_steps",
        "rank",
        "rank_multiple_of",
        "seed",
        "start_preconditioning_step",
        "step_size_down",
        "step_size_up",
        "sync_period",
        "transition_begin",
        "transition_steps",
        "update_interval",
        "update_proj_gap",
        "warmup_iter",
        "warmup_steps",
    ),
    "bool": (
        "adapt_lower_bound",
        "adaptive",
        "amsgrad",
        "bias_correction",
        "bias_correction_mu",
        "bias_correction_nu",
        "centered",
        "clamp",
        "constraint",
        "correct_bias",
        "cpp_trainer",
        "eps_in_sqrt",
        "factored",
        "fixed_decay",
        "momentum_into_preconditioner_update",
        "multiply_by_parameter_scale",
        "nesterov",
        "normalize_gradient",
        "opaque_mode",
        "optimize_1d",
        "precondition_1d",
        "rectify",
        "reset_state",
        "safeguard_warmup",
        "scale_init_precond",
        "staircase",
        "use_clipping",
        "verbose",
        "weight_decouple",
    ),
    "str": (
        "anneal",
        "batch_axis_name",
        "graft_type",
        "interpolate_type",
        "lr_scheduler_type",
        "lr_warmup_scheduler_type",
        "mars_type",
        "memory_save_mode",
        "mode",
        "preconditioning",
        "proj",
        "scale_type",
        "step_size",
        "update_scale",
        "variant",
    ),
    "dtype": (
        "accumulator_dtype",
        "dtype_momentum",
        "mu_dtype",
        "nu_dtype",
        "preconditioner_dtype",
        "state_dtype",
    ),
    "scalar_or_schedule": (
        "adam_learning_rate",
        "learning_rate",
        "momentum",
        "optimism",
        "preconditioner_update_probability",
        "scaling",
        "weight_decay",
        "weight_decay_rate",
    ),
    "schedule": ("clip_value_fn", "schedule"),
    "schedule_list": ("schedules",),
    "optimizer": (
        "adv_optimizer",
        "base_optimizer",
        "hessian_diagonal_fn",
        "linesearch",
        "optimizer",
    ),
    "mask": ("mask", "trust_ratio_mask", "weight_decay_mask"),
    "int_list": ("boundaries", "iter_steps", "milestones"),
    "mapping": (
        "boundaries_and_scales",
        "cosine_scheduler_param",
        "exponential_scheduler_param",
        "linear_warmup_scheduler_param",
        "patterns",
        "polynomial_scheduler_param",
        "step_scheduler_param",
    ),
    # tuples, PRNG keys and callables: what a config can hold of them is the factory's to check
    "any": (
        "batch_axes",
        "betas",
        "cosine_kwargs",
        "gluon_l0",
        "gluon_l1",
        "init_step",
        "muon_weight_dimension_numbers",
        "norm",
        "ns_coeffs",
        "radius",
        "random_seed",
        "weight_dimension_numbers",
    ),
}
ARGUMENT_KINDS: dict[str, str] = {name: kind for kind, names in _BY_KIND.items() for name in names}

# catalog kind -> factory (its catalog name, prefix included) -> {argument: kind}, where the
# name's kind does not hold for that factory
OVERRIDES: dict[str, dict[str, dict[str, str]]] = {
    "optimizer": {
        "adafactor": {"momentum": "number"},
        "sm3": {"momentum": "number"},
        "optimistic_gradient_descent": {
            "alpha": "scalar_or_schedule",
            "beta": "scalar_or_schedule",
        },
        "returnn.amsgrad": {"decay": "bool"},
        "contrib.ademamix": {"alpha": "scalar_or_schedule", "b3": "scalar_or_schedule"},
        "contrib.simplified_ademamix": {"alpha": "scalar_or_schedule"},
        "contrib.madgrad": {"momentum": "number"},
        "contrib.mars": {"adam_weight_decay": "scalar_or_schedule"},
        "contrib.cautious": {"tx": "optimizer", "offset": "number", "descent": "bool"},
        "contrib.cautious_adamw": {"offset": "number"},
        # decoupled decay that these take as a number only
        **{
            f"contrib.{name}": {"weight_decay": "number"}
            for name in (
                "cocob",
                "dadapt_adamw",
                "dog",
                "dowg",
                "mechanize",
                "momo",
                "momo_adam",
                "muon",
                "normuon",
                "prodigy",
                "schedule_free_adamw",
                "schedule_free_sgd",
                "scion",
            )
        },
    },
    "schedule": {},
}
# catalog kind -> factory -> arguments that take null although their default is not None (an
# argument whose default is None always does)
NULLABLE: dict[str, dict[str, tuple[str, ...]]] = {
    "optimizer": {
        "adafactor": ("clipping_threshold",),
        "lbfgs": ("linesearch",),
        "sm3": ("momentum",),
        "contrib.sophia": ("clip_threshold",),
    },
    "schedule": {},
}


@functools.cache
def signature(factory: Callable[..., Any]) -> inspect.Signature:
    return inspect.signature(factory)


def params_of(factory: Callable[..., Any]) -> tuple[dict[str, inspect.Parameter], bool]:
    """The factory's named parameters, and whether it takes `**kwargs`."""
    params, var_kw = {}, False
    for p in signature(factory).parameters.values():
        if p.kind is inspect.Parameter.VAR_KEYWORD:
            var_kw = True
        elif p.kind is not inspect.Parameter.VAR_POSITIONAL:
            params[p.name] = p
    return params, var_kw


def _params(factory: Callable[..., Any]) -> dict[str, inspect.Parameter]:
    try:
        return params_of(factory)[0]
    except (TypeError, ValueError):  # no signature to read: every argument is "any"
        return {}


def undeclared(kind: str, name: str, factory: Callable[..., Any]) -> list[str]:
    """The arguments of the catalog factory `name` that have no declared kind."""
    own = OVERRIDES.get(kind, {}).get(name, {})
    return [a for a in _params(factory) if a not in own and a not in ARGUMENT_KINDS]


def declared(
    kind: str, name: str, factory: Callable[..., Any], given: Mapping[str, str] | None = None
) -> tuple[dict[str, str], frozenset[str]]:
    """`({argument: kind}, nullable arguments)` of a factory registered as `name`.

    The kinds are `given` (a user's `register(..., kinds=...)`), else the factory's overrides,
    else the argument name's kind, else "any".
    """
    own = {**OVERRIDES.get(kind, {}).get(name, {}), **(given or {})}
    params = _params(factory)
    kinds = {a: own.get(a) or ARGUMENT_KINDS.get(a, "any") for a in params}
    extra = NULLABLE.get(kind, {}).get(name, ())
    nullable = frozenset(a for a, p in params.items() if p.default is None or a in extra)
    return kinds, nullable


__all__ = [
    "ARGUMENT_KINDS",
    "KINDS",
    "NULLABLE",
    "OVERRIDES",
    "declared",
    "params_of",
    "signature",
    "undeclared",
]
