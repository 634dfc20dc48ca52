"""Solvers III, Optax algorithms: Adan, Fromage, SM3, Rprop, Polyak SGD, optimistic methods,
noisy SGD, Signum, distance over gradients, update-norm normalisation, `add_decayed_weights`
and `set_to_zero`, against Optax 0.2.8 (and NumPy transcriptions where Optax is wrong or fails).
"""

from __future__ import annotations

import inspect
import warnings

import jax.numpy as jnp
import optax
import pytest

import gradtx

from ..helpers import (
    kernel_mask,
    mixed_params,
)
from ..optax_reference import compare_to_optax, with_modes


def _decaying(peak: float):
    """A learning-rate schedule (the same function object is given to gradtx and to Optax)."""
    return lambda count: peak * 0.5 * (1.0 + jnp.cos(jnp.pi * jnp.minimum(count, 100) / 120))


LR = _decaying(0.05)


def _without_scalars(params):
    """`params` without its rank-0 leaf (Optax's SM3 and DoG fail or reshape on those)."""
    return {k: v for k, v in params.items() if k != "pair"} | {"pair": params["pair"].a}


def _optax_optimistic_adam(*args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # optax deprecates v1 in favour of v2
        return optax.optimistic_adam(*args, **kwargs)


# (id, ours, Optax's, params or None for the mixed default)
MATCHES_OPTAX = [
    ("scale_by_adan", lambda: gradtx.scale_by_adan(), lambda: optax.scale_by_adan(), None),
    (
        "scale_by_adan_custom",
        lambda: gradtx.scale_by_adan(0.9, 0.8, 0.95, eps=1e-6, eps_root=1e-8),
        lambda: optax.scale_by_adan(0.9, 0.8, 0.95, eps=1e-6, eps_root=1e-8),
        None,
    ),
    ("adan", lambda: gradtx.adan(0.01), lambda: optax.adan(0.01), None),
    (
        "adan_schedule_decay_mask",
        lambda: gradtx.adan(LR, weight_decay=0.1, mask=kernel_mask(mixed_params())),
        lambda: optax.adan(LR, weight_decay=0.1, mask=kernel_mask(mixed_params())),
        None,
    ),
    ("fromage", lambda: gradtx.fromage(0.01), lambda: optax.fromage(0.01), None),
    ("fromage_schedule", lambda: gradtx.fromage(LR), lambda: optax.fromage(LR), None),
    (
        "scale_by_sm3",
        lambda: gradtx.scale_by_sm3(),
        lambda: optax.scale_by_sm3(),
        _without_scalars(mixed_params()),
    ),
    (
        "scale_by_sm3_decayed",
        lambda: gradtx.scale_by_sm3(0.5, 0.9, eps=1e-6),
        lambda: optax.scale_by_sm3(0.5, 0.9, eps=1e-6),
        _without_scalars(mixed_params()),
    ),
    (
        "sm3",
        lambda: gradtx.sm3(0.05, momentum=0.8),
        lambda: optax.sm3(0.05, momentum=0.8),
        _without_scalars(mixed_params()),
    ),
    (
        "optimistic_gradient_descent_schedule",
        lambda: gradtx.optimistic_gradient_descent(LR, alpha=0.5, beta=0.8),
        lambda: optax.optimistic_gradient_descent(LR, alpha=0.5, beta=0.8),
        None,
    ),
    (
        "optimistic_adam",
        lambda: gradtx.optimistic_adam(0.01, 0.5),
        lambda: _optax_optimistic_adam(0.01, 0.5),
        None,
    ),
    (
        "optimistic_adam_defaults_plain",
        lambda: gradtx.optimistic_adam(0.02, b1=0.8, eps_root=1e-8, nesterov=False),
        lambda: _optax_optimistic_adam(0.02, b1=0.8, eps_root=1e-8, nesterov=False),
        None,
    ),
    (
        "optimistic_adam_v2_schedule",
        lambda: gradtx.optimistic_adam_v2(LR, alpha=0.3, beta=2.0, b2=0.99),
        lambda: optax.optimistic_adam_v2(LR, alpha=0.3, beta=2.0, b2=0.99),
        None,
    ),
    (
        "noisy_sgd_schedule",
        lambda: gradtx.noisy_sgd(LR, eta=0.1, key=3),
        lambda: optax.noisy_sgd(LR, eta=0.1, key=3),
        None,
    ),
    ("signum_schedule", lambda: gradtx.signum(LR), lambda: optax.signum(LR), None),
    (
        "signum_bf16_accumulator",
        lambda: gradtx.signum(0.1, beta=0.5, accumulator_dtype=jnp.bfloat16),
        lambda: optax.signum(0.1, beta=0.5, accumulator_dtype=jnp.bfloat16),
        None,
    ),
    (
        "scale_by_distance_over_gradients",
        lambda: gradtx.scale_by_distance_over_gradients(global_scale=-1.0),
        lambda: optax.scale_by_distance_over_gradients(global_scale=-1.0),
        _without_scalars(mixed_params()),
    ),
    (
        "scale_by_distance_over_gradients_custom",
        lambda: gradtx.scale_by_distance_over_gradients(1e-4, eps=1e-6, global_scale=-0.5),
        lambda: optax.scale_by_distance_over_gradients(1e-4, eps=1e-6, global_scale=-0.5),
        _without_scalars(mixed_params()),
    ),
    (
        "normalize_by_update_norm",
        lambda: gradtx.normalize_by_update_norm(-0.1),
        lambda: optax.normalize_by_update_norm(-0.1),
        None,
    ),
    (
        "normalize_by_update_norm_eps",
        lambda: gradtx.normalize_by_update_norm(2.0, eps=0.5),
        lambda: optax.normalize_by_update_norm(2.0, eps=0.5),
        None,
    ),
    (
        "add_decayed_weights_schedule_mask",
        lambda: gradtx.add_decayed_weights(LR, kernel_mask(mixed_params())),
        lambda: optax.add_decayed_weights(LR, kernel_mask(mixed_params())),
        None,
    ),
    (
        "add_decayed_weights",
        lambda: gradtx.add_decayed_weights(0.1),
        lambda: optax.add_decayed_weights(0.1),
        None,
    ),
    ("set_to_zero", lambda: gradtx.set_to_zero(), lambda: optax.set_to_zero(), None),
]
# One configuration of each public name runs eagerly (an alias's eager run also runs its
# primitive eagerly); the others under jit.
_EAGER = {
    "adan_schedule_decay_mask",
    "fromage_schedule",
    "sm3",
    "optimistic_gradient_descent_schedule",
    "optimistic_adam",
    "optimistic_adam_v2_schedule",
    "noisy_sgd_schedule",
    "signum_schedule",
    "scale_by_distance_over_gradients",
    "normalize_by_update_norm",
    "add_decayed_weights_schedule_mask",
    "set_to_zero",
}


# A schedule evaluated eagerly (its cos) rounds differently from the same schedule jitted, and
# where an update nearly cancels (Fromage's step against its shrinkage; a gradient against
# its decay) Optax's own eager and jitted runs differ by up to 1.9x the tolerance. There, our
# eager run is compared with Optax's eager run (and our jitted run with Optax's jitted one).
_EAGER_REFERENCE = {"fromage_schedule", "add_decayed_weights_schedule_mask"}


@pytest.mark.parametrize(
    ("name", "ours", "reference", "params", "jit"), with_modes(MATCHES_OPTAX, eager=_EAGER)
)
def test_matches_optax(name, ours, reference, params, jit):
    key = f"{__name__}:{name}" if params is None else None
    reference_jit = jit or name not in _EAGER_REFERENCE
    compare_to_optax(
        ours(), reference(), jit=jit, params=params, reference_key=key, reference_jit=reference_jit
    )


OPTAX_NAMES = [
    "adan",
    "scale_by_adan",
    "fromage",
    "sm3",
    "scale_by_sm3",
    "rprop",
    "scale_by_rprop",
    "polyak_sgd",
    "scale_by_polyak",
    "optimistic_gradient_descent",
    "optimistic_adam",
    "optimistic_adam_v2",
    "scale_by_optimistic_gradient",
    "noisy_sgd",
    "signum",
    "scale_by_distance_over_gradients",
    "normalize_by_update_norm",
    "add_decayed_weights",
    "set_to_zero",
]


@pytest.mark.parametrize("name", OPTAX_NAMES)
def test_signature_is_optaxs(name):
    """Argument names, order, kinds and defaults are Optax 0.2.8's."""

    def describe(fn):
        return [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()]

    assert describe(getattr(gradtx, name)) == describe(getattr(optax, name))
