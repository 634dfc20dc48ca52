"""per_example_global_norm_clip / per_example_layer_norm_clip against Optax 0.2.8 (eager and
jit), the batch axis they need, and their argument errors."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gradtx

from ..helpers import assert_trees_close, mixed_params


def _per_example_grads(seed, batch=6):
    params = mixed_params(seed)
    rng = np.random.default_rng(seed + 10)
    return jax.tree.map(
        lambda x: jnp.asarray(
            rng.normal(size=(batch, *np.shape(x))) * rng.uniform(0.1, 3.0), x.dtype
        ),
        params,
    )


CLIPS = [0.0, 0.5, 2.0, 5.0, np.inf]


@pytest.mark.parametrize("use_jit", [False, True], ids=["eager", "jit"])
def test_per_example_global_norm_clip_matches_optax(use_jit):
    fn = (
        jax.jit(gradtx.per_example_global_norm_clip)
        if use_jit
        else gradtx.per_example_global_norm_clip
    )
    for seed in range(4):
        grads = _per_example_grads(seed)
        grads["dense"]["bias"] = grads["dense"]["bias"].at[2].set(0.0)
        for clip in CLIPS:
            total, count = fn(grads, clip)
            ref_total, ref_count = optax.per_example_global_norm_clip(grads, clip)
            assert_trees_close(total, ref_total, 1e-5, 1e-6, msg=f"clip {clip}")
            assert int(count) == int(ref_count)
    example = [jnp.array([[0, 0, 0], [0, 3, 4], [4, 0, 3], [3, 4, 0]])]
    total, count = gradtx.per_example_global_norm_clip(example, 1.25)
    np.testing.assert_allclose(total[0], [1.75, 1.75, 1.75], rtol=1e-6)
    assert int(count) == 3


@pytest.mark.parametrize("use_jit", [False, True], ids=["eager", "jit"])
@pytest.mark.parametrize("uniform", [True, False])
def test_per_example_layer_norm_clip_matches_optax(uniform, use_jit):
    fn = functools.partial(gradtx.per_example_layer_norm_clip, uniform=uniform)
    fn = jax.jit(fn) if use_jit else fn
    for seed in range(4):
        grads = _per_example_grads(seed)
        for clip in CLIPS:
            total, counts = fn(grads, clip)
            ref_total, ref_counts = optax.per_example_layer_norm_clip(grads, clip, uniform)
            assert_trees_close(total, ref_total, 1e-5, 1e-6, msg=f"clip {clip}")
            assert_trees_close(counts, ref_counts, 0, 0, msg=f"clip {clip}")


def test_per_example_clip_needs_a_batch_axis():
    with pytest.raises(ValueError, match="per_example_global_norm_clip: every array"):
        gradtx.per_example_global_norm_clip([jnp.ones((3, 2)), jnp.ones((4,))], 1.0)
    with pytest.raises(ValueError, match="per_example_layer_norm_clip: every array"):
        gradtx.per_example_layer_norm_clip({"a": jnp.ones(())}, 1.0)


# --------------------------------------------------------------------------------------------
# invalid arguments raise at construction, naming the function, the argument and the value
# --------------------------------------------------------------------------------------------

_batched = [jnp.ones((2, 3))]

BAD = [
    (
        "global_clip",
        lambda: gradtx.per_example_global_norm_clip(_batched, -1.0),
        ValueError,
        "per_example_global_norm_clip: l2_norm_clip must be >= 0, got -1.0",
    ),
    (
        "layer_clip",
        lambda: gradtx.per_example_layer_norm_clip(_batched, -2.0),
        ValueError,
        "per_example_layer_norm_clip: global_l2_norm_clip must be >= 0, got -2.0",
    ),
    (
        "layer_uniform",
        lambda: gradtx.per_example_layer_norm_clip(_batched, 1.0, uniform="no"),
        ValueError,
        "per_example_layer_norm_clip: uniform must be True or False, got 'no'",
    ),
]


@pytest.mark.parametrize(("name", "build", "error", "message"), BAD, ids=[b[0] for b in BAD])
def test_invalid_arguments_raise_with_name_and_value(name, build, error, message):
    with pytest.raises(error) as info:
        build()
    assert str(info.value).startswith(message), str(info.value)
