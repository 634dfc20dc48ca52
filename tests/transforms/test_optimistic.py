"""Optimistic methods (`scale_by_optimistic_gradient`, `optimistic_gradient_descent`,
`optimistic_adam`, `optimistic_adam_v2`) against Optax 0.2.8, and their validation."""

from __future__ import annotations

import re
import warnings

import numpy as np
import optax
import pytest

import gradtx

from ..optax_reference import with_modes
from .common import LR, check_matches_optax, describe, invalid_ids


def _optax_optimistic_adam(*args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # optax deprecates v1 in favour of v2
        return optax.optimistic_adam(*args, **kwargs)


# (id, ours, Optax's, params or None for the mixed default)
MATCHES_OPTAX = [
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
]
# One configuration of each public name runs eagerly; the others under jit.
_EAGER = {
    "optimistic_gradient_descent_schedule",
    "optimistic_adam",
    "optimistic_adam_v2_schedule",
}


@pytest.mark.across_versions
@pytest.mark.parametrize(
    ("name", "ours", "reference", "params", "jit"), with_modes(MATCHES_OPTAX, eager=_EAGER)
)
def test_matches_optax(name, ours, reference, params, jit):
    check_matches_optax(__name__, name, ours, reference, params, jit)


@pytest.mark.parametrize(
    "name",
    [
        "optimistic_gradient_descent",
        "optimistic_adam",
        "optimistic_adam_v2",
        "scale_by_optimistic_gradient",
    ],
)
def test_signature_is_optaxs(name):
    """Argument names, order, kinds and defaults are Optax 0.2.8's."""
    assert describe(getattr(gradtx, name)) == describe(getattr(optax, name))


INVALID = [
    (
        lambda: gradtx.optimistic_gradient_descent(-0.1),
        "optimistic_gradient_descent: scale_by_learning_rate: learning_rate must be >= 0, got -0.1",
    ),
    (lambda: gradtx.optimistic_adam(-0.1), "optimistic_adam: learning_rate must be >= 0, got -0.1"),
    (
        lambda: gradtx.optimistic_adam_v2(0.1, b1=1.0),
        "optimistic_adam_v2: scale_by_adam: b1 must be in [0.0, 1.0), got 1.0",
    ),
    (
        lambda: gradtx.scale_by_optimistic_gradient(beta=np.ones(2)),
        "scale_by_optimistic_gradient: beta must be a scalar (or a schedule returning one), got an "
        "array of shape (2,)",
    ),
]


@pytest.mark.parametrize(("build", "message"), INVALID, ids=invalid_ids(INVALID))
def test_invalid_hyperparameters_raise_at_construction(build, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        build()
