"""SM3 (`scale_by_sm3` and the `sm3` alias) against Optax 0.2.8 and, on rank-0 leaves where
Optax fails, against a NumPy transcription of the published rule; its state and validation."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gradtx

from ..helpers import compare_to_numpy, mixed_params
from ..optax_reference import with_modes
from .common import (
    assert_raises_with_message,
    assert_signature_is_optaxs,
    check_matches_optax,
    invalid_ids,
    without_scalars,
)

# (id, ours, Optax's, params or None for the mixed default)
MATCHES_OPTAX = [
    (
        "scale_by_sm3",
        lambda: gradtx.scale_by_sm3(),
        lambda: optax.scale_by_sm3(),
        without_scalars(mixed_params()),
    ),
    (
        "scale_by_sm3_decayed",
        lambda: gradtx.scale_by_sm3(0.5, 0.9, eps=1e-6),
        lambda: optax.scale_by_sm3(0.5, 0.9, eps=1e-6),
        without_scalars(mixed_params()),
    ),
    (
        "sm3",
        lambda: gradtx.sm3(0.05, momentum=0.8),
        lambda: optax.sm3(0.05, momentum=0.8),
        without_scalars(mixed_params()),
    ),
]
# One configuration runs eagerly (the alias's eager run also runs its primitive eagerly); the
# others under jit.
_EAGER = {"sm3"}


@pytest.mark.across_versions
@pytest.mark.parametrize(
    ("name", "ours", "reference", "params", "jit"), with_modes(MATCHES_OPTAX, eager=_EAGER)
)
def test_matches_optax(name, ours, reference, params, jit):
    check_matches_optax(__name__, name, ours, reference, params, jit)


@pytest.mark.parametrize("name", ["sm3", "scale_by_sm3"])
def test_signature_is_optaxs(name):
    assert_signature_is_optaxs(name)


def make_sm3_reference(b1=0.9, b2=1.0, eps=1e-8):
    """SM3 with the per-axis slice cover (Anil et al. 2019, Optax's form) over float64 leaves;
    a rank-0 or rank-1 leaf keeps its full accumulator."""
    c = 1.0 if b2 == 1.0 else 1.0 - b2

    def make():
        state: dict = {}

        def ref(grads, params):
            del params
            if not state:
                state["acc"] = [[np.zeros(n) for n in g.shape] or [np.zeros(())] for g in grads]
                state["nu"] = [np.zeros_like(g) for g in grads]
            out = []
            for i, g in enumerate(grads):
                accs = state["acc"][i]
                if g.ndim < 2:
                    previous = accs[0]
                else:
                    previous = np.full(g.shape, np.inf)
                    for r, acc in enumerate(accs):
                        shape = [1] * g.ndim
                        shape[r] = g.shape[r]
                        previous = np.minimum(previous, acc.reshape(shape))
                a = c * g * g + b2 * previous
                scaled = np.where(a > 0, g / np.sqrt(a + eps), 0.0)
                state["nu"][i] = (1 - b1) * scaled + b1 * state["nu"][i]
                if g.ndim < 2:
                    state["acc"][i] = [a]
                else:
                    state["acc"][i] = [
                        a.max(axis=tuple(x for x in range(g.ndim) if x != r)) for r in range(g.ndim)
                    ]
                out.append(state["nu"][i])
            return out

        return ref

    return make


def test_scale_by_sm3_handles_rank_0_leaves_where_optax_fails():
    params = {"scalar": jnp.asarray(0.5), "matrix": jnp.ones((3, 2))}
    with pytest.raises(IndexError):
        optax.scale_by_sm3().update(params, optax.scale_by_sm3().init(params))
    # the mixed tree has a rank-0 leaf and a rank-3 one
    compare_to_numpy(gradtx.scale_by_sm3(0.5, 0.9), make_sm3_reference(0.5, 0.9), jit=True)


def test_scale_by_sm3_state_is_one_vector_per_axis_and_rejects_complex():
    state = gradtx.scale_by_sm3().init({"w": jnp.ones((4, 3, 2)), "s": jnp.ones(())})
    assert [a.shape for a in state.mu["w"]] == [(4,), (3,), (2,)]
    assert [a.shape for a in state.mu["s"]] == [()]
    with pytest.raises(ValueError, match="scale_by_sm3: complex parameters are not supported"):
        gradtx.scale_by_sm3().init({"w": jnp.ones(3, jnp.complex64)})


INVALID = [
    (lambda: gradtx.scale_by_sm3(eps=-1.0), "scale_by_sm3: eps must be >= 0, got -1.0"),
    (
        lambda: gradtx.sm3(0.1, momentum=2.0),
        "sm3: momentum must be in [0.0, 1.0], got 2.0 (from scale_by_sm3: b1 must be in",
    ),
]


@pytest.mark.parametrize(("build", "message"), INVALID, ids=invalid_ids(INVALID))
def test_invalid_hyperparameters_raise_at_construction(build, message):
    assert_raises_with_message(build, message)
