"""The fixed set of workloads: optimizers (gradtx and Optax side by side) and parameter trees.

Both libraries get the same hyperparameters, the same trees, the same dtypes and the same step
function (`jax.jit` of `update` + `apply_updates`, with or without donated params and state), so a
ratio measures the libraries' update rules and nothing else.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

TOTAL = 16_000_000  # float32 parameters in every full-size tree


@dataclass(frozen=True)
class TreeSpec:
    """`count` leaves of `shape` (float32), named `layer_0000/w` ..."""

    name: str
    count: int
    shape: tuple[int, ...]

    @property
    def size(self) -> int:
        return self.count * int(np.prod(self.shape))

    def params(self, seed: int = 0) -> dict:
        rng = np.random.default_rng(seed)
        return {
            f"layer_{i:04d}": {"w": jnp.asarray(rng.standard_normal(self.shape, np.float32))}
            for i in range(self.count)
        }

    def grads(self, seed: int = 1) -> dict:
        rng = np.random.default_rng(seed)
        return {
            f"layer_{i:04d}": {"w": jnp.asarray(1e-2 * rng.standard_normal(self.shape, np.float32))}
            for i in range(self.count)
        }


# 2-D leaves, so that adafactor factors the large ones (both axes >= 128) as in a real model.
FULL_TREES = [
    TreeSpec("1x16M", 1, (4000, 4000)),
    TreeSpec("200x80k", 200, (250, 320)),
    TreeSpec("2000x8k", 2000, (80, 100)),
]
# --quick: the same three shapes of tree, about 1000x smaller (seconds, for tests and smoke runs).
QUICK_TREES = [
    TreeSpec("1x16M", 1, (160, 100)),
    TreeSpec("200x80k", 20, (20, 40)),
    TreeSpec("2000x8k", 50, (16, 20)),
]


@dataclass(frozen=True)
class Workload:
    """One optimizer in both libraries.

    `make(lib)` returns the transformation for "gradtx" or "optax"; `calls` is how many update
    calls one timed block makes (4 for gradient accumulation over 4 micro-steps, so that the
    block holds exactly one inner step); times are reported per call.
    """

    name: str
    make: Callable[[str], Any]
    calls: int = 1
    description: str = ""
    baseline: str | None = None  # a workload whose gradtx step is timed in the same rounds


def _adam(lib: str) -> Any:
    if lib == "gradtx":
        import gradtx

        return gradtx.adam(1e-3)
    import optax

    return optax.adam(1e-3)


def _adamw_clip_cosine(lib: str) -> Any:
    if lib == "gradtx":
        import gradtx

        lr = gradtx.warmup_cosine_decay_schedule(0.0, 1e-3, 100, 10_000, 1e-5)
        return gradtx.chain(gradtx.clip_by_global_norm(1.0), gradtx.adamw(lr, weight_decay=1e-4))
    import optax

    lr = optax.warmup_cosine_decay_schedule(0.0, 1e-3, 100, 10_000, 1e-5)
    return optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(lr, weight_decay=1e-4))


def _lion(lib: str) -> Any:
    if lib == "gradtx":
        import gradtx

        return gradtx.lion(1e-4, weight_decay=1e-3)
    import optax

    return optax.lion(1e-4, weight_decay=1e-3)


def _adafactor(lib: str) -> Any:
    if lib == "gradtx":
        import gradtx

        return gradtx.adafactor(1e-3)
    import optax

    return optax.adafactor(1e-3)


def _accumulate(lib: str) -> Any:
    if lib == "gradtx":
        import gradtx

        return gradtx.accumulate_k_steps(gradtx.adam(1e-3), 4)
    import optax

    return optax.MultiSteps(optax.adam(1e-3), 4).gradient_transformation()


def _adam_bf16(lib: str) -> Any:
    # Optax's adam has only mu_dtype; its nu stays float32. gradtx sets both moments to bf16.
    if lib == "gradtx":
        import gradtx

        return gradtx.adam(1e-3, mu_dtype=jnp.bfloat16, nu_dtype=jnp.bfloat16)
    import optax

    return optax.adam(1e-3, mu_dtype=jnp.bfloat16)


WORKLOADS = [
    Workload("adam", _adam, description="adam(1e-3)"),
    Workload(
        "adamw_clip_cosine",
        _adamw_clip_cosine,
        description="clip_by_global_norm(1) + adamw(warm-up cosine, wd=1e-4)",
    ),
    Workload("lion", _lion, description="lion(1e-4, wd=1e-3)"),
    Workload("adafactor", _adafactor, description="adafactor(1e-3)"),
    Workload(
        "accumulate4_adam",
        _accumulate,
        calls=4,
        description="accumulate_k_steps(adam, 4) / optax.MultiSteps(adam, 4); time per micro-step",
        baseline="adam",
    ),
    Workload(
        "adam_bf16",
        _adam_bf16,
        description="adam with bf16 moments (Optax: mu only, it has no nu_dtype)",
        baseline="adam",
    ),
]
WORKLOAD_NAMES = [w.name for w in WORKLOADS]
BY_NAME = {w.name: w for w in WORKLOADS}


def apply_fn(lib: str) -> Callable[[Any, Any], Any]:
    if lib == "gradtx":
        import gradtx

        return gradtx.apply_updates
    import optax

    return optax.apply_updates


def step_fn(tx: Any, lib: str) -> Callable[[Any, Any, Any], tuple[Any, Any]]:
    """`(params, state, grads) -> (params, state)`: one update and its application."""
    apply = apply_fn(lib)

    def step(params, state, grads):
        updates, state = tx.update(grads, state, params)
        return apply(params, updates), state

    return step


def state_bytes(state: Any) -> int:
    return int(
        sum(np.dtype(x.dtype).itemsize * int(np.prod(x.shape)) for x in jax.tree.leaves(state))
    )
