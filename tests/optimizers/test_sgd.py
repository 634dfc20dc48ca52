"""The sgd alias against Optax and against its hand-written chain."""

from __future__ import annotations

import jax.numpy as jnp
import optax
import pytest

import gradtx

from ..helpers import compare_transformations


def _schedule(t):
    return 0.05 * (1.0 + jnp.cos(jnp.pi * jnp.minimum(t, 100) / 100.0)) / 2.0


@pytest.mark.across_versions
@pytest.mark.parametrize(
    "kwargs",
    [{}, {"momentum": 0.9}, {"momentum": 0.9, "nesterov": True}],
    ids=["plain", "momentum", "nesterov"],
)
@pytest.mark.parametrize("lr", [0.05, _schedule], ids=["constant", "schedule"])
def test_sgd_matches_optax(use_jit, kwargs, lr):
    compare_transformations(gradtx.sgd(lr, **kwargs), optax.sgd(lr, **kwargs), jit=use_jit)


def test_sgd_invalid_arguments():
    with pytest.raises(ValueError, match="sgd: nesterov=True needs a momentum value"):
        gradtx.sgd(0.1, nesterov=True)
    with pytest.raises(
        ValueError, match=r"^sgd: scale_by_learning_rate: learning_rate must be >= 0, got -1$"
    ):
        gradtx.sgd(-1)
    # The alias's argument is named first; the primitive's message follows.
    with pytest.raises(
        ValueError,
        match=r"^sgd: momentum must be in \[0.0, 1.0\], got 2"
        r" \(from trace: decay must be in \[0.0, 1.0\], got 2\)$",
    ) as info:
        gradtx.sgd(0.1, momentum=2)
    assert type(info.value.__cause__) is gradtx.HyperparameterError
    assert str(info.value.__cause__) == "trace: decay must be in [0.0, 1.0], got 2"
